"""Capability probes, the cache, and the ``capabilities`` / ``features`` commands, on the real kernel.

Every probe must report available on this host where the thing truly works (root, Linux, bwrap and
cgroups present), and must report unavailable - with a detail a person can act on - when the thing is
made to fail for real: a child process under a seccomp filter that denies the syscall, a cgroup
hierarchy that is read-only or is not a cgroup hierarchy at all.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from click.testing import CliRunner
from sandbox_shim import capability, probes
from sandbox_shim.capability import Capability
from sandbox_shim.cli.capabilities import capabilities_cmd, features_cmd
from sandbox_shim.features import HOOKS, NAMESPACE_PROBES, features
from sandbox_shim.platforms.darwin import probes as darwin_probes
from sandbox_shim.platforms.linux import kernel_probes
from sandbox_shim.platforms.linux import probes as linux_probes
from sandbox_shim.platforms.linux.cgroups.detect import Layout, detect
from sandbox_shim.platforms.windows import probes as windows_probes

LINUX_ROOT = sys.platform == "linux" and os.geteuid() == 0
needs_linux_root = pytest.mark.skipif(not LINUX_ROOT, reason="needs Linux and root (namespaces, cgroups)")
needs_linux = pytest.mark.skipif(sys.platform != "linux", reason="Linux probes")
NAMESPACE_NAMES = [f"namespace.{k}" for k in kernel_probes.NAMESPACES]
CGROUP_NAMES = [f"cgroup.{c}" for c in ("memory", "pids", "cpu", "cpuset", "freezer")]


def schema(name: str) -> dict[str, Any]:
    return json.loads(resources.files("sandbox_shim.schemas").joinpath(name).read_text(encoding="utf-8"))


Deny = dict[str, int | tuple[int, int]]


def run_child(body: str, deny: Deny | None = None) -> Any:
    """Run ``body`` (Python that prints JSON) in a fresh interpreter, optionally under a seccomp filter
    that makes each syscall in ``deny`` fail with the given errno (libseccomp through pyseccomp); a value
    ``(errno, mask)`` fails only calls whose first argument has every bit of ``mask`` set."""
    code = textwrap.dedent(f"""
        import json
        deny = {deny or {}!r}
        if deny:
            import pyseccomp as s
            f = s.SyscallFilter(s.ALLOW)
            for call, rule in deny.items():
                if isinstance(rule, tuple):
                    f.add_rule(s.ERRNO(rule[0]), call, s.Arg(0, s.MASKED_EQ, rule[1], rule[1]))
                else:
                    f.add_rule(s.ERRNO(rule), call)
            f.load()
    """) + textwrap.dedent(body)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def probe_in_child(
    names: list[str], deny: Deny | None = None, cache_dir: str | None = None
) -> dict[str, dict[str, Any]]:
    """The named probes' reports from a child process (through the cache in ``cache_dir`` if given)."""
    return run_child(
        f"""
        from sandbox_shim import capability, probes
        names, cache_dir = {names!r}, {cache_dir!r}
        reports = probes.cached_report(names, cache_dir) if cache_dir else capability.report(names)
        print(json.dumps({{c.name: c.to_dict() for c in reports}}))
    """,
        deny,
    )


# ---- each probe, where the thing truly works ---------------------------------------------------


@needs_linux_root
@pytest.mark.parametrize("name", NAMESPACE_NAMES + ["no_new_privs", "seccomp"])
def test_kernel_probes_available_as_root(name: str) -> None:
    cap = capability.PROBES[name]()
    assert cap.available, cap
    assert cap.detail == "" and cap.measured_by and cap.mechanism


@needs_linux_root
def test_network_probe_brings_lo_up_in_a_fresh_namespace() -> None:
    cap = kernel_probes.probe_namespace("network")
    assert cap.available and "lo up" in cap.measured_by


@needs_linux_root
def test_pid_probe_sees_pid_1() -> None:
    assert "child is pid 1" in kernel_probes.probe_namespace("pid").measured_by


@needs_linux_root
def test_uts_probe_leaves_the_host_name_alone() -> None:
    before = os.uname().nodename
    assert kernel_probes.probe_namespace("uts").available
    assert os.uname().nodename == before


@needs_linux_root
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bwrap is not installed")
def test_bwrap_probe_runs_bwrap() -> None:
    cap = linux_probes.probe_bwrap()
    version = subprocess.run(["bwrap", "--version"], capture_output=True, text=True).stdout.split()[-1]
    assert cap.available, cap
    assert cap.mechanism == f"bwrap {version}"


