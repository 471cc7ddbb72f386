"""The layer cache: one unpacked snapshot per image content, shared by every bundle made from it.

Layout under the state root (``--root``): ``ROOT/.images/snapshots/<key>/rootfs`` where ``key`` is the
sha256 of the image's ChainID (image-spec config.md "Layer ChainID": the diff-ids folded in order) and
of the unpack options that change the result (``keep_setuid``, ownership applied or not).  A snapshot is
built in ``ROOT/.images/tmp/`` and renamed into place only when every layer verified; a half-built one
is never used.  An image whose lower layers are another cached image's whole stack starts from a private
copy of that snapshot and unpacks only its own layers.  The cache directories are mode 0700.

Bundles get the snapshot's tree (``materialize``) by the cheapest means that keeps sandboxes apart:

* **reflink** (``FICLONE``, btrfs/XFS): a private copy-on-write copy;
* **copy** otherwise.

Never hard links into a bundle, read-only or not: a bundle's files would then *be* the cache's inodes, and
whoever can edit the bundle's config.json (``root.readonly: false``) would let that sandbox rewrite the
cache and every other bundle made from it.  A read-only rootfs is a promise of the config, which its
author can change; the cache's integrity must not rest on it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
from dataclasses import dataclass

from .. import posix

FICLONE = 0x40049409  # linux/fs.h _IOW(0x94, 9, int)


def chain_id(diff_ids: list[str]) -> str:
    """ChainID of the layer stack (image-spec config.md): ``sha256:<hex>``."""
    chain = diff_ids[0] if diff_ids else "sha256:" + hashlib.sha256(b"").hexdigest()
    for d in diff_ids[1:]:
        chain = "sha256:" + hashlib.sha256(f"{chain} {d}".encode()).hexdigest()
    return chain


def snapshot_key(diff_ids: list[str], keep_setuid: bool, chown: bool) -> str:
    """The cache key (64 hex) for an image's layers unpacked with these options.  The trailing version
    changes whenever unpacking changes its result (v2: setuid/setgid dropped from directories too), so a
    snapshot made by an older unpacker is never reused."""
    opts = f"{chain_id(diff_ids)} setuid={int(keep_setuid)} chown={int(chown)} v2"
    return hashlib.sha256(opts.encode()).hexdigest()


class Cache:
    """``ROOT/.images``: ``lookup`` a finished snapshot, ``building`` a temp dir, ``commit`` it."""

    def __init__(self, root: str) -> None:
        self.dir = os.path.join(root, ".images")
        for d in (root, self.dir, os.path.join(self.dir, "snapshots"), os.path.join(self.dir, "tmp")):
            os.makedirs(d, mode=0o700, exist_ok=True)
        self._held: dict[str, int] = {}
        self._sweep()

    def _sweep(self) -> None:
        """Remove builds whose builder is gone (killed mid-unpack): a live builder holds ``flock(2)``
        on its directory, so a lock we can take is an abandoned build's."""
        tmp = os.path.join(self.dir, "tmp")
        for name in os.listdir(tmp):
            try:
                fd = os.open(os.path.join(tmp, name), os.O_RDONLY | posix.O_DIRECTORY | posix.O_NOFOLLOW)
            except OSError:
                continue
            try:
                held = posix.flock_exclusive(fd, wait=False)
            except OSError:
                held = False
            if not held:
                os.close(fd)
                continue
            shutil.rmtree(os.path.join(tmp, name), ignore_errors=True)
            os.close(fd)

    def snapshot(self, key: str) -> str:
        return os.path.join(self.dir, "snapshots", key)

    def lookup(self, key: str) -> str | None:
        """The rootfs of a finished snapshot, or None."""
        path = os.path.join(self.snapshot(key), "rootfs")
        return path if os.path.isdir(path) and not os.path.islink(path) else None

    def building(self, with_rootfs: bool = True) -> str:
        """A fresh temp directory to build a snapshot in (``DIR/rootfs`` made, mode 0755, if asked),
        locked until ``commit`` or ``abandon``."""
        tmp = tempfile.mkdtemp(dir=os.path.join(self.dir, "tmp"))
        fd = os.open(tmp, os.O_RDONLY | posix.O_DIRECTORY | posix.O_NOFOLLOW | posix.O_CLOEXEC)
        posix.flock_exclusive(fd)
        self._held[tmp] = fd
        if with_rootfs:
            os.mkdir(os.path.join(tmp, "rootfs"), 0o755)
        return tmp

    def abandon(self, tmp: str) -> None:
        """Remove a build that failed."""
        shutil.rmtree(tmp, ignore_errors=True)
        self._release(tmp)

    def _release(self, tmp: str) -> None:
        fd = self._held.pop(tmp, None)
        if fd is not None:
            os.close(fd)

    def commit(self, tmp: str, key: str) -> str:
        """Rename ``tmp`` into place; if another build won the race, keep theirs.  Returns its rootfs."""
        try:
            os.rename(tmp, self.snapshot(key))
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
        self._release(tmp)
        return os.path.join(self.snapshot(key), "rootfs")


