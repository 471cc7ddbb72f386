"""Limits reported as facts, on the real kernel: memory, pids, cpu, wall clock.

Each breach runs its control first (the same recipe under a limit it fits in must complete), then the
breach must raise ``LimitExceeded`` with the right kind — and nothing of the sandbox may be left on
the host afterwards (no cgroup directory, no process).

Memory recipe: busybox awk doubling a string to 256 MiB is real anonymous memory (~384 MiB at peak
while the last copy is made), so a 32 MiB cgroup must OOM-kill it and a 1 GiB one must not.
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from conftest import base_config, cgroup_dirs
from sandbox_shim import api
from sandbox_shim.control import facts
from sandbox_shim.errors import CouldNotRun, LimitExceeded
from sandbox_shim.execution import run_bundle
from sandbox_shim.mechanism import Completion, Sandbox

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.geteuid() != 0, reason="needs Linux, root, bwrap and cgroups"
)

MiB = 1 << 20
ALLOC_256M = ["awk", 'BEGIN{s="x"; while (length(s) < 256*1024*1024) s = s s; print length(s)}']


def config(
    args: list[str], memory: int | None = 256 * MiB, pids: int | None = 128, **settings: str
) -> dict[str, Any]:
    cfg = base_config(args)
    res: dict[str, Any] = {}
    if memory:
        res["memory"] = {"limit": memory}
    if pids:
        res["pids"] = {"limit": pids}
    cfg["linux"]["resources"] = res
    cfg["annotations"] = {f"sandbox-shim.{k.replace('_', '-')}": v for k, v in settings.items()}
    return cfg


def procs_with(marker: str) -> list[int]:
    """Live host processes whose command line contains ``marker``."""
    out = []
    for e in os.listdir("/proc"):
        if e.isdigit():
            try:
                if marker.encode() in Path(f"/proc/{e}/cmdline").read_bytes():
                    state = Path(f"/proc/{e}/stat").read_text().rsplit(")", 1)[1].split()[0]
                    if state not in ("Z", "X"):
                        out.append(int(e))
            except OSError:
                pass
    return out


def no_cgroup_left(sid: str) -> bool:
    return cgroup_dirs(sid) == []


@pytest.fixture
def run(make_bundle: Any, state_root: Path) -> Any:
    """``run(cfg, timeout=30) -> Completion`` (or raises), asserting nothing is left behind."""
    mech = api.default_mechanism(str(state_root))

    def go(cfg: dict[str, Any], timeout: float = 30) -> Completion:
        sid = f"lim-{uuid.uuid4().hex[:8]}"
        bundle = make_bundle(cfg, name=sid)
        try:
            return run_bundle(mech, sid, bundle, timeout=timeout)
        finally:
            assert no_cgroup_left(sid)
            assert not (state_root / sid).exists()

    return go


def test_memory_limit_is_reported_with_its_peak(run: Any) -> None:
    done = run(config(ALLOC_256M, memory=1024 * MiB))  # control: fits in 1 GiB
    assert done.exit_status == 0 and done.stdout == b"268435456\n"
    assert done.usage.memory_peak_bytes >= 256 * MiB
    with pytest.raises(LimitExceeded) as e:
        run(config(ALLOC_256M, memory=32 * MiB))
    assert e.value.kind_of_limit == "memory"
    assert e.value.completion.usage.memory_peak_bytes >= 32 * MiB
    assert e.value.completion.signal == 9 and not e.value.completion.stdout


def test_cpu_time_limit(run: Any) -> None:
    short = "i=0; while [ $i -lt 1000 ]; do i=$((i+1)); done; echo $i"
    done = run(config(["sh", "-c", short], cpu_time_seconds="1"))
    assert done.exit_status == 0 and done.stdout == b"1000\n"  # control: a short loop fits
    t0 = time.monotonic()
    with pytest.raises(LimitExceeded) as e:
        run(config(["sh", "-c", "while :; do :; done"], cpu_time_seconds="1"))
    assert e.value.kind_of_limit == "cpu" and time.monotonic() - t0 < 10
    assert e.value.completion.signal in (24, 9)  # SIGXCPU at the soft limit, SIGKILL at the hard one


def test_wall_clock_limit_leaves_no_descendant(run: Any) -> None:
    marker = f"{60 + int(uuid.uuid4().int % 1000) / 1000:.3f}"
    done = run(config(["sh", "-c", "sleep 0.1; echo ok"], wall_clock_seconds="5"))
    assert done.stdout == b"ok\n"  # control: finishes within the limit
    t0 = time.monotonic()
    with pytest.raises(LimitExceeded) as e:
        run(config(["sh", "-c", f"sleep {marker} & sleep {marker}; wait"], wall_clock_seconds="1"))
    assert e.value.kind_of_limit == "wall_clock"
    assert 1 <= time.monotonic() - t0 < 10
    assert procs_with(f"sleep\0{marker}") == []
    # the library's own timeout is the same limit
    with pytest.raises(LimitExceeded) as e:
        run(config(["sleep", marker]), timeout=1)
    assert e.value.kind_of_limit == "wall_clock" and procs_with(f"sleep\0{marker}") == []


def test_pids_limit_is_reported_when_it_fails_the_program(run: Any) -> None:
    script = "for i in $(seq 60); do sleep 30.5 & done; echo all"
    done = run(config(["sh", "-c", script.replace("60", "10")], pids=32))
    assert done.stdout == b"all\n"  # control: 10 children fit in 32
    with pytest.raises(LimitExceeded) as e:
        run(config(["sh", "-c", script], pids=32))
    assert e.value.kind_of_limit == "pids" and b"can't fork" in e.value.completion.stderr
    assert procs_with("sleep\x0030.5") == []


def test_fork_bomb_is_contained(make_bundle: Any, state_root: Path) -> None:
    mech = api.default_mechanism(str(state_root))
    bundle = make_bundle(config(["sh", "-c", "b(){ b | b & }; b; sleep 600"], pids=32))
    host_before = len([e for e in os.listdir("/proc") if e.isdigit()])
    api.provision(mech, Sandbox("bomb", str(bundle)))
    store = api.store_of(mech)
    cg = mech.cgroup(api.sandbox_of(store.read("bomb"), store))
    dirs = cg.dirs()
    try:
        api.start(mech, "bomb")
        time.sleep(2)
        f = facts(cg)
        assert f.pids_limit == 32 and f.pids_current is not None and f.pids_current <= 32
        assert f.pids_max_hits > 0  # the limit did refuse forks
        # the host is unaffected: it forks, and it has at most the sandbox's 32 more processes
        assert os.spawnv(os.P_WAIT, "/bin/true", ["true"]) == 0
        assert len([e for e in os.listdir("/proc") if e.isdigit()]) < host_before + 32 + 16
    finally:
        api.destroy(mech, "bomb", force=True)
    assert not [d for d in dirs if os.path.isdir(d)]
    assert not (state_root / "bomb").exists()


def test_program_that_cannot_run_is_not_a_completion(run: Any, make_bundle: Any) -> None:
    with pytest.raises(CouldNotRun) as e:
        run(config(["/nonexistent"]))
    assert e.value.reason == "not_found"
    with pytest.raises(CouldNotRun) as e:
        run(config(["/etc/passwd"]))
    assert e.value.reason == "permission_denied"
    done = run(config(["sh", "-c", "echo out; echo err >&2; exit 127"]))
    assert (done.exit_status, done.signal, done.stdout, done.stderr) == (127, None, b"out\n", b"err\n")


def test_oom_is_visible_in_stats_before_delete(make_bundle: Any, state_root: Path) -> None:
    """The counters stay readable until delete (CLI: events --stats shows the failures)."""
    from test_execute import cli

    mech = api.default_mechanism(str(state_root))
    bundle = make_bundle(config(ALLOC_256M, memory=32 * MiB))
    api.provision(mech, Sandbox("oom", str(bundle)))
    try:
        api.start(mech, "oom")
        deadline = time.monotonic() + 10
        while api.status(mech, "oom").status != "stopped" and time.monotonic() < deadline:
            time.sleep(0.05)
        r = cli(state_root, "events", "--stats", "oom")
        ev = json.loads(r.stdout)
        assert ev["type"] == "stats" and ev["id"] == "oom"
        assert ev["data"]["memory"]["usage"]["failcnt"] > 0
        assert ev["data"]["memory"]["usage"]["max"] >= 32 * MiB
        assert ev["data"]["memory"]["usage"]["limit"] == 32 * MiB
    finally:
        api.destroy(mech, "oom", force=True)
