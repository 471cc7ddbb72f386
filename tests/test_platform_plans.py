"""Every platform plans from the same ``Spec`` and applies or refuses each field, never ignores one.

The finding's bundle (requires ``job-object``, a wall clock, a CPU-time limit, an ``RLIMIT_NOFILE``, a
read-write bind of ``/etc``, ``linux.namespaces``, ``linux.seccomp``, ``linux.resources`` the platform
cannot apply, masked/read-only paths, ``sandbox-shim.network``) is planned on Windows and on macOS:
each field is applied (in the plan) or refused with its JSON pointer (``BundleInvalid``) or by the
capability it needs (``CapabilityUnavailable``).  A control bundle without them plans fine.
``sys.platform`` is simulated where ``bundle.load`` reads it, as in test_windows_job_object.py and
test_darwin_mechanism.py.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import base_config, windows_config
from sandbox_shim.bundle import Settings, Spec, load
from sandbox_shim.capability import Capability
from sandbox_shim.errors import BundleInvalid, CapabilityUnavailable, CouldNotRun
from sandbox_shim.platforms.windows import plan as wplan

if sys.platform == "win32":  # pragma: no cover
    pytest.skip("the macOS planner is POSIX-only", allow_module_level=True)

from sandbox_shim.platforms.darwin import plan as dplan  # noqa: E402


@pytest.fixture(autouse=True)
def _registry_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe registry as this host fills it, restored after each test: a probe module first imported
    while ``sys.platform`` is simulated would register that platform's names for every later test."""
    from sandbox_shim import capability

    capability._load_probes()
    monkeypatch.setattr(capability, "PROBES", dict(capability.PROBES))


def spec_of(config: dict[str, Any], bundle: str = "b") -> Spec:
    return Spec(bundle, "", config, Settings.from_annotations(config.get("annotations") or {}))


def win_reports() -> list[Capability]:
    names = ["job-object", "job-object.memory", "job-object.processes", "job-object.cpu"]
    return [Capability(n, True, "job object", "", "stand-in") for n in names]


def mac_reports() -> list[Capability]:
    avail = [
        "seatbelt",
        "filesystem.confinement",
        "network.deny",
        "rlimit.cpu",
        "rlimit.nproc",
        "rlimit.memory",
    ]
    return [Capability(n, True, "sandbox-exec", "", "stand-in") for n in avail] + [
        Capability(n, False, "sandbox-exec", why, "stand-in") for n, why in dplan.NOT_ON_MACOS.items()
    ]


# --- Windows -----------------------------------------------------------------------------------------


def win_control() -> dict[str, Any]:
    cfg = windows_config(["C:\\prog.exe", "a"])
    cfg["annotations"]["sandbox-shim.requires"] = "job-object"
    return cfg


def test_windows_control_plans_and_records_wall_clock_network_and_process_limit() -> None:
    cfg = win_control()
    cfg["annotations"]["sandbox-shim.wall-clock-seconds"] = "5"
    cfg["annotations"]["sandbox-shim.windows.active-process-limit"] = "16"
    plan = wplan.plan_from_spec(spec_of(cfg))
    wplan.check_requirements(plan, win_reports())
    assert plan.wall_clock == 5.0  # run_bundle reads it from the record, as on every platform
    assert plan.network == "host"
    assert plan.limits.active_processes == 16  # from Settings, parsed once
    assert plan.requires == ("job-object", "job-object.processes")
    assert plan.argv == ("C:\\prog.exe", "a") and plan.env == {"PATH": cfg["process"]["env"][0][5:]} | {
        "TERM": "xterm",
        "HOME": "/root",
    }


