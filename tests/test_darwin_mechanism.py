"""The macOS tenant mechanism: OCI config -> DarwinPlan -> SBPL profile + launch argv, and the held gate.

What runs where:

* Plan, profile and argv tests run anywhere POSIX: golden files plus structural checks.  macOS path
  resolution (``/tmp`` -> ``/private/tmp``) cannot happen here, so ``mac_resolve`` stands in for it.
* The gate tests start real processes with ``/usr/bin/env`` (and, for the whole lifecycle, a
  stand-in script that drops sandbox-exec's options and execs the command) in place of
  ``sandbox-exec``: they test OUR create/start gate, rlimits, status recording and process-group
  handling, not Seatbelt.  Capability reports are a stand-in set there, since this host is not macOS.
* Tests marked ``darwin`` run the real ``sandbox-exec`` and skip elsewhere (platforms.yml runs them).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

if sys.platform == "win32":
    pytest.skip("sandbox-exec mechanism is POSIX-only (fcntl, resource, setsid)", allow_module_level=True)

from sandbox_shim.bundle import Settings, Spec  # noqa: E402
from sandbox_shim.capability import Capability  # noqa: E402
from sandbox_shim.errors import (  # noqa: E402
    BundleInvalid,
    CannotEnforce,
    CapabilityUnavailable,
    CouldNotRun,
    LimitExceeded,
)
from sandbox_shim.mechanism import Mechanism, ProvisionOptions, Sandbox  # noqa: E402
from sandbox_shim.platforms.darwin import launcher  # noqa: E402
from sandbox_shim.platforms.darwin.command import compile_check, launch_argv, tenant_profile  # noqa: E402
from sandbox_shim.platforms.darwin.mechanism import DarwinSeatbeltMechanism  # noqa: E402
from sandbox_shim.platforms.darwin.plan import (  # noqa: E402
    NOT_ON_MACOS,
    DarwinPlan,
    check_requirements,
    plan_from_spec,
)
from sandbox_shim.platforms.darwin.seatbelt import SANDBOX_EXEC  # noqa: E402
from sandbox_shim.platforms.darwin.trials import darwin_capabilities  # noqa: E402

GOLDEN = Path(__file__).resolve().parent / "golden"


def plan_of(config: dict[str, Any], bundle: str, caller_uid: int | None = None) -> DarwinPlan:
    """The plan of ``config`` in ``bundle``, through a ``Spec`` as ``make_plan`` gets it (the settings
    parsed once, by ``bundle.Settings``)."""
    spec = Spec(bundle, "", config, Settings.from_annotations(config.get("annotations") or {}))
    return plan_from_spec(spec, caller_uid=caller_uid)


UPDATE = os.environ.get("SANDBOX_SHIM_UPDATE_GOLDEN") == "1"
ON_MAC = sys.platform == "darwin"
darwin_only = pytest.mark.skipif(not ON_MAC, reason=f"needs macOS sandbox-exec; this host is {sys.platform}")


def mac_resolve(p: str) -> str:
    """macOS's root symlinks (/tmp, /var, /etc -> /private/...), then normalisation (no file access)."""
    for top in ("/tmp", "/var", "/etc"):
        if p == top or p.startswith(top + "/"):
            p = "/private" + p
    return os.path.normpath(p)


def fixed_plan(
    bundle: str = "/Users/shim/bundles/b",
    network: str = "none",
    storage_ro: bool = False,
    storage: bool = True,
) -> DarwinPlan:
    return DarwinPlan(
        bundle=bundle,
        rootfs=bundle + "/rootfs",
        storage=bundle + "/storage" if storage else None,
        storage_readonly=storage_ro,
        program=bundle + "/rootfs/bin/app",
        args=(bundle + "/rootfs/bin/app", "--flag", "x y"),
        cwd=bundle + "/rootfs",
        env={"PATH": "/bin:/usr/bin", "TERM": "xterm"},
        network=network,
        rlimits=(("RLIMIT_NOFILE", 256, 256),),
        wall_clock=None,
        requires=("filesystem.confinement", "network.deny", "seatbelt"),
    )


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        path.write_text(text)
    assert path.is_file(), f"missing golden file {path}; run with SANDBOX_SHIM_UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"profile differs from {path}"


# ---- profile: golden and structure ---------------------------------------------------------------


@pytest.mark.parametrize(
    "name,plan",
    [
        ("tenant_bundle_nonet.sb", fixed_plan()),
        ("tenant_bundle_host_tmp.sb", fixed_plan("/tmp/bundles/b", network="host", storage_ro=True)),
    ],
)
def test_tenant_profile_golden(name: str, plan: DarwinPlan) -> None:
    check_golden(name, tenant_profile(plan, resolve=mac_resolve).text)


