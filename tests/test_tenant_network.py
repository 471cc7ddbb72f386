"""Tenant network rules on real bwrap: own network namespace with loopback only, nothing of the host
reachable (its loopback servers included), refusal of a config that shares the host's network
without asking, the ``host`` opt-in visible in ``state``, and a namespace given by ``path`` joined.

The host server is a TCP server this test starts on 127.0.0.1.  Its CONTROL is twofold: the host
itself reaches it, and a sandbox that asked for the host network (``sandbox-shim.network: host``)
reaches it and prints the marker; the default sandbox must get ECONNREFUSED and no marker.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import sandbox_runs
from conftest import base_config, run_shim, wait_pid
from sandbox_runs import RUNNERS, SANDBOX_MARKS, TAG, launch

pytestmark = SANDBOX_MARKS

MARKER = "HOST-LOOPBACK-MARKER-91b2"
probe = partial(sandbox_runs.probe, exit_zero=True)  # always exits 0


def _serve(sock: socket.socket) -> None:
    while True:
        try:
            conn, _ = sock.accept()
        except OSError:
            return
        with conn:
            conn.sendall(MARKER.encode() + b"\n")


@pytest.fixture
def host_server() -> Iterator[int]:
    """A TCP server on the host's 127.0.0.1 that greets every connection with MARKER; yields its port."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    threading.Thread(target=_serve, args=(sock,), daemon=True).start()
    port = sock.getsockname()[1]
    with socket.create_connection(("127.0.0.1", port), timeout=5) as c:  # control: the host reaches it
        assert c.makefile().readline().strip() == MARKER
    yield port
    sock.close()


def _host_net(cfg: dict[str, Any]) -> dict[str, Any]:
    cfg["linux"]["namespaces"] = [n for n in cfg["linux"]["namespaces"] if n["type"] != "network"]
    cfg["annotations"]["sandbox-shim.network"] = "host"
    return cfg


def _connect(port: int) -> str:
    return f"nc -w 3 127.0.0.1 {port} </dev/null && echo CONNECTED"


@pytest.mark.parametrize("how", RUNNERS)
def test_host_loopback_server_unreachable(make_bundle, state_root: Path, host_server: int, how: str) -> None:
    ctl = make_bundle(_host_net(base_config(probe(_connect(host_server)))), name="ctl")
    r = launch(how, state_root, ctl, "ctl")  # control: a sandbox on the host network reaches it
    assert r.code == 0 and MARKER in r.out and "CONNECTED" in r.out, r
    b = make_bundle(
        base_config(probe(_connect(host_server) + "; ip -o link | cut -d: -f2 | tr -d ' '")), name="evil"
    )
    r = launch(how, state_root, b, "evil")
    assert r.code == 0 and MARKER not in r.out and "CONNECTED" not in r.out, r
    assert "Connection refused" in r.out, r.out  # ECONNREFUSED: its own loopback has no such server
    assert r.out.split()[-1] == "lo" and r.out.count("\n") == 2, r.out  # one interface: lo


@pytest.mark.parametrize("how", RUNNERS)
def test_loopback_works_inside(make_bundle, state_root: Path, how: str) -> None:
    script = (
        "(nc -l -p 5599 -e echo INNER-LOOPBACK-MARKER &); sleep 0.3; "
        "nc -w 3 127.0.0.1 5599 </dev/null; ip -4 addr show lo | grep -c 127.0.0.1"
    )
    r = launch(how, state_root, make_bundle(base_config(probe(script))), "lo")
    assert r.code == 0 and "INNER-LOOPBACK-MARKER" in r.out and r.out.split()[-1] == "1", r


def test_host_network_without_asking_is_refused_and_the_opt_in_shows_in_state(
    make_bundle, state_root: Path, tmp_path: Path
) -> None:
    cfg = base_config(probe("echo RAN"))
    cfg["linux"]["namespaces"] = [n for n in cfg["linux"]["namespaces"] if n["type"] != "network"]
    b = make_bundle(cfg, name="shared")
    r = run_shim(state_root, "create", "--bundle", str(b), f"shared-{TAG}")
    assert r.returncode != 0 and "/linux/namespaces" in r.stderr, r.stderr
    assert '{"type": "network"}' in r.stderr and "sandbox-shim.network" in r.stderr  # the fix, named
    assert not (state_root / f"shared-{TAG}").exists() and not (b / "storage" / "out").exists()

    b = make_bundle(_host_net(base_config(probe("echo RAN"))), name="host")
    sid = f"host-{TAG}"
    assert (
        run_shim(
            state_root, "create", "--bundle", str(b), "--pid-file", str(tmp_path / "pid"), sid
        ).returncode
        == 0
    )
    st = json.loads(run_shim(state_root, "state", sid).stdout)
    assert st["annotations"]["sandbox-shim.network"] == "host"
    assert run_shim(state_root, "start", sid).returncode == 0
    assert wait_pid(int((tmp_path / "pid").read_text())) == 0
    assert run_shim(state_root, "delete", sid).returncode == 0


@pytest.mark.parametrize("how", RUNNERS)
def test_network_namespace_by_path_is_joined(
    make_bundle, state_root: Path, host_server: int, how: str
) -> None:
    """A namespace made here (``unshare --net``) with its own loopback server: the sandbox joins it —
    it reaches that server (control) and still not the host's (breach)."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare(1) is not installed (util-linux)")
    holder = subprocess.Popen(
        [
            "unshare",
            "--net",
            "sh",
            "-c",
            "ip link set lo up && exec busybox nc -ll -p 5601 -e echo JOINED-NS-MARKER",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(0.3)
        assert holder.poll() is None, "the namespace holder did not start"
        cfg = base_config(probe(f"nc -w 3 127.0.0.1 5601 </dev/null; {_connect(host_server)}"))
        cfg["linux"]["namespaces"] = [
            n if n["type"] != "network" else {"type": "network", "path": f"/proc/{holder.pid}/ns/net"}
            for n in cfg["linux"]["namespaces"]
        ]
        r = launch(how, state_root, make_bundle(cfg), "joined")
        assert r.code == 0 and "JOINED-NS-MARKER" in r.out, r
        assert MARKER not in r.out and "Connection refused" in r.out, r.out
    finally:
        holder.kill()
        holder.wait()
