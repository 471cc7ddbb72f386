"""The state store touches only what it made: a foreign directory under --root is never deleted,
a relative --root cannot climb out, long ids fail cleanly, a corrupt state file can be removed."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from conftest import base_config, cgroup_dirs, run_shim
from sandbox_shim.state import StateStore


def test_foreign_directory_under_root_is_not_a_sandbox(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "important").mkdir(parents=True)
    (root / "important" / "data.txt").write_text("precious")
    for args in (("delete", "important"), ("delete", "--force", "important"), ("state", "important")):
        run_shim(root, *args)
        assert (root / "important" / "data.txt").read_text() == "precious", args
    assert run_shim(root, "delete", "important").returncode == 6
    assert json.loads(run_shim(root, "list", "--format", "json").stdout) == []


def test_relative_root_cannot_leave_the_default_root(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    (victim / "important").mkdir(parents=True)
    rel = os.path.relpath(victim, "/run/sandbox-shim")
    assert rel.startswith("..")
    r = run_shim(Path(rel), "delete", "--force", "important")  # conftest passes --root as given
    assert r.returncode == 2 and "leaves /run/sandbox-shim" in r.stderr
    assert (victim / "important").is_dir()


def test_long_id_is_a_usage_error(make_bundle, state_root: Path) -> None:
    b = make_bundle()
    ok = "a" * 200
    assert run_shim(state_root, "create", "--bundle", str(b), ok).returncode == 0
    assert run_shim(state_root, "delete", "--force", ok).returncode == 0
    r = run_shim(state_root, "create", "--bundle", str(b), "a" * 201)
    assert r.returncode == 2 and "Traceback" not in r.stderr and "1 to 200" in r.stderr


def test_corrupt_state_file_is_reported_and_removed_by_force(make_bundle, state_root: Path) -> None:
    b = make_bundle(args=["sleep", "100"])
    assert run_shim(state_root, "create", "--bundle", str(b), "bad").returncode == 0
    (state_root / "bad" / "state.json").write_text("{not json")
    r = run_shim(state_root, "state", "bad")
    assert r.returncode == 6 and "unreadable state file" in r.stderr and "--force" in r.stderr
    assert run_shim(state_root, "delete", "--force", "bad").returncode == 0
    assert not (state_root / "bad").exists() and cgroup_dirs("bad") == []
    assert run_shim(state_root, "create", "--bundle", str(b), "bad").returncode == 0


def test_bind_source_through_a_link_planted_in_storage_is_refused(
    make_bundle, state_root: Path, tmp_path: Path
) -> None:
    secret = tmp_path / "hostonly"
    secret.mkdir()
    (secret / "s.txt").write_text("HOST-SECRET")
    cfg = base_config(["sh", "-c", "cat /data/* 2>&1; true"])
    cfg["mounts"].append(
        {"destination": "/data", "type": "bind", "source": "storage/data", "options": ["rbind", "ro"]}
    )
    b = make_bundle(cfg)
    (b / "storage" / "data").mkdir()
    (b / "storage" / "data" / "f.txt").write_text("TENANT-DATA")
    r = run_shim(state_root, "run", "--bundle", str(b), "ctl")  # control: a real directory is bound
    assert r.returncode == 0 and "TENANT-DATA" in r.stdout
    shutil.rmtree(b / "storage" / "data")
    os.symlink(str(secret), b / "storage" / "data")  # what a tenant can plant in its own storage
    r = run_shim(state_root, "run", "--bundle", str(b), "brk")
    assert r.returncode == 3 and "/mounts/4/source" in r.stderr and "symlink" in r.stderr
    assert "HOST-SECRET" not in r.stdout + r.stderr
    assert not (state_root / "brk").exists()


def test_a_sandbox_whose_state_and_cgroup_record_are_lost_is_listed_and_removed(
    make_bundle, state_root: Path, tmp_path: Path
) -> None:
    import uuid

    sid = "lost-" + uuid.uuid4().hex[:8]
    other_root = tmp_path / "other"
    other_root.mkdir()
    b = make_bundle(base_config(["sleep", "600"]))
    assert run_shim(state_root, "run", "--detach", "--bundle", str(b), sid).returncode == 0
    assert run_shim(other_root, "run", "--detach", "--bundle", str(b), sid).returncode == 0  # another root's
    try:
        pid = json.loads(run_shim(state_root, "state", sid).stdout)["pid"]
        from sandbox_shim import api

        mech = api.default_mechanism(str(state_root))
        assert [(s.id, s.source) for s in api.list_sandboxes(mech)] == [(sid, "state")]  # the control
        mine = [d for d in cgroup_dirs(sid) if os.path.isdir(d)]
        assert len(mine) >= 2  # both roots' cgroups exist
        away = tmp_path / "away"
        away.mkdir()
        shutil.move(str(state_root / sid), str(away / "state"))
        shutil.move(str(state_root / ".cgroups"), str(away / "cgroups"))
        listed = json.loads(run_shim(state_root, "list", "--format", "json").stdout)
        assert [(s["id"], s["status"]) for s in listed] == [(sid, "running")], listed
        seen = [(s.id, s.source, pid in s.pids) for s in api.list_sandboxes(mech)]
        assert seen == [(sid, "observed", True)]
        r = run_shim(state_root, "delete", "--force", sid)
        assert r.returncode == 0, r.stderr
        import time

        for _ in range(100):
            stat = Path(f"/proc/{pid}/stat")
            if not stat.exists() or stat.read_text().split(")")[-1].split()[0] == "Z":
                break
            time.sleep(0.05)
        else:
            raise AssertionError("the lost sandbox's process still runs")
        assert json.loads(run_shim(state_root, "list", "--format", "json").stdout) == []
        left = [d for d in cgroup_dirs(sid) if os.path.isdir(d)]
        assert left and len(left) < len(mine)  # only this root's went; the other root's sandbox is kept
        assert json.loads(run_shim(other_root, "state", sid).stdout)["status"] == "running"
    finally:
        run_shim(other_root, "delete", "--force", sid)
        run_shim(state_root, "delete", "--force", sid)


def test_cgroup_records_are_atomic_without_fsync_and_state_is_fsynced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``write_atomic`` fsyncs the file and its directory for the sandbox's state; the cgroup records
    (what does not outlive a crash of the host) are written the same atomic way without the two
    fsyncs (``durable=False``), and both leave the whole new text."""
    from sandbox_shim import durable

    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(durable.os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
    store = StateStore(str(tmp_path / "root"))
    os.makedirs(store.root)
    store.write_cgroup_index("a", {"dirs": ["/x"]})
    assert synced == [] and store.read_cgroup_index("a") == {"dirs": ["/x"]}
    durable.write_atomic(str(tmp_path / "root" / "f"), "new")
    assert len(synced) == 2 and (tmp_path / "root" / "f").read_text() == "new"  # the file, then the dir
    assert not [n for n in os.listdir(store.root) if ".tmp." in n]
