"""Hostile config.json values refused at validation, each after a control that the same config with a
clean value validates: strings that would split a bwrap argument or reach a path or the kernel
(NUL, lone surrogates, the forms each consumer treats specially), numbers out of their spec range,
fields this runtime does not apply, and a rootfs or bind the tenant could write that holds what the
runtime reads later.  ``sandbox-shim validate`` must say invalid (exit 3) with the field's pointer.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import SHARED, base_config, run_shim
from sandbox_shim.bundle import load
from sandbox_shim.config_rules import MAX_PATH_ENTRIES, UNAPPLIED
from sandbox_shim.errors import BundleInvalid


def _set(cfg: dict[str, Any], path: list[Any], value: Any) -> dict[str, Any]:
    node = cfg
    for p in path[:-1]:
        if isinstance(node, dict):
            node = node.setdefault(p, {})
        else:
            node = node[p]
    node[path[-1]] = value
    return cfg


def _pointers(make_bundle, cfg: dict[str, Any], name: str) -> list[str]:
    with pytest.raises(BundleInvalid) as ei:
        load(str(make_bundle(cfg, name=name)), launch=False)
    return [p.pointer for p in ei.value.problems]


#: (path in config, clean value, hostile value, pointer expected)
STRINGS = [
    (["hostname"], "box", "box\0--share-net", "/hostname"),
    (["hostname"], "box", "../../x", "/hostname"),
    (["hostname"], "box", "a\nb", "/hostname"),
    (["hostname"], "box", "x" * 65, "/hostname"),
    (["hostname"], "box", "b\ud800x", "/hostname"),
    (["process", "args", 0], "sh", "sh\0--bind", "/process/args/0"),
    (["process", "cwd"], "/", "/\0--bind", "/process/cwd"),
    (["process", "cwd"], "/", "tmp", "/process/cwd"),
    (["mounts", 0, "destination"], "/proc", "/proc\0/x", "/mounts/0/destination"),
    (["mounts", 0, "destination"], "/proc", "/a/../proc", "/mounts/0/destination"),
    (["mounts", 2, "destination"], "/tmp", "/tmp\n--bind", "/mounts/2/destination"),
    (["mounts", 3, "source"], "storage", "stor\tage", "/mounts/3/source"),
    (["root", "path"], "rootfs", "rootfs\n", "/root/path"),
    (["linux", "readonlyPaths", 0], "/proc/bus", "/proc/bus\x7f", "/linux/readonlyPaths/0"),
    (["mounts", 1, "options", 0], "nosuid", "mode=755,uid=0", "/mounts/1/options/0"),
    (["mounts", 1, "options", 0], "nosuid", "mode=75x5", "/mounts/1/options/0"),
    (["mounts", 1, "options", 0], "nosuid", "size=12abc", "/mounts/1/options/0"),
    (["mounts", 1, "options", 0], "nosuid", "mode=77777", "/mounts/1/options/0"),
    (["linux", "cgroupsPath"], "/g/sb", "/g/../../../x", "/linux/cgroupsPath"),
    (["linux", "cgroupsPath"], "/g/sb", "/g/\nsb", "/linux/cgroupsPath"),
    (["linux", "maskedPaths", 0], "/proc/kcore", "/proc/../etc/shadow", "/linux/maskedPaths/0"),
    (
        ["linux", "sysctl"],
        {"net.ipv4.ip_forward": "1"},
        {"net.ipv4.ip_forward": "1\n0"},
        "/linux/sysctl/net.ipv4.ip_forward",
    ),
    (["annotations", "x\0y"], "", "", "/annotations/x\0y"),
    (["annotations", "sandbox-shim.port"], "8080", "70000", "/annotations/sandbox-shim.port"),
]


@pytest.mark.parametrize(
    ("path", "clean", "bad", "pointer"), STRINGS, ids=[s[3] + ":" + repr(s[2])[:20] for s in STRINGS]
)
def test_hostile_string_is_refused_with_its_pointer(make_bundle, path, clean, bad, pointer) -> None:
    if path[0] == "annotations" and "\0" in path[1]:
        ctl = base_config()
        evil = base_config()
        evil["annotations"] = {path[1]: "v"}
    else:
        ctl = _set(base_config(), path, clean)
        evil = _set(base_config(), path, bad)
    load(str(make_bundle(ctl, name="ctl")), launch=False)  # control: the clean value validates
    assert pointer in _pointers(make_bundle, evil, "evil")


def test_validate_cli_says_invalid_for_a_nul_in_a_mount_option(make_bundle, tmp_path: Path) -> None:
    cfg = base_config()
    cfg["mounts"][1]["options"] = ["nosuid", "mode=1777"]
    b = make_bundle(cfg, name="ctl")
    assert run_shim(tmp_path / "st", "validate", "--bundle", str(b)).returncode == 0  # control
    cfg["mounts"][1]["options"] = ["nosuid", "mode=1777\0--bind\0/\0/host"]
    b = make_bundle(cfg, name="evil")
    r = run_shim(tmp_path / "st", "validate", "--bundle", str(b))
    assert r.returncode == 3 and "/mounts/1/options/1" in r.stderr and "NUL" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


#: (path, largest valid, smallest invalid)
NUMBERS = [
    (["process", "user", "uid"], 4294967294, 4294967295),
    (["process", "user", "uid"], 4294967294, 2**32),
    (["process", "user", "gid"], 4294967294, 2**32),
    (["linux", "resources", "memory", "limit"], 2**63 - 1, 2**64 + 2**20),
    (["linux", "resources", "memory", "limit"], -1, -2),
    (["linux", "resources", "pids", "limit"], 2**63 - 1, 2**63),
    (["linux", "resources", "cpu", "quota"], 2**63 - 1, 2**63),
    (["linux", "resources", "cpu", "shares"], 2**64 - 1, 2**64),
    (["process", "rlimits", 0, "hard"], 2**64 - 1, 2**64),
    (["process", "user", "umask"], 0o777, 0o1000),
    (["process", "consoleSize", "height"], 65535, 65536),
    (["hooks", "prestart", 0, "timeout"], 2**31 - 1, 2**31),
]


@pytest.mark.parametrize(
    ("path", "ok", "bad"), NUMBERS, ids=["/".join(map(str, n[0])) + f"={n[2]}" for n in NUMBERS]
)
def test_number_out_of_its_spec_range_is_refused(make_bundle, path, ok, bad) -> None:
    def cfg_with(v: int) -> dict[str, Any]:
        c = base_config()
        c["process"]["rlimits"] = [{"type": "RLIMIT_NOFILE", "soft": 1024, "hard": 2**20}]
        c["hooks"] = {"prestart": [{"path": "/bin/true", "timeout": 5}]}
        if path[-1] == "hard":
            c["process"]["rlimits"][0]["soft"] = 1
        if path[-1] == "gid":  # uid 0 with another gid needs CAP_SETGID (credentials.py)
            c["process"]["capabilities"] = {k: ["CAP_SETGID"] for k in ("bounding", "effective", "permitted")}
        return _set(c, path, v)

    load(str(make_bundle(cfg_with(ok), name="ctl")), launch=False)  # control: the edge of the range
    pointer = "".join("/" + str(p) for p in path)
    assert pointer in _pointers(make_bundle, cfg_with(bad), "evil")


def test_rlimit_soft_above_hard_is_refused(make_bundle) -> None:
    cfg = base_config()
    cfg["process"]["rlimits"] = [{"type": "RLIMIT_NOFILE", "soft": 10, "hard": 10}]
    load(str(make_bundle(cfg, name="ctl")), launch=False)
    cfg["process"]["rlimits"][0]["soft"] = 11
    assert "/process/rlimits/0/soft" in _pointers(make_bundle, cfg, "evil")


def _example(pattern: str) -> tuple[list[Any], Any]:
    """A config path and a value that the ``UNAPPLIED`` entry refuses."""
    parts: list[Any] = [0 if p == "*" else p for p in pattern.strip("/").split("/")]
    examples: dict[str, Any] = {
        "oomScoreAdj": 100,
        "ioPriority": {"class": "IOPRIO_CLASS_IDLE"},
        "scheduler": {"policy": "SCHED_OTHER"},
        "execCPUAffinity": {"initial": "0"},
        "uidMappings": [{"containerID": 0, "hostID": 1000, "size": 1}],
        "gidMappings": [{"containerID": 0, "hostID": 1000, "size": 1}],
        "devices": [{"path": "/dev/fuse", "type": "c", "major": 10, "minor": 229}],
        "swappiness": 10,
        "disableOOMKiller": True,
        "kernel": 1 << 20,
        "kernelTCP": 1 << 20,
        "useHierarchy": True,
        "checkBeforeUpdate": True,
        "realtimeRuntime": 1000,
        "realtimePeriod": 1000,
        "burst": 10,
        "idle": 1,
        "blockIO": {"weight": 10},
        "hugepageLimits": [{"pageSize": "2MB", "limit": 1}],
        "network": {"classID": 1048577},
        "rdma": {"mlx": {"hcaHandles": 1}},
        "unified": {"memory.high": "1"},
        "rootfsPropagation": "shared",
        "mountLabel": "system_u:object_r:container_file_t:s0",
        "intelRdt": {"closID": "x"},
        "personality": {"domain": "LINUX32"},
        "memoryPolicy": {"mode": "MPOL_BIND"},
        "timeOffsets": {"monotonic": {"secs": 1}},
        "netDevices": {"eth1": {}},
    }
    if parts[-1] == "devices" and parts[-2] == "resources":
        return parts, [{"allow": False, "type": "c", "major": 1, "minor": 3, "access": "rwm"}]
    return parts, examples[parts[-1]]


@pytest.mark.parametrize("pattern", [u[0] for u in UNAPPLIED])
def test_unapplied_field_is_refused_never_ignored(make_bundle, pattern: str) -> None:
    path, value = _example(pattern)
    cfg = _set(base_config(), path, value)
    pointer = "".join("/" + str(p) for p in path)
    assert pointer in _pointers(make_bundle, cfg, "evil"), pattern


@pytest.mark.parametrize("name", ["podman-4.3.1-config.json", "runc-1.1.5-spec.json"])
def test_orchestrator_defaults_pass_the_unapplied_table(make_bundle, name: str) -> None:
    """Control of the table: the defaults podman and runc generate (deny-all device rule, propagation,
    atime/noexec options) validate, with a warning naming what bwrap cannot set."""
    path = SHARED / "testdata" / "configs" / name
    if not path.exists():
        pytest.skip(f"{path} is not present")
    cfg = json.loads(path.read_text())
    cfg["root"]["path"] = "rootfs"
    spec = load(str(make_bundle(cfg, name="orch")), launch=False)
    assert any("not applied" in w.message for w in spec.warnings)


def test_unknown_mount_option_is_refused(make_bundle) -> None:
    cfg = base_config()
    load(str(make_bundle(copy.deepcopy(cfg), name="ctl")), launch=False)
    cfg["mounts"][1]["options"] = ["nosuid", "shared"]
    assert "/mounts/1/options/1" in _pointers(make_bundle, cfg, "evil")


def test_more_path_entries_than_the_limit_are_refused(make_bundle) -> None:
    cfg = base_config()
    extra = MAX_PATH_ENTRIES - len(cfg["mounts"]) - len(cfg["linux"].get("readonlyPaths") or [])
    cfg["linux"]["maskedPaths"] = [f"/proc/m{i}" for i in range(extra)]
    load(str(make_bundle(cfg, name="ctl")), launch=False)  # control: exactly at the limit
    cfg["linux"]["maskedPaths"].append("/proc/one-more")
    assert "/mounts" in _pointers(make_bundle, cfg, "evil")


# -- item 7: nothing the runtime reads later is writable from inside -----------------------------


def test_rootfs_holding_the_bundle_is_refused_unless_read_only(make_bundle) -> None:
    cfg = base_config()
    cfg["root"] = {"path": ".", "readonly": True}
    load(str(make_bundle(cfg, name="ctl")))  # control: read-only, the tenant cannot rewrite config.json
    cfg["root"]["readonly"] = False
    assert "/root/path" in _pointers(make_bundle, cfg, "evil")
    cfg["root"] = {"path": "..", "readonly": False}
    assert "/root/path" in _pointers(make_bundle, cfg, "evil2")


def test_writable_bind_of_the_bundle_or_a_hook_is_refused(make_bundle, tmp_path: Path) -> None:
    hook_dir = tmp_path / "hooks"
    hook_dir.mkdir()
    (hook_dir / "h").write_text("#!/bin/sh\ntrue\n")
    cfg = base_config()
    cfg["hooks"] = {"poststop": [{"path": str(hook_dir / "h")}]}
    cfg["mounts"].append(
        {"destination": "/h", "type": "bind", "source": str(hook_dir), "options": ["rbind", "ro"]}
    )
    load(str(make_bundle(copy.deepcopy(cfg), name="ctl")))  # control: read-only bind of the hook's directory
    cfg["mounts"][-1]["options"] = ["rbind"]
    assert f"/mounts/{len(cfg['mounts']) - 1}/source" in _pointers(make_bundle, cfg, "evil")
    cfg["mounts"][-1]["source"] = "."
    assert f"/mounts/{len(cfg['mounts']) - 1}/source" in _pointers(make_bundle, cfg, "evil2")


def test_bind_of_the_hosts_proc_is_refused(make_bundle) -> None:
    cfg = base_config()
    cfg["mounts"].append({"destination": "/x", "type": "bind", "source": "/etc", "options": ["rbind", "ro"]})
    load(str(make_bundle(copy.deepcopy(cfg), name="ctl")))
    cfg["mounts"][-1]["source"] = "/proc"
    assert f"/mounts/{len(cfg['mounts']) - 1}/source" in _pointers(make_bundle, cfg, "evil")


def test_hostname_without_a_uts_namespace_is_refused_not_ignored(make_bundle) -> None:
    cfg = base_config()
    load(str(make_bundle(copy.deepcopy(cfg), name="ctl")), launch=False)  # control: with its uts namespace
    cfg["linux"]["namespaces"] = [n for n in cfg["linux"]["namespaces"] if n["type"] != "uts"]
    cfg["domainname"] = "example"
    got = _pointers(make_bundle, cfg, "evil")
    assert "/hostname" in got and "/domainname" in got


def test_hostname_in_the_hosts_joined_uts_namespace_is_refused(make_bundle) -> None:
    from sandbox_shim.platforms.linux.bwrap import Fds, build_args
    from sandbox_shim.platforms.linux.plan import make_plan

    cfg = base_config()
    b = make_bundle(copy.deepcopy(cfg), name="ctl")
    assert "--hostname" in build_args(make_plan(load(str(b)), "t"), Fds(5, 6))  # control: own uts
    for n in cfg["linux"]["namespaces"]:
        if n["type"] == "uts":
            n["path"] = "/proc/self/ns/uts"  # the runtime's own: the host's
    with pytest.raises(BundleInvalid, match="host's"):
        build_args(make_plan(load(str(make_bundle(cfg, name="evil"))), "t"), Fds(5, 6))


def test_additional_gids_in_a_user_namespace_are_refused(make_bundle) -> None:
    cfg = base_config()
    cfg["process"]["user"]["additionalGids"] = [5]
    load(str(make_bundle(copy.deepcopy(cfg), name="ctl")), launch=False)  # control: applied (no userns)
    cfg["linux"]["namespaces"].append({"type": "user"})
    assert "/process/user/additionalGids" in _pointers(make_bundle, cfg, "evil")


def test_linux_devices_only_the_standard_nodes_are_accepted(make_bundle) -> None:
    cfg = base_config()
    cfg["linux"]["devices"] = [{"path": "/dev/null", "type": "c", "major": 1, "minor": 3, "fileMode": 0o666}]
    allow = {"allow": True, "type": "c", "major": 1, "minor": 3, "access": "rwm"}
    cfg["linux"]["resources"]["devices"] = [{"allow": False, "access": "rwm"}, allow]
    load(str(make_bundle(copy.deepcopy(cfg), name="ctl")), launch=False)  # control: bwrap's /dev has it
    cfg["linux"]["devices"].append({"path": "/dev/kmsg", "type": "c", "major": 1, "minor": 11})
    assert "/linux/devices/1" in _pointers(make_bundle, cfg, "evil")


def test_hook_argument_or_env_naming_a_tenant_writable_file_is_refused(make_bundle) -> None:
    cfg = base_config()
    b = make_bundle(copy.deepcopy(cfg), name="probe")
    host_script = b.parent / "hook.sh"
    host_script.write_text("true\n")
    cfg["hooks"] = {
        "poststop": [
            {"path": "/bin/sh", "args": ["sh", str(host_script)], "env": ["LD_PRELOAD=/usr/lib/x.so"]}
        ]
    }
    load(str(make_bundle(copy.deepcopy(cfg), name="ctl")))  # control: the script lies outside storage/
    evil = copy.deepcopy(cfg)
    script = b.parent / "evil" / "storage" / "hook.sh"
    evil["hooks"]["poststop"][0]["args"][1] = str(script)  # need not exist yet: the tenant makes it
    assert "/hooks/poststop/0/args/1" in _pointers(make_bundle, evil, "evil")
    rel = copy.deepcopy(cfg)
    rel["hooks"]["poststop"][0]["args"][1] = "storage/hook.sh"  # relative to the bundle (hook cwd)
    assert "/hooks/poststop/0/args/1" in _pointers(make_bundle, rel, "evil2")
    opt = copy.deepcopy(cfg)
    script = b.parent / "evil3" / "storage" / "hook.sh"
    opt["hooks"]["poststop"][0]["args"][1:] = ["-c", '. "$F"', f"--rcfile={script}"]
    assert "/hooks/poststop/0/args/3" in _pointers(make_bundle, opt, "evil3")
    env = copy.deepcopy(cfg)
    env["hooks"]["poststop"][0]["env"] = [f"BASH_ENV={b.parent / 'evil4' / 'storage' / 'x'}"]
    assert "/hooks/poststop/0/env/0" in _pointers(make_bundle, env, "evil4")
    lst = copy.deepcopy(cfg)
    lst["hooks"]["poststop"][0]["env"] = [f"LD_PRELOAD=/usr/lib/x.so:{b.parent / 'evil5' / 'storage' / 'x'}"]
    assert "/hooks/poststop/0/env/0" in _pointers(make_bundle, lst, "evil5")
    rw_root = copy.deepcopy(cfg)
    rw_root["root"]["readonly"] = False
    rw_root["hooks"]["poststop"][0]["args"][1] = "rootfs/bin/hook"
    assert "/hooks/poststop/0/args/1" in _pointers(make_bundle, rw_root, "evil6")


def test_hook_argument_in_storage_is_refused_at_create(make_bundle, state_root) -> None:
    cfg = base_config()
    b = make_bundle(copy.deepcopy(cfg), name="b")
    cfg["hooks"] = {"poststop": [{"path": "/bin/sh", "args": ["sh", str(b / "storage" / "hook.sh")]}]}
    (b / "config.json").write_text(json.dumps(cfg))
    r = run_shim(state_root, "create", "--bundle", str(b), "hk")
    assert r.returncode != 0 and "/hooks/poststop/0/args/1" in r.stderr
    assert not (state_root / "hk").exists()


def test_bind_of_a_parent_of_the_hosts_kernel_mounts_is_refused(make_bundle, tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    cfg = base_config()
    cfg["mounts"].append(
        {"destination": "/tmp/x", "type": "bind", "source": str(plain), "options": ["rbind", "ro"]}
    )
    load(str(make_bundle(copy.deepcopy(cfg), name="ctl")))  # control: a plain directory binds
    n = len(cfg["mounts"]) - 1
    for i, src in enumerate(["/", "/dev", "/dev/pts"]):  # recursive: the host's /proc, /sys, devtmpfs
        cfg["mounts"][n]["source"] = src
        got = _pointers(make_bundle, cfg, f"evil{i}")
        assert f"/mounts/{n}/source" in got, src


def test_rootfs_holding_the_hosts_kernel_mounts_is_refused(make_bundle) -> None:
    cfg = base_config()
    cfg["root"] = {"path": "/", "readonly": True}
    assert "/root/path" in _pointers(make_bundle, cfg, "evil")


@pytest.mark.parametrize("path", ["/proc/self/status", "/proc/net", "/proc/1", "/proc/thread-self/x"])
def test_readonly_pid_dependent_proc_entry_is_refused_at_validation(make_bundle, path: str) -> None:
    cfg = base_config()
    cfg["linux"]["readonlyPaths"] = ["/proc/sys"]
    load(str(make_bundle(copy.deepcopy(cfg), name="ctl")), launch=False)  # control: /proc/sys is fine
    cfg["linux"]["readonlyPaths"].append(path)
    assert "/linux/readonlyPaths/1" in _pointers(make_bundle, cfg, "evil")
