"""``exec``, ``ps``, ``pause``, ``resume``, ``update``, ``events``: click commands over the library.

runc's grammar.  Each command parses, calls ``sandbox_shim.execution`` / ``sandbox_shim.control``, renders;
errors go through ``output.fail`` (one line, the error class's exit status: "executable file not
found" 127, "permission denied" 126).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal as _signal
import sys
from typing import Any

import click

from ..errors import ShimError, UsageError
from .output import Globals, emit_json, fail


def _load_json(source: str) -> Any:
    """JSON from a file, or from stdin when ``source`` is ``-``.  Raises UsageError."""
    from ..jsonguard import MAX_BYTES, loads

    try:
        if source == "-":
            data = sys.stdin.buffer.read(MAX_BYTES + 1)
        else:
            with open(source, "rb") as fh:
                data = fh.read(MAX_BYTES + 1)
    except OSError as e:
        raise UsageError(f"cannot read JSON from {source}: {e.strerror}") from e
    doc, problems = loads(data, source)
    if problems:
        raise UsageError(f"{source}: {problems[0].line()}")
    return doc


@click.command("exec", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("-p", "--process", "process_file", default=None, help="OCI process JSON (instead of CMD).")
@click.option("-d", "--detach", is_flag=True, help="Exit once the program runs.")
@click.option("--pid-file", default=None, help="Write the program's host pid here.")
@click.option("-t", "--tty", is_flag=True, help="Give the program a terminal (with --console-socket).")
@click.option("--console-socket", default=None, help="Unix socket that receives the terminal's master.")
@click.option("-e", "--env", "env_pairs", multiple=True, help="K=V set over the sandbox's environment.")
@click.option("--cwd", default=None, help="Working directory inside the sandbox.")
@click.argument("container_id")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.pass_obj
def exec_cmd(g: Globals, process_file: str | None, detach: bool, pid_file: str | None, tty: bool,
             console_socket: str | None, env_pairs: tuple[str, ...], cwd: str | None, container_id: str,
             command: tuple[str, ...]) -> None:
    """Run CMD inside the running sandbox ID (its namespaces, cgroup, root, user, capabilities, seccomp).

    ``--process FILE`` takes a runtime-spec ``process`` object (``sandbox_shim.process_spec`` says what
    it may ask).  With ``--detach`` the command exits once the program runs; the program stays a
    descendant of the caller (its subreaper reaps it and gets its status) and ``--pid-file`` holds its
    host pid.  A terminal (``--tty`` or ``process.terminal``) needs ``--console-socket``.
    Exits with the program's status (128+n for a signal); 127 "executable file not found",
    126 "permission denied" when it never ran.
    """
    from .. import api
    from ..execution import Started, execute, spawn
    from ..process_spec import ExecProcess, parse_process

    try:
        argv = list(command[1:] if command[:1] == ("--",) else command)
        req = ExecProcess(args=argv)
        if process_file:
            if argv:
                raise UsageError("give either --process or a command, not both")
            req = parse_process(_load_json(process_file), process_file)
            cwd = cwd or req.cwd
        terminal = tty or req.terminal
        if terminal and not console_socket:
            raise UsageError("exec with a terminal is not supported without --console-socket",
                             "pass --console-socket SOCKET, or run without a terminal")
        if console_socket and not terminal:
            raise UsageError("--console-socket was given but no terminal was asked",
                             "add --tty (or process.terminal), or drop --console-socket")
        if not req.args:
            raise UsageError("exec needs a command", "usage: sandbox-shim exec [flags] ID CMD [ARGS...]")
        env = dict(req.env)
        for pair in env_pairs:
            k, eq, v = pair.partition("=")
            if not eq or not k:
                raise UsageError(f"-e {pair!r}: expected K=V")
            env[k] = v
        mech = api.default_mechanism(g.root)
        opts: dict[str, Any] = {"env": env, "cwd": cwd, "replace_env": req.env_given, "user": req.user,
                                "capabilities": req.capabilities, "console_socket": console_socket}
        if detach:
            s = spawn(mech, container_id, req.args, detach=True, **opts)
            s.helper.wait()
            if pid_file:
                from ..state import write_atomic

                write_atomic(os.path.abspath(pid_file), str(s.pid), 0o644)
            return
        def on_start(started: Started) -> None:
            if pid_file:
                from ..state import write_atomic

                write_atomic(os.path.abspath(pid_file), str(started.pid), 0o644)
            for sig in (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP, _signal.SIGQUIT):
                _signal.signal(sig, lambda n, _f: started.signal(n))

        done = execute(mech, container_id, (req.args[0], req.args[1:]), capture=False, on_start=on_start,
                       **opts)
    except ShimError as e:
        fail(g, e)
    sys.exit(done.shell_status)


@click.command("ps")
@click.option("-f", "--format", "fmt", type=click.Choice(["table", "json"]), default="table",
              show_default=True)
@click.argument("container_id")
@click.pass_obj
def ps_cmd(g: Globals, fmt: str, container_id: str) -> None:
    """List the processes of sandbox ID (host pids in its cgroup); json: a list of pids, as runc."""
    from .. import api, control

    try:
        pids = control.ps(api.default_mechanism(g.root), container_id)
    except ShimError as e:
        fail(g, e)
    if fmt == "json":
        click.echo(json.dumps(pids))
        return
    click.echo(f"{'PID':>8} CMD")
    for pid in pids:
        cmd = b""
        with contextlib.suppress(OSError), open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmd = fh.read()
        text = cmd.replace(b"\0", b" ").decode(errors="replace").strip()
        click.echo(f"{pid:>8} {text}")


@click.command("pause")
@click.argument("container_id")
@click.pass_obj
def pause_cmd(g: Globals, container_id: str) -> None:
    """Freeze every process of the running sandbox ID."""
    from .. import api, control

    try:
        control.pause(api.default_mechanism(g.root), container_id)
    except ShimError as e:
        fail(g, e)


@click.command("resume")
@click.argument("container_id")
@click.pass_obj
def resume_cmd(g: Globals, container_id: str) -> None:
    """Thaw the paused sandbox ID."""
    from .. import api, control

    try:
        control.resume(api.default_mechanism(g.root), container_id)
    except ShimError as e:
        fail(g, e)


@click.command("update")
@click.option("-r", "--resources", "resources_file", default=None,
              help="OCI linux.resources JSON (memory, pids, cpu); '-' reads stdin.")
@click.option("--memory", type=int, default=None, help="Memory limit, bytes.")
@click.option("--pids-limit", type=int, default=None, help="Maximum number of processes.")
@click.option("--cpu-quota", type=int, default=None, help="CPU quota per period, µs.")
@click.option("--cpu-period", type=int, default=None, help="CPU period, µs.")
@click.option("--cpu-shares", type=int, default=None, help="Relative CPU weight.")
@click.argument("container_id")
@click.pass_obj
def update_cmd(g: Globals, resources_file: str | None, memory: int | None, pids_limit: int | None,
               cpu_quota: int | None, cpu_period: int | None, cpu_shares: int | None,
               container_id: str) -> None:
    """Change the resource limits of sandbox ID while it runs."""
    from .. import api, control

    try:
        res: dict[str, Any] = _load_json(resources_file) if resources_file else {}
        if not isinstance(res, dict):
            raise UsageError("--resources must hold a JSON object")
        for section, key, val in (("memory", "limit", memory), ("pids", "limit", pids_limit),
                                  ("cpu", "quota", cpu_quota), ("cpu", "period", cpu_period),
                                  ("cpu", "shares", cpu_shares)):
            if val is not None:
                res.setdefault(section, {})[key] = val
        if not res:
            raise UsageError("nothing to update", "give --resources FILE or a limit flag")
        control.update(api.default_mechanism(g.root), container_id, res)
    except ShimError as e:
        fail(g, e)


def _seconds(text: str) -> float:
    """``5``, ``5s``, ``500ms``, ``1m`` -> seconds (runc takes a Go duration)."""
    t = text.strip().lower()
    for suffix, mult in (("ms", 0.001), ("s", 1.0), ("m", 60.0)):
        if t.endswith(suffix):
            t, scale = t[: -len(suffix)], mult
            break
    else:
        scale = 1.0
    try:
        val = float(t) * scale
    except ValueError:
        raise UsageError(f"--interval {text!r}: expected seconds such as 5 or 500ms") from None
    if val <= 0:
        raise UsageError("--interval must be positive")
    return val


@click.command("events")
@click.option("--stats", is_flag=True, help="Print one stats event and exit.")
@click.option("--interval", default="5s", show_default=True, help="Time between stats events.")
@click.argument("container_id")
@click.pass_obj
def events_cmd(g: Globals, stats: bool, interval: str, container_id: str) -> None:
    """Stats of sandbox ID as runc's JSON events (one per line), until it stops; --stats: one."""
    from .. import api, control

    try:
        mech = api.default_mechanism(g.root)
        if stats:
            emit_json(control.stats(mech, container_id))
            return
        for ev in control.events(mech, container_id, _seconds(interval)):
            sys.stdout.write(json.dumps(ev) + "\n")
            sys.stdout.flush()
    except ShimError as e:
        fail(g, e)
    except (KeyboardInterrupt, BrokenPipeError):
        pass
