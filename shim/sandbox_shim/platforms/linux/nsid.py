"""Namespace identity: which namespace a ``/proc/PID/ns/NAME`` file names, and whether two are one.

Two namespace files name the same namespace when their device and inode agree (ioctl_ns(2), "the
(st_dev, st_ino) pair ... identifies a namespace"; namespaces(7) "/proc/[pid]/ns/ directory").  The
one place the package spells those files and compares them: joins, hooks' nsenter options, the
refusals of a host namespace, the probes and the capability cache key all ask this module.  It
imports only ``os``, so the exec helper (``enter.py``, which may import nothing more before
``setns``) uses it too.  ``pid`` may be ``"self"`` (this process) or ``"1"`` (init).
"""

from __future__ import annotations

import os


def path(pid: int | str, name: str) -> str:
    """``/proc/PID/ns/NAME`` (``name``: the file's name, ``net``, ``mnt``, ``uts``, ...)."""
    return f"/proc/{pid}/ns/{name}"


def identity(pid: int | str, name: str) -> tuple[int, int]:
    """``(st_dev, st_ino)`` of ``pid``'s namespace ``name``.

    Raises: OSError (``FileNotFoundError``: the process is gone or the kernel has no such namespace)."""
    st = os.stat(path(pid, name))
    return st.st_dev, st.st_ino


def is_namespace_of(info: os.stat_result, pid: int | str, name: str) -> bool:
    """True when ``info`` (a stat or fstat of a namespace file, e.g. a path a config joins) is
    ``pid``'s namespace ``name``.  Raises: OSError as ``identity``."""
    return (info.st_dev, info.st_ino) == identity(pid, name)


def shared(pid: int | str, name: str) -> bool:
    """True when ``pid`` is in this process's namespace ``name``.  Raises: OSError as ``identity``."""
    return identity(pid, name) == identity("self", name)