def _rule_of(text: str, param: str) -> str:
    """The rule head (``allow file-read*`` ...) whose body references ``(param "NAME")``."""
    pos = text.index(f'(param "{param}")')
    return text[:pos].rsplit("\n(", 1)[1].split("\n", 1)[0].split(" (", 1)[0]


def test_profile_structure_order_and_params() -> None:
    prof = tenant_profile(fixed_plan("/tmp/bundles/b"), resolve=mac_resolve)
    lines = prof.text.splitlines()
    assert lines[:2] == ["(version 1)", "(deny default)"]
    assert "(allow network" not in prof.text  # network none: denied by default, loopback included
    # every host path is a -D parameter; none is pasted into the text; every param is used
    assert set(re.findall(r'\(param "([A-Z_0-9]+)"\)', prof.text)) == set(prof.params)
    for v in prof.params.values():
        assert f'"{v}"' not in prof.text
    # resolved: both firmlinked spellings become /private/...
    assert prof.params["DENY_0"] == "/private/tmp/bundles"
    assert prof.params["ROOTFS"] == "/private/tmp/bundles/b/rootfs"
    assert prof.params["STORAGE"] == "/private/tmp/bundles/b/storage"
    assert not any(v.startswith(("/tmp", "/var/", "/etc/")) for v in prof.params.values())
    # order: runtime grants, the blanket deny of the bundles root, then the bundle's own grants
    pos = {k: prof.text.index(f'(param "{k}")') for k in ("RO_0", "DENY_0", "ROOTFS", "STORAGE", "TMETA_0")}
    assert pos["RO_0"] < pos["DENY_0"] < pos["ROOTFS"] < pos["STORAGE"] < pos["TMETA_0"]
    assert _rule_of(prof.text, "DENY_0") == "deny file-read* file-write*"
    assert _rule_of(prof.text, "ROOTFS") == "allow file-read*"  # never writable
    assert _rule_of(prof.text, "STORAGE") == "allow file-read* file-write*"
    assert _rule_of(prof.text, "TMETA_0") == "allow file-read-metadata"
    # nothing grants write to the rootfs or the bundle
    writes = [
        k
        for k in prof.params
        if "file-write" in _rule_of(prof.text, k) and "deny" not in _rule_of(prof.text, k)
    ]
    assert writes == ["STORAGE"]


@pytest.mark.parametrize(
    "short,private",
    [
        ("/tmp/bundles/b", "/private/tmp/bundles/b"),
        ("/var/folders/x/bundles/b", "/private/var/folders/x/bundles/b"),
    ],
)
def test_both_spellings_of_firmlinked_dirs_give_one_profile(short: str, private: str) -> None:
    a = tenant_profile(fixed_plan(short), resolve=mac_resolve)
    b = tenant_profile(fixed_plan(private), resolve=mac_resolve)
    assert a == b
    assert a.params["ROOTFS"] == private + "/rootfs"


def test_network_host_and_readonly_storage() -> None:
    prof = tenant_profile(fixed_plan(network="host", storage_ro=True), resolve=mac_resolve)
    assert "(allow network*)" in prof.text
    assert "com.apple.dnssd.service" not in prof.text
    nonet = tenant_profile(fixed_plan(), resolve=mac_resolve).text
    dns = nonet.index('(deny mach-lookup (global-name "com.apple.dnssd.service")')
    assert dns > nonet.index("(allow mach-lookup)")  # after the header's allow, so the deny wins
    assert _rule_of(prof.text, "STORAGE") == "allow file-read*"
    no_storage = tenant_profile(fixed_plan(storage=False), resolve=mac_resolve)
    assert "STORAGE" not in no_storage.params


@pytest.mark.parametrize("bundle", ["/b", "/usr/share/b", "/System/b"])
def test_no_deny_that_would_cut_the_runtime_read_set(bundle: str) -> None:
    # the bundle's parent is / or contains (or is) a runtime path: denying it would deny dyld & libs
    prof = tenant_profile(fixed_plan(bundle), resolve=mac_resolve)
    assert "DENY_0" not in prof.params
    assert prof.params["ROOTFS"] == bundle + "/rootfs"


