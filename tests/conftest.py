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
    """Return ``make(config=None, name="b", args=None) -> bundle dir`` with rootfs/, storage/ and config.json."""

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
    """Run the CLI and capture its output as text."""
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    kw.setdefault("timeout", 60)
    return subprocess.run(shim_cmd(root, *args), env=kw.pop("env", dict(os.environ)), **kw)
