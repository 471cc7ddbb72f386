"""``run`` and ``list``: the lifecycle for people (create + start + wait + delete; a table of sandboxes)."""

from __future__ import annotations

import json
import sys

import click

from .output import Globals


@click.command("run")
@click.option("-b", "--bundle", default=".", show_default=True)
@click.option("-d", "--detach", is_flag=True, help="Return once started; do not wait or delete.")
@click.option("--pid-file", default=None)
@click.option("--keep", is_flag=True, help="Do not delete the sandbox after it exits.")
@click.argument("container_id")
@click.pass_obj
def run(g: Globals, bundle: str, detach: bool, pid_file: str | None, keep: bool, container_id: str) -> None:
    """Create and start a sandbox; wait for it and delete it (runc run).  Exits with its status.

    The library's ``execution.runc_run`` with this process's stdio: ``execution.run_bundle``, so the
    bundle's wall-clock setting and every limit apply exactly as for a library caller.  ``--detach``
    is ``execution.run_detached`` (a bundle with a wall-clock limit is refused: nothing would wait).
    Signals received while it runs (INT, TERM, HUP) are passed on to the sandbox."""
    from .. import api
    from ..execution import runc_run

    # create makes a systemd scope with --systemd-cgroup; the other verbs read the record
    mech = api.default_mechanism(g.root, systemd_cgroup=g.systemd_cgroup)
    done = runc_run(mech, container_id, bundle, detach=detach, stdio=(0, 1, 2), pid_file=pid_file, keep=keep)
    if done is not None:
        sys.exit(done.shell_status)


@click.command("list")
@click.option(
    "-f", "--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True
)
@click.option("-q", "--quiet", is_flag=True, help="Ids only.")
@click.pass_obj
def list_cmd(g: Globals, fmt: str, quiet: bool) -> None:
    """List the sandboxes under --root with their observed status."""
    from .. import api

    items = api.list_sandboxes(api.default_mechanism(g.root))
    if quiet:
        for s in items:
            click.echo(s.id)
    elif fmt == "json":
        click.echo(json.dumps([s.to_oci() for s in items], indent=2))
    else:
        click.echo(f"{'ID':<24} {'PID':>8} {'STATUS':<8} {'BUNDLE':<40} CREATED")
        for s in items:
            click.echo(f"{s.id:<24} {s.pid:>8} {s.status:<8} {s.bundle:<40} {s.created or ''}")
