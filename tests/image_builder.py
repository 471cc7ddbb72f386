"""Images written by the tests themselves: tar layers, OCI image layouts and docker-archives.

Nothing is downloaded; every byte is made here (image-spec image-layout.md, manifest.md, config.md).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import tarfile
from pathlib import Path
from typing import Any

ARCH = {"x86_64": "amd64", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine)


def entry(
    name: str,
    kind: str = "file",
    data: bytes = b"",
    mode: int | None = None,
    link: str = "",
    uid: int = 0,
    gid: int = 0,
) -> tuple[tarfile.TarInfo, bytes | None]:
    """One tar member: kind in file, dir, symlink, hardlink, chr, fifo."""
    ti = tarfile.TarInfo(name)
    ti.uid, ti.gid, ti.mtime = uid, gid, 1_700_000_000
    types = {
        "file": tarfile.REGTYPE,
        "dir": tarfile.DIRTYPE,
        "symlink": tarfile.SYMTYPE,
        "hardlink": tarfile.LNKTYPE,
        "chr": tarfile.CHRTYPE,
        "fifo": tarfile.FIFOTYPE,
    }
    ti.type = types[kind]
    ti.mode = mode if mode is not None else (0o755 if kind == "dir" else 0o644)
    ti.linkname = link
    if kind == "file":
        ti.size = len(data)
        return ti, data
    return ti, None


def tar_bytes(entries: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for ti, data in entries:
            tf.addfile(ti, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def tar_dir(path: Path) -> bytes:
    """A directory tree (e.g. a busybox rootfs) as an uncompressed layer."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        tf.add(path, arcname=".")
    return buf.getvalue()


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def blob(layout: Path, data: bytes, media_type: str, **extra: Any) -> dict[str, Any]:
    d = layout / "blobs" / "sha256"
    d.mkdir(parents=True, exist_ok=True)
    (d / sha(data)[7:]).write_bytes(data)
    return {"mediaType": media_type, "digest": sha(data), "size": len(data), **extra}


def image_config(layers: list[bytes], **cfg: Any) -> dict[str, Any]:
    return {
        "architecture": ARCH,
        "os": "linux",
        "config": cfg,
        "rootfs": {"type": "layers", "diff_ids": [sha(x) for x in layers]},
    }


def write_layout(
    layout: Path,
    layers: list[bytes],
    config: dict[str, Any] | None = None,
    compression: str = "gzip",
    tag: str | None = "latest",
    compressed: list[bytes] | None = None,
) -> Path:
    """An OCI image layout at ``layout``; ``config`` defaults to one whose diff_ids fit ``layers``.
    ``compressed`` gives the layer blobs as stored (else they are made with ``compression``)."""
    layout.mkdir(parents=True, exist_ok=True)
    (layout / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    config = config if config is not None else image_config(layers, Cmd=["/bin/sh"])
    base = "application/vnd.oci.image.layer.v1.tar"
    descs = []
    for i, raw in enumerate(layers):
        if compressed is not None:
            stored = compressed[i]
        elif compression == "gzip":
            stored = gzip.compress(raw, mtime=0)
        elif compression == "zstd":
            import zstandard

            stored = zstandard.ZstdCompressor().compress(raw)
        else:
            stored = raw
        mt = base + ({"gzip": "+gzip", "zstd": "+zstd"}.get(compression, ""))
        descs.append(blob(layout, stored, mt))
    cfg_desc = blob(layout, json.dumps(config).encode(), "application/vnd.oci.image.config.v1+json")
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": cfg_desc,
        "layers": descs,
    }
    ann = {"org.opencontainers.image.ref.name": tag} if tag else {}
    m_desc = blob(
        layout,
        json.dumps(manifest).encode(),
        "application/vnd.oci.image.manifest.v1+json",
        annotations=ann,
        platform={"os": "linux", "architecture": ARCH},
    )
    (layout / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [m_desc]}))
    return layout


def manifest_of(layout: Path) -> tuple[dict[str, Any], Path]:
    """The manifest (parsed) and the path of its blob."""
    idx = json.loads((layout / "index.json").read_text())
    p = layout / "blobs" / "sha256" / idx["manifests"][0]["digest"][7:]
    return json.loads(p.read_bytes()), p


def write_docker_archive(
    path: Path, layers: list[bytes], config: dict[str, Any] | None = None, tag: str = "localhost/test:latest"
) -> Path:
    """A docker-archive (``docker save`` format: manifest.json, <hex>.json config, <hex>/layer.tar)."""
    config = config if config is not None else image_config(layers, Cmd=["/bin/sh"])
    cfg = json.dumps(config).encode()
    members: list[tuple[str, bytes]] = [(f"{sha(cfg)[7:]}.json", cfg)]
    names = []
    for raw in layers:
        name = f"{sha(raw)[7:]}/layer.tar"
        members.append((name, raw))
        names.append(name)
    members.append(
        (
            "manifest.json",
            json.dumps([{"Config": members[0][0], "RepoTags": [tag], "Layers": names}]).encode(),
        )
    )
    with tarfile.open(path, "w") as tf:
        for name, data in members:
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
    return path


def write_oci_archive(path: Path, layout: Path) -> Path:
    with tarfile.open(path, "w") as tf:
        tf.add(layout, arcname=".")
    return path
