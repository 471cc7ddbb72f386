"""The Linux part of the capability cache key: what may change a probe's answer, read cheaply.

bwrap's identity is that of the binary create runs (``locate.bwrap_path``); the cgroup layout is the
detected hierarchies (``cgroups.detect.layout_of``) and each cgroup mount's options, read fresh
from /proc/self/mountinfo (proc(5); parsed by ``sandbox_shim.mountinfo``).
"""

from __future__ import annotations

import os

from ...mountinfo import Mount
from ...mountinfo import read as read_mountinfo
from ...probes.proc import read, status_fields
from . import boot_id, ns_identity
from .locate import bwrap_stat_identity

#: the dynamic loader's cache of shared libraries (ld.so(8), ldconfig(8))
LD_CACHE = "/etc/ld.so.cache"
#: the sysctls that decide whether an unprivileged user namespace can be made (proc(5) /proc/sys)
USERNS_SYSCTLS = (
    "user/max_user_namespaces",
    "kernel/unprivileged_userns_clone",
    "kernel/apparmor_restrict_unprivileged_userns",
)


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


def _ns_inode(kind: str) -> str:
    """The inode of this process's namespace ``kind`` (``ns_identity``), "" if unreadable."""
    try:
        return str(ns_identity("self", kind)[1])
    except OSError:
        return ""


def cache_facts() -> dict[str, str]:
    """The Linux part of the cache key, all text: ``boot_id`` (the package's ``boot_id``, new each
    boot), ``bwrap`` (``bwrap_stat_identity()``), ``cgroups`` (``"<layout fingerprint>|<cgroup
    mounts>"``), ``userns`` (the user namespace's inode), ``confinement`` (Seccomp, NoNewPrivs and
    the effective and bounding capability sets of /proc/self/status), ``sysctls``
    (``USERNS_SYSCTLS``, ``path=value``; ``None`` for one that is absent) and ``ld_cache`` (the
    inode, size and mtime of ``LD_CACHE``: ldconfig(8) rewrites it when a shared library such as
    libseccomp is installed or removed, and the dynamic loader finds libraries by it, ld.so(8));
    ``uncacheable`` (present only under a seccomp filter, whose rules the key cannot hold)."""
    from .cgroups.detect import layout_of

    table = read_mountinfo() or []
    status = status_fields(("Seccomp", "NoNewPrivs", "CapEff", "CapBnd"))
    return {
        "boot_id": boot_id(),
        "bwrap": bwrap_stat_identity(),
        "cgroups": f"{layout_of(table).fingerprint()}|{cgroup_mounts(table)}",
        "userns": _ns_inode("user"),
        "confinement": ";".join(f"{k}={v}" for k, v in status.items()),
        "sysctls": ";".join(f"{p}={read('/proc/sys/' + p)}" for p in USERNS_SYSCTLS),
        "ld_cache": _file_identity(LD_CACHE),
        # a seccomp filter's rules are not visible (only the mode): each filtered caller probes for
        # itself, nothing is read from the cache or kept in it (``probes.cache.cached_report``)
        **({"uncacheable": "seccomp filter"} if status.get("Seccomp") == "2" else {}),
    }


def _file_identity(path: str) -> str:
    try:
        st = os.stat(path)
    except OSError:
        return "-"
    return f"{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"
