"""Path safety: every path from config.json or the rootfs resolves INSIDE the sandbox, never on the host.

Unit tests drive ``sandbox_shim.paths`` directly.  The breach tests run real bwrap through the CLI
(``run``) and the library (``provision``/``start``/``destroy``): each runs a CONTROL first (the same
mount or probe where it is allowed must work and print its marker), then the breach — a symlink
planted in the rootfs or storage, a path through ``/proc/self`` or ``/dev/fd`` — which must land
inside the rootfs or be refused, and must leave the host tree byte-identical (hashed before/after).
bwrap resolves destinations while the host's root is reachable at ``/oldroot``, so links to
``/oldroot/...`` are the ones that reached the host before ``paths.View`` existed.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import base_config, cgroup_dirs
from sandbox_runs import RUNNERS, TAG, launch, needs_sandbox, probe, tree_hash
from sandbox_shim.paths import Layer, View, ensure_in_root, resolve_in_root


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A host directory a malicious config targets (stands for /etc), with content to compare."""
    v = tmp_path / "host-victim"
    (v / "sub").mkdir(parents=True)
    (v / "passwd").write_text("root:x:0:0::/root:/bin/sh\n")
    (v / "sub" / "file").write_text("host data\n")
    return v


# -- unit: resolution rules ----------------------------------------------------------------------


def test_resolve_in_root_keeps_absolute_links_and_dotdot_inside(tmp_path: Path) -> None:
    root = tmp_path / "r"
    (root / "real").mkdir(parents=True)
    os.symlink("/etc", root / "abs")
    os.symlink("../../../../etc", root / "rel")
    assert resolve_in_root(str(root), "/abs/passwd") == str(root / "etc" / "passwd")
    assert resolve_in_root(str(root), "/rel/passwd") == str(root / "etc" / "passwd")
    assert resolve_in_root(str(root), "/../../real/..//x") == str(root / "x")


def test_resolve_in_root_refuses_a_symlink_loop(tmp_path: Path) -> None:
    os.symlink("b", tmp_path / "a")
    os.symlink("a", tmp_path / "b")
    with pytest.raises(OSError) as ei:
        resolve_in_root(str(tmp_path), "/a/x")
    assert ei.value.errno == errno.ELOOP


def test_ensure_in_root_creates_inside_never_on_the_host(tmp_path: Path, victim: Path) -> None:
    root = tmp_path / "r"
    root.mkdir()
    os.symlink(str(victim), root / "a")  # the host path of the victim, as an absolute link
    before = tree_hash(victim)
    got = ensure_in_root(str(root), "/a/newdir/x")
    assert got == str(root / victim.relative_to("/") / "newdir" / "x") and os.path.isdir(got)
    assert tree_hash(victim) == before


def test_view_resolves_under_a_bind_in_the_bind_source(tmp_path: Path, victim: Path) -> None:
    rootfs, storage = tmp_path / "rootfs", tmp_path / "storage"
    rootfs.mkdir()
    storage.mkdir()
    os.symlink("../../oldroot" + str(victim), storage / "link")
    view = View(str(rootfs))
    view.add(Layer("/storage", "bind", str(storage), writable=True))
    dest, layer = view.ensure("/storage/link/x")
    assert dest == "/oldroot" + str(victim) + "/x" and layer.fs == "rootfs"
    assert (rootfs / ("oldroot" + str(victim)) / "x").is_dir()
    dest, layer = view.ensure("/storage/plain/y")
    assert (dest, layer.fs) == ("/storage/plain/y", "bind") and (storage / "plain" / "y").is_dir()


def test_view_refuses_a_missing_mount_point_in_a_read_only_bind(tmp_path: Path, victim: Path) -> None:
    view = View(str(tmp_path))
    view.add(Layer("/data", "bind", str(victim), writable=False))
    before = tree_hash(victim)
    assert view.ensure("/data/sub")[0] == "/data/sub"  # control: an existing mount point is fine
    with pytest.raises(OSError) as ei:
        view.ensure("/data/new")
    assert ei.value.errno == errno.EROFS and "created on the host" in str(ei.value)
    assert tree_hash(victim) == before


@pytest.mark.parametrize(
    "path",
    ["/proc/self/root/etc/x", "/proc/1/root/etc", "/proc/thread-self/cwd", "/dev/fd/3/x", "/dev/stdin"],
)
def test_view_refuses_symlinks_of_kernel_filesystems(tmp_path: Path, path: str) -> None:
    view = View(str(tmp_path))
    view.add(Layer("/proc", "proc"))
    view.add(Layer("/dev", "dev"))
    assert view.resolve("/proc/sys/kernel")[0] == "/proc/sys/kernel"  # control
    assert view.resolve("/dev/shm/x")[0] == "/dev/shm/x"
    with pytest.raises(OSError) as ei:
        view.resolve(path)
    assert ei.value.errno == errno.ELOOP and "symbolic link" in str(ei.value)