@needs_linux
def test_landlock_probe_matches_the_abi_the_kernel_reports() -> None:
    from sandbox_shim.platforms.linux import landlock

    abi = landlock.abi_version()  # measured independently, by the Landlock module
    cap = kernel_probes.probe_landlock()
    if abi == 0:
        assert not cap.available and cap.detail
    else:
        assert cap.available, cap
        assert cap.mechanism == f"landlock ABI {abi}"


@needs_linux_root
@pytest.mark.parametrize("name", CGROUP_NAMES)
def test_cgroup_probes_available_and_leave_nothing_behind(name: str) -> None:
    layout = detect()
    if layout.version == 0:
        pytest.skip("no cgroup hierarchy with memory and pids on this host")
    cap = capability.PROBES[name]()
    assert cap.available, cap
    assert cap.mechanism == f"cgroup v{layout.version}"
    parents = [os.path.join(m, "sandbox-shim") for m in (*layout.v1_mounts.values(), layout.v2_mount) if m]
    left = [os.path.join(p, e) for p in parents if os.path.isdir(p) for e in os.listdir(p) if ".probe-" in e]
    assert left == []


def test_other_platform_probes_say_why() -> None:
    if sys.platform != "darwin":
        assert darwin_probes.probe_sandbox_exec().detail == "not macOS"
    if sys.platform != "win32":
        assert windows_probes.probe_job_object().detail == "not Windows"


@needs_linux_root
def test_all_probes_are_cheap() -> None:
    capability.clear_cache()
    started = time.perf_counter()
    reports = capability.report()
    elapsed = time.perf_counter() - started
    assert len(reports) == len(capability.PROBES) >= 18
    assert elapsed < 1.0, f"all probes took {elapsed * 1000:.0f} ms"


# ---- probes fail for real ------------------------------------------------------------------------


@needs_linux_root
def test_namespace_probes_fail_under_a_seccomp_filter_denying_unshare() -> None:
    got = probe_in_child(NAMESPACE_NAMES, deny={"unshare": 1})  # EPERM
    for name in NAMESPACE_NAMES:
        cap = got[name]
        assert not cap["available"], cap
        flag = kernel_probes.NAMESPACES[name.split(".")[1]][1]
        assert cap["detail"].startswith(f"EPERM from unshare({flag})"), cap
        assert "run as root" in cap["detail"] and "seccomp filter" in cap["detail"]


@pytest.mark.skipif(not LINUX_ROOT or shutil.which("bwrap") is None, reason="needs Linux, root and bwrap")
def test_bwrap_probe_fails_when_namespaces_are_denied() -> None:
    clone_newpid = kernel_probes.NAMESPACES["pid"][0]
    deny: Deny = {"unshare": 1, "clone": (1, clone_newpid), "clone3": 38}  # clone3 -> ENOSYS: use clone
    cap = probe_in_child(["bwrap"], deny=deny)["bwrap"]
    assert not cap["available"], cap
    assert "bwrap failed: bwrap:" in cap["detail"] and "seccomp filter" in cap["detail"], cap


@needs_linux_root
def test_namespace_probe_explains_a_missing_kernel_feature() -> None:
    got = probe_in_child(["namespace.user"], deny={"unshare": 22})  # EINVAL, as a kernel without USER_NS
    assert "built without CONFIG_USER_NS" in got["namespace.user"]["detail"]
    got = probe_in_child(["namespace.network"], deny={"unshare": 28})  # ENOSPC, as max_net_namespaces=0
    assert "user.max_net_namespaces" in got["namespace.network"]["detail"]


@needs_linux_root
def test_prctl_probes_fail_under_a_seccomp_filter_denying_prctl() -> None:
    got = probe_in_child(["no_new_privs", "seccomp"], deny={"prctl": 1})
    for name in ("no_new_privs", "seccomp"):
        assert not got[name]["available"]
        assert "EPERM from prctl(PR_SET_NO_NEW_PRIVS)" in got[name]["detail"], got[name]


@needs_linux_root
def test_landlock_probe_fails_when_the_syscall_is_missing() -> None:
    got = probe_in_child(["landlock"], deny={"landlock_create_ruleset": 38})  # ENOSYS
    cap = got["landlock"]
    assert not cap["available"] and "CONFIG_SECURITY_LANDLOCK" in cap["detail"], cap


