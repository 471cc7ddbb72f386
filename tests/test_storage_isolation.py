"""Storage isolation between sibling sandboxes under one bundles root, on real bwrap.

Each sandbox's ``storage/`` is bound read-write where its config says; everything else is read-only
(the rootfs) or absent (the host, the neighbours).  Sandbox A attacks B's storage by ``..``, by B's
absolute host path, through ``/proc`` and through symlinks it plants in its own storage for a later
run (of A or of B) to follow.  Every breach runs after a CONTROL: the same probe on a path it may
use prints the marker.  Runs go through the CLI (``run``) and the library (provision/start/destroy).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import base_config, run_shim
from sandbox_runs import RUNNERS, SANDBOX_MARKS, TAG, launch, probe, tree_hash

pytestmark = SANDBOX_MARKS

SECRET = "B-STORAGE-SECRET-5c1e"


@pytest.fixture
def siblings(make_bundle) -> tuple[Path, Path]:
    """Bundles ``a`` and ``b`` side by side; B's storage holds a secret and a file A must not change."""
    a = make_bundle(base_config(probe("true")), name="a")
    b = make_bundle(base_config(probe("true")), name="b")
    (b / "storage" / "secret").write_text(SECRET + "\n")
    return a, b


def _set_args(bundle: Path, args: list[str], mutate: Any = None) -> None:
    import json

    cfg = json.loads((bundle / "config.json").read_text())
    cfg["process"]["args"] = args
    if mutate:
        mutate(cfg)
    (bundle / "config.json").write_text(json.dumps(cfg))


@pytest.mark.parametrize("how", RUNNERS)
def test_neighbour_storage_by_dotdot_and_host_path(
    siblings: tuple[Path, Path], state_root: Path, how: str
) -> None:
    a, b = siblings
    _set_args(b, probe("cat /storage/secret && echo OWN-OK"))
    r = launch(how, state_root, b, "b")  # control: B reads its own storage
    assert r.code == 0 and SECRET in r.out and "OWN-OK" in r.out, r
    host_secret = b / "storage" / "secret"
    reads = [
        "/storage/../b/storage/secret",
        "/storage/../../b/storage/secret",
        "/storage/../../../bundles/b/storage/secret",
        str(host_secret),
        f"/proc/self/root{host_secret}",
        f"/proc/1/root{host_secret}",
    ]
    writes = ["/storage/../../b/storage/pwn", f"{b}/storage/pwn", "/pwn", "/etc/pwn"]
    script = "; ".join(
        [f"cat {p} && echo BREACH-READ" for p in reads]
        + [f"echo x > {p} && echo BREACH-WRITE" for p in writes]
        + ["echo mine > /storage/mine && cat /storage/mine && echo CONTROL-WRITE"]
    )
    _set_args(a, probe(script))
    before = tree_hash(b.parent, skip=("a/storage/out", "b/storage/out"))
    r = launch(how, state_root, a, "a")
    assert r.code == 0 and "CONTROL-WRITE" in r.out, r  # control: A writes its own storage
    assert SECRET not in r.out and "BREACH" not in r.out, r.out
    assert r.out.count("No such file or directory") >= len(reads), r.out  # ENOENT: not there at all
    assert "Read-only file system" in r.out, r.out  # EROFS: the rootfs
    assert tree_hash(b.parent, skip=("a/storage/out", "a/storage/mine", "b/storage/out")) == before


@pytest.mark.parametrize("how", RUNNERS)
def test_neighbour_storage_through_proc(
    siblings: tuple[Path, Path], state_root: Path, tmp_path: Path, how: str
) -> None:
    a, b = siblings
    _set_args(b, ["sh", "-c", "echo B-UP > /storage/up; sleep 20"])
    holder = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sandbox_shim",
            "--root",
            str(state_root),
            "run",
            "--bundle",
            str(b),
            f"b-live-{TAG}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while not (b / "storage" / "up").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (b / "storage" / "up").exists(), "B did not start"
        echo_pids = "for p in /proc/[0-9]*; do cat $p/root/storage/secret 2>/dev/null && echo BREACH-$p; done"
        _set_args(
            a,
            probe(
                f"echo own > /storage/own; cat /proc/self/root/storage/own && echo CONTROL-OK; "
                f"{echo_pids}; ls /proc | grep -c '^[0-9]'"
            ),
        )
        r = launch(how, state_root, a, "a")
        assert r.code == 0 and "CONTROL-OK" in r.out, r  # control: its own files through /proc/self/root
        assert SECRET not in r.out and "BREACH" not in r.out, r.out
        assert int(r.out.split()[-1]) <= 4, "more than the sandbox's own processes are visible in /proc"

        # without a pid namespace /proc shows the host's processes, B's among them: refused.
        def no_pidns(cfg: dict[str, Any]) -> None:
            cfg["linux"]["namespaces"] = [n for n in cfg["linux"]["namespaces"] if n["type"] != "pid"]

        _set_args(a, probe(echo_pids), no_pidns)
        r = launch(how, state_root, a, "a2")
        assert r.code is None and "pid namespace" in r.refused and SECRET not in r.out, r
    finally:
        holder.kill()
        holder.wait()
        run_shim(state_root, "delete", "--force", f"b-live-{TAG}")