@pytest.mark.parametrize(
    "change,pointer",
    [
        (
            lambda c: c["annotations"].update({"sandbox-shim.cpu-time-seconds": "3"}),
            "/annotations/sandbox-shim.cpu-time-seconds",
        ),
        (
            lambda c: c["process"].update(rlimits=[{"type": "RLIMIT_NOFILE", "soft": 64, "hard": 64}]),
            "/process/rlimits/0",
        ),
        (
            lambda c: c.update(
                mounts=[{"destination": "/etc", "type": "bind", "source": "/etc", "options": ["rbind", "rw"]}]
            ),
            "/mounts/0",
        ),
        (lambda c: c.update(linux={"resources": {"memory": {"limit": 1 << 28}}}), "/linux/resources/memory"),
        (lambda c: c.update(linux={"maskedPaths": ["/proc/kcore"]}), "/linux/maskedPaths/0"),
        (lambda c: c.update(linux={"readonlyPaths": ["/proc/sys"]}), "/linux/readonlyPaths/0"),
        # hooks that run in the container's namespaces: none to enter, never run on the host instead
        (lambda c: c.update(hooks={"createContainer": [{"path": "C:\\h.exe"}]}), "/hooks/createContainer/0"),
        (lambda c: c.update(hooks={"startContainer": [{"path": "C:\\h.exe"}]}), "/hooks/startContainer/0"),
        # hooks that run on the host: this mechanism runs none, so they are refused, not dropped
        (lambda c: c.update(hooks={"prestart": [{"path": "C:\\h.exe"}]}), "/hooks/prestart/0"),
        (lambda c: c.update(hooks={"poststop": [{"path": "C:\\h.exe"}]}), "/hooks/poststop/0"),
        # the windows section: only resources.memory.limit and resources.cpu are job limits
        (lambda c: c.update(windows={"hyperv": {}}), "/windows/hyperv"),
        (lambda c: c.update(windows={"network": {"endpointList": ["e"]}}), "/windows/network"),
        (lambda c: c.update(windows={"devices": [{"id": "d", "idType": "class"}]}), "/windows/devices"),
        (lambda c: c.update(windows={"layerFolders": ["C:\\l"]}), "/windows/layerFolders"),
        (lambda c: c.update(windows={"resources": {"storage": {"iops": 100}}}), "/windows/resources/storage"),
        (
            lambda c: c.update(windows={"resources": {"storage": {"bps": 1 << 20}}}),
            "/windows/resources/storage",
        ),
        (
            lambda c: c.update(windows={"resources": {"memory": {"limit": 1 << 28, "reservation": 1}}}),
            "/windows/resources/memory/reservation",
        ),
        (
            lambda c: c.update(windows={"resources": {"cpu": {"affinity": [1]}}}),
            "/windows/resources/cpu/affinity",
        ),
    ],
)
def test_windows_refuses_with_the_pointer(change: Any, pointer: str) -> None:
    cfg = win_control()
    change(cfg)
    with pytest.raises(BundleInvalid) as e:
        wplan.plan_from_spec(spec_of(cfg))
    assert [p.pointer for p in e.value.problems] == [pointer]


@pytest.mark.parametrize(
    "change,names",
    [
        (
            lambda c: c.update(linux={"namespaces": [{"type": "pid"}, {"type": "ipc"}]}),
            {"namespace.pid", "namespace.ipc"},
        ),
        (lambda c: c.update(linux={"namespaces": [{"type": "mount"}]}), {"filesystem.confinement"}),
        (lambda c: c.update(linux={"seccomp": {"defaultAction": "SCMP_ACT_ALLOW"}}), {"seccomp"}),
        (lambda c: c["process"].update(noNewPrivileges=True), {"no_new_privs"}),
        (
            lambda c: (
                c["annotations"].update({"sandbox-shim.network": "isolated"}),
                c.update(linux={"namespaces": [{"type": "network"}]}),
            ),
            {"network.isolated", "network.deny"},
        ),
        (  # "none" (the default) with its network namespace: loopback only, which a job cannot give
            lambda c: (
                c["annotations"].pop("sandbox-shim.network"),
                c.update(linux={"namespaces": [{"type": "network"}]}),
            ),
            {"network.deny"},
        ),
    ],
)
def test_windows_refuses_by_the_capability(change: Any, names: set[str]) -> None:
    cfg = win_control()
    change(cfg)
    plan = wplan.plan_from_spec(spec_of(cfg))
    with pytest.raises(CapabilityUnavailable) as e:
        wplan.check_requirements(plan, win_reports())
    assert {r.name for r in e.value.reports} == names


