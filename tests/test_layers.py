"""The layers hold: the contracts in pyproject.toml ([tool.importlinter]) are kept by the package, and
each one is broken by the import it forbids (the control: a contract that cannot fail proves nothing).

ARCHITECTURE.md section 1: the platform-neutral core, the CLI and the conformance suite never import a
platform package, not even inside a function (import-linter reads function-level imports too); one
composition point, ``platforms.select``, picks the mechanism; the platforms never import the CLI.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("importlinter", reason="import-linter is a test dependency (pip install -e '.[test]')")

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "shim" / "sandbox_shim"


def lint(pyproject: Path, source_root: Path, contract: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run import-linter with ``pyproject``'s contracts (or only ``contract``, by id) over the package
    found under ``source_root``; exit status 0 when every contract run is kept."""
    code = (
        "import sys; from importlinter.cli import lint_imports; "
        "sys.exit(lint_imports(config_filename=sys.argv[1], limit_to_contracts=tuple(sys.argv[2:]), "
        "no_cache=True, no_logo=True))"
    )
    return subprocess.run(
        [sys.executable, "-c", code, str(pyproject), *([contract] if contract else [])],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=source_root,
        env={"PYTHONPATH": str(source_root), "PATH": "/usr/bin:/bin"},
    )


def test_the_package_keeps_every_layer_contract() -> None:
    run = lint(REPO / "pyproject.toml", REPO / "shim")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "0 broken" in run.stdout


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        # a neutral module importing a platform inside a function: the core -> platforms edge
        (
            "plan.py",
            "def _breach() -> None:\n    from .platforms.linux import bwrap  # noqa: F401\n",
            "layers",
        ),
        # a platform importing the CLI
        (
            "platforms/linux/locate.py",
            "def _breach() -> None:\n    from ...cli import main  # noqa: F401\n",
            "layers",
        ),
        # the conformance suite reaching a platform
        (
            "conformance/helpers.py",
            "def _breach() -> None:\n    from ..platforms.darwin import seatbelt  # noqa: F401\n",
            "cli-and-conformance-no-platform",
        ),
        # one platform importing another
        (
            "platforms/windows/plan.py",
            "def _breach() -> None:\n    from ..linux import locate  # noqa: F401\n",
            "platforms-independent",
        ),
    ],
)
def test_each_contract_breaks_on_the_import_it_forbids(
    tmp_path: Path, module: str, line: str, contract: str
) -> None:
    src = tmp_path / "src"
    shutil.copytree(PACKAGE, src / "sandbox_shim", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    control = lint(tmp_path / "pyproject.toml", src, contract)
    assert control.returncode == 0, control.stdout + control.stderr  # the copy is as clean as the tree
    with open(src / "sandbox_shim" / module, "a", encoding="utf-8") as fh:
        fh.write("\n\n" + line)
    run = lint(tmp_path / "pyproject.toml", src, contract)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "BROKEN" in run.stdout and "1 broken" in run.stdout, run.stdout
