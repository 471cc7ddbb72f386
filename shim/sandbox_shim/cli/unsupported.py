"""``checkpoint`` and ``restore`` (runc's CRIU verbs): not supported, said as such.

Both accept runc's arguments and exit with status 4 (``CapabilityUnavailable``, "refused: this host
lacks checkpoint"), never a usage error, so clients (containerd's shim, podman) report "not supported".
"""

from __future__ import annotations

import click

from .output import Globals

_ANY = {"ignore_unknown_options": True, "allow_extra_args": True}


def _refuse(g: Globals, verb: str) -> None:
    from ..capability import Capability
    from ..errors import CapabilityUnavailable

    raise CapabilityUnavailable(
        [
            Capability(
                verb,
                False,
                "none",
                f"{verb} is not supported by sandbox-shim (no CRIU integration)",
                "not implemented",
            )
        ]
    )


@click.command("checkpoint", context_settings=_ANY)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.pass_obj
def checkpoint(g: Globals, args: tuple[str, ...]) -> None:
    """Not supported: exits 4 ("refused: this host lacks checkpoint")."""
    _refuse(g, "checkpoint")


@click.command("restore", context_settings=_ANY)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.pass_obj
def restore(g: Globals, args: tuple[str, ...]) -> None:
    """Not supported: exits 4 ("refused: this host lacks restore")."""
    _refuse(g, "restore")
