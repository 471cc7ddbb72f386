"""CI runs the conformance suite against this host's Linux mechanism: every check passes or skips with a
reason.  Also: the pytest plugin is inert when not asked for, collects the suite when it is, and the
``sandbox-shim conformance`` command prints the table and exits non-zero on a fail.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sandbox_shim.conformance import ConformanceSuite

REPO = Path(__file__).resolve().parent.parent

linux_root = pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.geteuid() != 0, reason="needs Linux, root, bwrap and cgroups"
)


@linux_root
class TestLinuxMechanism(ConformanceSuite):
    """The whole suite, one test per check, against ``ApiTarget`` (bwrap + cgroups)."""

    mechanism = "sandbox_shim.conformance.api_target:ApiTarget"


PYTEST = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]


def run_pytest(
    tmp_path: Path, *args: str, body: str = "def test_nothing():\n    pass\n"
) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_sample.py").write_text(body)
    return subprocess.run(
        [*PYTEST, "--rootdir", str(tmp_path), *args, str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )


def test_plugin_is_inert_when_not_asked(tmp_path: Path) -> None:
    body = (
        "import sys\n"
        "def test_plugin_loaded_but_idle(pytestconfig):\n"
        "    assert pytestconfig.pluginmanager.hasplugin('sandbox_shim_conformance')\n"
        "    assert pytestconfig.getoption('sandbox_mechanism') is None\n"
        "    loaded = [m for m in sys.modules if m.startswith('sandbox_shim.conformance.')]\n"
        "    assert loaded == ['sandbox_shim.conformance.plugin'], loaded\n"
    )
    p = run_pytest(tmp_path, body=body)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "1 passed" in p.stdout


@linux_root
def test_plugin_runs_the_suite_on_request(tmp_path: Path) -> None:
    p = run_pytest(
        tmp_path,
        "--sandbox-mechanism",
        "sandbox_shim.conformance.api_target:ApiTarget",
        "-k",
        "fs-mount or duplicate or nothing",
        "-rs",
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert "3 passed" in p.stdout, p.stdout


@linux_root
def test_plugin_reports_a_leaky_mechanism_as_failed(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO / "tests"))
    p = subprocess.run(
        [
            *PYTEST,
            "--rootdir",
            str(tmp_path),
            "--sandbox-mechanism",
            "test_conformance_proofs:LeakyTarget",
            "-k",
            "sibling",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    assert p.returncode == 1, p.stdout + p.stderr
    assert "FAIL: Isolation / fs: read a sibling's storage by its host path" in p.stdout


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    # through the CLI's error boundary, as a user calls it
    code = "import sys; from sandbox_shim.cli import main; main(['conformance', *sys.argv[1:]])"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env or dict(os.environ),
    )


@linux_root
def test_command_prints_the_table() -> None:
    p = cli("-k", "raw socket")
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].split() == ["GROUP", "CHECK", "CONTROL", "BREACH", "VERDICT", "DETAIL"]
    assert "net: raw socket" in lines[2] and " PASS " in lines[2]
    assert lines[-1] == "1 checks: 1 pass, 0 fail, 0 error, 0 skip"


@linux_root
def test_command_json_and_exit_status_on_fail() -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO / "tests"))
    p = cli(
        "--format",
        "json",
        "--mechanism",
        "test_conformance_proofs:LeakyTarget",
        "-k",
        "absolute host path",
        env=env,
    )
    assert p.returncode == 1, p.stdout + p.stderr
    doc = json.loads(p.stdout)
    assert doc["target"] == "leaky (host shell)"
    assert [(r["check"], r["control"], r["breach"], r["verdict"]) for r in doc["results"]] == [
        ("fs: absolute host path", "ok", "succeeded", "fail")
    ]
    bad = cli("--mechanism", "no_such_module:Nothing")
    assert bad.returncode == 2 and "cannot load the conformance target" in bad.stderr


@linux_root
def test_a_run_in_which_checks_cannot_run_is_not_a_pass() -> None:
    nothing = cli("-k", "no check has this name")
    assert nothing.returncode == 3, nothing.stdout + nothing.stderr
    accepted = cli("-k", "no check has this name", "--accept-skips")
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr


def test_the_probe_rootfs_is_built_from_the_host_without_a_checkout(tmp_path: Path) -> None:
    from sandbox_shim.conformance import rootfs

    try:
        bb = rootfs.host_busybox()
    except rootfs.NoBusybox as e:
        pytest.skip(str(e))
    assert rootfs.is_static(bb) and not rootfs.is_static(sys.executable)  # the control: a dynamic ELF
    rootfs.fill(str(tmp_path / "r"))
    assert (tmp_path / "r" / "bin" / "busybox").is_file()
    assert os.readlink(tmp_path / "r" / "bin" / "sh") == "busybox"


NEW_GROUP = """
from sandbox_shim.conformance.helpers import PASS, Outcome, check


@check("Trivial", "a group that exists only as a module of the checks folder")
def _trivial(target):
    return Outcome("ok", "stopped", PASS, "trivial")
"""


@linux_root
def test_a_new_group_module_is_selectable_by_name(tmp_path: Path) -> None:
    """The group list has one source, the checks folder: a module dropped there is a ``--group``."""
    extra = tmp_path / "checks"
    extra.mkdir()
    (extra / "trivial.py").write_text(NEW_GROUP)
    code = (
        "import sys; from sandbox_shim.conformance import checks; checks.__path__.append(sys.argv.pop(1)); "
        "from sandbox_shim.cli import main; main(['conformance', *sys.argv[1:]])"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO / "tests"))
    leaky = ["--mechanism", "test_conformance_proofs:LeakyTarget", "--format", "json"]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-c", code, str(extra), *leaky, *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)

    p = run("--group", "Trivial")
    assert p.returncode == 0, p.stdout + p.stderr
    assert [(r["group"], r["verdict"]) for r in json.loads(p.stdout)["results"]] == [("Trivial", "pass")]
    known = run("--group", "ResourceLimits", "-k", "memory")  # the control: a group of the package
    assert known.returncode == 1 and json.loads(known.stdout)["results"][0]["group"] == "ResourceLimits"
    bad = run("--group", "Nope")
    assert bad.returncode == 2 and "no conformance group 'Nope'" in bad.stderr, bad.stderr
    assert "Trivial" in bad.stderr and len(bad.stderr.splitlines()) == 1
