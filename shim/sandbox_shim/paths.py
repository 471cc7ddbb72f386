"""Every path-safety rule in one place.

* ``canonical``: a bundle or root path made absolute (against a given base, not the caller's
  whim) and symlink-resolved, once.
* ``resolve_in_root``: a path from config.json resolved *inside* a root: symlinks are followed as
  if the root were ``/`` (an absolute link restarts at the root, ``..`` stops at it), so the result
  never names a host file outside the root.  This is what runc's securejoin does.
* ``ensure_in_root``: the same, creating missing directories (or an empty file) inside the root.
* ``View``: the sandbox's whole tree (rootfs + mounts in order): a mount destination, masked or
  read-only path or cwd is resolved in the mount that covers it, created only in the rootfs or a
  read-write bind, and never through a symlink of a kernel file system (``/proc/self/root``,
  ``/dev/fd``) — bwrap is then given symlink-free paths.
* ``HostFs``: the one typed view of the host's files a ``View`` reads (lstat, readlink, isdir);
  a renderer given a fake one touches no file system at all.
"""

from __future__ import annotations

import errno
import os
import stat

from . import posix
from .values import FrozenValue

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
    inner, _ = View(root).resolve(path)  # the rootfs alone: the same walk bwrap's tree gets
    return os.path.join(root, inner.lstrip("/")) if inner != "/" else root


def bind_source(bundle: str, source: str) -> str:
    """Host path of a bind mount's ``source`` (relative sources are taken against ``bundle``).

    A source inside the bundle is walked one component at a time and must contain no symlink:
    ``storage/`` is writable by the tenant, so a link planted there (``storage/data -> /etc``) would
    otherwise turn the operator's bind into one of any host path.  A source outside the bundle is the
    operator's own path and is resolved with ``realpath``.

    Args:
        bundle: canonical bundle directory.
        source: the config's ``mounts[].source``.
    Returns:
        an absolute host path.
    Raises:
        OSError(ELOOP): a component inside the bundle is a symlink (its path is ``filename``).
    """
    norm = os.path.normpath(source if os.path.isabs(source) else os.path.join(bundle, source))
    if not under(norm, bundle):
        return os.path.realpath(norm)
    cur = bundle
    for comp in os.path.relpath(norm, bundle).split(os.sep):
        if comp in ("", "."):
            continue
        cur = os.path.join(cur, comp)
        if os.path.islink(cur):
            raise OSError(errno.ELOOP, "bind source passes through a symlink inside the bundle", cur)
    return norm


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
            fd = os.open(cur, os.O_WRONLY | os.O_CREAT | os.O_EXCL | posix.O_NOFOLLOW, 0o644)
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


# -- the sandbox's view: the rootfs plus the mounts made on it, in order --------------------------

#: symbolic links bwrap's ``--dev`` makes (bwrap.c setup_newroot): a path through one is refused
DEV_SYMLINKS = frozenset({"fd", "stdin", "stdout", "stderr", "core", "ptmx"})
#: file systems whose content is on the host (the rootfs, a bind source)
HOST_BACKED = frozenset({"rootfs", "bind"})
#: file systems that are new and empty when mounted (nothing in them to follow)
EMPTY = frozenset({"tmpfs", "mqueue", "cgroup"})
#: kernel file systems: the host's own mount shows their shape (same kernel)
KERNEL = {"proc": "/proc", "sysfs": "/sys"}


class Layer(FrozenValue):
    """One mount of the sandbox's tree, as far as path resolution needs it.

    Attributes:
        dest: where it is mounted, as a normalised symlink-free sandbox path.
        fs: ``rootfs`` | ``bind`` | ``tmpfs`` | ``mqueue`` | ``cgroup`` | ``proc`` | ``sysfs`` | ``dev``.
        host: host path backing it (the rootfs, a bind source); "" for the others.
        writable: missing mount points may be created in it (the rootfs, a read-write bind).
    """

    __match_args__ = ("dest", "fs", "host", "writable")
    dest: str
    fs: str
    host: str
    writable: bool

    def __init__(self, dest: str, fs: str, host: str = "", writable: bool = False) -> None:
        self._set(dest=dest, fs=fs, host=host, writable=writable)


