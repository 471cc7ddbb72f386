"""Where bwrap is: the one lookup every user of bwrap shares (create, the capability probe, the
capability cache key, the conformance controls).

``SANDBOX_SHIM_BWRAP`` names the binary; otherwise the first executable ``bwrap`` on ``PATH``, then
``/usr/bin/bwrap``.  No ``shutil``: the lifecycle verbs import this module (the cache key).
"""

from __future__ import annotations

import os

#: environment variable naming the bwrap binary (overrides the PATH lookup); read by ``bwrap_path`` only
BWRAP_ENV = "SANDBOX_SHIM_BWRAP"
#: the last place looked (Debian's and Fedora's package put it there)
DEFAULT_BWRAP = "/usr/bin/bwrap"


def _which(name: str) -> str | None:
    """The first executable regular file ``name`` on ``PATH`` (``shutil.which`` without shutil)."""
    for d in (os.environ.get("PATH") or os.defpath).split(os.pathsep):
        path = os.path.join(d or ".", name)
        if os.access(path, os.X_OK) and not os.path.isdir(path):
            return path
    return None


def bwrap_path() -> str | None:
    """The bwrap executable: ``$SANDBOX_SHIM_BWRAP``, else ``bwrap`` on PATH, else ``/usr/bin/bwrap``
    if it exists; None when there is none."""
    return (
        os.environ.get(BWRAP_ENV)
        or _which("bwrap")
        or (DEFAULT_BWRAP if os.path.exists(DEFAULT_BWRAP) else None)
    )


def bwrap_stat_identity() -> str:
    """The bwrap ``bwrap_path`` finds as ``"path|realpath|ino|size|mtime_ns|ctime_ns"``, or ``"absent"``.

    A replaced or rewritten binary changes its inode or ctime (stat(2): ctime cannot be set by a user),
    so this stands for bwrap's version and behaviour without running ``bwrap --version``.
    """
    path = bwrap_path()
    if path is None:
        return "absent"
    try:
        st = os.stat(path)
    except OSError:
        return "absent"
    return f"{path}|{os.path.realpath(path)}|{st.st_ino}|{st.st_size}|{st.st_mtime_ns}|{st.st_ctime_ns}"
