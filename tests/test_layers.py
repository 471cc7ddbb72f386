"""The layers hold: the contracts in pyproject.toml ([tool.importlinter]) are kept by the package, and
each one is broken by the import it forbids (the control: a contract that cannot fail proves nothing).

ARCHITECTURE.md section 1: the platform-neutral core, the CLI and the conformance suite never import a
platform package, not even inside a function (import-linter reads function-level imports too); one
composition point, ``platforms.select``, picks the mechanism; the platforms never import the CLI.
The contracts name platforms with ``platforms.*``, so a platform added later is covered (shown with a
fourth one planted in a copy); the package root is covered by the protected contract.  An import by
string (``importlib.import_module``, ``__import__``, ``runpy``), which import-linter cannot see, is
found by an AST scan of the neutral modules.
"""

from __future__ import annotations

import ast
import re
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
        # the package root, which is in no layer: only the protected contract sees it
        (
            "__init__.py",
            "def _breach() -> None:\n    from .platforms.linux import bwrap  # noqa: F401\n",
            "platform-code-only-inside-platforms",
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
        # a platform not named anywhere in pyproject.toml importing another (the contracts use ``*``)
        (
            "platforms/freebsd/mechanism.py",
            "def _breach() -> None:\n    from ..linux import locate  # noqa: F401\n",
            "platforms-independent",
        ),
        # the CLI reaching that new platform
        (
            "cli/control.py",
            "def _breach() -> None:\n    from ..platforms.freebsd import mechanism  # noqa: F401\n",
            "cli-and-conformance-no-platform",
        ),
    ],
)
def test_each_contract_breaks_on_the_import_it_forbids(
    tmp_path: Path, module: str, line: str, contract: str
) -> None:
    src = tmp_path / "src"
    shutil.copytree(PACKAGE, src / "sandbox_shim", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    _new_platform(src / "sandbox_shim")
    control = lint(tmp_path / "pyproject.toml", src, contract)
    assert control.returncode == 0, control.stdout + control.stderr  # the copy is as clean as the tree
    with open(src / "sandbox_shim" / module, "a", encoding="utf-8") as fh:
        fh.write("\n\n" + line)
    run = lint(tmp_path / "pyproject.toml", src, contract)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "BROKEN" in run.stdout and "1 broken" in run.stdout, run.stdout


def _new_platform(package: Path) -> None:
    """A fourth platform, ``platforms/freebsd/``, that pyproject.toml does not name (clean: it imports
    only the core), so each contract is shown to cover a platform added after it was written."""
    plat = package / "platforms" / "freebsd"
    plat.mkdir()
    (plat / "__init__.py").write_text('"""A platform added after the contracts were written."""\n')
    (plat / "mechanism.py").write_text("from ...mechanism import Sandbox  # noqa: F401\n")


# -- imports by string: import-linter reads ``import`` statements only ------------------------------

#: the calls that import a module named by a string (``importlib.import_module``, ``__import__``,
#: ``runpy.run_module``/``run_path``, ``importlib.util.find_spec``/``spec_from_file_location``,
#: ``pkgutil.resolve_name``), by the last part of the callee's name
DYNAMIC_IMPORTS = {
    "import_module",
    "__import__",
    "run_module",
    "run_path",
    "find_spec",
    "spec_from_file_location",
    "resolve_name",
}


def _platform_packages(package: Path) -> set[str]:
    """The platform packages, from the folder listing (``platforms/<os>/__init__.py``)."""
    return {p.parent.name for p in (package / "platforms").glob("*/__init__.py")}


def _neutral_modules(package: Path) -> list[Path]:
    """Every module outside ``platforms/<os>/``: the package root, the core, the CLI, the conformance
    suite, ``platforms/__init__.py`` and the composition point ``platforms/select.py``."""
    plats = _platform_packages(package)
    return sorted(
        p
        for p in package.rglob("*.py")
        if not (p.parts[len(package.parts)] == "platforms" and p.parts[len(package.parts) + 1] in plats)
        and p != package / "platforms" / "select.py"
    )


def _callee(node: ast.Call) -> str:
    f = node.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def dynamic_platform_imports(package: Path) -> list[str]:
    """``path:line: call`` for each call in a neutral module that imports a module by a string naming a
    platform package (``platforms.<os>`` or ``platforms/<os>``, in any literal part of the arguments:
    a constant, a piece of an f-string, a ``package=`` argument)."""
    names = "|".join(sorted(_platform_packages(package)))
    pattern = re.compile(rf"platforms[./\\]+({names})\b|^\.*({names})(\.|$)")
    found = []
    for path in _neutral_modules(package):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or _callee(node) not in DYNAMIC_IMPORTS:
                continue
            args = [*node.args, *(k.value for k in node.keywords)]
            texts = [
                c.value
                for a in args
                for c in ast.walk(a)
                if isinstance(c, ast.Constant) and isinstance(c.value, str)
            ]
            if any(pattern.search(t) for t in texts):
                found.append(f"{path.relative_to(package)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_neutral_module_imports_a_platform_by_string() -> None:
    assert _platform_packages(PACKAGE) >= {"linux", "darwin", "windows"}
    assert dynamic_platform_imports(PACKAGE) == []


@pytest.mark.parametrize(
    ("module", "line"),
    [
        (
            "api.py",
            "import importlib\n_B = lambda: importlib.import_module('sandbox_shim.platforms.linux.bwrap')\n",
        ),
        ("api.py", "_B = lambda: __import__('sandbox_shim.platforms.windows.plan')\n"),
        (
            "__init__.py",
            "from importlib import import_module\n_B = lambda: import_module('.platforms.darwin', 'x')\n",
        ),
        (
            "cli/control.py",
            "import runpy\n_B = lambda: runpy.run_module(f'sandbox_shim.platforms.linux.{1}')\n",
        ),
        ("spawn.py", "import runpy\n_B = lambda p: runpy.run_path(p + '/platforms/linux/enter.py')\n"),
        (
            "conformance/helpers.py",
            "import importlib\n_B = lambda: importlib.import_module('.linux', 'sandbox_shim.platforms')\n",
        ),
        (
            "plan.py",
            "import importlib\n_B = lambda: importlib.import_module('sandbox_shim.platforms.freebsd')\n",
        ),
    ],
)
def test_a_string_import_of_a_platform_is_found(tmp_path: Path, module: str, line: str) -> None:
    pkg = tmp_path / "sandbox_shim"
    shutil.copytree(PACKAGE, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    _new_platform(pkg)
    assert dynamic_platform_imports(pkg) == []  # the control: the copy is as clean as the tree
    with open(pkg / module, "a", encoding="utf-8") as fh:
        fh.write("\n\n" + line)
    found = dynamic_platform_imports(pkg)
    assert len(found) == 1 and found[0].startswith(module + ":"), found
