"""The click group for the commands people type (everything but the lifecycle fast path).

Each command lives in its own module under ``cli/`` and is listed in ``COMMANDS``; a module exposes
``command`` (a click command).  Commands parse, call the library, render — no logic here.
"""

from __future__ import annotations

import importlib

import click

from .flags import HELP as GLOBAL_FLAGS_HELP
from .output import Globals, attach_telemetry

#: module name under sandbox_shim.cli -> attribute holding the click command
COMMANDS: list[str] = [
    "bundle_cmds:spec",
    "bundle_cmds:validate",
    "image_cmds:bundle",
    "lifecycle_click:run",
    "lifecycle_click:list_cmd",
    "confine:command",
    "capabilities:capabilities_cmd",
    "capabilities:features_cmd",
    "proxy:command",
    "control:exec_cmd",
    "control:ps_cmd",
    "control:pause_cmd",
    "control:resume_cmd",
    "control:update_cmd",
    "control:events_cmd",
    "conformance:command",
    "unsupported:checkpoint",
    "unsupported:restore",
]

LIFECYCLE_HELP = (
    "\b\nGlobal flags (before the command):\n"
    + GLOBAL_FLAGS_HELP
    + """

\b
Lifecycle verbs (runc grammar, parsed without click for speed):
  create [-b|--bundle DIR] [--pid-file F] [--console-socket S] ID
  start ID | state ID | kill [--all] ID [SIGNAL] | delete [-f|--force] ID
"""
)


@click.group(epilog=LIFECYCLE_HELP, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="sandbox-shim", prog_name="sandbox-shim")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """sandbox-shim: run OCI bundles as sandboxes with the host's own isolation."""
    if not isinstance(ctx.obj, Globals):  # called directly (tests' CliRunner): the defaults
        ctx.obj = Globals()
    attach_telemetry(ctx.obj)


def run_click(g: Globals, args: list[str]) -> int:
    """Run the click commands with the already-parsed global flags ``g``; return the exit status.

    Click's own usage errors become ``UsageError`` (one line, status 2); everything else propagates
    to the boundary in ``cli.main``.  The group is run with ``make_context``/``invoke``, not
    ``cli.main``: that one would answer a closed pipe (EPIPE) with status 1 and turn Ctrl-C into
    ``Abort``, where the boundary gives the documented 74 and 130."""
    from ..errors import UsageError

    try:
        with cli.make_context("sandbox-shim", list(args), obj=g) as ctx:
            cli.invoke(ctx)
    except click.exceptions.NoArgsIsHelpError as e:  # click >= 8.2: a bare group prints its help
        click.echo(e.ctx.get_help() if e.ctx else "")
        return 0
    except click.exceptions.Exit as e:
        return int(e.exit_code or 0)
    except click.exceptions.Abort:
        return 130
    except click.exceptions.ClickException as e:
        raise UsageError(
            e.format_message().replace("\n", " "),
            "see `sandbox-shim --help` or `sandbox-shim COMMAND --help`",
        ) from e
    return 0


for _entry in COMMANDS:
    _mod, _attr = _entry.split(":")
    cli.add_command(getattr(importlib.import_module(f"{__package__}.{_mod}"), _attr))
