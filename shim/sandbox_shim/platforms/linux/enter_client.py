"""Start a program inside a running sandbox: the library side of ``enter.py`` (``LinuxMechanism.exec``).

The request (the sandbox process's ids, capabilities, rlimits, seccomp programs and environment as
recorded at create, with the exec's own asks over them) goes to the helper H, forked from this
process (``_fork_helper``: no interpreter starts per exec), which runs ``enter.run``: it joins the
workload's namespaces, cgroup, root, credentials and seccomp filters, then execve's, and reports each
step on a pipe, each report ``marshal``-ed (``enter.frame``).
``exec_in`` returns once the program has exec'd, or raises the fact that stopped it: ``CouldNotRun``
from the kernel's errno, ``LaunchFailed``, a refusal of ids or capabilities beyond the sandbox's.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import marshal
import os
import signal as _signal
import socket
import subprocess
import time
from typing import IO, TYPE_CHECKING, Any

from ...errors import CouldNotRun, InvalidState, LaunchFailed
from ...mechanism import Ended
from ...state import proc_start_time
from . import enter

if TYPE_CHECKING:
    from ...mechanism import ExecSpec, Sandbox
    from .cgroups.base import CgroupManager

_NOT_FOUND = (errno.ENOENT, errno.ENOTDIR, errno.ELOOP)
_DENIED = (errno.EACCES, errno.EPERM)


class ForkedHelper:
    """The joining helper H, forked from this process (``mechanism.HelperProcess``: the part of
    ``subprocess.Popen`` the library drives).  ``returncode`` as Popen's: -N for death by signal N.

    Attributes:
        pid: H's pid (this process's child until reaped).  args: the program's argv.
        stdin, stdout, stderr: this process's ends of the pipes asked with ``subprocess.PIPE``, or None.
    """

    def __init__(
        self,
        pid: int,
        args: list[str],
        stdin: IO[bytes] | None,
        stdout: IO[bytes] | None,
        stderr: IO[bytes] | None,
    ) -> None:
        self.pid, self.args = pid, args
        self.stdin, self.stdout, self.stderr = stdin, stdout, stderr
        self.returncode: int | None = None

    def _reaped(self, status: int) -> int:
        self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def poll(self) -> int | None:
        """H's status if it has exited (reaping it), else None."""
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere (SIGCHLD ignored): as Popen, status 0
                self.returncode = 0
            else:
                if pid:
                    self._reaped(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for H (at most ``timeout`` seconds: ``subprocess.TimeoutExpired``); its status."""
        if self.returncode is not None:
            return self.returncode
        if timeout is not None:
            import select

            try:
                pidfd = os.pidfd_open(self.pid)  # still our unreaped child: the pid is H's
            except OSError:
                pidfd = -1
            if pidfd >= 0:
                try:
                    ready, _, _ = select.select([pidfd], [], [], max(0.0, timeout))
                finally:
                    os.close(pidfd)
                if not ready:
                    raise subprocess.TimeoutExpired(self.args, timeout)
        try:
            _, status = os.waitpid(self.pid, 0)
        except ChildProcessError:
            self.returncode = 0
            return 0
        return self._reaped(status)

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(_signal.SIGKILL)


class HelperStarted:
    """A program started inside a sandbox through ``enter.py`` (``mechanism.Started``).

    Attributes:
        pid: its host pid.
        helper: the joining helper (its parent; exits with the program's status, 128+n for a signal).
        sandbox_id, argv: what was run.
        started: ``time.monotonic()`` when it was released.
    """

    def __init__(
        self,
        pid: int,
        helper: ForkedHelper,
        sandbox_id: str,
        argv: list[str],
        started: float,
        status: IO[bytes],
    ) -> None:
        self.pid, self.helper, self.sandbox_id, self.argv, self.started = (
            pid,
            helper,
            sandbox_id,
            argv,
            started,
        )
        self._status = status

    def __repr__(self) -> str:
        return f"HelperStarted(pid={self.pid}, sandbox_id={self.sandbox_id!r}, argv={self.argv!r})"

    def signal(self, signum: int) -> None:
        """Deliver ``signum`` to the program (the helper forwards it)."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.helper.pid, signum)

    def kill(self) -> None:
        """SIGKILL the program's process group (SIGUSR1 asks the helper, its parent: no pid reuse race)."""
        self.signal(_signal.SIGUSR1)

    def result(self) -> Ended | None:
        """The helper's last report (``{"exit": N}`` or ``{"signal": N}`` with ``rusage``), or None."""
        last: dict[str, Any] = {}
        while (msg := _message(self._status)) is not None:
            last = msg
        self._status.close()
        if not last:
            return None
        ru = last.get("rusage") or {}
        return Ended(
            last.get("exit"),
            last.get("signal"),
            ru.get("utime_us"),
            ru.get("stime_us"),
            ru.get("maxrss_bytes"),
        )


def _message(status: IO[bytes]) -> dict[str, Any] | None:
    """The helper's next status message (``enter.frame``: 4 bytes of length, little-endian, then a
    ``marshal``-ed dict), or None at the end of the stream or on a truncated or malformed one."""
    head = status.read(4)
    if len(head) < 4:
        return None
    n = int.from_bytes(head, "little")
    data = status.read(n)
    if len(data) < n:
        return None
    try:
        msg = marshal.loads(data)
    except (EOFError, ValueError, TypeError):
        return None
    return msg if isinstance(msg, dict) else None


def _refusal(msg: dict[str, Any], argv: list[str], cwd: str) -> Exception:
    """The exception for a helper's ``{"error": ...}`` report."""
    err = int(msg.get("errno") or 0)
    text = os.strerror(err) if err else str(msg.get("detail") or "unknown error")
    if msg.get("error") == "exec":
        reason = (
            "not_found" if err in _NOT_FOUND else "permission_denied" if err in _DENIED else "exec_failed"
        )
        return CouldNotRun(reason, argv[0], "" if reason != "exec_failed" else text)
    if msg.get("step") == "chdir":
        return CouldNotRun("exec_failed", argv[0], f"cannot change to the working directory {cwd}: {text}")
    return LaunchFailed(
        f"cannot enter the sandbox: {msg.get('step')}: {text}",
        "check that the sandbox still runs (sandbox-shim state ID)",
    )


def _connect_console(path: str) -> socket.socket:
    """A unix stream socket connected to ``--console-socket`` (the pty master goes over it, unix(7))."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError as e:
        sock.close()
        raise LaunchFailed(
            f"cannot send the terminal to --console-socket {path}: {e.strerror}",
            "the console socket must be a listening unix stream socket",
        ) from e
    return sock


def exec_in(sandbox: Sandbox, wpid: int, cg: CgroupManager | None, req: ExecSpec) -> HelperStarted:
    """Start ``req`` in the sandbox whose container process is ``wpid`` (0: gone) and whose cgroup is
    ``cg``; return once the program has exec'd.

    Raises:
        InvalidState (the process is gone or was never recorded); BundleInvalid (ids or capabilities
        beyond the sandbox's, ``process_spec.resolve_credentials``); CouldNotRun; LaunchFailed.
    """
    from ...process_spec import resolve_credentials

    proc = sandbox.private.get("process")
    if not proc or not wpid:
        raise InvalidState(sandbox.id, "stopped" if not wpid else "unknown", "exec", "running")
    creds = resolve_credentials(proc, dict(req.user) if req.user is not None else None, req.capabilities)
    penv = {} if req.replace_env else dict(proc.get("env") or {})
    penv.update(req.env)
    argv = list(req.argv)
    with contextlib.ExitStack() as undo:
        console_fd = None
        if req.console_socket:
            console_fd = undo.enter_context(_connect_console(req.console_socket)).fileno()
        spec = {
            "pid": wpid,
            "start": proc_start_time(wpid),
            "cgroup_procs": cg.join_files() if cg is not None else [],  # the manager's rule (v1: tasks)
            "seccomp_files": proc.get("seccomp_files") or [],
            **creds,
            "rlimits": proc.get("rlimits") or [],
            "env": [f"{k}={v}" for k, v in penv.items()],
            "cwd": req.cwd or proc.get("cwd") or "/",
            "argv": argv,
            "detach": req.detach,
            "caller": os.getpid(),  # H (forked below) ends C's group when this process dies first
            "console_fd": console_fd,
        }
        if console_fd is not None:
            enter._import_console()  # here, not in the child: nothing is imported after the fork
        r, w = os.pipe2(os.O_CLOEXEC)
        try:
            helper = _fork_helper(spec, w, req, console_fd, argv)
        except OSError as e:
            os.close(r)
            raise LaunchFailed(f"cannot start the exec helper: {e.strerror}") from e
        finally:
            os.close(w)
        status = os.fdopen(r, "rb")
        pid = 0
        while (msg := _message(status)) is not None:
            if "pid" in msg:
                pid = int(msg["pid"])
            elif msg.get("exec") == "ok":
                return HelperStarted(pid, helper, sandbox.id, argv, time.monotonic(), status)
            elif "error" in msg:
                status.close()
                helper.wait()
                raise _refusal(msg, argv, str(spec["cwd"]))
        status.close()
        rc = helper.wait()
        raise LaunchFailed(f"the exec helper ended without starting the program (exit status {rc})")


def _stdio(
    want: int | IO[bytes] | None, fd: int, undo: contextlib.ExitStack
) -> tuple[int | None, IO[bytes] | None]:
    """(the fd H gets as ``fd`` — None: this process's own —, this process's end of a pipe or None)
    for one of ``ExecSpec``'s stdin/stdout/stderr, read as ``subprocess.Popen`` reads it."""
    if want is None:
        return None, None
    if want == subprocess.PIPE:
        r, w = os.pipe2(os.O_CLOEXEC)
        mine, theirs = (w, r) if fd == 0 else (r, w)
        undo.callback(os.close, theirs)
        return theirs, os.fdopen(mine, "wb" if fd == 0 else "rb")
    if want == subprocess.DEVNULL:
        null = os.open(os.devnull, (os.O_RDONLY if fd == 0 else os.O_WRONLY) | os.O_CLOEXEC)
        undo.callback(os.close, null)
        return null, None
    if isinstance(want, int):
        return want, None
    return want.fileno(), None


def _fork_helper(
    spec: dict[str, Any], status_w: int, req: ExecSpec, console_fd: int | None, argv: list[str]
) -> ForkedHelper:
    """Fork H, which runs ``enter.run(spec, status_w)`` and never returns here (``os._exit``).

    In H, before anything else: every signal this process catches is back to its default (no
    handler of the caller's runs in H; all signals are blocked across the fork), stdio is set as
    asked (``subprocess.Popen``'s reading of PIPE, DEVNULL, fds and files; ``subprocess.STDOUT`` for
    stderr), a new session (as ``start_new_session``), and every fd but 0-2, ``status_w`` and
    ``console_fd`` is closed — the caller's state locks and files never reach the sandbox.
    Raises:
        OSError: fork(2) or a pipe failed.
    """
    with contextlib.ExitStack() as undo:
        ends: list[IO[bytes] | None] = []
        child_fds: list[int | None] = []
        for fd, want in ((0, req.stdin), (1, req.stdout), (2, req.stderr)):
            if fd == 2 and want == subprocess.STDOUT:
                child_fds.append(child_fds[1] if child_fds[1] is not None else 1)
                ends.append(None)
                continue
            theirs, mine = _stdio(want, fd, undo)
            child_fds.append(theirs)
            ends.append(mine)
        keep = sorted({status_w, *([console_fd] if console_fd is not None else [])})
        every = _signal.valid_signals() - {_signal.SIGKILL, _signal.SIGSTOP}
        old = _signal.pthread_sigmask(_signal.SIG_BLOCK, every)
        pid = -1
        try:
            pid = os.fork()
            if pid == 0:  # H: never returns
                code = 125
                try:
                    code = _helper_child(spec, status_w, child_fds, keep, every, old)
                finally:
                    os._exit(code)
        finally:
            if pid != 0:
                _signal.pthread_sigmask(_signal.SIG_SETMASK, old)
    return ForkedHelper(pid, argv, *ends)


def _helper_child(
    spec: dict[str, Any],
    status_w: int,
    child_fds: list[int | None],
    keep: list[int],
    every: set[Any],
    old: set[Any],
) -> int:
    """H's start in the forked child: signals, stdio, session, fds (``_fork_helper``), then ``enter.run``."""
    if status_w < 3 or (spec.get("console_fd") is not None and spec["console_fd"] < 3):
        # a caller that runs with fd 0, 1 or 2 closed got one of them for a pipe or the console
        # socket: move those above 2 before stdio is set there
        status_w = _above2(status_w)
        if spec.get("console_fd") is not None:
            spec = {**spec, "console_fd": _above2(int(spec["console_fd"]))}
        keep = sorted({status_w, *([spec["console_fd"]] if spec.get("console_fd") is not None else [])})
    for s in every:
        with contextlib.suppress(OSError, ValueError, TypeError):
            if _signal.getsignal(s) not in (_signal.SIG_DFL, _signal.SIG_IGN, None):
                _signal.signal(s, _signal.SIG_DFL)
    # the program starts with no signal blocked, whatever the calling thread blocks (runc's exec too)
    _signal.pthread_sigmask(_signal.SIG_SETMASK, ())
    high = [os.dup(fd) if fd is not None else None for fd in child_fds]  # above 0-2: no overlap
    for target, fd in enumerate(high):
        if fd is not None:
            os.dup2(fd, target)  # inheritable: the program's stdio
            os.close(fd)
        else:  # this process's own: closed, or close-on-exec (os.open's default, PEP 446)
            try:
                os.set_inheritable(target, True)
            except OSError:  # closed: /dev/null, as a verb's own closed stdio is (cli)
                null = os.open(os.devnull, os.O_RDWR)
                if null != target:
                    os.dup2(null, target)
                    os.close(null)
                os.set_inheritable(target, True)
    os.setsid()
    last = 3
    for fd in [*keep, -1]:
        if fd == -1:
            os.closerange(last, os.sysconf("SC_OPEN_MAX"))
        elif fd >= last:
            os.closerange(last, fd)
            last = fd + 1
    return enter.run(spec, status_w)


def _above2(fd: int) -> int:
    """``fd``, or a copy of it numbered 3 or above (close-on-exec) when it is 0, 1 or 2."""
    if fd > 2:
        return fd
    return int(fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3))
