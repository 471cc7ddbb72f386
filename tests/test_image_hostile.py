"""Hostile images: every entry stays inside rootfs/, digests and sizes are checked, bombs are refused.

Each breach test first shows the same layer shape applied where it is allowed (the control), then the
attack, and checks the host path the attack aimed at.  The images are written here (image_builder).
"""

from __future__ import annotations

import gzip
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from image_builder import entry, image_config, manifest_of, sha, tar_bytes, write_layout
from sandbox_shim.image import ImageInvalid, Limits, Options, create_bundle
from sandbox_shim.image.layer import Applier
from sandbox_shim.image.rootdir import RootDir, have_openat2

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="ownership and setuid need root")


def build(tmp_path: Path, layers: list[bytes], name: str = "img", **kw: object) -> str:
    return "oci:" + str(write_layout(tmp_path / "images" / name, layers, **kw))  # type: ignore[arg-type]


def make(tmp_path: Path, ref: str, bundle: str = "b", **opts: object) -> Path:
    out = tmp_path / bundle
    # each bundle its own state root: a cached snapshot (same diff-ids) would skip reading the layers
    create_bundle(ref, str(out), str(tmp_path / f"state-{bundle}"), Options(args="/bin/sh", **opts))  # type: ignore[arg-type]
    return out / "rootfs"


@pytest.fixture
def host_dir(tmp_path: Path) -> Path:
    """A host directory outside every rootfs, with a file the attacks aim at."""
    d = tmp_path / "host"
    d.mkdir()
    (d / "victim").write_text("host data\n")
    return d


def test_dotdot_entry_refused_and_nothing_left(tmp_path: Path, host_dir: Path) -> None:
    ok = make(tmp_path, build(tmp_path, [tar_bytes([entry("a/b/c", data=b"x")])], "ctl"), "ctl")
    assert (ok / "a/b/c").read_bytes() == b"x"  # control
    escape = "../" * 12 + str(host_dir / "pwned").lstrip("/")
    with pytest.raises(ImageInvalid, match=r"'\.\.' component"):
        make(tmp_path, build(tmp_path, [tar_bytes([entry(escape, data=b"x")])]))
    assert not (host_dir / "pwned").exists()
    assert not (tmp_path / "b").exists()


def test_absolute_names_land_inside(tmp_path: Path, host_dir: Path) -> None:
    target = str(host_dir / "planted")
    rootfs = make(tmp_path, build(tmp_path, [tar_bytes([entry(target, data=b"in root\n")])]))
    assert (rootfs / target.lstrip("/")).read_text() == "in root\n"  # control: the entry was written
    assert not os.path.lexists(target)


@pytest.mark.parametrize("link", ["ABS", "../../../../../../../../ABS"])
def test_symlink_from_earlier_layer_is_resolved_in_root(tmp_path: Path, host_dir: Path, link: str) -> None:
    link = link.replace("ABS", str(host_dir).lstrip("/")) if link.startswith("..") else str(host_dir)
    lower = tar_bytes([entry("escape", "symlink", link=link)])
    upper = tar_bytes([entry("escape/pwned", data=b"x"), entry("escape/victim", data=b"overwritten")])
    rootfs = make(tmp_path, build(tmp_path, [lower, upper]))
    inside = rootfs / str(host_dir).lstrip("/")
    assert (inside / "pwned").read_bytes() == b"x"  # control: written, inside the rootfs
    assert not (host_dir / "pwned").exists()
    assert (host_dir / "victim").read_text() == "host data\n"


def test_symlink_in_same_layer_then_entry(tmp_path: Path, host_dir: Path) -> None:
    layer = tar_bytes([entry("d", "symlink", link=str(host_dir)), entry("d/pwned", data=b"x")])
    rootfs = make(tmp_path, build(tmp_path, [layer]))
    assert (rootfs / str(host_dir).lstrip("/") / "pwned").exists()
    assert not (host_dir / "pwned").exists()


def test_file_over_planted_symlink_replaces_the_link(tmp_path: Path, host_dir: Path) -> None:
    lower = tar_bytes([entry("f", "symlink", link=str(host_dir / "victim"))])
    upper = tar_bytes([entry("f", data=b"image data")])
    rootfs = make(tmp_path, build(tmp_path, [lower, upper]))
    assert (rootfs / "f").read_bytes() == b"image data" and not (rootfs / "f").is_symlink()
    assert (host_dir / "victim").read_text() == "host data\n"


