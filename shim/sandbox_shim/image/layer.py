"""Applying one layer (a tar stream) onto a rootfs, following the OCI image-spec's layer.md.

* Entries are applied in order; a later entry replaces an earlier one of the same name (a directory
  over a directory keeps its contents and takes the new metadata).
* Whiteouts: ``.wh.NAME`` removes ``NAME`` from the layers below; ``.wh..wh..opq`` removes every entry
  of its directory that came from the layers below (entries of this layer stay).  Whiteout files are
  never written.
* Kept: regular files, directories, symlinks, hard links (to an entry already in the rootfs), modes,
  ownership (when running as root), mtimes of files, the sticky bit (it only narrows who may
  unlink).  Dropped: setuid/setgid bits of every entry, directories included, unless ``keep_setuid`` (a
  warning says how many); device nodes and FIFOs (skipped with a warning: a bundle
  gets ``/dev`` from the runtime); extended attributes, file capabilities (``security.capability``)
  included.
* Every path is resolved inside the rootfs (``rootdir.RootDir``); ``..`` components are refused.
* tar's extension headers (PAX, GNU long names) above 1 MiB are refused before they are read into memory;
  sparse members are refused (their holes are not bounded by the stream's size); at most
  ``MAX_ENTRIES`` entries per layer.
"""

from __future__ import annotations

import os
import stat
import tarfile
from collections.abc import Callable
from dataclasses import dataclass, field

from .. import posix
from .errors import ImageInvalid
from .rootdir import RootDir, remove_at, split_entry

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .blobs import Reader

WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"
EXT_HEADER_LIMIT = 1 << 20
MAX_ENTRIES = 1_000_000  # per layer: bounds the memory the opaque-directory bookkeeping needs
_EXT_TYPES = {
    tarfile.GNUTYPE_LONGNAME,
    tarfile.GNUTYPE_LONGLINK,
    tarfile.XHDTYPE,
    tarfile.XGLTYPE,
    tarfile.SOLARIS_XHDTYPE,
}


class _BoundedTarInfo(tarfile.TarInfo):
    """tarfile reads a PAX/GNU extension header's whole body into memory: check its size first."""

    def _proc_member(self, tf: tarfile.TarFile) -> tarfile.TarInfo:
        if self.type in _EXT_TYPES and self.size > EXT_HEADER_LIMIT:
            raise ImageInvalid(
                f"layer: a tar extension header of {self.size} bytes (limit {EXT_HEADER_LIMIT})",
                "this is not an ordinary image",
            )
        member: tarfile.TarInfo = super()._proc_member(tf)  # type: ignore[misc]  # private: not in typeshed
        return member


@dataclass
class LayerReport:
    """What applying layers did: counts of entries, and warnings (one line each, counted per kind)."""

    entries: int = 0
    reused_layers: int = 0
    skipped_devices: list[str] = field(default_factory=list)
    setuid_dropped: int = 0
    chown_failed: int = 0

    def warnings(self) -> list[str]:
        out = []
        if self.skipped_devices:
            ex = ", ".join(self.skipped_devices[:3])
            out.append(
                f"skipped {len(self.skipped_devices)} device node/FIFO entries ({ex}); "
                "the runtime provides /dev"
            )
        if self.setuid_dropped:
            out.append(
                f"dropped the setuid/setgid bit of {self.setuid_dropped} entries "
                "(pass --keep-setuid to keep them)"
            )
        if self.chown_failed:
            out.append(
                f"could not set the owner of {self.chown_failed} entries (not running as root); "
                "they belong to the caller"
            )
        return out


