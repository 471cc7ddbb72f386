"""The confinement's egress allow-list: an HTTP proxy on a unix socket that admits only listed hosts.

With ``allow_hosts`` the confined process runs in its own network namespace holding only loopback;
the one way out is this proxy's unix socket, bound into the sandbox and bridged to
``127.0.0.1:PORT`` there by the in-sandbox forwarder (``platforms/linux/landlock.py --forward``).
``HTTP_PROXY``/``HTTPS_PROXY``/``ALL_PROXY`` (and the lower-case forms) name that address.

Requests understood (RFC 9110 section 9.3.6 CONNECT; RFC 9112 section 3.2.2 absolute-form):

* ``CONNECT host:port HTTP/1.1`` -> ``200 Connection Established`` and a byte tunnel, if admitted;
* ``METHOD http://host[:port]/path HTTP/1.1`` -> forwarded in origin-form with ``Connection: close``.

Anything else, or a host not admitted, gets ``403`` (``400`` for what cannot be parsed) and, when a
report file is given, one JSON line ``{"time", "event": "denied", "host", "port", "operation"}``.

A pattern is a host name (``example.com``: exactly that host) or ``*.example.com`` (any name below
``example.com``, not ``example.com`` itself), compared case-insensitively without a trailing dot; an
IP literal is admitted only when listed as such.  The decision is made on the name the client asked
for, before any lookup; the proxy resolves it on the host (or via ``host_map``, a name ->
``(address, port)`` table for tests that serve "hosts" on loopback).
"""

from __future__ import annotations

import json
import os
import re
import socket
import threading
import time
from collections.abc import Mapping, Sequence

_HOST = re.compile(r"^(\*\.)?[a-z0-9]([a-z0-9-]{0,62})?(\.[a-z0-9]([a-z0-9-]{0,62})?)*$")
_HEAD_LIMIT = 64 * 1024
_HOP = {"proxy-connection", "proxy-authorization", "connection", "keep-alive"}


def check_pattern(pattern: str) -> str:
    """Normalise an allow-list entry (lower case, no trailing dot); raise ValueError when it is not
    a host name, ``*.`` + host name, or an IP literal."""
    p = pattern.strip().lower().rstrip(".")
    if p.startswith("[") and p.endswith("]"):
        p = p[1:-1]
    try:
        socket.inet_pton(socket.AF_INET6 if ":" in p else socket.AF_INET, p)
        return p
    except OSError:
        pass
    if not p or len(p) > 253 or not _HOST.match(p) or p == "*":
        raise ValueError(f"allow-host {pattern!r} is not a host name, *.domain, or IP address")
    return p


def admitted(host: str, patterns: Sequence[str]) -> bool:
    """True when ``host`` matches one of the normalised ``patterns`` (rules in the module doc)."""
    h = host.strip().lower().rstrip(".")
    if h.startswith("[") and h.endswith("]"):
        h = h[1:-1]
    for p in patterns:
        if p.startswith("*."):
            if h.endswith(p[1:]) and len(h) > len(p) - 1:
                return True
        elif h == p:
            return True
    return False


def _split_hostport(text: str, default_port: int) -> tuple[str, int]:
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif text.count(":") == 1:
        host, _, port = text.partition(":")
    else:
        host, port = text, ""
    if port and not port.isdigit():
        raise ValueError("bad port")
    n = int(port) if port else default_port
    if not host or not 0 < n < 65536:
        raise ValueError("bad host or port")
    return host, n