@dataclass
class Materialized:
    """How a bundle's rootfs was made: ``method`` (reflink or copy), files, bytes copied."""

    method: str
    files: int = 0
    bytes_copied: int = 0


def materialize(src: str, dst: str, readonly: bool) -> Materialized:
    """Reproduce the tree ``src`` (a snapshot rootfs, ours) at ``dst`` (made here; must not exist):
    modes, owners, mtimes, symlinks and hard links kept.  See the module docstring for the method."""
    os.mkdir(dst, 0o700)
    res = Materialized("reflink")  # never "hardlink": see the module docstring
    seen: dict[tuple[int, int], str] = {}
    dirs: list[tuple[str, os.stat_result]] = []
    for top, subdirs, files in os.walk(src):
        rel = os.path.relpath(top, src)
        out = dst if rel == "." else os.path.join(dst, rel)
        dirs.append((out, os.lstat(top)))
        for name in subdirs + files:
            s_path, d_path = os.path.join(top, name), os.path.join(out, name)
            st = os.lstat(s_path)
            if stat.S_ISDIR(st.st_mode):
                os.mkdir(d_path, 0o700)
            elif stat.S_ISLNK(st.st_mode):
                os.symlink(os.readlink(s_path), d_path)
                _owner(d_path, st, link=True)
            elif stat.S_ISREG(st.st_mode):
                res.files += 1
                ino = (st.st_dev, st.st_ino)
                if st.st_nlink > 1 and ino in seen:
                    os.link(seen[ino], d_path, follow_symlinks=False)
                else:
                    _copy(s_path, d_path, st, res)
                    seen[ino] = d_path
    for path, st in reversed(dirs):  # children first, so a 0555 directory is filled before it closes
        _owner(path, st, link=False)
        os.chmod(path, stat.S_IMODE(st.st_mode))
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    return res


def _owner(path: str, st: os.stat_result, link: bool) -> None:
    if posix.geteuid() == 0:
        posix.chown(path, st.st_uid, st.st_gid, follow=not link)


def _copy(src: str, dst: str, st: os.stat_result, res: Materialized) -> None:
    with open(src, "rb") as fi:
        fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | posix.O_NOFOLLOW | posix.O_CLOEXEC, 0o600)
        try:
            cloned = False
            if res.method == "reflink":
                try:
                    posix.ioctl(fd, FICLONE, fi.fileno())
                    cloned = True
                except OSError:
                    res.method = "copy"  # this file system cannot: copy the rest without trying again
            if not cloned:
                with os.fdopen(os.dup(fd), "wb") as fo:
                    shutil.copyfileobj(fi, fo, 1 << 20)
                res.bytes_copied += st.st_size
            if posix.geteuid() == 0:
                posix.fchown(fd, st.st_uid, st.st_gid)
            posix.fchmod(fd, stat.S_IMODE(st.st_mode))
            os.utime(fd, ns=(st.st_atime_ns, st.st_mtime_ns))
        finally:
            os.close(fd)
