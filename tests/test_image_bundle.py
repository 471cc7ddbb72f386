"""``bundle create --image``: layers applied, config generated, bundles validated and run, cache shared."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from conftest import run_shim
from image_builder import (
    entry,
    image_config,
    tar_bytes,
    tar_dir,
    write_docker_archive,
    write_layout,
    write_oci_archive,
)
from sandbox_shim.image import ImageInvalid, Options, create_bundle


@pytest.fixture(scope="module")
def busybox_layer(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    import shutil
    import subprocess

    if shutil.which("busybox") is None:
        pytest.skip("busybox is not installed (apt-get install busybox-static)")
    dest = tmp_path_factory.mktemp("bb") / "rootfs"
    subprocess.run(
        [str(Path(__file__).parent.parent / "scripts" / "make-rootfs"), str(dest)],
        check=True,
        capture_output=True,
    )
    return tar_dir(dest)


def test_layers_whiteouts_links_modes_owners(tmp_path: Path) -> None:
    lower = tar_bytes(
        [
            entry("etc/gone", data=b"1"),
            entry("opq/lower", data=b"1"),
            entry("opq/sub/deep", data=b"1"),
            entry("keep", data=b"lower"),
            entry("dir", "dir", mode=0o750, uid=1234, gid=4321),
        ]
    )
    upper = tar_bytes(
        [
            entry("opq/upper", data=b"2"),
            entry("opq/.wh..wh..opq"),
            entry("etc/.wh.gone"),
            entry("bin/tool", data=b"#!/bin/sh\n", mode=0o711, uid=1000, gid=1001),
            entry("bin/alias", "hardlink", link="bin/tool"),
            entry("lnk", "symlink", link="/bin/tool"),
        ]
    )
    out = tmp_path / "b"
    create_bundle(
        f"oci:{write_layout(tmp_path / 'img', [lower, upper])}",
        str(out),
        str(tmp_path / "s"),
        Options(args="/bin/tool"),
    )
    r = out / "rootfs"
    assert not (r / "etc" / "gone").exists() and (r / "etc").is_dir()
    assert sorted(os.listdir(r / "opq")) == ["upper"]  # lower entries gone, this layer's kept
    assert (r / "keep").read_bytes() == b"lower"
    st = os.stat(r / "bin" / "tool")
    assert stat.S_IMODE(st.st_mode) == 0o711 and os.stat(r / "bin" / "alias").st_ino == st.st_ino
    assert os.readlink(r / "lnk") == "/bin/tool"
    assert stat.S_IMODE(os.stat(r / "dir").st_mode) == 0o750
    if os.geteuid() == 0:
        assert (st.st_uid, st.st_gid) == (1000, 1001)
        assert (os.stat(r / "dir").st_uid, os.stat(r / "dir").st_gid) == (1234, 4321)
    assert not any(n.startswith(".wh.") for _, ds, fs in os.walk(r) for n in ds + fs)


def _config(out: Path) -> dict:
    return json.loads((out / "config.json").read_text())


def test_config_from_image(tmp_path: Path) -> None:
    layer = tar_bytes(
        [
            entry("etc/passwd", data=b"root:x:0:0::/root:/bin/sh\napp:x:1001:1002::/home/app:/bin/sh\n"),
            entry("etc/group", data=b"root:x:0:\nstaff:x:50:\n"),
        ]
    )
    cfg = image_config(
        [layer],
        Entrypoint=["/bin/app"],
        Cmd=["--serve"],
        Env=["PATH=/opt/bin", "A=1", "API_TOKEN=hidden-value"],
        WorkingDir="/srv",
        User="app:staff",
        ExposedPorts={"9000/udp": {}, "8080/tcp": {}, "443/tcp": {}},
        Labels={"org.example.team": "x", "sandbox-shim.network": "host", "run.oci.x": "1"},
        Volumes={"/data": {}},
    )
    out = tmp_path / "b"
    res = create_bundle(
        f"oci:{write_layout(tmp_path / 'img', [layer], cfg)}", str(out), str(tmp_path / "s"), Options()
    )
    c = _config(out)
    assert c["process"]["args"] == ["/bin/app", "--serve"]
    assert "PATH=/opt/bin" in c["process"]["env"] and "A=1" in c["process"]["env"]
    assert not any("TOKEN" in e for e in c["process"]["env"])
    assert c["process"]["cwd"] == "/srv" and c["process"]["user"] == {"uid": 1001, "gid": 50}
    assert c["annotations"] == {"org.example.team": "x", "sandbox-shim.port": "443"}
    assert c["root"] == {"path": "rootfs", "readonly": True}
    joined = "\n".join(res.warnings)
    assert "API_TOKEN dropped" in joined and "hidden-value" not in joined
    assert "sandbox-shim.network dropped" in joined and "run.oci.x dropped" in joined and "Volumes" in joined
    # overrides
    out2 = tmp_path / "b2"
    create_bundle(
        f"oci:{tmp_path / 'img'}",
        str(out2),
        str(tmp_path / "s"),
        Options(args="sh -c 'echo hi'", env=["A=2"], readonly=False, storage=str(tmp_path / "st")),
    )
    c2 = _config(out2)
    assert c2["process"]["args"] == ["sh", "-c", "echo hi"] and "A=2" in c2["process"]["env"]
    assert c2["root"]["readonly"] is False
    assert any(m["destination"] == "/storage" and m["source"] == str(tmp_path / "st") for m in c2["mounts"])
    with pytest.raises(ImageInvalid, match="--env SECRET_X"):
        create_bundle(
            f"oci:{tmp_path / 'img'}", str(tmp_path / "b3"), str(tmp_path / "s"), Options(env=["SECRET_X=1"])
        )
    assert not (tmp_path / "b3").exists()


def test_user_names_read_inside_the_rootfs(tmp_path: Path) -> None:
    """/etc/passwd as a symlink to the host's: resolved inside the rootfs, so host names are not found."""
    host = tmp_path / "hostpasswd"
    host.write_text("hostonly:x:4242:4242::/:/bin/sh\n")
    layer = tar_bytes([entry("etc/passwd", "symlink", link=str(host))])
    ref = f"oci:{write_layout(tmp_path / 'img', [layer], image_config([layer], Cmd=['/x'], User='hostonly'))}"
    with pytest.raises(ImageInvalid, match="not in the image's /etc/passwd"):
        create_bundle(ref, str(tmp_path / "b"), str(tmp_path / "s"), Options())
    ok = tar_bytes([entry("etc/passwd", data=b"hostonly:x:7:8::/:/bin/sh\n")])  # control
    ref = f"oci:{write_layout(tmp_path / 'ok', [ok], image_config([ok], Cmd=['/x'], User='hostonly'))}"
    create_bundle(ref, str(tmp_path / "b"), str(tmp_path / "s"), Options())
    assert _config(tmp_path / "b")["process"]["user"] == {"uid": 7, "gid": 8}


