"""Running a probe's trial in a forked child, and calling libc through ctypes (loaded once, in the parent).

A trial is fork + a syscall or two (~1 ms); the caller's own process is never changed.  A child killed
by a signal (e.g. SIGSYS from a seccomp filter) or running past ``CHILD_TIMEOUT`` seconds is a failure.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import select
import signal
import sys
from collections.abc import Callable

CHILD_TIMEOUT = 5.0  # seconds a probe child may take before it is killed and reported


@functools.lru_cache(maxsize=1)
def _libc() -> ctypes.CDLL:
    """The C library, loaded once in the parent (never dlopen in a forked child: the loader lock)."""
    return ctypes.CDLL(None, use_errno=True)


def _call(what: str, fn: Callable[..., int], *args: object) -> int:
    """Call a libc function; raise OSError(errno, strerror, what) when it returns -1 (the C convention)."""
    ret = fn(*args)
    if ret == -1:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), what)
    return int(ret)


def _prctl(what: str, option: int, arg2: object = 0, arg3: object = 0) -> int:
    """prctl(2) with every variadic argument passed as a full machine word (or a pointer)."""

    def word(a: object) -> object:
        return ctypes.c_ulong(a) if isinstance(a, int) else a

    zero = ctypes.c_ulong(0)
    return _call(what, _libc().prctl, ctypes.c_int(option), word(arg2), word(arg3), zero, zero)


def in_child(trial: Callable[[], str]) -> tuple[bool, str]:
    """Run ``trial`` in a forked child and return ``(ok, text)``.

    ``trial`` returns a success note (may be "") or raises; an ``OSError`` becomes
    ``"<ERRNAME> from <what>"`` text.  A child killed by a signal (e.g. SIGSYS from a seccomp
    filter) or running past ``CHILD_TIMEOUT`` seconds is a failure.  Never raises.
    """
    if sys.platform == "win32":
        return False, "no fork(2) on Windows: the probe cannot run there"
    _libc()
    try:
        r, w = os.pipe()
    except OSError as e:
        return False, f"cannot make a pipe for the probe child: {e}"
    try:
        pid = os.fork()
    except OSError as e:
        os.close(r)
        os.close(w)
        return False, f"cannot fork a probe child: {e}: raise the pids limit of this process's cgroup"
    if pid == 0:  # child: never return into the caller's stack
        code = 1
        try:
            os.close(r)
            try:
                msg, code = "ok:" + trial(), 0
            except OSError as e:
                where = f" from {e.filename}" if e.filename else ""
                msg = f"{errno.errorcode.get(e.errno or 0, e.errno)}{where}: {e.strerror}"
            except BaseException as e:  # noqa: B036 - report anything, the child must exit
                msg = f"error:{e}"
            os.write(w, msg.encode("utf-8", "replace")[:4096])
        finally:
            os._exit(code)
    os.close(w)
    chunks: list[bytes] = []
    try:
        while select.select([r], [], [], CHILD_TIMEOUT)[0]:
            data = os.read(r, 4096)
            if not data:
                break
            chunks.append(data)
        else:
            os.kill(pid, 9)
    finally:
        os.close(r)
    _, status = os.waitpid(pid, 0)
    text = b"".join(chunks).decode("utf-8", "replace")
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        return False, f"probe child killed by signal {sig} ({_signame(sig)})"
    if text.startswith("ok:") and os.WEXITSTATUS(status) == 0:
        return True, text[3:]
    return False, text or f"probe child exited {os.WEXITSTATUS(status)} without a report"


def _signame(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return "unknown"
