"""The cgroup managers field by field: every ``linux.resources`` field applied or refused with its pointer.

File-level checks run on a fake cgroup2 tree (directories with the files the kernel would make); the
v1 checks and the device filters run on this host's real hierarchies when the detection the product
uses finds them (``cgroups.detect``), and are skipped with that reason elsewhere.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import base_config, cgroup_dirs, run_shim
from sandbox_shim import control
from sandbox_shim.errors import BundleInvalid, LaunchFailed
from sandbox_shim.platforms.linux.cgroups import Limits, devices
from sandbox_shim.platforms.linux.cgroups.detect import Layout, detect, manager
from sandbox_shim.platforms.linux.cgroups.limits import blkio_to_io_weight, shares_to_weight
from sandbox_shim.platforms.linux.cgroups.v2 import V2Manager

MiB = 1 << 20
linux_root = sys.platform.startswith("linux") and os.geteuid() == 0
LAYOUT = detect() if sys.platform.startswith("linux") else Layout()
needs_v1 = pytest.mark.skipif(
    not (linux_root and LAYOUT.version == 1),
    reason=f"needs root and cgroup v1 (detected: version {LAYOUT.version})",
)
needs_cgroup2_mount = pytest.mark.skipif(
    not (linux_root and LAYOUT.v2_mount), reason="needs root and a cgroup2 mount (none in mountinfo)"
)


@pytest.fixture
def fake_v2(tmp_path: Path) -> Path:
    mount = tmp_path / "cgroup2"
    mount.mkdir()
    (mount / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids\n")
    (mount / "cgroup.subtree_control").write_text("")
    return mount


def kernel_files(d: Path, *names: str) -> None:
    """The files the kernel would create in a new v2 cgroup with these controllers."""
    for n in names:
        (d / n).write_text("")


def test_runc_conversions() -> None:
    # runc >= 1.3.2 (quadratic): min, default and max land on v2's min, default and max
    assert [shares_to_weight(s) for s in (2, 1024, 262144, 512, 2048)] == [1, 100, 10000, 59, 174]
    # runc ConvertBlkIOToIOWeightValue: [10..1000] -> [1..10000], linear
    assert [blkio_to_io_weight(w) for w in (10, 500, 1000)] == [1, 4950, 10000]


def test_every_oci_throttle_key_has_its_cgroup_files() -> None:
    """The neutral reader (``resources.THROTTLE_KEYS``) and the managers' file table agree."""
    from sandbox_shim.platforms.linux.cgroups.limits import THROTTLE
    from sandbox_shim.resources import THROTTLE_KEYS

    assert tuple(THROTTLE) == THROTTLE_KEYS
    limits = Limits.from_oci({"blockIO": {k: [{"major": 8, "minor": 0, "rate": 1}] for k in THROTTLE_KEYS}})
    assert sorted(limits.blkio_throttle or {}) == sorted(THROTTLE)


def test_v2_applies_every_field_it_can(fake_v2: Path) -> None:
    m = V2Manager(str(fake_v2), "/sandbox-shim/all")
    m.create(["memory", "pids", "cpu", "io", "hugetlb"])
    d = fake_v2 / "sandbox-shim" / "all"
    kernel_files(
        d,
        "memory.swap.max",
        "cpu.max.burst",
        "cpu.idle",
        "io.weight",
        "io.max",
        "hugetlb.2MB.max",
        "memory.high",
        "memory.oom.group",
    )
    assert set((fake_v2 / "sandbox-shim" / "cgroup.subtree_control").read_text().split()) >= {
        "+io",
        "+hugetlb",
        "+memory",
        "+pids",
        "+cpu",
        "+cpuset",
    }
    resources = {
        "memory": {"limit": 64 * MiB, "swap": 96 * MiB, "reservation": 16 * MiB, "useHierarchy": True},
        "cpu": {
            "shares": 2048,
            "quota": 20000,
            "period": 50000,
            "burst": 1000,
            "idle": 0,
            "cpus": "0",
            "mems": "0",
        },
        "pids": {"limit": 99},
        "blockIO": {
            "weight": 500,
            "throttleReadBpsDevice": [{"major": 8, "minor": 0, "rate": 1048576}],
            "throttleWriteIOPSDevice": [{"major": 8, "minor": 0, "rate": 100}],
        },
        "hugepageLimits": [{"pageSize": "2MB", "limit": 4 * MiB}],
        "unified": {"memory.high": "50331648", "memory.oom.group": "1"},
    }
    m.apply(Limits.from_oci(resources))
    files = (
        "memory.max",
        "memory.swap.max",
        "memory.low",
        "pids.max",
        "cpu.weight",
        "cpu.max",
        "cpu.max.burst",
        "cpu.idle",
        "cpuset.cpus",
        "cpuset.mems",
        "io.weight",
        "io.max",
        "hugetlb.2MB.max",
        "memory.high",
        "memory.oom.group",
    )
    got = {f: (d / f).read_text() for f in files}
    assert got == {
        "memory.max": str(64 * MiB),
        "memory.swap.max": str(32 * MiB),
        "memory.low": str(16 * MiB),
        "pids.max": "99",
        "cpu.weight": "174",
        "cpu.max": "20000 50000",
        "cpu.max.burst": "1000",
        "cpu.idle": "0",
        "cpuset.cpus": "0",
        "cpuset.mems": "0",
        "io.weight": "default 4950",
        "io.max": "8:0 wiops=100",  # the fake file keeps the last write; the kernel merges them
        "hugetlb.2MB.max": str(4 * MiB),
        "memory.high": "50331648",
        "memory.oom.group": "1",
    }