def under(path: str, top: str) -> bool:
    """Whether normalised ``path`` is ``top`` or below it."""
    return top == "/" or path == top or path.startswith(top + "/")


class HostFs:
    """What a ``View`` (and a renderer built on it) may observe of the host's files, one method per
    question, so the walk is a function of the answers: the real file system here; tests pass an
    in-memory one.  Links are not followed unless a method says so."""

    def kind(self, path: str) -> str | None:
        """``"link"``, ``"dir"`` or ``"file"`` (anything else) as lstat(2) sees ``path``; None when it
        cannot be looked at (ENOENT, ENOTDIR under a file, EACCES)."""
        try:
            st = os.lstat(path)
        except OSError:
            return None
        return "link" if stat.S_ISLNK(st.st_mode) else "dir" if stat.S_ISDIR(st.st_mode) else "file"

    def readlink(self, path: str) -> str:
        """The target of the symbolic link ``path`` (readlink(2)); OSError when it is none."""
        return os.readlink(path)

    def lexists(self, path: str) -> bool:
        """Whether ``path`` exists, a dangling link included (``os.path.lexists``)."""
        return os.path.lexists(path)

    def isdir(self, path: str) -> bool:
        """Whether ``path`` is a directory, following links (``os.path.isdir``)."""
        return os.path.isdir(path)


