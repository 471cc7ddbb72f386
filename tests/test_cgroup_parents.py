"""Parent-cgroup bookkeeping is the Linux mechanism's (``platforms/linux/residue.py``), not the library's.

The library writes the record a mechanism hands it (``ProvisionOptions.on_record``) and gives its keys
no meaning; the Linux mechanism lists the parents a create made, with their inodes, under the list's
lock, only once create confirmed them (README "Crash safety"; the end-to-end behaviour with real
cgroups: tests/test_crash_safety.py).  Here the list and the record run on temporary directories.
"""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path
from typing import Any

import pytest
import sandbox_shim
from conftest import base_config
from sandbox_shim import api, posix
from sandbox_shim.errors import LaunchFailed, StateUnwritable
from sandbox_shim.mechanism import Identity, ProvisionOptions, Sandbox
from sandbox_shim.platforms.linux import residue
from sandbox_shim.platforms.linux.mechanism import LinuxMechanism
from sandbox_shim.state import StateStore

PACKAGE = Path(__file__).resolve().parents[1] / "shim" / "sandbox_shim"


def _locked(directory: Path) -> bool:
    """True while another open file description holds the list's lock."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return not posix.flock_exclusive(fd, wait=False)
    finally:
        os.close(fd)


@pytest.fixture
def tree(tmp_path: Path) -> dict[str, Path]:
    """A list directory and a made parent ``a`` with its leaf ``a/leaf`` (an unrelated ``b`` planned too)."""
    (tmp_path / "cg" / "a" / "leaf").mkdir(parents=True)
    return {"list": tmp_path / "list", "a": tmp_path / "cg" / "a", "b": tmp_path / "cg" / "b"}


def test_confirmed_parents_join_the_list_with_their_inodes(tree: dict[str, Path]) -> None:
    written: list[dict[str, Any]] = []
    rec = residue.CreateRecord(str(tree["list"]), written.append)
    a, b, leaf = str(tree["a"]), str(tree["b"]), str(tree["a"] / "leaf")
    rec.planned({"planned": [leaf], "parents": [a, b], "created": []})
    # the plan is written before anything is made, under the lock; nothing is listed yet
    assert written == [{"planned": [leaf], "parents": [a, b], "created": []}]
    assert _locked(tree["list"]) and residue.read_parents(str(tree["list"])) == []
    rec.confirmed({"created": [a, leaf], "version": 2})
    # only a parent both planned and created is ours (b was planned, never made: not listed)
    assert residue.read_parents(str(tree["list"])) == [(a, os.stat(a).st_ino)]
    assert written[-1] == {"planned": [leaf], "parents": [a, b], "created": [a, leaf], "version": 2}
    assert not _locked(tree["list"])
    on_disk = json.loads((tree["list"] / residue.PARENTS).read_text())
    assert on_disk == [[a, os.stat(a).st_ino]]


def test_an_aborted_create_lists_nothing_and_plans_nothing(tree: dict[str, Path]) -> None:
    written: list[dict[str, Any]] = []
    rec = residue.CreateRecord(str(tree["list"]), written.append)
    a = str(tree["a"])
    rec.planned({"planned": [a + "/leaf"], "parents": [a], "created": []})
    rec.aborted()
    assert written[-1] == {"planned": [], "parents": [], "created": []}
    assert residue.read_parents(str(tree["list"])) == [] and not _locked(tree["list"])


def test_a_refused_record_write_leaves_the_lock_free(tree: dict[str, Path]) -> None:
    def refuse(info: dict[str, object]) -> None:
        raise StateUnwritable(str(tree["list"]), 28, "No space left on device")

    tree["list"].mkdir()
    rec = residue.CreateRecord(str(tree["list"]), refuse)
    with pytest.raises(StateUnwritable):
        rec.planned({"planned": [], "parents": [str(tree["a"])], "created": []})
    assert not _locked(tree["list"])


def test_the_list_keeps_earlier_entries_and_drops_the_file_when_empty(tree: dict[str, Path]) -> None:
    d = str(tree["list"])
    os.makedirs(d)
    residue.write_parents(d, [("/x", 1)])
    rec = residue.CreateRecord(d, lambda info: None)
    rec.planned({"parents": [str(tree["a"])], "created": []})
    rec.confirmed({"created": [str(tree["a"])]})
    assert residue.read_parents(d) == sorted([("/x", 1), (str(tree["a"]), os.stat(tree["a"]).st_ino)])
    residue.write_parents(d, [])
    assert not (tree["list"] / residue.PARENTS).exists() and residue.read_parents(d) == []


def test_the_list_is_host_wide_for_root_else_the_state_roots() -> None:
    where = residue.parents_dir("/some/root")
    assert where == (residue.CGROUP_PARENTS_DIR if os.geteuid() == 0 else "/some/root/.cgroups")


class _RecordingMechanism(LinuxMechanism):
    """A Linux mechanism whose provision only hands the library two records shaped like cgroup ones
    (a planned parent, then that parent created), then fails: what does the library do with them?"""

    parent = ""

    def provision(self, sandbox: Sandbox, plan: Any, options: ProvisionOptions) -> Identity:
        assert options.on_record is not None
        options.on_record({"planned": [], "parents": [self.parent], "created": [], "first": True})
        options.on_record({"parents": [self.parent], "created": [self.parent]})
        raise LaunchFailed("stop here", "")

    def remove_residue(self, store: StateStore, sandbox_id: str) -> list[str]:
        return []  # keeps ROOT/.cgroups/ID to read back


def test_the_library_gives_a_record_no_meaning(make_bundle: Any, state_root: Path, tmp_path: Path) -> None:
    """A mechanism's record is written as handed over (the second replaces the first whole); the
    library lists no parent cgroup for it (that bookkeeping is the Linux mechanism's, inside
    ``provision``).  Control: the record file is the library's, under the state root."""
    made = tmp_path / "made-parent"
    made.mkdir()
    mech = _RecordingMechanism()
    mech.root = str(state_root)
    mech.parent = str(made)
    # the host-wide list (root) changes under other tests' feet: only this parent's absence is checked
    lists = [Path(residue.parents_dir(str(state_root))), state_root / ".cgroups"]
    with pytest.raises(LaunchFailed):
        api.provision(mech, Sandbox("rec", str(make_bundle(base_config(["true"])))))
    record = json.loads((state_root / ".cgroups" / "rec").read_text())
    assert record == {"parents": [str(made)], "created": [str(made)]}
    for d in lists:  # nothing listed
        assert str(made) not in str(residue.read_parents(str(d))), d
    assert isinstance(sandbox_shim.default_mechanism(str(state_root)), LinuxMechanism)  # Linux here


