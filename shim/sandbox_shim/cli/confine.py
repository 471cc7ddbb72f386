"""``sandbox-shim confine``: run one trusted command confined to a directory (control-plane profile).

Parses, calls ``sandbox_shim.hardening.confinement.confine``, then execs the returned launch spec so
the caller waits on the confined command directly (no Python process stays behind).
"""

from __future__ import annotations

import json
import os
import sys

import click

from ..errors import CannotEnforce, UsageError
from .output import Globals, fail


@click.command("confine", context_settings={"ignore_unknown_options": True,
                                            "allow_interspersed_args": False,
                                            "help_option_names": ["-h", "--help"]})
@click.option("--permit-path", required=True, metavar="DIR",
              help="The one directory readable and writable.")
@click.option("--permit-extra-subpath", "extras", multiple=True, metavar="DIR",
              help="An extra read-write directory (repeatable; none by default).")
@click.option("--cd", "cd", default=None, metavar="DIR",
              help="Where the command starts (default: the permit path). Not a boundary.")
@click.option("--print-launch-spec", is_flag=True,
              help="Print the launch spec as JSON (environment names only) instead of running it.")
@click.argument("argv", nargs=-1, required=True, type=click.UNPROCESSED, metavar="-- CMD [ARGS]...")
@click.pass_context
def command(ctx: click.Context, permit_path: str, extras: tuple[str, ...], cd: str | None,
            print_launch_spec: bool, argv: tuple[str, ...]) -> None:
    """Run CMD with only --permit-path (and extra subpaths) readable and writable.

    The environment passes through unmodified and the network is allowed; a runtime read set is
    read-only; everything else (siblings, .., the platform's files) is out of reach.  Exits with
    the command's own status; 5 when the confinement cannot be built here (nothing is run).
    """
    from ..hardening import confinement

    g = ctx.obj if isinstance(ctx.obj, Globals) else Globals()
    try:
        spec = confinement.confine((argv[0], list(argv[1:])), permit_path=permit_path, cd=cd,
                                   env=confinement.caller_environ(),
                                   permit_extra_subpaths=list(extras))
    except CannotEnforce as e:
        fail(g, e)
    except ValueError as e:
        fail(g, UsageError(str(e)))
    if print_launch_spec:
        sys.stdout.write(json.dumps(confinement.describe(spec), indent=2) + "\n")
        sys.stdout.flush()
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.chdir(spec["cd"])
    os.execve(spec["cmd"], [spec["cmd"], *spec["args"]], spec["env"])