def test_launch_argv_shape() -> None:
    plan = fixed_plan()
    prof = tenant_profile(plan, resolve=mac_resolve)
    argv = launch_argv(plan, prof, "/state/x/profile.sb")
    assert argv[:2] == ["/usr/bin/env", "-i"]
    i = argv.index(SANDBOX_EXEC)
    assert argv[2:i] == ["PATH=/bin:/usr/bin", "TERM=xterm"]
    assert argv[i + 1 : i + 3] == ["-f", "/state/x/profile.sb"]
    sep = argv.index("--")
    defines = argv[i + 3 : sep]
    assert defines[0::2] == ["-D"] * len(prof.params)
    assert defines[1::2] == [f"{k}={v}" for k, v in prof.params.items()]
    assert argv[sep + 1 :] == list(plan.args)
    check = launch_argv(plan, prof, "/state/x/profile.sb", program=["/usr/bin/true"])
    assert check[: sep + 1] == argv[: sep + 1] and check[sep + 1 :] == ["/usr/bin/true"]


# ---- plan from an OCI config ---------------------------------------------------------------------


def darwin_config(args: list[str], **over: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "ociVersion": "1.0.2",
        "process": {
            "args": args,
            "cwd": "/",
            "env": ["PATH=/usr/bin:/bin", "LANG=C"],
            "user": {"uid": os.getuid(), "gid": os.getgid()},
        },
        "root": {"path": "rootfs", "readonly": True},
        "mounts": [
            {"destination": "/storage", "type": "bind", "source": "storage", "options": ["rbind", "rw"]}
        ],
        "linux": {"namespaces": [{"type": "network"}, {"type": "mount"}]},
        "annotations": {},
    }
    cfg.update(over)
    return cfg


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    """bundles/b with rootfs/{bin/app (executable), bin/data (not), bin/link -> /bin/app, work/}, storage/."""
    b = tmp_path / "bundles" / "b"
    (b / "rootfs" / "bin").mkdir(parents=True)
    (b / "rootfs" / "work").mkdir()
    (b / "storage" / "sub").mkdir(parents=True)
    app = b / "rootfs" / "bin" / "app"
    app.write_text('#!/bin/sh\necho app-ran "$@"\n')
    app.chmod(0o755)
    (b / "rootfs" / "bin" / "data").write_text("x")
    (b / "rootfs" / "bin" / "link").symlink_to("/bin/app")
    (b / "rootfs" / "bin" / "escape").symlink_to("../../../../../../bin/sh")
    (b / "config.json").write_text(json.dumps(darwin_config(["app"])))
    return b


def test_args0_resolved_inside_the_rootfs(bundle: Path) -> None:
    rootfs = os.path.realpath(bundle / "rootfs")
    plan = plan_of(darwin_config(["app", "a b", "/etc/hosts"]), str(bundle))
    assert plan.program == rootfs + "/bin/app"  # via PATH, inside the rootfs
    assert plan.args == (plan.program, "a b", "/etc/hosts")  # args[1:] unchanged
    assert plan.cwd == rootfs
    # an absolute symlink restarts at the rootfs, not at the host's /
    assert plan_of(darwin_config(["/bin/link"]), str(bundle)).program == rootfs + "/bin/app"
    # relative args[0] against cwd (sandbox terms)
    cfg = darwin_config(["../bin/app"])
    cfg["process"]["cwd"] = "/work"
    plan = plan_of(cfg, str(bundle))
    assert (plan.program, plan.cwd) == (rootfs + "/bin/app", rootfs + "/work")


@pytest.mark.parametrize("arg0", ["sh", "/bin/sh", "/../../../../../../bin/sh", "/bin/escape"])
def test_args0_never_falls_back_to_the_host(bundle: Path, arg0: str) -> None:
    assert os.path.exists("/bin/sh")  # control: the host has it; the rootfs does not
    with pytest.raises(CouldNotRun) as e:
        plan_of(darwin_config([arg0]), str(bundle))
    assert e.value.reason == "not_found" and e.value.exit_status == 127


def test_args0_not_executable(bundle: Path) -> None:
    with pytest.raises(CouldNotRun) as e:
        plan_of(darwin_config(["/bin/data"]), str(bundle))
    assert e.value.reason == "permission_denied"


def test_cwd_and_storage_mapping(bundle: Path) -> None:
    cfg = darwin_config(["/bin/app"])
    cfg["process"]["cwd"] = "/storage/sub"
    plan = plan_of(cfg, str(bundle))
    assert plan.cwd == os.path.realpath(bundle / "storage" / "sub")
    assert plan.storage == os.path.realpath(bundle / "storage") and not plan.storage_readonly
    cfg["process"]["cwd"] = "/nope"
    with pytest.raises(BundleInvalid) as e:
        plan_of(cfg, str(bundle))
    assert e.value.problems[0].pointer == "/process/cwd"