@needs_linux_root
def test_landlock_probe_explains_landlock_disabled_at_boot() -> None:
    cap = probe_in_child(["landlock"], deny={"landlock_create_ruleset": 95})["landlock"]  # EOPNOTSUPP
    assert not cap["available"] and "lsm= boot parameter" in cap["detail"], cap


@needs_linux
def test_cgroup_probe_refuses_a_directory_that_is_not_a_cgroup_hierarchy(tmp_path: Path) -> None:
    fake = {c: str(tmp_path) for c in ("memory", "pids", "cpu", "cpuacct", "freezer")}
    cap = linux_probes.probe_cgroup("memory", Layout(v1_mounts=fake))
    assert not cap.available
    assert cap.mechanism == "cgroup v1"
    assert f"{tmp_path} is not a cgroup v1 hierarchy" in cap.detail
    assert not (tmp_path / "sandbox-shim").exists()  # the throwaway directory and the parent made for it


@needs_linux
def test_cgroup_probe_reports_a_v2_mount_without_controllers(tmp_path: Path) -> None:
    layout = Layout(v2_mount=str(tmp_path), v2_controllers=frozenset({"memory", "pids"}))
    cap = linux_probes.probe_cgroup("pids", layout)
    assert not cap.available and cap.mechanism == "cgroup v2"
    assert "not available" in cap.detail


@needs_linux
def test_cgroup_probe_reports_no_hierarchy() -> None:
    cap = linux_probes.probe_cgroup("memory", Layout())
    assert not cap.available and "no usable cgroup hierarchy" in cap.detail


@needs_linux_root
def test_cgroup_probe_fails_on_a_read_only_hierarchy() -> None:
    layout = detect()
    if layout.version != 1 or "memory" not in layout.v1_mounts or shutil.which("unshare") is None:
        pytest.skip("needs a cgroup v1 memory hierarchy and util-linux unshare")
    mount = layout.v1_mounts["memory"]
    code = (
        f"import subprocess; subprocess.run(['mount', '-o', 'remount,bind,ro', {mount!r}], check=True); "
        "from sandbox_shim.platforms.linux import probes as linux_probes; import json; "
        "print(json.dumps(linux_probes.probe_cgroup('memory').to_dict()))"
    )
    run = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    cap = json.loads(run.stdout)
    assert not cap["available"]
    assert "Read-only file system" in cap["detail"], cap
    assert linux_probes.probe_cgroup("memory").available  # the host's own mount is untouched


