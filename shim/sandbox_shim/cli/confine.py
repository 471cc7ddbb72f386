"""``sandbox-shim confine`` in the click group (for ``--help`` listings and ``CliRunner``).

The command line is parsed by ``cli/confine_run.py`` (no click: ``cli/__init__.py`` sends ``confine``
there directly, since it runs once per confined command); this command runs only when it is called
on its own (``CliRunner``, a script), and then hands the command line to the one boundary
(``cli.run``), which sends it the same way.
"""

from __future__ import annotations

import sys

import click

from . import run


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
def command(argv: tuple[str, ...]) -> None:
    """Run CMD with only --permit-path (and extra subpaths) readable and writable.

    The environment passes through unmodified; egress is open unless --allow-host is given; a
    runtime read set is read-only, /tmp private; everything else (siblings, .., home directories,
    the platform's files) is out of reach.  See `sandbox-shim confine --help`.
    """
    sys.exit(run(["confine", *argv]))
