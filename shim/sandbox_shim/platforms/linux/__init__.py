"""Linux: bubblewrap + cgroups (ARCHITECTURE.md section 6).

Besides the package's ``SYS_PLATFORM``, this file holds the host's identity facts, each with this one
reader, because every Linux path loads the package anyway (the lifecycle verbs' capability cache key,
``confine``, and the exec helper ``enter.py``, which may import nothing more before ``setns``): a
module of their own would cost each of them one more import.  Only ``os`` is imported.

Which boot: ``boot_id`` (``/proc/sys/kernel/random/boot_id``, proc(5): a random UUID, new with every
boot), for the capability cache key (``hostkey``) and the Landlock ABI ``confine`` keeps per boot
(``confine_state``).

Which namespace: ``/proc/PID/ns/NAME`` files are spelled (``ns_path``) and compared here only.  Two
namespace files name the same namespace when their device and inode agree (ioctl_ns(2), "the (st_dev,
st_ino) pair ... identifies a namespace"; namespaces(7) "/proc/[pid]/ns/ directory"): joins, hooks'
nsenter options, the refusals of a host namespace, the probes and the cache key all ask these
functions.  ``pid`` may be ``"self"`` (this process) or ``"1"`` (init).
"""

from __future__ import annotations

import os


def boot_id() -> str:
    """This boot's id, stripped; "" when it cannot be read."""
    try:
        with open("/proc/sys/kernel/random/boot_id", "rb") as fh:
            return fh.read(64).strip().decode("ascii", "replace")
    except OSError:
        return ""


def ns_path(pid: int | str, name: str) -> str:
    """``/proc/PID/ns/NAME`` (``name``: the file's name, ``net``, ``mnt``, ``uts``, ...)."""
    return f"/proc/{pid}/ns/{name}"


def ns_identity(pid: int | str, name: str) -> tuple[int, int]:
    """``(st_dev, st_ino)`` of ``pid``'s namespace ``name``.

    Raises: OSError (``FileNotFoundError``: the process is gone or the kernel has no such namespace)."""
    st = os.stat(ns_path(pid, name))
    return st.st_dev, st.st_ino


def is_namespace_of(info: os.stat_result, pid: int | str, name: str) -> bool:
    """True when ``info`` (a stat or fstat of a namespace file, e.g. a path a config joins) is
    ``pid``'s namespace ``name``.  Raises: OSError as ``ns_identity``."""
    return (info.st_dev, info.st_ino) == ns_identity(pid, name)


def ns_shared(pid: int | str, name: str) -> bool:
    """True when ``pid`` is in this process's namespace ``name``.  Raises: OSError as ``ns_identity``."""
    return ns_identity(pid, name) == ns_identity("self", name)


#: the ``sys.platform`` value this package serves: the one place it is stated for the tooling
#: (``scripts/mypy-platform`` checks each folder as mypy sees it on that OS; the tests take the
#: platforms from the folders)
SYS_PLATFORM = "linux"
