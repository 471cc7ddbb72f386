"""How a createContainer/startContainer hook enters the sandbox is the mechanism's (``Mechanism.hook_entry``).

Linux builds an nsenter(1) prefix (``platforms/linux/hook_entry.py``, a pure ``entry`` plus the
/proc reads of ``differing``); ``hooks.run`` only applies what it is given, and fails closed without
it; macOS and Windows, with no namespaces to enter, refuse such hooks at plan time with the JSON
pointer (``hooks.refuse_in_sandbox``) instead of running them on the host.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from sandbox_shim import hooks
from sandbox_shim.errors import LaunchFailed
from sandbox_shim.mechanism import HookEntry
from sandbox_shim.platforms.darwin.mechanism import DarwinSeatbeltMechanism
from sandbox_shim.platforms.linux import hook_entry as linux_entry
from sandbox_shim.platforms.linux.mechanism import LinuxMechanism
from sandbox_shim.platforms.windows.mechanism import WindowsJobMechanism

PACKAGE = Path(__file__).resolve().parents[1] / "shim" / "sandbox_shim"
NSENTER = "/usr/bin/nsenter"


@pytest.mark.parametrize(
    ("phase", "differing", "prefix", "cwd"),
    [
        # createContainer: every differing namespace but mnt; cwd the sandbox's root (as seen from the host)
        (
            "createContainer",
            {"user", "mnt", "net", "pid"},
            [NSENTER, "-t", "42", "-U", "-n", "-p", "--"],
            "/proc/42/root",
        ),
        # startContainer: mount included, with its root and cwd
        (
            "startContainer",
            {"user", "mnt", "net", "pid"},
            [NSENTER, "-t", "42", "-U", "-m", "-n", "-p", "--root", "--wd", "--"],
            None,
        ),
        # every namespace, in NSENTER's order whatever the set's
        (
            "startContainer",
            {"cgroup", "pid", "net", "ipc", "uts", "mnt", "user"},
            [NSENTER, "-t", "42", "-U", "-m", "-u", "-i", "-n", "-p", "-C", "--root", "--wd", "--"],
            None,
        ),
        # nothing differs (a sandbox sharing the runtime's namespaces): nsenter enters none
        ("createContainer", set(), [NSENTER, "-t", "42", "--"], "/proc/42/root"),
    ],
)
def test_linux_entry_golden(phase: str, differing: set[str], prefix: list[str], cwd: str | None) -> None:
    assert linux_entry.entry(NSENTER, 42, phase, differing) == HookEntry(prefix, cwd)


@pytest.mark.parametrize("phase", ["prestart", "createRuntime", "poststart", "poststop"])
def test_linux_entry_refuses_a_host_phase(phase: str) -> None:
    with pytest.raises(LaunchFailed):
        linux_entry.entry(NSENTER, 42, phase, {"net"})


def test_differing_names_the_namespaces_a_child_unshared() -> None:
    """Control: this process differs from itself in nothing; a child in new uts and net namespaces
    differs in exactly those (as root; unshare(1) from util-linux)."""
    assert linux_entry.differing(os.getpid()) == set()
    unshare = shutil.which("unshare")
    if os.geteuid() != 0 or unshare is None:
        pytest.skip("needs root and unshare(1) to make namespaces")
    child = subprocess.Popen([unshare, "--uts", "--net", "sleep", "30"])
    try:
        for _ in range(200):  # until unshare has exec'd sleep in its new namespaces
            if linux_entry.differing(child.pid):
                break
            time.sleep(0.01)
        assert linux_entry.differing(child.pid) == {"uts", "net"}
    finally:
        child.kill()
        child.wait()


def test_linux_mechanism_needs_nsenter(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(linux_entry, "SEARCH", str(tmp_path))  # a directory without nsenter
    with pytest.raises(LaunchFailed) as e:
        LinuxMechanism().hook_entry(os.getpid(), "createContainer")
    assert "nsenter" in e.value.message and "util-linux" in e.value.hint


def test_linux_mechanism_gives_the_nsenter_entry() -> None:
    if shutil.which("nsenter", path=linux_entry.SEARCH) is None:
        pytest.skip("nsenter(1) is not installed")
    got = LinuxMechanism().hook_entry(os.getpid(), "startContainer")
    assert got.prefix[0].endswith("/nsenter") and got.prefix[1:] == [
        "-t",
        str(os.getpid()),
        "--root",
        "--wd",
        "--",
    ]


@pytest.mark.parametrize("mech", [DarwinSeatbeltMechanism, WindowsJobMechanism])
def test_platforms_without_namespaces_refuse_an_entry(mech: Any) -> None:
    with pytest.raises(LaunchFailed) as e:
        mech.hook_entry(mech.__new__(mech), 42, "createContainer")
    assert "none to enter" in e.value.message


def _hook_script(tmp_path: Path, name: str) -> tuple[Path, Path]:
    out = tmp_path / f"{name}.out"
    script = tmp_path / f"{name}.sh"
    script.write_text(f'#!/bin/sh\necho "$ENTERED $(pwd) $*" > {out}\n')
    script.chmod(0o755)
    return script, out


def test_run_applies_the_entry_it_is_given(tmp_path: Path) -> None:
    """The prefix goes before the hook's path and args[1:], its cwd is used; a host phase never asks
    for an entry (control: the same hook as prestart runs plainly, in the bundle)."""
    script, out = _hook_script(tmp_path, "cc")
    inside = tmp_path / "inside"
    inside.mkdir()
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    asked: list[tuple[int, str]] = []

    def enter(pid: int, phase: str) -> HookEntry:
        asked.append((pid, phase))
        return HookEntry(["/usr/bin/env", "ENTERED=yes"], str(inside))

    cfg = {"createContainer": [{"path": str(script), "args": ["cc", "a1"]}]}
    assert hooks.run(cfg, "createContainer", {}, 4242, str(bundle), enter) == []
    assert out.read_text().split() == ["yes", str(inside), "a1"] and asked == [(4242, "createContainer")]
    out.unlink()
    assert hooks.run({"prestart": cfg["createContainer"]}, "prestart", {}, 4242, str(bundle), enter) == []
    assert out.read_text().split() == [str(bundle), "a1"] and len(asked) == 1


def test_run_fails_closed_without_an_entry(tmp_path: Path) -> None:
    """An in-sandbox hook with a sandbox process and no entry never runs (on the host instead)."""
    script, out = _hook_script(tmp_path, "sc")
    with pytest.raises(hooks.HookFailed) as e:
        hooks.run({"startContainer": [{"path": str(script)}]}, "startContainer", {}, 4242, str(tmp_path))
    assert "no way to enter the sandbox" in e.value.message and not out.exists()


def test_an_entry_the_mechanism_refuses_fails_the_hook(tmp_path: Path) -> None:
    script, out = _hook_script(tmp_path, "rf")

    def enter(pid: int, phase: str) -> HookEntry:
        raise LaunchFailed("nsenter(1) is needed", "apt-get install util-linux")

    with pytest.raises(hooks.HookFailed) as e:
        hooks.run(
            {"createContainer": [{"path": str(script)}]}, "createContainer", {}, 7, str(tmp_path), enter
        )
    assert e.value.message.startswith(f"createContainer hook {script}: nsenter(1) is needed")
    assert not out.exists()


def _code_strings(path: Path) -> list[str]:
    """The string constants of ``path``'s code, docstrings left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs
    ]


