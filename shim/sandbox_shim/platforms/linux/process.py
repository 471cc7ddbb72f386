"""Reading what bwrap records, the container process's exit status, and reaping it (proc(5), wait(2)).

The container process (bwrap's child, the sandbox's pid 1) has no process of ours above it once
``create`` returns: its parent is the caller's nearest child subreaper (prctl(2)
PR_SET_CHILD_SUBREAPER; conmon and containerd-shim are subreapers) or the host's init.  Its exit status
is therefore learnt, in this order, from: the ``exit-status`` file a reaping shim process recorded;
waitpid(2) when this process is its parent (the library, which makes itself a subreaper); or, while it
is an unreaped zombie, field 52 ``exit_code`` of /proc/PID/stat (proc(5), Linux 3.5).  Once another
process has reaped it the status is that process's alone, as with runc.
"""

from __future__ import annotations

import os
import time

from ...fastjson import raw_decode

TYPE_CHECKING = False  # typing is not loaded at run time: the lifecycle verbs import this module
if TYPE_CHECKING:
    from typing import Any


def read_status_file(path: str) -> list[dict[str, Any]]:
    """The JSON objects bwrap wrote to ``--info-fd`` (``child-pid`` and the namespace ids)."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError:
        return []
    out: list[dict[str, Any]] = []
    i = 0
    while i < len(text):
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            break
        try:
            obj, i = raw_decode(text, i)
        except ValueError:
            break  # a record still being written
        if isinstance(obj, dict):
            out.append(obj)
    return out


def status_field(path: str, key: str) -> Any:
    for obj in read_status_file(path):
        if key in obj:
            return obj[key]
    return None


PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def prctl(option: int, arg: int) -> None:
    """prctl(2) ``option`` with one argument.  Raises ``OSError`` with the kernel's errno."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, arg, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def become_subreaper() -> None:
    """Make this process a child subreaper, so a container process whose outer bwrap is gone is
    re-parented to it (and, when this process exits, to its own nearest subreaper: prctl(2))."""
    prctl(PR_SET_CHILD_SUBREAPER, 1)


def _stat_fields(pid: int) -> list[bytes] | None:
    from ...state import proc_stat

    return proc_stat(pid)


def parent_of(pid: int) -> int:
    """The parent pid of ``pid`` (proc(5) field 4), 0 if gone."""
    f = _stat_fields(pid)
    return int(f[1]) if f and len(f) > 1 else 0


def shell_status(raw: int) -> int:
    """A wait(2) status word as a shell would show it: the exit code, or 128+n for signal n."""
    if os.WIFSIGNALED(raw):
        return 128 + os.WTERMSIG(raw)
    return os.WEXITSTATUS(raw)


def zombie_wait_status(pid: int, start: int | None) -> int | None:
    """The wait(2) status word of ``pid`` if it is an unreaped zombie started at ``start`` (proc(5)
    field 52 ``exit_code``: "the thread's exit status in the form reported by waitpid(2)")."""
    f = _stat_fields(pid)
    if not f or start is None or len(f) < 50 or int(f[19]) != start or f[0] not in (b"Z", b"X"):
        return None
    return int(f[49])


def zombie_status(pid: int, start: int | None) -> int | None:
    """The exit status (128+n for a signal) of ``pid`` if it is an unreaped zombie started at ``start``."""
    raw = zombie_wait_status(pid, start)
    return None if raw is None else shell_status(raw)


def reap(pid: int, start: int | None) -> int | None:
    """waitpid(2) ``pid`` without blocking if it is this process's child started at ``start`` and has
    exited: its exit status (128+n for a signal); None if not ours, still running, or gone."""
    if zombie_status(pid, start) is None or parent_of(pid) != os.getpid():
        return None
    try:
        got, raw = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return None
    return shell_status(raw) if got == pid else None


def blocked_on_fd(pid: int, fd: int) -> bool:
    """True while ``pid`` sits in read(2) on ``fd`` (first fields of /proc/PID/syscall: nr, arg0)."""
    try:
        with open(f"/proc/{pid}/syscall") as fh:
            parts = fh.read().split()
    except OSError:
        return False
    # read(2) is syscall 0 on x86_64 and 63 on aarch64
    return len(parts) > 1 and parts[0] in ("0", "63") and int(parts[1], 16) == fd


def wait_for(cond: Any, timeout: float, interval: float = 0.0005) -> bool:
    """Poll ``cond()`` until true or ``timeout`` seconds pass (interval grows to 10 ms)."""
    deadline = time.monotonic() + timeout
    while True:
        if cond():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
        interval = min(interval * 2, 0.01)
