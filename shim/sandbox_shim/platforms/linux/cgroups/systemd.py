"""The systemd cgroup driver (runc ``--systemd-cgroup``): a transient scope made through systemd's D-Bus API.

``cgroupsPath`` is ``slice:prefix:name`` (runc's form; containerd and kubelet with
``SystemdCgroup = true`` pass e.g. ``kubepods-besteffort-pod1.slice:cri-containerd:ID``).  The unit is
``prefix-name.scope`` in ``slice`` (default ``system.slice``); a slice name nests by its dashes,
``a-b.slice`` under ``a.slice`` (systemd.slice(5); runc ``ExpandSlice``).  The scope is started with
StartTransientUnit (org.freedesktop.systemd1(5)) holding a placeholder process (systemd refuses an empty
scope), ``Delegate=yes`` and accounting on; limits are set as unit properties as runc sets them
(MemoryMax, MemoryLow, MemorySwapMax, TasksMax, CPUWeight, CPUQuotaPerSecUSec, CPUQuotaPeriodUSec,
AllowedCPUs, AllowedMemoryNodes) and then written into the scope's files by the v2 manager, so every
field the v2 manager applies holds here too.  bwrap joins the scope's cgroup before exec; ``placed()``
then ends the placeholder.  Delete stops the unit (StopUnit) after the cgroup is killed.

Implemented on the unified (cgroup v2) hierarchy only.  D-Bus goes through jeepney, imported only here:
the system bus, or systemd's private socket (/run/systemd/private) when no bus daemon runs.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time

from ....errors import BundleInvalid, BundleProblem, LaunchFailed
from .limits import Limits
from .v2 import V2Manager

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

SYSTEMD = "org.freedesktop.systemd1"
MANAGER_PATH = "/org/freedesktop/systemd1"
MANAGER_IFACE = "org.freedesktop.systemd1.Manager"
_NAME = re.compile(r"^[A-Za-z0-9:_.\\-]+$")


def parse_path(cgroups_path: str, sandbox_id: str) -> tuple[str, str]:
    """``slice:prefix:name`` → (slice unit, scope unit).  Empty path → ``system.slice``,
    ``sandbox-shim-<id>.scope``.

    Raises:
        BundleInvalid: at ``/linux/cgroupsPath``: not three colon-separated parts, an empty name, a name
            systemd would refuse, or a ``.slice`` name.
    """
    if not cgroups_path:
        return "system.slice", f"sandbox-shim-{sandbox_id}.scope"
    parts = cgroups_path.split(":")
    if len(parts) != 3:
        raise _invalid(
            f'{cgroups_path!r} is not "slice:prefix:name" (needed with --systemd-cgroup)',
            'write it as e.g. "system.slice:myprefix:ID", or drop --systemd-cgroup',
        )
    slc, prefix, name = parts
    slc = slc or "system.slice"
    if not name:  # "prefix-.scope" would be one unit for every sandbox given that path
        raise _invalid(
            f"{cgroups_path!r} has an empty name part", 'give each container its own "slice:prefix:NAME"'
        )
    if name.endswith(".slice"):
        raise _invalid("a container cannot be a slice unit here", "name a scope (no .slice suffix)")
    unit = f"{prefix}-{name}.scope" if prefix else f"{name}.scope"
    for what in (slc, unit):
        if not _NAME.match(what) or len(what) > 255:
            raise _invalid(f"{what!r} is not a valid systemd unit name", "use letters, digits, : _ . -")
    if unit in _RESERVED:
        raise _invalid(f"{unit!r} is systemd's own unit", "name another scope")
    for part in [*expand_slice(slc).strip("/").split("/"), unit]:
        if part and _escaped(part):
            raise _invalid(
                f"systemd would store {part!r} under another directory name (it escapes names that start "
                "with _ or . or name a controller file, cg_escape)",
                "pick a name that starts with a letter or digit and is no controller name",
            )
    return slc, unit


#: units systemd itself runs: a container scope may not take their names
_RESERVED = frozenset({"init.scope", "-.scope"})
#: cgroup v2 controllers (and systemd's BPF pseudo-controllers) whose name + "." systemd escapes
_CONTROLLERS = (
    "cpu", "cpuacct", "cpuset", "io", "blkio", "memory", "devices", "pids", "hugetlb", "rdma", "misc",
    "bpf-firewall", "bpf-devices", "bpf-foreign", "bpf-socket-bind", "bpf-restrict-network-interfaces",
)  # fmt: skip


def _escaped(name: str) -> bool:
    """True when systemd's cg_escape() would prefix ``name`` with ``_`` in the cgroup tree (so the
    scope's directory is not the path this runtime computes): a leading ``_`` or ``.``, the kernel's
    own file names, ``cgroup.*``, or ``CONTROLLER.*`` (systemd src/basic/cgroup-util.c)."""
    if name[:1] in ("_", ".") or name in ("notify_on_release", "release_agent", "tasks"):
        return True
    if name.startswith("cgroup."):
        return True
    return any(name.startswith(c + ".") for c in _CONTROLLERS)


def _invalid(why: str, fix: str) -> BundleInvalid:
    """A ``cgroupsPath`` the systemd driver cannot name a unit after: a bundle problem (exit status 3)."""
    return BundleInvalid(
        [BundleProblem("/linux/cgroupsPath", why, "runc systemd cgroupsPath slice:prefix:name", fix)]
    )


def expand_slice(slc: str) -> str:
    """The cgroup path of slice unit ``slc``: ``a-b-c.slice`` → ``/a.slice/a-b.slice/a-b-c.slice``;
    ``-.slice`` (the root slice) → ``""``.

    Raises:
        BundleInvalid: not a ``.slice``, or an empty dash-separated part (leading, trailing or double dash).
    """
    if not slc.endswith(".slice") or "/" in slc:
        raise _invalid(f"{slc!r} is not a slice unit name", 'end it in ".slice"')
    base = slc[: -len(".slice")]
    if base == "-":
        return ""
    words = base.split("-")
    if not all(words):
        raise _invalid(f"{slc!r}: a slice name has no empty part between dashes", "drop the extra dash")
    return "".join("/" + "-".join(words[: i + 1]) + ".slice" for i in range(len(words)))


def cpuset_bits(spec: str) -> bytes:
    """A cpuset list ("0-3,7") as the little-endian bitmask systemd's AllowedCPUs takes (``ay``)."""
    mask = 0
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        for n in range(int(lo), int(hi or lo) + 1):
            mask |= 1 << n
    return mask.to_bytes(max(1, (mask.bit_length() + 7) // 8), "little")


def quota_per_sec(quota: int, period: int) -> int:
    """CPUQuotaPerSecUSec from cpu quota/period (µs), rounded up to systemd's 10 ms steps, as runc does."""
    per_sec = quota * 1_000_000 // period
    return per_sec if per_sec % 10000 == 0 else (per_sec // 10000 + 1) * 10000


def unit_properties(limits: Limits) -> list[tuple[str, tuple[str, Any]]]:
    """The unit properties (name, (D-Bus signature, value)) for ``limits``, as runc sets them."""
    from .limits import blkio_to_io_weight, shares_to_weight

    props: list[tuple[str, tuple[str, Any]]] = []
    if limits.memory_limit:
        props.append(("MemoryMax", ("t", limits.memory_limit)))
        if limits.memory_swap:
            props.append(("MemorySwapMax", ("t", limits.memory_swap - limits.memory_limit)))
    if limits.memory_reservation:
        props.append(("MemoryLow", ("t", limits.memory_reservation)))
    if limits.pids_limit:
        props.append(("TasksMax", ("t", limits.pids_limit)))
    if limits.cpu_shares:
        props.append(("CPUWeight", ("t", shares_to_weight(limits.cpu_shares))))
    if limits.cpu_period:
        props.append(("CPUQuotaPeriodUSec", ("t", limits.cpu_period)))
    if limits.cpu_quota:
        per_sec = quota_per_sec(limits.cpu_quota, limits.cpu_period or 100000)
        props.append(("CPUQuotaPerSecUSec", ("t", per_sec)))
    if limits.cpu_cpus:
        props.append(("AllowedCPUs", ("ay", cpuset_bits(limits.cpu_cpus))))
    if limits.cpu_mems:
        props.append(("AllowedMemoryNodes", ("ay", cpuset_bits(limits.cpu_mems))))
    if limits.cpu_idle == 1:  # systemd >= 252: CPUWeight=idle is weight 0 (runc sets it so)
        props.append(("CPUWeight", ("t", 0)))
    if limits.blkio_weight:  # systemd rewrites io.weight from IOWeight whenever it realizes the unit
        props.append(("IOWeight", ("t", blkio_to_io_weight(limits.blkio_weight))))
    for key, value in (limits.unified or {}).items():  # runc: unifiedResToSystemdProps
        text = str(value).strip()
        prop = _UNIFIED_PROPS.get(key)
        number = _unified_number(text)
        if prop is not None and number is not None:
            props.append((prop, ("t", number)))
        elif key == "cpu.max":  # "QUOTA PERIOD" or "max [PERIOD]"
            quota, _, period = text.partition(" ")
            per = int(period) if period.isdigit() else 100000
            props.append(("CPUQuotaPeriodUSec", ("t", per)))
            if quota == "max":
                props.append(("CPUQuotaPerSecUSec", ("t", (1 << 64) - 1)))
            elif quota.isdigit():
                props.append(("CPUQuotaPerSecUSec", ("t", quota_per_sec(int(quota), per))))
        elif key == "io.weight" and text.startswith("default ") and text[8:].strip().isdigit():
            props.append(("IOWeight", ("t", int(text[8:]))))
        elif key == "cpu.idle" and text == "1":  # systemd >= 252: CPUWeight=idle is weight 0
            props.append(("CPUWeight", ("t", 0)))
    return props


#: ``unified`` files systemd owns in a unit it realizes (it writes them from these properties, so a value
#: written only to the file would be undone at the next daemon-reload or property change)
_UNIFIED_PROPS = {
    "memory.high": "MemoryHigh",
    "memory.low": "MemoryLow",
    "memory.min": "MemoryMin",
    "memory.max": "MemoryMax",
    "memory.swap.max": "MemorySwapMax",
    "pids.max": "TasksMax",
    "cpu.weight": "CPUWeight",
}


def _unified_number(value: object) -> int | None:
    """A ``unified`` value as systemd's ``t`` property: ``max`` is infinity (2^64 - 1)."""
    text = str(value).strip()
    if text == "max":
        return (1 << 64) - 1
    return int(text) if text.isdigit() else None


def connect() -> Any:
    """A blocking jeepney connection to systemd: the system bus, else its private socket.

    Raises:
        LaunchFailed: jeepney is missing or neither socket answers.
    """
    try:
        from jeepney.io.blocking import DBusConnection, open_dbus_connection, prep_socket
        from jeepney.io.common import MessageFilters
    except ImportError as e:
        raise LaunchFailed("--systemd-cgroup needs the jeepney package", "pip install jeepney") from e
    errors = []
    try:
        return open_dbus_connection(bus="SYSTEM", auth_timeout=2.0)
    except Exception as e:  # noqa: BLE001 - any failure means: try the next socket
        errors.append(f"system bus: {e}")

    class Direct(DBusConnection):  # systemd's private socket is peer-to-peer: no bus, no Hello
        def __init__(self, sock: Any) -> None:
            super(DBusConnection, self).__init__(sock, False)
            self._filters = MessageFilters()
            self.unique_name = None

    try:
        return Direct(prep_socket("/run/systemd/private", False, timeout=2.0))
    except Exception as e:  # noqa: BLE001
        errors.append(f"/run/systemd/private: {e}")
    raise LaunchFailed(
        "cannot reach systemd over D-Bus (" + "; ".join(errors) + ")",
        "run systemd as PID 1 with its bus, or drop --systemd-cgroup",
    )


def call(
    conn: Any,
    method: str,
    signature: str = "",
    body: tuple[Any, ...] = (),
    path: str = MANAGER_PATH,
    iface: str = MANAGER_IFACE,
) -> tuple[Any, ...]:
    """One method call to systemd; the reply body.  Raises LaunchFailed with systemd's error text."""
    from jeepney import DBusAddress, MessageType, new_method_call

    msg = new_method_call(
        DBusAddress(path, bus_name=SYSTEMD, interface=iface), method, signature or None, body
    )
    try:
        reply = conn.send_and_get_reply(msg, timeout=10)
    except Exception as e:  # noqa: BLE001 - a timeout or a broken bus: systemd did not answer
        raise LaunchFailed(f"systemd {method}: no answer ({type(e).__name__}: {e})") from e
    if reply.header.message_type == MessageType.error:
        name = reply.header.fields.get(4, "error")  # HeaderFields.error_name
        text = reply.body[0] if reply.body else ""
        raise LaunchFailed(f"systemd {method}: {name}: {text}")
    return tuple(reply.body)


def unit_state(conn: Any, unit: str) -> str:
    """ActiveState of ``unit`` ("active", "failed", ...), or "gone" when systemd no longer has it."""
    try:
        state = unit_property(conn, unit, "org.freedesktop.systemd1.Unit", "ActiveState")
    except LaunchFailed:  # dropped between GetUnit and Get
        return "gone"
    return "gone" if state is None else str(state)


def unit_property(conn: Any, unit: str, iface: str, prop: str) -> Any:
    """Property ``prop`` of ``unit`` (its value), or None when systemd has no such unit."""
    try:
        (path,) = call(conn, "GetUnit", "s", (unit,))
    except LaunchFailed:
        return None
    (value,) = call(conn, "Get", "ss", (iface, prop), path=path, iface="org.freedesktop.DBus.Properties")
    return value[1]


def probe() -> tuple[bool, str]:
    """(usable, why not): systemd is PID 1 (/proc/1/comm, /run/systemd/system as sd_booted(3) checks), its
    D-Bus API answers (Manager.Version), and the host is cgroup v2 (the only layout implemented)."""
    try:
        with open("/proc/1/comm") as fh:
            comm = fh.read().strip()
    except OSError as e:
        return False, f"cannot read /proc/1/comm: {e.strerror}"
    if comm != "systemd" or not os.path.isdir("/run/systemd/system"):
        return False, f"systemd is not PID 1 on this host (PID 1 is {comm!r})"
    from .detect import detect

    if detect().version != 2:
        return False, "the systemd cgroup driver is implemented for cgroup v2 hosts only"
    try:
        conn = connect()
        try:
            call(conn, "Get", "ss", (MANAGER_IFACE, "Version"), iface="org.freedesktop.DBus.Properties")
        finally:
            conn.close()
    except LaunchFailed as e:
        return False, e.line() if hasattr(e, "line") else str(e)
    return True, ""


class SystemdManager(V2Manager):
    """A transient scope under systemd; files are handled by the v2 manager (``Delegate=yes``).

    Ownership: a unit is this sandbox's only when its Description carries ``token`` — a random value
    made before the scope is asked for and kept in the sandbox's record (``residue.planned``), so a
    unit of the same name that someone else started (before, or after a crash) is never killed or
    stopped by ``remove``."""

    systemd = True

    def __init__(
        self, mount: str, cgroups_path: str, sandbox_id: str = "", token: str = "", ino: int = 0
    ) -> None:
        self.slice, self.unit = parse_path(cgroups_path, sandbox_id)
        self.cgroups_path = cgroups_path
        self.token = token or os.urandom(16).hex()
        #: the scope directory's inode once made (recorded): a scope of the same name made later — by
        #: another sandbox or anyone, after systemd dropped ours when its last process exited — has
        #: another directory, and every file operation here then sees no cgroup at all (``dir``)
        self.ino = ino
        super().__init__(mount, expand_slice(self.slice) + "/" + self.unit)
        self._holder = 0

    @property  # type: ignore[override]
    def dir(self) -> str:
        """The scope's directory while it is the one this sandbox's scope made (by inode), else a path
        that does not exist (so reads find nothing and writes fail as for a removed cgroup)."""
        if self.ino:
            try:
                if os.stat(self._dir).st_ino == self.ino:
                    return self._dir
            except OSError:
                pass  # gone: the scope systemd dropped is not coming back under that inode
            return self._dir + ".not-this-sandbox"
        return self._dir

    @dir.setter
    def dir(self, value: str) -> None:
        self._dir = value

    def kill_all(self, signum: int = 9, exclude: set[int] | frozenset[int] = frozenset()) -> None:
        """``V2Manager.kill_all`` on this sandbox's scope only: by inode once recorded, else (a create
        that died before recording it) only when the unit carries this sandbox's token."""
        if not self.ino:
            conn = connect()
            try:
                if not self.ours(conn):
                    return
            finally:
                conn.close()
        super().kill_all(signum, exclude)

    @property
    def description(self) -> str:
        return f"sandbox-shim container {self.unit} {self.token}"

    def create(self, controllers: list[str]) -> list[str]:
        ok, why = probe()
        if not ok:
            raise LaunchFailed(f"--systemd-cgroup: {why}", "drop --systemd-cgroup (cgroupfs driver)")
        available = self.available()
        missing = [c for c in controllers if c not in available and c != "devices"]
        if missing:
            raise LaunchFailed(f"cgroup v2 controller(s) not available: {', '.join(missing)}")
        self._holder = _placeholder()
        props = [
            ("Description", ("s", self.description)),
            ("Slice", ("s", self.slice)),
            ("Delegate", ("b", True)),
            ("DefaultDependencies", ("b", False)),
            ("PIDs", ("au", [self._holder])),
            ("MemoryAccounting", ("b", True)),
            ("CPUAccounting", ("b", True)),
            ("IOAccounting", ("b", True)),
            ("TasksAccounting", ("b", True)),
        ]
        try:
            conn = connect()
            try:
                call(conn, "StartTransientUnit", "ssa(sv)a(sa(sv))", (self.unit, "fail", props, []))
                deadline = time.monotonic() + 10
                while (now := unit_state(conn, self.unit)) != "active":
                    if now == "failed" or time.monotonic() > deadline:
                        raise LaunchFailed(f"systemd did not start {self.unit} (state {now})")
                    time.sleep(0.01)
                where = unit_property(conn, self.unit, "org.freedesktop.systemd1.Scope", "ControlGroup")
            finally:
                conn.close()
            if where != self.path:
                raise LaunchFailed(
                    f"systemd placed {self.unit} at {where!r}, not {self.path}",
                    "is systemd using the unified cgroup hierarchy?",
                )
            self.ino = os.stat(self._dir).st_ino
        except BaseException:
            self.placed()
            raise
        return []  # systemd owns the directories: StopUnit removes them

    def apply(self, limits: Limits) -> None:
        """Set the unit properties systemd knows (so a daemon-reload keeps them), then the files.
        Raises LaunchFailed when the unit of that name is no longer this sandbox's scope (``dir``)."""
        if self.dir != self._dir:
            raise LaunchFailed(f"{self.unit} is no longer this sandbox's scope", "the sandbox has stopped")
        self.check(limits)
        props = unit_properties(limits)
        if props:
            conn = connect()
            try:
                if not self.ours(conn):  # a unit of that name now is someone else's: never changed
                    raise LaunchFailed(
                        f"{self.unit} is no longer this sandbox's scope", "the sandbox has stopped"
                    )
                call(conn, "SetUnitProperties", "sba(sv)", (self.unit, True, props))
            finally:
                conn.close()
        super().apply(limits)

    def placed(self) -> None:
        """bwrap is in the scope: end the placeholder that kept it non-empty."""
        if self._holder:
            try:
                os.kill(self._holder, signal.SIGKILL)
                os.waitpid(self._holder, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            self._holder = 0

    def ours(self, conn: Any) -> bool:
        """True when systemd has ``self.unit`` and it carries this sandbox's token."""
        desc = unit_property(conn, self.unit, "org.freedesktop.systemd1.Unit", "Description")
        return isinstance(desc, str) and desc == self.description

    def remove(self, created: list[str]) -> None:
        """If the unit is this sandbox's (``ours``): kill what is left, StopUnit, wait until systemd has
        dropped it, and ResetFailedUnit (a failed unit would keep the name taken).  A unit of that name
        that is not ours is left alone, and so is its cgroup."""
        self.placed()
        conn = connect()
        try:
            if not self.ours(conn):
                return
            if os.path.isdir(self.dir):
                self.kill_all(9)
            try:
                call(conn, "StopUnit", "ss", (self.unit, "replace"))
            except LaunchFailed as e:
                if "NoSuchUnit" not in str(e):
                    raise
            deadline = time.monotonic() + 10
            while unit_state(conn, self.unit) not in ("gone", "inactive", "failed"):
                if time.monotonic() > deadline:
                    raise LaunchFailed(f"systemd did not stop {self.unit}")
                time.sleep(0.01)
            with contextlib.suppress(LaunchFailed):  # NoSuchUnit: not failed, nothing to reset
                call(conn, "ResetFailedUnit", "s", (self.unit,))
        finally:
            conn.close()


def _placeholder() -> int:
    """Fork a child that only waits to be killed (it holds the new scope until bwrap is in it).  It dies
    with its parent (PR_SET_PDEATHSIG, prctl(2)), so a create killed midway leaves an empty scope, which
    systemd removes, and no process."""
    from ..landlock import pdeathsig_setter

    die_with_parent = pdeathsig_setter(signal.SIGKILL)  # the C library is found before the fork
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            # the parent's files (a state lock among them: flock(2) locks belong to the open file,
            # which a forked copy keeps) are not the placeholder's to hold
            os.closerange(3, 1 << 16)
            die_with_parent()  # PR_SET_PDEATHSIG
            if os.getppid() != parent:  # the parent died before prctl took effect
                os._exit(0)
            while True:
                signal.pause()
        finally:
            os._exit(0)
    return pid