def test_windows_finding_bundle_is_refused_every_field_named() -> None:
    """The finding's bundle: nothing of it is left unapplied without a word."""
    cfg = base_config(["C:\\prog.exe"])
    cfg["annotations"] = {
        "sandbox-shim.requires": "job-object",
        "sandbox-shim.wall-clock-seconds": "5",
        "sandbox-shim.cpu-time-seconds": "3",
    }
    cfg["mounts"].append(
        {"destination": "/etc", "type": "bind", "source": "/etc", "options": ["rbind", "rw"]}
    )
    with pytest.raises(BundleInvalid) as e:
        wplan.plan_from_spec(spec_of(cfg))
    ptrs = {p.pointer for p in e.value.problems}
    assert {"/annotations/sandbox-shim.cpu-time-seconds", "/process/rlimits/0", "/mounts/4"} <= ptrs
    assert {"/linux/resources/memory", "/linux/maskedPaths/0", "/linux/readonlyPaths/0"} <= ptrs


def test_windows_load_refuses_args_env_and_process_limit_with_pointers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """args, env and the active-process limit are the Spec's, checked once by ``bundle.load``."""
    monkeypatch.setattr(sys, "platform", "win32")
    (tmp_path / "rootfs").mkdir()
    cfg = win_control()
    cfg["process"]["args"] = []
    cfg["process"]["env"] = ["SECRET_TOKEN"]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(BundleInvalid) as e:
        load(str(tmp_path))
    assert {"/process/args", "/process/env/0"} <= {p.pointer for p in e.value.problems}
    assert "SECRET_TOKEN" not in json.dumps(e.value.to_dict())
    cfg = win_control()
    cfg["annotations"]["sandbox-shim.windows.active-process-limit"] = "0"
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(BundleInvalid) as e:
        load(str(tmp_path))
    assert "/annotations/sandbox-shim.windows.active-process-limit" in {p.pointer for p in e.value.problems}
    cfg["annotations"]["sandbox-shim.windows.active-process-limit"] = "7"
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert load(str(tmp_path)).settings.active_process_limit == 7


def test_empty_args0_is_the_same_on_every_platform(tmp_path: Path) -> None:
    """args [""] passes the Spec's rules (the schema) everywhere, and is no program at launch: Windows
    plans it (CreateProcessW answers not found), macOS answers ``CouldNotRun`` not_found, as Linux's exec."""
    cfg = win_control()
    cfg["process"]["args"] = [""]
    assert wplan.plan_from_spec(spec_of(cfg)).argv == ("",)
    b = _mac_bundle(tmp_path)
    with pytest.raises(CouldNotRun) as e:
        dplan.plan_from_spec(spec_of(mac_control([""]), str(b)))
    assert e.value.reason == "not_found"


# --- macOS -------------------------------------------------------------------------------------------


def _mac_bundle(tmp_path: Path) -> Path:
    b = tmp_path / "mb"
    (b / "rootfs" / "bin").mkdir(parents=True)
    (b / "storage").mkdir()
    app = b / "rootfs" / "bin" / "app"
    app.write_text("#!/bin/sh\n")
    app.chmod(0o755)
    return b


def mac_control(args: list[str] | None = None) -> dict[str, Any]:
    return {
        "ociVersion": "1.0.2",
        "process": {
            "args": args or ["/bin/app"],
            "cwd": "/",
            "env": ["PATH=/bin"],
            "user": {"uid": os.getuid()},
        },
        "root": {"path": "rootfs", "readonly": True},
        "linux": {"namespaces": [{"type": "network"}, {"type": "mount"}]},
        "annotations": {},
    }


