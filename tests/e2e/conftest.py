"""End-to-end fixtures: real podman and containerd driving sandbox-shim, set up in temp dirs.

The clients are installed by ``scripts/install-orchestrators`` (apt); a test is skipped only when that
fails, with apt's error as the reason.  Nothing of the host's own podman/containerd configuration is
read or changed: each client gets its own config, storage, state and socket under a temp dir.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SHIM = str(REPO / ".venv" / "bin" / "sandbox-shim")
SHIM_ROOT = "/run/sandbox-shim"  # where podman's calls keep state (it passes no --root)


@pytest.fixture(scope="session")
def orchestrators() -> None:
    """Install podman/conmon/containerd if missing; skip with apt's error if that is impossible."""
    if not os.path.exists(SHIM):
        pytest.skip(f"{SHIM} missing: run scripts/install-deps first")
    r = subprocess.run(
        [str(REPO / "scripts" / "install-orchestrators")], capture_output=True, text=True, timeout=900
    )
    if r.returncode != 0:
        pytest.skip(f"cannot install podman/containerd: {r.stderr.strip()[-500:]}")


@pytest.fixture(scope="session")
def image_tar(rootfs_template: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The busybox rootfs as a plain tar (for ``podman import``)."""
    out = tmp_path_factory.mktemp("image") / "busybox-rootfs.tar"
    with tarfile.open(out, "w") as tf:
        tf.add(rootfs_template, arcname=".")
    return out


def _blob(layout: Path, data: bytes) -> dict:
    digest = hashlib.sha256(data).hexdigest()
    (layout / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
    (layout / "blobs" / "sha256" / digest).write_bytes(data)
    return {"digest": f"sha256:{digest}", "size": len(data)}


@pytest.fixture(scope="session")
def oci_archive(image_tar: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The same rootfs as an OCI image layout archive (image-spec image-layout.md) for ``ctr import``."""
    name = "localhost/sandbox-shim-e2e:latest"
    return build_oci_archive(image_tar, name, ["sh"], tmp_path_factory.mktemp("oci")), name


def build_oci_archive(image_tar: Path, name: str, cmd: list[str], where: Path) -> Path:
    """An OCI image layout archive named ``name`` with ``image_tar`` as its one layer and ``cmd`` as
    its config's Cmd, written under ``where``; returns the archive's path."""
    layout = where / "layout"
    layout.mkdir(parents=True)
    layer = image_tar.read_bytes()
    lay = {"mediaType": "application/vnd.oci.image.layer.v1.tar", **_blob(layout, layer)}
    cfg = {
        "architecture": "amd64" if os.uname().machine == "x86_64" else "arm64",
        "os": "linux",
        "config": {"Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"], "Cmd": cmd},
        "rootfs": {"type": "layers", "diff_ids": [lay["digest"]]},
    }
    conf = {
        "mediaType": "application/vnd.oci.image.config.v1+json",
        **_blob(layout, json.dumps(cfg).encode()),
    }
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": conf,
        "layers": [lay],
    }
    man = {
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        **_blob(layout, json.dumps(manifest).encode()),
        "annotations": {"io.containerd.image.name": name, "org.opencontainers.image.ref.name": "latest"},
        "platform": {"architecture": cfg["architecture"], "os": "linux"},
    }
    (layout / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [man]}))
    (layout / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))
    out = layout.parent / "image-oci.tar"
    with tarfile.open(out, "w") as tf:
        for p in sorted(layout.rglob("*")):
            tf.add(p, arcname=str(p.relative_to(layout)), recursive=False)
    return out


def leftovers(container_id: str, cgroup_globs: list[str], pids: tuple[int, ...] = ()) -> list[str]:
    """What sandbox-shim left for ``container_id``: state dirs, cgroups, mounts naming it, and which of
    ``pids`` (the sandbox's monitor and processes, noted while it ran) still exist."""
    out: list[str] = []
    for d in (f"{SHIM_ROOT}/{container_id}", f"{SHIM_ROOT}/.cgroups/{container_id}"):
        if os.path.exists(d):
            out.append(f"state: {d}")
    for g in cgroup_globs:
        out += [f"cgroup: {d}" for d in glob.glob(g)]
    with open("/proc/self/mountinfo") as fh:
        out += [f"mount: {line.split()[4]}" for line in fh if container_id in line]
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                state = fh.read().rsplit(") ", 1)[1].split()[0]
        except OSError:
            continue
        out.append(f"process {pid} ({'zombie' if state == 'Z' else 'alive'})")
    return out
