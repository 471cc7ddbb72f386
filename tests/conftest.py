"""Shared fixtures: a busybox rootfs built once, bundles made from ``base_config()``, a private state root."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sandbox_shim.template import default_config

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"


def base_config(args: list[str] | None = None) -> dict[str, Any]:
    """The minimal valid tenant config the tests mutate (crun's habit)."""
    cfg = default_config()
    if args is not None:
        cfg["process"]["args"] = args
    return cfg


def windows_config(args: list[str] | None = None) -> dict[str, Any]:
    """A tenant config a Job Object can honour (``platforms/windows/plan.py``) that ``bundle.load``
    accepts on any OS: ``base_config`` without what Windows refuses (namespaces, rlimits, mounts,
    ``linux``, ``noNewPrivileges``, ``root.readonly``) and with ``sandbox-shim.network`` ``host``."""
    cfg = base_config(args)
    cfg["root"]["readonly"] = False  # a job cannot keep any file read-only
    for key in ("mounts", "linux", "hostname"):
        cfg.pop(key, None)
    for key in ("rlimits", "noNewPrivileges"):
        cfg["process"].pop(key, None)
    cfg["annotations"] = {"sandbox-shim.network": "host"}
    return cfg


@pytest.fixture(scope="session")
def rootfs_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A busybox rootfs filled by scripts/make-rootfs, built once per session."""
    if shutil.which("busybox") is None:
        pytest.skip("busybox is not installed (apt-get install busybox-static)")
    dest = tmp_path_factory.mktemp("rootfs-template") / "rootfs"
    subprocess.run([str(REPO / "scripts" / "make-rootfs"), str(dest)], check=True, capture_output=True)
    return dest


BundleFactory = Callable[..., Path]


@pytest.fixture
def make_bundle(tmp_path: Path, rootfs_template: Path) -> BundleFactory:
    """``make(config=None, name="b", args=None) -> bundle dir`` holding rootfs/, storage/, config.json."""

    def make(config: dict[str, Any] | None = None, name: str = "b", args: list[str] | None = None) -> Path:
        bundle = tmp_path / "bundles" / name
        bundle.mkdir(parents=True)
        shutil.copytree(rootfs_template, bundle / "rootfs", symlinks=True)
        (bundle / "storage").mkdir()
        cfg = config if config is not None else base_config(args)
        (bundle / "config.json").write_text(json.dumps(cfg, indent=2))
        return bundle

    return make


@pytest.fixture
def state_root(tmp_path: Path) -> Iterator[Path]:
    """A private --root for the test; anything left in it is force-deleted afterwards."""
    root = tmp_path / "state"
    root.mkdir()
    yield root
    if root.is_dir():
        for entry in root.iterdir():
            if entry.is_dir() and not entry.name.startswith("."):
                subprocess.run(shim_cmd(root, "delete", "--force", entry.name), capture_output=True)


def shim_cmd(root: Path, *args: str) -> list[str]:
    """argv for the CLI, run with this interpreter."""
    return [sys.executable, "-m", "sandbox_shim", "--root", str(root), *args]


def run_shim(root: Path, *args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    """Run the CLI; its stdout/stderr go to files, not pipes: a sandbox made by ``create`` inherits
    them and keeps them open, so reading a pipe to EOF would wait for the sandbox to end."""
    import tempfile

    kw.setdefault("timeout", 60)
    env = kw.pop("env", dict(os.environ))
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.run(shim_cmd(root, *args), env=env, stdout=out, stderr=err, **kw)
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(
            p.args, p.returncode, out.read().decode(errors="replace"), err.read().decode(errors="replace")
        )


@pytest.fixture(scope="session", autouse=True)
def subreaper() -> None:
    """Make the test process a child subreaper (prctl(2) PR_SET_CHILD_SUBREAPER), as conmon and
    containerd's shim are: the sandbox's monitor re-parents to us when ``create`` exits, so tests can
    waitpid() it and read the sandbox's exit status."""
    if not sys.platform.startswith("linux"):
        return  # prctl(2) is Linux's; the macOS and Windows runners run their own marked tests
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


def wait_pid(pid: int, timeout: float = 30.0) -> int:
    """Reap ``pid`` (a descendant re-parented to us) and return its shell-style exit status."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        try:
            got, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return -1  # already reaped: the library's destroy() reaps monitors that are its children
        if got == pid:
            code = os.waitstatus_to_exitcode(status)
            return 128 - code if code < 0 else code
        if time.monotonic() > deadline:
            raise TimeoutError(f"pid {pid} did not exit within {timeout} s")
        time.sleep(0.01)


def cgroup_dirs(sandbox_id: str) -> list[str]:
    """Every cgroup directory named after ``sandbox_id`` under our default parent, in any hierarchy."""
    import glob

    found = []
    for pattern in (
        "/sys/fs/cgroup/*/sandbox-shim/*/{}",
        "/sys/fs/cgroup/sandbox-shim/*/{}",
        "/sys/fs/cgroup/*/sandbox-shim/{}",
        "/sys/fs/cgroup/sandbox-shim/{}",
    ):
        found += glob.glob(pattern.format(glob.escape(sandbox_id)))
    return found
