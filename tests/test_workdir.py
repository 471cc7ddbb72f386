"""``process.cwd``: made inside a config tmpfs; one bwrap could not enter is "could not run" at create.

bwrap enters ``--chdir`` after the start gate opens; before, a cwd below a config tmpfs gave
``create``/``start`` exit 0 and a program that never ran (the sandbox ended with bwrap's exit 1).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import base_config, run_shim
from sandbox_shim import api
from sandbox_shim.errors import CouldNotRun
from sandbox_shim.execution import run_bundle

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.geteuid() != 0, reason="needs Linux, root, bwrap and cgroups"
)


def cgroups_of(root: Path, sandbox_id: str) -> list[str]:
    """The cgroup directories of ``sandbox_id`` under state root ``root`` (any hierarchy), found by the
    root's tag, so another root's sandbox of the same id is never counted."""
    import glob
    import hashlib

    tag = hashlib.sha256(str(root).encode()).hexdigest()[:10]
    return glob.glob(f"/sys/fs/cgroup/*/sandbox-shim/{tag}/{glob.escape(sandbox_id)}") + glob.glob(
        f"/sys/fs/cgroup/sandbox-shim/{tag}/{glob.escape(sandbox_id)}"
    )


def _config(cwd: str, *tmpfs_options: str) -> dict[str, Any]:
    cfg = base_config(["sh", "-c", "pwd; echo made > here && cat here"])
    cfg["process"]["cwd"] = cwd
    cfg["mounts"].append(
        {"destination": "/work", "type": "tmpfs", "source": "tmpfs", "options": list(tmpfs_options)}
    )
    return cfg


def _nothing_left(root: Path, sid: str) -> None:
    assert not (root / sid).exists() and cgroups_of(root, sid) == []
    assert not [n for n in os.listdir(root) if n == sid or f"-{sid}." in n]


def test_cwd_below_a_config_tmpfs_is_made(make_bundle: Any, state_root: Path) -> None:
    r = run_shim(state_root, "run", "--bundle", str(make_bundle(_config("/work"))), "root")
    assert r.returncode == 0 and r.stdout == "/work\nmade\n", r.stderr  # control: the tmpfs's root
    b = make_bundle(_config("/work/a/b"), name="deep")
    r = run_shim(state_root, "run", "--bundle", str(b), "deep")
    assert r.returncode == 0 and r.stdout == "/work/a/b\nmade\n", r.stderr
    assert not (b / "rootfs" / "work" / "a").exists()  # made in the tmpfs, not in the image
    # the lifecycle verbs: the program runs to exit 0 (it used to end in bwrap's exit 1)
    assert run_shim(state_root, "create", "--bundle", str(b), "oci").returncode == 0
    assert run_shim(state_root, "start", "oci").returncode == 0
    for _ in range(200):
        state = json.loads(run_shim(state_root, "state", "oci").stdout)
        if state["status"] == "stopped":
            break
    assert state["status"] == "stopped" and state.get("exitStatus") == 0, state


def test_cwd_below_a_read_only_tmpfs_is_refused(make_bundle: Any, state_root: Path) -> None:
    b = make_bundle(_config("/work/sub", "ro"))
    r = run_shim(state_root, "validate", "--bundle", str(b))  # validate and create agree
    assert r.returncode == 3 and "/process/cwd" in r.stdout + r.stderr, r.stdout + r.stderr
    r = run_shim(state_root, "run", "--bundle", str(b), "ro")
    assert r.returncode == 3 and "/process/cwd" in r.stderr and "read-only tmpfs" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    _nothing_left(state_root, "ro")
    cfg = _config("/work", "ro")  # control: the root of a read-only tmpfs exists
    cfg["process"]["args"] = ["pwd"]
    r = run_shim(state_root, "run", "--bundle", str(make_bundle(cfg, name="rootok")), "rootok")
    assert r.returncode == 0 and r.stdout == "/work\n", r.stderr


def test_a_cwd_bwrap_cannot_enter_is_could_not_run_at_create(make_bundle: Any, state_root: Path) -> None:
    cfg = base_config(["pwd"])
    cfg["process"]["cwd"] = "/locked"
    b = make_bundle(cfg)
    locked = b / "rootfs" / "locked"
    locked.mkdir()
    os.chown(locked, 1234, 1234)
    locked.chmod(0o711)
    r = run_shim(state_root, "run", "--bundle", str(b), "ok")  # control: searchable by others, it runs
    assert r.returncode == 0 and r.stdout == "/locked\n", r.stderr
    locked.chmod(0o700)  # bwrap enters it with no capability that bypasses search permission
    for verb in ("create", "run"):
        r = run_shim(state_root, verb, "--bundle", str(b), "no")
        assert r.returncode == 126 and "working directory /locked" in r.stderr, (verb, r.stderr)
        assert "Permission denied" in r.stderr and len(r.stderr.strip().splitlines()) == 1
        _nothing_left(state_root, "no")
    mech = api.default_mechanism(str(state_root))
    with pytest.raises(CouldNotRun) as info:
        run_bundle(mech, "lib", b, timeout=30)
    assert info.value.reason == "exec_failed" and "/locked" in info.value.message
    _nothing_left(state_root, "lib")


@pytest.mark.parametrize("layout", ["/priv", "/priv2/inner"])
def test_a_cwd_the_process_user_cannot_search_is_could_not_run(
    make_bundle: Any, state_root: Path, layout: str
) -> None:
    """bwrap enters the cwd as root; the program's own lookups are searched as process.user (1000)."""
    cfg = base_config(["ls", "."])
    cfg["process"]["user"] = {"uid": 1000, "gid": 1000}
    cfg["process"]["cwd"] = layout
    b = make_bundle(cfg)
    parts = layout.strip("/").split("/")
    for i in range(len(parts)):
        d = b / "rootfs" / "/".join(parts[: i + 1])
        d.mkdir()
        os.chown(d, 0, 0)
        d.chmod(0o711 if i < len(parts) - 1 else 0o755)
    leaf = b / "rootfs" / layout.lstrip("/")
    r = run_shim(state_root, "run", "--bundle", str(b), "ok")  # the control: searchable, it runs
    assert r.returncode == 0, r.stderr
    leaf.chmod(0o700)
    r = run_shim(state_root, "run", "--bundle", str(b), "no")
    # (CAP_DAC_OVERRIDE / CAP_DAC_READ_SEARCH, which would bypass this, are refused without a user
    # namespace at validation; in one, bwrap's own entry decides: ``workdir.problem`` with ``userns``)
    assert r.returncode == 126 and f"working directory {layout}" in r.stderr, r.stderr
    assert "Permission denied" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    _nothing_left(state_root, "no")
    os.chown(leaf, 0, 1000)  # the group class: gid 1000 may search (and ls read) a 0750 directory
    leaf.chmod(0o750)
    assert run_shim(state_root, "run", "--bundle", str(b), "grp").returncode == 0
    cfg["process"]["user"] = {"uid": 1000, "gid": 2000}
    (b / "config.json").write_text(__import__("json").dumps(cfg))
    assert run_shim(state_root, "run", "--bundle", str(b), "nogrp").returncode == 126
