"""The confinement's egress allow-list: an HTTP proxy on a unix socket that admits only listed hosts.

With ``allow_hosts`` the confined process runs in its own network namespace holding only loopback;
the one way out is this proxy's unix socket, bound into the sandbox and bridged to
``127.0.0.1:PORT`` there by the in-sandbox forwarder (``platforms/linux/landlock.py --forward``).
``HTTP_PROXY``/``HTTPS_PROXY``/``ALL_PROXY`` (and the lower-case forms) name that address.

Requests understood (RFC 9110 section 9.3.6 CONNECT; RFC 9112 section 3.2.2 absolute-form):

* ``CONNECT host:port HTTP/1.1`` -> ``200 Connection Established`` and a byte tunnel, if admitted;
* ``METHOD http://host[:port]/path HTTP/1.1`` -> forwarded in origin-form with ``Connection: close``.

A host not admitted gets ``403``; anything that is not such a request, or whose host is not a strict
RFC 1123 name or IP literal (``host_name``: a NUL, control byte, ``..``, empty label, trailing dot,
non-ASCII form, user information, backslash or fragment), gets ``400``.  Every refusal appends, when
a report file is given, one JSON line ``{"time", "event": "denied", "host", "port", "operation"}``
(plus ``"reason"`` for a 400; ``port`` null when none could be read).

A pattern (``check_pattern``) is a host (``example.com``: exactly that host) or ``*.example.com``
(any name below ``example.com``, not ``example.com`` itself), with ``:PORT`` or ``:*``; without
one it admits ports 80 and 443 only.  An IP literal is admitted only when listed as such.  The
decision is made on the validated name, before any lookup, and the proxy connects to exactly that
name (resolved on the host, or via ``host_map``, a name -> ``(address, port)`` table for tests
that serve "hosts" on loopback).  Plain-HTTP requests are forwarded with ``Host`` set to the
admitted authority, so a client's own ``Host`` header cannot name another site on the same server.
"""

from __future__ import annotations

import json
import os
import re
import socket
import sys
import threading
import time
from collections.abc import Mapping, Sequence

_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
_HEAD_LIMIT = 64 * 1024
_HOP = {"proxy-connection", "proxy-authorization", "connection", "keep-alive", "host"}
#: ports a pattern without ``:PORT`` admits (HTTP and HTTPS)
DEFAULT_PORTS = (80, 443)


def host_name(text: str) -> str | None:
    """The canonical form of a host as a request names it, or None when it is not one.

    Accepted: an IPv4 literal in dotted-quad form, an IPv6 literal in brackets (no zone), or an
    RFC 1123 section 2.1 name: ASCII letters, digits and ``-`` in dot-separated labels of 1-63
    characters not starting or ending with ``-``, 253 characters at most, no empty label (so no
    ``..`` and no trailing dot), last label not all digits (``2130706433`` is an address to the
    resolver).  Upper case is folded to lower case (DNS names are case-insensitive, RFC 4343); any
    other byte (NUL, control characters, non-ASCII/IDNA U-labels: send the ``xn--`` A-label) makes
    it None.  The proxy matches and connects to exactly this string."""
    import ipaddress

    if text.startswith("[") and text.endswith("]"):
        if not re.fullmatch(r"[0-9a-fA-F:.]+", text[1:-1]):  # no zone (``%lo``), nothing else
            return None
        try:
            return "[" + str(ipaddress.IPv6Address(text[1:-1])) + "]"
        except ValueError:
            return None
    if not text.isascii() or not 0 < len(text) <= 253:
        return None
    name = text.lower()
    labels = name.split(".")
    if not all(_LABEL.match(label) for label in labels):
        return None
    if labels[-1].isdigit():
        try:
            return str(ipaddress.IPv4Address(name))
        except ValueError:
            return None
    return name


