"""Forwarding to a sandbox's address (``address.address``): one HTTP request, or a TCP port.

``forward`` sends one HTTP/1.1 request (http.client, stdlib) to the sandbox and returns the whole
response.  ``serve`` listens on a host loopback port and copies bytes both ways between each
accepted connection and the sandbox's address, one thread pair per connection, until shut down.
It listens on loopback only (``loopback_listen``): a sandbox's server is meant for this host, not for
the network around it; another address is refused before anything is bound.

Errors (all ``ShimError``):
    NoAddress: the sandbox has nothing to reach (mode none/host, no port, stopped).
    ConnectionRefused: nothing listens at the address (RST, or the host has no route to it).
    ProxyTimeout: connecting or reading took longer than ``timeout`` seconds.
    ProxyError: any other failure talking to the sandbox (the base class of the three above).
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import socket
import socketserver
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .errors import ShimError, UsageError

if TYPE_CHECKING:
    from collections.abc import Callable

    from .mechanism import Mechanism

#: headers that describe one hop (RFC 9110 section 7.6.1), never forwarded
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "proxy-connection",
    }
)
DEFAULT_TIMEOUT = 10.0  # seconds


class ProxyError(ShimError):
    """Talking to the sandbox's address failed."""

    exit_status = 12
    kind = "proxy_error"


class NoAddress(ProxyError):
    """The sandbox has no address to forward to."""

    kind = "no_address"

    def __init__(self, sandbox_id: str) -> None:
        super().__init__(
            f"sandbox {sandbox_id} has no address to forward to",
            'create it with annotations sandbox-shim.network="isolated" and sandbox-shim.port',
        )


class ConnectionRefused(ProxyError):
    """Nothing accepted the connection at the sandbox's address."""

    kind = "connection_refused"


class ProxyTimeout(ProxyError):
    """The sandbox did not connect or answer in time."""

    kind = "proxy_timeout"


@dataclass
class Response:
    """An HTTP response from the sandbox.

    Attributes:
        status: the status code (e.g. 200).
        reason: the reason phrase.
        headers: (name, value) pairs as received, hop-by-hop headers removed.
        body: the whole body, bytes.
    """

    status: int
    reason: str = ""
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""


def target(mechanism: Mechanism, sandbox_id: str) -> tuple[str, int]:
    """``(ip, port)`` of the sandbox.  Raises ``NoAddress``, ``SandboxNotFound``."""
    from .addresses import address

    addr = address(mechanism, sandbox_id)
    if not addr:
        raise NoAddress(sandbox_id)
    host, _, port = addr.rpartition(":")
    return host, int(port)


def _translate(err: BaseException, where: str) -> ProxyError:
    if isinstance(err, (socket.timeout, TimeoutError)):
        return ProxyTimeout(f"{where}: timed out", "is the server inside the sandbox slow or stopped?")
    refused = (errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH)
    if isinstance(err, ConnectionRefusedError) or (isinstance(err, OSError) and err.errno in refused):
        return ConnectionRefused(
            f"{where}: connection refused ({err})",
            "is the sandbox started and its server listening on sandbox-shim.port?",
        )
    return ProxyError(f"{where}: {err}")


def forward(
    mechanism: Mechanism,
    sandbox_id: str,
    method: str,
    path: str,
    headers: dict[str, str] | list[tuple[str, str]] | None = None,
    body: bytes = b"",
    timeout: float = DEFAULT_TIMEOUT,
) -> Response:
    """Send one HTTP request to the sandbox and return its response.

    Args:
        method: e.g. ``GET``.  path: the request target, e.g. ``/index.html?x=1``.
        headers: request headers; hop-by-hop ones are dropped; ``Host`` defaults to the address.
        body: the request body (``Content-Length`` is set from it when non-empty).
        timeout: seconds for the connect and for each read.
    Raises:
        NoAddress, ConnectionRefused, ProxyTimeout, ProxyError, SandboxNotFound.
    """
    import http.client

    host, port = target(mechanism, sandbox_id)
    pairs = list(headers.items()) if isinstance(headers, dict) else list(headers or [])
    send = {k: v for k, v in pairs if k.lower() not in HOP_BY_HOP and k.lower() != "content-length"}
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    where = f"{method} http://{host}:{port}{path}"
    try:
        conn.request(method, path, body=body or None, headers=send)
        resp = conn.getresponse()
        data = resp.read()
        got = [(k, v) for k, v in resp.getheaders() if k.lower() not in HOP_BY_HOP]
        return Response(resp.status, resp.reason, got, data)
    except (OSError, http.client.HTTPException) as e:
        raise _translate(e, where) from e
    finally:
        conn.close()


