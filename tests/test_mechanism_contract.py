"""The ``Mechanism`` protocol is the platform contract: all three mechanisms satisfy it, checked by
mypy (``platforms/select.py`` assigns each to it) and at run time; a mechanism missing one member the
library calls fails mypy (the control: the same file with every member passes)."""

from __future__ import annotations

import os
import shutil
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


#: mypy --strict's per-module flags (``[tool.mypy]`` in pyproject.toml sets them on the core)
STRICT_FLAGS = (
    "check_untyped_defs",
    "disallow_any_generics",
    "disallow_incomplete_defs",
    "disallow_subclassing_any",
    "disallow_untyped_calls",
    "disallow_untyped_decorators",
    "disallow_untyped_defs",
    "no_implicit_reexport",
    "strict_equality",
    "warn_return_any",
    "warn_unused_ignores",
    "extra_checks",
)
PACKAGE = REPO / "shim" / "sandbox_shim"


def _modules(package: Path) -> list[str]:
    """Every module of the package, from the folder listing."""
    out = []
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        out.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return out


def _platform_code(module: str) -> bool:
    """Inside a platform package (``platforms/<os>/``), or the generated validator."""
    parts = module.split(".")
    return (len(parts) > 2 and parts[1] == "platforms" and parts[2] != "select") or parts[
        -1
    ] == "_validator_generated"


def _flag(options: object, flag: str) -> bool:
    """A config flag as mypy's options hold it (``no_implicit_reexport`` is ``not implicit_reexport``)."""
    if flag.startswith("no_"):
        return not getattr(options, flag[3:])
    return bool(getattr(options, flag))


def test_every_platform_neutral_module_is_strict_by_rule() -> None:
    """Every module outside ``platforms/<os>/`` gets --strict's flags from pyproject.toml, a module
    added later too (the config holds a rule, not a list); platform code keeps the default mode."""
    pytest.importorskip("mypy", reason="mypy is a test dependency (pip install -e '.[test]')")
    from mypy.config_parser import parse_config_file
    from mypy.options import Options

    options = Options()
    parse_config_file(options, lambda: None, str(REPO / "pyproject.toml"), sys.stdout, sys.stderr)
    modules = _modules(PACKAGE)
    neutral = [m for m in modules if not _platform_code(m)]
    assert {"sandbox_shim", "sandbox_shim.path_rules", "sandbox_shim.schemas"} <= set(neutral)
    assert "sandbox_shim.platforms.select" in neutral
    for mod in [*neutral, "sandbox_shim.a_module_added_later", "sandbox_shim.cli.a_verb_added_later"]:
        resolved = options.clone_for_module(mod)
        lax = [f for f in STRICT_FLAGS if not _flag(resolved, f)]
        assert not lax, f"{mod}: not strict for {lax}"
    for mod in ("sandbox_shim.platforms.linux.bwrap", "sandbox_shim.platforms.a_platform_added_later.x"):
        assert not options.clone_for_module(mod).disallow_untyped_defs, mod


def _mypy(tmp_path: Path, package: Path) -> tuple[str, int]:
    api = pytest.importorskip("mypy.api", reason="mypy is a test dependency (pip install -e '.[test]')")
    out, err, status = api.run(
        [
            str(package),
            "--config-file",
            str(REPO / "pyproject.toml"),
            "--cache-dir",
            str(tmp_path / "cache"),
            "--python-executable",
            sys.executable,
        ]
    )
    return out + err, status


@pytest.mark.parametrize("plant", [None, "path_rules.py", "schemas/__init__.py"])
def test_the_package_type_checks_and_the_core_strict(tmp_path: Path, plant: str | None) -> None:
    """``mypy`` with pyproject.toml's configuration is clean on the package (CI runs it); an untyped
    function in a neutral module that a hand-kept list once missed fails it."""
    if plant is None:
        out, status = _mypy(tmp_path, PACKAGE)
        assert status == 0, out
        return
    copy = tmp_path / "src" / "sandbox_shim"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    with open(copy / plant, "a", encoding="utf-8") as fh:
        fh.write("\n\ndef _untyped(x):\n    return x\n")
    out, status = _mypy(tmp_path, copy)
    assert status == 1, out
    assert "Function is missing a type annotation" in out and plant in out, out
