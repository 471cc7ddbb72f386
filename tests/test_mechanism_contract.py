"""The ``Mechanism`` protocol is the platform contract: every platform folder's mechanism satisfies it,
checked by mypy (each ``platforms/<os>/mechanism.py`` assigns its class to it) and at run time; a
mechanism missing one member the library calls fails mypy (the control: the same file with every
member passes).  The platforms are taken from the folders under ``platforms/``, never from a list."""

from __future__ import annotations

import ast
import importlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from sandbox_shim.mechanism import Mechanism

REPO = Path(__file__).resolve().parents[1]
MEMBERS = sorted(n for n in vars(Mechanism) if not n.startswith("_")) + ["name", "root"]


def test_every_mechanism_is_a_mechanism_at_run_time() -> None:
    found = _mechanism_classes(PACKAGE)
    assert {f for f, _, _ in found} >= {"linux", "darwin", "windows"}, found
    for folder, module, name in found:
        cls = getattr(importlib.import_module(f"sandbox_shim.platforms.{folder}.{module}"), name)
        assert isinstance(cls(), Mechanism), name


#: the names neutral code gives a mechanism (a parameter, a local, an attribute of ``self``)
MECHANISM_NAMES = {"mechanism", "mech"}


def _neutral_files(package: Path) -> list[Path]:
    """Every module outside ``platforms/<os>/`` (the platforms from the folder listing)."""
    plats = {p.parent.name for p in (package / "platforms").glob("*/__init__.py")}
    depth = len(package.parts)
    return sorted(
        p
        for p in package.rglob("*.py")
        if not (len(p.parts) > depth + 2 and p.parts[depth] == "platforms" and p.parts[depth + 1] in plats)
    )


def _is_mechanism(node: ast.AST) -> bool:
    """``mechanism``, ``mech``, ``self.mechanism``, ``self.mech``."""
    if isinstance(node, ast.Name):
        return node.id in MECHANISM_NAMES
    return (
        isinstance(node, ast.Attribute)
        and node.attr in MECHANISM_NAMES
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    )


def mechanism_uses(package: Path) -> tuple[dict[str, set[str]], list[str], list[str]]:
    """What the neutral code does with a mechanism, read from its source (not a hand-written list).

    Returns ``(members, dodges, untyped)``: each member read on a mechanism with the modules reading
    it; every ``getattr``/``hasattr`` on one (a member the protocol need not declare), and every
    attribute set on one outside the composition point (``platforms/select.py`` makes a mechanism
    with its options; nobody changes it afterwards, as the CLI once set ``systemd_cgroup``); every
    parameter named like a mechanism left unannotated or typed ``Any``/``object`` (mypy would not check
    what is called on it)."""
    members: dict[str, set[str]] = {}
    dodges: list[str] = []
    untyped: list[str] = []
    for path in _neutral_files(package):
        where = str(path.relative_to(package))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), where)):
            if isinstance(node, ast.Attribute) and _is_mechanism(node.value):
                members.setdefault(node.attr, set()).add(where)
                if isinstance(node.ctx, ast.Store) and where != "platforms/select.py":
                    dodges.append(f"{where}:{node.lineno}: {ast.unparse(node)} = ...")
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr", "setattr")
                and node.args
                and _is_mechanism(node.args[0])
            ):
                dodges.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
            elif isinstance(node, ast.arg) and node.arg in MECHANISM_NAMES:
                ann = ast.unparse(node.annotation) if node.annotation else ""
                if not ann or "Any" in ann or ann == "object":  # (``mechanism: str`` is a name)
                    untyped.append(f"{where}:{node.lineno}: {node.arg}: {ann or '(none)'}")
    return members, dodges, untyped


