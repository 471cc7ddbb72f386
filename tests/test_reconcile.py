"""list_running / reconcile: what is observed survives the loss of the state store."""

from __future__ import annotations

import shutil
from pathlib import Path

from conftest import cgroup_dirs, run_shim
from sandbox_shim import api
from sandbox_shim.reconcile import observe
from sandbox_shim.state import proc_start_time


def test_reconcile_after_state_loss(make_bundle, state_root: Path) -> None:
    b = make_bundle(args=["sleep", "1000"])
    assert run_shim(state_root, "create", "--bundle", str(b), "keep").returncode == 0
    assert run_shim(state_root, "start", "keep").returncode == 0
    assert run_shim(state_root, "create", "--bundle", str(b), "lost").returncode == 0
    assert run_shim(state_root, "start", "lost").returncode == 0
    mech = api.default_mechanism(str(state_root))
    before = {s.id: s for s in observe(mech)}
    assert before["lost"].source == "state" and before["lost"].status == "running"
    shutil.rmtree(state_root / "lost")  # the host loses its records
    assert api.StateStore(str(state_root)).ids() == ["keep"]  # the store alone no longer knows it
    after = {s.id: s for s in observe(mech)}
    assert set(after) == {"keep", "lost"}
    lost = after["lost"]
    assert lost.source == "observed" and lost.status == "running" and lost.pids
    assert all(proc_start_time(p) is not None for p in lost.pids)
    assert run_shim(state_root, "delete", "--force", "lost").returncode == 0
    assert cgroup_dirs("lost") == []
    assert "lost" not in {s.id for s in observe(mech)}
