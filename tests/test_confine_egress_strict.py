"""The egress proxy's request parsing, attacked directly: host names are validated strictly (RFC 1123
labels or IP literals), matched and connected to exactly as validated, and every refusal is a
``400``/``403`` with a report line, never a proxy-thread traceback.

Servers on loopback only; control first: an admitted request through the same proxy reaches its server.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from sandbox_shim.hardening.egress import EgressProxy, check_pattern, host_name


def _server(addr: str, name: bytes) -> socket.socket:
    s = socket.socket()
    s.bind((addr, 0))
    s.listen(16)

    def serve() -> None:
        while True:
            try:
                c, _ = s.accept()
            except OSError:
                return
            try:
                c.recv(4096)
                c.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(name), name))
            except OSError:
                pass
            c.close()

    threading.Thread(target=serve, daemon=True).start()
    return s


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[tuple[EgressProxy, int, int, Path]]:
    ok = _server("127.0.0.1", b"served-allowed")
    try:
        evil = _server("127.0.0.2", b"served-denied")
    except OSError:
        ok.close()
        pytest.skip("127.0.0.2 cannot be bound here (no 127/8 loopback)")
    ok_port, evil_port = ok.getsockname()[1], evil.getsockname()[1]
    report = tmp_path / "report.jsonl"
    proxy = EgressProxy(
        ["*.localhost:*", "*.example.com:*"],
        str(tmp_path),
        str(report),
        {"ok.localhost": ("127.0.0.1", ok_port), "ok.example.com": ("127.0.0.1", ok_port)},
        tcp_port=0,
    ).start()
    yield proxy, ok_port, evil_port, report
    proxy.close()
    ok.close()
    evil.close()


def ask(proxy: EgressProxy, head: bytes) -> bytes:
    s = socket.create_connection(("127.0.0.1", proxy.port), timeout=10)
    s.sendall(head)
    if head.startswith(b"CONNECT"):
        first = s.recv(4096)
        if b" 200 " in first.split(b"\r\n")[0]:
            s.sendall(b"GET / HTTP/1.0\r\n\r\n")
        else:
            return first
    data = b""
    while chunk := s.recv(4096):
        data += chunk
    s.close()
    return data


def test_bytes_in_host_names_are_refused(setup: tuple[EgressProxy, int, int, Path]) -> None:
    proxy, ok_port, evil_port, report = setup
    # control: admitted names reach the allowed server by both request forms
    assert b"served-allowed" in ask(proxy, b"CONNECT ok.localhost:443 HTTP/1.1\r\nHost: x\r\n\r\n")
    assert b"served-allowed" in ask(proxy, b"GET http://ok.example.com/ HTTP/1.1\r\nHost: x\r\n\r\n")
    # control: the non-allowed server answers when addressed directly
    assert b"served-denied" in ask_direct(evil_port)
    bad_hosts = [
        b"127.0.0.2\x00.localhost",
        b"127.0.0.2\x01.localhost",
        b"127.0.0.2..localhost",
        b".localhost",
        b"a.localhost.",
        b"127.0.0.2\t.localhost",
        b"-a.localhost",
        "b\u00fccher.localhost".encode("utf-8"),
        b"127.0.0.2%00.localhost",
        b"a b.localhost",
    ]
    for host in bad_hosts:
        for head in (
            b"CONNECT " + host + b":%d HTTP/1.1\r\nHost: x\r\n\r\n" % evil_port,
            b"GET http://" + host + b":%d/ HTTP/1.1\r\nHost: x\r\n\r\n" % evil_port,
        ):
            reply = ask(proxy, head)
            assert reply.startswith(b"HTTP/1.1 400 "), (head, reply)
            assert b"served-denied" not in reply
    lines = [json.loads(x) for x in report.read_text().splitlines()]
    assert len(lines) == 2 * len(bad_hosts) and all(r["event"] == "denied" and r["reason"] for r in lines)


def ask_direct(port: int) -> bytes:
    s = socket.create_connection(("127.0.0.2", port), timeout=10)
    s.sendall(b"GET / HTTP/1.0\r\n\r\n")
    data = b""
    while chunk := s.recv(4096):
        data += chunk
    return data


def test_malformed_requests_are_400_with_a_report_line(setup: tuple[EgressProxy, int, int, Path]) -> None:
    proxy, ok_port, evil_port, report = setup
    assert b"served-allowed" in ask(proxy, b"GET http://ok.localhost/ HTTP/1.0\r\n\r\n")  # control
    heads = [
        b"GET http://u:p@ok.localhost/ HTTP/1.1\r\n\r\n",
        b"GET http://ok.localhost\\@x/ HTTP/1.1\r\n\r\n",
        b"GET http://ok.localhost/#f HTTP/1.1\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: ok.localhost\r\n\r\n",
        b"GET / HTTP/1.0\r\n\r\n",
        b"CONNECT ok.localhost:a:b HTTP/1.1\r\n\r\n",
        b"CONNECT ok.localhost HTTP/1.1\r\n\r\n",
        b"CONNECT ok.localhost:99999 HTTP/1.1\r\n\r\n",
        b"CONNECT [::1%lo]:443 HTTP/1.1\r\n\r\n",
        b"garbage\r\n\r\n",
    ]
    for head in heads:
        reply = ask(proxy, head)
        assert reply.startswith(b"HTTP/1.1 400 "), (head, reply)
    lines = [json.loads(x) for x in report.read_text().splitlines()]
    assert len(lines) == len(heads)
    connect_ab = [r for r in lines if "a:b" in r["host"]]
    assert connect_ab and connect_ab[0]["port"] is None  # not a port read from the wrong place


def test_ports_default_to_80_and_443(tmp_path: Path) -> None:
    srv = _server("127.0.0.1", b"served")
    port = srv.getsockname()[1]
    try:
        for patterns, want in (
            (["127.0.0.1:*"], b" 200 "),
            ([f"127.0.0.1:{port}"], b" 200 "),
            (["127.0.0.1"], b" 403 "),
            ([f"127.0.0.1:{port + 1}"], b" 403 "),
        ):
            proxy = EgressProxy(patterns, str(tmp_path), None, None, tcp_port=0).start()
            try:
                reply = ask(proxy, b"CONNECT 127.0.0.1:%d HTTP/1.1\r\n\r\n" % port)
                assert want in reply.split(b"\r\n")[0], (patterns, reply)
            finally:
                proxy.close()
            tmp_path.mkdir(exist_ok=True)
    finally:
        srv.close()


def test_names_and_patterns_are_canonical() -> None:
    assert host_name("API.Example.COM") == "api.example.com"
    assert host_name("[0:0::1]") == "[::1]"
    for bad in ("a..b", "a.", "", "a\x00b", "2130706433", "01.2.3.4", "x" * 64 + ".com", "b\u00fccher.de"):
        assert host_name(bad) is None, bad
    assert check_pattern("*.Example.com:8443") == "*.example.com:8443"
    assert check_pattern("::1") == "[::1]"
    for bad in ("*.1.2.3.4", "a.com:0", "a.com:x", "a.com:65536", "*", "a..com", "a.com."):
        with pytest.raises(ValueError):
            check_pattern(bad)


def test_hostile_settings_file_shapes_are_exit_2(tmp_path: Path) -> None:
    import subprocess
    import sys

    work = tmp_path / "w"
    work.mkdir()
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"permitPath": str(work)}))
    shim = [sys.executable, "-m", "sandbox_shim", "confine", "--print-launch-spec", "--settings"]
    r = subprocess.run([*shim, str(good), "--", "true"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr  # control: a well-formed file is read
    for name, body in (
        ("deep", "[" * 100000),
        ("deep70", '{"permitRead": ' + "[" * 70 + "]" * 70 + "}"),
        ("nul", json.dumps({"permitPath": str(work) + "\0x"})),
        ("utf8", b"\xff"),
    ):
        f = tmp_path / f"{name}.json"
        f.write_bytes(body if isinstance(body, bytes) else body.encode())
        r = subprocess.run([*shim, str(f), "--", "true"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 2, (name, r.returncode, r.stderr)
        assert "Traceback" not in r.stderr and r.stderr.count("\n") == 1 and "settings" in r.stderr, r.stderr
