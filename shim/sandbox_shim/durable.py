"""Durable file-system steps shared by the state store: atomic writes that survive a crash, removal.

``write_atomic`` (temp file written in full, fsync(2), rename(2), fsync of the directory: rename(2) and
fsync(2) man pages; a reader sees the old or the new content, never a mix or a truncation) and
``rmtree`` (plain files without loading shutil).  No typing at run time: every lifecycle verb loads this.
"""

from __future__ import annotations

import os

from . import posix as _posix
from .errors import StateUnwritable

#: written into ROOT/ID when it is made: only directories carrying it are sandboxes (never rmtree others)
MARKER = ".sandbox-shim"


def fsync_dir(d: str) -> None:
    """fsync(2) a directory so a rename or unlink in it survives a crash of the host."""
    try:
        fd = os.open(d, os.O_RDONLY | _posix.O_DIRECTORY | _posix.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def rmtree(d: str) -> None:
    """``shutil.rmtree(d, ignore_errors=True)``, without loading shutil (and bz2, lzma under it) for the
    usual state directory: plain files only.  Anything else (a subdirectory, an error) goes to rmtree."""
    try:
        with os.scandir(d) as it:
            entries = list(it)
        if not any(e.is_dir(follow_symlinks=False) for e in entries):
            # the marker goes last: a directory is never left marked-but-half-empty unknowingly
            for e in sorted(entries, key=lambda e: e.name == MARKER):
                os.unlink(e.path)
            os.rmdir(d)
            return
    except FileNotFoundError:
        return
    except OSError:
        pass
    import shutil

    shutil.rmtree(d, ignore_errors=True)


def write_atomic(path: str, text: str, mode: int = 0o600, durable: bool = True) -> None:
    """Write ``text`` to ``path`` durably: a temporary file in the same directory, written in full,
    fsync(2), rename(2), fsync of the directory.

    A reader sees the old content or the new, never a mix or a truncated file; when the write fails
    (ENOSPC, EROFS, EDQUOT, ...) the old file is untouched and the temporary one removed.  With
    ``durable=False`` the two fsyncs are left out: still atomic, and still whole for every process
    after a kill (the page cache outlives the writer), but not across a crash of the host — for
    records of what itself does not outlive one (cgroups: ``StateStore.write_cgroup_index``).

    Raises:
        StateUnwritable: the file system refused it.
    """
    commit(path, prepare(path, text, mode, durable), durable)


def prepare(path: str, text: str, mode: int = 0o600, durable: bool = True) -> str:
    """The first half of ``write_atomic``: ``text`` written in full and fsync'd to a hidden temporary
    file beside ``path``; returns its name, for ``commit`` (or ``discard``).  Taking the space first
    lets a verb find out that the state root refuses the write *before* its side effect.

    Raises:
        StateUnwritable: the file system refused it (nothing is left).
    """
    head, tail = os.path.split(path)
    tmp = os.path.join(head, f".{tail}.tmp.{os.getpid()}")  # hidden: never listed as an id
    data = text.encode()
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _posix.O_CLOEXEC, mode)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]  # a short write is continued, never left short
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as e:
        discard(tmp)
        raise StateUnwritable(path, e.errno or 0, e.strerror or str(e)) from e
    return tmp


def commit(path: str, tmp: str, durable: bool = True) -> None:
    """The second half of ``write_atomic``: rename(2) ``tmp`` over ``path``, then (``durable``) fsync
    the directory.

    Raises:
        StateUnwritable: the rename was refused (``tmp`` is removed, ``path`` untouched).
    """
    try:
        os.rename(tmp, path)
    except OSError as e:
        discard(tmp)
        raise StateUnwritable(path, e.errno or 0, e.strerror or str(e)) from e
    if durable:
        fsync_dir(os.path.dirname(path) or ".")


def unlink(path: str) -> None:
    """unlink(2) ``path`` if it exists.

    Raises:
        StateUnwritable: the file system refused it (a read-only one says EROFS even for a missing
            name, so that is told apart by looking again).
    """
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as e:
        if os.path.lexists(path):
            raise StateUnwritable(path, e.errno or 0, e.strerror or str(e)) from e


def discard(tmp: str) -> None:
    """Remove a temporary file of ``prepare`` (missing is fine)."""
    try:
        os.unlink(tmp)
    except OSError:
        pass
