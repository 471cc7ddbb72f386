"""``sandbox-shim confine`` in the click group (for ``--help`` listings and ``CliRunner``).

The command line is parsed by ``cli/confine_run.py`` (no click: ``cli/__init__.py`` sends ``confine``
there directly, since it runs once per confined command); this only hands the arguments over, and,
when it is called on its own rather than through ``cli.main``, turns what it raises into a status with
the boundary's ``status_of``.
"""

from __future__ import annotations

import sys

import click

from . import status_of
from .confine_run import run
from .output import Globals


@click.command(
    "confine",
    context_settings={
        "ignore_unknown_options": True,
        "allow_interspersed_args": False,
        "help_option_names": [],
    },
    add_help_option=False,
)
@click.argument("argv", nargs=-1, type=click.UNPROCESSED, metavar="[OPTIONS] -- CMD [ARGS]...")
@click.pass_context
def command(ctx: click.Context, argv: tuple[str, ...]) -> None:
    """Run CMD with only --permit-path (and extra subpaths) readable and writable.

    The environment passes through unmodified; egress is open unless --allow-host is given; a
    runtime read set is read-only, /tmp private; everything else (siblings, .., home directories,
    the platform's files) is out of reach.  See `sandbox-shim confine --help`.
    """
    g = ctx.obj if isinstance(ctx.obj, Globals) else Globals()
    try:
        status = run(list(argv))
    except Exception as e:  # called on its own (CliRunner, a script): the boundary's own mapping
        status = status_of(g, e)
    sys.exit(status)