def test_macos_control_plans_and_applies_wall_clock_cpu_time_rlimits_and_proc_paths(tmp_path: Path) -> None:
    b = _mac_bundle(tmp_path)
    cfg = mac_control()
    cfg["annotations"] = {"sandbox-shim.wall-clock-seconds": "5", "sandbox-shim.cpu-time-seconds": "3"}
    cfg["process"]["rlimits"] = [{"type": "RLIMIT_NOFILE", "soft": 64, "hard": 64}]
    cfg["linux"]["maskedPaths"] = ["/proc/kcore", "/sys/firmware"]  # macOS has no /proc, no /sys
    cfg["linux"]["readonlyPaths"] = ["/proc/sys"]
    plan = dplan.plan_from_spec(spec_of(cfg, str(b)))
    dplan.check_requirements(plan, mac_reports())
    assert plan.wall_clock == 5.0
    assert ("RLIMIT_CPU", 3, 4) in plan.rlimits and ("RLIMIT_NOFILE", 64, 64) in plan.rlimits
    assert plan.env["PATH"] == "/bin" and plan.env["HOME"] == "/root"  # Spec.env over the tenant defaults


@pytest.mark.parametrize(
    "change,pointer",
    [
        (
            lambda c: c["process"].update(rlimits=[{"type": "RLIMIT_RTPRIO", "soft": 1, "hard": 1}]),
            "/process/rlimits/0/type",
        ),
        (
            lambda c: c.update(
                mounts=[{"destination": "/etc", "type": "bind", "source": "/etc", "options": ["rbind", "rw"]}]
            ),
            "/mounts/0",
        ),
        (lambda c: c["linux"].update(resources={"blockIO": {"weight": 10}}), "/linux/resources/blockIO"),
        (lambda c: c["linux"].update(maskedPaths=["/etc/secret"]), "/linux/maskedPaths/0"),
        (lambda c: c["linux"].update(readonlyPaths=["/storage"]), "/linux/readonlyPaths/0"),
        # hooks that run in the container's namespaces: none to enter, never run on the host instead
        (lambda c: c.update(hooks={"createContainer": [{"path": "/bin/true"}]}), "/hooks/createContainer/0"),
        (lambda c: c.update(hooks={"startContainer": [{"path": "/bin/true"}]}), "/hooks/startContainer/0"),
        # hooks that run on the host: this mechanism runs none, so they are refused, not dropped
        (lambda c: c.update(hooks={"createRuntime": [{"path": "/bin/true"}]}), "/hooks/createRuntime/0"),
        (lambda c: c.update(hooks={"poststart": [{"path": "/bin/true"}]}), "/hooks/poststart/0"),
    ],
)
def test_macos_refuses_with_the_pointer(tmp_path: Path, change: Any, pointer: str) -> None:
    b = _mac_bundle(tmp_path)
    cfg = mac_control()
    change(cfg)
    with pytest.raises(BundleInvalid) as e:
        dplan.plan_from_spec(spec_of(cfg, str(b)))
    assert [p.pointer for p in e.value.problems] == [pointer]


@pytest.mark.parametrize(
    "change,names",
    [
        (lambda c: c["linux"]["namespaces"].append({"type": "pid"}), {"namespace.pid"}),
        (lambda c: c["linux"].update(seccomp={"defaultAction": "SCMP_ACT_ALLOW"}), {"seccomp"}),
        (lambda c: c["process"].update(noNewPrivileges=True), {"no_new_privs"}),
        (lambda c: c["linux"].update(resources={"cpu": {"quota": 50000, "period": 100000}}), {"cpu.rate"}),
        (lambda c: c["annotations"].update({"sandbox-shim.network": "isolated"}), {"network.isolated"}),
    ],
)
def test_macos_refuses_by_the_capability(tmp_path: Path, change: Any, names: set[str]) -> None:
    b = _mac_bundle(tmp_path)
    cfg = mac_control()
    change(cfg)
    plan = dplan.plan_from_spec(spec_of(cfg, str(b)))
    with pytest.raises(CapabilityUnavailable) as e:
        dplan.check_requirements(plan, mac_reports())
    assert {r.name for r in e.value.reports} == names


