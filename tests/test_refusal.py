"""Refusal for real: a probe that fails on this host (made to fail, not mocked) stops create/start
with exit status 4, names each missing capability and why, and leaves nothing behind."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import base_config, cgroup_dirs, run_shim, shim_cmd

# Runs the shim under a seccomp filter that makes unshare(2) and namespace clones fail with EPERM,
# as a host whose policy forbids namespaces would.
DENY_NAMESPACES = """
import errno, os, sys
import pyseccomp as s
f = s.SyscallFilter(s.ALLOW)
f.add_rule(s.ERRNO(errno.EPERM), "unshare")
f.add_rule(s.ERRNO(errno.EPERM), "clone", s.Arg(0, s.MASKED_EQ, 0x20000000, 0x20000000))  # CLONE_NEWPID
f.add_rule(s.ERRNO(errno.EPERM), "clone", s.Arg(0, s.MASKED_EQ, 0x40000000, 0x40000000))  # CLONE_NEWNET
f.add_rule(s.ERRNO(errno.ENOSYS), "clone3")
f.load()
os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
"""


def run_confined(root: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    out, err = tmp_path / "out", tmp_path / "err"
    with open(out, "w") as o, open(err, "w") as e:
        p = subprocess.run(
            [sys.executable, "-c", DENY_NAMESPACES, *shim_cmd(root, *args)[1:]],
            stdout=o,
            stderr=e,
            timeout=60,
        )
    return subprocess.CompletedProcess(p.args, p.returncode, out.read_text(), err.read_text())


def test_create_refused_when_namespaces_are_denied(make_bundle, state_root: Path, tmp_path: Path) -> None:
    pytest.importorskip("pyseccomp", reason="pyseccomp is needed to make the namespace probe fail")
    b = make_bundle(args=["sh", "-c", "echo SHOULD-NOT-RUN"])
    r = run_confined(state_root, tmp_path, "--log-format", "json", "create", "--bundle", str(b), "r1")
    assert r.returncode == 4, r.stderr
    rec = json.loads(r.stderr.strip().splitlines()[-1])
    names = {c["name"] for c in rec["capabilities"]}
    assert {"namespace.pid", "namespace.network"} <= names
    assert all(c["available"] is False and c["detail"] for c in rec["capabilities"])
    assert "SHOULD-NOT-RUN" not in r.stdout
    assert not (state_root / "r1").exists() and cgroup_dirs("r1") == []
    # the same bundle is accepted where the capability exists (the control)
    assert run_shim(state_root, "create", "--bundle", str(b), "r1").returncode == 0


def test_start_checks_again(make_bundle, state_root: Path, tmp_path: Path) -> None:
    pytest.importorskip("pyseccomp", reason="pyseccomp is needed to make the namespace probe fail")
    b = make_bundle(args=["sh", "-c", "echo SHOULD-NOT-RUN"])
    assert run_shim(state_root, "create", "--bundle", str(b), "r2").returncode == 0
    r = run_confined(state_root, tmp_path, "start", "r2")
    assert r.returncode == 4 and "namespace" in r.stderr
    state = json.loads(run_shim(state_root, "state", "r2").stdout)
    assert state["status"] == "created"  # refused start changed nothing
    assert run_shim(state_root, "delete", "r2").returncode == 8  # still created: delete needs --force
    assert run_confined(state_root, tmp_path, "delete", "--force", "r2").returncode == 0  # never gated
    assert cgroup_dirs("r2") == []


def test_memory_limit_refused_when_memory_cgroup_is_not_writable(
    make_bundle, state_root: Path, tmp_path: Path
) -> None:
    from sandbox_shim.platforms.linux.cgroups import detect

    layout = detect()
    if layout.version != 1 or "memory" not in layout.v1_mounts:
        pytest.skip("this check remounts the v1 memory hierarchy read-only; the host has none")
    mount = layout.v1_mounts["memory"]
    cfg = base_config(["sh", "-c", "echo SHOULD-NOT-RUN"])
    cfg["linux"]["resources"] = {"memory": {"limit": 64 << 20}}
    b = make_bundle(cfg)
    inner = " ".join(shim_cmd(state_root, "create", "--bundle", str(b), "r3"))
    script = f"mount -o remount,bind,ro {mount} && exec {inner}"
    out = tmp_path / "o"
    with open(out, "w") as o:
        p = subprocess.run(
            ["unshare", "-m", "--propagation", "private", "sh", "-c", script],
            stdout=o,
            stderr=subprocess.STDOUT,
            timeout=60,
        )
    text = out.read_text()
    assert p.returncode == 4, text
    assert "cgroup.memory" in text
    assert not (state_root / "r3").exists() and cgroup_dirs("r3") == []
    # control: the same command in the same kind of private mount namespace, hierarchy left writable
    with open(out, "w") as o:
        p = subprocess.run(
            ["unshare", "-m", "--propagation", "private", "sh", "-c", f"exec {inner}"],
            stdout=o,
            stderr=subprocess.STDOUT,
            timeout=60,
        )
    assert p.returncode == 0, out.read_text()