@pytest.mark.parametrize("how", RUNNERS)
def test_symlink_planted_in_storage_is_followed_inside_only(
    siblings: tuple[Path, Path], state_root: Path, how: str
) -> None:
    a, b = siblings
    b_storage = b / "storage"
    _set_args(
        a,
        probe(
            "ln -s /../b/storage /storage/link && ln -s ../../b/storage /storage/rel && "
            f"ln -s {b_storage} /storage/abs && ln -s /oldroot{b_storage} /storage/old && "
            "echo PLANTED"
        ),
    )
    r = launch(how, state_root, a, "a1")
    assert r.code == 0 and "PLANTED" in r.out, r
    assert os.readlink(a / "storage" / "abs") == str(b_storage)  # planted on the host, as a link
    before = tree_hash(b.parent, skip=("a/", "b/storage/out"))

    def under_links(cfg: dict[str, Any]) -> None:  # a config whose mounts go through the planted links
        cfg["mounts"] += [
            {"destination": f"/storage/{n}/m", "type": "tmpfs", "source": "tmpfs"}
            for n in ("link", "rel", "abs", "old")
        ]
        cfg["linux"]["maskedPaths"] += [f"/storage/{n}/secret" for n in ("link", "rel", "abs", "old")]
        cfg["linux"]["readonlyPaths"] += [f"/storage/{n}" for n in ("link", "rel", "abs", "old")]

    reads = "; ".join(f"cat /storage/{n}/secret && echo BREACH-{n}" for n in ("link", "rel", "abs", "old"))
    _set_args(
        a,
        probe(
            f"echo again > /storage/again && echo CONTROL-OK; {reads}; "
            "echo x > /storage/abs/pwn; echo x > /storage/old/pwn; "
            "echo x > /storage/link/pwn; true"
        ),
        under_links,
    )  # they land in the sandbox's own /tmp tmpfs, or fail (EROFS): host checked below
    r = launch(how, state_root, a, "a2")  # another run of A follows its own links
    assert r.code == 0 and "CONTROL-OK" in r.out, r
    assert r.out.count("No such file or directory") >= 4 and "Read-only file system" in r.out, r.out
    assert SECRET not in r.out and "BREACH" not in r.out, r.out
    assert tree_hash(b.parent, skip=("a/", "b/storage/out")) == before, "B's bundle changed"

    _set_args(b, probe("cat /storage/secret && echo B-OK; ls /storage"))
    r = launch(how, state_root, b, "b")  # a run of B: its storage intact, nothing of A's in it
    assert r.code == 0 and "B-OK" in r.out and SECRET in r.out, r
    assert "pwn" not in r.out and "again" not in r.out, r.out
    assert not (b_storage / "pwn").exists() and not (b_storage / "m").exists()


@pytest.mark.parametrize("how", RUNNERS)
def test_everything_but_storage_is_read_only_or_absent(make_bundle, state_root: Path, how: str) -> None:
    b = make_bundle(
        base_config(
            probe(
                "echo w > /storage/w && echo STORAGE-OK; echo w > /tmp/w && echo TMP-OK; "
                "for p in /etc/pwn /bin/pwn /pwn /proc/sys/kernel/hostname /sys/pwn; do "
                "echo x > $p && echo BREACH-$p; done; mount -t tmpfs none /mnt && echo BREACH-MOUNT; true"
            )
        ),
        name="ro",
    )
    before = tree_hash(b / "rootfs")
    r = launch(how, state_root, b, "ro")
    assert r.code == 0 and "STORAGE-OK" in r.out and "TMP-OK" in r.out, r  # controls
    assert "BREACH" not in r.out and "Read-only file system" in r.out, r.out
    # mount(2) without CAP_SYS_ADMIN: EPERM
    assert "permission denied" in r.out.lower() or "not permitted" in r.out, r.out
    assert tree_hash(b / "rootfs") == before and not (b / "rootfs" / "tmp" / "w").exists()
