"""The capabilities orchestrators' default configs grant (containerd, Docker, runtime-tools: CAP_MKNOD,
CAP_NET_RAW, CAP_AUDIT_WRITE, ...) are granted, and the kernel makes them harmless: every writable
mount is nodev and the devices cgroup allows only runc's default list, raw sockets reach only the
sandbox's own network namespace.  Each breach follows a control that shows the same probe succeeding
where it is allowed (on the host, or for a device the rules allow).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import base_config
from sandbox_runs import RUNNERS, launch, probe
from sandbox_shim.devices import DENY_ALL, RUNC_DEFAULT_ALLOW, line, problems, rules
from sandbox_shim.hardening.capabilities import ORCHESTRATOR_DEFAULTS, check_capabilities, granted

#: containerd 1.6 / Docker / runtime-tools default set, as their generated config.json lists it
DOCKER_DEFAULTS = sorted(ORCHESTRATOR_DEFAULTS)


def _caps(
    cfg: dict[str, Any], names: list[str], sets: tuple[str, ...] = ("bounding", "effective", "permitted")
) -> None:
    for k in ("bounding", "effective", "permitted", "inheritable", "ambient"):
        cfg["process"]["capabilities"][k] = list(names) if k in sets else []


def _root_disk() -> tuple[int, int]:
    """major, minor of the block device holding / (the host disk a tenant must never read)."""
    dev = os.stat("/").st_dev
    for line_ in Path("/proc/self/mountinfo").read_text().splitlines():
        f = line_.split()
        if f[4] == "/":
            ma, mi = (int(x) for x in f[2].split(":"))
            if os.makedev(ma, mi) == dev:
                break
    # an overlay/btrfs root has an anonymous st_dev: take the first real disk instead
    for entry in sorted(Path("/sys/dev/block").iterdir()):
        ma, mi = (int(x) for x in entry.name.split(":"))
        if not (entry / "partition").exists() and ma not in (1, 7, 253):  # ram, loop, zram
            return ma, mi
    pytest.skip("no block device found under /sys/dev/block: nothing to attack")


# -- policy (pure) ---------------------------------------------------------------------------------


def test_orchestrator_defaults_are_accepted_and_the_rest_refused_in_one_message() -> None:
    cfg = base_config()
    _caps(cfg, DOCKER_DEFAULTS)
    assert check_capabilities(cfg) == []
    _caps(cfg, [*DOCKER_DEFAULTS, "CAP_SYS_ADMIN", "CAP_DAC_READ_SEARCH", "CAP_SYS_MODULE", "CAP_SYS_PTRACE"])
    (p,) = check_capabilities(cfg)
    assert p.pointer == "/process/capabilities"
    for cap in ("CAP_SYS_ADMIN", "CAP_DAC_READ_SEARCH", "CAP_SYS_MODULE", "CAP_SYS_PTRACE"):
        assert cap in p.message
    assert "CAP_MKNOD" not in p.message
    # CAP_NET_RAW is contained only by a network namespace of the sandbox's own
    cfg["linux"]["namespaces"] = [ns for ns in cfg["linux"]["namespaces"] if ns["type"] != "network"]
    _caps(cfg, DOCKER_DEFAULTS)
    (p,) = check_capabilities(cfg)
    assert "CAP_NET_RAW" in p.message and "host's network" in p.message
    cfg["linux"]["namespaces"].append({"type": "user"})  # in a user namespace they are its own
    _caps(cfg, ["CAP_SYS_ADMIN"])
    assert check_capabilities(cfg) == []


def test_granted_set_is_what_the_process_holds_after_exec() -> None:
    caps = {
        "bounding": ["CAP_CHOWN", "CAP_KILL"],
        "effective": ["CAP_CHOWN"],
        "permitted": ["CAP_CHOWN"],
        "inheritable": [],
        "ambient": [],
    }
    assert granted(caps, 0) == ["CAP_CHOWN", "CAP_KILL"]  # root: the bounding set (capabilities(7))
    assert granted(caps, 1000) == []  # others: the ambient set only
    caps.update(ambient=["CAP_CHOWN"], inheritable=["CAP_CHOWN"])
    assert granted(caps, 1000) == ["CAP_CHOWN"]


def test_device_rules_order_and_refusals() -> None:
    fuse = {"allow": True, "type": "c", "major": 10, "minor": 229, "access": "rw"}
    linux = {
        "resources": {"devices": [{"allow": False, "access": "rwm"}, fuse]},
        "devices": [{"path": "/dev/fuse", "type": "c", "major": 10, "minor": 229}],
    }
    got = rules(linux)
    assert got[0] == DENY_ALL and got[1]["type"] == "a" and not got[1]["allow"]
    assert line(got[2]) == "c 10:229 rw"
    assert got[3 : 3 + len(RUNC_DEFAULT_ALLOW)] == list(RUNC_DEFAULT_ALLOW)
    assert line(got[-1]) == "c 10:229 rwm"
    assert problems(linux) == []
    bad = {
        "resources": {
            "devices": [{"allow": True, "access": "rwm"}, {"allow": True, "type": "b", "access": "r"}]
        },
        "devices": [{"path": "/dev/vda", "type": "b", "major": 254, "minor": 0}],
    }
    assert [p.pointer for p in problems(bad)] == [
        "/linux/resources/devices/0",
        "/linux/resources/devices/1",
        "/linux/devices/0",
    ]
    kmsg = {"devices": [{"path": "/dev/kmsg", "type": "c", "major": 1, "minor": 11}]}  # host log writes
    (p,) = problems(kmsg)
    assert p.pointer == "/linux/devices/0" and "1:11" in p.message


# -- on the kernel ---------------------------------------------------------------------------------


def _targets(tmp_path: Path) -> list[tuple[str, int, int]]:
    """Host devices a tenant must never open, each checked first on the host (the control): the same
    node made in a plain host directory opens there.  The host disk, when this host lets root open it,
    and /dev/fuse (c 10:229: opens without any capability, and is not in runc's default list)."""
    out = []
    ma, mi = _root_disk()
    for kind, a, b in (("b", ma, mi), ("c", 10, 229)):
        node = tmp_path / f"host-{kind}-{a}-{b}"
        os.mknod(node, (stat.S_IFBLK if kind == "b" else stat.S_IFCHR) | 0o600, os.makedev(a, b))
        try:
            os.close(os.open(node, os.O_RDONLY | os.O_NONBLOCK))
        except OSError as e:
            print(f"control: the host itself cannot open {kind} {a}:{b} ({e.strerror}); not attacked")
            continue
        out.append((kind, a, b))
    if not out:
        pytest.skip("this host's root can open none of the target devices: no control")
    return out


@pytest.mark.parametrize("how", RUNNERS)
def test_mknod_of_a_host_device_is_never_openable(
    make_bundle, state_root: Path, tmp_path: Path, how: str
) -> None:
    if os.geteuid() != 0 or shutil.which("bwrap") is None:
        pytest.skip("sandboxes need root and bwrap here")
    targets = _targets(tmp_path)
    dirs = ["/tmp", "/storage", "/dev", "/dev/shm", "/run"]
    script = "; ".join(
        f"mknod {d}/n{k}{a} {k} {a} {b} && echo MKNOD-OK{d}{k} && "
        f"dd if={d}/n{k}{a} of=/dev/null bs=8192 count=1 && echo OPEN-BREACH{d}{k}"
        for d in dirs
        for k, a, b in targets
    )
    script += "; head -c 4 /dev/zero | wc -c | sed s/^/ZERO-/"  # an allowed device still works
    script += "; mknod /storage/fifo p && echo FIFO-OK"  # mknod itself works inside (a FIFO)
    cfg = base_config(probe(script, exit_zero=True))
    cfg["mounts"] += [
        {
            "destination": "/dev/shm",
            "type": "tmpfs",
            "source": "shm",
            "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"],
        },
        {"destination": "/run", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid"]},
    ]
    _caps(cfg, DOCKER_DEFAULTS)
    r = launch(how, state_root, make_bundle(cfg), "mknod")
    assert r.code == 0, r
    assert "FIFO-OK" in r.out, r.out
    for d in dirs:
        for k, _a, _b in targets:
            # CAP_MKNOD is granted, but the tenant filter refuses character and block nodes: one made in
            # storage/ would outlive the sandbox on the host's file system, openable there
            assert f"MKNOD-OK{d}{k}" not in r.out, r.out
            assert f"OPEN-BREACH{d}{k}" not in r.out, r.out
    assert "ZERO-4" in r.out, r.out


@pytest.mark.parametrize("how", RUNNERS)
def test_devices_cgroup_holds_the_rules(make_bundle, state_root: Path, how: str) -> None:
    """The sandbox's own devices cgroup lists exactly runc's default allow list plus the config's
    devices, nothing like ``a *:* rwm`` (the host's own list is the control: it allows everything)."""
    if os.geteuid() != 0 or shutil.which("bwrap") is None:
        pytest.skip("sandboxes need root and bwrap here")
    from sandbox_shim.platforms.linux.cgroups import detect

    lay = detect()
    if lay.version != 1 or "devices" not in lay.v1_mounts:
        pytest.skip("the v1 devices hierarchy is not mounted here (cgroup v2 rules are built elsewhere)")
    own = (Path(lay.v1_mounts["devices"]) / "devices.list").read_text().split("\n")
    assert "a *:* rwm" in own  # the host's root cgroup allows everything
    cg = f"/sandbox-shim-test-devrules-{os.getpid()}-{how}-{time.monotonic_ns() % 10**9}"  # no shared parent
    listing = f"{lay.v1_mounts['devices']}{cg}/devices.list"
    if not os.path.exists("/dev/fuse"):
        pytest.skip("no /dev/fuse on this host to give the sandbox")
    cfg = base_config(probe(f"cat {listing}; : <>/dev/fuse && echo FUSE-OPEN", exit_zero=True))
    cfg["mounts"].append({"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["ro"]})
    cfg["linux"]["cgroupsPath"] = cg
    cfg["linux"]["devices"] = [{"path": "/dev/fuse", "type": "c", "major": 10, "minor": 229}]
    _caps(cfg, DOCKER_DEFAULTS)
    r = launch(how, state_root, make_bundle(cfg), "devrules")
    assert r.code == 0, r
    got = [x for x in r.out.splitlines() if x[:2] in ("a ", "c ", "b ")]
    assert got and "a *:* rwm" not in got, r.out
    want = {line(x) for x in RUNC_DEFAULT_ALLOW} | {"c 10:229 rwm"}
    assert set(got) == want, r.out
    assert "FUSE-OPEN" in r.out, r.out  # linux.devices: the host's node is bound and allowed


def test_raw_socket_reaches_only_the_sandbox_netns(make_bundle, state_root: Path) -> None:
    if os.geteuid() != 0 or shutil.which("bwrap") is None or shutil.which("ip") is None:
        pytest.skip("needs root, bwrap and ip(8)")
    host_if = f"i16h{os.getpid() % 100000}"
    subprocess.run(["ip", "link", "add", host_if, "type", "veth", "peer", "name", host_if + "p"], check=True)
    try:
        subprocess.run(["ip", "link", "set", host_if, "up"], check=True)
        # control, on the host: a packet socket binds the host interface (busybox arping)
        bb = shutil.which("busybox")
        assert bb
        c = subprocess.run(
            [bb, "arping", "-c", "1", "-w", "1", "-I", host_if, "10.255.255.1"],
            capture_output=True,
            text=True,
        )
        assert "No such device" not in c.stderr and "Operation not permitted" not in c.stderr, c.stderr
        script = (
            f"arping -c 1 -w 1 -I lo 127.0.0.1 >/dev/null 2>&1; echo LO-RC$?; "
            f"arping -c 1 -w 1 -I {host_if} 10.255.255.1; echo HOST-RC$?; ip -o link"
        )
        cfg = base_config(probe(script, exit_zero=True))
        _caps(cfg, DOCKER_DEFAULTS)
        r = launch("cli", state_root, make_bundle(cfg), "raw")
        assert r.code == 0, r
        assert "Operation not permitted" not in r.out.split("HOST-RC")[0], r.out  # CAP_NET_RAW granted
        assert "HOST-RC0" not in r.out and host_if not in r.out.split("HOST-RC")[1], r.out
    finally:
        subprocess.run(["ip", "link", "del", host_if], capture_output=True)


# -- process fields as runc applies them ---------------------------------------------------------


@pytest.mark.parametrize("how", RUNNERS)
def test_sysctl_for_a_non_root_user(make_bundle, state_root: Path, how: str) -> None:
    """podman/docker ``run --user 1000`` set net.ipv4.ping_group_range by default."""
    if os.geteuid() != 0 or shutil.which("bwrap") is None:
        pytest.skip("sandboxes need root and bwrap here")
    cfg = base_config(probe("id -u; cat /proc/sys/net/ipv4/ping_group_range", exit_zero=True))
    cfg["linux"]["sysctl"] = {"net.ipv4.ping_group_range": "0 2147483647"}
    r = launch(how, state_root, make_bundle(cfg, name="root"), "sysroot")  # control: root
    assert r.code == 0 and "0\t2147483647" in r.out, r
    cfg["process"]["user"] = {"uid": 1000, "gid": 1000}
    cfg["process"]["capabilities"] = {
        k: [] for k in ("bounding", "effective", "permitted", "inheritable", "ambient")
    }
    b = make_bundle(cfg, name="user")
    os.chmod(b / "storage", 0o777)  # uid 1000 is the host's uid 1000 (no user namespace): as runc
    r = launch(how, state_root, b, "sysuser")
    assert r.code == 0 and r.out.splitlines() == ["1000", "0\t2147483647"], r


def test_tmpfs_without_mode_is_1777_and_oom_score_adj_applied(make_bundle, state_root: Path) -> None:
    if os.geteuid() != 0 or shutil.which("bwrap") is None:
        pytest.skip("sandboxes need root and bwrap here")
    cfg = base_config(probe("stat -c %a /run /tmp; cat /proc/self/oom_score_adj; umask", exit_zero=True))
    cfg["process"]["user"]["umask"] = 0o27
    cfg["mounts"].append(
        {
            "destination": "/run",
            "type": "tmpfs",
            "source": "tmpfs",
            "options": ["rw", "rprivate", "nosuid", "nodev", "tmpcopyup"],
        }
    )  # podman
    cfg["process"]["oomScoreAdj"] = 500
    r = launch("cli", state_root, make_bundle(cfg), "tmpfs")
    assert r.code == 0 and r.out.split() == ["1777", "1777", "500", "0027"], r


def test_rlimit_the_host_cannot_grant_is_refused_with_its_pointer(make_bundle, state_root: Path) -> None:
    import resource

    if os.geteuid() != 0 or shutil.which("bwrap") is None:
        pytest.skip("sandboxes need root and bwrap here")
    from sandbox_shim.platforms.linux.rlimits import _has_sys_resource, _nr_open

    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    too_many = _nr_open() + 1 if _has_sys_resource() else hard + 1
    cfg = base_config(probe("echo RAN"))
    cfg["process"]["rlimits"] = [{"type": "RLIMIT_NOFILE", "soft": 1024, "hard": too_many}]
    r = launch("cli", state_root, make_bundle(cfg), "rlim")
    assert r.code is None and "/process/rlimits/0" in r.refused and "RAN" not in r.out, r
    assert "Traceback" not in r.err
    assert not any(p.name != ".capabilities" for p in state_root.iterdir()) if state_root.exists() else True


def test_checkpoint_is_reported_not_supported(state_root: Path) -> None:
    from conftest import run_shim

    r = run_shim(state_root, "checkpoint", "--image-path", "/nonexistent", "some-id")
    assert r.returncode == 4 and "checkpoint is not supported" in r.stderr, r


@pytest.mark.parametrize("how", RUNNERS)
def test_process_user_is_the_hosts_ids_without_a_user_namespace(
    make_bundle, state_root: Path, how: str
) -> None:
    """As runc: uid/gid 1000 are the host's 1000 (a file it makes in storage is owned by them), with no
    capabilities left after the switch and no supplementary groups; uid 0 (the control) keeps its set."""
    if os.geteuid() != 0 or shutil.which("bwrap") is None:
        pytest.skip("sandboxes need root and bwrap here")
    script = "id -u; id -g; grep -E '^(CapEff|Groups)' /proc/self/status; touch /storage/made"
    cfg = base_config(probe(script, exit_zero=True))
    _caps(cfg, DOCKER_DEFAULTS)
    b = make_bundle(cfg, name="root")
    r = launch(how, state_root, b, "uidroot")
    assert r.code == 0 and r.out.split()[:2] == ["0", "0"], r
    assert int(r.out.split("CapEff:")[1].split()[0], 16) != 0, r.out  # control: root holds its set
    cfg["process"]["user"] = {"uid": 1000, "gid": 1000, "umask": 0o22}
    b = make_bundle(cfg, name="user")
    os.chmod(b / "storage", 0o777)
    r = launch(how, state_root, b, "uiduser")
    assert r.code == 0 and r.out.split()[:2] == ["1000", "1000"], r
    assert int(r.out.split("CapEff:")[1].split()[0], 16) == 0, r.out
    assert r.out.split("Groups:")[1].split("\n")[0].strip() == "", r.out
    st = (b / "storage" / "made").stat()
    assert (st.st_uid, st.st_gid) == (1000, 1000)


def test_process_user_refusals(make_bundle, state_root: Path) -> None:
    if os.geteuid() != 0 or shutil.which("bwrap") is None:
        pytest.skip("sandboxes need root and bwrap here")
    cfg = base_config(probe("echo RAN"))
    cfg["process"]["user"] = {"uid": 1000, "gid": 1000, "additionalGids": [4, 27]}
    r = launch("cli", state_root, make_bundle(cfg, name="groups"), "groups")
    assert r.code is None and "/process/user/additionalGids" in r.refused, r
    cfg = base_config(probe("echo RAN"))
    cfg["linux"]["namespaces"].append({"type": "user"})
    cfg["linux"]["uidMappings"] = [{"containerID": 0, "hostID": 100000, "size": 65536}]
    r = launch("cli", state_root, make_bundle(cfg, name="maps"), "maps")
    assert r.code is None and "/linux/uidMappings" in r.refused and "RAN" not in r.out, r


def test_exec_as_another_uid_holds_what_execve_leaves_it() -> None:
    """``exec -u 1000`` into a root sandbox: Docker/containerd send the container's sets unchanged (no
    ambient set); after execve(2) uid 1000 holds none, as with runc.  Root (the control) keeps them."""
    from sandbox_shim.process_spec import parse_process, resolve_credentials

    sandbox = {"uid": 0, "gid": 0, "capabilities": DOCKER_DEFAULTS, "userns": False}
    sets = {k: DOCKER_DEFAULTS for k in ("bounding", "effective", "permitted")}
    root = parse_process({"args": ["id"], "cwd": "/", "user": {"uid": 0, "gid": 0}, "capabilities": sets})
    assert resolve_credentials(sandbox, root.user, root.capabilities)["capabilities"] == DOCKER_DEFAULTS
    user = parse_process(
        {"args": ["id"], "cwd": "/", "user": {"uid": 1000, "gid": 1000}, "capabilities": sets}
    )
    creds = resolve_credentials(sandbox, user.user, user.capabilities)
    assert creds["uid"] == 1000 and creds["capabilities"] == []
    # no capabilities object (``sandbox-shim exec -u``-like callers): none either for another uid
    bare = parse_process({"args": ["id"], "cwd": "/", "user": {"uid": 1000, "gid": 1000}})
    assert resolve_credentials(sandbox, bare.user, bare.capabilities)["capabilities"] == []


def test_dev_shm_source_is_shm(make_bundle, state_root: Path) -> None:
    """Docker's/containerd's /dev/shm: type tmpfs, source ``shm``, nosuid,nodev,noexec, mode 1777."""
    if os.geteuid() != 0 or shutil.which("bwrap") is None:
        pytest.skip("sandboxes need root and bwrap here")
    cfg = base_config(
        probe(
            "grep -E ' /(dev/shm|tmp) ' /proc/self/mounts; stat -c %a /dev/shm; "
            "echo x > /dev/shm/f && echo WRITE-OK",
            exit_zero=True,
        )
    )
    cfg["mounts"].append(
        {
            "destination": "/dev/shm",
            "type": "tmpfs",
            "source": "shm",
            "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"],
        }
    )
    r = launch("cli", state_root, make_bundle(cfg), "shm")
    assert r.code == 0, r
    shm = next(x for x in r.out.splitlines() if " /dev/shm " in x).split()
    assert shm[0] == "shm" and shm[2] == "tmpfs", r.out
    assert {"nosuid", "nodev", "noexec"} <= set(shm[3].split(",")) and "size=65536k" in shm[3], r.out
    tmp = next(x for x in r.out.splitlines() if " /tmp " in x).split()
    assert tmp[0] == "tmpfs", r.out  # the control: a tmpfs whose source is tmpfs stays as bwrap made it
    assert "1777" in r.out.splitlines() and "WRITE-OK" in r.out, r.out


def test_net_raw_in_a_joined_host_network_namespace_is_refused(make_bundle, state_root: Path) -> None:
    if os.geteuid() != 0 or shutil.which("bwrap") is None:
        pytest.skip("sandboxes need root and bwrap here")
    cfg = base_config(probe("echo RAN"))
    _caps(cfg, DOCKER_DEFAULTS)
    cfg["linux"]["namespaces"] = [ns for ns in cfg["linux"]["namespaces"] if ns["type"] != "network"]
    cfg["linux"]["namespaces"].append({"type": "network", "path": f"/proc/{os.getpid()}/ns/net"})
    r = launch("cli", state_root, make_bundle(cfg), "rawhost")
    assert r.code is None and "CAP_NET_RAW" in r.refused and "RAN" not in r.out, r
