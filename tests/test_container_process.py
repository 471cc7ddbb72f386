"""The container process (runtime-spec runtime.md ``state.pid``) lives inside the sandbox from create on.

``state.pid``, ``--pid-file`` and the hooks' pid name bwrap's child: its namespaces are the sandbox's,
its root is the rootfs, nothing of ours stays in the host's namespaces once ``create`` returns, and
``linux.resources.pids.limit`` counts the workload only.  A second sandbox joining the first one's
namespaces by path lands in them, never in the host's; a path naming the host's namespace is refused.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from conftest import base_config, cgroup_dirs, run_shim, shim_cmd, wait_pid

NS = ("pid", "net", "ipc", "uts", "mnt", "cgroup")


def _ns(pid: int | str, name: str) -> str:
    return os.readlink(f"/proc/{pid}/ns/{name}")


def _create(root: Path, bundle: Path, sid: str, pid_file: Path) -> int:
    r = run_shim(root, "create", "--bundle", str(bundle), "--pid-file", str(pid_file), sid)
    assert r.returncode == 0, r.stderr
    text = pid_file.read_text()
    assert text.isdigit()  # digits only, no newline
    return int(text)


def _cgroup_procs(sid: str) -> set[int]:
    out: set[int] = set()
    for d in cgroup_dirs(sid):
        with open(os.path.join(d, "cgroup.procs")) as fh:
            out |= {int(x) for x in fh.read().split()}
    return out


def test_state_pid_is_inside_the_sandbox_from_create_on(
    make_bundle, state_root: Path, tmp_path: Path
) -> None:
    b = make_bundle(args=["sleep", "600"])
    pid = _create(state_root, b, "cp", tmp_path / "pid")
    st = json.loads(run_shim(state_root, "state", "cp").stdout)
    assert st["pid"] == pid and st["status"] == "created"
    # control: the same comparison tells a host process (our parent) from the sandbox's
    assert all(_ns(os.getppid(), n) == _ns("self", n) for n in NS)
    for n in NS:
        assert _ns(pid, n) != _ns("self", n), f"{n} namespace of state.pid is the host's"
    root, rootfs = os.stat(f"/proc/{pid}/root/"), os.stat(b / "rootfs")
    assert (root.st_dev, root.st_ino) == (rootfs.st_dev, rootfs.st_ino)
    assert (os.stat("/proc/self/root/").st_ino, os.stat("/").st_ino) == (os.stat("/").st_ino,) * 2
    # nothing of ours in the host's namespaces: the cgroup holds the container process alone
    assert _cgroup_procs("cp") == {pid}
    ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    assert ppid == os.getpid()  # re-parented to us, the nearest subreaper, when the outer bwrap went
    assert run_shim(state_root, "start", "cp").returncode == 0
    time.sleep(0.2)
    assert Path(f"/proc/{pid}/cmdline").read_bytes() == b"sleep\x00600\x00"  # execve'd in place
    assert run_shim(state_root, "kill", "cp", "KILL").returncode == 0
    assert wait_pid(pid) == 128 + signal.SIGKILL
    assert run_shim(state_root, "delete", "cp").returncode == 0


def test_hooks_get_the_state_pid(make_bundle, state_root: Path, tmp_path: Path) -> None:
    log = tmp_path / "hook.json"
    hook = tmp_path / "hook"
    hook.write_text(f"#!/bin/sh\ncat > {log}\n")
    hook.chmod(0o755)
    cfg = base_config(["true"])
    cfg["hooks"] = {"createRuntime": [{"path": str(hook)}]}
    pid = _create(state_root, make_bundle(cfg), "hk", tmp_path / "pid")
    assert json.loads(log.read_text())["pid"] == pid
    assert run_shim(state_root, "delete", "--force", "hk").returncode == 0


@pytest.mark.parametrize(("limit", "expected"), [(3, ["three"]), (4, ["three", "fourth-ran"])])
def test_pids_limit_leaves_the_workload_n_processes(
    make_bundle, state_root: Path, tmp_path: Path, limit: int, expected: list[str]
) -> None:
    # sh (pid 1) + two sleeps = 3 processes; with limit 3 the fourth fork is refused (the shell dies of
    # "can't fork"), with limit 4 it runs (the control: the same script, one more allowed)
    script = (
        "sleep 30 & sleep 30 & echo three > /storage/r; "
        "/bin/true && echo fourth-ran >> /storage/r; kill $(jobs -p) 2>/dev/null; exit 0"
    )
    cfg = base_config(["sh", "-c", script])
    cfg["linux"].setdefault("resources", {})["pids"] = {"limit": limit}
    b = make_bundle(cfg)
    pid = _create(state_root, b, f"pl{limit}", tmp_path / "pid")
    assert run_shim(state_root, "start", f"pl{limit}").returncode == 0
    status = wait_pid(pid)
    assert (b / "storage" / "r").read_text().split() == expected
    assert (status == 0) == (limit == 4), status
    assert run_shim(state_root, "delete", f"pl{limit}").returncode == 0


def _joiner_config(a_pid: int, probe: str) -> dict:
    cfg = base_config(["sh", "-c", probe])
    cfg["linux"]["namespaces"] = [
        {"type": "mount"},
        {"type": "pid", "path": f"/proc/{a_pid}/ns/pid"},
        {"type": "network", "path": f"/proc/{a_pid}/ns/net"},
        {"type": "ipc", "path": f"/proc/{a_pid}/ns/ipc"},
        {"type": "uts", "path": f"/proc/{a_pid}/ns/uts"},
    ]
    return cfg


def test_joining_another_sandbox_by_path_lands_in_its_namespaces(
    make_bundle, state_root: Path, tmp_path: Path
) -> None:
    a = make_bundle(args=["sleep", "4242"], name="a")
    a_pid = _create(state_root, a, "ja", tmp_path / "a.pid")
    assert run_shim(state_root, "start", "ja").returncode == 0
    probe = (
        "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done > /storage/ps; "
        "for n in net ipc uts; do readlink /proc/self/ns/$n; done > /storage/ns"
    )
    b = make_bundle(_joiner_config(a_pid, probe), name="b")
    b_pid = _create(state_root, b, "jb", tmp_path / "b.pid")
    for n in ("pid", "net", "ipc", "uts"):
        assert _ns(b_pid, n) == _ns(a_pid, n) != _ns("self", n)
    joined = json.loads((state_root / "jb" / "state.json").read_text())["private"]["joined"]
    assert joined["network"] == _ns(a_pid, "net")
    notes = json.loads(run_shim(state_root, "state", "jb").stdout)["annotations"]
    assert f"network={_ns(a_pid, 'net')}" in notes["sandbox-shim.joined-namespaces"].split(",")
    assert (
        "sandbox-shim.joined-namespaces"
        not in json.loads(run_shim(state_root, "state", "ja").stdout)["annotations"]
    )  # control: a sandbox that joined nothing says nothing
    assert run_shim(state_root, "start", "jb").returncode == 0
    assert wait_pid(b_pid) == 0
    ps = (b / "storage" / "ps").read_text()
    assert "sleep 4242" in ps  # A's process is visible: the same pid namespace
    assert "pytest" not in ps and len(ps.splitlines()) < 10  # the host's are not
    assert (b / "storage" / "ns").read_text().split() == [_ns(a_pid, n) for n in ("net", "ipc", "uts")]
    assert run_shim(state_root, "delete", "jb").returncode == 0
    assert run_shim(state_root, "delete", "--force", "ja").returncode == 0


@pytest.mark.parametrize(
    ("ns_type", "name", "who"),
    [("network", "net", "test"), ("ipc", "ipc", "self"), ("pid", "pid", "test"), ("uts", "uts", "self")],
)
def test_a_path_naming_the_hosts_namespace_is_refused(
    make_bundle, state_root: Path, ns_type: str, name: str, who: str
) -> None:
    cfg = base_config(["true"])
    cfg["linux"]["namespaces"] = [n for n in cfg["linux"]["namespaces"] if n["type"] != ns_type]
    who = str(os.getpid()) if who == "test" else who  # a host process, or the runtime itself
    cfg["linux"]["namespaces"].append({"type": ns_type, "path": f"/proc/{who}/ns/{name}"})
    if ns_type == "uts":
        cfg.pop("hostname", None)  # else the hostname rule refuses first (it would be set on the host's)
    r = run_shim(state_root, "create", "--bundle", str(make_bundle(cfg)), "hostns")
    assert r.returncode != 0 and "/linux/namespaces" in r.stderr and "with the host" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (state_root / "hostns").exists() and cgroup_dirs("hostns") == []


def _our_bwraps(marker: str) -> list[int]:
    """bwrap processes (any namespace) whose command line carries ``marker``."""
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{p}/cmdline").read_bytes()
            exe = os.readlink(f"/proc/{p}/exe")
        except OSError:
            continue
        if marker.encode() in cmd and os.path.basename(exe) == "bwrap":
            out.append(int(p))
    return out


@pytest.mark.parametrize("delay", [0.0, 0.05, 0.15, 0.3, 0.6])
def test_kill_9_of_create_leaves_no_outer_bwrap(
    make_bundle, state_root: Path, tmp_path: Path, delay: float
) -> None:
    marker = f"{os.getpid()}{int(delay * 1000):04d}"
    b = make_bundle(args=["sleep", marker])
    proc = subprocess.Popen(
        shim_cmd(state_root, "create", "--bundle", str(b), f"k{int(delay * 1000)}"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(delay)
    proc.kill()
    proc.wait()
    time.sleep(0.3)
    for pid in _our_bwraps(marker):
        assert _ns(pid, "pid") != _ns("self", "pid"), f"bwrap {pid} stayed in the host's pid namespace"
    run_shim(state_root, "delete", "--force", f"k{int(delay * 1000)}")


def test_run_bundle_tells_exit_137_from_sigkill(make_bundle, state_root: Path) -> None:
    """The wait(2) status is kept: ``exit 137`` is an exit code, a SIGKILL from outside is a signal."""
    import threading

    from sandbox_shim import api
    from sandbox_shim.execution import run_bundle

    mech = api.default_mechanism(str(state_root))
    done = run_bundle(
        mech,
        f"x137-{uuid.uuid4().hex[:6]}",
        make_bundle(base_config(["sh", "-c", "exit 137"]), name="e137"),
        timeout=30,
    )
    assert (done.exit_status, done.signal) == (137, None)
    sid = f"k9-{uuid.uuid4().hex[:6]}"

    def kill_soon(_sid: str) -> None:
        threading.Timer(0.5, lambda: api.signal(mech, sid, 9)).start()

    done = run_bundle(
        mech, sid, make_bundle(base_config(["sleep", "30"]), name="k9"), timeout=30, on_start=kill_soon
    )
    assert (done.exit_status, done.signal) == (None, 9)


def test_joining_a_mount_namespace_by_path_is_refused(make_bundle, state_root: Path, tmp_path: Path) -> None:
    """The runtime would exec its helper by path inside that mount namespace (files its tenant planted):
    refused with the pointer, nothing made.  Control: the same config without the path runs."""
    cfg = base_config(["true"])
    ctl = run_shim(state_root, "run", "--bundle", str(make_bundle(cfg, name="ctl")), "mnt-ctl")
    assert ctl.returncode == 0, ctl.stderr
    victim = subprocess.Popen(["sleep", "30"])
    try:
        cfg = base_config(["true"])
        ns = cfg["linux"]["namespaces"]
        i = next(n for n, x in enumerate(ns) if x["type"] == "mount")
        ns[i] = {"type": "mount", "path": f"/proc/{victim.pid}/ns/mnt"}
        r = run_shim(state_root, "create", "--bundle", str(make_bundle(cfg, name="mnt")), "mnt-join")
        assert r.returncode == 3, r.stderr
        assert f"/linux/namespaces/{i}/path" in r.stderr and len(r.stderr.strip().splitlines()) == 1
        assert not (state_root / "mnt-join").exists()
    finally:
        victim.kill()
        victim.wait()
