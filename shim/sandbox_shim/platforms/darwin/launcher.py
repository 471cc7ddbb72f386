"""The create/start gate for sandbox-exec: a ``/bin/sh`` monitor held on a FIFO, then released.

``spawn_held`` starts ``/bin/sh -c GATE STATUS_FILE CMD...`` as the leader of a new session (so of a
new process group), with:

* the rlimits set in the forked child before ``exec`` (setrlimit(2); they are inherited by the
  workload, and apply to the few builtins the monitor itself runs);
* the start FIFO opened read-write by the shim and placed at fd 3 (a read-write FIFO never reads EOF
  and a writer's ``open(O_NONBLOCK)`` always finds a reader, so ``start`` may come at any time);
* a minimal environment (``PATH`` only): the monitor runs *outside* the sandbox, so no tenant
  variable may reach the shell (bash imports ``SHELLOPTS``/``PS4``); the workload's environment is
  passed on the command (``/usr/bin/env -i NAME=VALUE ...``).

The shell blocks in ``read`` on fd 3 before any user code: that is the created state.  ``release``
writes one line into the FIFO; the shell closes fd 3, catches (not ignores, so the workload keeps
default dispositions) HUP/INT/QUIT/TERM, runs CMD as its foreground child, writes CMD's status (0-255;
128+n for a signal, as sh reports it) to STATUS_FILE in one ``write``, and exits with it.  So the
pid reported for the sandbox is a small shell, not a Python process, and it is the only process
that stays besides the workload.  Nothing here is specific to macOS: the tests run the gate on
Linux with ``/usr/bin/env`` as CMD (that tests this gate, not sandbox-exec).
Sources: sh(1) POSIX ``read``, ``trap``, ``exec n<&-``; fifo(7); setrlimit(2); setsid(2).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import resource
import signal as _signal
import subprocess
from collections.abc import Sequence
from typing import Any

from ...errors import LaunchFailed

SH = "/bin/sh"
GATE_FD = 3
#: $0 is the status file; "$@" the command.  Exit 125: the gate was closed without a start.
GATE = (
    "IFS= read -r _ <&3 || exit 125\n"
    "exec 3<&-\n"
    "trap : HUP INT QUIT TERM\n"
    '"$@"\n'
    "rc=$?\n"
    'printf "%s\\n" "$rc" > "$0"\n'
    'exit "$rc"\n'
)
MONITOR_ENV = {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin"}
RLIM_MAX = 2**63 - 1


def rlimit_value(v: int) -> int:
    """An OCI rlimit value (uint64) as ``setrlimit`` takes it: >= 2**63 - 1 is RLIM_INFINITY."""
    return resource.RLIM_INFINITY if v >= RLIM_MAX else v


def monitor_argv(command: Sequence[str], status_file: str) -> list[str]:
    """``[SH, "-c", GATE, status_file, *command]``: the held monitor's argv."""
    return [SH, "-c", GATE, status_file, *command]


def spawn_held(
    command: Sequence[str],
    *,
    fifo: str,
    status_file: str,
    rlimits: Sequence[tuple[str, int, int]] = (),
    cwd: str | None = None,
    stdio: tuple[Any, Any, Any] = (None, None, None),
) -> subprocess.Popen[bytes]:
    """Start the monitor held on ``fifo`` (an existing FIFO); see the module docstring.

    Args:
        command: the argv to run once released (absolute ``command[0]``).
        fifo: path of the start FIFO; status_file: where the exit status is written.
        rlimits: ``(RLIMIT_NAME, soft, hard)``; names from the ``resource`` module.
        cwd: working directory of the monitor and so of the workload.
        stdio: stdin, stdout, stderr for ``subprocess.Popen`` (None: inherit the caller's).
    Returns:
        The monitor's ``Popen``; its pid is the process group id.
    Raises:
        LaunchFailed: the shell cannot be started, or an rlimit cannot be set (then nothing runs).
    """
    limits = [(getattr(resource, n), rlimit_value(s), rlimit_value(h)) for n, s, h in rlimits]
    fd = os.open(fifo, os.O_RDWR | os.O_CLOEXEC)
    try:
        # The lowest free fd >= 3: if 3 was free we hold it now, so Popen's own error pipe is never
        # fd 3 and the dup2 below cannot clobber it.
        low = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, GATE_FD)
    finally:
        os.close(fd)

    def child() -> None:  # runs in the forked child, before exec
        for kind, soft, hard in limits:
            resource.setrlimit(kind, (soft, hard))
        os.dup2(low, GATE_FD)
        os.set_inheritable(GATE_FD, True)

    try:
        return subprocess.Popen(
            monitor_argv(command, status_file),
            preexec_fn=child,
            pass_fds=(GATE_FD,),
            start_new_session=True,
            cwd=cwd,
            env=MONITOR_ENV,
            close_fds=True,
            stdin=stdio[0],
            stdout=stdio[1],
            stderr=stdio[2],
        )
    except (OSError, subprocess.SubprocessError, ValueError) as e:
        raise LaunchFailed(
            f"cannot start the held launcher: {e}", "check process.rlimits and process.cwd in config.json"
        ) from e
    finally:
        os.close(low)


def release(fifo: str) -> None:
    """Open the gate: write one line into ``fifo`` (non-blocking), then remove it.

    Raises:
        LaunchFailed: no process holds the FIFO any more (ENXIO/ENOENT): the held monitor is gone.
    """
    try:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        if e.errno in (errno.ENXIO, errno.ENOENT):
            raise LaunchFailed(
                f"the held process is gone ({os.strerror(e.errno)})", "delete the sandbox and create it again"
            ) from e
        raise LaunchFailed(f"cannot open the start FIFO {fifo}: {e.strerror}") from e
    try:
        os.write(fd, b"start\n")
    finally:
        os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(fifo)


def read_status(status_file: str) -> int | None:
    """The status the monitor wrote (0-255), or None before it was written."""
    try:
        with open(status_file) as fh:
            text = fh.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def identity(pid: int) -> float | None:
    """The process's start time (psutil ``create_time``, seconds since the epoch), or None if gone."""
    import psutil

    try:
        return float(psutil.Process(pid).create_time())
    except psutil.Error:
        return None


def running(pid: int, start: float | None) -> bool:
    """True while ``pid`` is the same process (start time) and not a zombie."""
    import psutil

    if not pid or start is None:
        return False
    try:
        p = psutil.Process(pid)
        return abs(p.create_time() - start) < 0.01 and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def members(pgid: int) -> list[Any]:
    """Processes whose process group is ``pgid`` (psutil; processes gone meanwhile are skipped)."""
    import psutil

    out = []
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if os.getpgid(p.pid) == pgid:
                out.append(p)
    return out


def kill_group(pgid: int) -> None:
    """SIGKILL to process group ``pgid``; a group already gone is not an error."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, _signal.SIGKILL)