# -- breach: real bwrap --------------------------------------------------------------------------


def _mount_cfg(extra: list[dict[str, Any]], script: str) -> dict[str, Any]:
    cfg = base_config(probe(script))
    cfg["mounts"] += extra
    return cfg


@needs_sandbox
@pytest.mark.parametrize("how", RUNNERS)
@pytest.mark.parametrize("link", ["oldroot", "host"])
def test_mount_destination_through_a_rootfs_symlink_stays_inside(
    make_bundle, state_root: Path, victim: Path, how: str, link: str
) -> None:
    mounts = [
        {"destination": "/a/x", "type": "tmpfs", "source": "tmpfs"},
        {"destination": "/a/y", "type": "bind", "source": "storage", "options": ["rbind", "rw"]},
    ]
    script = "touch /a/x/t && ls /a/x && echo MOUNT-MARKER > /a/y/m && echo CONTROL-OK"
    ctl = make_bundle(_mount_cfg(mounts, script), name="ctl")
    (ctl / "rootfs" / "a").mkdir()
    r = launch(how, state_root, ctl, "ctl")
    assert r.code == 0 and "CONTROL-OK" in r.out, r
    assert (ctl / "storage" / "m").read_text() == "MOUNT-MARKER\n"

    b = make_bundle(_mount_cfg(mounts, script), name="evil")
    os.symlink(("/oldroot" if link == "oldroot" else "") + str(victim), b / "rootfs" / "a")
    before, etc_x = tree_hash(victim), Path("/etc/x").exists()
    r = launch(how, state_root, b, "evil")
    assert tree_hash(victim) == before, "the host tree changed"
    assert Path("/etc/x").exists() == etc_x
    assert r.code == 0 and "CONTROL-OK" in r.out, r  # the mounts were made, inside the sandbox:
    if link == "oldroot":  # in the rootfs (a host path under /tmp lands in the sandbox's /tmp tmpfs)
        landed = b / "rootfs" / ("oldroot" + str(victim))
        assert (landed / "x").is_dir() and (landed / "y").is_dir()


@needs_sandbox
@pytest.mark.parametrize("how", RUNNERS)
def test_masked_path_through_a_rootfs_symlink_stays_inside(
    make_bundle, state_root: Path, victim: Path, how: str
) -> None:
    cfg = base_config(probe("cat /opt/secret/file; echo DONE"))
    cfg["linux"]["maskedPaths"] += ["/opt/secret", "/sys/firmware"]
    ctl = make_bundle(cfg, name="ctl")
    (ctl / "rootfs" / "opt" / "secret").mkdir(parents=True)
    (ctl / "rootfs" / "opt" / "secret" / "file").write_text("SECRET-MARKER\n")
    r = launch(how, state_root, ctl, "ctl")  # control: the mask is applied, the content hidden
    assert r.code == 0 and "DONE" in r.out and "SECRET-MARKER" not in r.out, r
    cfg["process"]["args"] = probe("echo DONE")
    cfg["linux"]["maskedPaths"] += ["/opt/secret/newdir"]
    b = make_bundle(cfg, name="evil")
    shutil.rmtree(b / "rootfs" / "sys")  # /sys is not mounted: /sys/firmware resolves in the rootfs
    os.symlink("/oldroot" + str(victim), b / "rootfs" / "sys")
    (b / "rootfs" / "opt").mkdir(exist_ok=True)
    os.symlink("/oldroot" + str(victim), b / "rootfs" / "opt" / "secret")
    (b / "rootfs" / ("oldroot" + str(victim)) / "newdir").mkdir(parents=True)  # exists in the rootfs only
    before = tree_hash(victim)
    r = launch(how, state_root, b, "evil")
    assert r.code == 0 and "DONE" in r.out, r
    assert tree_hash(victim) == before, "bwrap made the mask's mount point on the host"


@needs_sandbox
@pytest.mark.parametrize("how", RUNNERS)
@pytest.mark.parametrize(
    "dest", ["/proc/self/root/oldroot{victim}/x", "/proc/1/root/oldroot{victim}/x", "/dev/fd/{fd}/x"]
)
def test_destination_through_a_kernel_fs_link_is_refused(
    make_bundle, state_root: Path, victim: Path, how: str, dest: str
) -> None:
    ok = make_bundle(
        _mount_cfg([{"destination": "/proc/bus", "type": "tmpfs", "source": "tmpfs"}], "echo CONTROL-OK"),
        name="ctl",
    )
    r = launch(how, state_root, ok, "ctl")  # control: a tmpfs under /proc (no link on the way) works
    assert r.code == 0 and "CONTROL-OK" in r.out, r
    before = tree_hash(victim)
    for fd in (3, 4, 5, 6):  # bwrap keeps host directories open while it sets up (e.g. /proc)
        d = dest.format(victim=victim, fd=fd)
        b = make_bundle(
            _mount_cfg([{"destination": d, "type": "tmpfs", "source": "tmpfs"}], "echo RAN"), name=f"evil{fd}"
        )
        r = launch(how, state_root, b, f"evil{fd}")
        assert r.code is None and "symbolic link" in r.refused and "RAN" not in r.out, r
        if "{fd}" not in dest:
            break
    assert tree_hash(victim) == before