def _pipe(a: socket.socket, b: socket.socket) -> None:
    """Copy bytes both ways until either side closes."""
    def one(src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (dst,):
                try:
                    s.shutdown(socket.SHUT_WR)
                except OSError:
                    pass

    t = threading.Thread(target=one, args=(b, a), daemon=True)
    t.start()
    one(a, b)
    t.join()


class EgressProxy:
    """The proxy for one confinement.

    Args:
        allow_hosts: patterns (``check_pattern`` rules); at least one.
        socket_dir: a private directory (mode 0700) the listening socket ``proxy.sock`` is made in.
        report: a JSON-lines file denials are appended to, or None.
        host_map: name -> ``(address, port)`` used instead of DNS and the asked port (tests).
        tcp_port: listen on ``127.0.0.1:tcp_port`` (0: any free port; ``.port`` tells) instead of
            the unix socket — for macOS, which has no network namespaces to bind a socket into.
    """

    def __init__(self, allow_hosts: Sequence[str], socket_dir: str, report: str | None = None,
                 host_map: Mapping[str, tuple[str, int]] | None = None, tcp_port: int | None = None) -> None:
        self.patterns = [check_pattern(p) for p in allow_hosts]
        self.socket_dir = socket_dir
        self.socket_path = os.path.join(socket_dir, "proxy.sock")
        self.report = report
        self.host_map = {k.lower(): v for k, v in (host_map or {}).items()}
        self._lock = threading.Lock()
        if tcp_port is None:
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self._sock.bind(self.socket_path)
            self.port = 0
        else:
            self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self._sock.bind(("127.0.0.1", tcp_port))
            self.port = self._sock.getsockname()[1]
        self._sock.listen(64)
        self._thread: threading.Thread | None = None
        self._closed = False

    # -- reporting ---------------------------------------------------------------------------------
    def _record(self, host: str, port: int, operation: str) -> None:
        if not self.report:
            return
        rec = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "event": "denied",
               "host": host, "port": port, "operation": operation}
        with self._lock:
            try:
                with open(self.report, "a", encoding="utf-8") as fh:
                    fh.write(json.dumps(rec) + "\n")
            except OSError:
                pass

    # -- serving -------------------------------------------------------------------------------------
    def _connect(self, host: str, port: int) -> socket.socket:
        addr = self.host_map.get(host.lower())
        return socket.create_connection(addr if addr else (host, port), timeout=30)

    def _refuse(self, conn: socket.socket, code: int, reason: str) -> None:
        body = f"sandbox-shim confine: {reason}\n".encode()
        msg = {403: "Forbidden", 400: "Bad Request", 502: "Bad Gateway"}[code]
        try:
            conn.sendall(f"HTTP/1.1 {code} {msg}\r\nContent-Type: text/plain\r\nContent-Length: "
                         f"{len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
        except OSError:
            pass

    def _handle(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(60)
            head = b""
            while b"\r\n\r\n" not in head:
                data = conn.recv(8192)
                if not data:
                    return
                head += data
                if len(head) > _HEAD_LIMIT:
                    return self._refuse(conn, 400, "request head too large")
            head, _, rest = head.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            parts = lines[0].split(" ")
            if len(parts) != 3 or not parts[2].startswith("HTTP/"):
                return self._refuse(conn, 400, "not an HTTP proxy request")
            method, target, version = parts
            try:
                if method == "CONNECT":
                    host, port = _split_hostport(target, 443)
                    path = ""
                else:
                    m = re.match(r"^http://([^/?#]+)([^#]*)$", target, re.I)
                    if not m:
                        return self._refuse(conn, 400, "only absolute http:// targets or CONNECT")
                    if "@" in m.group(1):
                        return self._refuse(conn, 400, "user information in the target is not accepted")
                    host, port = _split_hostport(m.group(1), 80)
                    path = m.group(2) or "/"
            except ValueError:
                return self._refuse(conn, 400, "bad host or port")
            if not admitted(host, self.patterns):
                self._record(host, port, method)
                return self._refuse(conn, 403, f"host {host} is not in the egress allow-list")
            try:
                up = self._connect(host, port)
            except OSError as e:
                return self._refuse(conn, 502, f"cannot reach {host}:{port}: {e.strerror or e}")
            with up:
                up.settimeout(None)
                conn.settimeout(None)
                if method == "CONNECT":
                    conn.sendall(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                    if rest:
                        up.sendall(rest)
                else:
                    headers = [h for h in lines[1:] if h.split(":", 1)[0].strip().lower() not in _HOP]
                    out = "\r\n".join([f"{method} {path} {version}", *headers, "Connection: close"])
                    up.sendall(out.encode("latin-1") + b"\r\n\r\n" + rest)
                _pipe(conn, up)
        except OSError:
            pass
        finally:
            conn.close()

    def serve_forever(self) -> None:
        """Accept and serve connections (one thread each) until ``close``."""
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                if self._closed:
                    return
                continue
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def start(self) -> EgressProxy:
        """Serve in a daemon thread of this process; returns self."""
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop accepting, remove the socket and its directory."""
        self._closed = True
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        for p in (self.socket_path,):
            try:
                os.unlink(p)
            except OSError:
                pass
        try:
            os.rmdir(self.socket_dir)
        except OSError:
            pass
