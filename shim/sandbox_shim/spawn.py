"""Start a program inside a running sandbox: the library side of ``platforms/linux/enter.py``.

``spawn`` joins a running sandbox through the helper and returns once the program has exec'd (or raises
the fact that stopped it: ``CouldNotRun`` from the kernel's errno, ``LaunchFailed``, a refusal of ids or
capabilities beyond the sandbox's).  ``execution.execute`` builds on it; the CLI's ``exec`` uses both.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal as _signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any

from . import api
from . import state as st
from .errors import CouldNotRun, InvalidState, LaunchFailed, UsageError
from .platforms.select import enter_helper

if TYPE_CHECKING:
    from .mechanism import Mechanism

_NOT_FOUND = (errno.ENOENT, errno.ENOTDIR, errno.ELOOP)
_DENIED = (errno.EACCES, errno.EPERM)


@dataclass
class Started:
    """A program started inside a sandbox by ``spawn``.

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

    def result(self) -> dict[str, Any]:
        """The helper's last report: ``{"exit": N}`` or ``{"signal": N}`` with ``rusage``; {} if none."""
        last: dict[str, Any] = {}
        for line in self._status:
            with contextlib.suppress(ValueError):
                last = json.loads(line)
        self._status.close()
        return last


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


def spawn(
    mechanism: Mechanism,
    sandbox_id: str,
    argv: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    stdin: Any = None,
    stdout: Any = None,
    stderr: Any = None,
    detach: bool = False,
    replace_env: bool = False,
    user: dict[str, Any] | None = None,
    capabilities: list[str] | None = None,
    console_socket: str | None = None,
) -> Started:
    """Start ``argv`` inside the running sandbox ``sandbox_id``; return once it has exec'd.

    Args:
        env: variables set over the sandbox process's environment (``replace_env``: the whole
            environment, as an OCI ``process.env``).
        cwd: working directory inside the sandbox (default: the sandbox process's).
        stdin/stdout/stderr: as for ``subprocess.Popen`` (None: inherit).
        detach: the helper exits once the program runs; ``pid`` is the program, a child of the helper
            until then, afterwards of this process's nearest child subreaper (prctl(2)
            PR_SET_CHILD_SUBREAPER), which gets its exit status — ``runc exec -d``'s contract.
        user: ``uid``/``gid``/``additional_gids``/``umask`` (``process_spec.resolve_credentials`` rules).
        capabilities: names, at most the sandbox's (None: the sandbox's).
        console_socket: path of a listening unix socket: the program gets a new pty of the sandbox's
            devpts as stdio and controlling terminal, and the master is sent there (SCM_RIGHTS)
            before this returns (runtime-spec runtime.md, runc docs/terminals.md).
    Raises:
        UsageError (empty argv); BundleInvalid (an ``env`` name that looks like a credential, see
        ``hardening.tenant``; ids or capabilities beyond the sandbox's); SandboxNotFound;
        InvalidState (not running); CouldNotRun (never ran: ``not_found`` | ``permission_denied`` |
        ``exec_failed``); LaunchFailed (could not join, or the console socket cannot be reached).
    """
    from .process_spec import resolve_credentials

    argv = [str(a) for a in argv]
    if not argv or not argv[0]:
        raise UsageError("exec needs a program to run")
    if env:
        # the tenant profile's environment rules hold for exec'd processes too: no credential names
        from .errors import BundleInvalid
        from .hardening.tenant import check_env

        errors, _ = check_env([f"{k}={v}" for k, v in env.items()])
        if errors:
            raise BundleInvalid(errors, what="exec environment")
    store = api.store_of(mechanism)
    with store.locked(sandbox_id) as rec, contextlib.ExitStack() as undo:
        st.require(sandbox_id, api.observed_status(mechanism, rec, store), "exec")
        sb = api.sandbox_of(rec, store)
        proc = rec.private.get("process")
        wpid = mechanism.workload_pid(sb)
        if not proc or not wpid:
            raise InvalidState(sandbox_id, "stopped" if not wpid else "unknown", "exec", "running")
        creds = resolve_credentials(proc, user, capabilities)
        cg = mechanism.cgroup(sb)
        procs = [os.path.join(d, "cgroup.procs") for d in (cg.dirs() if cg else []) if os.path.isdir(d)]
        penv = {} if replace_env else dict(proc.get("env") or {})
        penv.update(env or {})
        console_fd = None
        if console_socket:
            console_fd = undo.enter_context(_connect_console(console_socket)).fileno()
        spec = {
            "pid": wpid,
            "start": st.proc_start_time(wpid),
            "cgroup_procs": procs,
            "seccomp_files": proc.get("seccomp_files") or [],
            **creds,
            "rlimits": proc.get("rlimits") or [],
            "env": [f"{k}={v}" for k, v in penv.items()],
            "cwd": cwd or proc.get("cwd") or "/",
            "argv": argv,
            "detach": detach,
            "console_fd": console_fd,
        }
        spec_fd = _memfd("exec-spec", json.dumps(spec).encode())
        r, w = os.pipe()
        os.set_inheritable(r, False)
        try:
            helper = subprocess.Popen(
                [sys.executable, "-I", "-S", enter_helper(), str(spec_fd), str(w)],
                pass_fds=(spec_fd, w) + (() if console_fd is None else (console_fd,)),
                stdin=stdin,
                stdout=stdout,
                stderr=stderr,
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
        for line in status:
            msg = json.loads(line)
            if "pid" in msg:
                pid = int(msg["pid"])
            elif msg.get("exec") == "ok":
                return Started(pid, helper, sandbox_id, argv, time.monotonic(), status)
            elif "error" in msg:
                status.close()
                helper.wait()
                raise _refusal(msg, argv, spec["cwd"])
        status.close()
        rc = helper.wait()
        raise LaunchFailed(f"the exec helper ended without starting the program (exit status {rc})")