def split_pattern(pattern: str) -> tuple[str, tuple[int, ...] | None]:
    """``(host pattern, ports)`` of a normalised pattern; ports None means every port."""
    if pattern.startswith("["):
        host, _, rest = pattern.partition("]")
        host, port = host + "]", rest[1:]
    else:
        host, _, port = pattern.partition(":")
    if port == "*":
        return host, None
    return host, (int(port),) if port else DEFAULT_PORTS


def check_pattern(pattern: str) -> str:
    """Normalise an allow-list entry; raise ValueError when it is not one.

    An entry is a host (``host_name`` rules: name, IPv4, ``[IPv6]``; a bare IPv6 address is taken
    as one) or ``*.`` + name, optionally followed by ``:PORT`` (1-65535) or ``:*`` (every port);
    without a port it admits 80 and 443 only (``DEFAULT_PORTS``)."""
    p = pattern.strip()
    if p.count(":") > 1 and not p.startswith("["):
        p = f"[{p}]"
    if p.startswith("["):
        host, sep, rest = p.partition("]")
        host, port = host + sep, rest[1:] if rest.startswith(":") else ("?" if rest else "")
    else:
        host, _, port = p.partition(":")
    wild = host.startswith("*.")
    name = host_name(host[2:] if wild else host)
    bad_port = port not in ("", "*") and not (port.isdigit() and 0 < int(port) < 65536 and port[0] != "0")
    if name is None or bad_port or (wild and (name.startswith("[") or name.replace(".", "").isdigit())):
        raise ValueError(
            f"allow-host {pattern!r} is not a host name, *.domain, or IP address (optionally :PORT or :*)"
        )
    return ("*." if wild else "") + name + (f":{port}" if port else "")


def admitted(host: str, port: int, patterns: Sequence[str]) -> bool:
    """True when ``host`` (a ``host_name`` result) and ``port`` match one of the normalised
    ``patterns`` (rules in ``check_pattern``): ``name`` is that host only, ``*.name`` any name
    ending in ``.name``."""
    for p in patterns:
        hp, ports = split_pattern(p)
        if ports is not None and port not in ports:
            continue
        if hp.startswith("*.") and host.endswith(hp[1:]) and len(host) > len(hp) - 1:
            return True
        if host == hp:
            return True
    return False


class _Bad(Exception):
    """A request refused with 400: ``(reason, host shown, port or None)``."""


