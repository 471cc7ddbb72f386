"""Host mounts a bind source would carry into the sandbox.

bwrap's ``--bind``/``--ro-bind`` are recursive (``MS_BIND | MS_REC``, bwrap.c ``bind_mount``): a bind of
``/`` or ``/run`` shows every mount below it, the host's ``/proc`` and ``/sys`` included.  A bind source
is refused when it lies in, or has below it, a mount of a kernel file system that exposes the host
(its processes, kernel settings, devices, namespaces).  The list is read from ``/proc/self/mountinfo``
(proc(5), "/proc/pid/mountinfo") by ``mountinfo.py``.
"""

from __future__ import annotations

import os
import sys

#: file system types that show the host's kernel state (proc(5), sysfs(5), kernel Documentation/filesystems)
HOST_KERNEL_FS = frozenset(
    {
        "proc",
        "sysfs",
        "debugfs",
        "tracefs",
        "securityfs",
        "bpf",
        "cgroup",
        "cgroup2",
        "devtmpfs",
        "devpts",
        "configfs",
        "efivarfs",
        "fusectl",
        "mqueue",
        "binfmt_misc",
        "pstore",
        "nsfs",
        "selinuxfs",
        "rpc_pipefs",
        "nfsd",
    }
)


def mounts(mountinfo: str | None = None) -> list[tuple[str, str]] | None:
    """(mount point, file system type) of every mount of this mount namespace (``mountinfo.read``,
    escapes decoded; ``mountinfo`` a mountinfo file, default ``mountinfo.MOUNTINFO``, this
    process's), or None where the file cannot be read (not Linux, no /proc)."""
    from .mountinfo import read

    table = read() if mountinfo is None else read(mountinfo)
    return None if table is None else [(m.mount_point, m.fstype) for m in table]


def _under(path: str, top: str) -> bool:
    return path == top or top == "/" or path.startswith(top.rstrip("/") + "/")


def kernel_mounts_in(source: str, table: list[tuple[str, str]] | None) -> list[tuple[str, str]]:
    """(mount point, type) of each host-kernel mount a recursive bind of ``source`` would show: those
    at or below its real path, and the mount the source itself lies in.

    Raises:
        OSError: the mount table could not be read on Linux (fail closed: nothing is known).
    """
    if table is None:
        if sys.platform.startswith("linux"):
            raise OSError("cannot read /proc/self/mountinfo")
        return []
    real = os.path.realpath(source)
    found = [(mp, fs) for mp, fs in table if fs in HOST_KERNEL_FS and _under(mp, real)]
    holders = [(mp, fs) for mp, fs in table if _under(real, mp)]
    if holders:
        deepest = max(len(e[0]) for e in holders)
        mp, fs = [e for e in holders if len(e[0]) == deepest][-1]  # the last-listed one is on top
        if fs in HOST_KERNEL_FS and (mp, fs) not in found:
            found.append((mp, fs))
    return found
