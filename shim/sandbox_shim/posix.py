"""POSIX-only names the platform-neutral core uses, in one place and typed on every OS mypy checks.

The core's state store, durable writes, image unpacking, capability cache and hooks are POSIX code
(Linux and macOS).  mypy checks the core as Windows sees it too (``scripts/mypy-platform win32``,
run in CI), so the core reads every POSIX-only name from here instead of from ``os``, ``fcntl`` or
``signal``:

- on Linux and macOS each name is the ``os``/``fcntl``/``signal`` original (same value, same call);
- on Windows the open flags are what Windows has: ``O_CLOEXEC`` is ``O_NOINHERIT`` (the same promise:
  not inherited by a child), ``O_DIRECTORY``/``O_NONBLOCK``/``O_NOFOLLOW`` are 0 (Windows has no
  such open option); ``SIGKILL`` is 9 (``os.kill`` with it is ``TerminateProcess``); and every
  function below raises ``LaunchFailed`` (exit 9) naming the call, so the core fails closed there
  at its first lock (the state store takes one before any change) instead of half-working.  A
  Windows state store is future work (README "Platform matrix").

Importing this module costs ``os`` and ``sys`` only (and the C modules ``fcntl``/``_signal`` off
Windows): the lifecycle verbs import it (``tests/test_startup_imports.py``).
"""

from __future__ import annotations

import os
import sys

if sys.platform == "win32":
    O_CLOEXEC: int = os.O_NOINHERIT
    O_DIRECTORY: int = 0
    O_NOFOLLOW: int = 0
    O_NONBLOCK: int = 0
    SIGKILL: int = 9

    def _unsupported(call: str) -> Exception:
        from .errors import LaunchFailed

        return LaunchFailed(f"{call} is POSIX-only: the state store does not run on Windows yet")

    def geteuid() -> int:
        """The effective uid (POSIX only).  Raises: ``LaunchFailed`` on Windows."""
        raise _unsupported("geteuid")

    def flock_exclusive(fd: int, wait: bool = True) -> bool:
        """Take an exclusive ``flock(2)`` on ``fd``: True once held; with ``wait=False`` False when
        another open file description holds it.  Raises: ``OSError``; ``LaunchFailed`` on Windows."""
        raise _unsupported("flock")

    def dup_above(fd: int, lowest: int) -> int:
        """A close-on-exec duplicate of ``fd`` numbered ``lowest`` or above (``F_DUPFD_CLOEXEC``,
        fcntl(2)).  Raises: ``OSError``; ``LaunchFailed`` on Windows."""
        raise _unsupported("fcntl(F_DUPFD_CLOEXEC)")

    def killpg(pgid: int, sig: int) -> None:
        """Send ``sig`` to process group ``pgid`` (killpg(2)).  Raises: ``OSError``; ``LaunchFailed``
        on Windows."""
        raise _unsupported("killpg")

    def home() -> str:
        """This user's home directory from the password database (``pwd.getpwuid(geteuid())``), not
        ``$HOME``.  Raises: ``KeyError`` (no entry); ``LaunchFailed`` on Windows."""
        raise _unsupported("getpwuid")

    def chown(path: str, uid: int, gid: int, dir_fd: int | None = None, follow: bool = False) -> None:
        """chown(2)/lchown(2)/fchownat(2) of ``path`` (relative to ``dir_fd`` if given).
        Raises: ``OSError``; ``LaunchFailed`` on Windows."""
        raise _unsupported("chown")

    def fchown(fd: int, uid: int, gid: int) -> None:
        """fchown(2).  Raises: ``OSError``; ``LaunchFailed`` on Windows."""
        raise _unsupported("fchown")

    def fchmod(fd: int, mode: int) -> None:
        """fchmod(2).  Raises: ``OSError``; ``LaunchFailed`` on Windows."""
        raise _unsupported("fchmod")

    def ioctl(fd: int, request: int, arg: int) -> None:
        """ioctl(2) with an integer argument (``FICLONE``...).  Raises: ``OSError``; ``LaunchFailed``
        on Windows."""
        raise _unsupported("ioctl")

    def pid_exists(pid: int) -> bool:
        """True while a process numbered ``pid`` exists, a zombie included (Linux: ``/proc/PID``;
        elsewhere kill(2) with signal 0).  Raises: ``LaunchFailed`` on Windows, where
        ``os.kill(pid, 0)`` would terminate the process."""
        raise _unsupported("kill(pid, 0)")