def _split_hostport(text: str, default_port: int | None) -> tuple[str, int]:
    """``(host_name, port)`` of an authority (RFC 3986 section 3.2.2-3.2.3); raises _Bad."""
    if text.startswith("["):
        host, sep, rest = text.partition("]")
        host += sep
        if rest and not rest.startswith(":"):
            raise _Bad("bad host or port", text, None)
        port = rest[1:] if rest else ""
    else:
        host, _, port = text.rpartition(":") if ":" in text else (text, "", "")
    name = host_name(host)
    if name is None:
        raise _Bad("host is not an RFC 1123 name or an IP literal", text, None)
    if port == "" and default_port is not None:
        return name, default_port
    if not (port.isascii() and port.isdigit() and len(port) <= 5 and 0 < int(port) < 65536):
        raise _Bad("bad port", name, None)
    return name, int(port)


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

    def __init__(
        self,
        allow_hosts: Sequence[str],
        socket_dir: str,
        report: str | None = None,
        host_map: Mapping[str, tuple[str, int]] | None = None,
        tcp_port: int | None = None,
    ) -> None:
        self.patterns = [check_pattern(p) for p in allow_hosts]
        self.socket_dir = socket_dir
        self.socket_path = os.path.join(socket_dir, "proxy.sock")
        self.report = report
        self.host_map = {(host_name(k) or k): v for k, v in (host_map or {}).items()}
        self._lock = threading.Lock()
        self._sock: socket.socket
        self.port: int
        if tcp_port is None:
            if sys.platform == "win32":  # Windows: pass tcp_port
                raise OSError("the egress proxy's unix socket is POSIX-only: listen on tcp_port")
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
    def _record(self, host: str, port: int | None, operation: str, reason: str = "") -> None:
        if not self.report:
            return
        rec = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "event": "denied",
            "host": host[:300],
            "port": port,
            "operation": operation[:32],
        }
        if reason:
            rec["reason"] = reason
        with self._lock:
            try:
                with open(self.report, "a", encoding="utf-8") as fh:
                    fh.write(json.dumps(rec) + "\n")
            except OSError:
                pass

    # -- serving -------------------------------------------------------------------------------------
    def _connect(self, host: str, port: int) -> socket.socket:
        addr = self.host_map.get(host)
        target = host[1:-1] if host.startswith("[") else host
        return socket.create_connection(addr if addr else (target, port), timeout=30)

    def _refuse(self, conn: socket.socket, code: int, reason: str) -> None:
        body = f"sandbox-shim confine: {reason}\n".encode("ascii", "backslashreplace")
        msg = {403: "Forbidden", 400: "Bad Request", 502: "Bad Gateway"}[code]
        try:
            conn.sendall(
                f"HTTP/1.1 {code} {msg}\r\nContent-Type: text/plain\r\nContent-Length: "
                f"{len(body)}\r\nConnection: close\r\n\r\n".encode()
                + body
            )
        except OSError:
            pass

    def _parse(self, lines: list[str]) -> tuple[str, str, int, str, str]:
        """``(method, host, port, path, version)`` of a request head; raises _Bad."""
        parts = lines[0].split(" ")
        if len(parts) != 3 or parts[2] not in ("HTTP/1.0", "HTTP/1.1"):
            raise _Bad("not an HTTP/1.x proxy request", lines[0][:200], None)
        method, target, version = parts
        if not re.fullmatch(r"[A-Z]{1,20}", method):
            raise _Bad("bad method", target[:200], None)
        if method == "CONNECT":  # authority-form, port required (RFC 9110 section 9.3.6)
            host, port = _split_hostport(target, None)
            return method, host, port, "", version
        m = re.fullmatch(r"http://([^/?#@\\]+)(/[^#\\]*)?", target, re.I)
        if not m:
            raise _Bad(
                "only absolute http:// targets (no user information, backslash or fragment) or CONNECT",
                target[:200],
                None,
            )
        host, port = _split_hostport(m.group(1), 80)
        return method, host, port, m.group(2) or "/", version

    def _handle(self, conn: socket.socket) -> None:
        operation = "?"
        try:
            conn.settimeout(60)
            head = b""
            while b"\r\n\r\n" not in head:
                data = conn.recv(8192)
                if not data:
                    return
                head += data
                if len(head) > _HEAD_LIMIT:
                    self._record("", None, operation, "request head too large")
                    return self._refuse(conn, 400, "request head too large")
            head, _, rest = head.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            operation = lines[0].split(" ", 1)[0]
            try:
                method, host, port, path, version = self._parse(lines)
            except _Bad as e:
                reason, shown, bad_port = e.args
                self._record(shown, bad_port, operation, reason)
                return self._refuse(conn, 400, reason)
            if not admitted(host, port, self.patterns):
                self._record(host, port, method)
                return self._refuse(conn, 403, f"{host}:{port} is not in the egress allow-list")
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
                else:  # Host is the validated target (RFC 9112 section 3.2.2), never the client's own
                    authority = host if port == 80 else f"{host}:{port}"
                    headers = [h for h in lines[1:] if h.split(":", 1)[0].strip().lower() not in _HOP]
                    out = "\r\n".join(
                        [f"{method} {path} {version}", f"Host: {authority}", *headers, "Connection: close"]
                    )
                    up.sendall(out.encode("latin-1") + b"\r\n\r\n" + rest)
                _pipe(conn, up)
        except OSError:
            pass
        except Exception as e:  # never a proxy-thread traceback: the client gets a 400
            self._record("", None, operation, f"request not understood ({type(e).__name__})")
            self._refuse(conn, 400, "request not understood")
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