def test_hardlink_to_host_file_refused(tmp_path: Path, host_dir: Path) -> None:
    victim = host_dir / "victim"
    ok = make(
        tmp_path,
        build(
            tmp_path, [tar_bytes([entry("etc/x", data=b"1"), entry("y", "hardlink", link="etc/x")])], "ctl"
        ),
        "ctl",
    )
    assert os.stat(ok / "y").st_ino == os.stat(ok / "etc/x").st_ino  # control: links inside work
    for layers in (
        [tar_bytes([entry("hl", "hardlink", link=str(victim))])],
        [
            tar_bytes([entry("s", "symlink", link=str(host_dir))]),
            tar_bytes([entry("hl", "hardlink", link="s/victim")]),
        ],
    ):
        with pytest.raises(ImageInvalid, match="hard link target"):
            make(tmp_path, build(tmp_path, layers, "bad"), "bad")
        assert os.stat(victim).st_nlink == 1
        assert not (tmp_path / "bad").exists()
        import shutil

        shutil.rmtree(tmp_path / "bad", ignore_errors=True)


def test_whiteouts_through_planted_symlink_stay_inside(tmp_path: Path, host_dir: Path) -> None:
    lower = tar_bytes([entry("d", "symlink", link=str(host_dir)), entry("keep/x", data=b"1")])
    upper = tar_bytes([entry("d/.wh.victim"), entry("d/.wh..wh..opq"), entry("keep/.wh.x")])
    rootfs = make(tmp_path, build(tmp_path, [lower, upper]))
    assert not (rootfs / "keep" / "x").exists()  # control: a whiteout inside works
    assert (host_dir / "victim").read_text() == "host data\n"


def test_devices_and_fifos_skipped(tmp_path: Path) -> None:
    ti, _ = entry("dev/evil", "chr")
    ti.devmajor, ti.devminor = 1, 3
    layer = tar_bytes([(ti, None), entry("p", "fifo"), entry("ok", data=b"1")])
    out = tmp_path / "b"
    res = create_bundle(build(tmp_path, [layer]), str(out), str(tmp_path / "state"), Options(args="/x"))
    assert (out / "rootfs" / "ok").exists()
    assert not os.path.lexists(out / "rootfs" / "dev" / "evil") and not os.path.lexists(out / "rootfs" / "p")
    assert any("device node/FIFO" in w for w in res.warnings)


@ROOT_ONLY
def test_setuid_dropped_unless_kept(tmp_path: Path) -> None:
    layer = tar_bytes(
        [
            entry("su", data=b"#!", mode=0o4755),
            entry("sg", data=b"#!", mode=0o2755),
            entry("sgdir", "dir", mode=0o2777),
            entry("sudir", "dir", mode=0o4755),
            entry("tmp", "dir", mode=0o1777),
            entry("sgsticky", "dir", mode=0o3777),
        ]
    )
    ref = build(tmp_path, [layer])
    out = tmp_path / "b"
    res = create_bundle(ref, str(out), str(tmp_path / "state-b"), Options(args="/bin/sh"))
    rootfs = out / "rootfs"
    want = {"su": 0o755, "sg": 0o755, "sgdir": 0o777, "sudir": 0o755, "tmp": 0o1777, "sgsticky": 0o1777}
    assert {n: stat.S_IMODE(os.stat(rootfs / n).st_mode) for n in want} == want  # sticky bit kept
    assert any("setuid/setgid bit of 5 entries" in w for w in res.warnings), res.warnings
    kept = make(tmp_path, ref, "kept", keep_setuid=True)
    # control: the bits were in the image and are applied when asked for
    assert stat.S_IMODE(os.stat(kept / "su").st_mode) == 0o4755
    assert stat.S_IMODE(os.stat(kept / "sgdir").st_mode) == 0o2777


