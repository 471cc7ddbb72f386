"""OCI hooks on real bwrap (runtime-spec config.md "POSIX-platform Hooks", runtime.md "Lifecycle"):
when each phase runs, the state JSON on stdin, which namespaces it runs in, timeouts, and what a
failing hook does (abort + nothing left + poststop, or a warning)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from conftest import base_config, cgroup_dirs, run_shim, wait_pid

RECORDER = """#!/bin/sh
# $1 = phase; append: phase, the state's status, our net namespace
state=$(cat)
status=$(printf '%s' "$state" | sed -n 's/.*"status": *"\\([a-z]*\\)".*/\\1/p')
echo "$1 $status $(readlink /proc/self/ns/net)" >> {log}
printf '%s\\n' "$state" > {log}.$1.json
"""


def _hook(path: Path, phase: str, **extra: object) -> dict:
    return {"path": str(path), "args": [str(path), phase], **extra}


def _bundle_with_hooks(make_bundle, tmp_path: Path, hooks: dict, args: list[str] | None = None) -> Path:
    cfg = base_config(args or ["true"])
    cfg["hooks"] = hooks
    return make_bundle(cfg)


def _recorder(tmp_path: Path) -> tuple[Path, Path]:
    log = tmp_path / "hooks.log"
    rec = tmp_path / "record-hook"
    rec.write_text(RECORDER.format(log=log))
    rec.chmod(0o755)
    return rec, log


def test_every_phase_runs_at_its_moment_with_the_state(make_bundle, state_root: Path, tmp_path: Path) -> None:
    rec, log = _recorder(tmp_path)
    # startContainer resolves inside the sandbox: a script in the rootfs writing to /storage
    phases = ("prestart", "createRuntime", "createContainer", "poststart", "poststop")
    hooks = {p: [_hook(rec, p)] for p in phases}
    hooks["startContainer"] = [
        {
            "path": "/bin/sh",
            "args": [
                "sh",
                "-c",
                "echo startContainer $(readlink /proc/self/ns/net) $(cat /etc/marker) >> /storage/start.log",
            ],
        }
    ]
    b = _bundle_with_hooks(make_bundle, tmp_path, hooks, ["sh", "-c", "echo ran >> /storage/start.log"])
    (b / "rootfs" / "etc" / "marker").write_text("ROOTFS-MARK\n")
    host_net = os.readlink("/proc/self/ns/net")
    r = run_shim(state_root, "create", "--bundle", str(b), "--pid-file", str(tmp_path / "pid"), "hk-1")
    assert r.returncode == 0, r.stderr
    lines = log.read_text().splitlines()
    assert [x.split()[:2] for x in lines] == [
        ["prestart", "creating"],
        ["createRuntime", "creating"],
        ["createContainer", "creating"],
    ]
    assert lines[0].split()[2] == host_net and lines[1].split()[2] == host_net  # runtime namespace
    assert lines[2].split()[2] != host_net  # createContainer: the sandbox's network namespace
    st = json.loads((tmp_path / "hooks.log.prestart.json").read_text())
    assert st["id"] == "hk-1" and st["bundle"] == str(b) and st["pid"] > 0
    assert os.readlink(f"/proc/{st['pid']}/ns/net") == lines[2].split()[2]  # pid is inside the sandbox
    assert not (b / "storage" / "start.log").exists()
    assert run_shim(state_root, "start", "hk-1").returncode == 0
    assert wait_pid(int((tmp_path / "pid").read_text())) == 0
    start_log = (b / "storage" / "start.log").read_text().splitlines()
    assert start_log[0].startswith("startContainer net:") and "ROOTFS-MARK" in start_log[0]  # in the sandbox
    assert start_log[0].split()[1] != host_net and start_log[1] == "ran"  # before the program
    assert log.read_text().splitlines()[3].split()[:2] == ["poststart", "running"]
    assert run_shim(state_root, "delete", "hk-1").returncode == 0
    assert log.read_text().splitlines()[4].split()[:2] == ["poststop", "stopped"]


def test_failing_prestart_aborts_and_leaves_nothing(make_bundle, state_root: Path, tmp_path: Path) -> None:
    rec, log = _recorder(tmp_path)
    fail = tmp_path / "fail-hook"
    fail.write_text("#!/bin/sh\necho hook-said-no >&2\nexit 3\n")
    fail.chmod(0o755)
    b = _bundle_with_hooks(
        make_bundle,
        tmp_path,
        {
            "prestart": [_hook(fail, "prestart")],
            "createRuntime": [_hook(rec, "createRuntime")],
            "poststop": [_hook(rec, "poststop")],
        },
    )
    r = run_shim(state_root, "create", "--bundle", str(b), "hk-2")
    assert r.returncode != 0 and "prestart hook" in r.stderr and "exit status 3" in r.stderr
    assert "hook-said-no" in r.stderr
    assert not (state_root / "hk-2").exists() and cgroup_dirs("hk-2") == []
    assert [x.split()[0] for x in log.read_text().splitlines()] == ["poststop"]  # createRuntime never ran


def test_control_passing_prestart_creates(make_bundle, state_root: Path, tmp_path: Path) -> None:
    ok = tmp_path / "ok-hook"
    ok.write_text("#!/bin/sh\ncat >/dev/null\nexit 0\n")
    ok.chmod(0o755)
    b = _bundle_with_hooks(make_bundle, tmp_path, {"prestart": [_hook(ok, "prestart")]})
    assert run_shim(state_root, "create", "--bundle", str(b), "hk-3").returncode == 0
    assert (state_root / "hk-3").exists()


def test_hook_timeout_is_honoured(make_bundle, state_root: Path, tmp_path: Path) -> None:
    slow = tmp_path / "slow-hook"
    slow.write_text("#!/bin/sh\nsleep 30\n")
    slow.chmod(0o755)
    b = _bundle_with_hooks(make_bundle, tmp_path, {"createRuntime": [_hook(slow, "x", timeout=1)]})
    t0 = time.monotonic()
    r = run_shim(state_root, "create", "--bundle", str(b), "hk-4")
    assert r.returncode != 0 and "timed out" in r.stderr
    assert time.monotonic() - t0 < 10
    assert not (state_root / "hk-4").exists() and cgroup_dirs("hk-4") == []


def test_failing_poststart_only_warns(make_bundle, state_root: Path, tmp_path: Path) -> None:
    fail = tmp_path / "fail-hook"
    fail.write_text("#!/bin/sh\nexit 5\n")
    fail.chmod(0o755)
    b = _bundle_with_hooks(
        make_bundle,
        tmp_path,
        {"poststart": [_hook(fail, "poststart")], "poststop": [_hook(fail, "poststop")]},
    )
    assert (
        run_shim(
            state_root, "create", "--bundle", str(b), "--pid-file", str(tmp_path / "pid"), "hk-5"
        ).returncode
        == 0
    )
    r = run_shim(state_root, "start", "hk-5")
    assert r.returncode == 0 and "warning: poststart hook" in r.stderr
    assert wait_pid(int((tmp_path / "pid").read_text())) == 0
    r = run_shim(state_root, "delete", "hk-5")
    assert r.returncode == 0 and "warning: poststop hook" in r.stderr
    assert not (state_root / "hk-5").exists() and cgroup_dirs("hk-5") == []


def test_failing_start_container_destroys(make_bundle, state_root: Path, tmp_path: Path) -> None:
    rec, log = _recorder(tmp_path)
    b = _bundle_with_hooks(
        make_bundle,
        tmp_path,
        {"startContainer": [{"path": "/bin/false"}], "poststop": [_hook(rec, "poststop")]},
        ["sh", "-c", "echo ran > /storage/ran"],
    )
    assert run_shim(state_root, "create", "--bundle", str(b), "hk-6").returncode == 0
    r = run_shim(state_root, "start", "hk-6")
    assert r.returncode != 0 and "startContainer hook" in r.stderr
    time.sleep(0.3)
    assert not (b / "storage" / "ran").exists()  # the program never ran
    assert not (state_root / "hk-6").exists() and cgroup_dirs("hk-6") == []
    assert [x.split()[0] for x in log.read_text().splitlines()] == ["poststop"]