def test_no_command_refused(tmp_path: Path) -> None:
    layer = tar_bytes([entry("f")])
    ref = f"oci:{write_layout(tmp_path / 'img', [layer], image_config([layer]))}"
    with pytest.raises(ImageInvalid, match="neither Entrypoint nor Cmd"):
        create_bundle(ref, str(tmp_path / "b"), str(tmp_path / "s"), Options())


def _busybox_image(tmp_path: Path, layer: bytes) -> Path:
    extra = tar_bytes([entry("etc/motd", data=b"from the image\n")])
    cfg = image_config(
        [layer, extra],
        Cmd=["sh", "-c", "cat /etc/motd; echo cwd=$(pwd) v=$V"],
        Env=["V=image"],
        WorkingDir="/tmp",
    )
    return write_layout(tmp_path / "bb-img", [layer, extra], cfg)


def test_cli_create_validate_run_and_cache(tmp_path: Path, busybox_layer: bytes, state_root: Path) -> None:
    layout = _busybox_image(tmp_path, busybox_layer)
    b1, b2, b3 = tmp_path / "b1", tmp_path / "b2", tmp_path / "b3"
    r = run_shim(state_root, "bundle", "create", "--image", f"oci:{layout}:latest", str(b1))
    assert r.returncode == 0, r.stderr
    assert "layers unpacked" in r.stdout
    assert run_shim(state_root, "validate", "--bundle", str(b1)).returncode == 0
    r = run_shim(state_root, "run", "--bundle", str(b1), "img1")
    assert r.returncode == 0, r.stderr
    assert "from the image" in r.stdout and "cwd=/tmp v=image" in r.stdout
    r = run_shim(state_root, "bundle", "create", "--image", f"oci:{layout}", str(b2))
    assert r.returncode == 0 and "cached layers" in r.stdout, r.stdout + r.stderr
    assert "hardlink" not in r.stdout, r.stdout
    busybox = "rootfs/bin/busybox"
    # never the cache's inodes, even read-only: a config edited to root.readonly false must not reach them
    assert os.stat(b1 / busybox).st_ino != os.stat(b2 / busybox).st_ino
    r = run_shim(state_root, "bundle", "create", "--writable-rootfs", "--image", f"oci:{layout}", str(b3))
    assert r.returncode == 0, r.stderr
    assert os.stat(b3 / busybox).st_ino != os.stat(b1 / busybox).st_ino  # writable: a private copy
    (b3 / "rootfs/etc/motd").write_text("changed\n")
    assert (b1 / "rootfs/etc/motd").read_text() == "from the image\n"
    r = run_shim(state_root, "run", "--bundle", str(b3), "img3")
    assert r.returncode == 0 and "changed" in r.stdout, r.stderr


