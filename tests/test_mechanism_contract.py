"""The ``Mechanism`` protocol is the platform contract: all three mechanisms satisfy it, checked by
mypy (``platforms/select.py`` assigns each to it) and at run time; a mechanism missing one member the
library calls fails mypy (the control: the same file with every member passes)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from sandbox_shim.mechanism import Mechanism
from sandbox_shim.platforms.darwin.mechanism import DarwinSeatbeltMechanism
from sandbox_shim.platforms.linux.mechanism import LinuxMechanism
from sandbox_shim.platforms.windows.mechanism import WindowsJobMechanism

REPO = Path(__file__).resolve().parents[1]
MEMBERS = sorted(n for n in vars(Mechanism) if not n.startswith("_")) + ["name", "root", "systemd_cgroup"]


def test_every_mechanism_is_a_mechanism_at_run_time() -> None:
    for mech in (LinuxMechanism(), DarwinSeatbeltMechanism(), WindowsJobMechanism()):
        assert isinstance(mech, Mechanism), type(mech).__name__


def test_the_protocol_declares_what_the_library_calls() -> None:
    for name in (
        "make_plan",
        "require",
        "provision",
        "start",
        "signal",
        "status",
        "alive",
        "paused",
        "exit_status",
        "termination",
        "workload_pid",
        "usage",
        "cgroup",
        "destroy",
        "remove_residue",
        "lost_pids",
    ):
        assert name in MEMBERS, name


def _module(omit: str | None) -> str:
    """A mechanism built from WindowsJobMechanism's own members, minus ``omit``, assigned to the protocol."""
    methods = sorted(
        {n for n in vars(Mechanism) if not n.startswith("_") and callable(getattr(Mechanism, n))} - {omit}
    )
    body = "\n".join(f"    {n} = WindowsJobMechanism.{n}" for n in methods)
    return (
        "from sandbox_shim.mechanism import Mechanism\n"
        "from sandbox_shim.platforms.windows.mechanism import WindowsJobMechanism\n\n\n"
        "class Partial:\n    name = 'partial'\n    root: str | None = None\n    systemd_cgroup = False\n"
        f"{body}\n\n\nCHECK: Mechanism = Partial()\n"
    )


@pytest.mark.parametrize("omit", [None, "lost_pids", "alive"])
def test_mypy_refuses_a_mechanism_missing_a_member(tmp_path: Path, omit: str | None) -> None:
    api = pytest.importorskip("mypy.api", reason="mypy is a test dependency (pip install -e '.[test]')")
    path = tmp_path / "partial_mechanism.py"
    path.write_text(_module(omit))
    os.environ.setdefault("MYPYPATH", str(REPO / "shim"))
    out, err, status = api.run(
        [
            str(path),
            "--config-file",
            str(REPO / "pyproject.toml"),
            "--follow-imports",
            "silent",
            "--cache-dir",
            str(tmp_path / "cache"),
            "--python-executable",
            sys.executable,
        ]
    )
    if omit is None:
        assert status == 0, out + err  # the control: every member present
    else:
        assert status == 1, out + err
        assert "Partial" in out and omit in out, out


CORE = ("bundle", "plan", "validation", "state", "capability", "errors", "paths", "hooks", "api", "mechanism")


def test_the_platform_neutral_core_type_checks_strict(tmp_path: Path) -> None:
    """``mypy --strict`` over the core (ARCHITECTURE.md section 1), so CI keeps it clean."""
    api = pytest.importorskip("mypy.api", reason="mypy is a test dependency (pip install -e '.[test]')")
    os.environ.setdefault("MYPYPATH", str(REPO / "shim"))
    args = [
        "--strict",
        "--follow-imports",
        "silent",
        "--cache-dir",
        str(tmp_path / "cache"),
        "--python-executable",
        sys.executable,
        "--config-file",
        str(REPO / "pyproject.toml"),
    ]
    for mod in CORE:
        args += ["-p", f"sandbox_shim.{mod}"]
    out, err, status = api.run(args)
    assert status == 0, out + err