def test_the_core_holds_no_cgroup_parent_bookkeeping() -> None:
    """No platform-neutral module defines or calls the parent list, its lock or a cgroup recorder."""
    names = {"parents_dir", "cgroup_lock", "read_cgroup_parents", "write_cgroup_parents", "_CgroupRecorder"}
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if "platforms" in path.relative_to(PACKAGE).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            name = (
                node.attr
                if isinstance(node, ast.Attribute)
                else node.name
                if isinstance(node, (ast.FunctionDef, ast.ClassDef))
                else node.id
                if isinstance(node, ast.Name)
                else None
            )
            if name in names:
                found.append(f"{path.relative_to(PACKAGE)}:{getattr(node, 'lineno', 0)}: {name}")
    assert found == []
    assert not any(s.startswith("/run/sandbox-shim/cgroup") for s in _constants(PACKAGE / "state.py"))


def _constants(path: Path) -> list[str]:
    return [
        n.value
        for n in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(n, ast.Constant) and isinstance(n.value, str)
    ]


def test_a_killed_writers_temporary_file_is_removed_by_the_next_write(tmp_path: Path) -> None:
    """A writer killed between write and rename(2) leaves ``..parents.tmp.PID``; writers hold the lock,
    so the next one removes it (control: the list itself is written, and other names stay)."""
    stale = tmp_path / f".{residue.PARENTS}.tmp.4242"
    stale.write_text("[]")
    other = tmp_path / "keep-me"
    other.write_text("")
    residue.write_parents(str(tmp_path), [("/x", 1)])
    assert residue.read_parents(str(tmp_path)) == [("/x", 1)]
    assert not stale.exists() and other.exists()
