"""Network modes on the real kernel: isolated veth links, loopback-only ``none``, teardown, the proxy.

Every breach probe runs its control first: the same busybox ``wget`` in a ``host``-mode sandbox (the
host's own network) must fetch the marker; the breach must not.  Traffic stays on loopback and on
the veth links these tests create (addresses from 10.213.0.0/16 on our own /30s only).
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import base_config, run_shim, shim_cmd

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="veth links need root (CAP_NET_ADMIN)"),
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bwrap is not installed"),
]

PORT = 8080
MARKER = "NETWORK-MARKER-7f3a"
PROBE_OK = "PROBE-OK"


def _mech(root: Path) -> Any:
    from sandbox_shim import api

    return api.default_mechanism(str(root))


def _config(args: list[str], mode: str, port: int | None = None) -> dict[str, Any]:
    cfg = base_config(args)
    cfg["annotations"] = {"sandbox-shim.network": mode}
    if port:
        cfg["annotations"]["sandbox-shim.port"] = str(port)
    if mode == "host":
        cfg["linux"]["namespaces"] = [n for n in cfg["linux"]["namespaces"] if n["type"] != "network"]
    return cfg


def _server_args(port: int = PORT) -> list[str]:
    return [
        "sh",
        "-c",
        f"mkdir -p /tmp/www && echo {MARKER} > /tmp/www/index.html && exec httpd -f -p {port} -h /tmp/www",
    ]


def _probe(make_bundle: Any, root: Path, name: str, mode: str, url: str) -> str:
    """Run busybox wget for ``url`` in a fresh sandbox of ``mode``; its stdout (+ PROBE_OK on success)."""
    args = ["sh", "-c", f"timeout 5 wget -q -O - {url} && echo {PROBE_OK}; ip -4 route"]
    bundle = make_bundle(_config(args, mode), name=name)
    r = run_shim(root, "run", "--bundle", str(bundle), name)
    return r.stdout


def _links() -> list[str]:
    from sandbox_shim.platforms.linux.network import our_links

    return our_links()


def _info(root: Path, sid: str) -> dict[str, Any]:
    from sandbox_shim.state import StateStore

    return StateStore(str(root)).read(sid).private["network"]


@pytest.fixture
def server(make_bundle: Any, state_root: Path) -> Iterator[tuple[str, str]]:
    """An isolated sandbox ``srv`` running busybox httpd on PORT; yields (id, "ip:port")."""
    from sandbox_shim.addresses import address

    bundle = make_bundle(_config(_server_args(), "isolated", PORT), name="srv")
    r = run_shim(state_root, "create", "--bundle", str(bundle), "srv")
    assert r.returncode == 0, r.stderr
    assert run_shim(state_root, "start", "srv").returncode == 0
    addr = address(_mech(state_root), "srv")
    assert addr is not None
    deadline = time.monotonic() + 10
    while True:  # wait until httpd listens
        try:
            with urllib.request.urlopen(f"http://{addr}/", timeout=2) as resp:
                if MARKER in resp.read().decode():
                    break
        except OSError:
            pass
        assert time.monotonic() < deadline, "httpd inside the sandbox never answered"
        time.sleep(0.1)
    yield "srv", addr
    run_shim(state_root, "delete", "--force", "srv")


@pytest.fixture
def host_http() -> Iterator[str]:
    """An HTTP server on the host's 127.0.0.1 (ephemeral port) answering MARKER; yields its URL."""

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            body = (MARKER + "\n").encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a: Any) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/"
    srv.shutdown()
    srv.server_close()


# -- isolated: reachable from the host only ------------------------------------------------------------
def test_isolated_server_answers_through_address_and_proxy(server: tuple[str, str], state_root: Path) -> None:
    from sandbox_shim import proxy

    sid, addr = server
    ip, port = addr.split(":")
    info = _info(state_root, sid)
    assert ip.startswith("10.213.") and int(port) == PORT and info["prefixlen"] == 30
    assert info["host_if"] in _links()
    resp = proxy.forward(_mech(state_root), sid, "GET", "/index.html", headers={"X-Test": "1"})
    assert resp.status == 200 and resp.body.decode().strip() == MARKER
    missing = proxy.forward(_mech(state_root), sid, "GET", "/no-such-file")
    assert missing.status == 404


