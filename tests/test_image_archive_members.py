"""Archive members used as blobs must be regular files inside the archive.

A tar member that is a symlink or hard link names a path, not content: tarfile would look the name up
among the archive's members (or, extracted, on the host).  Each attack archive is the control archive
with one member swapped for a link; the control shows the same archive is accepted with a regular member.
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest
from conftest import run_shim
from image_builder import (
    entry,
    image_config,
    tar_bytes,
    write_docker_archive,
    write_layout,
    write_oci_archive,
)


def _relink(src: Path, dst: Path, name_end: str, kind: bytes, target: str) -> None:
    """Copy the archive ``src`` to ``dst`` with the (one) member whose name ends in ``name_end`` replaced
    by a link of tar type ``kind`` to ``target``."""
    hit = 0
    with tarfile.open(src) as tin, tarfile.open(dst, "w") as tout:
        for m in tin.getmembers():
            if m.isreg() and m.name.endswith(name_end):
                link = tarfile.TarInfo(m.name)
                link.type, link.linkname = kind, target
                tout.addfile(link)
                hit += 1
            else:
                tout.addfile(m, tin.extractfile(m) if m.isreg() else None)
    assert hit == 1


@pytest.fixture
def host_file(tmp_path: Path) -> Path:
    p = tmp_path / "host-secret"
    p.write_bytes(tar_bytes([entry("stolen", data=b"host data\n")]))  # a valid layer, so content would pass
    return p


def _layer() -> bytes:
    return tar_bytes([entry("bin/sh", data=b"#!", mode=0o755), entry("etc/motd", data=b"image\n")])


@pytest.mark.parametrize("kind", [tarfile.SYMTYPE, tarfile.LNKTYPE], ids=["symlink", "hardlink"])
def test_docker_archive_layer_member_link_refused(
    tmp_path: Path, state_root: Path, host_file: Path, kind: bytes
) -> None:
    layer = _layer()
    good = write_docker_archive(tmp_path / "good.tar", [layer], image_config([layer], Cmd=["/bin/sh"]))
    r = run_shim(state_root, "bundle", "create", "--image", f"docker-archive:{good}", str(tmp_path / "ok"))
    assert r.returncode == 0, r.stderr  # control
    assert (tmp_path / "ok/rootfs/etc/motd").read_text() == "image\n"
    bad = tmp_path / "bad.tar"  # refused under a fresh state root: the control's cached layers are not read
    _relink(good, bad, "/layer.tar", kind, str(host_file))
    r = run_shim(
        tmp_path / "fresh", "bundle", "create", "--image", f"docker-archive:{bad}", str(tmp_path / "b")
    )
    assert r.returncode == 3, r.stderr
    assert r.stderr.count("\n") == 1 and "not a regular file" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("which", ["layer", "config", "manifest", "index.json"])
@pytest.mark.parametrize("kind", [tarfile.SYMTYPE, tarfile.LNKTYPE], ids=["symlink", "hardlink"])
def test_oci_archive_member_link_refused(
    tmp_path: Path, state_root: Path, host_file: Path, kind: bytes, which: str
) -> None:
    layer = _layer()
    layout = write_layout(tmp_path / "layout", [layer], image_config([layer], Cmd=["/bin/sh"]))
    good = write_oci_archive(tmp_path / "good.tar", layout)
    r = run_shim(state_root, "bundle", "create", "--image", f"oci-archive:{good}", str(tmp_path / "ok"))
    assert r.returncode == 0, r.stderr  # control
    assert (tmp_path / "ok/rootfs/etc/motd").read_text() == "image\n"
    index = json.loads((layout / "index.json").read_text())
    mdigest = index["manifests"][0]["digest"][7:]
    manifest = json.loads((layout / "blobs/sha256" / mdigest).read_bytes())
    name = {
        "layer": manifest["layers"][0]["digest"][7:],
        "config": manifest["config"]["digest"][7:],
        "manifest": mdigest,
        "index.json": "index.json",
    }[which]
    bad = tmp_path / "bad.tar"  # refused under a fresh state root: the control's cached layers are not read
    # a hard link may also name another member: point it at the host file's path either way
    _relink(good, bad, name, kind, str(host_file))
    r = run_shim(tmp_path / "fresh", "bundle", "create", "--image", f"oci-archive:{bad}", str(tmp_path / "b"))
    assert r.returncode == 3, r.stderr
    assert r.stderr.count("\n") == 1 and "not a regular file" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "b").exists()


def test_hard_link_to_another_member_refused(tmp_path: Path, state_root: Path) -> None:
    """Even a hard link to a member inside the archive is refused: blobs are regular members only."""
    layer = _layer()
    layout = write_layout(tmp_path / "layout", [layer], image_config([layer], Cmd=["/bin/sh"]))
    good = write_oci_archive(tmp_path / "good.tar", layout)
    bad = tmp_path / "bad.tar"
    with tarfile.open(good) as tin, tarfile.open(bad, "w") as tout:
        for m in tin.getmembers():
            if m.name.endswith("index.json"):
                data = tin.extractfile(m).read()  # type: ignore[union-attr]
                copy = tarfile.TarInfo("./index-copy.json")
                copy.size = len(data)
                tout.addfile(copy, io.BytesIO(data))
                m.type, m.linkname, m.size = tarfile.LNKTYPE, "./index-copy.json", 0
                tout.addfile(m)
            else:
                tout.addfile(m, tin.extractfile(m) if m.isreg() else None)
    r = run_shim(tmp_path / "fresh", "bundle", "create", "--image", f"oci-archive:{bad}", str(tmp_path / "b"))
    assert r.returncode == 3 and "not a regular file" in r.stderr, r.stderr
