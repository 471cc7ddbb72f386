"""Namespaces given by path are joined (setns(2) before bwrap runs) and ``linux.sysctl`` is written
inside the sandbox's namespaces only (runtime-spec config-linux.md "Namespaces", "Sysctl")."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import base_config, cgroup_dirs, run_shim, shim_cmd, wait_pid


@pytest.fixture
def holder() -> Iterator[int]:
    """A process in new network, uts and ipc namespaces (hostname ``joined-uts``), killed afterwards."""
    p = subprocess.Popen(
        ["unshare", "--net", "--uts", "--ipc", "sh", "-c", "hostname joined-uts; exec sleep 60"]
    )
    deadline = time.monotonic() + 5
    while (
        os.readlink(f"/proc/{p.pid}/ns/uts") == os.readlink("/proc/self/ns/uts")
        or open(f"/proc/{p.pid}/comm").read().strip() != "sleep"
    ):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    yield p.pid
    p.kill()
    p.wait()


def _run(state_root: Path, bundle: Path, sid: str, tmp_path: Path) -> tuple[int, str]:
    out = tmp_path / f"{sid}.out"
    with open(out, "w") as o:
        r = subprocess.run(
            shim_cmd(
                state_root, "create", "--bundle", str(bundle), "--pid-file", str(tmp_path / f"{sid}.pid"), sid
            ),
            stdout=o,
            stderr=subprocess.STDOUT,
            timeout=30,
        )
    assert r.returncode == 0, out.read_text()
    assert run_shim(state_root, "start", sid).returncode == 0
    status = wait_pid(int((tmp_path / f"{sid}.pid").read_text()))
    assert run_shim(state_root, "delete", sid).returncode == 0
    return status, out.read_text()


PROBE = "echo net=$(readlink /proc/self/ns/net) ipc=$(readlink /proc/self/ns/ipc) uts=$(uname -n)"


def _with_namespaces(namespaces: list[dict]) -> dict:
    cfg = base_config(["sh", "-c", PROBE])
    cfg["linux"]["namespaces"] = namespaces
    cfg.pop("hostname", None)
    return cfg


def test_namespaces_with_a_path_are_joined(
    make_bundle, state_root: Path, tmp_path: Path, holder: int
) -> None:
    ns = [
        {"type": "pid"},
        {"type": "mount"},
        {"type": "network", "path": f"/proc/{holder}/ns/net"},
        {"type": "ipc", "path": f"/proc/{holder}/ns/ipc"},
        {"type": "uts", "path": f"/proc/{holder}/ns/uts"},
    ]
    status, out = _run(state_root, make_bundle(_with_namespaces(ns)), "ns-join", tmp_path)
    assert status == 0
    assert f"net={os.readlink(f'/proc/{holder}/ns/net')}" in out
    assert f"ipc={os.readlink(f'/proc/{holder}/ns/ipc')}" in out
    assert "uts=joined-uts" in out
    assert cgroup_dirs("ns-join") == []


def test_control_new_namespaces_are_not_the_holders(
    make_bundle, state_root: Path, tmp_path: Path, holder: int
) -> None:
    ns = [{"type": "pid"}, {"type": "mount"}, {"type": "network"}, {"type": "ipc"}, {"type": "uts"}]
    status, out = _run(state_root, make_bundle(_with_namespaces(ns)), "ns-new", tmp_path)
    assert status == 0 and "net=net:[" in out
    assert os.readlink(f"/proc/{holder}/ns/net") not in out and "joined-uts" not in out


def test_joined_pid_namespace(make_bundle, state_root: Path, tmp_path: Path) -> None:
    p = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", "sleep", "60"])
    try:
        deadline = time.monotonic() + 5
        kids: list[str] = []
        while not kids:
            assert time.monotonic() < deadline
            kids = open(f"/proc/{p.pid}/task/{p.pid}/children").read().split()
            time.sleep(0.01)
        target = os.readlink(f"/proc/{kids[0]}/ns/pid")
        assert target != os.readlink("/proc/self/ns/pid")
        ns = [{"type": "mount"}, {"type": "network"}, {"type": "pid", "path": f"/proc/{kids[0]}/ns/pid"}]
        cfg = base_config(["sh", "-c", "ls /proc | grep -c '^[0-9]'; echo pid=$$"])
        cfg["linux"]["namespaces"] = ns
        cfg.pop("hostname")  # no uts namespace here: a hostname could not be applied (refused)
        b = make_bundle(cfg)
        r = run_shim(state_root, "create", "--bundle", str(b), "ns-pid")
        assert r.returncode == 0, r.stderr
        init = json.loads((state_root / "ns-pid" / "state.json").read_text())["init_pid"]
        assert os.readlink(f"/proc/{init}/ns/pid") == target
        assert run_shim(state_root, "delete", "--force", "ns-pid").returncode == 0
    finally:
        p.kill()
        p.wait()


def test_a_path_of_the_wrong_type_is_refused(make_bundle, state_root: Path, holder: int) -> None:
    ns = [{"type": "pid"}, {"type": "mount"}, {"type": "network", "path": f"/proc/{holder}/ns/ipc"}]
    r = run_shim(state_root, "create", "--bundle", str(make_bundle(_with_namespaces(ns))), "ns-bad")
    assert r.returncode != 0 and "/linux/namespaces" in r.stderr and "not a network namespace" in r.stderr
    assert not (state_root / "ns-bad").exists() and cgroup_dirs("ns-bad") == []


def test_namespaced_sysctl_is_applied_inside_only(make_bundle, state_root: Path, tmp_path: Path) -> None:
    key = "/proc/sys/net/ipv4/ip_unprivileged_port_start"
    host_before = open(key).read().strip()
    value = "555" if host_before != "555" else "556"
    cfg = base_config(["sh", "-c", f"echo inside=$(cat {key})"])
    cfg["linux"]["sysctl"] = {"net.ipv4.ip_unprivileged_port_start": value}
    status, out = _run(state_root, make_bundle(cfg), "ns-sysctl", tmp_path)
    assert status == 0 and f"inside={value}" in out
    assert open(key).read().strip() == host_before  # the host's value is untouched


@pytest.mark.parametrize(
    ("sysctl", "shared_net"),
    [
        ({"vm.swappiness": "10"}, False),
        ({"kernel.pid_max": "4096"}, False),
        ({"net.ipv4.ip_forward": "1"}, True),
    ],
)
def test_host_sysctls_are_refused_with_the_pointer(
    make_bundle, state_root: Path, sysctl: dict, shared_net: bool
) -> None:
    before = {k: open("/proc/sys/" + k.replace(".", "/")).read() for k in sysctl}
    cfg = base_config(["true"])
    cfg["linux"]["sysctl"] = sysctl
    if shared_net:
        cfg["linux"]["namespaces"] = [n for n in cfg["linux"]["namespaces"] if n["type"] != "network"]
        cfg["annotations"] = {"sandbox-shim.network": "host"}
    r = run_shim(state_root, "create", "--bundle", str(make_bundle(cfg)), "ns-refuse")
    assert r.returncode == 3, r.stderr
    assert f"/linux/sysctl/{next(iter(sysctl))}" in r.stderr
    assert not (state_root / "ns-refuse").exists() and cgroup_dirs("ns-refuse") == []
    assert {k: open("/proc/sys/" + k.replace(".", "/")).read() for k in sysctl} == before