def test_cli_refusal_is_one_line_and_leaves_nothing(tmp_path: Path, state_root: Path) -> None:
    r = run_shim(
        state_root, "bundle", "create", "--image", "oci:" + str(tmp_path / "missing"), str(tmp_path / "b")
    )
    assert r.returncode == 3 and "Traceback" not in r.stderr
    assert r.stderr.count("\n") == 1 and "not a directory" in r.stderr
    assert not (tmp_path / "b").exists()
    r = run_shim(state_root, "bundle", "create", "--image", "docker://busybox", str(tmp_path / "b"))
    assert r.returncode == 3 and "unknown transport" in r.stderr


def test_archives(tmp_path: Path, busybox_layer: bytes, state_root: Path) -> None:
    layout = _busybox_image(tmp_path, busybox_layer)
    oci_tar = write_oci_archive(tmp_path / "img.tar", layout)
    layers = [busybox_layer, tar_bytes([entry("etc/motd", data=b"docker archive\n")])]
    cfg = image_config(layers, Cmd=["cat", "/etc/motd"])
    docker = write_docker_archive(tmp_path / "docker.tar", layers, cfg)
    for ref, want in (
        (f"oci-archive:{oci_tar}:latest", "from the image"),
        (f"docker-archive:{docker}", "docker archive"),
    ):
        out = tmp_path / ref.split(":")[0]
        r = run_shim(state_root, "bundle", "create", "--image", ref, str(out))
        assert r.returncode == 0, r.stderr
        r = run_shim(state_root, "run", "--bundle", str(out), "arch-" + ref.split(":")[0])
        assert r.returncode == 0 and want in r.stdout, r.stderr
    bad = write_docker_archive(tmp_path / "bad.tar", layers, image_config([layers[1], layers[0]], Cmd=["x"]))
    with pytest.raises(ImageInvalid, match="diff_id"):
        create_bundle(f"docker-archive:{bad}", str(tmp_path / "bad"), str(tmp_path / "s2"), Options())