def test_macos_network_host_is_applied(tmp_path: Path) -> None:
    b = _mac_bundle(tmp_path)
    cfg = mac_control()
    cfg["linux"] = {"namespaces": [{"type": "mount"}]}
    cfg["annotations"] = {"sandbox-shim.network": "host"}
    plan = dplan.plan_from_spec(spec_of(cfg, str(b)))
    assert plan.network == "host" and "network.deny" not in plan.requires


def test_run_preflight_asks_the_platform_never_the_linux_planner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``run``'s preflight (``execution.preflight``) is the mechanism's (``Mechanism.preflight``):
    on Linux ``args[0]`` is looked up in the rootfs as bwrap lays it out; macOS and Windows never go
    through the Linux planner (``platforms/linux/plan.make_plan``), whose rules are not theirs."""
    from sandbox_shim.execution import preflight
    from sandbox_shim.platforms.darwin.mechanism import DarwinSeatbeltMechanism
    from sandbox_shim.platforms.linux import plan as linux_plan
    from sandbox_shim.platforms.linux.mechanism import LinuxMechanism
    from sandbox_shim.platforms.windows.mechanism import WindowsJobMechanism

    bundle = tmp_path / "b"
    (bundle / "rootfs").mkdir(parents=True)
    (bundle / "storage").mkdir()
    (bundle / "config.json").write_text(json.dumps(base_config(["/missing-program"])))
    with pytest.raises(CouldNotRun) as got:
        preflight(LinuxMechanism(), str(bundle))
    assert got.value.exit_status == 127
    calls: list[str] = []
    real = linux_plan.make_plan
    monkeypatch.setattr(linux_plan, "make_plan", lambda *a, **k: calls.append("linux") or real(*a, **k))
    preflight(DarwinSeatbeltMechanism(probe=mac_reports), str(bundle))
    preflight(WindowsJobMechanism(), str(bundle))
    assert calls == []


def test_an_empty_hooks_object_plans_where_hooks_are_refused(tmp_path: Path) -> None:
    """The control of the hook refusals above: ``"hooks": {}`` (and phases with empty lists) asks for
    nothing, so it plans on macOS and Windows, whose mechanisms run no hooks (``plan.hooks`` is {})."""
    empty = {p: [] for p in ("prestart", "createRuntime", "createContainer", "startContainer", "poststop")}
    bundle = str(_mac_bundle(tmp_path))
    for hooks in ({}, empty):
        mac = mac_control()
        mac["hooks"] = hooks
        assert dplan.plan_from_spec(spec_of(mac, bundle)).hooks == {}
        win = win_control()
        win["hooks"] = hooks
        assert wplan.plan_from_spec(spec_of(win)).hooks == {}


# --- process.user, umask, terminal, oomScoreAdj, root.readonly (issue #18 review) ------------------


def _user(**kv: Any) -> Any:
    return lambda c: c["process"].setdefault("user", {}).update(kv)


WIN_PROCESS_REFUSALS = [
    (_user(uid=1000), "/process/user/uid"),
    (_user(gid=1000), "/process/user/gid"),
    (_user(umask=0o077), "/process/user/umask"),
    (_user(additionalGids=[5]), "/process/user/additionalGids/0"),
    (_user(username="svc"), "/process/user/username"),
    (lambda c: c["process"].update(commandLine="C:\\prog.exe a"), "/process/commandLine"),
    (lambda c: c["process"].update(terminal=True), "/process/terminal"),
    (lambda c: c["process"].update(oomScoreAdj=1000), "/process/oomScoreAdj"),
    (lambda c: c["root"].update(readonly=True), "/root/readonly"),
]


@pytest.mark.parametrize("change,pointer", WIN_PROCESS_REFUSALS)
def test_windows_refuses_process_fields_a_job_does_not_apply(change: Any, pointer: str) -> None:
    """A job runs as the caller's account, with no umask, terminal or OOM score, on files it cannot
    make read-only: each such field is refused by its pointer, never planned and dropped."""
    cfg = win_control()
    assert wplan.plan_from_spec(spec_of(cfg)).argv  # the control: without the field it plans
    change(cfg)
    with pytest.raises(BundleInvalid) as e:
        wplan.plan_from_spec(spec_of(cfg))
    assert [p.pointer for p in e.value.problems] == [pointer]


def test_windows_finding_user_umask_oom_readonly_bundle_is_refused_by_each_pointer() -> None:
    """The review's bundle: uid/gid 1000, umask 63, oomScoreAdj 1000, root.readonly true."""
    cfg = win_control()
    cfg["process"]["user"] = {"uid": 1000, "gid": 1000, "umask": 63}
    cfg["process"]["oomScoreAdj"] = 1000
    cfg["root"]["readonly"] = True
    with pytest.raises(BundleInvalid) as e:
        wplan.plan_from_spec(spec_of(cfg))
    assert {p.pointer for p in e.value.problems} == {
        "/process/user/uid",
        "/process/user/gid",
        "/process/user/umask",
        "/process/oomScoreAdj",
        "/root/readonly",
    }


