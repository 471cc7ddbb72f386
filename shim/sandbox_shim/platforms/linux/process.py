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

PR_SET_CHILD_SUBREAPER = 36


def same_process(pid: int, start: float | None) -> bool:
    """True if ``pid`` is alive (not a zombie) and started at ``start`` (proc(5) field 22, as
    ``mechanism.Identity`` records it on Linux)."""
    from ...procstat import proc_start_time, proc_state

    if not pid or start is None:
        return False
    return proc_start_time(pid) == start and proc_state(pid) not in (None, "Z", "X")


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
