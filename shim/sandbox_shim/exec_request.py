"""``exec`` as one library call: a command line or an OCI ``process`` object, run in a running sandbox.

runc's ``exec`` grammar, as podman/conmon and containerd's shim use it (``exec --process FILE
--detach --pid-file F [--console-socket S] ID``) and as people type it (``exec ID CMD ARGS...``):

  request(...)      the arguments → an ``ExecRequest`` (checks of the combination, ``-e K=V`` over
                    the process object's env, ``--process`` read by ``jsonguard.read_file``)
  run(...)          an ``ExecRequest`` run in the sandbox: ``execution.execute`` with this process's
                    stdio (its status), or ``spawn(detach=True)`` (returns once it runs)
  exec_command(...) both: what the CLI's ``exec`` calls

What an exec'd process may ask is ``process_spec``'s to decide; this module only assembles the call.
"""

from __future__ import annotations

import os
import sys

from .errors import UsageError
from .jsonguard import read_file
from .process_spec import ExecProcess, parse_process
from .values import Value

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import TypedDict

    from .mechanism import Mechanism, Sandbox

    class SpawnOptions(TypedDict):
        """The keywords ``spawn.spawn`` and ``execution.execute`` take from an ``ExecRequest``."""

        env: dict[str, str]
        cwd: str | None
        replace_env: bool
        user: Mapping[str, object] | None
        capabilities: list[str] | None
        console_socket: str | None


class ExecRequest(Value):
    """What ``exec`` runs and how.

    Attributes:
        process: the program (``process_spec.ExecProcess``); env: the environment given to it (the
            process object's ``env`` with ``-e`` pairs over it); cwd: inside the sandbox, or None (the
            sandbox's); console_socket: unix socket that receives the terminal's master, or None.
    """

    __match_args__ = ("process", "env", "cwd", "console_socket")

    def __init__(
        self, process: ExecProcess, env: dict[str, str], cwd: str | None, console_socket: str | None
    ) -> None:
        self.process = process
        self.env = env
        self.cwd = cwd
        self.console_socket = console_socket

    def spawn_options(self) -> SpawnOptions:
        """Keyword arguments for ``spawn.spawn`` / ``execution.execute``."""
        p = self.process
        return {
            "env": self.env,
            "cwd": self.cwd,
            "replace_env": p.env_given,
            "user": p.user,
            "capabilities": p.capabilities,
            "console_socket": self.console_socket,
        }


def request(
    *,
    process_file: str | None = None,
    args: Sequence[str] = (),
    env_pairs: Sequence[str] = (),
    cwd: str | None = None,
    tty: bool = False,
    console_socket: str | None = None,
) -> ExecRequest:
    """Assemble an ``ExecRequest`` from runc's ``exec`` arguments.

    Args:
        process_file: an OCI ``process`` object (``--process``); args: CMD ARGS... (a leading ``--`` is
            dropped); give one or the other.  env_pairs: ``K=V`` set over the environment (``-e``).
        cwd: ``--cwd`` (over ``process.cwd``); tty: ``--tty`` (or ``process.terminal``);
        console_socket: needed exactly when a terminal is asked.
    Raises:
        UsageError: both or neither of a command and ``--process``; a terminal without a console
        socket or the reverse; a malformed ``-e``.  BundleInvalid: the process object
        (``process_spec.parse_process``, pointers under ``/process``).
    """
    argv = list(args)
    if argv[:1] == ["--"]:
        argv = argv[1:]
    proc = ExecProcess(args=argv)
    if process_file:
        if argv:
            raise UsageError("give either --process or a command, not both")
        proc = parse_process(read_file(process_file), process_file)
        cwd = cwd or proc.cwd
    terminal = tty or proc.terminal
    if terminal and not console_socket:
        raise UsageError(
            "exec with a terminal is not supported without --console-socket",
            "pass --console-socket SOCKET, or run without a terminal",
        )
    if console_socket and not terminal:
        raise UsageError(
            "--console-socket was given but no terminal was asked",
            "add --tty (or process.terminal), or drop --console-socket",
        )
    if not proc.args:
        raise UsageError("exec needs a command", "usage: sandbox-shim exec [flags] ID CMD [ARGS...]")
    env = dict(proc.env)
    for pair in env_pairs:
        k, eq, v = pair.partition("=")
        if not eq or not k:
            raise UsageError(f"-e {pair!r}: expected K=V")
        env[k] = v
    return ExecRequest(proc, env, cwd, console_socket)


def _write_pid(pid_file: str | None, pid: int) -> None:
    if pid_file:
        from .durable import write_atomic

        write_atomic(os.path.abspath(pid_file), str(pid), 0o644)


def run(
    mechanism: Mechanism,
    sandbox: Sandbox | str,
    req: ExecRequest,
    *,
    detach: bool = False,
    pid_file: str | None = None,
    forward_signals: bool = True,
) -> int:
    """Run ``req`` in the running sandbox with this process's stdin/stdout/stderr.

    Args:
        detach: return once the program runs (it stays a descendant of the caller, whose subreaper
            reaps it); pid_file: gets its host pid, digits only, atomically (runc's contract).
        forward_signals: SIGINT, SIGTERM, SIGHUP and SIGQUIT received meanwhile go to the program.
    Returns:
        0 when detached, else the program's status as a shell reports it (128+n for a signal).
    Raises:
        CouldNotRun (127 not found, 126 permission denied), LimitExceeded, SandboxNotFound,
        InvalidState, BundleInvalid (credentials beyond the sandbox's), LaunchFailed.
    """
    from .api import id_of
    from .execution import Started, execute, spawn

    sandbox = id_of(sandbox)
    opts = req.spawn_options()
    args = req.process.args
    if detach:
        s = spawn(mechanism, sandbox, args, detach=True, **opts)
        s.helper.wait()
        _write_pid(pid_file, s.pid)
        return 0

    def on_start(started: Started) -> None:
        _write_pid(pid_file, started.pid)
        if forward_signals:
            import signal

            sigs = [signal.SIGINT, signal.SIGTERM]
            if sys.platform != "win32":  # no SIGHUP, SIGQUIT there
                sigs += [signal.SIGHUP, signal.SIGQUIT]
            for sig in sigs:
                signal.signal(sig, lambda n, _f: started.signal(n))

    done = execute(mechanism, sandbox, (args[0], args[1:]), capture=False, on_start=on_start, **opts)
    return int(done.shell_status)


def exec_command(
    mechanism: Mechanism,
    sandbox: Sandbox | str,
    *,
    process_file: str | None = None,
    args: Sequence[str] = (),
    env_pairs: Sequence[str] = (),
    cwd: str | None = None,
    tty: bool = False,
    console_socket: str | None = None,
    detach: bool = False,
    pid_file: str | None = None,
) -> int:
    """``run(mechanism, sandbox, request(...), detach=..., pid_file=...)``: runc's ``exec`` in one call.

    Raises: as ``request`` and ``run``."""
    req = request(
        process_file=process_file,
        args=args,
        env_pairs=env_pairs,
        cwd=cwd,
        tty=tty,
        console_socket=console_socket,
    )
    return run(mechanism, sandbox, req, detach=detach, pid_file=pid_file)
