"""cgroup v2: one directory in the unified hierarchy (kernel doc admin-guide/cgroup-v2.rst).

Files written: memory.max, memory.swap.max (OCI swap minus limit, as runc), memory.low (reservation);
pids.max; cpu.weight (shares converted as runc), cpu.max, cpu.max.burst, cpu.idle; cpuset.cpus/mems;
io.weight or io.bfq.weight, io.max (throttles); hugetlb.<size>.max (+ .rsvd.max); the ``unified`` map
(memory.high, memory.oom.group, ...); the device filter as a BPF_CGROUP_DEVICE program (devices.py);
cgroup.subtree_control of each parent; cgroup.freeze, cgroup.kill.
Files read: memory.current, memory.peak, memory.events (oom, oom_kill, oom_group_kill), pids.current,
cpu.stat, io.stat, {cpu,memory,io}.pressure (PSI, kernel doc accounting/psi.rst), cgroup.events.
Refused with their pointer (no v2 file exists): memory.kernel, memory.kernelTCP, memory.swappiness,
memory.disableOOMKiller, memory.useHierarchy false, cpu.realtimeRuntime/realtimePeriod,
blockIO.leafWeight and weightDevice leafWeight.
"""

from __future__ import annotations

import os
import time

from ....errors import LaunchFailed
from ....mechanism import Usage
from .base import CgroupManager, clean_path, keyed, make_parents, read, read_int, write

TYPE_CHECKING = False  # the limit rules (resources.py) load where limits are checked or written only
if TYPE_CHECKING:
    from .limits import Limits

#: controllers enabled down the path when the host has them
ENABLE = ("cpuset", "cpu", "io", "memory", "hugetlb", "pids")
#: ``unified`` keys must name a file of one of these controllers, or one of ``UNIFIED_CGROUP_FILES``
UNIFIED_CONTROLLERS = ("cpu", "cpuset", "io", "memory", "hugetlb", "pids", "misc", "rdma")
UNIFIED_CGROUP_FILES = ("cgroup.max.depth", "cgroup.max.descendants")
#: ``unified`` keys refused although their controller is allowed: a partition root takes CPUs away from
#: every sibling (kernel doc cgroup-v2.rst "cpuset.cpus.partition"), which is not a limit on the sandbox
UNIFIED_REFUSED = ("cpuset.cpus.partition", "cpuset.cpus.exclusive")