def test_windows_plans_what_a_job_does_anyway_with_notes() -> None:
    """uid/gid 0 (the container's root: the caller, no more rights), umask 0, a negative OOM score
    (it protects, never restricts), terminal false and a writable root plan, each grant noted."""
    cfg = win_control()
    cfg["process"]["user"] = {"uid": 0, "gid": 0, "umask": 0, "additionalGids": []}
    cfg["process"]["oomScoreAdj"] = -100
    cfg["process"]["terminal"] = False
    cfg["root"]["readonly"] = False
    notes = wplan.plan_from_spec(spec_of(cfg)).notes
    assert [n.split()[0] for n in notes] == [
        "/process/user/uid",
        "/process/user/gid",
        "/process/user/umask",
        "/process/oomScoreAdj",
    ]


def _mac_plan(tmp_path: Path, change: Any, **caller: Any) -> dplan.DarwinPlan:
    cfg = mac_control()
    change(cfg)
    me = {"caller_gid": 20, "caller_groups": [20, 12, 80], "caller_umask": 0o022} | caller
    bundle = tmp_path / "mb"
    return dplan.plan_from_spec(spec_of(cfg, str(bundle if bundle.is_dir() else _mac_bundle(tmp_path))), **me)


@pytest.mark.parametrize(
    "change,pointer",
    [
        (_user(gid=1000), "/process/user/gid"),
        (_user(additionalGids=[12, 1000]), "/process/user/additionalGids/1"),
        (_user(umask=0o077), "/process/user/umask"),  # the caller's 022 leaves group/other read
        (_user(username="svc"), "/process/user/username"),
        (lambda c: c["process"].update(commandLine="app"), "/process/commandLine"),
        (lambda c: c["process"].update(terminal=True), "/process/terminal"),
        (lambda c: c["process"].update(oomScoreAdj=1000), "/process/oomScoreAdj"),
        (lambda c: c.update(windows={"resources": {"memory": {"limit": 1 << 28}}}), "/windows/resources"),
    ],
)
def test_macos_refuses_process_fields_sandbox_exec_does_not_apply(
    tmp_path: Path, change: Any, pointer: str
) -> None:
    """The workload runs as the caller, with its gid, groups and umask, no terminal and no OOM score:
    a field asking otherwise is refused by its pointer; the control without it plans."""
    assert _mac_plan(tmp_path, lambda c: None).warnings == ()
    with pytest.raises(BundleInvalid) as e:
        _mac_plan(tmp_path, change)
    assert [p.pointer for p in e.value.problems] == [pointer]


