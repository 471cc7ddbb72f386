"""Every path-safety rule in one place.

* ``canonical``: a bundle or root path made absolute (against a given base, not the caller's
  whim) and symlink-resolved, once.
* ``resolve_in_root``: a path from config.json resolved *inside* a root: symlinks are followed as
  if the root were ``/`` (an absolute link restarts at the root, ``..`` stops at it), so the result
  never names a host file outside the root.  This is what runc's securejoin does.
* ``ensure_in_root``: the same, creating missing directories (or an empty file) inside the root.
"""

from __future__ import annotations

import errno
import os
import stat

MAX_SYMLINKS = 40  # as the kernel's path walk (path_resolution(7))


def canonical(path: str, base: str | None = None) -> str:
    """Absolute, symlink-free form of ``path``; a relative path is taken against ``base`` (default: cwd)."""
    if not os.path.isabs(path):
        path = os.path.join(base or os.getcwd(), path)
    return os.path.realpath(path)


def resolve_in_root(root: str, path: str) -> str:
    """Host path of ``path`` as seen inside ``root``, never outside it.

    Args:
        root: canonical absolute directory (the rootfs).
        path: a path inside the sandbox (absolute or relative to its ``/``).
    Returns:
        an absolute host path under ``root``; the last components may not exist yet.
    Raises:
        OSError(ELOOP): more than ``MAX_SYMLINKS`` links on the way.
    """
    parts = [p for p in path.split("/") if p not in ("", ".")]
    resolved: list[str] = []
    hops = 0
    while parts:
        part = parts.pop(0)
        if part == "..":
            if resolved:
                resolved.pop()
            continue
        host = os.path.join(root, *resolved, part)
        try:
            st = os.lstat(host)
        except FileNotFoundError:
            resolved.append(part)
            continue
        if stat.S_ISLNK(st.st_mode):
            hops += 1
            if hops > MAX_SYMLINKS:
                raise OSError(errno.ELOOP, "too many symbolic links", path)
            target = os.readlink(host)
            if target.startswith("/"):
                resolved = []
            parts = [p for p in target.split("/") if p not in ("", ".")] + parts
            continue
        resolved.append(part)
    return os.path.join(root, *resolved)


def inside(root: str, path: str) -> str:
    """``path`` (a host path under ``root``) as the sandbox sees it, e.g. ``/storage``."""
    rel = os.path.relpath(path, root)
    return "/" if rel == "." else "/" + rel


def ensure_in_root(root: str, path: str, is_dir: bool = True) -> str:
    """Resolve ``path`` inside ``root`` and create what is missing there (directories, or an empty file).

    Every component is created with ``mkdir``/``O_CREAT|O_EXCL|O_NOFOLLOW`` one level at a time and
    re-resolved, so a symlink planted on the way is followed only within the root.

    Returns:
        the host path under ``root``.
    Raises:
        OSError: the path exists with the wrong type, or cannot be created.
    """
    target = resolve_in_root(root, path)
    rel = os.path.relpath(target, root)
    cur = root
    comps = [] if rel == "." else rel.split(os.sep)
    for i, comp in enumerate(comps):
        cur = os.path.join(cur, comp)
        last = i == len(comps) - 1
        if os.path.lexists(cur):
            continue
        if last and not is_dir:
            fd = os.open(cur, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            os.close(fd)
        else:
            os.mkdir(cur, 0o755)
    # Re-resolve: nothing on the way may have become a link that leaves the root.
    again = resolve_in_root(root, path)
    if again != target:
        raise OSError(errno.EXDEV, "path changed while being created", path)
    if is_dir and not os.path.isdir(target):
        raise OSError(errno.ENOTDIR, "exists and is not a directory", path)
    return target