class V2Manager(CgroupManager):
    """A cgroup at ``path`` under the cgroup2 mount ``mount``."""

    version = 2

    def __init__(self, mount: str, path: str) -> None:
        self.mount = mount
        self.path = clean_path(path)
        self.dir = os.path.join(mount, self.path.lstrip("/"))

    def dirs(self) -> list[str]:
        return [self.dir]

    def available(self) -> set[str]:
        """Controllers the hierarchy's root offers (``cgroup.controllers``)."""
        return set((read(os.path.join(self.mount, "cgroup.controllers")) or "").split())

    def create(self, controllers: list[str]) -> list[str]:
        available = self.available()
        missing = [c for c in controllers if c not in available and c != "devices"]
        if missing:
            raise LaunchFailed(
                f"cgroup v2 controller(s) not available: {', '.join(missing)}",
                f"enable them in {self.mount}/cgroup.subtree_control",
            )
        enable = [c for c in ENABLE if c in available]
        made: list[str] = []
        parent = os.path.dirname(self.dir)
        for _ in range(3):  # a parent may vanish under us when the last sibling's delete removes it
            try:
                make_parents(
                    self.mount,
                    os.path.relpath(parent, self.mount),
                    made,
                    before=lambda p: self._enable(p, enable),
                )
                self._enable(parent, enable)
            except LaunchFailed:
                self.remove(made)
                raise
            try:
                os.mkdir(self.dir)
                return [*made, self.dir]
            except FileNotFoundError:
                continue
            except FileExistsError as e:
                self.remove(made)
                raise LaunchFailed(
                    f"cgroup {self.dir} already exists",
                    "another container uses this cgroupsPath; pick another",
                ) from e
            except OSError as e:
                self.remove(made)
                raise LaunchFailed(f"cannot create cgroup {self.dir}: {e.strerror}") from e
        self.remove(made)
        raise LaunchFailed(f"cannot create cgroup {self.dir}: its parent keeps disappearing")

    @staticmethod
    def _enable(parent: str, controllers: list[str]) -> None:
        current = set((read(os.path.join(parent, "cgroup.subtree_control")) or "").split())
        todo = [c for c in controllers if c not in current and "+" + c not in current]
        if todo:
            write(os.path.join(parent, "cgroup.subtree_control"), " ".join("+" + c for c in todo))

    def _has(self, name: str) -> bool:
        return os.path.exists(os.path.join(self.dir, name))

    def check(self, limits: Limits) -> None:
        """Refuse, with its JSON pointer, every field of ``limits`` cgroup v2 cannot apply here.

        Raises:
            LaunchFailed: the first such field.
        """
        from .limits import check_common, refusal

        check_common(limits)
        m = "/linux/resources/memory"
        if limits.memory_kernel_tcp:
            raise refusal(
                f"{m}/kernelTCP",
                "cgroup v2 has no separate TCP memory limit",
                "remove it (memory.max covers TCP buffers on v2)",
            )
        if limits.memory_swappiness is not None:
            raise refusal(f"{m}/swappiness", "cgroup v2 has no per-cgroup swappiness")
        if limits.memory_disable_oom_killer:
            raise refusal(f"{m}/disableOOMKiller", "cgroup v2 cannot disable the OOM killer for a cgroup")
        if limits.memory_use_hierarchy is False:
            raise refusal(
                f"{m}/useHierarchy", "cgroup v2 is always hierarchical", "set it to true or remove it"
            )
        if limits.memory_swap and not limits.memory_limit:
            raise refusal(f"{m}/swap", "a swap limit needs memory.limit on cgroup v2", "set memory.limit too")
        if limits.memory_swap and limits.memory_limit and not self._has("memory.swap.max"):
            raise refusal(
                f"{m}/swap",
                "this kernel has no swap accounting (memory.swap.max)",
                "boot with swapaccount=1 or remove the field",
            )
        if limits.cpu_realtime_runtime or limits.cpu_realtime_period:
            key = "realtimeRuntime" if limits.cpu_realtime_runtime else "realtimePeriod"
            raise refusal(f"/linux/resources/cpu/{key}", "cgroup v2 has no real-time CPU bandwidth")
        for key, fname in (("burst", "cpu.max.burst"), ("idle", "cpu.idle")):
            if getattr(limits, f"cpu_{key}") is not None and not self._has(fname):
                raise refusal(f"/linux/resources/cpu/{key}", f"this kernel has no {fname}")
        if limits.blkio_leaf_weight or any(d[3] for d in limits.blkio_weight_device or []):
            raise refusal("/linux/resources/blockIO/leafWeight", "cgroup v2 has no leaf weights")
        if (limits.blkio_weight or limits.blkio_weight_device) and not (
            self._has("io.weight") or self._has("io.bfq.weight")
        ):
            raise refusal(
                "/linux/resources/blockIO/weight",
                "no io.weight here (the io controller or an IO scheduler with weights is missing)",
            )
        if limits.blkio_throttle and not self._has("io.max"):
            raise refusal(
                f"/linux/resources/blockIO/{next(iter(limits.blkio_throttle))}",
                "no io.max here (the io controller is not enabled)",
            )
        for i, (size, _) in enumerate(limits.hugepage_limits or []):
            if not self._has(f"hugetlb.{size}.max"):
                raise refusal(
                    f"/linux/resources/hugepageLimits/{i}/pageSize",
                    f"no hugetlb.{size}.max here (no such page size, or no hugetlb controller)",
                )
        for key in limits.unified or {}:
            self._check_unified(key)
        if limits.devices is not None:
            from .devices import validate

            validate(limits.devices)

    def _check_unified(self, key: str) -> None:
        from .limits import refusal

        p = f"/linux/resources/unified/{key.replace('~', '~0').replace('/', '~1')}"
        ctl = key.split(".", 1)[0]
        allowed = (ctl in UNIFIED_CONTROLLERS or key in UNIFIED_CGROUP_FILES) and key not in UNIFIED_REFUSED
        if "/" in key or "\n" in key or key in (".", "..") or not allowed:
            raise refusal(
                p,
                "not a settable cgroup v2 limit file",
                f"use a file of {', '.join(UNIFIED_CONTROLLERS)} or {', '.join(UNIFIED_CGROUP_FILES)}",
            )
        if not self._has(key):
            raise refusal(p, f"no {key} in this cgroup (its controller is missing or the file is unknown)")

    def apply(self, limits: Limits) -> None:
        """Check every field (``check``), then write them; nothing is written when one is refused."""
        from .limits import refusal, shares_to_weight

        self.check(limits)
        d = self.dir
        if limits.memory_check_before_update and limits.memory_limit:
            cur = read_int(os.path.join(d, "memory.current"))
            if cur is not None and limits.memory_limit < cur:
                raise refusal(
                    "/linux/resources/memory/limit",
                    f"{limits.memory_limit} is below the {cur} bytes in use (checkBeforeUpdate)",
                    "raise the limit",
                )
        if limits.memory_limit:
            write(os.path.join(d, "memory.max"), str(limits.memory_limit))
        if limits.memory_swap and limits.memory_limit:
            write(os.path.join(d, "memory.swap.max"), str(limits.memory_swap - limits.memory_limit))
        if limits.memory_reservation:
            write(os.path.join(d, "memory.low"), str(limits.memory_reservation))
        if limits.pids_limit:
            write(os.path.join(d, "pids.max"), str(limits.pids_limit))
        if limits.cpu_shares:
            write(os.path.join(d, "cpu.weight"), str(shares_to_weight(limits.cpu_shares)))
        if limits.cpu_quota or limits.cpu_period:
            quota = str(limits.cpu_quota) if limits.cpu_quota else "max"
            write(os.path.join(d, "cpu.max"), f"{quota} {limits.cpu_period or 100000}")
        if limits.cpu_burst is not None:
            write(os.path.join(d, "cpu.max.burst"), str(limits.cpu_burst))
        if limits.cpu_idle is not None:
            write(os.path.join(d, "cpu.idle"), str(limits.cpu_idle))
        if limits.cpu_cpus:
            write(os.path.join(d, "cpuset.cpus"), limits.cpu_cpus)
        if limits.cpu_mems:
            write(os.path.join(d, "cpuset.mems"), limits.cpu_mems)
        self._apply_io(limits)
        for size, limit in limits.hugepage_limits or []:
            write(os.path.join(d, f"hugetlb.{size}.max"), str(limit))
            if self._has(f"hugetlb.{size}.rsvd.max"):
                write(os.path.join(d, f"hugetlb.{size}.rsvd.max"), str(limit))
        for key, value in (limits.unified or {}).items():
            write(os.path.join(d, key), value)
        if limits.devices is not None:
            from .devices import attach

            attach(d, limits.devices)

    def _apply_io(self, limits: Limits) -> None:
        from .limits import THROTTLE, blkio_to_io_weight

        d = self.dir
        bfq = self._has("io.bfq.weight")  # BFQ takes blkio's own 1..1000 scale (runc writes it as is)
        if limits.blkio_weight:
            if bfq:
                write(os.path.join(d, "io.bfq.weight"), str(limits.blkio_weight))
            else:
                write(os.path.join(d, "io.weight"), f"default {blkio_to_io_weight(limits.blkio_weight)}")
        for n, (major, minor, weight, _) in enumerate(limits.blkio_weight_device or []):
            if weight:
                name, value = ("io.bfq.weight", weight) if bfq else ("io.weight", blkio_to_io_weight(weight))
                # a device whose scheduler keeps no per-device weight refuses the line (EOPNOTSUPP)
                _device_write(os.path.join(d, name), f"{major}:{minor} {value}", f"weightDevice/{n}")
        for key, entries in (limits.blkio_throttle or {}).items():
            for n, (major, minor, rate) in enumerate(entries):
                line = f"{major}:{minor} {THROTTLE[key][1]}={rate or 'max'}"
                _device_write(os.path.join(d, "io.max"), line, f"{key}/{n}")

    def add(self, pid: int) -> None:
        write(os.path.join(self.dir, "cgroup.procs"), str(pid))

    def pids(self) -> list[int]:
        text = read(os.path.join(self.dir, "cgroup.procs"))
        return [int(p) for p in text.split()] if text else []

    def freeze(self, frozen: bool) -> None:
        write(os.path.join(self.dir, "cgroup.freeze"), "1" if frozen else "0")
        deadline = time.monotonic() + 5
        while keyed(read(os.path.join(self.dir, "cgroup.events"))).get("frozen") != int(frozen):
            if time.monotonic() > deadline:
                raise LaunchFailed(f"cgroup {self.dir} did not {'freeze' if frozen else 'thaw'}")
            time.sleep(0.005)

    def is_frozen(self) -> bool:
        """True when cgroup.events says frozen 1."""
        return keyed(read(os.path.join(self.dir, "cgroup.events"))).get("frozen", 0) == 1

    def kill_all(self, signum: int = 9, exclude: set[int] | frozenset[int] = frozenset()) -> None:
        kill_file = os.path.join(self.dir, "cgroup.kill")
        if signum == 9 and not exclude and os.path.exists(kill_file):
            try:
                write(kill_file, "1")  # the kernel kills every process, forks included (Linux 5.14)
            except LaunchFailed:
                if os.path.isdir(self.dir):
                    raise
                # gone meanwhile: its last process exited and its owner (systemd, for a transient
                # scope) removed it, so nothing is left to kill
            return
        super().kill_all(signum, exclude)

    def usage(self) -> Usage:
        d = self.dir
        st = keyed(read(os.path.join(d, "cpu.stat")))
        io = io_totals(read(os.path.join(d, "io.stat")))
        return Usage(
            memory_bytes=read_int(os.path.join(d, "memory.current")),
            memory_peak_bytes=read_int(os.path.join(d, "memory.peak")),
            cpu_user_us=st.get("user_usec"),
            cpu_system_us=st.get("system_usec"),
            pids=read_int(os.path.join(d, "pids.current")),
            io_read_bytes=io.get("rbytes") if io else None,
            io_write_bytes=io.get("wbytes") if io else None,
        )

    def events_fd(self) -> int | None:
        """``memory.events``, read once so its next change is what select(2) reports (kernfs keeps
        the event count seen per open file; a read takes it).  None without the memory controller."""
        try:
            fd = os.open(os.path.join(self.dir, "memory.events"), os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            os.pread(fd, 4096, 0)
        except OSError:
            os.close(fd)
            return None
        return fd

    def memory_events(self) -> dict[str, int]:
        """``memory.events`` as ints (max, oom, oom_kill, oom_group_kill, ...)."""
        return keyed(read(os.path.join(self.dir, "memory.events")))

    def oom_killed(self) -> bool:
        ev = self.memory_events()
        return ev.get("oom_kill", 0) > 0 or ev.get("oom_group_kill", 0) > 0

    def pressure(self) -> dict[str, dict[str, dict[str, float | int]]]:
        """PSI of the cgroup: ``{"cpu"|"memory"|"io": {"some"|"full": {"avg10", "avg60", "avg300",
        "total"}}}`` (averages in percent, total in µs; kernel doc accounting/psi.rst).  Resources
        whose file is missing (kernel without PSI) are left out."""
        out: dict[str, dict[str, dict[str, float | int]]] = {}
        for res in ("cpu", "memory", "io"):
            text = read(os.path.join(self.dir, f"{res}.pressure"))
            if text:
                out[res] = parse_pressure(text)
        return out


def parse_pressure(text: str) -> dict[str, dict[str, float | int]]:
    """``some avg10=0.00 avg60=0.00 avg300=0.00 total=0`` lines → ``{"some": {...}, "full": {...}}``."""
    out: dict[str, dict[str, float | int]] = {}
    for line in text.splitlines():
        kind, *pairs = line.split()
        vals: dict[str, float | int] = {}
        for p in pairs:
            k, _, v = p.partition("=")
            try:
                vals[k] = int(v) if k == "total" else float(v)
            except ValueError:
                continue
        out[kind] = vals
    return out


def io_totals(text: str | None) -> dict[str, int]:
    """Sum io.stat's per-device ``MAJ:MIN rbytes=.. wbytes=.. rios=.. wios=.. ...`` over devices."""
    out: dict[str, int] = {}
    for line in (text or "").splitlines():
        for p in line.split()[1:]:
            k, _, v = p.partition("=")
            if v.isdigit():
                out[k] = out.get(k, 0) + int(v)
    return out


def _device_write(path: str, line: str, field: str) -> None:
    """Write one per-device io line; a refusal by the kernel (no such device, a scheduler without
    per-device weights) names the config field, ``/linux/resources/blockIO/FIELD``."""
    from .limits import refusal

    try:
        write(path, line)
    except LaunchFailed as e:
        raise refusal(
            f"/linux/resources/blockIO/{field}",
            f"the kernel refused {line!r} in {os.path.basename(path)}: {e.args[0].rsplit(': ', 1)[-1]}",
            "name a block device this host has, whose IO scheduler takes the setting",
        ) from e