@needs_sandbox
@pytest.mark.parametrize("how", RUNNERS)
def test_cwd_through_proc_self_fd_is_refused_and_no_host_fd_leaks(
    make_bundle, state_root: Path, how: str
) -> None:
    # ls as a plain child (no pipe, no redirection: the shell then holds only what it was given)
    cfg = base_config(probe("pwd; ls /proc/$$/fd; echo CWD-OK"))
    cfg["process"]["cwd"] = "/work/here"
    b = make_bundle(cfg, name="ctl")
    r = launch(how, state_root, b, "ctl")  # control: a cwd inside the rootfs is made and used
    assert r.code == 0 and r.out.splitlines()[0] == "/work/here" and "CWD-OK" in r.out, r
    assert r.out.splitlines()[1:-1] == ["0", "1", "2"], "a host fd is open in the sandbox"
    for cwd in ("/proc/self/fd/3", "/proc/self/fd/7", "/proc/1/cwd", "/dev/fd/3"):
        cfg["process"]["cwd"] = cwd
        sid = "evil" + cwd.replace("/", "-")
        r = launch(how, state_root, make_bundle(cfg, name=sid), sid)
        assert r.code is None and "/process/cwd" in r.refused and "CWD-OK" not in r.out, (cwd, r)
        assert cgroup_dirs(f"{sid}-{TAG}") == [], "a refused create left its cgroup behind"


@needs_sandbox
@pytest.mark.parametrize("how", RUNNERS)
def test_bind_destination_that_is_a_symlink_resolves_inside(
    make_bundle, state_root: Path, victim: Path, how: str
) -> None:
    cfg = base_config(probe("echo BIND-MARKER > /data/m && cat /srv/real/m && echo DONE"))
    cfg["mounts"].append(
        {"destination": "/data", "type": "bind", "source": "storage", "options": ["rbind", "rw"]}
    )
    b = make_bundle(cfg, name="inner")
    (b / "rootfs" / "srv" / "real").mkdir(parents=True)
    os.symlink("/srv/real", b / "rootfs" / "data")  # control: a link inside the rootfs is honoured there
    r = launch(how, state_root, b, "inner")
    assert r.code == 0 and "BIND-MARKER" in r.out and "DONE" in r.out, r
    assert (b / "storage" / "m").read_text() == "BIND-MARKER\n"

    cfg["process"]["args"] = probe("echo BIND-MARKER > /data/m; echo DONE")
    b = make_bundle(cfg, name="evil")
    os.symlink("/oldroot" + str(victim), b / "rootfs" / "data")
    before = tree_hash(victim)
    r = launch(how, state_root, b, "evil")
    assert r.code == 0 and "DONE" in r.out, r
    assert tree_hash(victim) == before
    assert (b / "rootfs" / ("oldroot" + str(victim))).is_dir()  # the mount point, made in the rootfs


@needs_sandbox
@pytest.mark.parametrize("how", RUNNERS)
def test_missing_mount_points_are_made_in_the_rootfs_or_refused(
    make_bundle, state_root: Path, victim: Path, how: str
) -> None:
    ro = {"destination": "/hostdata", "type": "bind", "source": str(victim), "options": ["rbind", "ro"]}
    cfg = _mount_cfg(
        [
            ro,
            {"destination": "/hostdata/sub", "type": "tmpfs", "source": "tmpfs"},
            {"destination": "/new/point", "type": "tmpfs", "source": "tmpfs"},
        ],
        "touch /hostdata/sub/t /new/point/t && cat /hostdata/passwd && echo CONTROL-OK",
    )
    before = tree_hash(victim)
    b = make_bundle(cfg, name="ctl")
    r = launch(how, state_root, b, "ctl")  # control: existing point in a ro bind; missing one in the rootfs
    assert r.code == 0 and "CONTROL-OK" in r.out and "root:x:0:0" in r.out, r
    assert (b / "rootfs" / "new" / "point").is_dir() and not Path("/new").exists()

    cfg["mounts"][-2]["destination"] = "/hostdata/newdir"  # missing inside a read-only bind of the host
    b = make_bundle(cfg, name="evil")
    r = launch(how, state_root, b, "evil")
    assert r.code is None and "read-only bind" in r.refused and "CONTROL-OK" not in r.out, r
    assert tree_hash(victim) == before
