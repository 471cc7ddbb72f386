"""``sandbox-shim proxy ID --listen 127.0.0.1:PORT``: forward a host loopback port to a sandbox.

Parses, calls ``sandbox_shim.proxy.serve``, prints one line naming both ends, forwards until
interrupted (SIGINT or SIGTERM).  ``serve`` accepts loopback listen addresses only (the rule lives in
the library, ``proxy.loopback_listen``).
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
    server = proxy.serve(api.default_mechanism(g.root), container_id, listen, timeout)
    host, port = server.listen_address
    up_host, up_port = server.upstream
    click.echo(f"listening on {host}:{port} -> {up_host}:{up_port}")
    sys.stdout.flush()
    proxy.serve_until_signalled(server)
