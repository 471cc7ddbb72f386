"""pause / resume / update / ps / events / stop on the real kernel, and the v2 manager on a fake cgroup2 tree.

The sandbox's workload counts into ``/storage/count`` (the bundle's storage dir, readable from the
host), so "paused" and "resumed" are observed, not inferred from the freezer file we wrote.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import base_config, run_shim
from sandbox_shim import api, control
from sandbox_shim.errors import InvalidState, LimitExceeded, UsageError
from sandbox_shim.execution import execute
from sandbox_shim.mechanism import Sandbox
from sandbox_shim.platforms.linux.cgroups import Limits
from sandbox_shim.platforms.linux.cgroups.detect import Layout, manager
from sandbox_shim.platforms.linux.cgroups.v2 import V2Manager
from test_execute import CLI, cli

linux_root = pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.geteuid() != 0, reason="needs Linux, root, bwrap and cgroups"
)
MiB = 1 << 20
COUNTER = "i=0; while :; do i=$((i+1)); echo $i > /storage/count; sleep 0.05; done"


def alloc(mib: int) -> tuple[str, list[str]]:
    return ("awk", [f'BEGIN{{s="x"; while (length(s) < {mib}*1024*1024) s = s s; print length(s)}}'])


class Box:
    def __init__(self, mech: Any, sid: str, bundle: Path) -> None:
        self.mech, self.id, self.bundle = mech, sid, bundle

    def count(self) -> int:
        """The counter's last value.  ``echo $i > count`` truncates before it writes, so a read can land
        between the two (or on a workload frozen between them): an empty file is read again, and a
        file still empty after that counts as the value before it (``-1``, never "advanced")."""
        for _ in range(50):
            text = (self.bundle / "storage" / "count").read_text().strip()
            if text:
                return int(text)
            time.sleep(0.01)
        return -1

    def cgroup(self) -> Any:
        store = api.store_of(self.mech)
        return self.mech.cgroup(api.sandbox_of(store.read(self.id), store))


@pytest.fixture
def box(make_bundle: Any, state_root: Path) -> Iterator[Box]:
    cfg = base_config(["sh", "-c", COUNTER])
    bundle = make_bundle(cfg)
    mech = api.default_mechanism(str(state_root))
    sid = f"ctl-{uuid.uuid4().hex[:8]}"
    api.provision(mech, Sandbox(sid, str(bundle)))
    b = Box(mech, sid, bundle)
    dirs = b.cgroup().dirs()
    try:
        yield b
    finally:
        api.destroy(mech, sid, force=True)
    assert not [d for d in dirs if os.path.isdir(d)]


def advancing(b: Box, wait: float = 0.5, patience: float = 5.0) -> bool:
    """True when the counter moves within ``wait`` s, or, on a loaded host, within ``patience`` s.

    "Not advancing" is judged over the full ``wait`` (a frozen workload never moves, however long one
    looks); "advancing" keeps looking up to ``patience`` so a slow scheduler is not read as frozen."""
    first = b.count()
    time.sleep(wait)
    deadline = time.monotonic() + patience
    while True:
        if b.count() > first:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)


@linux_root
def test_pause_stops_the_counter_and_resume_restarts_it(box: Box) -> None:
    with pytest.raises(InvalidState):  # created, not running
        control.pause(box.mech, box.id)
    api.start(box.mech, box.id)
    time.sleep(0.3)
    assert advancing(box)  # control: it counts while running
    with pytest.raises(InvalidState):
        control.resume(box.mech, box.id)
    control.pause(box.mech, box.id)
    assert api.status(box.mech, box.id).status == "paused"
    time.sleep(0.1)
    assert not advancing(box, patience=0)
    control.resume(box.mech, box.id)
    assert api.status(box.mech, box.id).status == "running"
    assert advancing(box)
    # the same through the CLI
    root = box.mech.root
    assert cli(root, "pause", box.id).returncode == 0
    assert json.loads(run_shim(Path(root), "state", box.id).stdout)["status"] == "paused"
    time.sleep(0.1)
    assert not advancing(box, patience=0)
    r = cli(root, "pause", box.id)
    assert r.returncode == 8 and "running" in r.stderr
    assert cli(root, "resume", box.id).returncode == 0
    assert advancing(box)


@linux_root
def test_update_lowers_the_memory_limit_and_it_is_enforced(box: Box) -> None:
    api.start(box.mech, box.id)
    done = execute(box.mech, box.id, alloc(64))  # control: fits in the default 256 MiB
    assert done.exit_status == 0
    control.update(box.mech, box.id, {"memory": {"limit": 48 * MiB}})
    assert control.facts(box.cgroup()).memory_limit == 48 * MiB
    with pytest.raises(LimitExceeded) as e:
        execute(box.mech, box.id, alloc(64))
    assert e.value.kind_of_limit == "memory"
    assert advancing(box)  # the workload itself survived (the OOM killer took the biggest: awk)
    r = cli(box.mech.root, "update", "--resources", "-", box.id, input='{"memory": {"limit": 33554432}}')
    assert r.returncode == 0, r.stderr
    assert control.facts(box.cgroup()).memory_limit == 32 * MiB
    assert cli(box.mech.root, "update", "--pids-limit", "20", box.id).returncode == 0
    assert control.facts(box.cgroup()).pids_limit == 20
    with pytest.raises(UsageError):
        control.update(box.mech, box.id, {"network": {}})
    r = cli(box.mech.root, "update", "--resources", "-", box.id, input='{"memory": {"limit": -1}}')
    assert r.returncode == 2


@linux_root
def test_usage_moves_in_the_right_direction(box: Box) -> None:
    api.start(box.mech, box.id)
    before = control.stats(box.mech, box.id)["data"]
    assert before["memory"]["usage"]["max"] < 32 * MiB
    assert execute(box.mech, box.id, alloc(64)).exit_status == 0
    r = cli(box.mech.root, "events", "--stats", box.id)
    after = json.loads(r.stdout)
    assert after["type"] == "stats" and after["id"] == box.id
    data = after["data"]
    assert data["memory"]["usage"]["max"] >= 64 * MiB
    assert data["cpu"]["usage"]["total"] > before["cpu"]["usage"]["total"]
    # the loop's shell and its sleep: the shell alone between one sleep's exit and the next fork
    pids, deadline = data["pids"], time.monotonic() + 5
    while pids["current"] < 2 and time.monotonic() < deadline:
        pids = json.loads(cli(box.mech.root, "events", "--stats", box.id).stdout)["data"]["pids"]
    assert pids["current"] >= 2 and pids["limit"] == 128
    u = api.usage(box.mech, box.id)
    assert u.memory_peak_bytes is not None and u.memory_peak_bytes >= 64 * MiB


@linux_root
def test_ps_lists_the_sandbox_processes(box: Box) -> None:
    api.start(box.mech, box.id)
    store = api.store_of(box.mech)
    wpid = box.mech.workload_pid(api.sandbox_of(store.read(box.id), store))
    assert wpid in control.ps(box.mech, box.id)
    r = cli(box.mech.root, "ps", "--format", "json", box.id)
    assert wpid in json.loads(r.stdout)
    r = cli(box.mech.root, "ps", box.id)
    assert r.returncode == 0 and "sh -c" in r.stdout


@linux_root
def test_events_stream_ends_when_the_sandbox_stops(make_bundle: Any, state_root: Path) -> None:
    mech = api.default_mechanism(str(state_root))
    # long enough for the CLI to start under software emulation (the VM lane), short enough to end
    api.provision(mech, Sandbox("ev", str(make_bundle(base_config(["sleep", "6"])))))
    try:
        api.start(mech, "ev")
        t0 = time.monotonic()
        r = cli(state_root, "events", "--interval", "300ms", "ev", timeout=40)
        lines = [json.loads(x) for x in r.stdout.splitlines()]
        assert r.returncode == 0 and 2 <= len(lines) and time.monotonic() - t0 < 30
        assert {e["type"] for e in lines} == {"stats"}
    finally:
        api.destroy(mech, "ev", force=True)


@linux_root
@pytest.mark.parametrize("how", ["reader-closes", "ctrl-c"])
def test_events_stream_ends_at_the_boundary_with_its_documented_status(
    make_bundle: Any, state_root: Path, how: str
) -> None:
    """A reader that goes away is status 74 ("could not write the output"), Ctrl-C is 130; one line
    at most on stderr, no traceback.  The control: the stream's first event arrives."""
    mech = api.default_mechanism(str(state_root))
    sid = f"evb-{uuid.uuid4().hex[:6]}"
    api.provision(mech, Sandbox(sid, str(make_bundle(base_config(["sleep", "60"])))))
    try:
        api.start(mech, sid)
        argv = [sys.executable, "-c", CLI, "--root", str(state_root), "events", "--interval", "100ms", sid]
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert p.stdout is not None and p.stderr is not None
        assert json.loads(p.stdout.readline())["type"] == "stats"  # the control
        if how == "reader-closes":
            p.stdout.close()
            want = 74
        else:
            p.send_signal(signal.SIGINT)
            want = 130
        status = p.wait(timeout=30)
        err = p.stderr.read()
        assert status == want, err
        assert "Traceback" not in err and len(err.splitlines()) <= 1, err
        if want == 74:
            assert "could not write the output" in err, err
    finally:
        api.destroy(mech, sid, force=True)