@dataclass
class Applier:
    """Applies layers onto ``root`` (a RootDir).  ``keep_setuid``: keep S_ISUID/S_ISGID bits."""

    root: RootDir
    keep_setuid: bool = False
    max_entries: int = MAX_ENTRIES
    report: LayerReport = field(default_factory=LayerReport)
    _chown: bool = field(default_factory=lambda: posix.geteuid() == 0)

    def apply(self, stream: Reader, what: str, progress: Callable[[], None] | None = None) -> None:
        """Read the tar ``stream`` to its end-of-archive and apply every entry.  Raises ImageInvalid."""
        created: set[tuple[str, ...]] = set()
        try:
            # typeshed asks a fileobj for write/tell/seek/close; stream mode ("r|") only reads (tarfile docs)
            tf = tarfile.open(fileobj=stream, mode="r|", tarinfo=_BoundedTarInfo)  # type: ignore[call-overload]
            n = 0
            while (m := tf.next()) is not None:
                tf.members.clear()  # stream mode keeps every header otherwise: memory would grow per entry
                n += 1
                if n > self.max_entries:
                    raise ImageInvalid(
                        f"{what}: more than {self.max_entries} entries", "this is not an ordinary image"
                    )
                self._entry(tf, m, created)
                self.report.entries += 1
                if progress:
                    progress()
        except tarfile.TarError as e:
            raise ImageInvalid(
                f"{what}: not a valid tar stream ({str(e)[:80]})", "the layer is corrupt; rebuild the image"
            ) from None
        except OSError as e:
            raise ImageInvalid(
                f"{what}: cannot apply an entry ({e.strerror}: {e.filename})",
                "the layer conflicts with the ones below it",
            ) from None

    def _entry(self, tf: tarfile.TarFile, m: tarfile.TarInfo, created: set[tuple[str, ...]]) -> None:
        parts = split_entry(m.name)
        if not parts:  # the root itself ("./"): metadata only
            if m.isdir():
                self._meta_fd(self.root.fd, m)
            return
        base = parts[-1]
        if base == OPAQUE:
            with self.root.at(parts, create=False) as pfd:
                if pfd is not None:
                    prefix = tuple(parts[:-1])
                    for name in os.listdir(pfd):
                        if prefix + (name,) not in created:
                            remove_at(pfd, name)
            return
        if base.startswith(WHITEOUT):
            target = base[len(WHITEOUT) :]
            if target in ("", ".", ".."):
                raise ImageInvalid(f"layer entry {m.name!r}: a whiteout of {target!r}", "rebuild the image")
            with self.root.at(parts, create=False) as pfd:
                if pfd is not None:
                    remove_at(pfd, target)
            return
        if m.ischr() or m.isblk() or m.isfifo():
            self.report.skipped_devices.append("/" + "/".join(parts))
            return
        if m.issparse():  # holes are not in the stream: a sparse member could write terabytes of zeros
            raise ImageInvalid(f"layer entry {m.name!r}: sparse files are not supported", "rebuild the image")
        if not (m.isreg() or m.isdir() or m.issym() or m.islnk()):
            raise ImageInvalid(
                f"layer entry {m.name!r}: unsupported tar type {m.type!r}", "rebuild the image"
            )
        created.add(tuple(parts))
        with self.root.at(parts) as pfd:
            assert pfd is not None
            self._place(tf, m, pfd, base, parts)

    def _place(self, tf: tarfile.TarFile, m: tarfile.TarInfo, pfd: int, name: str, parts: list[str]) -> None:
        try:
            old = os.stat(name, dir_fd=pfd, follow_symlinks=False)
        except FileNotFoundError:
            old = None
        if old is not None and not (m.isdir() and stat.S_ISDIR(old.st_mode)):
            remove_at(pfd, name)
        if m.isdir():
            if old is None or not stat.S_ISDIR(old.st_mode):
                os.mkdir(name, 0o700, dir_fd=pfd)
            fd = os.open(
                name, os.O_RDONLY | posix.O_DIRECTORY | posix.O_NOFOLLOW | posix.O_CLOEXEC, dir_fd=pfd
            )
            try:
                self._meta_fd(fd, m)
            finally:
                os.close(fd)
        elif m.isreg():
            fd = os.open(
                name,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | posix.O_NOFOLLOW | posix.O_CLOEXEC,
                0o600,
                dir_fd=pfd,
            )
            try:
                src = tf.extractfile(m)
                if src is not None:
                    while chunk := src.read(1 << 20):
                        os.write(fd, chunk)
                self._meta_fd(fd, m)
                os.utime(fd, (m.mtime, m.mtime))
            finally:
                os.close(fd)
        elif m.issym():
            os.symlink(m.linkname, name, dir_fd=pfd)
            self._chown_at(pfd, name, m)
            try:
                os.utime(name, (m.mtime, m.mtime), dir_fd=pfd, follow_symlinks=False)
            except OSError:
                pass
        else:  # hard link: the target is an entry already in the rootfs, resolved inside it
            tparts = split_entry(m.linkname)
            if not tparts:
                raise ImageInvalid(f"layer entry {m.name!r}: a hard link to the root", "rebuild the image")
            with self.root.at(tparts, create=False) as tfd:
                if tfd is None:
                    raise ImageInvalid(
                        f"layer entry {m.name!r}: hard link target {m.linkname!r} missing",
                        "rebuild the image",
                    )
                try:
                    os.link(tparts[-1], name, src_dir_fd=tfd, dst_dir_fd=pfd, follow_symlinks=False)
                except FileNotFoundError:
                    raise ImageInvalid(
                        f"layer entry {m.name!r}: hard link target {m.linkname!r} missing",
                        "rebuild the image",
                    ) from None
                except (IsADirectoryError, PermissionError):
                    raise ImageInvalid(
                        f"layer entry {m.name!r}: hard link to a directory or a protected file",
                        "rebuild the image",
                    ) from None

    def _mode(self, m: tarfile.TarInfo) -> int:
        mode = m.mode & 0o7777
        if not self.keep_setuid and mode & (stat.S_ISUID | stat.S_ISGID):
            self.report.setuid_dropped += 1
            mode &= ~(stat.S_ISUID | stat.S_ISGID)
        return mode

    def _meta_fd(self, fd: int, m: tarfile.TarInfo) -> None:
        if self._chown:
            try:
                posix.fchown(fd, m.uid, m.gid)
            except OSError:
                self.report.chown_failed += 1
        else:
            self.report.chown_failed += 1
        posix.fchmod(fd, self._mode(m))  # after chown, which clears setuid bits

    def _chown_at(self, pfd: int, name: str, m: tarfile.TarInfo) -> None:
        if not self._chown:
            self.report.chown_failed += 1
            return
        try:
            posix.chown(name, m.uid, m.gid, dir_fd=pfd)
        except OSError:
            self.report.chown_failed += 1