# ---- the cross-process cache ----------------------------------------------------------------------


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A probe named ``test.counted`` that records each time it runs (to see when the cache probes)."""
    calls: list[int] = []

    def run() -> Capability:
        calls.append(1)
        return Capability("test.counted", True, "test", "", "counted")

    capability._load_probes()
    monkeypatch.setitem(capability.PROBES, "test.counted", run)
    return calls


def test_cache_reuses_reports_while_the_key_holds(tmp_path: Path, counted: list[int]) -> None:
    first = probes.cached_report(["test.counted"], str(tmp_path))
    second = probes.cached_report(["test.counted"], str(tmp_path))
    assert first == second and len(counted) == 1
    doc = json.loads((tmp_path / probes.CACHE_FILE).read_text())
    assert doc["key"] == probes.cache_key()
    assert [p.name for p in tmp_path.iterdir()] == [probes.CACHE_FILE]  # atomic: no temp file left


@pytest.mark.parametrize(
    "field", ["kernel", "boot_id", "bwrap", "cgroups", "confinement", "python", "ld_cache"]
)
def test_cache_is_invalidated_when_the_key_changes(tmp_path: Path, counted: list[int], field: str) -> None:
    key = probes.cache_key()
    probes.cached_report(["test.counted"], str(tmp_path), key)
    changed = dict(key, **{field: key.get(field, "") + "-changed"})
    probes.cached_report(["test.counted"], str(tmp_path), changed)
    assert len(counted) == 2
    assert json.loads((tmp_path / probes.CACHE_FILE).read_text())["key"] == changed
    probes.cached_report(["test.counted"], str(tmp_path), key)  # and back: probed again, never reused
    assert len(counted) == 3


@needs_linux_root
def test_cache_ignores_a_file_owned_by_someone_else(tmp_path: Path, counted: list[int]) -> None:
    probes.cached_report(["test.counted"], str(tmp_path))
    os.chown(tmp_path / probes.CACHE_FILE, 65534, 65534)
    probes.cached_report(["test.counted"], str(tmp_path))
    assert len(counted) == 2


@needs_linux_root
def test_cache_is_not_reused_by_a_process_under_a_seccomp_filter(tmp_path: Path) -> None:
    ours = probes.cached_report(["namespace.user"], str(tmp_path))
    assert ours[0].available
    theirs = probe_in_child(["namespace.user"], deny={"unshare": 1}, cache_dir=str(tmp_path))
    assert not theirs["namespace.user"]["available"]  # re-probed: its key (Seccomp: 2) differs
    again = probe_in_child(["namespace.user"], cache_dir=str(tmp_path))
    assert again["namespace.user"]["available"]


@needs_linux_root
def test_a_refusal_is_never_served_to_another_caller_with_the_same_key(tmp_path: Path) -> None:
    """Two callers under different seccomp filters look alike to the key (both ``Seccomp: 2``, the
    same flags): the one whose filter denies unshare gets "unavailable", which is not kept; the one
    whose filter denies something else probes for itself and gets "available"."""
    blocked = probe_in_child(["namespace.user"], deny={"unshare": 1}, cache_dir=str(tmp_path))
    assert not blocked["namespace.user"]["available"]  # control: the filter does deny it
    benign = probe_in_child(["namespace.user"], deny={"acct": 1}, cache_dir=str(tmp_path))
    assert benign["namespace.user"]["available"], benign
    again = probe_in_child(["namespace.user"], deny={"unshare": 1}, cache_dir=str(tmp_path))
    assert not again["namespace.user"]["available"]  # a filtered caller probes for itself
    ours = probes.cached_report(["namespace.user"], str(tmp_path))
    assert ours[0].available  # and an unfiltered one is served "available", probed or kept


@needs_linux_root
def test_cache_is_not_reused_when_a_hierarchy_is_remounted_read_only(tmp_path: Path) -> None:
    layout = detect()
    if layout.version != 1 or "memory" not in layout.v1_mounts or shutil.which("unshare") is None:
        pytest.skip("needs a cgroup v1 memory hierarchy and util-linux unshare")
    mount = layout.v1_mounts["memory"]
    code = (
        "import json, sys; from sandbox_shim import probes; "
        "c = probes.cached_report(['cgroup.memory'], sys.argv[1])[0]; print(json.dumps(c.to_dict()))"
    )

    def in_namespace(remount: bool) -> dict[str, Any]:
        script = (
            f"mount -o remount,bind,ro {mount} && " if remount else ""
        ) + f'exec {sys.executable} -c "{code}" {tmp_path}'
        run = subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert run.returncode == 0, run.stderr
        return json.loads(run.stdout)

    assert in_namespace(False)["available"]  # control: cached "available" for a writable hierarchy
    ro = in_namespace(True)  # the same cache dir, the hierarchy read-only: the key differs, re-probed
    assert not ro["available"] and "Read-only file system" in ro["detail"], ro
    assert in_namespace(False)["available"]  # and back: the read-only answer is not reused either


#: a binding that cannot be loaded, first on ``sys.path`` (as a process without the venv's packages)
BROKEN_BINDING = "raise ImportError('no binding here')\n"


@needs_linux_root
def test_cache_is_not_reused_by_a_process_that_imports_other_packages(tmp_path: Path) -> None:
    """A process whose ``sys.path`` has no usable libseccomp binding gets "seccomp unavailable" and
    keeps it in the cache; a process that has the binding must probe again, not read that answer
    (and the other way round)."""
    cache, blocked = tmp_path / "cache", tmp_path / "blocked"
    cache.mkdir()
    blocked.mkdir()
    (blocked / "pyseccomp.py").write_text(BROKEN_BINDING)
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[2]) if sys.argv[2] else None; "
        "from sandbox_shim import probes; "
        "c = probes.cached_report(['seccomp'], sys.argv[1])[0]; print(json.dumps(c.to_dict()))"
    )

    def report(block: bool) -> dict[str, Any]:
        run = subprocess.run(
            [sys.executable, "-c", code, str(cache), str(blocked) if block else ""],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert run.returncode == 0, run.stderr
        return json.loads(run.stdout)

    without = report(True)
    assert not without["available"] and "no binding here" in without["detail"], without  # control
    assert report(False)["available"]  # re-probed with the binding: not the cached refusal
    assert not report(True)["available"]  # and back


def test_cache_key_covers_what_the_interpreter_can_import(tmp_path: Path) -> None:
    """Installing a package changes its directory's entries, so the key's ``python`` part."""
    sys.path.insert(0, str(tmp_path))
    try:
        before = probes.cache_key()["python"]
        (tmp_path / "newpkg").mkdir()
        os.utime(tmp_path, ns=(0, os.stat(tmp_path).st_mtime_ns + 1_000_000))  # a coarse clock
        assert probes.cache_key()["python"] != before
    finally:
        sys.path.remove(str(tmp_path))


def test_cache_key_is_stable_within_a_boot() -> None:
    assert probes.cache_key() == probes.cache_key()


# ---- the commands and their schemas ----------------------------------------------------------------


def test_capabilities_json_validates() -> None:
    result = CliRunner().invoke(capabilities_cmd, ["--format", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    jsonschema.Draft202012Validator(schema("capabilities.schema.json")).validate(doc)
    assert {c["name"] for c in doc["capabilities"]} == set(capability.PROBES)
    assert doc["host"]["kernel"] == os.uname().release


def test_capabilities_schema_rejects_an_unavailable_report_without_detail() -> None:
    bad = {
        "host": {"kernel": "6", "arch": "x86_64", "platform": "linux"},
        "capabilities": [
            {"name": "seccomp", "available": False, "mechanism": "", "detail": "", "measured_by": "prctl"}
        ],
    }
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(schema("capabilities.schema.json")).validate(bad)


def test_capabilities_table_lists_every_probe() -> None:
    result = CliRunner().invoke(capabilities_cmd, [])
    assert result.exit_code == 0
    assert result.output.splitlines()[0].split()[:3] == ["NAME", "AVAILABLE", "MECHANISM"]
    for name in capability.PROBES:
        assert name in result.output


def test_features_document_validates_and_claims_only_what_was_probed() -> None:
    result = CliRunner().invoke(features_cmd, [])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    jsonschema.Draft202012Validator(schema("features.schema.json")).validate(doc)
    reports = {c.name: c for c in capability.report()}
    probed = sorted(ns for ns, p in NAMESPACE_PROBES.items() if reports[p].available)
    assert doc["linux"]["namespaces"] == probed
    assert doc["hooks"] == HOOKS
    from sandbox_shim import hooks

    assert set(HOOKS) == set(hooks.REQUIRED + hooks.WARN_ONLY)  # claims no hook hooks.py does not run
    assert doc["linux"]["apparmor"] == {"enabled": False} and doc["linux"]["selinux"] == {"enabled": False}
    assert doc["linux"]["cgroup"]["systemd"] is False and doc["linux"]["cgroup"]["systemdUser"] is False
    assert doc["linux"]["seccomp"]["enabled"] == reports["seccomp"].available
    assert "SCMP_ACT_NOTIFY" not in doc["linux"]["seccomp"]["actions"]
    assert doc["linux"]["capabilities"] == schema("config.schema.json")["$defs"]["capability"]["enum"]


def test_features_drop_what_a_probe_could_not_do() -> None:
    down = [Capability(n, False, "unshare(2)", "EPERM", "unshare") for n in NAMESPACE_NAMES]
    down += [
        Capability("seccomp", False, "seccomp BPF", "EPERM", "prctl"),
        Capability("cgroup.memory", True, "cgroup v2", "", "mkdir"),
    ]
    doc = features(down)
    jsonschema.Draft202012Validator(schema("features.schema.json")).validate(doc)
    assert doc["linux"]["namespaces"] == []
    assert doc["linux"]["seccomp"]["enabled"] is False and doc["linux"]["seccomp"]["actions"] == []
    assert doc["linux"]["cgroup"]["v2"] is True and doc["linux"]["cgroup"]["v1"] is False


@needs_linux_root
def test_features_under_a_seccomp_filter_lists_no_namespaces() -> None:
    doc = run_child(
        """
        from sandbox_shim.features import features
        print(json.dumps(features()))
    """,
        deny={"unshare": 1},
    )
    jsonschema.Draft202012Validator(schema("features.schema.json")).validate(doc)
    assert doc["linux"]["namespaces"] == []