def test_proxy_errors_are_distinct(server: tuple[str, str], make_bundle: Any, state_root: Path) -> None:
    from sandbox_shim import proxy
    from sandbox_shim.addresses import address

    # A sandbox with a network mode that has no address (none): NoAddress, and address() is None.
    bundle = make_bundle(_config(["sleep", "30"], "none", PORT), name="quiet")
    assert run_shim(state_root, "create", "--bundle", str(bundle), "quiet").returncode == 0
    assert address(_mech(state_root), "quiet") is None
    with pytest.raises(proxy.NoAddress):
        proxy.forward(_mech(state_root), "quiet", "GET", "/")
    # Isolated with a port but nothing listening yet (created, not started): ConnectionRefused.
    bundle = make_bundle(_config(_server_args(), "isolated", PORT), name="held")
    assert run_shim(state_root, "create", "--bundle", str(bundle), "held").returncode == 0
    with pytest.raises(proxy.ConnectionRefused):
        proxy.forward(_mech(state_root), "held", "GET", "/", timeout=3)
    for sid in ("quiet", "held"):
        assert run_shim(state_root, "delete", "--force", sid).returncode == 0


def test_proxy_cli_forwards_a_loopback_port(server: tuple[str, str], state_root: Path) -> None:
    sid, _ = server
    code = "import sys; from sandbox_shim.cli import main; main(sys.argv[1:])"
    argv = [sys.executable, "-c", code, "--root", str(state_root), "proxy", sid, "--listen", "127.0.0.1:0"]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline() if p.stdout else ""
        assert line.startswith("listening on 127.0.0.1:"), (line, p.stderr.read() if p.stderr else "")
        port = int(line.split()[2].rsplit(":", 1)[1])
        for _ in range(2):  # two connections through the same listener
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as resp:
                assert resp.read().decode().strip() == MARKER
    finally:
        p.terminate()
        p.wait(timeout=10)
    assert p.returncode == 0
    # Not loopback: refused before anything listens.
    bad = subprocess.run([*argv[:-1], "0.0.0.0:0"], capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "loopback" in bad.stderr


def test_second_isolated_sandbox_cannot_reach_the_first(
    server: tuple[str, str], make_bundle: Any, state_root: Path
) -> None:
    _, addr = server
    url = f"http://{addr}/"
    control = _probe(make_bundle, state_root, "ctl", "host", url)
    assert MARKER in control and PROBE_OK in control, control
    breach = _probe(make_bundle, state_root, "other", "isolated", url)
    assert MARKER not in breach and PROBE_OK not in breach, breach
    # Its only IPv4 route is its own /30 (no default route, nothing towards the first sandbox).
    routes = [r for r in breach.splitlines() if r.strip() and PROBE_OK not in r]
    assert len(routes) == 1 and routes[0].startswith("10.213.") and "/30 dev eth0" in routes[0], breach
    assert addr.split(":")[0] not in routes[0]


def test_isolated_sandbox_cannot_reach_host_addresses_beyond_its_link(
    server: tuple[str, str], make_bundle: Any, state_root: Path
) -> None:
    """A host-local address on *another* link (the first sandbox's host end) is out of reach."""
    info = _info(state_root, server[0])

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200)
            self.end_headers()
            self.wfile.write(MARKER.encode())

        def log_message(self, *a: Any) -> None:
            pass

    srv = http.server.ThreadingHTTPServer((info["host_address"], 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        url = f"http://{info['host_address']}:{srv.server_address[1]}/"
        control = _probe(make_bundle, state_root, "ctl2", "host", url)
        assert MARKER in control and PROBE_OK in control, control
        breach = _probe(make_bundle, state_root, "other2", "isolated", url)
        assert MARKER not in breach and PROBE_OK not in breach, breach
    finally:
        srv.shutdown()
        srv.server_close()


# -- none: loopback only --------------------------------------------------------------------------------
def test_none_sandbox_cannot_reach_the_host_loopback(
    host_http: str, make_bundle: Any, state_root: Path
) -> None:
    control = _probe(make_bundle, state_root, "ctl", "host", host_http)
    assert MARKER in control and PROBE_OK in control, control
    breach = _probe(make_bundle, state_root, "lo-only", "none", host_http)
    assert MARKER not in breach and PROBE_OK not in breach, breach


def test_lifecycle_without_network_never_imports_pyroute2(make_bundle: Any, state_root: Path) -> None:
    bundle = make_bundle(_config(["true"], "none"), name="plain")
    code = (
        "import sys; from sandbox_shim.cli.lifecycle import main; r = sys.argv[1]; b = sys.argv[2]\n"
        "for argv in (['--root', r, 'create', '--bundle', b, 'p1'], ['--root', r, 'state', 'p1'],\n"
        "             ['--root', r, 'delete', '--force', 'p1']):\n"
        "    assert main(argv) == 0, argv\n"
        "from sandbox_shim import api; from sandbox_shim.addresses import address\n"
        "assert 'pyroute2' not in sys.modules, 'pyroute2 imported'\n"
        "print('CLEAN')"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, str(state_root), str(bundle)], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0 and "CLEAN" in r.stdout, r.stdout + r.stderr


def test_isolated_create_and_delete_never_import_pyroute2(make_bundle: Any, state_root: Path) -> None:
    """The veth link is made and removed over a plain netlink socket (rtnetlink.py).  Control: the link
    exists while the sandbox does, so the requests really ran."""
    bundle = make_bundle(_config(["sleep", "30"], "isolated", PORT), name="lean")
    code = (
        "import json, os, sys; from sandbox_shim.cli.lifecycle import main; r = sys.argv[1]\n"
        "assert main(['--root', r, 'create', '--bundle', sys.argv[2], 'lean']) == 0\n"
        "from sandbox_shim.platforms.linux.rtnetlink import Rtnl\n"
        "from sandbox_shim.platforms.linux.network import link_name\n"
        "name = link_name(r, 'lean')\n"
        "with Rtnl() as n: assert n.link_index(name) is not None, 'no link'\n"
        "assert main(['--root', r, 'delete', '--force', 'lean']) == 0\n"
        "with Rtnl() as n: assert n.link_index(name) is None, 'link left'\n"
        "assert 'pyroute2' not in sys.modules, 'pyroute2 imported'\n"
        "print('LEAN')"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, str(state_root), str(bundle)], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0 and "LEAN" in r.stdout, r.stdout + r.stderr


# -- teardown -------------------------------------------------------------------------------------------
def test_delete_removes_the_link_and_the_marker(make_bundle: Any, state_root: Path) -> None:
    from sandbox_shim.platforms.linux import network

    bundle = make_bundle(_config(_server_args(), "isolated", PORT), name="gone")
    assert run_shim(state_root, "create", "--bundle", str(bundle), "gone").returncode == 0
    info = _info(state_root, "gone")
    marker = state_root / ".network" / "gone"
    assert info["host_if"] in _links() and marker.exists()
    assert json.loads(marker.read_text())["host_if"] == info["host_if"]
    r = run_shim(state_root, "delete", "--force", "gone")
    assert r.returncode == 0, r.stderr
    assert info["host_if"] not in _links() and not marker.exists()
    network.teardown(info)  # idempotent
    network.teardown_orphan(str(state_root), "gone")


@pytest.mark.parametrize("point", ["after-marker", "after-link"])
def test_kill9_mid_create_then_delete_force_leaves_nothing(
    point: str, make_bundle: Any, state_root: Path
) -> None:
    from sandbox_shim.platforms.linux.network import FAULT_ENV, link_name

    bundle = make_bundle(_config(_server_args(), "isolated", PORT), name="crash")
    name = link_name(str(state_root), "crash")
    env = dict(os.environ, **{FAULT_ENV: point})
    # bwrap outlives the killed create and keeps its stdio: no pipes, or waiting would never end.
    r = subprocess.run(
        shim_cmd(state_root, "create", "--bundle", str(bundle), "crash"),
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=60,
    )
    assert r.returncode == -9, r.returncode
    marker = state_root / ".network" / "crash"
    assert marker.exists()
    assert (name in _links()) == (point == "after-link")
    d = run_shim(state_root, "delete", "--force", "crash")
    assert d.returncode == 0, d.stderr
    assert name not in _links() and not marker.exists()
    assert not (state_root / "crash").exists()