def test_macos_finding_umask0_oom_terminal_bundle_is_refused_by_each_pointer(tmp_path: Path) -> None:
    """The review's bundle: umask 0 (a grant: the caller's 022 masks more, a warning), oomScoreAdj
    1000 and terminal true (neither applied: refused)."""
    with pytest.raises(BundleInvalid) as e:
        _mac_plan(
            tmp_path, lambda c: (_user(umask=0)(c), c["process"].update(oomScoreAdj=1000, terminal=True))
        )
    assert {p.pointer for p in e.value.problems} == {"/process/oomScoreAdj", "/process/terminal"}


def test_macos_plans_what_sandbox_exec_does_anyway(tmp_path: Path) -> None:
    """The caller's own gid, groups it is in, its umask (or a smaller one: files get fewer
    permissions, warned), gid 0, a negative OOM score and a writable root (the rootfs stays
    read-only, warned) plan; only the grants not given are warnings."""
    plan = _mac_plan(tmp_path, _user(gid=20, additionalGids=[12, 80], umask=0o022), caller_uid=os.getuid())
    assert plan.warnings == ()
    plan = _mac_plan(
        tmp_path,
        lambda c: (
            _user(gid=0, umask=0o002)(c),
            c["process"].update(oomScoreAdj=-5, terminal=False),
            c["root"].update(readonly=False),
        ),
    )
    assert [w.split()[0] for w in plan.warnings] == [
        "/process/user/gid",
        "/process/user/umask",
        "/process/oomScoreAdj",
        "/root/readonly",
    ]


@pytest.mark.parametrize(
    "memory,cpu,pointer",
    [
        ({"swap": 1 << 29}, {}, "/linux/resources/memory/swap"),  # no memory.limit: nothing bounds swap
        ({"limit": 1 << 28, "swap": 1 << 27}, {}, "/linux/resources/memory/swap"),
        ({"kernelTCP": 1 << 20}, {}, "/linux/resources/memory/kernelTCP"),
        ({}, {"mems": "0"}, "/linux/resources/cpu/mems"),
    ],
)
def test_macos_refuses_memory_and_cpu_limits_it_cannot_apply(
    tmp_path: Path, memory: dict[str, Any], cpu: dict[str, Any], pointer: str
) -> None:
    with pytest.raises(BundleInvalid) as e:
        _mac_plan(tmp_path, lambda c: c["linux"].update(resources={"memory": memory, "cpu": cpu}))
    assert [p.pointer for p in e.value.problems] == [pointer]


def test_macos_applies_swap_through_the_memory_rlimit_and_warns_preferences(tmp_path: Path) -> None:
    """memory.swap at least memory.limit holds (RLIMIT_AS bounds memory and swap together); the
    preferences are warnings, each by its pointer."""
    res = {
        "memory": {"limit": 1 << 28, "swap": 1 << 29, "reservation": 1 << 27, "swappiness": 10},
        "cpu": {"shares": 512, "idle": 1},
    }
    plan = _mac_plan(tmp_path, lambda c: c["linux"].update(resources=res))
    assert ("RLIMIT_AS", 1 << 28, 1 << 28) in plan.rlimits
    assert [w.split()[0] for w in plan.warnings] == [
        "/linux/resources/memory/reservation",
        "/linux/resources/memory/swappiness",
        "/linux/resources/cpu/shares",
        "/linux/resources/cpu/idle",
    ]


# --- the pid-namespace floor is the Linux planner's rule ------------------------------------------------


