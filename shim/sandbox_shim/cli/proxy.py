"""``sandbox-shim proxy ID --listen 127.0.0.1:PORT``: forward a host loopback port to a sandbox.

Parses, calls ``sandbox_shim.proxy.serve_sandbox`` (listen, then print one line naming both ends,
then forward until interrupted: SIGINT or SIGTERM).  ``serve`` accepts loopback listen addresses only
(the rule lives in the library, ``proxy.loopback_listen``).
"""

from __future__ import annotations

import sys

import click

from .output import Globals


@click.command("proxy")
@click.argument("container_id")
@click.option(
    "--listen",
    default="127.0.0.1:0",
    show_default=True,
    metavar="HOST:PORT",
    help="Loopback address to listen on (port 0: the kernel picks one).",
)
@click.option(
    "--timeout", default=10.0, show_default=True, type=float, help="Seconds to connect to the sandbox."
)
@click.pass_context
def command(ctx: click.Context, container_id: str, listen: str, timeout: float) -> None:
    """Forward connections on a host loopback port to sandbox CONTAINER_ID's address until interrupted.

    Prints "listening on HOST:PORT -> IP:PORT" once ready.  Exit status 12 when the sandbox has no
    address (network mode none or host, no sandbox-shim.port, or stopped).
    """
    from .. import api, proxy

    g = ctx.obj if isinstance(ctx.obj, Globals) else Globals()
    proxy.serve_sandbox(api.default_mechanism(g.root), container_id, listen, timeout, _ready)


def _ready(listen: tuple[str, int], upstream: tuple[str, int]) -> None:
    """The one line naming both ends, printed once the listener is bound."""
    click.echo(f"listening on {listen[0]}:{listen[1]} -> {upstream[0]}:{upstream[1]}")
    sys.stdout.flush()
