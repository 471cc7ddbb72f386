"""``exec``, ``ps``, ``pause``, ``resume``, ``update``, ``events``: click commands over the library.

runc's grammar.  Each command parses, makes one library call (``exec_request.exec_command``,
``process_list``, ``control``), renders; what it raises goes to the boundary in ``cli/__init__.py``
(one line, the error class's exit status: "executable file not found" 127, "permission denied" 126).
"""

from __future__ import annotations

import json
import sys

import click

from ..errors import UsageError
from .output import Globals, emit_json


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
def exec_cmd(
    g: Globals,
    process_file: str | None,
    detach: bool,
    pid_file: str | None,
    tty: bool,
    console_socket: str | None,
    env_pairs: tuple[str, ...],
    cwd: str | None,
    container_id: str,
    command: tuple[str, ...],
) -> None:
    """Run CMD inside the running sandbox ID (its namespaces, cgroup, root, user, capabilities, seccomp).

    ``--process FILE`` takes a runtime-spec ``process`` object (``sandbox_shim.process_spec`` says what
    it may ask).  With ``--detach`` the command exits once the program runs; the program stays a
    descendant of the caller (its subreaper reaps it and gets its status) and ``--pid-file`` holds its
    host pid.  A terminal (``--tty`` or ``process.terminal``) needs ``--console-socket``.
    Exits with the program's status (128+n for a signal); 127 "executable file not found",
    126 "permission denied" when it never ran.
    """
    from .. import api
    from ..exec_request import exec_command

    sys.exit(
        exec_command(
            api.default_mechanism(g.root),
            container_id,
            process_file=process_file,
            args=command,
            env_pairs=env_pairs,
            cwd=cwd,
            tty=tty,
            console_socket=console_socket,
            detach=detach,
            pid_file=pid_file,
        )
    )


@click.command("ps")
@click.option(
    "-f", "--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True
)
@click.argument("container_id")
@click.pass_obj
def ps_cmd(g: Globals, fmt: str, container_id: str) -> None:
    """List the processes of sandbox ID (host pids in its cgroup); json: a list of pids, as runc."""
    from .. import api, process_list

    mech = api.default_mechanism(g.root)
    # the library first: an error prints no header; json wants pids only (no command lines read)
    rows = process_list.processes(mech, container_id, commands=fmt != "json")
    if fmt == "json":
        click.echo(json.dumps([pid for pid, _ in rows]))
        return
    click.echo(f"{'PID':>8} CMD")
    for pid, cmd in rows:
        click.echo(f"{pid:>8} {cmd}")


@click.command("pause")
@click.argument("container_id")
@click.pass_obj
def pause_cmd(g: Globals, container_id: str) -> None:
    """Freeze every process of the running sandbox ID."""
    from .. import api, control

    control.pause(api.default_mechanism(g.root), container_id)


@click.command("resume")
@click.argument("container_id")
@click.pass_obj
def resume_cmd(g: Globals, container_id: str) -> None:
    """Thaw the paused sandbox ID."""
    from .. import api, control

    control.resume(api.default_mechanism(g.root), container_id)


@click.command("update")
@click.option(
    "-r",
    "--resources",
    "resources_file",
    default=None,
    help="OCI linux.resources JSON (memory, pids, cpu); '-' reads stdin.",
)
@click.option("--memory", type=int, default=None, help="Memory limit, bytes.")
@click.option("--pids-limit", type=int, default=None, help="Maximum number of processes.")
@click.option("--cpu-quota", type=int, default=None, help="CPU quota per period, µs.")
@click.option("--cpu-period", type=int, default=None, help="CPU period, µs.")
@click.option("--cpu-shares", type=int, default=None, help="Relative CPU weight.")
@click.argument("container_id")
@click.pass_obj
def update_cmd(
    g: Globals,
    resources_file: str | None,
    memory: int | None,
    pids_limit: int | None,
    cpu_quota: int | None,
    cpu_period: int | None,
    cpu_shares: int | None,
    container_id: str,
) -> None:
    """Change the resource limits of sandbox ID while it runs."""
    from .. import api, control

    control.update_limits(
        api.default_mechanism(g.root),
        container_id,
        resources_file,
        memory=memory,
        pids_limit=pids_limit,
        cpu_quota=cpu_quota,
        cpu_period=cpu_period,
        cpu_shares=cpu_shares,
    )


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
    """Stats of sandbox ID as runc's JSON events (one per line), until it stops; --stats: one.

    Exits 0 when the sandbox stops, 130 on Ctrl-C, 74 when the reader goes away (a closed pipe)."""
    from .. import api, control

    mech = api.default_mechanism(g.root)
    # --stats reads no interval (it is not parsed then); a reader that went away is status 74,
    # Ctrl-C 130: both at the boundary (cli/__init__.py)
    for ev in control.events(mech, container_id, 5.0 if stats else _seconds(interval), once=stats):
        if stats:
            emit_json(ev)
        else:
            sys.stdout.write(json.dumps(ev) + "\n")
            sys.stdout.flush()