def test_a_bundle_without_a_pid_namespace_loads_and_plans_on_macos_and_windows(tmp_path: Path) -> None:
    """``bundle.load`` (create's path, on any host) takes a config without a pid namespace; the macOS
    and Windows planners plan it (they have no pid namespace to give); the Linux planner refuses it with
    the pointer, message and status ``validate`` gives on a Linux host.  Control: with a pid namespace
    the Linux planner plans the same config."""
    from sandbox_shim.bundle import validate
    from sandbox_shim.platforms.linux import plan as lplan

    b = _mac_bundle(tmp_path)
    mac = mac_control()  # namespaces network, mount: no pid
    mac["process"]["user"]["gid"] = os.getgid()
    (b / "config.json").write_text(json.dumps(mac))
    dplan.check_requirements(dplan.plan_from_spec(load(str(b))), mac_reports())
    wb = tmp_path / "wb"
    (wb / "rootfs").mkdir(parents=True)
    (wb / "config.json").write_text(json.dumps(win_control()))
    wplan.check_requirements(wplan.plan_from_spec(load(str(wb))), win_reports())

    cfg = base_config(["/bin/true"])
    lb = tmp_path / "lb"
    (lb / "rootfs").mkdir(parents=True)
    (lb / "storage").mkdir()
    (lb / "config.json").write_text(json.dumps(cfg))
    assert lplan.make_plan(load(str(lb)), "p1").unshare  # control: the tenant config plans
    cfg["linux"]["namespaces"] = [n for n in cfg["linux"]["namespaces"] if n["type"] != "pid"]
    (lb / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(BundleInvalid) as e:
        lplan.make_plan(load(str(lb)), "p1")
    assert [p.pointer for p in e.value.problems] == ["/linux/namespaces"] and e.value.exit_status == 3
    assert e.value.problems[0].message == "no pid namespace: in OCI terms this shares the host's processes"
    if sys.platform.startswith("linux"):  # validate on a Linux host: the same refusal
        verdict = validate(str(lb))
        assert [(p.pointer, p.message) for p in verdict.problems] == [
            ("/linux/namespaces", "no pid namespace: in OCI terms this shares the host's processes")
        ]


def test_windows_applies_its_resources_and_plans_the_control() -> None:
    """Control for the ``windows`` refusals: the keys a job applies plan (and become limits)."""
    cfg = win_control()
    cfg["windows"] = {
        "resources": {"memory": {"limit": 1 << 28}, "cpu": {"count": 1, "shares": 5, "maximum": 5000}}
    }
    plan = wplan.plan_from_spec(spec_of(cfg), host_cpus=2)
    assert (plan.limits.job_memory_bytes, plan.limits.cpu_rate) == (1 << 28, 5000)


def test_linux_refuses_a_windows_section_with_its_pointer(tmp_path: Path) -> None:
    """Nothing of ``windows`` is applied on Linux: the Linux planner refuses each key with its pointer,
    and ``validate`` on a Linux host says the same.  Control: the same config without it plans."""
    from sandbox_shim.bundle import validate
    from sandbox_shim.platforms.linux import plan as lplan

    b = tmp_path / "lb"
    (b / "rootfs").mkdir(parents=True)
    (b / "storage").mkdir()
    cfg = base_config(["/bin/true"])
    (b / "config.json").write_text(json.dumps(cfg))
    assert lplan.make_plan(load(str(b)), "w1").unshare  # control
    assert not validate(str(b)).problems
    cfg["windows"] = {"resources": {"memory": {"limit": 1 << 28}}, "hyperv": {}}
    (b / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(BundleInvalid) as e:
        lplan.make_plan(load(str(b)), "w1")
    assert [p.pointer for p in e.value.problems] == ["/windows/hyperv", "/windows/resources"]
    assert e.value.exit_status == 3
    if sys.platform.startswith("linux"):
        assert [p.pointer for p in validate(str(b)).problems] == ["/windows/hyperv", "/windows/resources"]
    cfg["windows"] = {}  # an empty section asks for nothing
    (b / "config.json").write_text(json.dumps(cfg))
    assert lplan.make_plan(load(str(b)), "w1").unshare


@pytest.mark.parametrize("name", ["podman-4.3.1-config.json", "runc-1.1.5-spec.json"])
def test_orchestrator_configs_still_validate_on_linux(name: str) -> None:
    """The orchestrators' configs (no ``windows`` section) are not touched by the Linux-only rules."""
    from sandbox_shim.platforms.linux.config_checks import windows_section_problems

    path = Path("/work/shared/testdata/configs") / name
    if not path.exists():
        pytest.skip(f"{path} is not on this machine")
    cfg = json.loads(path.read_text())
    assert "windows" not in cfg and windows_section_problems(cfg) == []
