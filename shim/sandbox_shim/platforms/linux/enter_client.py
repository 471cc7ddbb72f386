"""Start a program inside a running sandbox: the library side of ``enter.py`` (``LinuxMechanism.exec``).

The request (the sandbox process's ids, capabilities, rlimits, seccomp programs and environment as
recorded at create, with the exec's own asks over them) goes to the helper in a memfd; the helper
(``python -I -S enter.py SPEC_FD STATUS_FD``, never imported) joins the workload's namespaces,
cgroup, root, credentials and seccomp filters, then execve's, and reports each step on a pipe.
Both ways the messages are ``marshal``-ed (the same interpreter on each side), so the helper
imports no json, re or enum.
``exec_in`` returns once the program has exec'd, or raises the fact that stopped it: ``CouldNotRun``
from the kernel's errno, ``LaunchFailed``, a refusal of ids or capabilities beyond the sandbox's.
"""

from __future__ import annotations

import contextlib
import errno
import marshal
import os
import signal as _signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any

from ...errors import CouldNotRun, InvalidState, LaunchFailed
from ...mechanism import Ended
from ...state import proc_start_time

if TYPE_CHECKING:
    from ...mechanism import CgroupControl, ExecSpec, Sandbox

_NOT_FOUND = (errno.ENOENT, errno.ENOTDIR, errno.ELOOP)
_DENIED = (errno.EACCES, errno.EPERM)
#: the helper, run standalone by path (after setns the host's files are out of reach)
HELPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "enter.py")


@dataclass
class HelperStarted:
    """A program started inside a sandbox through ``enter.py`` (``mechanism.Started``).

    Attributes:
        pid: its host pid.
        helper: the joining helper (its parent; exits with the program's status, 128+n for a signal).
        sandbox_id, argv: what was run.
        started: ``time.monotonic()`` when it was released.
    """

    pid: int
    helper: subprocess.Popen[bytes]
    sandbox_id: str
    argv: list[str]
    started: float
    _status: IO[bytes] = field(repr=False, default=None)  # type: ignore[arg-type]

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


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name, 0)  # inheritable: the helper reads it by number
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


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


def exec_in(sandbox: Sandbox, wpid: int, cg: CgroupControl | None, req: ExecSpec) -> HelperStarted:
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
            "console_fd": console_fd,
        }
        spec_fd = _memfd("exec-spec", marshal.dumps(spec))
        r, w = os.pipe()
        os.set_inheritable(r, False)
        try:
            helper = subprocess.Popen(
                [sys.executable, "-I", "-S", HELPER, str(spec_fd), str(w)],
                pass_fds=(spec_fd, w) + (() if console_fd is None else (console_fd,)),
                stdin=req.stdin,
                stdout=req.stdout,
                stderr=req.stderr,
                env={},
                close_fds=True,
                start_new_session=True,
            )
        except OSError as e:
            os.close(r)
            raise LaunchFailed(f"cannot start the exec helper: {e.strerror}") from e
        finally:
            os.close(spec_fd)
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