@pytest.mark.parametrize(
    ("resources", "pointer"),
    [
        ({"memory": {"kernel": 1 << 30}}, "/linux/resources/memory/kernel"),
        ({"memory": {"kernelTCP": 1 << 30}}, "/linux/resources/memory/kernelTCP"),
        ({"memory": {"swappiness": 10}}, "/linux/resources/memory/swappiness"),
        ({"memory": {"disableOOMKiller": True}}, "/linux/resources/memory/disableOOMKiller"),
        ({"memory": {"useHierarchy": False}}, "/linux/resources/memory/useHierarchy"),
        ({"memory": {"swap": 1 << 30}}, "/linux/resources/memory/swap"),
        ({"memory": {"limit": 1 << 30, "swap": 1 << 20}}, "/linux/resources/memory/swap"),
        ({"cpu": {"realtimeRuntime": 1000}}, "/linux/resources/cpu/realtimeRuntime"),
        ({"cpu": {"burst": 1000}}, "/linux/resources/cpu/burst"),  # no cpu.max.burst in this cgroup
        ({"blockIO": {"leafWeight": 100}}, "/linux/resources/blockIO/leafWeight"),
        ({"blockIO": {"weight": 100}}, "/linux/resources/blockIO/weight"),  # no io.weight
        ({"hugepageLimits": [{"pageSize": "2MB", "limit": 1}]}, "/linux/resources/hugepageLimits/0/pageSize"),
        (
            {"hugepageLimits": [{"pageSize": "huge", "limit": 1}]},
            "/linux/resources/hugepageLimits/0/pageSize",
        ),
        ({"unified": {"cgroup.procs": "1"}}, "/linux/resources/unified/cgroup.procs"),
        ({"unified": {"../../cgroup.procs": "1"}}, "/linux/resources/unified/..~1..~1cgroup.procs"),
        ({"unified": {"memory.nonexistent": "1"}}, "/linux/resources/unified/memory.nonexistent"),
        ({"unified": {"cpuset.cpus.partition": "root"}}, "/linux/resources/unified/cpuset.cpus.partition"),
    ],
)
def test_v2_refuses_with_the_pointer_and_writes_nothing(fake_v2: Path, resources: dict, pointer: str) -> None:
    m = V2Manager(str(fake_v2), "/sandbox-shim/r")
    m.create([])
    d = fake_v2 / "sandbox-shim" / "r"
    before = sorted(os.listdir(d))
    with pytest.raises(LaunchFailed) as e:
        m.apply(Limits.from_oci({**resources, "pids": {"limit": 5}}))
    assert e.value.line().startswith(pointer + ":"), e.value.line()
    assert sorted(os.listdir(d)) == before  # pids.max (checked fine) was not written either


def test_open_shapes_in_the_schema_are_refused_with_their_pointer() -> None:
    for resources, pointer in (
        (
            {"blockIO": {"throttleReadBpsDevice": [{"major": "8", "minor": 0, "rate": 1}]}},
            "/linux/resources/blockIO/throttleReadBpsDevice/0/major",
        ),
        ({"blockIO": {"weightDevice": "8:0 100"}}, "/linux/resources/blockIO/weightDevice"),
        ({"hugepageLimits": [{"pageSize": "2MB", "limit": -1}]}, "/linux/resources/hugepageLimits/0/limit"),
        ({"hugepageLimits": ["2MB"]}, "/linux/resources/hugepageLimits"),
    ):
        with pytest.raises(LaunchFailed) as e:
            Limits.from_oci(resources)
        assert e.value.line().startswith(pointer + ":"), e.value.line()


def test_v1_refuses_unified_and_what_its_kernel_lacks(tmp_path: Path) -> None:
    mounts = {c: str(tmp_path / c) for c in ("memory", "pids", "cpu", "cpuacct", "freezer")}
    for p in set(mounts.values()):
        os.makedirs(p)
    m = manager("/sandbox-shim/v1", 1, Layout(v1_mounts=mounts))
    m.create(["memory"])
    for resources, pointer in (
        ({"unified": {"memory.high": "1"}}, "/linux/resources/unified"),
        ({"blockIO": {"weight": 100}}, "/linux/resources/blockIO/weight"),
        ({"hugepageLimits": [{"pageSize": "2MB", "limit": 1}]}, "/linux/resources/hugepageLimits/0/pageSize"),
        ({"memory": {"swappiness": 5}}, "/linux/resources/memory/swappiness"),
    ):
        with pytest.raises(LaunchFailed) as e:
            m.apply(Limits.from_oci(resources))
        assert e.value.line().startswith(pointer + ":"), e.value.line()
    with pytest.raises(LaunchFailed, match="^/linux/resources/devices:"):
        m.apply(Limits(devices=[]))


@pytest.mark.skipif(not linux_root, reason="needs root (creates a sandbox)")
def test_a_cgroups_path_that_leaves_the_hierarchy_is_refused(
    make_bundle, state_root: Path, tmp_path: Path
) -> None:
    target = tmp_path / "outside"
    cfg = base_config(["true"])
    cfg["linux"]["cgroupsPath"] = "/../../../../../../.." + str(target)
    cfg["linux"]["resources"] = {"pids": {"limit": 5}}
    r = run_shim(state_root, "create", "--bundle", str(make_bundle(cfg)), "esc")
    assert r.returncode == 3 and "/linux/cgroupsPath:" in r.stderr, r.stderr  # refused at validation
    assert not target.exists() and not (state_root / "esc").exists()
    with pytest.raises(LaunchFailed, match="^/linux/cgroupsPath:"):
        V2Manager("/sys/fs/cgroup", "/a/../b")


def test_nested_parents_are_removed_when_the_last_child_goes(fake_v2: Path) -> None:
    a = V2Manager(str(fake_v2), "/k8s/pod1/a")
    b = V2Manager(str(fake_v2), "/k8s/pod1/b")
    made_a, made_b = a.create([]), b.create([])
    assert made_a == [str(fake_v2 / "k8s"), str(fake_v2 / "k8s" / "pod1"), a.dir]
    assert made_b == [b.dir]  # its parents existed already: not b's to remove
    a.remove(made_a)  # the parents a made still hold b: they stay
    assert not os.path.exists(a.dir) and os.path.isdir(b.dir)
    (fake_v2 / "k8s" / "pod1" / "cgroup.procs").unlink(missing_ok=True)
    b.remove(made_b)
    assert os.path.isdir(fake_v2 / "k8s" / "pod1")  # b did not make them, so b leaves them
    # nesting under a cgroup that holds processes (another container's) is refused, nothing made
    (fake_v2 / "k8s" / "pod1" / "cgroup.procs").write_text("4242\n")
    with pytest.raises(LaunchFailed, match="^/linux/cgroupsPath: .* holds processes"):
        V2Manager(str(fake_v2), "/k8s/pod1/sub/d").create([])
    assert not (fake_v2 / "k8s" / "pod1" / "sub").exists()
    (fake_v2 / "k8s" / "pod1" / "cgroup.procs").write_text("")
    # a parent that existed before the sandbox is never removed
    c = V2Manager(str(fake_v2), "/k8s/pod1/c")
    c.remove(c.create([]))
    assert os.path.isdir(fake_v2 / "k8s" / "pod1")


