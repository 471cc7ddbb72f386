"""The Linux part of the capability cache key: what may change a probe's answer, read cheaply.

bwrap's identity is that of the binary create runs (``locate.bwrap_path``); the cgroup layout is the
detected hierarchies (``cgroups.detect.layout_of``) and each cgroup mount's options, read fresh
from /proc/self/mountinfo (proc(5); parsed by ``sandbox_shim.mountinfo``).
"""

from __future__ import annotations

from ...mountinfo import Mount
from ...mountinfo import read as read_mountinfo
from .locate import bwrap_stat_identity


def cgroup_mounts(table: list[Mount]) -> str:
    """The cgroup mounts as this process sees them: mount point, mount options (``ro``/``rw``...),
    filesystem type and super options of each ``cgroup``/``cgroup2`` mount, mount ids left out.
    A hierarchy remounted read-only changes this text."""
    out = [
        f"{m.mount_point} {m.options} {m.fstype} {m.super_options}"
        for m in table
        if m.fstype in ("cgroup", "cgroup2")
    ]
    return ";".join(sorted(out))


def cache_facts() -> dict[str, str]:
    """``{"bwrap": bwrap_stat_identity(), "cgroups": "<layout fingerprint>|<cgroup mounts>"}``."""
    from .cgroups.detect import layout_of

    table = read_mountinfo() or []
    return {
        "bwrap": bwrap_stat_identity(),
        "cgroups": f"{layout_of(table).fingerprint()}|{cgroup_mounts(table)}",
    }