def _tamper(layout: Path, which: str) -> None:
    manifest, mpath = manifest_of(layout)
    if which == "layer":
        p = layout / "blobs" / "sha256" / manifest["layers"][0]["digest"][7:]
        data = bytearray(p.read_bytes())
        data[-1] ^= 1
        p.write_bytes(bytes(data))
    elif which == "size":
        manifest["layers"][0]["size"] -= 1
        _rewrite_manifest(layout, manifest)
    elif which == "config":
        p = layout / "blobs" / "sha256" / manifest["config"]["digest"][7:]
        p.write_bytes(p.read_bytes().replace(b'"os"', b'"os" '))
    elif which == "manifest":
        mpath.write_bytes(mpath.read_bytes() + b" ")


def _rewrite_manifest(layout: Path, manifest: dict) -> None:
    data = json.dumps(manifest).encode()
    (layout / "blobs" / "sha256" / sha(data)[7:]).write_bytes(data)
    idx = json.loads((layout / "index.json").read_text())
    idx["manifests"][0].update(digest=sha(data), size=len(data))
    (layout / "index.json").write_text(json.dumps(idx))


@pytest.mark.parametrize("which", ["layer", "size", "config", "manifest"])
def test_digest_and_size_verified(tmp_path: Path, which: str) -> None:
    layers = [tar_bytes([entry("f", data=b"content" * 100)])]
    make(tmp_path, build(tmp_path, layers, "ctl"), "ctl")  # control: the untouched image works
    layout = write_layout(tmp_path / "img", layers)
    _tamper(layout, which)
    with pytest.raises(ImageInvalid, match="digest mismatch|size|bytes, descriptor"):
        make(tmp_path, f"oci:{layout}")
    assert not (tmp_path / "b").exists()


def test_diff_id_verified(tmp_path: Path) -> None:
    good = tar_bytes([entry("f", data=b"a")])
    other = tar_bytes([entry("f", data=b"b")])
    ref = build(tmp_path, [good], config=image_config([other], Cmd=["/x"]))
    with pytest.raises(ImageInvalid, match="diff_id"):
        make(tmp_path, ref)


def test_gzip_bomb_refused(tmp_path: Path) -> None:
    big = tar_bytes([entry("zeros", data=bytes(96 << 20))])
    bomb = gzip.compress(big, compresslevel=9, mtime=0)
    assert len(bomb) < len(big) // 500
    ref = build(tmp_path, [big], compressed=[bomb])
    make(tmp_path, ref, "ctl")  # control: within the default limits it unpacks
    with pytest.raises(ImageInvalid, match="decompression bomb"):
        make(tmp_path, ref, "layer", limits=Limits(layer_bytes=32 << 20))
    half = tar_bytes([entry("z", data=bytes(20 << 20))])
    with pytest.raises(ImageInvalid, match="in total"):
        make(tmp_path, build(tmp_path, [half, half], "two"), "two", limits=Limits(image_bytes=30 << 20))
    assert not (tmp_path / "layer").exists() and not (tmp_path / "two").exists()
    assert os.listdir(tmp_path / "state-layer" / ".images" / "tmp") == []  # no half-built snapshot kept


def test_huge_pax_header_refused(tmp_path: Path) -> None:
    ti, data = entry("f", data=b"x")
    ti.pax_headers = {"comment": "A" * (2 << 20)}
    with pytest.raises(ImageInvalid, match="extension header"):
        make(tmp_path, build(tmp_path, [tar_bytes([(ti, data)])]))


def test_unknown_media_type_refused(tmp_path: Path) -> None:
    layout = write_layout(tmp_path / "img", [tar_bytes([entry("f")])])
    manifest, _ = manifest_of(layout)
    manifest["layers"][0]["mediaType"] = "application/vnd.example.squashfs"
    _rewrite_manifest(layout, manifest)
    with pytest.raises(ImageInvalid, match="not a layer type"):
        make(tmp_path, f"oci:{layout}")