# -- TCP forwarding ---------------------------------------------------------------------------------
def _pump(src: socket.socket, dst: socket.socket) -> None:
    """Copy ``src`` → ``dst`` until EOF or an error, then half-close ``dst``."""
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)


class Forwarder(socketserver.ThreadingTCPServer):
    """A TCP listener forwarding every connection to ``upstream`` (the sandbox's ``(ip, port)``).

    Attributes:
        upstream: where connections go.
        connect_timeout: seconds allowed to connect upstream; a connection that fails is closed.
    """

    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self, listen: tuple[str, int], upstream: tuple[str, int], connect_timeout: float = DEFAULT_TIMEOUT
    ) -> None:
        self.upstream = upstream
        self.connect_timeout = connect_timeout
        if ":" in listen[0]:
            self.address_family = socket.AF_INET6
        super().__init__(listen, _Handler)

    @property
    def listen_address(self) -> tuple[str, int]:
        """The ``(host, port)`` actually bound (port 0 asks the kernel for one)."""
        host, port = self.server_address[:2]
        return str(host), int(port)


class _Handler(socketserver.BaseRequestHandler):
    server: Forwarder

    def handle(self) -> None:
        client: socket.socket = self.request
        try:
            up = socket.create_connection(self.server.upstream, timeout=self.server.connect_timeout)
        except OSError:
            return
        up.settimeout(None)
        with up:
            back = threading.Thread(target=_pump, args=(up, client), daemon=True)
            back.start()
            _pump(client, up)
            back.join()


def loopback_listen(listen: str | tuple[str, int]) -> tuple[str, int]:
    """``"HOST:PORT"`` (``"[::1]:PORT"`` for IPv6) or ``(host, port)`` → ``(host, port)``, the host a
    loopback address (RFC 5735 127.0.0.0/8, RFC 4291 ::1); port 0 lets the kernel pick one.

    Raises:
        UsageError: malformed, port outside 0..65535, or not a loopback address.
    """
    text = listen if isinstance(listen, str) else f"[{listen[0]}]:{listen[1]}"
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


def serve(
    mechanism: Mechanism,
    sandbox_id: str,
    listen: str | tuple[str, int] = ("127.0.0.1", 0),
    connect_timeout: float = DEFAULT_TIMEOUT,
) -> Forwarder:
    """A ``Forwarder`` bound to ``listen`` (loopback only) for the sandbox's address (call
    ``serve_forever`` on it).

    Raises:
        UsageError: ``listen`` is not a loopback ``HOST:PORT`` (``loopback_listen``), or cannot be bound;
        NoAddress, SandboxNotFound.
    """
    host, port = loopback_listen(listen)
    upstream = target(mechanism, sandbox_id)
    try:
        return Forwarder((host, port), upstream, connect_timeout)
    except OSError as e:
        raise UsageError(f"cannot listen on {host}:{port}: {e.strerror}", "choose another port") from e


def serve_until_signalled(server: Forwarder) -> None:
    """Forward on ``server`` until SIGINT or SIGTERM (installed here; the main thread only), then close it.
    What ``sandbox-shim proxy`` runs after printing the listen address."""
    import signal
    import threading

    def stop(_signum: int, _frame: object) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()


def serve_sandbox(
    mechanism: Mechanism,
    sandbox_id: str,
    listen: str | tuple[str, int],
    connect_timeout: float,
    on_ready: Callable[[tuple[str, int], tuple[str, int]], None],
) -> None:
    """``sandbox-shim proxy`` in one call: ``serve``, then ``on_ready(listen_address, upstream)`` (the
    caller's rendering: both ``(host, port)``), then ``serve_until_signalled`` (SIGINT/SIGTERM end it;
    the main thread only).  The listener is closed on every way out, ``on_ready`` raising included.

    Raises: as ``serve`` (UsageError, NoAddress, SandboxNotFound), and what ``on_ready`` raises.
    """
    server = serve(mechanism, sandbox_id, listen, connect_timeout)
    try:
        on_ready(server.listen_address, server.upstream)
    except BaseException:
        server.server_close()
        raise
    serve_until_signalled(server)