def test_lifecycle_verbs_do_not_load_the_image_package(tmp_path: Path) -> None:
    import subprocess
    import sys

    def loaded(*args: str) -> str:
        r = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", "sandbox_shim", "--root", str(tmp_path / "s"), *args],
            capture_output=True,
            text=True,
        )
        return r.stderr

    made = loaded("bundle", "create", "--image", "oci:/nonexistent", str(tmp_path / "x"))
    assert "sandbox_shim.image" in made  # control: the probe sees the package when it is loaded
    for verb in (["state", "nope"], ["delete", "--force", "nope"], ["kill", "nope", "TERM"]):
        assert "sandbox_shim.image" not in loaded(*verb), verb


def test_image_on_a_cached_base_unpacks_only_its_own_layers(tmp_path: Path) -> None:
    base = [tar_bytes([entry("etc/base", data=b"base"), entry("etc/over", data=b"old")])]
    top = base + [tar_bytes([entry("etc/over", data=b"new"), entry("etc/.wh.base")])]
    state = str(tmp_path / "s")
    a = create_bundle(
        f"oci:{write_layout(tmp_path / 'a', base, image_config(base, Cmd=['/x']))}",
        str(tmp_path / "ba"),
        state,
        Options(),
    )
    assert a.reused_layers == 0 and not a.cached
    b = create_bundle(
        f"oci:{write_layout(tmp_path / 'b', top, image_config(top, Cmd=['/x']))}",
        str(tmp_path / "bb"),
        state,
        Options(),
    )
    assert b.reused_layers == 1 and not b.cached
    assert (tmp_path / "bb/rootfs/etc/over").read_bytes() == b"new"
    assert not (tmp_path / "bb/rootfs/etc/base").exists()
    # the base image's snapshot and bundle are untouched by the upper layer's changes
    assert (tmp_path / "ba/rootfs/etc/over").read_bytes() == b"old"
    assert (tmp_path / "ba/rootfs/etc/base").read_bytes() == b"base"
    again = create_bundle(f"oci:{tmp_path / 'a'}", str(tmp_path / "ba2"), state, Options())
    assert again.cached and (tmp_path / "ba2/rootfs/etc/over").read_bytes() == b"old"


def test_progress_on_large_layers(tmp_path: Path) -> None:
    big = tar_bytes([entry("data", data=os.urandom(17 << 20))])  # incompressible: > 16 MiB as stored
    small = tar_bytes([entry("f", data=b"1")])
    layers = [small, big]
    ref = f"oci:{write_layout(tmp_path / 'img', layers, image_config(layers, Cmd=['/x']))}"
    lines: list[str] = []
    create_bundle(ref, str(tmp_path / "b"), str(tmp_path / "s"), Options(), progress=lines.append)
    assert [ln for ln in lines if ln.startswith("layer 2/2") and "done, 17 MiB unpacked" in ln], lines
    assert not [ln for ln in lines if ln.startswith("layer 1/2")]  # small layers stay quiet


def test_a_host_refusal_is_a_documented_error_by_where_it_happened(tmp_path: Path, state_root: Path) -> None:
    """An ``OSError`` of ``create_bundle`` becomes the class of the place that refused (README "Exit
    statuses"): the layer cache under the state root is state (11), the bundle directory the
    caller's output (74); never a bare exit 1."""
    from sandbox_shim.errors import OutputUnwritable, StateUnwritable

    layer = tar_bytes([entry("f")])
    ref = f"oci:{write_layout(tmp_path / 'img', [layer], image_config([layer], Cmd=['true']))}"
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(StateUnwritable) as got:
        create_bundle(ref, str(tmp_path / "b1"), str(blocker / "state"), Options())
    assert got.value.exit_status == 11 and str(blocker) in got.value.line()
    with pytest.raises(OutputUnwritable) as out:
        create_bundle(ref, str(blocker / "bundle"), str(tmp_path / "s"), Options())
    assert out.value.exit_status == 74 and str(blocker) in out.value.line()
    r = run_shim(state_root, "bundle", "create", "--image", ref, str(blocker / "bundle"))
    assert r.returncode == 74 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