def test_mounts_other_binds_refused_others_ignored(bundle: Path) -> None:
    cfg = darwin_config(["/bin/app"])
    cfg["mounts"] = [
        {"destination": "/proc", "type": "proc", "source": "proc"},
        {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs"},
        {"destination": "/storage", "type": "bind", "source": "storage", "options": ["rbind", "ro"]},
    ]
    plan = plan_of(cfg, str(bundle))
    assert plan.storage_readonly
    assert [w.split(":")[0] for w in plan.warnings] == ["/mounts/0", "/mounts/1"]
    cfg["mounts"].append(
        {"destination": "/host", "type": "bind", "source": "/etc", "options": ["rbind", "ro"]}
    )
    with pytest.raises(BundleInvalid) as e:
        plan_of(cfg, str(bundle))
    assert [p.pointer for p in e.value.problems] == ["/mounts/3"]


def test_rlimit_mapping(bundle: Path) -> None:
    cfg = darwin_config(["/bin/app"])
    cfg["process"]["rlimits"] = [
        {"type": "RLIMIT_NOFILE", "soft": 512, "hard": 1024},
        {"type": "RLIMIT_AS", "soft": 1 << 30, "hard": 1 << 30},
    ]
    cfg["linux"]["resources"] = {
        "memory": {"limit": 256 << 20},
        "pids": {"limit": 64},
        "cpu": {"shares": 512},
    }
    cfg["annotations"] = {"sandbox-shim.cpu-time-seconds": "5", "sandbox-shim.wall-clock-seconds": "2.5"}
    plan = plan_of(cfg, str(bundle))
    assert plan.rlimits == (
        ("RLIMIT_AS", 256 << 20, 256 << 20),
        ("RLIMIT_CPU", 5, 6),
        ("RLIMIT_DATA", 256 << 20, 256 << 20),
        ("RLIMIT_NOFILE", 512, 1024),
        ("RLIMIT_NPROC", 64, 64),
    )
    assert plan.wall_clock == 2.5
    assert {"rlimit.memory", "rlimit.cpu", "rlimit.nproc"} <= set(plan.requires)
    assert any("cpu/shares" in w for w in plan.warnings)
    cfg["linux"]["resources"]["cpu"] = {"quota": 50000, "period": 100000}
    assert "cpu.rate" in plan_of(cfg, str(bundle)).requires
    cfg["process"]["rlimits"].append({"type": "RLIMIT_RTPRIO", "soft": 1, "hard": 1})
    with pytest.raises(BundleInvalid) as e:
        plan_of(cfg, str(bundle))
    assert e.value.problems[0].pointer == "/process/rlimits/2/type"


def _mac_reports() -> list[Capability]:
    """A stand-in for a macOS host's reports (this host is not macOS): what seatbelt gives, and not."""
    avail = ["seatbelt", "filesystem.confinement", "network.deny", "rlimit.cpu", "rlimit.nproc"]
    return [Capability(n, True, "sandbox-exec", "", "stand-in") for n in avail] + [
        Capability(n, False, "sandbox-exec", why, "stand-in") for n, why in NOT_ON_MACOS.items()
    ]


def test_namespaces_and_security_fields_become_requirements(bundle: Path) -> None:
    plan = plan_of(darwin_config(["/bin/app"]), str(bundle))
    assert plan.requires == ("filesystem.confinement", "network.deny", "seatbelt")
    check_requirements(plan, _mac_reports())  # control: a tenant bundle shaped for macOS is accepted
    from sandbox_shim.template import default_config

    cfg = default_config()  # pid/ipc/uts/cgroup namespaces, noNewPrivileges, memory limit
    cfg["process"]["args"] = ["/bin/app"]
    cfg["process"]["user"] = {"uid": os.getuid(), "gid": os.getgid()}
    plan = plan_of(cfg, str(bundle))
    with pytest.raises(CapabilityUnavailable) as e:
        check_requirements(plan, _mac_reports())
    assert sorted(r.name for r in e.value.reports) == [
        "namespace.cgroup",
        "namespace.ipc",
        "namespace.pid",
        "namespace.uts",
        "no_new_privs",
        "rlimit.memory",
    ]
    cfg = darwin_config(["/bin/app"])
    cfg["linux"]["seccomp"] = {"defaultAction": "SCMP_ACT_ALLOW"}
    assert "seccomp" in plan_of(cfg, str(bundle)).requires
    # on this (non-macOS) host's real reports, everything is refused
    if not ON_MAC:
        with pytest.raises(CapabilityUnavailable):
            check_requirements(plan_of(darwin_config(["/bin/app"]), str(bundle)), darwin_capabilities())


def test_network_settings(bundle: Path) -> None:
    cfg = darwin_config(["/bin/app"], linux={"namespaces": [{"type": "mount"}]})
    with pytest.raises(BundleInvalid) as e:  # no network namespace and no host annotation
        plan_of(cfg, str(bundle))
    assert e.value.problems[0].pointer == "/linux/namespaces"
    cfg["annotations"] = {"sandbox-shim.network": "host"}
    plan = plan_of(cfg, str(bundle))
    assert plan.network == "host" and "network.deny" not in plan.requires
    iso = darwin_config(["/bin/app"], annotations={"sandbox-shim.network": "isolated"})
    assert "network.isolated" in plan_of(iso, str(bundle)).requires


def test_uid_rules(bundle: Path) -> None:
    cfg = darwin_config(["/bin/app"])
    cfg["process"]["user"] = {"uid": 0, "gid": 0}
    assert any("uid 0" in w for w in plan_of(cfg, str(bundle), caller_uid=501).warnings)
    cfg["process"]["user"] = {"uid": 1000, "gid": 1000}
    with pytest.raises(BundleInvalid) as e:
        plan_of(cfg, str(bundle), caller_uid=0)
    assert e.value.problems[0].pointer == "/process/user/uid"


def test_env_credentials_refused_without_echo(bundle: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The env rules are the Spec's, applied once by ``bundle.load`` on every OS (the planner reads
    ``Spec.env`` and parses nothing again)."""
    from sandbox_shim.bundle import load

    monkeypatch.setattr(sys, "platform", "darwin")
    cfg = darwin_config(["/bin/app"])
    cfg["process"]["env"].append("API_TOKEN=hunter2-value")
    (bundle / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(BundleInvalid) as e:
        load(str(bundle))
    assert "/process/env/2" in {p.pointer for p in e.value.problems}
    assert "hunter2" not in json.dumps(e.value.to_dict())


# ---- the held gate (our launcher; /usr/bin/env in place of sandbox-exec) -------------------------


def _fifo(tmp_path: Path) -> tuple[str, str]:
    fifo = str(tmp_path / "start.fifo")
    os.mkfifo(fifo, 0o600)
    return fifo, str(tmp_path / "exit-status")


def test_gate_holds_then_releases(tmp_path: Path) -> None:
    fifo, status = _fifo(tmp_path)
    marker = tmp_path / "marker"
    cmd = ["/usr/bin/env", "-i", "X=from-env", "/bin/sh", "-c", f'echo "$X" > {marker}; exit 7']
    proc = launcher.spawn_held(cmd, fifo=fifo, status_file=status)
    time.sleep(0.5)
    assert proc.poll() is None and not marker.exists()  # held: alive, and the command has not run
    assert os.getpgid(proc.pid) == proc.pid  # its own process group (kill the group = kill the sandbox)
    launcher.release(fifo)
    assert proc.wait(timeout=10) == 7
    assert launcher.read_status(status) == 7
    assert marker.read_text() == "from-env\n"
    assert not os.path.exists(fifo)


def test_gate_applies_rlimits_before_the_command(tmp_path: Path) -> None:
    fifo, status = _fifo(tmp_path)
    out = tmp_path / "out"
    cmd = ["/bin/sh", "-c", f"ulimit -t > {out}; ulimit -n >> {out}"]
    proc = launcher.spawn_held(
        cmd, fifo=fifo, status_file=status, rlimits=[("RLIMIT_CPU", 5, 6), ("RLIMIT_NOFILE", 64, 64)]
    )
    launcher.release(fifo)
    assert proc.wait(timeout=10) == 0
    assert out.read_text().split() == ["5", "64"]


def test_gate_records_a_signal_as_128_plus_n_and_keeps_the_fifo_private(tmp_path: Path) -> None:
    fifo, status = _fifo(tmp_path)
    fds = tmp_path / "fds"
    cmd = ["/bin/sh", "-c", f"ls -l /dev/fd/ > {fds} 2>&1; exec sleep 30"]
    proc = launcher.spawn_held(cmd, fifo=fifo, status_file=status)
    launcher.release(fifo)
    import psutil

    deadline = time.monotonic() + 10
    while not psutil.Process(proc.pid).children() and time.monotonic() < deadline:
        time.sleep(0.02)
    child = psutil.Process(proc.pid).children()[0]
    os.kill(proc.pid, signal.SIGTERM)  # the monitor catches TERM and keeps waiting...
    time.sleep(0.2)
    assert proc.poll() is None
    child.send_signal(signal.SIGTERM)  # ...the workload, with default dispositions, dies of it
    assert proc.wait(timeout=10) == 128 + signal.SIGTERM
    assert launcher.read_status(status) == 128 + signal.SIGTERM
    assert "fifo" not in fds.read_text()  # fd 3 was closed before the command ran


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/PID/environ")
def test_monitor_environment_is_minimal(tmp_path: Path) -> None:
    fifo, status = _fifo(tmp_path)
    proc = launcher.spawn_held(["/usr/bin/true"], fifo=fifo, status_file=status)
    try:
        env = Path(f"/proc/{proc.pid}/environ").read_bytes().split(b"\0")
        assert [e for e in env if e] == [f"{k}={v}".encode() for k, v in launcher.MONITOR_ENV.items()]
    finally:
        launcher.release(fifo)
        proc.wait(timeout=10)


def test_release_without_holder_is_a_launch_failure(tmp_path: Path) -> None:
    from sandbox_shim.errors import LaunchFailed

    fifo, _ = _fifo(tmp_path)
    with pytest.raises(LaunchFailed):
        launcher.release(fifo)


# ---- the mechanism's lifecycle, with a stand-in for sandbox-exec -----------------------------------

STAND_IN = """#!/bin/sh
# stand-in for sandbox-exec on a host without it: drop -f/-D options up to "--", then exec the command
while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do shift; done
shift
exec "$@"
"""
REJECTING = """#!/bin/sh
echo "sandbox-exec: unbound variable: bogus-operation" >&2
exit 65
"""


def _stand_in(tmp_path: Path, text: str) -> str:
    p = tmp_path / "fake-sandbox-exec"
    p.write_text(text)
    p.chmod(p.stat().st_mode | stat.S_IXUSR)
    return str(p)


def _mech(tmp_path: Path, text: str = STAND_IN) -> DarwinSeatbeltMechanism:
    mech = DarwinSeatbeltMechanism(probe=_mac_reports, sandbox_exec=_stand_in(tmp_path, text))
    assert isinstance(mech, Mechanism)
    return mech


def _sandbox(tmp_path: Path, bundle: Path, sid: str = "s1") -> Sandbox:
    d = tmp_path / "state" / sid
    d.mkdir(parents=True)
    return Sandbox(sid, str(bundle), private={"dir": str(d)})


def test_lifecycle_created_running_stopped(tmp_path: Path, bundle: Path) -> None:
    app = bundle / "rootfs" / "bin" / "app"
    app.write_text("#!/bin/sh\necho started > ../storage/ran\nexit 3\n")
    mech = _mech(tmp_path)
    sb = _sandbox(tmp_path, bundle)
    mech.provision(sb, plan_of(darwin_config(["/bin/app"]), sb.bundle), ProvisionOptions())
    assert mech.status(sb).status == "created"
    time.sleep(0.3)
    assert not (bundle / "storage" / "ran").exists()  # held: no user code ran
    assert Path(sb.private["profile"]).read_text().startswith("(version 1)\n(deny default)\n")
    mech.start(sb)
    assert mech.wait(sb, timeout_s=10) == 3
    st = mech.status(sb)
    assert (st.status, st.exit_status, st.pid) == ("stopped", 3, 0)
    assert (bundle / "storage" / "ran").read_text() == "started\n"
    mech.destroy(sb)
    assert not os.path.exists(sb.private["profile"])


def test_wall_clock_kills_the_group_and_usage(tmp_path: Path, bundle: Path) -> None:
    app = bundle / "rootfs" / "bin" / "app"
    app.write_text("#!/bin/sh\nsleep 30 &\nsleep 30\n")
    cfg = darwin_config(["/bin/app"], annotations={"sandbox-shim.wall-clock-seconds": "1"})
    mech = _mech(tmp_path)
    sb = _sandbox(tmp_path, bundle)
    mech.provision(sb, plan_of(cfg, sb.bundle), ProvisionOptions())
    mech.start(sb)
    time.sleep(0.3)
    use = mech.usage(sb)
    assert use.pids is not None and use.pids >= 3 and (use.memory_bytes or 0) > 0  # app + two sleeps
    group = [p.pid for p in launcher.members(sb.private["pid"])]
    assert len(group) >= 4
    t0 = time.monotonic()
    with pytest.raises(LimitExceeded) as e:
        mech.wait(sb)
    assert e.value.kind_of_limit == "wall_clock" and time.monotonic() - t0 < 5
    time.sleep(0.2)
    import psutil

    alive = [p for p in group if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert alive == []  # the whole process group, background job included


def test_kill_workload_then_all(tmp_path: Path, bundle: Path) -> None:
    app = bundle / "rootfs" / "bin" / "app"
    app.write_text("#!/bin/sh\nexec sleep 30\n")
    mech = _mech(tmp_path)
    sb = _sandbox(tmp_path, bundle)
    mech.provision(sb, plan_of(darwin_config(["/bin/app"]), sb.bundle), ProvisionOptions())
    mech.start(sb)
    deadline = time.monotonic() + 10
    while mech.workload_pid(sb) == sb.private["pid"] and time.monotonic() < deadline:
        time.sleep(0.02)
    assert mech.workload_pid(sb) != sb.private["pid"]
    mech.signal(sb, signal.SIGKILL, all_processes=True)
    assert mech.wait(sb, timeout_s=10) == 128 + signal.SIGKILL  # the monitor survived to record it
    mech.destroy(sb)


def test_rejected_profile_is_a_setup_failure(tmp_path: Path, bundle: Path) -> None:
    mech = _mech(tmp_path, REJECTING)
    sb = _sandbox(tmp_path, bundle)
    with pytest.raises(CannotEnforce) as e:
        mech.provision(sb, plan_of(darwin_config(["/bin/app"]), sb.bundle), ProvisionOptions())
    assert "bogus-operation" in e.value.detail and "exit 65" in e.value.detail
    assert os.listdir(sb.private["dir"]) == []  # no profile, FIFO or process left
    assert "pid" not in sb.private


def test_refused_before_anything_is_made(tmp_path: Path, bundle: Path) -> None:
    mech = _mech(tmp_path)
    sb = _sandbox(tmp_path, bundle)
    cfg = darwin_config(["/bin/app"], linux={"namespaces": [{"type": "network"}, {"type": "pid"}]})
    with pytest.raises(CapabilityUnavailable):
        mech.provision(sb, plan_of(cfg, sb.bundle), ProvisionOptions())
    assert os.listdir(sb.private["dir"]) == []


# ---- through the library: api.provision's options reach the launcher; exec is refused ----------


def _library_mech(tmp_path: Path, bundle: Path, args: list[str]) -> DarwinSeatbeltMechanism:
    """The stand-in mechanism with a state root, and ``bundle`` set up to pass ``bundle.load`` and the
    macOS planner with the host's reports: no pid namespace (macOS has none; the pid-namespace floor
    is the Linux planner's rule)."""
    namespaces = [{"type": "network"}, {"type": "mount"}]
    (bundle / "config.json").write_text(json.dumps(darwin_config(args, linux={"namespaces": namespaces})))
    mech = DarwinSeatbeltMechanism(probe=_mac_reports, sandbox_exec=_stand_in(tmp_path, STAND_IN))
    mech.root = str(tmp_path / "state")
    return mech


def test_the_library_captures_output_through_provision_options(tmp_path: Path, bundle: Path) -> None:
    """``run_bundle``'s capture path: the stdio ``api.provision`` is given reaches the launcher as
    ``ProvisionOptions.stdio`` (it was a keyword the library never passed: the caller's streams)."""
    from sandbox_shim import api
    from sandbox_shim.execution import run_bundle

    app = bundle / "rootfs" / "bin" / "app"
    app.write_text("#!/bin/sh\necho out-line\necho err-line >&2\nexit 3\n")
    mech = _library_mech(tmp_path, bundle, ["/bin/app"])
    done = run_bundle(mech, "d1", bundle, timeout=20)
    assert (done.exit_status, done.stdout, done.stderr) == (3, b"out-line\n", b"err-line\n")
    assert api.list_sandboxes(mech) == []


def test_the_library_refuses_what_the_launcher_cannot_pass(tmp_path: Path, bundle: Path) -> None:
    from sandbox_shim import api

    mech = _library_mech(tmp_path, bundle, ["/bin/app"])
    with pytest.raises(CapabilityUnavailable) as e:
        api.provision(mech, Sandbox("d3", str(bundle)), console_socket=str(tmp_path / "console.sock"))
    assert [r.name for r in e.value.reports] == ["console-socket"]
    assert api.list_sandboxes(mech) == []  # refused before anything was made


def test_exec_is_refused_as_not_available(tmp_path: Path, bundle: Path) -> None:
    """``exec`` goes through ``Mechanism.exec``: macOS answers "not available" (exit status 4), not a
    misleading state error."""
    from sandbox_shim import api
    from sandbox_shim.execution import execute

    app = bundle / "rootfs" / "bin" / "app"
    app.write_text("#!/bin/sh\nexec sleep 30\n")
    mech = _library_mech(tmp_path, bundle, ["/bin/app"])
    api.provision(mech, Sandbox("d2", str(bundle)))
    try:
        assert api.start(mech, "d2").status == "running"
        with pytest.raises(CapabilityUnavailable) as e:
            execute(mech, "d2", ("/bin/true", []))
        assert e.value.exit_status == 4 and [r.name for r in e.value.reports] == ["exec"]
    finally:
        api.destroy(mech, "d2", force=True)


# ---- real macOS --------------------------------------------------------------------------------


def _mac_bundle(tmp_path: Path, name: str, args: list[str], **over: Any) -> Path:  # pragma: no cover
    import shutil

    b = tmp_path / "bundles" / name
    (b / "rootfs" / "bin").mkdir(parents=True)
    (b / "storage").mkdir()
    for tool in ("cat", "sh", "echo"):
        shutil.copy2(f"/bin/{tool}", b / "rootfs" / "bin" / tool)
    (b / "config.json").write_text(json.dumps(darwin_config(args, **over)))
    return b


@pytest.mark.darwin
@darwin_only
def test_real_capabilities() -> None:  # pragma: no cover (macOS)
    reports = {r.name: r for r in darwin_capabilities()}
    for name in ("seatbelt", "filesystem.confinement", "network.deny"):
        assert reports[name].available, reports[name]
    for name in NOT_ON_MACOS:
        assert not reports[name].available


@pytest.mark.darwin
@darwin_only
def test_real_compile_check_reports_sandbox_exec_message() -> None:  # pragma: no cover (macOS)
    with pytest.raises(CannotEnforce) as e:
        compile_check([SANDBOX_EXEC, "-p", "(version 1)(allow no-such-operation)", "--", "/usr/bin/true"])
    assert e.value.detail.strip()
    compile_check([SANDBOX_EXEC, "-p", "(version 1)(allow default)", "--", "/usr/bin/true"])  # control


def _real_run(tmp_path: Path, bundle: Path, sid: str) -> tuple[int | None, str, str]:  # pragma: no cover
    mech = DarwinSeatbeltMechanism()
    sb = _sandbox(tmp_path, bundle, sid)
    out, err = tmp_path / f"{sid}.out", tmp_path / f"{sid}.err"
    with open(out, "wb") as o, open(err, "wb") as e:
        cfg = json.loads((bundle / "config.json").read_text())
        mech.provision(
            sb, plan_of(cfg, sb.bundle), ProvisionOptions(stdio=(subprocess.DEVNULL, o.fileno(), e.fileno()))
        )
    assert mech.status(sb).status == "created"
    mech.start(sb)
    code = mech.wait(sb, timeout_s=30)
    mech.destroy(sb)
    return code, out.read_text(), err.read_text()


@pytest.mark.darwin
@darwin_only
def test_real_storage_readable_sibling_denied(tmp_path: Path) -> None:  # pragma: no cover (macOS)
    other = _mac_bundle(tmp_path, "other", ["/bin/echo"])
    (other / "storage" / "secret").write_text("sibling-secret")
    b = _mac_bundle(tmp_path, "b", ["/bin/cat", "mine"])
    b_cfg = json.loads((b / "config.json").read_text())
    b_cfg["process"]["cwd"] = "/storage"
    (b / "config.json").write_text(json.dumps(b_cfg))
    (b / "storage" / "mine").write_text("own-marker")
    code, out, _ = _real_run(tmp_path, b, "control")
    assert (code, out) == (0, "own-marker")  # control
    b_cfg["process"]["args"] = ["/bin/cat", str(other.resolve() / "storage" / "secret")]
    (b / "config.json").write_text(json.dumps(b_cfg))
    code, out, err = _real_run(tmp_path, b, "breach")
    assert code == 1 and "sibling-secret" not in out and "Operation not permitted" in err


@pytest.mark.darwin
@darwin_only
def test_real_network_denied_by_default(tmp_path: Path) -> None:  # pragma: no cover (macOS)
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(4)
        port = srv.getsockname()[1]
        script = f"/usr/bin/nc -z -w 3 127.0.0.1 {port} && echo reached"
        host = _mac_bundle(
            tmp_path,
            "h",
            ["/bin/sh", "-c", script],
            annotations={"sandbox-shim.network": "host"},
            linux={"namespaces": [{"type": "mount"}]},
        )
        assert _real_run(tmp_path, host, "net-control")[1] == "reached\n"  # control
        deny = _mac_bundle(tmp_path, "d", ["/bin/sh", "-c", script])
        code, out, _ = _real_run(tmp_path, deny, "net-breach")
        assert code != 0 and "reached" not in out


@pytest.mark.darwin
@darwin_only
def test_real_rootfs_not_writable(tmp_path: Path) -> None:  # pragma: no cover (macOS)
    script = "echo x > ../rootfs/written; echo ok > ../storage/w && echo stored"
    b = _mac_bundle(tmp_path, "w", ["/bin/sh", "-c", script])
    code, out, err = _real_run(tmp_path, b, "w")
    assert out == "stored\n" and (b / "storage" / "w").read_text() == "ok\n"  # control
    assert not (b / "rootfs" / "written").exists() and "Operation not permitted" in err
