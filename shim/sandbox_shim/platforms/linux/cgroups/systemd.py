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
    expand_slice(slc)
    return slc, unit


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
    if limits.blkio_weight:  # systemd rewrites io.weight from IOWeight whenever it realizes the unit
        props.append(("IOWeight", ("t", blkio_to_io_weight(limits.blkio_weight))))
    for key, value in (limits.unified or {}).items():  # runc: unifiedResToSystemdProps
        prop = _UNIFIED_PROPS.get(key)
        number = _unified_number(value)
        if prop is not None and number is not None:
            props.append((prop, ("t", number)))
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
    reply = conn.send_and_get_reply(msg, timeout=10)
    if reply.header.message_type == MessageType.error:
        name = reply.header.fields.get(4, "error")  # HeaderFields.error_name
        text = reply.body[0] if reply.body else ""
        raise LaunchFailed(f"systemd {method}: {name}: {text}")
    return tuple(reply.body)


def unit_state(conn: Any, unit: str) -> str:
    """ActiveState of ``unit`` ("active", "failed", ...), or "gone" when systemd no longer has it."""
    try:
        (path,) = call(conn, "GetUnit", "s", (unit,))
    except LaunchFailed:
        return "gone"
    try:
        (value,) = call(
            conn,
            "Get",
            "ss",
            ("org.freedesktop.systemd1.Unit", "ActiveState"),
            path=path,
            iface="org.freedesktop.DBus.Properties",
        )
    except LaunchFailed:
        return "gone"
    return str(value[1])


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
    """A transient scope under systemd; files are handled by the v2 manager (``Delegate=yes``)."""

    systemd = True

    def __init__(self, mount: str, cgroups_path: str, sandbox_id: str = "") -> None:
        self.slice, self.unit = parse_path(cgroups_path, sandbox_id)
        self.cgroups_path = cgroups_path
        super().__init__(mount, expand_slice(self.slice) + "/" + self.unit)
        self._holder = 0

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
            ("Description", ("s", f"sandbox-shim container {self.unit}")),
            ("Slice", ("s", self.slice)),
            ("Delegate", ("b", True)),
            ("DefaultDependencies", ("b", False)),
            ("PIDs", ("au", [self._holder])),
            ("MemoryAccounting", ("b", True)),
            ("CPUAccounting", ("b", True)),
            ("IOAccounting", ("b", True)),
            ("TasksAccounting", ("b", True)),
        ]
        conn = connect()
        try:
            call(conn, "StartTransientUnit", "ssa(sv)a(sa(sv))", (self.unit, "fail", props, []))
            deadline = time.monotonic() + 10
            while (now := unit_state(conn, self.unit)) != "active":
                if now == "failed" or time.monotonic() > deadline:
                    raise LaunchFailed(f"systemd did not start {self.unit} (state {now})")
                time.sleep(0.01)
        except LaunchFailed:
            self.placed()
            raise
        finally:
            conn.close()
        if not os.path.isdir(self.dir):
            self.placed()
            raise LaunchFailed(
                f"systemd started {self.unit} but {self.dir} does not exist",
                "is systemd using the unified cgroup hierarchy?",
            )
        return []  # systemd owns the directories: StopUnit removes them

    def apply(self, limits: Limits) -> None:
        """Set the unit properties systemd knows (so a daemon-reload keeps them), then the files."""
        self.check(limits)
        props = unit_properties(limits)
        if props:
            conn = connect()
            try:
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

    def remove(self, created: list[str]) -> None:
        """Kill what is left, then StopUnit the scope and wait until systemd has dropped it."""
        self.placed()
        if os.path.isdir(self.dir):
            self.kill_all(9)
        conn = connect()
        try:
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
        finally:
            conn.close()


def _placeholder() -> int:
    """Fork a child that only waits to be killed (it holds the new scope until bwrap is in it).  It dies
    with its parent (PR_SET_PDEATHSIG, prctl(2)), so a create killed midway leaves an empty scope, which
    systemd removes, and no process."""
    import ctypes

    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
            if os.getppid() != parent:  # the parent died before prctl took effect
                os._exit(0)
            while True:
                signal.pause()
        finally:
            os._exit(0)
    return pid