def test_the_protocol_declares_what_the_library_calls() -> None:
    """Every member the platform-neutral code reads on a mechanism is declared by the protocol (and
    every declared member is read somewhere), no
    code dodges it with getattr/hasattr, and every mechanism parameter is typed ``Mechanism`` (so
    mypy checks each call against the protocol, for all three platforms: ``platforms.select``)."""
    members, dodges, untyped = mechanism_uses(PACKAGE)
    assert {"provision", "start", "status", "termination", "observed_cgroups", "lost_pids"} <= set(members)
    undeclared = {m: sorted(w) for m, w in members.items() if m not in MEMBERS}
    assert not undeclared, undeclared
    # and the converse: a member no neutral module uses is not the library's to demand (the issue:
    # "what the library calls is what a mechanism must implement"; ``capabilities`` once was one)
    assert set(MEMBERS) - set(members) == set(), "declared by the protocol but never used"
    assert not dodges, dodges
    assert not untyped, untyped


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        ("def _f(mechanism: Mechanism) -> None:\n    mechanism.teleport()\n", "undeclared"),
        ("def _f(mechanism: Mechanism) -> object:\n    return getattr(mechanism, 'status', None)\n", "dodge"),
        ("def _f(mech: Mechanism) -> None:\n    mech.root = None\n", "dodge"),
        ("def _f(mechanism: Any) -> None:\n    pass\n", "untyped"),
        ("def _f(mech) -> None:\n    pass\n", "untyped"),
    ],
)
def test_the_scan_finds_a_planted_use(tmp_path: Path, line: str, kind: str) -> None:
    pkg = tmp_path / "sandbox_shim"
    shutil.copytree(PACKAGE, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    with open(pkg / "reconcile.py", "a", encoding="utf-8") as fh:
        fh.write("\n\n" + line)
    members, dodges, untyped = mechanism_uses(pkg)
    found = {
        "undeclared": [m for m in members if m not in MEMBERS],
        "dodge": dodges,
        "untyped": untyped,
    }
    assert all(bool(v) == (k == kind) for k, v in found.items()), found


def _module(omit: str | None) -> str:
    """A mechanism built from WindowsJobMechanism's own members, minus ``omit``, assigned to the protocol."""
    methods = sorted(
        {n for n in vars(Mechanism) if not n.startswith("_") and callable(getattr(Mechanism, n))} - {omit}
    )
    body = "\n".join(f"    {n} = WindowsJobMechanism.{n}" for n in methods)
    return (
        "from sandbox_shim.mechanism import Mechanism\n"
        "from sandbox_shim.platforms.windows.mechanism import WindowsJobMechanism\n\n\n"
        "class Partial:\n    name = 'partial'\n    root: str | None = None\n"
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


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("def render(", "def render_sbpl("),  # a member renamed
        ("def parent_death_signal(sig: int) -> bool:", "def parent_death_signal(sig: str) -> bool:"),
    ],
)
def test_mypy_refuses_a_confinement_renderer_off_the_contract(tmp_path: Path, old: str, new: str) -> None:
    """The second platform contract, ``hardening.confine_backend.ConfineBackend``, is checked by mypy
    too (``platforms/select.py``), for the macOS renderer on this Linux host."""
    copy = tmp_path / "src" / "sandbox_shim"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    path = copy / "platforms" / "darwin" / "confine.py"
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1
    path.write_text(text.replace(old, new), encoding="utf-8")
    out, status = _mypy(tmp_path, copy)
    assert status == 1, out
    assert "ConfineBackend" in out and "select.py" in out, out


# --- every platform folder's mechanism is on the contract ------------------------------------------


def _mechanism_classes(package: Path) -> set[tuple[str, str, str]]:
    """``(platform folder, module, class)`` for every class under ``platforms/<folder>/`` that defines
    ``provision`` (what makes a class a mechanism), the folders taken from the file system."""
    found = set()
    for folder in sorted(p for p in (package / "platforms").iterdir() if p.is_dir()):
        if not (folder / "__init__.py").exists():
            continue
        for path in sorted(folder.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ClassDef) and any(
                    isinstance(f, ast.FunctionDef) and f.name == "provision" for f in node.body
                ):
                    module = ".".join(path.relative_to(folder).with_suffix("").parts)
                    found.add((folder.name, module, node.name))
    return found


