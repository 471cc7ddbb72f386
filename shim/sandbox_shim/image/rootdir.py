"""Directory-fd operations confined to one root: how layer entries are written without ever leaving it.

Every path of a layer is resolved *inside* the rootfs being built, one component at a time, with
``openat2(2)`` and ``RESOLVE_IN_ROOT`` where the kernel has it (Linux 5.6+): a symlink planted by an
earlier layer or entry is followed as if the rootfs were ``/`` (an absolute target restarts at the
rootfs, ``..`` stops there), the way the image would see it at run time.  Where ``openat2`` is missing
(probed once: ``ENOSYS``) the walk opens each component with ``O_NOFOLLOW|O_DIRECTORY`` and refuses a
path that goes through any symlink: fail closed, never a host path.  The last component is always
acted on through its parent's fd and never followed (``unlink``/``mkdir``/``symlink``/``link`` with
``dir_fd``, ``O_CREAT|O_EXCL|O_NOFOLLOW`` for files).
"""

from __future__ import annotations

import ctypes
import errno
import os
import posixpath
import stat
import struct
from collections.abc import Iterator
from contextlib import contextmanager

from .. import posix
from .errors import ImageInvalid

_SYS_OPENAT2 = 437  # the same number on every Linux architecture (include/uapi/asm-generic/unistd.h)
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_IN_ROOT = 0x10
MAX_SYMLINKS = 40  # as the kernel's path walk (path_resolution(7))
MAX_DEPTH = 200  # path components of one entry: keeps every walk of the tree (removal, copies) shallow
# getattr: the module imports on every OS (Windows lacks these flags; bundle create refuses there)
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
_openat2_state: list[bool] = []  # probed once per process: [available]


def _libc_syscall() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.syscall
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_long
    return fn


def openat2(dirfd: int, path: str, flags: int, resolve: int) -> int:
    """``openat2(2)`` through libc's ``syscall``; returns an fd.  Raises OSError (``ENOSYS`` if absent)."""
    fn = _libc_syscall()
    if fn is None or not hasattr(os, "O_PATH"):
        raise OSError(errno.ENOSYS, "openat2 unavailable")
    how = struct.pack("QQQ", flags, 0, resolve)  # struct open_how {u64 flags, mode, resolve}
    buf = ctypes.create_string_buffer(how, len(how))
    fd = fn(
        ctypes.c_long(_SYS_OPENAT2),
        ctypes.c_int(dirfd),
        ctypes.c_char_p(os.fsencode(path)),
        buf,
        ctypes.c_size_t(len(how)),
    )
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), path)
    return int(fd)


def have_openat2() -> bool:
    """True when ``openat2`` with ``RESOLVE_IN_ROOT`` works here (tried on ``/``, cached)."""
    if not _openat2_state:
        try:
            os.close(openat2(os.open("/", _DIR_FLAGS), ".", _DIR_FLAGS, RESOLVE_IN_ROOT))
            _openat2_state.append(True)
        except OSError:
            _openat2_state.append(False)
    return _openat2_state[0]


def split_entry(name: str) -> list[str]:
    """The components of a layer entry name, relative to the rootfs.

    Leading ``/`` and ``./`` are dropped (image-spec layer.md: paths are relative to the root); a ``..``
    component is refused, as are a NUL byte and more than ``MAX_DEPTH`` components.  ``[]`` is the
    root itself.  Raises ImageInvalid.
    """
    if "\x00" in name:
        raise ImageInvalid(f"layer entry {name!r} holds a NUL byte", "rebuild the image")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if len(parts) > MAX_DEPTH:
        raise ImageInvalid(
            f"layer entry {name[:60]!r}...: more than {MAX_DEPTH} path components",
            "this is not an ordinary image",
        )
    if ".." in parts:
        raise ImageInvalid(
            f"layer entry {name!r} has a '..' component (it would leave the rootfs)",
            "use an image whose layers name paths inside the root only",
        )
    return parts


