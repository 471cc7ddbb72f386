"""cgroup v1: one directory per controller hierarchy (kernel doc admin-guide/cgroup-v1/).

Files used: memory.limit_in_bytes, memory.memsw.limit_in_bytes, memory.soft_limit_in_bytes,
memory.usage_in_bytes, memory.max_usage_in_bytes, memory.oom_control (``oom_kill``), memory.failcnt;
pids.max, pids.current; cpu.shares, cpu.cfs_quota_us, cpu.cfs_period_us; cpuacct.stat (USER_HZ
ticks); cpuset.cpus/mems; freezer.state.
"""

from __future__ import annotations

import os
import time

from ....errors import LaunchFailed
from ....mechanism import Usage
from .base import CgroupManager, Limits, keyed, read, read_int, write

#: controllers joined for every sandbox when the host has them (limits or not: accounting, freezing)
ALWAYS = ("memory", "pids", "cpu", "cpuacct", "freezer")
_USER_HZ = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class V1Manager(CgroupManager):
    """A cgroup at ``path`` in each v1 hierarchy in ``mounts`` (controller -> mount point)."""

    version = 1

    def __init__(self, mounts: dict[str, str], path: str) -> None:
        self.mounts = mounts
        self.path = "/" + path.strip("/")

    def _dir(self, controller: str) -> str:
        return os.path.join(self.mounts[controller], self.path.lstrip("/"))

    def _controllers(self) -> list[str]:
        seen: dict[str, str] = {}
        for c in (*ALWAYS, "cpuset", "devices"):
            if c in self.mounts:
                seen.setdefault(self._dir(c), c)
        return list(seen.values())

    def dirs(self) -> list[str]:
        return sorted({self._dir(c) for c in self._controllers()})

    def create(self, controllers: list[str]) -> list[str]:
        missing = [c for c in controllers if c not in self.mounts]
        if missing:
            raise LaunchFailed(f"cgroup v1 controller(s) not mounted: {', '.join(missing)}")
        wanted = [c for c in ALWAYS if c in self.mounts]
        wanted += [c for c in ("cpuset", "devices") if c in controllers]
        created: list[str] = []
        try:
            for c in wanted:
                d = self._dir(c)
                if d in created:
                    continue
                if c == "cpuset":
                    self._make_cpuset_parents(d)
                os.makedirs(os.path.dirname(d), exist_ok=True)
                os.mkdir(d)
                created.append(d)
        except FileExistsError as e:
            self.remove(created)
            raise LaunchFailed(
                f"cgroup {e.filename} already exists", "another container uses this cgroupsPath; pick another"
            ) from e
        except OSError as e:
            self.remove(created)
            raise LaunchFailed(f"cannot create cgroup {e.filename}: {e.strerror}") from e
        return created

    def _make_cpuset_parents(self, leaf: str) -> None:
        # A v1 cpuset cgroup refuses tasks until cpus and mems are set; parents we create inherit none.
        root = self.mounts["cpuset"]
        cur = root
        for part in os.path.relpath(os.path.dirname(leaf), root).split(os.sep):
            if part in ("", "."):
                continue
            parent, cur = cur, os.path.join(cur, part)
            if not os.path.isdir(cur):
                os.mkdir(cur)
                for f in ("cpuset.cpus", "cpuset.mems"):
                    write(os.path.join(cur, f), read(os.path.join(parent, f)) or "")

    def apply(self, limits: Limits) -> None:
        if limits.memory_limit:
            write(os.path.join(self._dir("memory"), "memory.limit_in_bytes"), str(limits.memory_limit))
        if limits.memory_swap:
            memsw = os.path.join(self._dir("memory"), "memory.memsw.limit_in_bytes")
            if not os.path.exists(memsw):
                raise LaunchFailed(
                    "this host's memory cgroup has no swap accounting (memsw)",
                    "remove linux.resources.memory.swap or boot with swapaccount=1",
                )
            write(memsw, str(limits.memory_swap))
        if limits.memory_reservation:
            write(
                os.path.join(self._dir("memory"), "memory.soft_limit_in_bytes"),
                str(limits.memory_reservation),
            )
        if limits.pids_limit:
            write(os.path.join(self._dir("pids"), "pids.max"), str(limits.pids_limit))
        if limits.cpu_shares:
            write(os.path.join(self._dir("cpu"), "cpu.shares"), str(limits.cpu_shares))
        if limits.cpu_period:
            write(os.path.join(self._dir("cpu"), "cpu.cfs_period_us"), str(limits.cpu_period))
        if limits.cpu_quota:
            write(os.path.join(self._dir("cpu"), "cpu.cfs_quota_us"), str(limits.cpu_quota))
        if limits.cpu_cpus or limits.cpu_mems:
            d = self._dir("cpuset")
            parent = os.path.dirname(d)
            write(
                os.path.join(d, "cpuset.cpus"),
                limits.cpu_cpus or read(os.path.join(parent, "cpuset.cpus")) or "",
            )
            write(
                os.path.join(d, "cpuset.mems"),
                limits.cpu_mems or read(os.path.join(parent, "cpuset.mems")) or "",
            )

        if limits.devices:
            if "devices" not in self.mounts:
                raise LaunchFailed("the v1 devices controller is not mounted", "mount the devices hierarchy")
            from .devices_v1 import apply as apply_devices

            apply_devices(self._dir("devices"), limits.devices)

    def add(self, pid: int) -> None:
        for d in self.dirs():
            if os.path.isdir(d):
                write(os.path.join(d, "cgroup.procs"), str(pid))

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
        while True:
            write(state, want)
            now = (read(state) or "").strip()
            if now == want or not os.path.exists(state):
                return
            if time.monotonic() > deadline:
                raise LaunchFailed(f"cgroup did not become {want} (state {now})")
            time.sleep(0.005)

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
