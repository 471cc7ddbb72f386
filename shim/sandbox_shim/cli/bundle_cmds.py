"""``spec`` and ``validate``: write a default config.json; check one against the schema and policy."""

from __future__ import annotations

import json
import os
import sys

import click

from ..errors import BundleInvalid, UsageError
from .output import Globals, log


@click.command("spec")
@click.option(
    "-b", "--bundle", default=".", show_default=True, help="Bundle directory to write config.json into."
)
@click.option("--force", is_flag=True, help="Overwrite an existing config.json.")
@click.pass_obj
def spec(g: Globals, bundle: str, force: bool) -> None:
    """Write a config.json with safe tenant defaults (like `runc spec`)."""
    from ..template import default_config

    path = os.path.join(bundle, "config.json")
    if os.path.exists(path) and not force:
        raise UsageError(f"{path} already exists", "pass --force to overwrite it")
    try:
        os.makedirs(bundle, exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(default_config(), fh, indent=2)
            fh.write("\n")
    except OSError as e:
        raise UsageError(f"cannot write {path}: {e.strerror}", "give a bundle directory you can write") from e
    click.echo(f"wrote {path}")


@click.command("validate")
@click.option("-b", "--bundle", default=".", show_default=True, help="Bundle directory holding config.json.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.pass_obj
def validate(g: Globals, bundle: str, fmt: str) -> None:
    """Check config.json against the schema and the tenant policy; print each problem and its pointer."""
    from ..bundle import load

    try:
        s = load(bundle, launch=False)
    except BundleInvalid as e:  # the answer validate exists to give: every problem, then its status
        if fmt == "text" and g.log_format == "json":
            raise  # the boundary writes it as one JSON record (problems included)
        log(g, "error", e.line(), **{k: v for k, v in e.to_dict().items() if k != "msg"})
        if fmt == "json":
            click.echo(json.dumps({"valid": False, "errors": [p.__dict__ for p in e.problems]}, indent=2))
        else:
            for p in e.problems:
                click.echo(f"error: {p.line()}", err=True)
        sys.exit(e.exit_status)
    if fmt == "json":
        click.echo(json.dumps({"valid": True, "warnings": [p.__dict__ for p in s.warnings]}, indent=2))
    else:
        for p in s.warnings:
            click.echo(f"warning: {p.line()}", err=True)
        click.echo(f"{s.bundle}: valid")
