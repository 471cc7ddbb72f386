"""exec into a running sandbox, on the real kernel: what the exec'd process sees and which fact comes back.

Each test runs against a busybox sandbox whose own process sleeps; the exec'd process must see the
sandbox's root (a marker only in its rootfs), not the host's; count in the sandbox's cgroup; run under
its seccomp filter with no capabilities.  "Never ran" (``CouldNotRun``) is told from "ran and exited
127" (``Completion``).  Every test ends with nothing of the sandbox left on the host.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import run_shim
from sandbox_shim import api
from sandbox_shim.control import facts, ps
from sandbox_shim.errors import CouldNotRun, InvalidState, LimitExceeded
from sandbox_shim.execute import execute, spawn
from sandbox_shim.mechanism import Sandbox

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or os.geteuid() != 0,
                                reason="needs Linux, root, bwrap and cgroups")

ALLOC_64M = ["awk", 'BEGIN{s="x"; while (length(s) < 64*1024*1024) s = s s; print length(s)}']
#: the CLI with this change's commands registered (app.COMMANDS may not list them yet)
CLI = ("import sys; from sandbox_shim.cli import app, control as c; "
       "[app.cli.add_command(x) for x in (c.exec_cmd, c.ps_cmd, c.pause_cmd, c.resume_cmd, c.update_cmd, "
       "c.events_cmd) if x.name not in app.cli.commands]; "
       "app.cli.main(args=sys.argv[1:], prog_name='sandbox-shim')")


def cli(root: Path, *args: str, **kw: Any) -> Any:
    """Run ``sandbox-shim --root ROOT ARGS...`` (text output captured)."""
    kw.setdefault("timeout", 60)
    if "stdout" not in kw:
        kw["capture_output"] = True
    return subprocess.run([sys.executable, "-c", CLI, "--root", str(root), *args], text=True, **kw)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


class Running:
    """A started sandbox: ``mech``, ``id``, ``bundle``, ``marker`` (a file only in its rootfs)."""

    def __init__(self, mech: Any, sid: str, bundle: Path, marker: str) -> None:
        self.mech, self.id, self.bundle, self.marker = mech, sid, bundle, marker

    def cgroup(self) -> Any:
        store = api._store(self.mech)
        return self.mech.cgroup(api._sandbox(store.read(self.id), store))


@pytest.fixture
def running(make_bundle: Any, state_root: Path) -> Iterator[Running]:
    bundle = make_bundle(args=["sleep", "600"])
    marker = f"marker-{uuid.uuid4().hex[:8]}"
    (bundle / "rootfs" / marker).write_text("inside\n")
    noexec = bundle / "rootfs" / "noexec.sh"
    noexec.write_text("#!/bin/sh\necho ran\n")
    noexec.chmod(0o644)
    mech = api.default_mechanism(str(state_root))
    sid = f"ex-{uuid.uuid4().hex[:8]}"
    api.provision(mech, Sandbox(sid, str(bundle)))
    api.start(mech, sid)
    r = Running(mech, sid, bundle, marker)
    dirs = r.cgroup().dirs()
    pids: list[int] = []
    try:
        yield r
        pids = r.cgroup().pids()
    finally:
        api.destroy(mech, sid, force=True)
    # nothing left: the cgroup directories are gone and every process that was in them is dead
    assert not [d for d in dirs if os.path.isdir(d)]
    deadline = time.monotonic() + 5
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not [(p, Path(f"/proc/{p}/cmdline").read_bytes(), Path(f"/proc/{p}/status").read_text())
                for p in pids if alive(p)]


def test_exec_sees_the_sandbox_root_not_the_host(running: Running, tmp_path: Path) -> None:
    host_only = tmp_path / f"host-{uuid.uuid4().hex[:8]}"
    host_only.write_text("host")
    # control: the host sees its file and not the sandbox's marker at /
    assert host_only.exists() and not Path("/" + running.marker).exists()
    probe = f"cat /{running.marker}; test -e {host_only}; echo $?"
    done = execute(running.mech, running.id, ("sh", ["-c", probe]))
    assert done.exit_status == 0 and done.stdout.decode().split() == ["inside", "1"]
    r = cli(running.mech.root, "exec", running.id, "cat", f"/{running.marker}")
    assert r.returncode == 0 and r.stdout == "inside\n"


def test_exec_runs_confined(running: Running) -> None:
    done = execute(running.mech, running.id, ("cat", ["/proc/self/status"]))
    status = dict(line.split(":", 1) for line in done.stdout.decode().splitlines() if ":" in line)
    assert status["Seccomp"].strip() == "2"
    assert [int(status[k], 16) for k in ("CapEff", "CapPrm", "CapBnd", "CapAmb")] == [0, 0, 0, 0]
    assert status["NoNewPrivs"].strip() == "1"
    # in the sandbox's pid namespace: pid 1 is the sandbox's init, the host's is invisible
    probe = "tr '\\0' ' ' < /proc/1/cmdline; echo; ls /proc | wc -l"
    done = execute(running.mech, running.id, ("sh", ["-c", probe]))
    first, count = done.stdout.decode().splitlines()
    assert "bwrap" in first and int(count) < 60
    # control: the same file read by the host shows no filter
    assert open("/proc/self/status").read().count("Seccomp:\t0") == 1


def test_exec_process_is_in_the_sandbox_cgroup(running: Running, tmp_path: Path) -> None:
    s = spawn(running.mech, running.id, ["sleep", "30"], detach=True)
    s.helper.wait()
    try:
        assert s.pid in ps(running.mech, running.id)
        assert s.pid in running.cgroup().pids()
    finally:
        os.kill(s.pid, 9)
    pid_file = tmp_path / "exec.pid"
    # a detached program keeps the stdio it was given: give it none we wait on
    r = cli(running.mech.root, "exec", "-d", "--pid-file", str(pid_file), running.id, "sleep", "30",
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert r.returncode == 0
    text = pid_file.read_text()
    assert text.isdigit()
    r = cli(running.mech.root, "ps", "--format", "json", running.id)
    assert int(text) in json.loads(r.stdout)


def test_exec_memory_counts_against_the_sandbox(running: Running) -> None:
    cg = running.cgroup()
    before = facts(cg).memory_peak or 0
    assert before < 32 << 20  # control: an idle busybox sandbox is small
    done = execute(running.mech, running.id, (ALLOC_64M[0], ALLOC_64M[1:]))
    assert done.exit_status == 0 and done.stdout == b"67108864\n"
    assert (facts(cg).memory_peak or 0) >= 64 << 20


def test_could_not_run_is_told_from_a_status(running: Running) -> None:
    m, sid = running.mech, running.id
    with pytest.raises(CouldNotRun) as e:
        execute(m, sid, ("/nonexistent", []))
    assert e.value.reason == "not_found" and e.value.exit_status == 127
    with pytest.raises(CouldNotRun) as e:
        execute(m, sid, ("no-such-program", []))
    assert e.value.reason == "not_found"
    with pytest.raises(CouldNotRun) as e:
        execute(m, sid, ("/noexec.sh", []))
    assert e.value.reason == "permission_denied" and e.value.exit_status == 126
    # control: the same file run through sh did run; and a program that ran may exit 127
    assert execute(m, sid, ("sh", ["/noexec.sh"])).stdout == b"ran\n"
    done = execute(m, sid, ("sh", ["-c", "exit 127"]))
    assert done.exit_status == 127 and done.signal is None
    r = cli(m.root, "exec", sid, "/nonexistent")
    assert r.returncode == 127 and "executable file not found" in r.stderr
    r = cli(m.root, "exec", sid, "/noexec.sh")
    assert r.returncode == 126 and "permission denied" in r.stderr
    r = cli(m.root, "exec", sid, "sh", "-c", "echo out; exit 127")
    assert r.returncode == 127 and r.stdout == "out\n" and "not found" not in r.stderr


def test_exec_env_cwd_and_process_file(running: Running, tmp_path: Path) -> None:
    done = execute(running.mech, running.id, ("sh", ["-c", "echo $FOO; pwd"]), env={"FOO": "bar"}, cwd="/tmp")
    assert done.stdout == b"bar\n/tmp\n"
    proc = tmp_path / "process.json"
    proc.write_text('{"args": ["sh", "-c", "echo $A; pwd"], "env": ["A=b"], "cwd": "/etc"}')
    r = cli(running.mech.root, "exec", "--process", str(proc), running.id)
    assert r.returncode == 0 and r.stdout == "b\n/etc\n"
    r = cli(running.mech.root, "exec", "-e", "X=1", "--cwd", "/bin", running.id, "--", "sh", "-c",
            "echo $X; pwd")
    assert r.stdout == "1\n/bin\n"
    r = cli(running.mech.root, "exec", "-t", running.id, "sh")
    assert r.returncode == 2 and "not supported" in r.stderr


def test_exec_timeout_is_a_wall_clock_limit(running: Running) -> None:
    t0 = time.monotonic()
    with pytest.raises(LimitExceeded) as e:
        execute(running.mech, running.id, ("sh", ["-c", "echo started; sleep 60.25"]), timeout=1)
    assert e.value.kind_of_limit == "wall_clock" and time.monotonic() - t0 < 10
    assert e.value.completion.stdout == b"started\n"
    assert not [p for p in running.cgroup().pids()
                if b"60.25" in open(f"/proc/{p}/cmdline", "rb").read()]


def test_exec_needs_a_running_sandbox(make_bundle: Any, state_root: Path) -> None:
    mech = api.default_mechanism(str(state_root))
    api.provision(mech, Sandbox("ex-created", str(make_bundle(args=["true"]))))
    try:
        with pytest.raises(InvalidState):
            execute(mech, "ex-created", ("true", []))
        r = cli(state_root, "exec", "ex-created", "true")
        assert r.returncode == 8 and "running" in r.stderr
    finally:
        api.destroy(mech, "ex-created", force=True)
    r = run_shim(state_root, "state", "ex-created")
    assert r.returncode != 0