class RootDir:
    """An open directory treated as ``/`` for every operation (see the module docstring).

    Args:
        path: the rootfs directory (must exist).
        in_root: use ``openat2(RESOLVE_IN_ROOT)``; default: when the kernel has it.
    """

    def __init__(self, path: str, in_root: bool | None = None) -> None:
        self.path = path
        self.fd = os.open(path, _DIR_FLAGS | posix.O_NOFOLLOW)
        self.in_root = have_openat2() if in_root is None else in_root

    def close(self) -> None:
        os.close(self.fd)

    def _open_dir(self, parts: list[str]) -> int:
        """fd of the directory ``parts`` (must exist).  Raises OSError; ImageInvalid for a symlink
        on the way when ``openat2`` is unavailable."""
        if not parts:
            return os.dup(self.fd)
        if self.in_root:
            return openat2(self.fd, "/".join(parts), _DIR_FLAGS, RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)
        fd = os.dup(self.fd)
        try:
            for i, comp in enumerate(parts):
                try:
                    nfd = os.open(comp, _DIR_FLAGS | posix.O_NOFOLLOW, dir_fd=fd)
                except OSError as e:
                    if e.errno in (errno.ELOOP, errno.ENOTDIR) and stat.S_ISLNK(
                        os.stat(comp, dir_fd=fd, follow_symlinks=False).st_mode
                    ):
                        raise ImageInvalid(
                            f"layer path {'/'.join(parts)!r} goes through the symlink "
                            f"{'/'.join(parts[: i + 1])!r}",
                            "this kernel lacks openat2(2) to resolve it "
                            "inside the rootfs; use Linux 5.6 or later",
                        ) from e
                    raise
                os.close(fd)
                fd = nfd
            return fd
        except BaseException:
            os.close(fd)
            raise

    def parent(self, parts: list[str], create: bool, hops: int = 0) -> int | None:
        """fd of the directory holding ``parts[-1]``; missing directories are made (mode 0755, owned
        by the caller) when ``create``, else None.  Raises ImageInvalid when a non-directory is in the way."""
        dirs = parts[:-1]
        try:
            return self._open_dir(dirs)
        except FileNotFoundError:
            if not create:
                return None
        except NotADirectoryError as e:
            raise ImageInvalid(
                f"layer path {'/'.join(parts)!r}: a non-directory is in the way",
                "the image's layers conflict; rebuild it",
            ) from e
        for i in range(1, len(dirs) + 1):  # walk down, making what is missing
            try:
                os.close(self._open_dir(dirs[:i]))
            except FileNotFoundError:
                pfd = self._open_dir(dirs[: i - 1])
                try:
                    os.mkdir(dirs[i - 1], 0o755, dir_fd=pfd)
                except FileExistsError:  # a dangling symlink: make its target, inside the root
                    if hops >= MAX_SYMLINKS:
                        raise ImageInvalid(
                            f"layer path {'/'.join(parts)!r}: too many symlinks",
                            "the image's layers conflict; rebuild it",
                        ) from None
                    link = os.readlink(dirs[i - 1], dir_fd=pfd)
                    base = "" if link.startswith("/") else "/".join(dirs[: i - 1])
                    target = posixpath.normpath("/" + base + "/" + link)  # '..' stops at the root
                    rest = [p for p in target.split("/") if p] + dirs[i:] + parts[-1:]
                    return self.parent(rest, create, hops + 1)
                finally:
                    os.close(pfd)
            except NotADirectoryError as e:
                raise ImageInvalid(
                    f"layer path {'/'.join(parts)!r}: a non-directory is in the way",
                    "the image's layers conflict; rebuild it",
                ) from e
        return self._open_dir(dirs)

    @contextmanager
    def at(self, parts: list[str], create: bool = True) -> Iterator[int | None]:
        """``with root.at(parts) as pfd``: the parent fd of ``parts`` (None if missing and not ``create``)."""
        fd = self.parent(parts, create)
        try:
            yield fd
        finally:
            if fd is not None:
                os.close(fd)

    def read_file(self, rel: str, limit: int) -> bytes | None:
        """Contents of the regular file ``rel`` inside the root (symlinks resolved inside it), at most
        ``limit`` bytes; None if missing or not a regular file."""
        parts = split_entry(rel)
        flags = os.O_RDONLY | posix.O_NONBLOCK | posix.O_CLOEXEC  # O_NONBLOCK: a FIFO must not hang us
        try:
            if self.in_root:
                fd = openat2(self.fd, "/".join(parts), flags, RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)
            else:
                with self.at(parts, create=False) as pfd:
                    if pfd is None:
                        return None
                    fd = os.open(parts[-1], flags | posix.O_NOFOLLOW, dir_fd=pfd)
        except (OSError, ImageInvalid):
            return None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            return os.read(fd, limit)
        finally:
            os.close(fd)


def remove_at(pfd: int, name: str) -> None:
    """Remove ``name`` in the directory ``pfd`` whatever it is, never following a link (a directory
    is emptied through its own fd, opened ``O_NOFOLLOW``).  A missing name is not an error."""
    try:
        st = os.stat(name, dir_fd=pfd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=pfd)
        return
    fd = os.open(name, _DIR_FLAGS | posix.O_NOFOLLOW, dir_fd=pfd)  # never a link: it was lstat'd a directory
    try:
        for child in os.listdir(fd):
            remove_at(fd, child)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=pfd)
