"""``spec`` and ``validate``: write a default config.json; check one against the schema and policy."""

from __future__ import annotations

import json
import sys

import click

from .output import Globals, log, rfc3339_now


@click.command("spec")
@click.option(
    "-b", "--bundle", default=".", show_default=True, help="Bundle directory to write config.json into."
)
@click.option("--force", is_flag=True, help="Overwrite an existing config.json.")
@click.pass_obj
def spec(g: Globals, bundle: str, force: bool) -> None:
    """Write a config.json with safe tenant defaults (like `runc spec`)."""
    from ..template import write_spec

    click.echo(f"wrote {write_spec(bundle, force)}")


@click.command("validate")
@click.option("-b", "--bundle", default=".", show_default=True, help="Bundle directory holding config.json.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.pass_obj
def validate(g: Globals, bundle: str, fmt: str) -> None:
    """Check config.json against the schema and the tenant policy; print each problem and its pointer."""
    from ..bundle import validate as check

    v = check(bundle)
    e = v.error
    if fmt == "text" and g.log_format == "json":  # every line on stderr is a JSON record
        for p in v.warnings:
            rec = {"level": "warning", "msg": p.line(), "time": rfc3339_now(), **p.__dict__}
            click.echo(json.dumps(rec), err=True)
        if e is not None:
            raise e  # the boundary writes it as one JSON record (problems included)
        click.echo(f"{v.bundle}: valid")
        return
    if e is not None:
        log(g, "error", e.line(), **{k: w for k, w in e.to_dict().items() if k != "msg"})
    if fmt == "json":
        doc = (
            {
                "valid": False,
                "errors": [p.__dict__ for p in v.problems],
                "warnings": [p.__dict__ for p in v.warnings],
            }
            if e is not None
            else {"valid": True, "warnings": [p.__dict__ for p in v.warnings]}
        )
        click.echo(json.dumps(doc, indent=2))
    else:
        for p in v.problems:
            click.echo(f"error: {p.line()}", err=True)
        for p in v.warnings:
            click.echo(f"warning: {p.line()}", err=True)
        if e is None:
            click.echo(f"{v.bundle}: valid")
    if e is not None:
        sys.exit(e.exit_status)  # every problem was the answer; its status is BundleInvalid's (3)