def _contract_classes(package: Path) -> set[tuple[str, str, str]]:
    """``(platform folder, module, class)`` for each ``NAME: Mechanism = Class()`` in a platform
    folder's module naming a class of that module (mypy checks the class against the protocol there)."""
    found = set()
    for folder in sorted(p for p in (package / "platforms").iterdir() if (p / "__init__.py").exists()):
        for path in sorted(folder.rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            classes = {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
            for node in ast.walk(tree):
                if (
                    isinstance(node, ast.AnnAssign)
                    and ast.unparse(node.annotation) == "Mechanism"
                    and isinstance(node.value, ast.Call)
                    and isinstance(node.value.func, ast.Name)
                    and node.value.func.id in classes
                ):
                    module = ".".join(path.relative_to(folder).with_suffix("").parts)
                    found.add((folder.name, module, node.value.func.id))
    return found


def test_every_platform_folder_has_its_mechanism_on_the_contract() -> None:
    found = _mechanism_classes(PACKAGE)
    assert {f for f, _, _ in found} >= {"linux", "darwin", "windows"}, found
    assert found - _contract_classes(PACKAGE) == set()


def test_a_new_platform_off_the_contract_is_found(tmp_path: Path) -> None:
    """The control: a ``platforms/freebsd/`` with a mechanism its folder does not assign to the protocol
    (and the same folder once it does: nothing outside it to edit)."""
    copy = tmp_path / "sandbox_shim"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "platforms" / "freebsd").mkdir()
    (copy / "platforms" / "freebsd" / "__init__.py").write_text('SYS_PLATFORM = "freebsd12"\n')
    mech = copy / "platforms" / "freebsd" / "mechanism.py"
    mech.write_text(
        "class JailMechanism:\n    def provision(self, sandbox, plan, options):\n        return None\n"
    )
    assert _mechanism_classes(copy) - _contract_classes(copy) == {("freebsd", "mechanism", "JailMechanism")}
    with open(mech, "a", encoding="utf-8") as fh:
        fh.write("\n\nif TYPE_CHECKING:\n    _CONTRACT: Mechanism = JailMechanism()\n")
    assert _mechanism_classes(copy) - _contract_classes(copy) == set()


@pytest.mark.parametrize(("old", "new"), [("    def lost_pids(", "    def lost_pid_list(")])
def test_mypy_refuses_a_platform_mechanism_off_the_contract(tmp_path: Path, old: str, new: str) -> None:
    """The folder's own line is what mypy checks: the macOS mechanism with a member renamed fails
    ``mypy`` on this Linux host, at ``platforms/darwin/mechanism.py``."""
    copy = tmp_path / "src" / "sandbox_shim"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    path = copy / "platforms" / "darwin" / "mechanism.py"
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1
    path.write_text(text.replace(old, new), encoding="utf-8")
    out, status = _mypy(tmp_path, copy)
    assert status == 1, out
    assert "lost_pids" in out and "darwin/mechanism.py" in out, out


def platforms(package: Path = PACKAGE) -> dict[str, str]:
    """``{sys.platform value: folder}``, as each ``platforms/<folder>/__init__.py`` states it."""
    found = {}
    for init in sorted((package / "platforms").glob("*/__init__.py")):
        m = re.search(r'^SYS_PLATFORM = "(\w+)"$', init.read_text(encoding="utf-8"), re.M)
        assert m, f"{init} states no SYS_PLATFORM"
        found[m.group(1)] = init.parent.name
    return found


def test_each_platform_package_states_its_platform() -> None:
    assert {"linux": "linux", "darwin": "darwin", "win32": "windows"}.items() <= platforms().items()
    for plat, folder in platforms().items():
        assert importlib.import_module(f"sandbox_shim.platforms.{folder}").SYS_PLATFORM == plat


def _mypy_platform(tmp_path: Path, plat: str, root: Path = REPO) -> tuple[str, int]:
    """``scripts/mypy-platform PLAT`` (the core plus that platform's folder, as mypy sees them there)
    on the checkout at ``root``, with this interpreter's mypy and a private cache."""
    pytest.importorskip("mypy", reason="mypy is a test dependency (pip install -e '.[test]')")
    env = {**os.environ, "MYPY": str(Path(sys.executable).with_name("mypy"))}
    if not Path(env["MYPY"]).exists():
        pytest.skip("no mypy script next to this interpreter")
    run = subprocess.run(
        [str(root / "scripts" / "mypy-platform"), plat, "--cache-dir", str(tmp_path / "cache")],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    return run.stdout + run.stderr, run.returncode


@pytest.mark.parametrize("plat", sorted(platforms()))
def test_the_core_type_checks_as_every_platform_sees_it(tmp_path: Path, plat: str) -> None:
    """The protocol and the core are checked by mypy as each OS sees them (CI's lint lane runs every
    platform folder found, ``scripts/mypy-platform --all``): the core's POSIX-only names come from
    ``sandbox_shim.posix`` or sit behind a ``sys.platform`` check, so Windows' view (no fcntl,
    O_NOFOLLOW, SIGKILL, fork) is clean too."""
    out, status = _mypy_platform(tmp_path, plat)
    assert status == 0, out


def test_a_posix_only_call_in_the_core_fails_the_windows_check(tmp_path: Path) -> None:
    """The control: the same check fails once a neutral module calls ``os.geteuid`` unguarded."""
    copy = tmp_path / "repo"
    (copy / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "mypy-platform", copy / "scripts")
    shutil.copy(REPO / "pyproject.toml", copy)
    shutil.copytree(PACKAGE, copy / "shim" / "sandbox_shim", ignore=shutil.ignore_patterns("__pycache__"))
    with open(copy / "shim" / "sandbox_shim" / "paths.py", "a", encoding="utf-8") as fh:
        fh.write("\n\ndef _planted() -> int:\n    return os.geteuid()\n")
    out, status = _mypy_platform(tmp_path, "win32", copy)
    assert status == 1, out
    assert "paths.py" in out and "geteuid" in out, out
    out, status = _mypy_platform(tmp_path, "linux", copy)
    assert status == 0, out


@pytest.mark.skipif(sys.platform == "win32", reason="scripts/mypy-platform is a bash script")
def test_the_script_finds_a_new_platform_folder(tmp_path: Path) -> None:
    """``scripts/mypy-platform`` takes the platforms from the folders: a ``platforms/freebsd/`` stating
    its ``sys.platform`` is listed and checked with nothing else edited; one stating none is refused."""
    copy = tmp_path / "repo"
    (copy / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "mypy-platform", copy / "scripts")
    shutil.copytree(PACKAGE, copy / "shim" / "sandbox_shim", ignore=shutil.ignore_patterns("__pycache__"))
    script = str(copy / "scripts" / "mypy-platform")
    run = subprocess.run([script, "--list"], capture_output=True, text=True, timeout=60)
    listed = [f"{p} {f}" for p, f in sorted(platforms().items(), key=lambda pf: pf[1])]
    assert run.returncode == 0 and run.stdout.splitlines() == listed, run.stdout + run.stderr
    assert {"darwin darwin", "linux linux", "win32 windows"} <= set(listed)
    bsd = copy / "shim" / "sandbox_shim" / "platforms" / "freebsd"
    bsd.mkdir()
    (bsd / "__init__.py").write_text('SYS_PLATFORM = "freebsd12"\n')
    run = subprocess.run([script, "--list"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and "freebsd12 freebsd" in run.stdout.split("\n"), run.stdout + run.stderr
    # the one platform asked for is run with its folder kept and the others pruned (``echo`` as mypy)
    env = {**os.environ, "MYPY": "echo"}
    run = subprocess.run([script, "freebsd12"], capture_output=True, text=True, timeout=60, env=env, cwd="/")
    assert run.returncode == 0 and "--platform freebsd12" in run.stdout, run.stdout + run.stderr
    assert "platforms/freebsd/__init__.py" in run.stdout and "platforms/linux/" not in run.stdout, run.stdout
    (bsd / "__init__.py").write_text("")
    run = subprocess.run([script, "--list"], capture_output=True, text=True, timeout=60)
    assert run.returncode != 0 and "SYS_PLATFORM" in run.stderr, run.stdout + run.stderr


@pytest.mark.skipif(sys.platform == "win32", reason="scripts/mypy-platform is a bash script")
@pytest.mark.parametrize("fails", ["", "win32"])
def test_all_platforms_give_one_exit_status(tmp_path: Path, fails: str) -> None:
    """``scripts/mypy-platform --all`` (what CI runs) exits 0 when every platform is clean and 1 when
    one is not (a stand-in mypy that fails only for ``fails``)."""
    fake = tmp_path / "mypy"
    fake.write_text(f'#!/bin/sh\ncase " $* " in *" --platform {fails or "none"} "*) exit 1;; esac\nexit 0\n')
    fake.chmod(0o755)
    env = {**os.environ, "MYPY": str(fake)}
    run = subprocess.run(
        [str(REPO / "scripts" / "mypy-platform"), "--all"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=REPO,
    )
    if fails:
        assert run.returncode == 1 and f"failed: {fails}" in run.stdout, run.stdout + run.stderr
    else:
        assert run.returncode == 0 and "clean on" in run.stdout, run.stdout + run.stderr


def test_the_systemd_cgroup_choice_is_made_where_the_mechanism_is() -> None:
    """runc's ``--systemd-cgroup`` is an argument of the call that makes the mechanism
    (``api.default_mechanism`` -> ``platforms.select.mechanism``), not an attribute set afterwards."""
    from sandbox_shim import api
    from sandbox_shim.platforms.linux.mechanism import LinuxMechanism

    mech = api.default_mechanism("/nonexistent/state", systemd_cgroup=True)
    if sys.platform.startswith("linux"):
        assert isinstance(mech, LinuxMechanism) and mech.systemd_cgroup is True
        plain = api.default_mechanism("/nonexistent/state")
        assert isinstance(plain, LinuxMechanism) and plain.systemd_cgroup is False
    assert "systemd_cgroup" not in vars(Mechanism)