@linux_root
def test_stop_kills_a_workload_that_ignores_sigterm(make_bundle: Any, state_root: Path) -> None:
    mech = api.default_mechanism(str(state_root))
    script = "trap '' TERM; trap 'echo got-term' USR1; while :; do sleep 0.2; done"
    bundle = make_bundle(base_config(["sh", "-c", script]))
    api.provision(mech, Sandbox("stubborn", str(bundle)))
    store = api.store_of(mech)
    sb = api.sandbox_of(store.read("stubborn"), store)
    cg = mech.cgroup(sb)
    try:
        api.start(mech, "stubborn")
        time.sleep(0.3)
        api.signal(mech, "stubborn", 15)  # control: SIGTERM alone does not stop it
        time.sleep(0.5)
        assert api.status(mech, "stubborn").status == "running"
        t0 = time.monotonic()
        st = api.stop(mech, "stubborn", grace=1.0)
        took = time.monotonic() - t0
        assert st.status == "stopped" and 1.0 <= took < 8
        assert cg.pids() == []
    finally:
        api.destroy(mech, "stubborn", force=True)
    assert not [d for d in cg.dirs() if os.path.isdir(d)]


# -- cgroup v2, file level, on a fake cgroup2 tree ---------------------------------------------------


@pytest.fixture
def fake_v2(tmp_path: Path) -> Path:
    mount = tmp_path / "cgroup2"
    mount.mkdir()
    (mount / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids\n")
    (mount / "cgroup.subtree_control").write_text("")
    return mount


def test_v2_create_apply_and_read(fake_v2: Path) -> None:
    m = manager("/sandbox-shim/x", 2, Layout(str(fake_v2), frozenset({"memory", "pids", "cpu"}), {}))
    assert isinstance(m, V2Manager)
    # the parent made for the nested path is recorded too, so delete removes it when it is empty
    made = [str(fake_v2 / "sandbox-shim"), str(fake_v2 / "sandbox-shim" / "x")]
    assert m.create(["memory", "pids"]) == made
    assert set((fake_v2 / "cgroup.subtree_control").read_text().split()) >= {"+memory", "+pids", "+cpu"}
    parent = fake_v2 / "sandbox-shim"
    assert set((parent / "cgroup.subtree_control").read_text().split()) >= {"+memory", "+pids"}
    (parent / "x" / "memory.swap.max").write_text("max\n")  # the kernel makes it when swap is accounted
    m.apply(
        Limits.from_oci(
            {
                "memory": {"limit": 32 * MiB, "swap": 48 * MiB},
                "pids": {"limit": 32},
                "cpu": {"quota": 50000, "period": 100000, "shares": 1024},
            }
        )
    )
    d = fake_v2 / "sandbox-shim" / "x"
    assert (d / "memory.max").read_text() == str(32 * MiB)
    assert (d / "memory.swap.max").read_text() == str(16 * MiB)  # OCI swap is memory+swap
    assert (d / "pids.max").read_text() == "32"
    assert (d / "cpu.max").read_text() == "50000 100000"
    assert (d / "cpu.weight").read_text() == "100"  # runc >= 1.3.2: the default 1024 shares -> weight 100
    # what the kernel would show; facts/stats read it back in runc's units
    (d / "memory.current").write_text("1048576\n")
    (d / "memory.peak").write_text("33554432\n")
    (d / "memory.events").write_text("low 0\nhigh 0\nmax 7\noom 1\noom_kill 1\n")
    (d / "pids.current").write_text("3\n")
    (d / "pids.events").write_text("max 2\n")
    (d / "cpu.stat").write_text("usage_usec 1500\nuser_usec 1000\nsystem_usec 500\n")
    (d / "cgroup.procs").write_text("11\n12\n")
    f = control.facts(m)
    assert (f.memory_usage, f.memory_peak, f.memory_limit, f.memory_failcnt, f.oom_kills) == (
        MiB,
        32 * MiB,
        32 * MiB,
        7,
        1,
    )
    assert (f.pids_current, f.pids_limit, f.pids_max_hits) == (3, 32, 2)
    assert (f.cpu_total_ns, f.cpu_user_ns, f.cpu_kernel_ns) == (1_500_000, 1_000_000, 500_000)
    assert m.oom_killed() and m.pids() == [11, 12]
    ev = control._stats_event("x", f)
    assert ev["data"]["memory"]["usage"] == {"usage": MiB, "max": 32 * MiB, "failcnt": 7, "limit": 32 * MiB}
    (d / "memory.max").write_text("max\n")
    (d / "pids.max").write_text("max\n")
    assert (
        control.facts(m).memory_limit is None
        and control._stats_event("x", control.facts(m))["data"]["pids"]["limit"] == 0
    )


def test_v2_freeze_waits_for_cgroup_events(fake_v2: Path) -> None:
    m = V2Manager(str(fake_v2), "/sandbox-shim/y")
    m.create([])
    d = fake_v2 / "sandbox-shim" / "y"
    (d / "cgroup.events").write_text("populated 1\nfrozen 0\n")
    done_at: list[float] = []

    def kernel() -> None:  # the kernel reports "frozen 1" a little after cgroup.freeze is written
        time.sleep(0.3)
        assert (d / "cgroup.freeze").read_text() == "1"
        done_at.append(time.monotonic())  # before the write: freeze may return as soon as it lands
        (d / "cgroup.events").write_text("populated 1\nfrozen 1\n")

    t = threading.Thread(target=kernel)
    t0 = time.monotonic()
    t.start()
    m.freeze(True)
    returned = time.monotonic()
    t.join()
    assert returned >= done_at[0] and returned - t0 >= 0.3
    assert m.is_frozen()
    (d / "cgroup.events").write_text("populated 1\nfrozen 0\n")
    m.freeze(False)
    assert (d / "cgroup.freeze").read_text() == "0" and not m.is_frozen()


def test_v2_kill_uses_cgroup_kill(fake_v2: Path) -> None:
    m = V2Manager(str(fake_v2), "/sandbox-shim/z")
    m.create([])
    d = fake_v2 / "sandbox-shim" / "z"
    (d / "cgroup.kill").write_text("0")
    m.kill_all(9)
    assert (d / "cgroup.kill").read_text() == "1"