else:
    import _signal  # type: ignore[import-not-found,unused-ignore]  # the C module: no enum
    import fcntl as _fcntl

    O_CLOEXEC: int = os.O_CLOEXEC
    O_DIRECTORY: int = os.O_DIRECTORY
    O_NOFOLLOW: int = os.O_NOFOLLOW
    O_NONBLOCK: int = os.O_NONBLOCK
    SIGKILL: int = _signal.SIGKILL

    def geteuid() -> int:
        """The effective uid (POSIX only).  Raises: ``LaunchFailed`` on Windows."""
        return os.geteuid()

    def flock_exclusive(fd: int, wait: bool = True) -> bool:
        """Take an exclusive ``flock(2)`` on ``fd``: True once held; with ``wait=False`` False when
        another open file description holds it.  Raises: ``OSError``; ``LaunchFailed`` on Windows."""
        if wait:
            _fcntl.flock(fd, _fcntl.LOCK_EX)
            return True
        try:
            _fcntl.flock(fd, _fcntl.LOCK_EX | _fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def dup_above(fd: int, lowest: int) -> int:
        """A close-on-exec duplicate of ``fd`` numbered ``lowest`` or above (``F_DUPFD_CLOEXEC``,
        fcntl(2)).  Raises: ``OSError``; ``LaunchFailed`` on Windows."""
        return _fcntl.fcntl(fd, _fcntl.F_DUPFD_CLOEXEC, lowest)

    def killpg(pgid: int, sig: int) -> None:
        """Send ``sig`` to process group ``pgid`` (killpg(2)).  Raises: ``OSError``; ``LaunchFailed``
        on Windows."""
        os.killpg(pgid, sig)

    def home() -> str:
        """This user's home directory from the password database (``pwd.getpwuid(geteuid())``), not
        ``$HOME``.  Raises: ``KeyError`` (no entry); ``LaunchFailed`` on Windows."""
        import pwd

        return pwd.getpwuid(os.geteuid()).pw_dir

    def chown(path: str, uid: int, gid: int, dir_fd: int | None = None, follow: bool = False) -> None:
        """chown(2)/lchown(2)/fchownat(2) of ``path`` (relative to ``dir_fd`` if given).
        Raises: ``OSError``; ``LaunchFailed`` on Windows."""
        os.chown(path, uid, gid, dir_fd=dir_fd, follow_symlinks=follow)

    def fchown(fd: int, uid: int, gid: int) -> None:
        """fchown(2).  Raises: ``OSError``; ``LaunchFailed`` on Windows."""
        os.fchown(fd, uid, gid)

    def fchmod(fd: int, mode: int) -> None:
        """fchmod(2); for a descriptor opened ``O_PATH`` (which fchmod(2) refuses with ``EBADF``),
        chmod(2) of its ``/proc/self/fd`` entry, which names that very inode (proc(5)).  Raises:
        ``OSError``; ``LaunchFailed`` on Windows."""
        try:
            os.fchmod(fd, mode)
        except OSError as e:
            import errno

            if e.errno != errno.EBADF or not sys.platform.startswith("linux"):
                raise
            os.chmod(f"/proc/self/fd/{fd}", mode)

    def ioctl(fd: int, request: int, arg: int) -> None:
        """ioctl(2) with an integer argument (``FICLONE``...).  Raises: ``OSError``; ``LaunchFailed``
        on Windows."""
        _fcntl.ioctl(fd, request, arg)

    def pid_exists(pid: int) -> bool:
        """True while a process numbered ``pid`` exists, a zombie included (Linux: ``/proc/PID``;
        elsewhere kill(2) with signal 0).  Raises: ``LaunchFailed`` on Windows, where
        ``os.kill(pid, 0)`` would terminate the process."""
        if pid <= 0:
            return False
        if sys.platform.startswith("linux"):  # no kill(2): the crash tests count one as a side effect
            return os.path.exists(f"/proc/{pid}")
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # another user's: it exists
            return True
        except (OverflowError, ValueError):  # no such pid number
            return False
        return True


def read_at_most(fd: int, limit: int) -> bytes:
    """At most ``limit`` bytes from ``fd`` (read(2) until end of file or ``limit``): the one bounded
    read of a file that was opened without blocking and checked regular (``jsonguard.read_regular``,
    ``hardening.readset.read_regular``).  Raises: ``OSError`` as read(2) does."""
    chunks, left = [], limit
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
