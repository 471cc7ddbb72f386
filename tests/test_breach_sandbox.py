"""Breaches of the kernel-file floor, the mount API, groups, masked paths and files the runtime makes,
on real bwrap.  Each breach runs after a CONTROL: the same probe where the permission holds (bare
bwrap without the profile, or the config that allows it) prints its marker, so a stopped breach is the
profile's doing and not a broken probe.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import base_config, run_shim
from sandbox_runs import RUNNERS, SANDBOX_MARKS, TAG, launch, probe
from sandbox_shim.bundle import load
from sandbox_shim.conformance.checks.isolation_kernel import MOUNT_API_C
from sandbox_shim.errors import BundleInvalid
from sandbox_shim.platforms.linux.bwrap import Fds, build_args, bwrap_path
from sandbox_shim.platforms.linux.plan import make_plan

pytestmark = SANDBOX_MARKS


def bare_bwrap(
    bundle: Path, script: str, *extra: str, after: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """The CONTROL: ``script`` under bare bwrap — the bundle's rootfs read-only, its storage at
    /storage, a plain proc, new pid/uts/ipc/net namespaces, no seccomp filter, no floor; ``extra``
    options before the mounts, ``after`` options after them."""
    exe = bwrap_path()
    assert exe
    argv = [
        exe,
        "--die-with-parent",
        "--unshare-pid",
        "--unshare-uts",
        "--unshare-ipc",
        "--unshare-net",
        *extra,
        "--ro-bind",
        str(bundle / "rootfs"),
        "/",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--bind",
        str(bundle / "storage"),
        "/storage",
        *after,
        "--",
        "sh",
        "-c",
        script,
    ]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def mount_api(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the static mount-api probe")
    d = tmp_path_factory.mktemp("mount-api")
    (d / "m.c").write_text(MOUNT_API_C)
    p = subprocess.run(
        [cc, "-static", "-O1", "-o", str(d / "mount-api"), str(d / "m.c")], capture_output=True
    )
    if p.returncode != 0:
        pytest.skip(f"cannot build the static probe: {p.stderr[-200:]!r}")
    return d / "mount-api"


def _userns_admin(cfg: dict[str, Any]) -> dict[str, Any]:
    cfg["linux"]["namespaces"].append({"type": "user"})
    for k in ("bounding", "effective", "permitted"):
        cfg["process"]["capabilities"][k] = ["CAP_SYS_ADMIN"]
    return cfg


# -- class 2: the new mount API under self-granted CAP_SYS_ADMIN ---------------------------------


@pytest.mark.parametrize("target", ["/", "/proc/sys"])
@pytest.mark.parametrize("how", RUNNERS)
def test_mount_api_cannot_make_read_only_writable(
    make_bundle, state_root: Path, mount_api: Path, how: str, target: str
) -> None:
    file = "/wrote" if target == "/" else "/proc/sys/kernel/hostname"  # the UTS namespace's own
    cfg = _userns_admin(base_config(probe(f"/storage/mount-api {target} {file}", exit_zero=True)))
    b = make_bundle(cfg, name="evil")
    shutil.copy(mount_api, b / "storage" / "mount-api")
    ro = ["--ro-bind", "/proc/sys", "/proc/sys"] if target != "/" else []
    ctl = bare_bwrap(
        b,
        f"/storage/mount-api {target} {file}",
        "--unshare-user",
        "--uid",
        "0",
        "--cap-add",
        "CAP_SYS_ADMIN",
        after=tuple(ro),
    )
    assert "MOUNT_SETATTR-OK" in ctl.stdout and "WROTE-FILE" in ctl.stdout, ctl  # control: the probe works
    (b / "rootfs" / "wrote").unlink(missing_ok=True)
    r = launch(how, state_root, b, "mapi")
    assert r.code == 0 and "MOUNT_SETATTR:" in r.out, r
    assert "-OK" not in r.out and "WROTE-FILE" not in r.out, r.out
    assert "Operation not permitted" in r.out
    assert not (b / "rootfs" / "wrote").exists()


# -- classes 3/4/9: the kernel-file floor -------------------------------------------------------


def _no_lists(cfg: dict[str, Any]) -> dict[str, Any]:
    cfg["linux"].pop("maskedPaths", None)
    cfg["linux"].pop("readonlyPaths", None)
    return cfg


@pytest.mark.parametrize("how", RUNNERS)
def test_floor_holds_when_the_config_lists_nothing(make_bundle, state_root: Path, how: str) -> None:
    script = (
        "echo sandbox > /proc/sys/kernel/hostname && echo SYSCTL-WROTE; "
        "echo sandbox > /mnt/p/sys/kernel/hostname && echo SYSCTL2-WROTE; "
        "wc -c < /proc/timer_list; ls /proc/acpi 2>&1 | head -1; echo DONE"
    )
    cfg = _no_lists(base_config(probe(script, exit_zero=True)))
    cfg["mounts"].append({"destination": "/mnt/p", "type": "proc", "source": "proc"})  # a second proc
    b = make_bundle(cfg, name="evil")
    ctl = bare_bwrap(
        b, "echo sandbox > /proc/sys/kernel/hostname && echo SYSCTL-WROTE; wc -c < /proc/timer_list"
    )
    assert "SYSCTL-WROTE" in ctl.stdout, ctl  # control: uid 0 without capabilities writes /proc/sys
    assert int(ctl.stdout.split()[-1]) > 0  # and reads /proc/timer_list
    r = launch(how, state_root, b, "floor")
    assert r.code == 0 and "DONE" in r.out, r
    assert "SYSCTL-WROTE" not in r.out and "SYSCTL2-WROTE" not in r.out, r.out
    assert r.out.count("Read-only file system") == 2, r.out
    # /proc/timer_list is /dev/null bound nodev (bwrap binds are nodev): opening it is refused
    assert "/proc/timer_list: Permission denied" in r.out or "\n0\n" in r.out, r.out


@pytest.mark.parametrize("path", ["/proc", "/proc/1", "/proc/self/root", "/proc/thread-self"])
def test_read_only_pid_entries_of_proc_are_refused(make_bundle, state_root: Path, path: str) -> None:
    cfg = base_config(probe("cat /proc/sys/kernel/hostname", exit_zero=True))
    b = make_bundle(cfg, name="ctl")
    r = launch("lib", state_root, b, "rop-ctl")
    assert r.code == 0 and "sandbox" in r.out, r  # control: the default lists (incl. /proc/sys) run
    cfg["linux"]["readonlyPaths"] = [path]
    r = launch("lib", state_root, make_bundle(cfg, name="evil"), "rop")
    assert r.code is None and "/linux/readonlyPaths/0" in r.refused, r


@pytest.mark.parametrize("how", RUNNERS)
def test_masked_path_moved_away_in_a_writable_rootfs_fails_closed(
    make_bundle, state_root: Path, how: str
) -> None:
    cfg = base_config(probe("cat /secret/key; echo DONE", exit_zero=True))
    cfg["root"]["readonly"] = False
    cfg["linux"]["maskedPaths"].append("/secret/key")
    b = make_bundle(cfg, name="persist")
    (b / "rootfs" / "secret").mkdir()
    (b / "rootfs" / "secret" / "key").write_text("KEY-MARKER\n")
    r = launch(how, state_root, b, "mask")
    assert r.code == 0 and "DONE" in r.out and "KEY-MARKER" not in r.out, r  # control: masked while there
    os.rename(b / "rootfs" / "secret", b / "rootfs" / "moved")  # what a tenant of the last run could do
    r = launch(how, state_root, b, "mask2")
    assert r.code is None and "/linux/maskedPaths/" in r.refused and "does not exist" in r.refused, r
    cfg["root"]["readonly"] = True  # a read-only rootfs: the tenant could not have moved it
    (b / "config.json").write_text(json.dumps(cfg))
    r = launch(how, state_root, b, "mask3")
    assert r.code == 0 and "DONE" in r.out, r


# -- class 6: the caller's supplementary groups ------------------------------------------------


def test_callers_supplementary_groups_never_reach_the_tenant(make_bundle, state_root: Path) -> None:
    script = "grep '^Groups:' /proc/self/status; cat /storage/g && echo READ-MARKER"
    b = make_bundle(base_config(probe(script, exit_zero=True)), name="grp")
    g = b / "storage" / "g"
    g.write_text("group secret\n")
    os.chown(g, 1234, 4242)
    g.chmod(0o044)
    r = run_shim(state_root, "run", "--bundle", str(b), f"grp-{TAG}", extra_groups=[4242])
    out = (b / "storage" / "out").read_text()
    assert r.returncode == 0 and "READ-MARKER" in out, (r, out)  # control: readable as "other"
    g.chmod(0o040)  # now only group 4242 may read it, and the caller holds 4242
    r = run_shim(state_root, "run", "--bundle", str(b), f"grp2-{TAG}", extra_groups=[4242])
    out = (b / "storage" / "out").read_text()
    assert r.returncode == 0 and "READ-MARKER" not in out and "Permission denied" in out, (r, out)
    groups = next(ln for ln in out.splitlines() if ln.startswith("Groups:")).split()[1:]
    assert "4242" not in groups and groups in ([], ["0"]), out
    cfg = base_config(probe(script, exit_zero=True))
    cfg["process"]["user"]["additionalGids"] = [4242]  # the config's own groups: exactly those
    (b / "config.json").write_text(json.dumps(cfg))
    r = run_shim(state_root, "run", "--bundle", str(b), f"grp3-{TAG}")
    out = (b / "storage" / "out").read_text()
    groups = next(ln for ln in out.splitlines() if ln.startswith("Groups:")).split()[1:]
    assert r.returncode == 0 and "READ-MARKER" in out and groups == ["4242"], out


@pytest.mark.parametrize("how", RUNNERS)
def test_umask_is_applied(make_bundle, state_root: Path, how: str) -> None:
    cfg = base_config(probe("umask", exit_zero=True))
    r = launch(how, state_root, make_bundle(cfg, name="ctl"), "um0")
    assert r.code == 0 and r.out.strip() != "0027", r  # control: not what the breach asks
    cfg["process"]["user"]["umask"] = 0o027
    r = launch(how, state_root, make_bundle(cfg, name="um"), "um")
    assert r.code == 0 and r.out.strip() == "0027", r


# -- class 8: files the runtime makes inside a rootfs ------------------------------------------


def test_terminal_helper_is_never_made_through_a_dev_symlink(make_bundle, tmp_path: Path) -> None:
    victim = tmp_path / "host-dev"
    victim.mkdir()
    cfg = base_config(["true"])
    cfg["process"]["terminal"] = True
    b = make_bundle(cfg, name="ctl")
    plan = make_plan(load(str(b)), "t")
    assert "--dev" in build_args(plan, Fds(5, 6))  # control: with the /dev tmpfs it is rendered
    cfg["mounts"] = [m for m in cfg["mounts"] if m["destination"] != "/dev"]
    b = make_bundle(cfg, name="evil")
    shutil.rmtree(b / "rootfs" / "dev", ignore_errors=True)
    (b / "rootfs" / "dev").unlink(missing_ok=True)
    os.symlink(f"/oldroot{victim}", b / "rootfs" / "dev")
    with pytest.raises(BundleInvalid, match="tmpfs mount at /dev"):
        build_args(make_plan(load(str(b)), "t"), Fds(5, 6))
    assert list(victim.iterdir()) == []


# -- class 13: set-up linear in the number of paths --------------------------------------------


def test_set_up_is_linear_in_masked_paths(make_bundle) -> None:
    def timed(n: int) -> float:
        cfg = base_config(["true"])
        cfg["linux"]["maskedPaths"] = [f"/m/d{i}/f" for i in range(n)]
        b = make_bundle(cfg, name=f"n{n}")
        for i in range(n):
            (b / "rootfs" / "m" / f"d{i}").mkdir(parents=True)
            (b / "rootfs" / "m" / f"d{i}" / "f").write_text("x")
        plan = make_plan(load(str(b)), "t")
        t0 = time.perf_counter()
        build_args(plan, Fds(5, 6))
        return time.perf_counter() - t0

    small, big = timed(100), timed(900)
    assert big < 2.0, big
    assert big < small * 9 * 3 + 0.05, (small, big)  # 9x the entries: ~9x the time, never ~81x


# -- class 10: concurrent sandboxes sharing a writable tree ------------------------------------


def test_set_up_never_walks_a_tree_a_running_sandbox_writes(
    make_bundle, state_root: Path, tmp_path: Path
) -> None:
    from sandbox_shim import api
    from sandbox_shim.mechanism import Sandbox

    shared = tmp_path / "shared"
    shared.mkdir()
    bind = {"destination": "/data", "type": "bind", "source": str(shared), "options": ["rbind", "rw"]}
    a_cfg = base_config(["sleep", "30"])
    a_cfg["mounts"].append(bind)
    a = make_bundle(a_cfg, name="a")
    leaf = base_config(probe("echo LEAF-OK", exit_zero=True))
    leaf["mounts"].append(bind)  # the same shared volume, nothing mounted below it
    nested = base_config(probe("echo NESTED-OK", exit_zero=True))
    nested["mounts"] += [bind, {"destination": "/data/sub", "type": "tmpfs", "source": "tmpfs"}]
    b_leaf, b_nested = make_bundle(leaf, name="leaf"), make_bundle(nested, name="nested")
    r = launch("lib", state_root, b_nested, "nest0")
    assert r.code == 0 and "NESTED-OK" in r.out, r  # control: alone, the nested mount is made
    (shared / "sub").rmdir()  # its mount point, made in the shared tree
    mech = api.default_mechanism(str(state_root))
    sid = f"holder-{TAG}"
    st = api.provision(mech, Sandbox(sid, str(a)))
    try:
        api.start(mech, sid)
        r = launch("lib", state_root, b_leaf, "leaf")
        assert r.code == 0 and "LEAF-OK" in r.out, r  # a shared volume with nothing below it: allowed
        r = launch("lib", state_root, b_nested, "nest1")
        assert r.code is None and "/mounts" in r.refused and "race" in r.refused, r
        assert not (shared / "sub").exists()
    finally:
        api.destroy(mech, sid, force=True)
    assert st.pid
    r = launch("lib", state_root, b_nested, "nest2")
    assert r.code == 0 and "NESTED-OK" in r.out, r  # the holder gone, its claim is stale


@pytest.mark.parametrize("how", RUNNERS)
def test_domainname_is_applied(make_bundle, state_root: Path, how: str) -> None:
    cfg = base_config(probe("cat /proc/sys/kernel/domainname", exit_zero=True))
    r = launch(how, state_root, make_bundle(cfg, name="ctl"), "dn0")
    assert r.code == 0 and "example.test" not in r.out, r  # control
    cfg["domainname"] = "example.test"
    r = launch(how, state_root, make_bundle(cfg, name="dn"), "dn")
    assert r.code == 0 and r.out.strip() == "example.test", r