def test_zstd_layers(tmp_path: Path) -> None:
    pytest.importorskip("zstandard", reason="zstandard is not installed (pip install 'sandbox-shim[image]')")
    ref = build(tmp_path, [tar_bytes([entry("z", data=b"zstd!")])], compression="zstd")
    assert (make(tmp_path, ref) / "z").read_bytes() == b"zstd!"
    code = (
        "import sys; sys.modules['zstandard'] = None\n"  # the same image where the package is absent
        "from sandbox_shim.image import ImageInvalid, Options, create_bundle\n"
        f"try: create_bundle({ref!r}, {str(tmp_path / 'nz')!r}, {str(tmp_path / 's2')!r}, Options())\n"
        "except ImageInvalid as e: print(e.line())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "zstd-compressed, and the zstandard package is not installed" in out


@pytest.mark.skipif(not have_openat2(), reason="openat2(2) is unavailable: only the fallback walk runs")
def test_fallback_walk_refuses_symlinks(tmp_path: Path, host_dir: Path) -> None:
    rootfs = tmp_path / "r"
    rootfs.mkdir()
    (rootfs / "d").symlink_to(host_dir)
    (rootfs / "real").mkdir()
    root = RootDir(str(rootfs), in_root=False)
    try:
        Applier(root).apply(_stream(tar_bytes([entry("real/ok", data=b"1")])), "t")
        assert (rootfs / "real" / "ok").exists()  # control: a plain path works without openat2
        with pytest.raises(ImageInvalid, match="goes through the symlink"):
            Applier(root).apply(_stream(tar_bytes([entry("d/pwned", data=b"1")])), "t")
    finally:
        root.close()
    assert not (host_dir / "pwned").exists()


def _stream(data: bytes):  # type: ignore[no-untyped-def]
    import io

    return io.BytesIO(data)


def test_sparse_members_and_entry_flood_refused(tmp_path: Path) -> None:
    sparse_map = b"1\n0\n1\n".ljust(512, b"\0")  # GNU sparse 1.0: one 1-byte region, then a 1 TiB hole
    ti, data = entry("sparse", data=sparse_map + b"x")
    ti.pax_headers = {
        "GNU.sparse.major": "1",
        "GNU.sparse.minor": "0",
        "GNU.sparse.name": "sparse",
        "GNU.sparse.realsize": str(1 << 40),
    }
    with pytest.raises(ImageInvalid, match="sparse files are not supported"):
        make(tmp_path, build(tmp_path, [tar_bytes([(ti, data)])]))
    rootfs = tmp_path / "r"
    rootfs.mkdir()
    root = RootDir(str(rootfs))
    try:
        flood = tar_bytes([entry(f"f{i}") for i in range(20)])
        Applier(root, max_entries=20).apply(_stream(flood), "t")  # control: at the limit
        with pytest.raises(ImageInvalid, match="more than 19 entries"):
            Applier(root, max_entries=19).apply(_stream(flood), "t")
    finally:
        root.close()


def test_failed_create_leaves_no_partial_bundle(tmp_path: Path) -> None:
    layers = [tar_bytes([entry("f", data=b"1")])]
    ref = build(tmp_path, layers, config=image_config(layers))  # no Entrypoint/Cmd: refused after unpack
    with pytest.raises(ImageInvalid, match="neither Entrypoint nor Cmd"):
        create_bundle(ref, str(tmp_path / "b"), str(tmp_path / "s"), Options())
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".b.")] == []
    assert not (tmp_path / "b").exists()


def test_deep_paths_refused(tmp_path: Path) -> None:
    ok = "/".join(["d"] * 200)
    assert (make(tmp_path, build(tmp_path, [tar_bytes([entry(ok, data=b"1")])], "ctl"), "ctl") / ok).exists()
    deep = "/".join(["d"] * 201)
    with pytest.raises(ImageInvalid, match="more than 200 path components"):
        make(tmp_path, build(tmp_path, [tar_bytes([entry(deep, data=b"1")])]))


def test_abandoned_builds_are_swept_live_ones_kept(tmp_path: Path) -> None:
    import fcntl

    from sandbox_shim.image.cache import Cache

    cache = Cache(str(tmp_path / "s"))
    stale = Path(cache.dir) / "tmp" / "stale"
    (stale / "rootfs").mkdir(parents=True)  # what a build killed with SIGKILL leaves
    live = Path(cache.building())  # held by this process
    other = os.open(live, os.O_RDONLY | os.O_DIRECTORY)
    with pytest.raises(BlockingIOError):  # control: the lock is really held
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.close(other)
    Cache(str(tmp_path / "s"))
    assert not stale.exists() and live.exists()
    cache.abandon(str(live))
    assert not live.exists()
