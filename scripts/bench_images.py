"""``scripts/bench images``: seconds and bytes of ``bundle create --image``, first bundle vs second.

The image is made here: a busybox layer (scripts/make-rootfs) plus a layer of ``--mib`` MiB of
incompressible data in 64 files, as an OCI layout with gzip layers.  Each round uses a fresh state root
(so the first bundle unpacks) on the same file system as the bundles; then a second bundle from the same
image (read-only rootfs) and a third with ``--writable-rootfs`` (reflink where
the file system has it, else a copy).  "new bytes" counts the blocks of the bundle's files whose inodes
are not the cache's (a reflinked file's shared extents are counted as new: st_blocks cannot tell).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from statistics import median

REPO = Path(__file__).resolve().parent.parent
SHIM = REPO / ".venv" / "bin" / "sandbox-shim"


def _blob(layout: Path, data: bytes, mt: str, **extra: object) -> dict[str, object]:
    h = hashlib.sha256(data).hexdigest()
    (layout / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
    (layout / "blobs" / "sha256" / h).write_bytes(data)
    return {"mediaType": mt, "digest": f"sha256:{h}", "size": len(data), **extra}


def make_image(work: Path, mib: int) -> Path:
    rootfs = work / "bb"
    subprocess.run([str(REPO / "scripts" / "make-rootfs"), str(rootfs)], check=True, capture_output=True)
    bb = io.BytesIO()
    with tarfile.open(fileobj=bb, mode="w") as tf:
        tf.add(rootfs, arcname=".")
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tf:
        for i in range(64):
            payload = os.urandom(mib * (1 << 20) // 64)
            ti = tarfile.TarInfo(f"data/f{i:02d}")
            ti.size = len(payload)
            tf.addfile(ti, io.BytesIO(payload))
    layers = [bb.getvalue(), data.getvalue()]
    layout = work / "image"
    layout.mkdir()
    (layout / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    descs = [
        _blob(layout, gzip.compress(raw, 1, mtime=0), "application/vnd.oci.image.layer.v1.tar+gzip")
        for raw in layers
    ]
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine)
    diff_ids = ["sha256:" + hashlib.sha256(x).hexdigest() for x in layers]
    cfg = {
        "architecture": arch,
        "os": "linux",
        "config": {"Cmd": ["/bin/true"]},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    }
    c = _blob(layout, json.dumps(cfg).encode(), "application/vnd.oci.image.config.v1+json")
    mt = "application/vnd.oci.image.manifest.v1+json"
    manifest = {"schemaVersion": 2, "mediaType": mt, "config": c, "layers": descs}
    m = _blob(layout, json.dumps(manifest).encode(), mt)
    (layout / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [m]}))
    return layout


def new_bytes(bundle: Path, cache: Path) -> int:
    shared = {(st.st_dev, st.st_ino) for p in cache.rglob("*") if (st := p.lstat()) and p.is_file()}
    total = 0
    for p in (bundle / "rootfs").rglob("*"):
        st = p.lstat()
        if not p.is_symlink() and p.is_file() and (st.st_dev, st.st_ino) not in shared:
            total += st.st_blocks * 512
    return total


def create(root: Path, layout: Path, out: Path, *extra: str) -> float:
    """Seconds inside the command (its own report; the interpreter's start-up is left out)."""
    r = subprocess.run(
        [
            str(SHIM),
            "--root",
            str(root),
            "bundle",
            "create",
            "-q",
            *extra,
            "--image",
            f"oci:{layout}",
            str(out),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return float(r.stdout.rsplit("; ", 1)[1].rstrip(")\n").rstrip("s"))


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="scripts/bench images", description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--mib", type=int, default=64, help="MiB of data in the image's second layer")
    ap.add_argument("--json", default="bench-images.json")
    a = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="sandbox-shim-bench-images-"))
    try:
        layout = make_image(work, a.mib)
        rows: dict[str, list[tuple[float, int]]] = {
            "first": [],
            "second (read-only)": [],
            "second (writable)": [],
        }
        for r in range(a.rounds):
            root = work / f"root{r}"
            b1, b2, b3 = (work / f"b{r}-{i}" for i in (1, 2, 3))
            t1 = create(root, layout, b1)
            cache = root / ".images" / "snapshots"
            rows["first"].append(
                (
                    t1,
                    new_bytes(b1, cache)
                    + sum(
                        p.lstat().st_blocks * 512
                        for p in cache.rglob("*")
                        if p.is_file() and not p.is_symlink()
                    ),
                )
            )
            rows["second (read-only)"].append((create(root, layout, b2), new_bytes(b2, cache)))
            t3 = create(root, layout, b3, "--writable-rootfs")
            rows["second (writable)"].append((t3, new_bytes(b3, cache)))
            for d in (b1, b2, b3, root):
                shutil.rmtree(d)
        res = {
            k: {"seconds": median(x[0] for x in v), "new_bytes": int(median(x[1] for x in v))}
            for k, v in rows.items()
        }
        print(f"bundle create --image, {a.mib} MiB data layer + busybox, median of {a.rounds}:")
        print(f"  {'':22} {'seconds':>9} {'new MiB':>9}")
        for k, v in res.items():
            print(f"  {k:22} {v['seconds']:9.3f} {v['new_bytes'] / (1 << 20):9.1f}")
        first = res["first"]["seconds"]
        print(f"  second/first (read-only): {res['second (read-only)']['seconds'] / first:.2f}x time")
        Path(a.json).write_text(json.dumps(res, indent=1) + "\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
