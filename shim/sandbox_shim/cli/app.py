"""The click group for the commands people type (everything but the lifecycle fast path).

Each command lives in its own module under ``cli/`` and is listed in ``COMMANDS``; a module exposes
``command`` (a click command).  Commands parse, call the library, render — no logic here.
"""

from __future__ import annotations

import importlib

import click

from .output import DEFAULT_ROOT, Globals, attach_telemetry

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

LIFECYCLE_HELP = """\b
Lifecycle verbs (runc grammar, parsed without click for speed):
  create [-b|--bundle DIR] [--pid-file F] [--console-socket S] ID
  start ID | state ID | kill [--all] ID [SIGNAL] | delete [-f|--force] ID
"""


@click.group(epilog=LIFECYCLE_HELP, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--root", default=DEFAULT_ROOT, show_default=True, help="State directory for sandboxes.")
@click.option("--log", "log_file", default=None, help="Append log records to this file.")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--debug", is_flag=True, help="More detail in logs.")
@click.option("--systemd-cgroup", is_flag=True,
              help="cgroupsPath is slice:prefix:name; systemd makes the scope (refused without systemd).")
@click.version_option(package_name="sandbox-shim", prog_name="sandbox-shim")
@click.pass_context
def cli(
    ctx: click.Context, root: str, log_file: str | None, log_format: str, debug: bool, systemd_cgroup: bool
) -> None:
    """sandbox-shim: run OCI bundles as sandboxes with the host's own isolation."""
    ctx.obj = Globals(root=root, log=log_file, log_format=log_format, debug=debug,
                      systemd_cgroup=systemd_cgroup)
    attach_telemetry(ctx.obj)


for _entry in COMMANDS:
    _mod, _attr = _entry.split(":")
    cli.add_command(getattr(importlib.import_module(f"{__package__}.{_mod}"), _attr))
