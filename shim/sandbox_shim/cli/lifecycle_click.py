"""``run`` and ``list``: the lifecycle for people (create + start + wait + delete; a table of sandboxes)."""

from __future__ import annotations

import contextlib
import json
import os
import signal as _signal
import sys

import click

from ..errors import ShimError
from .output import Globals, fail


@click.command("run")
@click.option("-b", "--bundle", default=".", show_default=True)
@click.option("-d", "--detach", is_flag=True, help="Return once started; do not wait or delete.")
@click.option("--pid-file", default=None)
@click.option("--keep", is_flag=True, help="Do not delete the sandbox after it exits.")
@click.argument("container_id")
@click.pass_obj
def run(g: Globals, bundle: str, detach: bool, pid_file: str | None, keep: bool, container_id: str) -> None:
    """Create and start a sandbox; wait for it and delete it (runc run).  Exits with its status."""
    from .. import api
    from ..mechanism import Sandbox

    mech = api.default_mechanism(g.root)
    mech.systemd_cgroup = g.systemd_cgroup
    try:
        st = api.provision(mech, Sandbox(container_id, bundle), pid_file=pid_file)
        api.start(mech, container_id)
    except ShimError as e:
        fail(g, e)
    if detach:
        return

    def forward(signum: int, _frame: object) -> None:
        with contextlib.suppress(ShimError):
            api.signal(mech, container_id, signum)

    for s in (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP):
        _signal.signal(s, forward)
    status = 255
    while True:
        try:
            _, raw = os.waitpid(st.pid, 0)
            status = os.waitstatus_to_exitcode(raw)
            status = 128 - status if status < 0 else status
            break
        except InterruptedError:
            continue
        except ChildProcessError:
            status = api.status(mech, container_id).exit_status or 0
            break
    if not keep:
        with contextlib.suppress(ShimError):
            api.destroy(mech, container_id, force=True)
    sys.exit(status)


@click.command("list")
@click.option(
    "-f", "--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True
)
@click.option("-q", "--quiet", is_flag=True, help="Ids only.")
@click.pass_obj
def list_cmd(g: Globals, fmt: str, quiet: bool) -> None:
    """List the sandboxes under --root with their observed status."""
    from .. import api

    items = api.list_running(api.default_mechanism(g.root))
    if quiet:
        for s in items:
            click.echo(s.id)
    elif fmt == "json":
        click.echo(json.dumps([s.to_oci() for s in items], indent=2))
    else:
        click.echo(f"{'ID':<24} {'PID':>8} {'STATUS':<8} {'BUNDLE':<40} CREATED")
        for s in items:
            click.echo(f"{s.id:<24} {s.pid:>8} {s.status:<8} {s.bundle:<40} {s.created or ''}")