class View:
    """The file tree bwrap builds: the rootfs at ``/``, then each mount in the order it is made.

    ``resolve`` walks a sandbox path one component at a time, looking each one up in the mount that
    covers it (the last one made on a prefix), following symlinks as the kernel would *inside the
    sandbox* (an absolute link restarts at the sandbox's ``/``, ``..`` stops there) and refusing
    symlinks in kernel file systems (``/proc/self/root``, ``/dev/fd``: they lead to the host while
    bwrap sets up).  The result is symlink-free, so bwrap, given it, follows no link at all
    (runc's securejoin; CVE-2019-19921, CVE-2021-30465 are the races this closes for a static tree).
    """

    def __init__(self, rootfs: str, fs: HostFs | None = None) -> None:
        self.fs = HostFs() if fs is None else fs  # every look at the host's files goes through it
        self.layers = [Layer("/", "rootfs", rootfs, True)]
        self._last: dict[str, int] = {"/": 0}  # dest -> index of the last layer mounted there
        self.masked: set[str] = set()  # destinations hidden by a mask (nothing under them to protect)
        self.entered: set[Layer] = set()  # host-backed layers a resolution looked inside

    def add(self, layer: Layer) -> None:
        """Record a mount made at ``layer.dest`` (already resolved by ``resolve``/``ensure``)."""
        self._last[layer.dest] = len(self.layers)
        self.layers.append(layer)

    def masked_at(self, path: str) -> bool:
        """Whether ``path`` (normalised) is at or below a masked destination (one look-up per component)."""
        cur = path
        while True:
            if (cur or "/") in self.masked:
                return True
            if cur in ("", "/"):
                return False
            cur = cur.rsplit("/", 1)[0]

    def layer_for(self, path: str) -> Layer:
        """The mount that shows ``path`` (a normalised sandbox path): the last made on a prefix.

        Cost: one dict look-up per component of ``path`` (not per mount), so set-up stays linear in
        the number of mounts.
        """
        best = 0
        cur = path
        while True:
            i = self._last.get(cur or "/")
            if i is not None and i > best:
                best = i
            if cur in ("", "/"):
                return self.layers[best]
            cur = cur.rsplit("/", 1)[0]

    def host_of(self, path: str) -> str | None:
        """Host path showing what is at sandbox ``path`` now, or None (an empty fs, bwrap's /dev)."""
        la = self.layer_for(path)
        rel = "" if la.dest == "/" and path == "/" else path[len(la.dest.rstrip("/")) :]
        if la.fs in HOST_BACKED:
            return la.host + rel if rel else la.host
        if la.fs in KERNEL:
            return KERNEL[la.fs] + rel
        return None

    def resolve(self, path: str) -> tuple[str, Layer]:
        """Resolve sandbox ``path`` inside the sandbox's tree.

        Returns:
            (the symlink-free sandbox path, the mount it lies in); trailing components may not exist.
        Raises:
            OSError(ELOOP): too many links, or a symlink in a kernel file system (message names it).
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
            cand = "/" + "/".join([*resolved, part])
            la = self.layer_for(cand)
            if la.fs == "dev" and cand != la.dest:
                first = cand[len(la.dest.rstrip("/")) + 1 :].split("/")[0]
                if first in DEV_SYMLINKS:
                    raise OSError(
                        errno.ELOOP,
                        f"{la.dest.rstrip('/')}/{first} is a symbolic link bwrap "
                        "makes (it leads out of the sandbox while mounts are set up)",
                        path,
                    )
            host = self.host_of(cand)
            if host is None:
                resolved.append(part)
                continue
            self.entered.add(la)
            kind = self.fs.kind(host)
            if kind is None:  # missing (ENOENT) or under a file (ENOTDIR): nothing to follow
                resolved.append(part)
                continue
            if kind == "link":
                if la.fs in KERNEL:
                    raise OSError(
                        errno.ELOOP,
                        f"{cand} is a symbolic link in a kernel file system "
                        f"({la.fs}); it would be followed outside the sandbox",
                        path,
                    )
                hops += 1
                if hops > MAX_SYMLINKS:
                    raise OSError(errno.ELOOP, "too many symbolic links", path)
                target = self.fs.readlink(host)
                if target.startswith("/"):
                    resolved = []
                parts = [p for p in target.split("/") if p not in ("", ".")] + parts
                continue
            resolved.append(part)
        out = "/" + "/".join(resolved)
        return out, self.layer_for(out)

    def ensure(self, path: str, is_dir: bool = True) -> tuple[str, Layer]:
        """Resolve ``path`` and create it where missing — only in the rootfs or a read-write bind.

        Returns:
            (symlink-free sandbox path, its mount).  In an empty or kernel fs nothing is created
            here (bwrap makes the mount point inside that fs, or fails).
        Raises:
            OSError: ELOOP (see ``resolve``); EROFS: missing in a read-only bind (it would be made on
            the host); ENOTDIR/EEXIST: exists with the wrong type; EXDEV: changed while being made.
        """
        dest, la = self.resolve(path)
        host = self.host_of(dest)
        if la.fs not in HOST_BACKED or host is None:
            return dest, la
        if not self.fs.lexists(host):
            if not la.writable:
                raise OSError(
                    errno.EROFS,
                    f"{dest} does not exist and {la.dest} is a read-only bind of "
                    f"{la.host}: it would be created on the host",
                    path,
                )
            ensure_in_root(la.host, os.path.relpath(host, la.host), is_dir)
        elif is_dir and not self.fs.isdir(host):
            raise OSError(errno.ENOTDIR, f"{dest} exists and is not a directory", path)
        return dest, la


def contains(outer: str, inner: str) -> bool:
    """Whether host directory ``outer`` is ``inner`` or one of its ancestors, by identity (st_dev, st_ino).

    Identity rather than names, so a bind-mounted or symlinked alias of an ancestor counts too.  Paths
    that do not exist contain nothing and are contained by nothing.
    """
    try:
        want = os.stat(outer)
    except OSError:
        return False
    cur = os.path.realpath(inner)
    while True:
        try:
            st = os.stat(cur)
        except OSError:
            st = None
        if st is not None and (st.st_dev, st.st_ino) == (want.st_dev, want.st_ino):
            return True
        parent = os.path.dirname(cur)
        if parent == cur:
            return False
        cur = parent


def writable_exposures(
    rootfs: str, root_readonly: bool, binds: list[tuple[str, str, bool]]
) -> list[tuple[str, str]]:
    """(JSON pointer, host path) of every host directory the tenant can write: the rootfs unless it is
    read-only, and each read-write bind source (``binds``: pointer, source, read-only)."""
    out = [] if root_readonly or not rootfs else [("/root/path", rootfs)]
    return out + [(ptr, src) for ptr, src, ro in binds if not ro]


def exposed(exposures: list[tuple[str, str]], protected: list[str]) -> list[tuple[str, str]]:
    """(pointer, protected path) for each protected host path inside a writable exposure."""
    return [(ptr, p) for ptr, host in exposures for p in protected if contains(host, p)]