def test_the_core_hooks_hold_no_namespace_knowledge() -> None:
    """hooks.py and api.py name neither nsenter nor /proc/PID/ns nor /proc/PID/root: entering is the
    mechanism's.  Control: the Linux modules do name them (the scan sees f-string parts): nsenter in
    ``hook_entry.py``, the namespace files in the package's ``__init__.py``, their one owner."""
    for module in ("hooks.py", "api.py"):
        found = [s for s in _code_strings(PACKAGE / module) if "nsenter" in s or "/ns/" in s or "/root" in s]
        assert found == [], (module, found)
    linux = _code_strings(PACKAGE / "platforms" / "linux" / "hook_entry.py")
    owner = _code_strings(PACKAGE / "platforms" / "linux" / "__init__.py")
    assert any("nsenter" in s for s in linux) and any("/ns/" in s for s in owner)


@pytest.mark.parametrize("phase", ["createContainer", "startContainer"])
def test_in_sandbox_hooks_are_refused_by_pointer_where_there_are_no_namespaces(phase: str) -> None:
    cfg: dict[str, Any] = {"hooks": {phase: [{"path": "/bin/true"}, {"path": "/bin/false"}]}}
    for platform in ("macOS", "Windows"):
        problems = hooks.refuse_in_sandbox(cfg, platform)
        assert [p.pointer for p in problems] == [f"/hooks/{phase}/0", f"/hooks/{phase}/1"]
        assert all(platform in p.message and "runtime-spec" in p.rule for p in problems)
    # control: hooks that run on the host, and wrong types (the schema's to report), give none
    assert hooks.refuse_in_sandbox({"hooks": {"prestart": [{"path": "/bin/true"}]}}, "macOS") == []
    assert hooks.refuse_in_sandbox({"hooks": {phase: "x"}}, "macOS") == []


@pytest.mark.parametrize("phase", ["prestart", "createRuntime", "poststart", "poststop"])
def test_host_hooks_are_refused_by_pointer_where_the_mechanism_runs_none(phase: str) -> None:
    """macOS and Windows run no hooks (their plans' ``hooks`` is empty): a host-phase hook is refused
    with its pointer instead of being accepted and never run."""
    cfg: dict[str, Any] = {"hooks": {phase: [{"path": "/bin/true"}]}}
    for platform in ("macOS", "Windows"):
        problems = hooks.refuse_on_host(cfg, platform)
        assert [p.pointer for p in problems] == [f"/hooks/{phase}/0"]
        assert platform in problems[0].message
    # control: the in-sandbox phases are the other function's, and wrong types the schema's
    assert hooks.refuse_on_host({"hooks": {"createContainer": [{"path": "/bin/true"}]}}, "macOS") == []
    assert hooks.refuse_on_host({"hooks": {phase: "x"}}, "macOS") == []
