"""cgroup v1: one directory per controller hierarchy (kernel doc admin-guide/cgroup-v1/).

Files written: memory.limit_in_bytes, memory.memsw.limit_in_bytes, memory.soft_limit_in_bytes,
memory.swappiness, memory.oom_control (disableOOMKiller), memory.kmem.tcp.limit_in_bytes (kernelTCP);
pids.max; cpu.shares, cpu.cfs_quota_us, cpu.cfs_period_us, cpu.cfs_burst_us, cpu.rt_runtime_us,
cpu.rt_period_us, cpu.idle; cpuset.cpus/mems; blkio.weight or blkio.bfq.weight (and the _device
forms), blkio.leaf_weight, blkio.throttle.*_device; hugetlb.<size>.limit_in_bytes; devices.deny and
devices.allow (devices.py); freezer.state.
Files read: memory.usage_in_bytes, memory.max_usage_in_bytes, memory.oom_control (``oom_kill``),
memory.failcnt; pids.current; cpuacct.stat (USER_HZ ticks); blkio.throttle.io_service_bytes_recursive.
Each file is checked before anything is written: a field whose file this kernel lacks (kernelTCP on
kernels without kmem accounting, realtime without CONFIG_RT_GROUP_SCHED, leafWeight without CFQ,
an unmounted blkio/hugetlb/devices hierarchy) is refused with its JSON pointer.  ``unified`` is
refused (it names v2 files), as runc does.
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

#: controllers joined for every sandbox when the host has them (limits or not: accounting, freezing)
ALWAYS = ("memory", "pids", "cpu", "cpuacct", "freezer")
#: Limits.hierarchies() names (v2 terms) -> v1 hierarchy
V1_NAME = {"io": "blkio"}
_USER_HZ = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class V1Manager(CgroupManager):
    """A cgroup at ``path`` in each v1 hierarchy in ``mounts`` (controller -> mount point)."""

    version = 1

    def __init__(self, mounts: dict[str, str], path: str) -> None:
        self.mounts = mounts
        self.path = clean_path(path)

    def _dir(self, controller: str) -> str:
        return os.path.join(self.mounts[controller], self.path.lstrip("/"))

    def _controllers(self) -> list[str]:
        seen: dict[str, str] = {}
        for c in (*ALWAYS, "cpuset", "blkio", "hugetlb", "devices"):
            if c in self.mounts:
                seen.setdefault(self._dir(c), c)
        return list(seen.values())

    def dirs(self) -> list[str]:
        return sorted({self._dir(c) for c in self._controllers()})

    def create(self, controllers: list[str]) -> list[str]:
        controllers = [V1_NAME.get(c, c) for c in controllers]
        missing = [c for c in controllers if c not in self.mounts]
        if missing:
            raise LaunchFailed(
                f"cgroup v1 controller(s) not mounted: {', '.join(missing)}",
                "mount their hierarchies, or remove the limits that need them",
            )
        wanted = [c for c in ALWAYS if c in self.mounts] + [c for c in controllers if c not in ALWAYS]
        self.joined = wanted
        created: list[str] = []
        try:
            for c in wanted:
                d = self._dir(c)
                if d in created:
                    continue
                after = self._copy_cpuset if c == "cpuset" else None
                for attempt in range(3):  # a parent may vanish when the last sibling's delete removes it
                    make_parents(self.mounts[c], os.path.dirname(self.path), created, after=after)
                    try:
                        os.mkdir(d)
                        break
                    except FileNotFoundError:
                        if attempt == 2:
                            raise
                created.append(d)
        except FileExistsError as e:
            self.remove(created)
            raise LaunchFailed(
                f"cgroup {e.filename} already exists", "another container uses this cgroupsPath; pick another"
            ) from e
        except OSError as e:
            self.remove(created)
            raise LaunchFailed(f"cannot create cgroup {e.filename}: {e.strerror}") from e
        except LaunchFailed:
            self.remove(created)
            raise
        return created

    @staticmethod
    def _copy_cpuset(parent: str, child: str) -> None:
        # A v1 cpuset cgroup refuses tasks until cpus and mems are set; parents we create inherit none.
        for f in ("cpuset.cpus", "cpuset.mems"):
            write(os.path.join(child, f), read(os.path.join(parent, f)) or "")

    def _file(self, controller: str, name: str) -> str:
        return os.path.join(self._dir(controller), name) if controller in self.mounts else ""

    def _need(self, pointer: str, controller: str, name: str) -> None:
        from .limits import refusal

        if controller not in self.mounts:
            raise refusal(pointer, f"the v1 {controller} hierarchy is not mounted on this host")
        if not os.path.exists(self._file(controller, name)):
            raise refusal(pointer, f"this kernel has no {controller} file {name}")

    def check(self, limits: Limits) -> None:
        """Refuse, with its JSON pointer, every field of ``limits`` this v1 host cannot apply.

        Raises:
            LaunchFailed: the first such field.
        """
        from .limits import THROTTLE, check_common, refusal

        check_common(limits)
        m, c, b = "/linux/resources/memory", "/linux/resources/cpu", "/linux/resources/blockIO"
        if limits.unified:
            raise refusal(
                "/linux/resources/unified",
                "names cgroup v2 files; this host uses cgroup v1",
                "remove it, or run on a cgroup v2 host",
            )
        if limits.memory_swap:
            self._need(f"{m}/swap", "memory", "memory.memsw.limit_in_bytes")
        if limits.memory_kernel_tcp:
            self._need(f"{m}/kernelTCP", "memory", "memory.kmem.tcp.limit_in_bytes")
        if limits.memory_swappiness is not None:
            self._need(f"{m}/swappiness", "memory", "memory.swappiness")
        if limits.memory_use_hierarchy is False:
            raise refusal(
                f"{m}/useHierarchy", "this kernel is always hierarchical", "set it to true or remove it"
            )
        for key, field, name in (
            ("burst", "cpu_burst", "cpu.cfs_burst_us"),
            ("idle", "cpu_idle", "cpu.idle"),
            ("realtimeRuntime", "cpu_realtime_runtime", "cpu.rt_runtime_us"),
            ("realtimePeriod", "cpu_realtime_period", "cpu.rt_period_us"),
        ):
            if getattr(limits, field) is not None:
                self._need(f"{c}/{key}", "cpu", name)
        if limits.blkio_weight or any(d[2] for d in limits.blkio_weight_device or []):
            if not (self._has("blkio", "blkio.weight") or self._has("blkio", "blkio.bfq.weight")):
                self._need(f"{b}/weight", "blkio", "blkio.weight")
        if limits.blkio_leaf_weight or any(d[3] for d in limits.blkio_weight_device or []):
            self._need(f"{b}/leafWeight", "blkio", "blkio.leaf_weight")
        for key in limits.blkio_throttle or {}:
            self._need(f"{b}/{key}", "blkio", THROTTLE[key][0])
        for i, (size, _) in enumerate(limits.hugepage_limits or []):
            self._need(
                f"/linux/resources/hugepageLimits/{i}/pageSize", "hugetlb", f"hugetlb.{size}.limit_in_bytes"
            )
        if limits.devices is not None:
            from .devices import validate

            self._need("/linux/resources/devices", "devices", "devices.allow")
            validate(limits.devices)

    def _has(self, controller: str, name: str) -> bool:
        return controller in self.mounts and os.path.exists(self._file(controller, name))

    def apply(self, limits: Limits) -> None:
        """Check every field (``check``), then write them; nothing is written when one is refused."""
        from .limits import refusal

        self.check(limits)
        mem = lambda name: self._file("memory", name)  # noqa: E731
        if limits.memory_check_before_update and limits.memory_limit:
            cur = read_int(mem("memory.usage_in_bytes"))
            if cur is not None and limits.memory_limit < cur:
                raise refusal(
                    "/linux/resources/memory/limit",
                    f"{limits.memory_limit} is below the {cur} bytes in use (checkBeforeUpdate)",
                    "raise the limit",
                )
        if limits.memory_limit and limits.memory_swap:
            # the kernel keeps memsw >= limit at every step: raise memsw first when growing, else the limit
            old = read_int(mem("memory.memsw.limit_in_bytes")) or 0
            order = (
                [
                    ("memory.memsw.limit_in_bytes", limits.memory_swap),
                    ("memory.limit_in_bytes", limits.memory_limit),
                ]
                if limits.memory_swap > old
                else [
                    ("memory.limit_in_bytes", limits.memory_limit),
                    ("memory.memsw.limit_in_bytes", limits.memory_swap),
                ]
            )
            for name, val in order:
                write(mem(name), str(val))
        elif limits.memory_limit:
            write(mem("memory.limit_in_bytes"), str(limits.memory_limit))
        elif limits.memory_swap:
            write(mem("memory.memsw.limit_in_bytes"), str(limits.memory_swap))
        if limits.memory_reservation:
            write(mem("memory.soft_limit_in_bytes"), str(limits.memory_reservation))
        if limits.memory_kernel_tcp:
            write(mem("memory.kmem.tcp.limit_in_bytes"), str(limits.memory_kernel_tcp))
        if limits.memory_swappiness is not None:
            write(mem("memory.swappiness"), str(limits.memory_swappiness))
        if limits.memory_disable_oom_killer:
            write(mem("memory.oom_control"), "1")
        if limits.pids_limit:
            write(self._file("pids", "pids.max"), str(limits.pids_limit))
        cpu = lambda name: self._file("cpu", name)  # noqa: E731
        for field, name in (
            ("cpu_shares", "cpu.shares"),
            ("cpu_period", "cpu.cfs_period_us"),
            ("cpu_quota", "cpu.cfs_quota_us"),
            ("cpu_burst", "cpu.cfs_burst_us"),
            ("cpu_realtime_period", "cpu.rt_period_us"),
            ("cpu_realtime_runtime", "cpu.rt_runtime_us"),
            ("cpu_idle", "cpu.idle"),
        ):
            val = getattr(limits, field)
            if val is not None:
                write(cpu(name), str(val))
        if limits.cpu_cpus or limits.cpu_mems:
            d = self._dir("cpuset")
            parent = os.path.dirname(d)
            for name, wanted in (("cpuset.cpus", limits.cpu_cpus), ("cpuset.mems", limits.cpu_mems)):
                write(os.path.join(d, name), wanted or read(os.path.join(parent, name)) or "")
        self._apply_blkio(limits)
        for size, limit in limits.hugepage_limits or []:
            write(self._file("hugetlb", f"hugetlb.{size}.limit_in_bytes"), str(limit))
            if self._has("hugetlb", f"hugetlb.{size}.rsvd.limit_in_bytes"):
                write(self._file("hugetlb", f"hugetlb.{size}.rsvd.limit_in_bytes"), str(limit))
        if limits.devices is not None:
            from .devices import v1_lines

            for name, line in v1_lines(limits.devices):
                write(self._file("devices", name), line)

    def _apply_blkio(self, limits: Limits) -> None:
        from .limits import THROTTLE

        bfq = not self._has("blkio", "blkio.weight")  # only the BFQ scheduler's files on this kernel
        weight = "blkio.bfq.weight" if bfq else "blkio.weight"
        if limits.blkio_weight:
            write(self._file("blkio", weight), str(limits.blkio_weight))
        if limits.blkio_leaf_weight:
            write(self._file("blkio", "blkio.leaf_weight"), str(limits.blkio_leaf_weight))
        for major, minor, w, leaf in limits.blkio_weight_device or []:
            if w:
                write(self._file("blkio", weight + "_device"), f"{major}:{minor} {w}")
            if leaf:
                write(self._file("blkio", "blkio.leaf_weight_device"), f"{major}:{minor} {leaf}")
        for key, entries in (limits.blkio_throttle or {}).items():
            for major, minor, rate in entries:
                write(self._file("blkio", THROTTLE[key][0]), f"{major}:{minor} {rate}")

    def add(self, pid: int) -> None:
        for d in self.dirs():
            if os.path.isdir(d):
                write(os.path.join(d, "cgroup.procs"), str(pid))

    def join_files(self) -> list[str]:
        """``tasks`` in every directory: writing ``0`` to it moves the writing thread only
        (cgroup-v1/cgroups.rst 2.2), which for the forked, single-threaded child about to exec bwrap
        (fork(2) copies only the calling thread) is the whole process; bwrap and every process it
        forks are born inside.  The kernel moves the current thread without taking the thread-group
        lock whose write side waits for an RCU grace period (~10 ms), which a write to
        ``cgroup.procs`` or of an explicit id takes (kernel/cgroup/cgroup.c,
        cgroup_procs_write_start)."""
        return [os.path.join(d, "tasks") for d in self.dirs() if os.path.isdir(d)]

    def pids(self) -> list[int]:
        for c in ("pids", "memory", "freezer"):
            if c in self.mounts:
                text = read(os.path.join(self._dir(c), "cgroup.procs"))
                if text is not None:
                    return [int(p) for p in text.split()]
        return []

    def freeze(self, frozen: bool) -> None:
        if "freezer" not in self.mounts:
            raise LaunchFailed("the v1 freezer controller is not mounted", "mount the freezer hierarchy")
        state = os.path.join(self._dir("freezer"), "freezer.state")
        want = "FROZEN" if frozen else "THAWED"
        deadline = time.monotonic() + 5
        delay = 0.00005  # the v1 freezer signals nothing: look again at 50 µs, doubling to 5 ms
        while True:
            write(state, want)
            now = (read(state) or "").strip()
            if now == want or not os.path.exists(state):
                return
            if time.monotonic() > deadline:
                raise LaunchFailed(f"cgroup did not become {want} (state {now})")
            time.sleep(delay)
            delay = min(delay * 2, 0.005)

    def is_frozen(self) -> bool:
        """True when the freezer says FROZEN."""
        if "freezer" not in self.mounts:
            return False
        return (read(os.path.join(self._dir("freezer"), "freezer.state")) or "").strip() == "FROZEN"

    def usage(self) -> Usage:
        mem = self._dir("memory") if "memory" in self.mounts else ""
        u = Usage(
            memory_bytes=read_int(os.path.join(mem, "memory.usage_in_bytes")) if mem else None,
            memory_peak_bytes=read_int(os.path.join(mem, "memory.max_usage_in_bytes")) if mem else None,
            pids=read_int(os.path.join(self._dir("pids"), "pids.current")) if "pids" in self.mounts else None,
        )
        io = keyed_io(read(self._file("blkio", "blkio.throttle.io_service_bytes_recursive")))
        u.io_read_bytes, u.io_write_bytes = io.get("Read"), io.get("Write")
        if "cpuacct" in self.mounts:
            st = keyed(read(os.path.join(self._dir("cpuacct"), "cpuacct.stat")))
            if st:
                u.cpu_user_us = st.get("user", 0) * 1_000_000 // _USER_HZ
                u.cpu_system_us = st.get("system", 0) * 1_000_000 // _USER_HZ
        return u

    def oom_killed(self) -> bool:
        if "memory" not in self.mounts:
            return False
        oc = keyed(read(os.path.join(self._dir("memory"), "memory.oom_control")))
        return oc.get("oom_kill", 0) > 0

    def memory_failcnt(self) -> int:
        """How often the memory limit was hit (``memory.failcnt``)."""
        return read_int(os.path.join(self._dir("memory"), "memory.failcnt")) or 0


def keyed_io(text: str | None) -> dict[str, int]:
    """Sum blkio's ``MAJ:MIN Op bytes`` lines per Op (Read, Write, ...); the ``Total`` line is skipped."""
    out: dict[str, int] = {}
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[2].isdigit():
            out[parts[1]] = out.get(parts[1], 0) + int(parts[2])
    return out
