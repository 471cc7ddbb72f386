"""The Linux part of the capability cache key: what may change a probe's answer, read cheaply.

bwrap's identity is that of the binary create runs (``locate.bwrap_path``); the cgroup layout is the
detected hierarchies (``cgroups.detect.parse_mountinfo``) and each cgroup mount's options, read fresh
from /proc/self/mountinfo (proc(5)).
"""

from __future__ import annotations

from .locate import bwrap_stat_identity


def cgroup_mounts(mountinfo: str) -> str:
    """The cgroup mounts as this process sees them: mount point, mount options (``ro``/``rw``...),
    filesystem type and super options of each ``cgroup``/``cgroup2`` line of /proc/self/mountinfo
    (proc(5)), mount ids left out.  A hierarchy remounted read-only changes this text."""
    out = []
    for line in mountinfo.splitlines():
        head, sep, tail = line.partition(" - ")
        fields, rest = head.split(), tail.split()
        if sep and len(fields) >= 6 and rest and rest[0] in ("cgroup", "cgroup2"):
            out.append(f"{fields[4]} {fields[5]} {rest[0]} {rest[2] if len(rest) > 2 else ''}")
    return ";".join(sorted(out))


def cache_facts() -> dict[str, str]:
    """``{"bwrap": bwrap_stat_identity(), "cgroups": "<layout fingerprint>|<cgroup mounts>"}``."""
    from .cgroups.detect import parse_mountinfo

    try:
        with open("/proc/self/mountinfo") as fh:
            mountinfo = fh.read().strip()
    except OSError:
        mountinfo = ""
    return {
        "bwrap": bwrap_stat_identity(),
        "cgroups": f"{parse_mountinfo(mountinfo).fingerprint()}|{cgroup_mounts(mountinfo)}",
    }
