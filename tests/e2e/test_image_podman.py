"""Images made by podman itself (``podman import`` + ``podman save``) turned into bundles and run.

podman gets a private store (vfs, under a temp dir); nothing of the host's own store is read.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from conftest import run_shim

IMAGE = "localhost/sandbox-shim-image-e2e:latest"


@pytest.fixture(scope="module")
def store(orchestrators: None, image_tar: Path, tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    base = tmp_path_factory.mktemp("podman-image")
    opts = ["--root", f"{base}/root", "--runroot", f"{base}/run", "--storage-driver", "vfs"]
    r = subprocess.run(
        [
            "podman",
            *opts,
            "import",
            "--change",
            'CMD ["sh", "-c", "echo from-podman"]',
            "--change",
            "ENV GREETING=hello",
            str(image_tar),
            IMAGE,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    return opts


def _run(state: Path, ref: str, bundle: Path, name: str) -> str:
    r = run_shim(state, "bundle", "create", "--image", ref, str(bundle), timeout=300)
    assert r.returncode == 0, r.stderr
    r = run_shim(state, "run", "--bundle", str(bundle), name)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_containers_storage(store: list[str], tmp_path: Path, state_root: Path) -> None:
    spec = f"[vfs@{store[1]}+{store[3]}]"
    assert "from-podman" in _run(state_root, f"containers-storage:{spec}{IMAGE}", tmp_path / "b", "cs1")
    r = run_shim(
        state_root,
        "bundle",
        "create",
        "--image",
        f"containers-storage:{spec}localhost/absent",
        str(tmp_path / "absent"),
    )
    assert r.returncode == 3 and "podman image save failed" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("fmt", ["docker-archive", "oci-archive"])
def test_podman_save_archives(store: list[str], tmp_path: Path, state_root: Path, fmt: str) -> None:
    out = tmp_path / f"{fmt}.tar"
    r = subprocess.run(
        ["podman", *store, "save", "--format", fmt, "-o", str(out), IMAGE],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    got = _run(state_root, f"{fmt}:{out}", tmp_path / "b", f"save-{fmt}")
    assert "from-podman" in got
    assert "GREETING=hello" in (tmp_path / "b" / "config.json").read_text()
