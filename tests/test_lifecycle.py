"""The OCI lifecycle through the CLI on real bwrap and cgroups: transitions, rules, nothing left."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import base_config, cgroup_dirs, run_shim, shim_cmd, wait_pid


def children_of(ppid: int) -> list[int]:
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                if int(Path(f"/proc/{p}/stat").read_text().rsplit(") ", 1)[1].split()[1]) == ppid:
                    out.append(int(p))
            except (OSError, IndexError, ValueError):
                pass
    return out


def state(root: Path, sid: str) -> dict:
    r = run_shim(root, "state", sid)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def stopped_state(root: Path, sid: str, timeout: float = 30.0) -> dict:
    """``state`` once the container process has exited, before anyone reaps it (then the exit status is
    still readable: an unreaped zombie's /proc/PID/stat exit_code; once reaped it is the reaper's)."""
    deadline = time.monotonic() + timeout
    while (s := state(root, sid))["status"] != "stopped":
        assert time.monotonic() < deadline, s
        time.sleep(0.02)
    return s


def create(root: Path, bundle: Path, sid: str, *extra: str, **kw) -> subprocess.CompletedProcess[str]:
    return run_shim(root, "create", "--bundle", str(bundle), *extra, sid, **kw)


def test_full_lifecycle_and_nothing_left(make_bundle, state_root: Path, tmp_path: Path) -> None:
    b = make_bundle(args=["sh", "-c", "echo out-marker; echo err-marker >&2; exit 0"])
    out, err = tmp_path / "out", tmp_path / "err"
    with open(out, "w") as o, open(err, "w") as e:
        r = subprocess.run(
            shim_cmd(state_root, "create", "--bundle", str(b), "--pid-file", str(tmp_path / "pid"), "c1"),
            stdout=o,
            stderr=e,
            timeout=30,
        )
    assert r.returncode == 0, err.read_text()
    pid_text = (tmp_path / "pid").read_text()
    assert pid_text.isdigit()
    s = state(state_root, "c1")
    assert s["status"] == "created" and s["pid"] == int(pid_text) and s["id"] == "c1"
    assert s["bundle"] == str(b) and s["ociVersion"]
    assert os.path.exists(f"/proc/{pid_text}")  # create exited while the process waits
    mine = "/" + hashlib.sha256(str(state_root).encode()).hexdigest()[:10] + "/"  # this root's parent
    assert [d for d in cgroup_dirs("c1") if mine in d]
    assert out.read_text() == ""  # nothing ran before start
    assert run_shim(state_root, "start", "c1").returncode == 0
    s = stopped_state(state_root, "c1")
    assert s["status"] == "stopped" and s["pid"] == 0 and s["exitStatus"] == 0
    assert wait_pid(int(pid_text)) == 0  # the pid-file process is ours (a subreaper) to wait on
    assert out.read_text() == "out-marker\n" and "err-marker" in err.read_text()
    assert state(state_root, "c1")["exitStatus"] == 0  # recorded by the state that saw it
    r = run_shim(state_root, "delete", "c1")
    assert r.returncode == 0, r.stderr
    assert not (state_root / "c1").exists()
    assert [d for d in cgroup_dirs("c1") if mine in d] == []  # others' "c1" may run at the same time
    assert run_shim(state_root, "state", "c1").returncode == 6


@pytest.mark.parametrize(
    ("script", "status"),
    [
        ("exit 23", 23),
        ("trap 'exit 3' TERM; kill -TERM $$", 3),  # pid 1: only a signal with a handler reaches it
        ("true", 0),
    ],
)
def test_exit_status_is_the_workloads(
    make_bundle, state_root: Path, tmp_path: Path, script: str, status: int
) -> None:
    b = make_bundle(args=["sh", "-c", script])
    assert create(state_root, b, "e", "--pid-file", str(tmp_path / "pid")).returncode == 0
    pid = int((tmp_path / "pid").read_text())
    assert run_shim(state_root, "start", "e").returncode == 0
    s = stopped_state(state_root, "e")
    assert s["status"] == "stopped" and s["exitStatus"] == status and s["pid"] == 0
    assert wait_pid(pid) == status


def test_killed_from_outside_is_128_plus_n(make_bundle, state_root: Path, tmp_path: Path) -> None:
    b = make_bundle(args=["sleep", "1000"])
    assert create(state_root, b, "k9", "--pid-file", str(tmp_path / "pid")).returncode == 0
    assert run_shim(state_root, "start", "k9").returncode == 0
    assert run_shim(state_root, "kill", "k9", "TERM").returncode == 0  # pid 1 without a handler: ignored
    time.sleep(0.3)
    assert state(state_root, "k9")["status"] == "running"
    assert run_shim(state_root, "kill", "k9", "KILL").returncode == 0
    assert stopped_state(state_root, "k9")["exitStatus"] == 128 + 9
    assert wait_pid(int((tmp_path / "pid").read_text())) == 128 + 9


def test_state_after_quick_exit_without_reaping(make_bundle, state_root: Path) -> None:
    b = make_bundle(args=["/bin/true"])
    assert create(state_root, b, "q").returncode == 0
    assert run_shim(state_root, "start", "q").returncode == 0
    deadline = time.time() + 10
    while state(state_root, "q")["status"] != "stopped" and time.time() < deadline:
        time.sleep(0.02)
    s = state(state_root, "q")
    assert s == {**s, "status": "stopped", "pid": 0, "exitStatus": 0}


def test_background_child_does_not_survive_delete(make_bundle, state_root: Path, tmp_path: Path) -> None:
    # the workload is pid 1: it waits on its background child, which survives only while it runs
    b = make_bundle(args=["sh", "-c", "sleep 1000 & echo $! > /storage/bg; wait"])
    assert create(state_root, b, "bg", "--pid-file", str(tmp_path / "pid")).returncode == 0
    assert run_shim(state_root, "start", "bg").returncode == 0
    deadline = time.monotonic() + 10
    while len(procs := Path(cgroup_dirs("bg")[0], "cgroup.procs").read_text().split()) < 2:
        assert time.monotonic() < deadline, "the background sleep should be in the cgroup before delete"
        time.sleep(0.02)
    assert run_shim(state_root, "delete", "--force", "bg").returncode == 0
    wait_pid(int((tmp_path / "pid").read_text()))
    time.sleep(0.1)
    for p in procs:
        stat = Path(f"/proc/{p}/stat")
        assert not stat.exists() or stat.read_text().split(") ")[1][0] == "Z", f"pid {p} survived delete"


def test_large_stderr_does_not_hang(make_bundle, state_root: Path, tmp_path: Path) -> None:
    b = make_bundle(args=["sh", "-c", "head -c 1048576 /dev/zero | tr '\\0' x >&2; echo done"])
    proc = subprocess.Popen(
        shim_cmd(state_root, "create", "--bundle", str(b), "--pid-file", str(tmp_path / "pid"), "big"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.wait(timeout=30) == 0  # create returns although the sandbox holds the pipes
    assert run_shim(state_root, "start", "big").returncode == 0
    out, err = proc.communicate(timeout=30)
    assert out == b"done\n" and len(err) == 1048576
    assert wait_pid(int((tmp_path / "pid").read_text())) == 0


def test_parent_ignoring_sigchld_and_blocking_signals(make_bundle, state_root: Path, tmp_path: Path) -> None:
    b = make_bundle(args=["sh", "-c", "exit 5"])
    wrapper = (
        "import os, signal, sys\n"
        "signal.signal(signal.SIGCHLD, signal.SIG_IGN)\n"
        "signal.pthread_sigmask(signal.SIG_BLOCK,\n"
        "    {signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGUSR1})\n"
        "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])\n"
    )

    def hostile(*args: str) -> subprocess.CompletedProcess[bytes]:
        out = tmp_path / "hostile.out"
        with open(out, "wb") as o:
            p = subprocess.run(
                [sys.executable, "-c", wrapper, *shim_cmd(state_root, *args)[1:]],
                stdout=o,
                stderr=subprocess.DEVNULL,
                timeout=60,
            )
        return subprocess.CompletedProcess(p.args, p.returncode, out.read_bytes())

    assert hostile("create", "--bundle", str(b), "--pid-file", str(tmp_path / "pid"), "h").returncode == 0
    assert hostile("start", "h").returncode == 0
    deadline = time.monotonic() + 30
    while json.loads(hostile("state", "h").stdout)["status"] != "stopped":
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert json.loads(hostile("state", "h").stdout)["exitStatus"] == 5
    assert wait_pid(int((tmp_path / "pid").read_text())) == 5
    assert hostile("delete", "h").returncode == 0


def test_pid_file_with_longer_content_is_replaced(make_bundle, state_root: Path, tmp_path: Path) -> None:
    pidf = tmp_path / "pid"
    pidf.write_text("99999999999999999999\n")
    assert create(state_root, make_bundle(), "p", "--pid-file", str(pidf)).returncode == 0
    text = pidf.read_text()
    assert text.isdigit() and int(text) == state(state_root, "p")["pid"]


def test_forged_state_never_signals_an_unrelated_process(make_bundle, state_root: Path) -> None:
    victim = subprocess.Popen(["sleep", "30"])
    try:
        assert create(state_root, make_bundle(), "f").returncode == 0
        rec_path = state_root / "f" / "state.json"
        rec = json.loads(rec_path.read_text())
        rec.update(pid=victim.pid, pid_start=1, init_pid=victim.pid, init_start=1, status="running")
        rec["private"]["status_file"] = "/nonexistent"
        rec_path.write_text(json.dumps(rec))
        assert state(state_root, "f")["status"] == "stopped"
        assert run_shim(state_root, "kill", "f", "KILL").returncode == 8
        assert run_shim(state_root, "delete", "f").returncode == 0
        time.sleep(0.1)
        assert victim.poll() is None, "an unrelated process was signalled"
    finally:
        victim.kill()
        victim.wait()


def test_missing_cwd_is_created_inside_the_rootfs(make_bundle, state_root: Path, tmp_path: Path) -> None:
    cfg = base_config(["sh", "-c", "pwd > /storage/pwd"])
    cfg["process"]["cwd"] = "/work/here"
    b = make_bundle(cfg)
    assert create(state_root, b, "cwd", "--pid-file", str(tmp_path / "pid")).returncode == 0
    assert (b / "rootfs" / "work" / "here").is_dir()
    assert not Path("/work/here").exists()
    assert run_shim(state_root, "start", "cwd").returncode == 0
    assert wait_pid(int((tmp_path / "pid").read_text())) == 0
    assert (b / "storage" / "pwd").read_text() == "/work/here\n"


def test_relative_root_is_found_from_any_cwd(make_bundle, tmp_path: Path) -> None:
    rel = f"test-rel-{os.getpid()}"
    b = make_bundle()
    a_dir, b_dir = tmp_path / "a", tmp_path / "b"
    a_dir.mkdir()
    b_dir.mkdir()
    try:
        r = subprocess.run(
            [sys.executable, "-m", "sandbox_shim", "--root", rel, "create", "--bundle", str(b), "r"],
            cwd=a_dir,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=30,
        )
        assert r.returncode == 0
        r = subprocess.run(
            [sys.executable, "-m", "sandbox_shim", "--root", rel, "state", "r"],
            cwd=b_dir,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert r.returncode == 0 and json.loads(r.stdout)["status"] == "created"
    finally:
        subprocess.run(
            [sys.executable, "-m", "sandbox_shim", "--root", rel, "delete", "--force", "r"], cwd=b_dir
        )
        subprocess.run(["rm", "-rf", f"/run/sandbox-shim/{rel}"])


def test_state_rules(make_bundle, state_root: Path, tmp_path: Path) -> None:
    b = make_bundle(args=["sh", "-c", "trap 'exit 7' TERM; while :; do sleep 0.05; done"])
    for verb in ("create", "start", "state", "kill", "delete"):
        r = run_shim(state_root, verb)
        assert r.returncode == 2 and "needs a container id" in r.stderr
    assert run_shim(state_root, "state", "nope").returncode == 6
    assert run_shim(state_root, "start", "nope").returncode == 6
    assert create(state_root, b, "s", "--pid-file", str(tmp_path / "pid")).returncode == 0
    r = create(state_root, b, "s")
    assert r.returncode == 7 and "already exists" in r.stderr
    r = run_shim(state_root, "delete", "s")
    assert r.returncode == 8 and "created" in r.stderr
    assert run_shim(state_root, "start", "s").returncode == 0
    r = run_shim(state_root, "start", "s")
    assert r.returncode == 8 and "running" in r.stderr
    assert run_shim(state_root, "delete", "s").returncode == 8
    time.sleep(0.3)
    assert run_shim(state_root, "kill", "s", "SIGTERM").returncode == 0
    assert wait_pid(int((tmp_path / "pid").read_text())) == 7
    r = run_shim(state_root, "kill", "s", "TERM")
    assert r.returncode == 8 and "not running" in r.stderr
    assert run_shim(state_root, "delete", "s").returncode == 0
    assert run_shim(state_root, "delete", "--force", "s").returncode == 0  # idempotent
    assert run_shim(state_root, "delete", "--force", "s").returncode == 0


@pytest.mark.parametrize("sig", ["TERM", "SIGTERM", "15", "term"])
def test_signal_spellings(make_bundle, state_root: Path, tmp_path: Path, sig: str) -> None:
    b = make_bundle(args=["sh", "-c", "trap 'exit 9' TERM; while :; do sleep 0.05; done"])
    assert create(state_root, b, "k", "--pid-file", str(tmp_path / "pid")).returncode == 0
    assert run_shim(state_root, "start", "k").returncode == 0
    time.sleep(0.3)
    assert run_shim(state_root, "kill", "k", sig).returncode == 0
    assert wait_pid(int((tmp_path / "pid").read_text())) == 9
    assert run_shim(state_root, "kill", "k", "NOTASIGNAL").returncode in (2, 8)


def test_delete_force_cleans_cgroup_when_state_dir_is_gone(
    make_bundle, state_root: Path, tmp_path: Path
) -> None:
    b = make_bundle(args=["sleep", "1000"])
    assert create(state_root, b, "g", "--pid-file", str(tmp_path / "pid")).returncode == 0
    assert run_shim(state_root, "start", "g").returncode == 0
    assert cgroup_dirs("g")
    subprocess.run(["rm", "-rf", str(state_root / "g")], check=True)
    assert run_shim(state_root, "delete", "--force", "g").returncode == 0
    assert cgroup_dirs("g") == []
    assert wait_pid(int((tmp_path / "pid").read_text())) == 128 + 9


def test_kill_created_sandbox_then_delete(make_bundle, state_root: Path, tmp_path: Path) -> None:
    assert create(state_root, make_bundle(), "kc", "--pid-file", str(tmp_path / "pid")).returncode == 0
    assert run_shim(state_root, "kill", "kc", "KILL").returncode == 0
    wait_pid(int((tmp_path / "pid").read_text()))
    assert state(state_root, "kc")["status"] == "stopped"
    assert run_shim(state_root, "delete", "kc").returncode == 0
    assert cgroup_dirs("kc") == []


def test_state_with_empty_env_and_closed_stderr(make_bundle, state_root: Path) -> None:
    assert create(state_root, make_bundle(), "z").returncode == 0
    rfd, wfd = os.pipe()
    os.close(rfd)  # writing to stderr now raises SIGPIPE/EPIPE: state must not write there
    try:
        r = subprocess.run(
            shim_cmd(state_root, "state", "z"), env={}, stdout=subprocess.PIPE, stderr=wfd, timeout=30
        )
    finally:
        os.close(wfd)
    assert r.returncode == 0
    assert json.loads(r.stdout)["status"] == "created"


@pytest.mark.parametrize("bad", ["invalid-config", "no-rootfs", "bwrap-fails", "cgroup-fails"])
def test_bad_input_leaves_nothing_behind(make_bundle, state_root: Path, bad: str) -> None:
    cfg = base_config()
    if bad == "invalid-config":
        cfg["process"]["args"] = []
    elif bad == "bwrap-fails":
        # a file bound onto a directory: valid config, and mount(2) refuses it while bwrap sets up
        cfg["mounts"].append(
            {"destination": "/bin", "type": "bind", "source": "storage/f", "options": ["rbind", "ro"]}
        )
    elif bad == "cgroup-fails":
        cfg["linux"]["resources"]["cpu"] = {"cpus": "4095"}
    b = make_bundle(cfg)
    if bad == "no-rootfs":
        subprocess.run(["rm", "-rf", str(b / "rootfs")], check=True)
    if bad == "bwrap-fails":
        (b / "storage" / "f").write_text("x")
    kids_before = set(children_of(os.getpid()))
    r = create(state_root, b, "bad")
    assert r.returncode == (9 if bad in ("bwrap-fails", "cgroup-fails") else 3), r.stderr
    assert len(r.stderr.strip().splitlines()[-1]) > 10
    assert not (state_root / "bad").exists()
    assert cgroup_dirs("bad") == []
    assert not (state_root / ".cgroups" / "bad").exists()
    # we are a subreaper: a process left behind by the failed create would now be our child.  Zombies
    # are excluded: bwrap's pid 1 of the capability probe re-parents to us when it exits last.
    left = [
        p
        for p in set(children_of(os.getpid())) - kids_before
        if Path(f"/proc/{p}/stat").read_text().rsplit(") ", 1)[1][0] != "Z"
    ]
    assert left == []


def test_run_waits_deletes_and_returns_status(make_bundle, state_root: Path) -> None:
    b = make_bundle(args=["sh", "-c", "echo ran; exit 42"])
    r = run_shim(state_root, "run", "--bundle", str(b), "rr")
    assert r.returncode == 42 and "ran" in r.stdout
    assert not (state_root / "rr").exists() and cgroup_dirs("rr") == []


def test_list_shows_sandboxes(make_bundle, state_root: Path) -> None:
    assert create(state_root, make_bundle(), "l1").returncode == 0
    r = run_shim(state_root, "list", "--format", "json")
    assert r.returncode == 0
    assert [(s["id"], s["status"]) for s in json.loads(r.stdout)] == [("l1", "created")]
