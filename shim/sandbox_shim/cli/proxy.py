"""``sandbox-shim proxy ID --listen 127.0.0.1:PORT``: forward a host loopback port to a sandbox.

Parses, calls ``sandbox_shim.proxy.serve``, prints one line naming both ends, forwards until
interrupted (SIGINT or SIGTERM).  Only loopback listen addresses are accepted: the sandbox's server
is meant for this host, not for the network around it.
"""

from __future__ import annotations

import ipaddress
import signal
import sys
import threading

import click

from ..errors import ShimError, UsageError
from .output import Globals, fail


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) → ``(host, port)``; the host must be loopback.

    Raises:
        UsageError: malformed, port out of 0..65535, or not a loopback address.
    """
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    try:
        if not sep or not host:
            raise ValueError("expected HOST:PORT")
        num = int(port)
        if not 0 <= num < 65536:
            raise ValueError("port out of range")
        ip = ipaddress.ip_address(host)
    except ValueError as e:
        raise UsageError(f"--listen {text!r}: {e}", "use e.g. 127.0.0.1:8080 (port 0: any free port)") from e
    if not ip.is_loopback:
        raise UsageError(f"--listen {text!r} is not a loopback address", "use 127.0.0.1 or ::1")
    return str(ip), num


@click.command("proxy")
@click.argument("container_id")
@click.option("--listen", default="127.0.0.1:0", show_default=True, metavar="HOST:PORT",
              help="Loopback address to listen on (port 0: the kernel picks one).")
@click.option("--timeout", default=10.0, show_default=True, type=float,
              help="Seconds to connect to the sandbox.")
@click.pass_context
def command(ctx: click.Context, container_id: str, listen: str, timeout: float) -> None:
    """Forward connections on a host loopback port to sandbox CONTAINER_ID's address until interrupted.

    Prints "listening on HOST:PORT -> IP:PORT" once ready.  Exit status 12 when the sandbox has no
    address (network mode none or host, no sandbox-shim.port, or stopped).
    """
    from .. import api, proxy

    g = ctx.obj if isinstance(ctx.obj, Globals) else Globals()
    try:
        server = proxy.serve(api.default_mechanism(g.root), container_id, parse_listen(listen), timeout)
    except ShimError as e:
        fail(g, e)
    except OSError as e:
        fail(g, UsageError(f"cannot listen on {listen}: {e.strerror}", "choose another port"))
    host, port = server.listen_address
    up_host, up_port = server.upstream
    click.echo(f"listening on {host}:{port} -> {up_host}:{up_port}")
    sys.stdout.flush()

    def stop(_signum: int, _frame: object) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
