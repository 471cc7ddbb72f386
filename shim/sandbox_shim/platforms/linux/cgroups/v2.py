"""cgroup v2: one directory in the unified hierarchy (kernel doc admin-guide/cgroup-v2.rst).

Files used: memory.max, memory.swap.max, memory.low, memory.current, memory.peak, memory.events
(``oom_kill``); pids.max, pids.current; cpu.weight, cpu.max, cpu.stat (usage in µs); cpuset.cpus/mems;
cgroup.freeze + cgroup.events (``frozen``); cgroup.kill; cgroup.subtree_control of each parent.
"""

from __future__ import annotations

import os
import time

from ....errors import LaunchFailed
from ....mechanism import Usage
from .base import CgroupManager, Limits, keyed, read, read_int, write


def shares_to_weight(shares: int) -> int:
    """Convert v1 cpu.shares (2..262144) to v2 cpu.weight (1..10000), as runc and crun do."""
    return 1 + ((max(2, min(shares, 262144)) - 2) * 9999) // 262142


class V2Manager(CgroupManager):
    """A cgroup at ``path`` under the cgroup2 mount ``mount``."""

    version = 2

    def __init__(self, mount: str, path: str) -> None:
        self.mount = mount
        self.path = "/" + path.strip("/")
        self.dir = os.path.join(mount, self.path.lstrip("/"))

    def dirs(self) -> list[str]:
        return [self.dir]

    def create(self, controllers: list[str]) -> list[str]:
        available = set((read(os.path.join(self.mount, "cgroup.controllers")) or "").split())
        missing = [c for c in controllers if c not in available]
        if missing:
            raise LaunchFailed(f"cgroup v2 controller(s) not available: {', '.join(missing)}")
        # Enable the controllers down the path: each parent's subtree_control must list them.
        enable = [c for c in ("memory", "pids", "cpu", "cpuset") if c in available]
        cur = self.mount
        for part in [p for p in self.path.strip("/").split("/")[:-1] if p]:
            self._enable(cur, enable)
            cur = os.path.join(cur, part)
            os.makedirs(cur, exist_ok=True)
        self._enable(cur, enable)
        try:
            os.mkdir(self.dir)
        except FileExistsError as e:
            raise LaunchFailed(f"cgroup {self.dir} already exists",
                               "another container uses this cgroupsPath; pick another") from e
        except OSError as e:
            raise LaunchFailed(f"cannot create cgroup {self.dir}: {e.strerror}") from e
        return [self.dir]

    @staticmethod
    def _enable(parent: str, controllers: list[str]) -> None:
        current = set((read(os.path.join(parent, "cgroup.subtree_control")) or "").split())
        todo = [c for c in controllers if c not in current]
        if todo:
            write(os.path.join(parent, "cgroup.subtree_control"), " ".join("+" + c for c in todo))

    def apply(self, limits: Limits) -> None:
        d = self.dir
        if limits.devices:  # never a silent allow-all: the device program is not built on v2 here
            raise LaunchFailed("cgroup v2 device rules (a BPF_CGROUP_DEVICE program) are not built in this "
                               "version", "run on a cgroup v1 host, or drop CAP_MKNOD and the device rules")
        if limits.memory_limit:
            write(os.path.join(d, "memory.max"), str(limits.memory_limit))
        if limits.memory_swap:
            if not limits.memory_limit:
                raise LaunchFailed("linux.resources.memory.swap needs memory.limit on cgroup v2")
            write(os.path.join(d, "memory.swap.max"), str(max(0, limits.memory_swap - limits.memory_limit)))
        if limits.memory_reservation:
            write(os.path.join(d, "memory.low"), str(limits.memory_reservation))
        if limits.pids_limit:
            write(os.path.join(d, "pids.max"), str(limits.pids_limit))
        if limits.cpu_shares:
            write(os.path.join(d, "cpu.weight"), str(shares_to_weight(limits.cpu_shares)))
        if limits.cpu_quota or limits.cpu_period:
            quota = str(limits.cpu_quota) if limits.cpu_quota else "max"
            write(os.path.join(d, "cpu.max"), f"{quota} {limits.cpu_period or 100000}")
        if limits.cpu_cpus:
            write(os.path.join(d, "cpuset.cpus"), limits.cpu_cpus)
        if limits.cpu_mems:
            write(os.path.join(d, "cpuset.mems"), limits.cpu_mems)

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
            write(kill_file, "1")  # the kernel kills every process, forks included (Linux 5.14)
            return
        super().kill_all(signum, exclude)

    def usage(self) -> Usage:
        d = self.dir
        st = keyed(read(os.path.join(d, "cpu.stat")))
        return Usage(
            memory_bytes=read_int(os.path.join(d, "memory.current")),
            memory_peak_bytes=read_int(os.path.join(d, "memory.peak")),
            cpu_user_us=st.get("user_usec"),
            cpu_system_us=st.get("system_usec"),
            pids=read_int(os.path.join(d, "pids.current")),
        )

    def oom_killed(self) -> bool:
        return keyed(read(os.path.join(self.dir, "memory.events"))).get("oom_kill", 0) > 0
