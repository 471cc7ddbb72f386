"""``sandbox-shim conformance``: run the conformance suite on this host and print the table.

Parses, calls ``sandbox_shim.conformance.runner``, renders.  Exit status 1 when any check is ``fail`` or
``error``, 3 when a check could not run (``skip``) unless ``--accept-skips``, 2 when the target cannot be
loaded or a ``--group`` has no check (``UsageError``, from the library), else 0.
"""

from __future__ import annotations

import sys

import click


@click.command("conformance", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option(
    "--mechanism",
    default=None,
    metavar="MODULE:CLASS",
    help="A ConformanceTarget to test (default: this host's mechanism, "
    "sandbox_shim.conformance.api_target:ApiTarget).",
)
@click.option(
    "--group",
    "groups",
    multiple=True,
    metavar="GROUP",
    help="Run only this group (repeatable): any group of conformance/checks/, e.g. Isolation.",
)
@click.option("-k", "name_contains", default=None, help="Run only checks whose name contains this text.")
@click.option(
    "--accept-skips", is_flag=True, help="Exit 0 even when some checks could not run here (default: exit 3)."
)
def command(
    fmt: str, mechanism: str | None, groups: tuple[str, ...], name_contains: str | None, accept_skips: bool
) -> None:
    """Attack a sandbox the way a hostile tenant would, and print what stopped it.

    Every check runs a CONTROL (the probe where it is permitted: must succeed and print a marker)
    and then the BREACH (must be stopped with the expected error and no marker).  Verdicts: pass,
    fail (the breach succeeded), error (the control failed: a dead process is never "denied"),
    skip (a needed tool is missing).
    """
    from ..conformance.runner import exit_status, render_table, run_target, to_json

    progress = (
        (lambda r: click.echo(f"  {r.verdict:5} {r.group} / {r.check}", err=True))
        if fmt == "table" and sys.stderr.isatty()
        else None
    )
    name, rows = run_target(mechanism, groups or None, name_contains, on_result=progress)
    click.echo(render_table(rows) if fmt == "table" else to_json(rows, name))
    sys.exit(exit_status(rows, accept_skips))
