"""The counters a limit leaves behind in a cgroup, as ``control.Facts``: OOM kills, failcnt, pids.max
hits, usage and limits.  Read with the managers' own parsers (``base.read_int``, ``base.keyed``), so
one set of rules reads every cgroup file.

Sources: kernel docs admin-guide/cgroup-v1/{memory,pids,cpuacct}.rst and admin-guide/cgroup-v2.rst.
"""

from __future__ import annotations

import os

from ....control import Facts
from .base import keyed, read, read_int

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .base import CgroupManager

#: v1 memory.limit_in_bytes reads this (PAGE_COUNTER_MAX pages, rounded) when there is no limit
_V1_UNLIMITED = 1 << 62


def read_facts(cg: CgroupManager) -> Facts:
    """Read ``Facts`` from a v1 or v2 manager's files (missing files give None / 0)."""
    f = Facts()
    u = cg.usage()
    f.memory_usage, f.memory_peak, f.pids_current = u.memory_bytes, u.memory_peak_bytes, u.pids
    f.io_read_bytes, f.io_write_bytes = u.io_read_bytes, u.io_write_bytes
    if u.cpu_user_us is not None:
        f.cpu_user_ns, f.cpu_kernel_ns = u.cpu_user_us * 1000, (u.cpu_system_us or 0) * 1000
    from .v1 import V1Manager
    from .v2 import V2Manager

    if isinstance(cg, V2Manager):
        d = cg.dir
        mem_ev = keyed(read(os.path.join(d, "memory.events")))
        f.memory_failcnt = mem_ev.get("max")
        # processes the OOM killer killed, and whole-cgroup kills (memory.oom.group, Linux 5.19)
        f.oom_kills = mem_ev.get("oom_kill", 0) + mem_ev.get("oom_group_kill", 0)
        f.psi = cg.pressure()
        f.memory_limit = read_int(os.path.join(d, "memory.max"))
        f.pids_limit = read_int(os.path.join(d, "pids.max"))
        f.pids_max_hits = keyed(read(os.path.join(d, "pids.events"))).get("max", 0)
        usec = keyed(read(os.path.join(d, "cpu.stat"))).get("usage_usec")
        f.cpu_total_ns = usec * 1000 if usec is not None else None
        return f

    if not isinstance(cg, V1Manager):
        return f
    mounts, rel = cg.mounts, cg.path.lstrip("/")

    def v1(ctl: str, name: str) -> str:
        return os.path.join(mounts.get(ctl, "/nonexistent"), rel, name)

    f.memory_failcnt = read_int(v1("memory", "memory.failcnt"))
    f.oom_kills = keyed(read(v1("memory", "memory.oom_control"))).get("oom_kill", 0)
    lim = read_int(v1("memory", "memory.limit_in_bytes"))
    f.memory_limit = lim if lim is not None and lim < _V1_UNLIMITED else None
    f.pids_limit = read_int(v1("pids", "pids.max"))
    f.pids_max_hits = keyed(read(v1("pids", "pids.events"))).get("max", 0)
    f.cpu_total_ns = read_int(v1("cpuacct", "cpuacct.usage"))
    return f
