"""The state store touches only what it made: a foreign directory under --root is never deleted,
a relative --root cannot climb out, long ids fail cleanly, a corrupt state file can be removed."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from conftest import base_config, cgroup_dirs, run_shim


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


def test_bind_source_through_a_link_planted_in_storage_is_refused(make_bundle, state_root: Path,
                                                                   tmp_path: Path) -> None:
    secret = tmp_path / "hostonly"
    secret.mkdir()
    (secret / "s.txt").write_text("HOST-SECRET")
    cfg = base_config(["sh", "-c", "cat /data/* 2>&1; true"])
    cfg["mounts"].append({"destination": "/data", "type": "bind", "source": "storage/data",
                          "options": ["rbind", "ro"]})
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