def test_stats_carry_psi_io_and_group_ooms(fake_v2: Path) -> None:
    m = V2Manager(str(fake_v2), "/sandbox-shim/s")
    m.create([])
    d = fake_v2 / "sandbox-shim" / "s"
    (d / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 2\noom_kill 0\noom_group_kill 1\n")
    (d / "io.stat").write_text(
        "8:0 rbytes=4096 wbytes=8192 rios=1 wios=2 dbytes=0 dios=0\n"
        "8:16 rbytes=1 wbytes=2 rios=1 wios=1 dbytes=0 dios=0\n"
    )
    psi = (
        "some avg10=1.50 avg60=0.25 avg300=0.00 total=12345\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=7\n"
    )
    for res in ("cpu", "memory", "io"):
        (d / f"{res}.pressure").write_text(psi)
    f = control.facts(m)
    assert f.oom_kills == 1 and m.oom_killed()  # a group kill counts as an OOM kill (LimitExceeded memory)
    assert (f.io_read_bytes, f.io_write_bytes) == (4097, 8194)
    ev = control._stats_event("s", f)["data"]
    assert ev["memory"]["psi"] == {
        "some": {"avg10": 1.5, "avg60": 0.25, "avg300": 0.0, "total": 12345},
        "full": {"avg10": 0.0, "avg60": 0.0, "avg300": 0.0, "total": 7},
    }
    assert ev["cpu"]["psi"]["some"]["total"] == 12345 and ev["blkio"]["psi"]["full"]["total"] == 7
    assert ev["blkio"]["ioServiceBytesRecursive"] == [
        {"op": "Read", "value": 4097},
        {"op": "Write", "value": 8194},
    ]


# -- devices ---------------------------------------------------------------------------------------

RULES = [
    {"allow": False, "type": "a", "major": None, "minor": None, "access": "rwm"},
    {"allow": True, "type": "c", "major": 1, "minor": 5, "access": "rwm"},  # /dev/zero
    {"allow": True, "type": "c", "major": 1, "minor": 3, "access": "rwm"},  # /dev/null ...
    {"allow": False, "type": "c", "major": 1, "minor": 3, "access": "r"},
]  # ... but not for reading


def test_device_rules_as_v1_lines_and_refusals() -> None:
    assert devices.v1_lines(RULES) == [
        ("devices.deny", "a"),
        ("devices.deny", "a"),
        ("devices.allow", "c 1:5 rwm"),
        ("devices.allow", "c 1:3 rwm"),
        ("devices.deny", "c 1:3 r"),
    ]
    assert devices.v1_lines([{"allow": True, "type": "b", "major": 8, "minor": None, "access": "r"}])[1] == (
        "devices.allow",
        "b 8:* r",
    )
    for bad, pointer in (
        ({"allow": "yes", "type": "a"}, "/linux/resources/devices/0/allow"),
        ({"allow": True, "type": "x"}, "/linux/resources/devices/0/type"),
        ({"allow": True, "type": "c", "major": -1}, "/linux/resources/devices/0/major"),
        ({"allow": True, "type": "a", "minor": 3}, "/linux/resources/devices/0/minor"),
        ({"allow": True, "type": "c", "access": "rwx"}, "/linux/resources/devices/0/access"),
    ):
        with pytest.raises(LaunchFailed) as e:
            devices.validate([bad])
        assert e.value.line().startswith(pointer + ":")


def open_results(cgroup_procs: list[str], paths: list[str]) -> dict[str, str]:
    """Open each path read-only and write-only from a child placed in the cgroups first."""
    code = (
        "import json, os, sys\n"
        "for f in filter(None, sys.argv[1].split(',')):\n"
        "    open(f, 'w').write(str(os.getpid()))\n"
        "out = {}\n"
        "for p in sys.argv[2:]:\n"
        "    for mode, flag in (('r', os.O_RDONLY), ('w', os.O_WRONLY)):\n"
        "        try:\n"
        "            os.close(os.open(p, flag)); out[p + ':' + mode] = 'ok'\n"
        "        except OSError as e:\n"
        "            out[p + ':' + mode] = e.strerror\n"
        "print(json.dumps(out))\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, ",".join(cgroup_procs), *paths],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[dict[str, str]]:
    """Device nodes made with mknod(2) for this test: c 1:5 (zero) and c 1:3 (null)."""
    made = {"zero": str(tmp_path / "zero"), "null": str(tmp_path / "null")}
    try:
        os.mknod(made["zero"], 0o666 | 0o020000, os.makedev(1, 5))
        os.mknod(made["null"], 0o666 | 0o020000, os.makedev(1, 3))
    except PermissionError as e:
        pytest.skip(f"cannot mknod here: {e}")
    control = open_results([], list(made.values()))
    if control != {f"{p}:{m}": "ok" for p in made.values() for m in "rw"}:
        pytest.skip(f"device nodes cannot be opened in {tmp_path} (nodev?): {control}")
    yield made


def expected(made: dict[str, str]) -> dict[str, str]:
    return {
        f"{made['zero']}:r": "ok",
        f"{made['zero']}:w": "ok",
        f"{made['null']}:r": "Operation not permitted",
        f"{made['null']}:w": "ok",
    }


@needs_v1
def test_v1_devices_controller_denies_what_the_rules_deny(nodes: dict[str, str]) -> None:
    m = manager(f"/sandbox-shim/test-dev-{uuid.uuid4().hex[:8]}", 1)
    created = m.create(["devices"])
    try:
        m.apply(Limits(devices=RULES))
        procs = [os.path.join(d, "cgroup.procs") for d in m.dirs() if os.path.isdir(d)]
        assert open_results(procs, list(nodes.values())) == expected(nodes)
    finally:
        m.remove(created)
    assert not any(os.path.isdir(d) for d in m.dirs())


@needs_cgroup2_mount
def test_v2_device_program_loads_attaches_and_denies(nodes: dict[str, str]) -> None:
    # a load that succeeds means the kernel's verifier accepted the generated program
    block = {"allow": True, "type": "b", "major": 8, "minor": None, "access": "r"}
    for rules in (RULES, [], RULES[:1], [block]):
        os.close(devices.load(rules))
    d = os.path.join(LAYOUT.v2_mount, f"sandbox-shim-test-dev-{uuid.uuid4().hex[:8]}")
    os.mkdir(d)
    try:
        devices.attach(d, RULES)
        assert open_results([os.path.join(d, "cgroup.procs")], list(nodes.values())) == expected(nodes)
        # default deny: a rule list that allows nothing denies everything
        d2 = os.path.join(d, "none")
        os.mkdir(d2)
        try:
            devices.attach(d2, [])
            res = open_results([os.path.join(d2, "cgroup.procs")], [nodes["zero"]])
            assert set(res.values()) == {"Operation not permitted"}
        finally:
            os.rmdir(d2)
    finally:
        os.rmdir(d)


# -- the systemd driver ----------------------------------------------------------------------------


def test_systemd_paths_expand_as_runc() -> None:
    from sandbox_shim.platforms.linux.cgroups.systemd import (
        cpuset_bits,
        expand_slice,
        parse_path,
        quota_per_sec,
    )

    assert (
        expand_slice("kubepods-besteffort-pod1.slice")
        == "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice"
    )
    assert expand_slice("system.slice") == "/system.slice" and expand_slice("-.slice") == ""
    assert parse_path("kubepods-pod1.slice:cri-containerd:abc", "x") == (
        "kubepods-pod1.slice",
        "cri-containerd-abc.scope",
    )
    assert parse_path("", "id1") == ("system.slice", "sandbox-shim-id1.scope")
    assert parse_path(":p:n", "x") == ("system.slice", "p-n.scope")
    for bad in (
        "/sys/fs/cgroup/x",
        "a:b",
        "a-.slice:p:n",
        "a--b.slice:p:n",
        "x.scope:p:n",
        "s.slice:p:n/../x",
        "s.slice:p:y.slice",
        "s.slice:p:",  # no name: "p-.scope" would be one unit for every sandbox given that path
        "::",
        "p.slice::_cpu",  # names systemd escapes in the cgroup tree (the directory is not the path)
        "a.slice::cpu",
        "a.slice::.hidden",
        "memory.slice:p:n",
        "system.slice::init",  # systemd's own scope
    ):
        with pytest.raises(BundleInvalid) as e:  # a bundle problem (exit 3), with its pointer
            parse_path(bad, "x")
        assert e.value.problems[0].pointer == "/linux/cgroupsPath", bad
    assert cpuset_bits("0-3,9") == bytes([0x0F, 0x02]) and cpuset_bits("0") == b"\x01"
    assert quota_per_sec(50000, 100000) == 500000 and quota_per_sec(12345, 100000) == 130000


def test_systemd_unit_properties_carry_what_systemd_rewrites() -> None:
    """Every file systemd writes when it realizes a unit is set as the unit's property too (runc's
    list), so a daemon-reload or a later property change cannot undo it: the blkio weight as
    IOWeight (runc's linear conversion), and the unified memory/pids/cpu files ("max" = infinity)."""
    from sandbox_shim.platforms.linux.cgroups.systemd import unit_properties

    props = dict(
        unit_properties(
            Limits(
                memory_limit=64 * MiB,
                blkio_weight=500,
                unified={"memory.high": "48000000", "pids.max": "max", "memory.oom.group": "1"},
            )
        )
    )
    assert props["MemoryMax"] == ("t", 64 * MiB)
    assert props["IOWeight"] == ("t", 4950)
    assert props["MemoryHigh"] == ("t", 48000000)
    assert props["TasksMax"] == ("t", (1 << 64) - 1)
    assert "memory.oom.group" not in str(props)  # not a systemd property: written to the file only
    props = dict(unit_properties(Limits(unified={"cpu.max": "30000 100000", "io.weight": "default 250"})))
    assert props["CPUQuotaPerSecUSec"] == ("t", 300000) and props["CPUQuotaPeriodUSec"] == ("t", 100000)
    assert props["IOWeight"] == ("t", 250)
    assert dict(unit_properties(Limits(unified={"cpu.idle": "1"})))["CPUWeight"] == ("t", 0)


def test_a_systemd_record_stops_the_scope_and_owns_no_slice(tmp_path: Path) -> None:
    """What create records before the scope exists says "systemd" (delete --force after a kill -9 then
    stops the unit through systemd, never only rmdirs it) and lists no parent: slices are systemd's."""
    from sandbox_shim.platforms.linux.cgroups.systemd import SystemdManager
    from sandbox_shim.platforms.linux.residue import planned

    cg = SystemdManager(str(tmp_path), "kubepods-besteffort-pod9.slice:cri-containerd:k1")
    rec = planned(cg, "kubepods-besteffort-pod9.slice:cri-containerd:k1")
    assert rec["systemd"] is True and rec["parents"] == []
    pod = "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod9.slice"
    assert rec["planned"] == [str(tmp_path / pod / "cri-containerd-k1.scope")]
    control_rec = planned(V2Manager(str(tmp_path), "/a/b/c"), "/a/b/c")  # cgroupfs: the parents are ours
    assert control_rec["systemd"] is False


def test_a_device_line_the_kernel_refuses_names_its_field(fake_v2: Path) -> None:
    """A per-device weight or throttle the kernel refuses (a device whose scheduler keeps no per-device
    weight: EOPNOTSUPP) is refused with the config field's pointer, not a bare file error."""
    cg = V2Manager(str(fake_v2), "/w")
    cg.create(["io"])
    kernel_files(fake_v2 / "w", "io.max")
    (fake_v2 / "w" / "io.weight").mkdir()  # a write there fails, as the kernel's refusal would
    with pytest.raises(LaunchFailed, match=r"^/linux/resources/blockIO/weightDevice/1: ") as e:
        cg.apply(Limits(blkio_weight_device=[(8, 0, None, None), (8, 16, 500, None)]))
    assert "8:16" in str(e.value)


def test_a_scope_made_again_under_the_name_is_not_this_sandboxs(tmp_path: Path) -> None:
    """Once the scope's directory inode is recorded, a directory made again under the same name (a new
    scope of that name, after systemd dropped this one) is invisible to the manager: no pids, no kill,
    no limits.  Control: the recorded directory itself is seen."""
    from sandbox_shim.platforms.linux.cgroups.systemd import SystemdManager

    scope = tmp_path / "system.slice" / "p-n.scope"
    scope.mkdir(parents=True)
    (scope / "cgroup.procs").write_text("4242\n")
    cg = SystemdManager(str(tmp_path), "system.slice:p:n", token="t", ino=scope.stat().st_ino)
    assert cg.dir == str(scope) and cg.pids() == [4242]
    again = scope.parent / "again"
    again.mkdir()  # someone else's scope of the same name (made while the old one existed: a new inode)
    (again / "cgroup.procs").write_text("777\n")
    (scope / "cgroup.procs").unlink()
    scope.rmdir()
    again.rename(scope)
    assert not os.path.exists(cg.dir) and cg.pids() == []
    with pytest.raises(LaunchFailed, match="no longer this sandbox's scope"):
        cg.apply(Limits(memory_limit=1 << 26))
    (scope / "cgroup.procs").unlink()
    scope.rmdir()  # gone altogether: still not this sandbox's (a later scope would be another)
    assert cg.dir != str(scope) and cg.pids() == []
    with pytest.raises(LaunchFailed, match="no longer this sandbox's scope"):
        cg.apply(Limits(memory_limit=1 << 26))


def _systemd_probe() -> tuple[bool, str]:
    from sandbox_shim.platforms.linux.cgroups.systemd import probe

    return probe() if sys.platform.startswith("linux") else (False, "not Linux")


SYSTEMD_OK, SYSTEMD_WHY = _systemd_probe()


@pytest.mark.skipif(not linux_root or SYSTEMD_OK, reason="systemd is usable here: the scope test runs")
def test_systemd_cgroup_is_refused_without_systemd(make_bundle, state_root: Path) -> None:
    bundle = make_bundle(base_config(["true"]))
    r = run_shim(state_root, "--systemd-cgroup", "create", "--bundle", str(bundle), "sd1")
    assert r.returncode != 0
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "cgroup.systemd" in lines[0] and SYSTEMD_WHY in lines[0], r.stderr
    assert r.returncode == 4  # CapabilityUnavailable: refused before anything was made
    assert "Traceback" not in r.stderr
    assert not (state_root / "sd1").exists()
    assert cgroup_dirs("sd1") == []
    feats = json.loads(run_shim(state_root, "features").stdout)
    assert feats["linux"]["cgroup"]["systemd"] is False


@pytest.mark.skipif(not (linux_root and SYSTEMD_OK), reason=f"needs systemd as PID 1: {SYSTEMD_WHY}")
def test_systemd_scope_holds_the_sandbox_and_goes_at_delete(make_bundle, state_root: Path) -> None:
    from sandbox_shim.platforms.linux.cgroups.systemd import call, connect

    cfg = base_config(["sleep", "30"])
    sid = f"sd-{uuid.uuid4().hex[:8]}"
    cfg["linux"]["cgroupsPath"] = f"sandboxshimtest-a.slice:sbx:{sid}"
    cfg["linux"]["resources"] = {
        "memory": {"limit": 64 * MiB},
        "pids": {"limit": 50},
        "cpu": {"quota": 50000, "period": 100000},
    }
    bundle = make_bundle(cfg)
    r = run_shim(state_root, "--systemd-cgroup", "create", "--bundle", str(bundle), sid)
    assert r.returncode == 0, r.stderr
    scope = Path(LAYOUT.v2_mount) / "sandboxshimtest.slice" / "sandboxshimtest-a.slice" / f"sbx-{sid}.scope"
    try:
        assert scope.is_dir() and (scope / "memory.max").read_text().strip() == str(64 * MiB)
        assert (scope / "pids.max").read_text().strip() == "50"
        state = json.loads(run_shim(state_root, "state", sid).stdout)
        assert str(state["pid"]) in (scope / "cgroup.procs").read_text().split()
        conn = connect()
        try:
            (path,) = call(conn, "GetUnit", "s", (f"sbx-{sid}.scope",))
            (val,) = call(
                conn,
                "Get",
                "ss",
                ("org.freedesktop.systemd1.Scope", "MemoryMax"),
                path=path,
                iface="org.freedesktop.DBus.Properties",
            )
            assert val[1] == 64 * MiB  # set as a unit property, as runc does
        finally:
            conn.close()
        assert run_shim(state_root, "start", sid).returncode == 0
    finally:
        d = run_shim(state_root, "delete", "--force", sid)
    assert d.returncode == 0, d.stderr
    assert not scope.exists()


def _unit(name: str, prop: str = "ActiveState", iface: str = "org.freedesktop.systemd1.Unit") -> object:
    """A property of unit ``name`` as systemd reports it, or "gone" when systemd has no such unit."""
    from sandbox_shim.platforms.linux.cgroups.systemd import connect, unit_property

    conn = connect()
    try:
        value = unit_property(conn, name, iface, prop)
        return "gone" if value is None else value
    finally:
        conn.close()


@pytest.mark.skipif(not (linux_root and SYSTEMD_OK), reason=f"needs systemd as PID 1: {SYSTEMD_WHY}")
def test_kill_9_of_a_systemd_create_leaves_no_unit(make_bundle, state_root: Path) -> None:
    """create killed (SIGKILL) at each step from the D-Bus connection on: delete --force stops the scope
    through systemd (no unit left, active or not), removes no slice, and the id and path are reusable.
    Control: the uninterrupted create made the scope."""
    cfg = base_config(["sleep", "30"])
    sid = f"sdk-{uuid.uuid4().hex[:6]}"
    cfg["linux"]["cgroupsPath"] = f"sandboxshimtest-k.slice:sbx:{sid}"
    cfg["linux"]["resources"] = {"memory": {"limit": 64 * MiB}}
    bundle = make_bundle(cfg)
    unit, slice_dir = f"sbx-{sid}.scope", Path(LAYOUT.v2_mount) / "sandboxshimtest.slice"
    r = run_shim(state_root, "--systemd-cgroup", "create", "--bundle", str(bundle), sid)
    assert r.returncode == 0, r.stderr
    assert _unit(unit) == "active"  # the control: create made the scope
    assert run_shim(state_root, "delete", "--force", sid).returncode == 0 and _unit(unit) != "active"
    count = state_root.parent / "count"  # counted with the capability report cached, as the loop runs
    env = dict(os.environ, SANDBOX_SHIM_CRASH_AT="1000000", SANDBOX_SHIM_CRASH_COUNT=str(count))
    r = run_shim(state_root, "--systemd-cgroup", "create", "--bundle", str(bundle), sid, env=env)
    assert r.returncode == 0, r.stderr
    assert run_shim(state_root, "delete", "--force", sid).returncode == 0
    events = count.read_text().splitlines()
    first = next(i for i, e in enumerate(events) if e.split()[-1] == "socket.connect")
    for k in range(first + 1, min(len(events), first + 12) + 1):
        env = dict(os.environ, SANDBOX_SHIM_CRASH_AT=str(k))
        r = run_shim(state_root, "--systemd-cgroup", "create", "--bundle", str(bundle), sid, env=env)
        assert r.returncode == -9, (k, r.returncode, r.stderr)
        d = run_shim(state_root, "delete", "--force", sid)
        assert d.returncode == 0, (k, d.stderr)
        assert _unit(unit) in ("gone", "inactive"), (k, _unit(unit))
        assert not (slice_dir / "sandboxshimtest-k.slice" / unit).exists(), k
    assert slice_dir.is_dir()  # the slice is systemd's: never removed by us
    r = run_shim(state_root, "--systemd-cgroup", "create", "--bundle", str(bundle), sid)
    assert r.returncode == 0, r.stderr
    assert run_shim(state_root, "delete", "--force", sid).returncode == 0


@pytest.mark.skipif(not (linux_root and SYSTEMD_OK), reason=f"needs systemd as PID 1: {SYSTEMD_WHY}")
def test_a_foreign_unit_with_the_scope_name_is_never_stopped(make_bundle, state_root: Path) -> None:
    """Someone else's scope with the name a sandbox's scope would take (in another slice, so the
    sandbox's create reaches StartTransientUnit): create fails (UnitExists), and neither that cleanup nor
    delete --force after a create killed at each step from its D-Bus connection on kills or stops it
    (a unit is the sandbox's only if it carries the token the sandbox recorded).  Control: the foreign
    scope runs throughout; a unit of ours is stopped (the crash test above)."""
    sid = f"sdf-{uuid.uuid4().hex[:6]}"
    unit = f"coll-{sid}.scope"
    foreign = subprocess.Popen(
        ["systemd-run", "--scope", f"--unit={unit}", "--slice=sandboxshimtest-other.slice", "sleep", "1000"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while _unit(unit) != "active":
            assert time.monotonic() < deadline, "the foreign scope did not start"
            time.sleep(0.1)
        cfg = base_config(["sleep", "30"])
        cfg["linux"]["cgroupsPath"] = f"system.slice:coll:{sid}"
        bundle = make_bundle(cfg)
        count = state_root.parent / "count"
        env = dict(os.environ, SANDBOX_SHIM_CRASH_AT="1000000", SANDBOX_SHIM_CRASH_COUNT=str(count))
        r = run_shim(state_root, "--systemd-cgroup", "create", "--bundle", str(bundle), sid, env=env)
        assert r.returncode == 9 and "UnitExists" in r.stderr, r.stderr
        assert run_shim(state_root, "delete", "--force", sid).returncode == 0
        assert _unit(unit) == "active" and foreign.poll() is None
        events = count.read_text().splitlines()
        first = next(i for i, e in enumerate(events) if e.split()[-1] == "socket.connect")
        for k in range(first + 1, len(events) + 1):
            env = dict(os.environ, SANDBOX_SHIM_CRASH_AT=str(k))
            run_shim(state_root, "--systemd-cgroup", "create", "--bundle", str(bundle), sid, env=env)
            assert run_shim(state_root, "delete", "--force", sid).returncode == 0, k
            assert _unit(unit) == "active" and foreign.poll() is None, k
    finally:
        foreign.kill()
        foreign.wait()


@pytest.mark.skipif(not (linux_root and SYSTEMD_OK), reason=f"needs systemd as PID 1: {SYSTEMD_WHY}")
def test_delete_of_a_stopped_sandbox_spares_the_scope_that_took_its_name(
    make_bundle, state_root: Path
) -> None:
    """Sandbox A ends (systemd drops its emptied scope); B — same id in another state root, default
    cgroupsPath, and C — same explicit cgroupsPath in this root, then run.  Deleting A kills neither.
    Control: B and C run before A's delete; A's own delete still removes A."""
    sid = f"sdn-{uuid.uuid4().hex[:6]}"
    other = state_root.parent / "other-root"
    other.mkdir()
    done = make_bundle(base_config(["true"]), name="a")
    runs = make_bundle(base_config(["sleep", "60"]), name="b")
    cfg = base_config(["true"])
    cfg["linux"]["cgroupsPath"] = f"sandboxshimtest-n.slice:pp:{sid}"
    done_named = make_bundle(cfg, name="an")
    cfg = base_config(["sleep", "60"])
    cfg["linux"]["cgroupsPath"] = f"sandboxshimtest-n.slice:pp:{sid}"
    runs_named = make_bundle(cfg, name="cn")
    for root, b, i in ((state_root, done, sid), (state_root, done_named, sid + "n")):
        assert run_shim(root, "--systemd-cgroup", "create", "--bundle", str(b), i).returncode == 0
        assert run_shim(root, "start", i).returncode == 0
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(
        json.loads(run_shim(state_root, "state", i).stdout)["status"] != "stopped" for i in (sid, sid + "n")
    ):
        time.sleep(0.2)
    try:
        for root, b, i in ((other, runs, sid), (state_root, runs_named, sid + "c")):
            r = run_shim(root, "--systemd-cgroup", "create", "--bundle", str(b), i)
            assert r.returncode == 0, r.stderr  # the default unit name carries the state root
            assert run_shim(root, "start", i).returncode == 0
        for i in (sid, sid + "n"):
            assert run_shim(state_root, "delete", i).returncode == 0
        assert json.loads(run_shim(other, "state", sid).stdout)["status"] == "running"
        assert json.loads(run_shim(state_root, "state", sid + "c").stdout)["status"] == "running"
    finally:
        run_shim(other, "delete", "--force", sid)
        run_shim(state_root, "delete", "--force", sid + "c")


@pytest.mark.skipif(not (linux_root and SYSTEMD_OK), reason=f"needs systemd as PID 1: {SYSTEMD_WHY}")
def test_a_scope_stopped_behind_the_runtime_leaves_the_id_reusable(make_bundle, state_root: Path) -> None:
    """An admin kills the sandbox's scope behind the runtime (systemd may leave it failed): delete
    --force stops and resets it, so no unit is left and the same id and path create again.  Control:
    the scope was active."""
    sid = f"sdr-{uuid.uuid4().hex[:6]}"
    cfg = base_config(["sleep", "30"])
    cfg["linux"]["cgroupsPath"] = f"sandboxshimtest-r.slice:sbx:{sid}"
    bundle = make_bundle(cfg)
    unit = f"sbx-{sid}.scope"
    assert run_shim(state_root, "--systemd-cgroup", "create", "--bundle", str(bundle), sid).returncode == 0
    assert _unit(unit) == "active"
    # SIGKILL: the container process is pid 1 of its namespace and ignores a SIGTERM from outside
    # (pid_namespaces(7)), so a plain `systemctl stop` would wait out TimeoutStopSec first
    subprocess.run(["systemctl", "kill", "--signal=SIGKILL", unit], check=False, timeout=60)
    deadline = time.monotonic() + 30
    while _unit(unit) not in ("gone", "inactive", "failed") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert run_shim(state_root, "delete", "--force", sid).returncode == 0
    assert _unit(unit) == "gone"
    r = run_shim(state_root, "--systemd-cgroup", "create", "--bundle", str(bundle), sid)
    assert r.returncode == 0, r.stderr
    assert run_shim(state_root, "delete", "--force", sid).returncode == 0


@pytest.mark.skipif(not (linux_root and SYSTEMD_OK), reason=f"needs systemd as PID 1: {SYSTEMD_WHY}")
def test_systemd_scope_oom_is_a_limit_and_io_weight_is_a_property(make_bundle, state_root: Path) -> None:
    """run under --systemd-cgroup: a program the OOM killer stopped ends as LimitExceeded(memory) (exit
    10) when its counters were read before systemd dropped the emptied scope, else as the signal it got
    (137): never as a success, never a crash (README: the systemd driver's OOM reporting).  Control: the
    same bundle under the cgroupfs driver is exit 10.  The blkio weight is the unit's IOWeight (systemd
    rewrites io.weight from it)."""
    cfg = base_config(["dd", "if=/dev/zero", "of=/dev/null", "bs=100M", "count=1"])
    cfg["linux"]["resources"] = {"memory": {"limit": 32 * MiB}}
    sid = f"sdo-{uuid.uuid4().hex[:6]}"
    cfg["linux"]["cgroupsPath"] = f"/sandboxshimtest-oom/{sid}"
    r = run_shim(state_root, "run", "--bundle", str(make_bundle(cfg, name="c")), sid, timeout=120)
    assert r.returncode == 10 and "memory" in r.stderr, (r.returncode, r.stderr)  # control: cgroupfs
    cfg["linux"]["cgroupsPath"] = f"sandboxshimtest-o.slice:sbx:{sid}"
    r = run_shim(
        state_root, "--systemd-cgroup", "run", "--bundle", str(make_bundle(cfg, name="s")), sid, timeout=120
    )
    assert (r.returncode == 10 and "memory" in r.stderr) or (r.returncode == 137 and not r.stderr), r
    assert _unit(f"sbx-{sid}.scope") in ("gone", "inactive")
    cfg = base_config(["sleep", "30"])
    cfg["linux"]["cgroupsPath"] = f"sandboxshimtest-o.slice:sbx:{sid}"
    cfg["linux"]["resources"] = {"blockIO": {"weight": 500}}
    r = run_shim(state_root, "--systemd-cgroup", "create", "--bundle", str(make_bundle(cfg, name="w")), sid)
    try:
        assert r.returncode == 0, r.stderr
        assert _unit(f"sbx-{sid}.scope", "IOWeight", "org.freedesktop.systemd1.Scope") == 4950
    finally:
        assert run_shim(state_root, "delete", "--force", sid).returncode == 0


@pytest.mark.skipif(
    not linux_root or LAYOUT.version == 0,
    reason=f"needs root and a cgroup hierarchy (detected: version {LAYOUT.version})",
)
def test_a_sandbox_cannot_open_a_device_its_rules_deny(make_bundle, state_root: Path) -> None:
    """The rule list in the plan reaches the cgroup (v1 devices.*, v2 the BPF program) before user code."""
    from sandbox_shim import api
    from sandbox_shim.execution import run_bundle

    script = (
        "head -c1 /dev/zero >/dev/null && echo ZERO_READ_OK; head -c1 /dev/null && echo NULL_READ_OK; "
        "echo x >/dev/null && echo NULL_WRITE_OK; true"
    )
    bundle = make_bundle(base_config(["sh", "-c", script]))
    mech = api.default_mechanism(str(state_root))
    make_plan = mech.make_plan

    def with_rules(spec, sandbox_id):  # what the planner hands over from linux.resources.devices
        plan = make_plan(spec, sandbox_id)
        plan.resources = {**(plan.resources or {}), "devices": RULES}
        return plan

    mech.make_plan = with_rules
    out = run_bundle(mech, f"dev-{uuid.uuid4().hex[:6]}", bundle, timeout=60).stdout.decode()
    assert "ZERO_READ_OK" in out and "NULL_WRITE_OK" in out, out  # the control: allowed opens work
    assert "NULL_READ_OK" not in out, out


def test_a_create_refused_for_an_existing_cgroup_leaves_it_and_its_processes(
    make_bundle, state_root: Path
) -> None:
    """A cgroupsPath naming a cgroup someone else made: create refuses it, and its cleanup neither kills
    what runs there nor removes any directory of it.  Control: a fresh path runs."""
    lay = detect()
    if os.geteuid() != 0 or lay.version != 1 or "pids" not in lay.v1_mounts:
        pytest.skip("needs root and the v1 pids hierarchy (this host's layout)")
    name = f"/sandbox-shim-test-victim-{uuid.uuid4().hex[:8]}"
    ctl = base_config(["true"])
    ctl["linux"]["cgroupsPath"] = name + "-ctl"
    r = run_shim(state_root, "run", "--bundle", str(make_bundle(ctl, name="ctl")), "cg-ctl")
    assert r.returncode == 0, r.stderr
    dirs = [os.path.join(m, name.lstrip("/")) for c, m in sorted(lay.v1_mounts.items())]
    victim = subprocess.Popen(["sleep", "60"])
    try:
        for d in dirs:
            os.makedirs(d, exist_ok=True)
        Path(lay.v1_mounts["pids"], name.lstrip("/"), "cgroup.procs").write_text(str(victim.pid))
        cfg = base_config(["true"])
        cfg["linux"]["cgroupsPath"] = name
        r = run_shim(state_root, "create", "--bundle", str(make_bundle(cfg, name="taken")), "cg-taken")
        assert r.returncode == 9 and "already exists" in r.stderr, r.stderr
        run_shim(state_root, "delete", "--force", "cg-taken")
        assert victim.poll() is None, "a failed create killed a process it never started"
        assert all(os.path.isdir(d) for d in dirs), [d for d in dirs if not os.path.isdir(d)]
    finally:
        victim.kill()
        victim.wait()
        for d in dirs:
            if os.path.isdir(d):
                os.rmdir(d)


def test_every_thread_and_child_of_the_sandbox_is_in_each_of_its_cgroups(
    make_bundle, state_root: Path
) -> None:
    """The join before bwrap's exec (v1: ``0`` into ``tasks``, which moves only the writing thread)
    places the whole container process and whatever it forks: every thread of every process of the
    sandbox is listed in ``tasks``/``cgroup.threads`` of each of its cgroup directories, and each
    process's /proc/PID/cgroup names the sandbox's cgroup in every hierarchy it uses.  Control: the
    host's own shell is not listed there."""
    if not linux_root:
        pytest.skip("needs root on Linux (real cgroups)")
    sid = f"cg-join-{uuid.uuid4().hex[:6]}"
    cfg = base_config(["sh", "-c", "sleep 60 & sleep 60 & wait"])
    r = run_shim(state_root, "create", "--bundle", str(make_bundle(cfg)), sid)
    assert r.returncode == 0, r.stderr
    try:
        assert run_shim(state_root, "start", sid).returncode == 0
        pid = json.loads(run_shim(state_root, "state", sid).stdout)["pid"]
        dirs = cgroup_dirs(sid)
        assert dirs, "no cgroup directory for the sandbox"
        procs: set[int] = set()
        for _ in range(200):  # both sleeps forked
            procs = {pid} | {
                int(c)
                for t in os.listdir(f"/proc/{pid}/task")
                for c in Path(f"/proc/{pid}/task/{t}/children").read_text().split()
            }
            if len(procs) >= 3:
                break
            time.sleep(0.01)
        assert len(procs) >= 3, procs
        threads = {int(t) for p in procs for t in os.listdir(f"/proc/{p}/task")}
        for d in dirs:
            name = "tasks" if os.path.exists(os.path.join(d, "tasks")) else "cgroup.threads"
            listed = {int(x) for x in Path(d, name).read_text().split()}
            assert threads <= listed, (d, threads - listed)
            assert os.getpid() not in listed  # the control: a host process is not there
        for p in procs:
            lines = Path(f"/proc/{p}/cgroup").read_text().splitlines()
            for d in dirs:
                rel = d.split("/sys/fs/cgroup/", 1)[1]
                hier, _, path = rel.partition("/")
                if not os.path.exists(os.path.join(d, "tasks")):  # the v2 mount itself: hierarchy 0
                    path = rel if hier == "sandbox-shim" else path
                assert any(line.endswith(":/" + path) for line in lines), (p, d, lines)
    finally:
        run_shim(state_root, "delete", "--force", sid)


@pytest.mark.skipif(sys.platform == "win32", reason="os.pread and an open file removed: POSIX")
def test_the_watch_keeps_the_counters_of_a_cgroup_that_vanished(fake_v2: Path) -> None:
    """``Mechanism.watch`` on Linux (``cgroups/watch.py``): a change of ``memory.events`` is read
    while the cgroup exists, and once its directory is gone (systemd removes an emptied scope) the
    last reading stands instead of the zeros of missing files."""
    import shutil

    from sandbox_shim.mechanism import Sandbox
    from sandbox_shim.platforms.linux.cgroups.watch import EventsWatch
    from sandbox_shim.platforms.linux.mechanism import LinuxMechanism

    m = V2Manager(str(fake_v2), "/sandbox-shim/w")
    m.create([])
    d = fake_v2 / "sandbox-shim" / "w"
    (d / "memory.events").write_text("low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n")
    first = control.facts(m)
    watch = EventsWatch(m, first)
    try:
        assert watch.fd is not None
        watch.changed()  # the control: nothing new, the first reading stands
        assert watch.last.oom_kills == 0
        (d / "memory.events").write_text("low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\n")
        watch.changed()
        assert watch.last.oom_kills == 1
        shutil.rmtree(d)
        assert control.facts(m).oom_kills == 0  # what a read after the exit would have said
        assert watch.final().oom_kills == 1
    finally:
        watch.close()
    assert watch.fd is None
    assert LinuxMechanism().watch(Sandbox("x", "/b"), first) is None  # no cgroup: nothing to watch
