"""Protected paths cannot be moved aside, extra subpaths and read-only extras cannot be aimed by a
link the confined program planted.  Real bwrap; control first in each case.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sandbox_shim.errors import CannotEnforce
from sandbox_shim.hardening.confinement import confine

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or not os.access("/usr/bin/bwrap", os.X_OK),
    reason="needs Linux with bwrap at /usr/bin/bwrap",
)
SHIM = [sys.executable, "-m", "sandbox_shim"]


def sh(work: Path, script: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    spec = confine(("/bin/sh", ["-c", script]), permit_path=str(work), **kw)
    return subprocess.run(
        [spec["cmd"], *spec["args"]],
        env=spec["env"],
        cwd=spec["cd"],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    return work


def test_git_dir_cannot_be_moved_aside(repo: Path) -> None:
    # control: the same shell writes in the work tree and inside .git where git writes
    r = sh(repo, "echo x > file && echo y > .git/description && mkdir d && mv d d2 && echo CONTROL")
    assert "CONTROL" in r.stdout, r.stderr
    r = sh(
        repo,
        "mv .git .git_old; cp -a .git_old .git 2>/dev/null; echo evil > .git/hooks/pre-commit;"
        " rmdir .git/hooks 2>/dev/null; echo done",
    )
    assert "done" in r.stdout and "Device or resource busy" in r.stderr, r.stderr
    assert not (repo / ".git_old").exists()
    assert not (repo / ".git" / "hooks" / "pre-commit").exists()
    assert (repo / ".git" / "HEAD").exists()


def test_settings_directory_cannot_be_replaced(repo: Path, tmp_path: Path) -> None:
    sdir = repo / ".sandbox"
    sdir.mkdir()
    settings = sdir / "confine.json"
    settings.write_text("{}")
    r = sh(repo, "echo x > .sandbox/other && echo CONTROL", settings_file=str(settings))
    assert "CONTROL" in r.stdout, r.stderr  # control: the directory itself is writable
    r = sh(
        repo,
        'mv .sandbox .sb_old; mkdir -p .sandbox; echo \'{"permitRead": ["/root"]}\' > '
        ".sandbox/confine.json; echo done",
        settings_file=str(settings),
    )
    assert "done" in r.stdout and not (repo / ".sb_old").exists(), r.stderr
    assert settings.read_text() == "{}"


def test_git_siblings_are_held(repo: Path, tmp_path: Path) -> None:
    gitdir = repo / ".git"
    mod = gitdir / "modules" / "sub"
    (mod / "hooks").mkdir(parents=True)
    (mod / "HEAD").write_text("ref: refs/heads/main\n")
    (mod / "config").write_text("[core]\n")
    (gitdir / "commondir").write_text(".\n")
    with open(gitdir / "config", "a") as fh:
        fh.write("[core]\n\thooksPath = myhooks\n")
    r = sh(repo, "echo x > .git/modules/sub/description && echo CONTROL")
    assert "CONTROL" in r.stdout, r.stderr  # control: the module's own data is writable
    targets = [
        ".git/modules/sub/hooks/pre-commit",
        ".git/modules/sub/config",
        ".git/commondir",
        "myhooks/pre-commit",
        ".git/info/exclude",
    ]
    script = (
        "; ".join(f"echo evil > {t} && echo WROTE:{t}" for t in targets)
        + "; mv .git/modules/sub .git/modules/sub2 && echo MOVED; mv myhooks mh && echo MOVED"
    )
    r = sh(repo, script)
    assert "WROTE" not in r.stdout and "MOVED" not in r.stdout, r.stdout
    assert (repo / "myhooks").is_dir() and not (repo / "myhooks" / "pre-commit").exists()


def test_gitfile_is_held(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    subprocess.run(["git", "init", "-q", "--separate-git-dir", str(work / "gd"), str(work)], check=True)
    assert (work / ".git").is_file()
    r = sh(work, "echo x > gd/description && echo CONTROL")
    assert "CONTROL" in r.stdout, r.stderr
    r = sh(
        work,
        "mkdir -p evil/hooks; echo 'gitdir: evil' > .git && echo WROTE; echo e > gd/hooks/pre-commit"
        " && echo WROTE; mv gd gd2 && echo MOVED",
    )
    assert "WROTE" not in r.stdout and "MOVED" not in r.stdout, r.stdout
    assert (work / ".git").read_text().startswith("gitdir:") and "evil" not in (work / ".git").read_text()


def test_extra_subpath_through_a_planted_link_is_refused(tmp_path: Path) -> None:
    work, secret = tmp_path / "work", tmp_path / "dot-ssh"
    (work / "out" / "real").mkdir(parents=True)
    secret.mkdir()
    (work / "out" / "cache").symlink_to("../../dot-ssh")
    spec = confine(("true", []), permit_path=str(work), permit_extra_subpaths=[str(work / "out" / "real")])
    assert str(work / "out" / "real") in spec["args"]  # control: a real subdirectory is accepted
    for bad in (work / "out" / "cache", secret, work / "out" / "cache" / "x"):
        with pytest.raises(CannotEnforce) as ei:
            confine(("true", []), permit_path=str(work), permit_extra_subpaths=[str(bad)])
        assert ei.value.capability == "confinement.extra_subpath"
    r = subprocess.run(
        [
            *SHIM,
            "confine",
            "--permit-path",
            str(work),
            "--permit-extra-subpath",
            str(work / "out" / "cache"),
            "--",
            "true",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 5 and r.stderr.count("\n") == 1 and "symlink" in r.stderr, r.stderr


def test_permit_read_through_a_planted_link_is_refused(tmp_path: Path) -> None:
    work, secret = tmp_path / "work", tmp_path / "dot-ssh"
    (work / "docs").mkdir(parents=True)
    secret.mkdir()
    (secret / "id").write_text("k")
    (work / "ref").symlink_to(secret)
    outside = tmp_path / "outside-link"
    outside.symlink_to(work / "ref")
    confine(("true", []), permit_path=str(work), permit_read=[str(work / "docs"), str(secret)])  # control
    for bad in (work / "ref", work / "ref" / "id", outside):
        with pytest.raises(CannotEnforce) as ei:
            confine(("true", []), permit_path=str(work), permit_read=[str(bad)])
        assert ei.value.capability == "confinement.permit_read"


def test_missing_tool_settings_cannot_be_created(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    names = [
        ".claude/settings.json",
        ".claude/settings.local.json",
        ".mcp.json",
        ".claude/commands/x.md",
        ".vscode/tasks.json",
        ".idea/workspace.xml",
    ]
    # control: the same writes succeed without protection
    r = sh(
        work,
        "; ".join(f"mkdir -p $(dirname {n}) && echo e > {n} && echo WROTE" for n in names),
        protect=False,
    )
    assert r.stdout.count("WROTE") == len(names), r.stderr
    for n in names:
        (work / n).unlink()
    for d in (".claude/commands", ".claude", ".vscode", ".idea"):
        (work / d).rmdir()
    # breach, through the CLI (its child removes the placeholders when the command ends)
    script = (
        "; ".join(f"mkdir -p $(dirname {n}); echo e > {n} && echo WROTE" for n in names)
        + "; rm -rf .claude && echo REMOVED; mv .claude .c2 && echo MOVED; echo ok > mine && echo CONTROL"
    )
    r = subprocess.run(
        [*SHIM, "confine", "--permit-path", str(work), "--", "/bin/sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "CONTROL" in r.stdout and "WROTE" not in r.stdout and "MOVED" not in r.stdout, (r.stdout, r.stderr)
    import time

    for _ in range(50):  # the child gets SIGTERM as the command's process ends
        if not (work / ".claude").exists():
            break
        time.sleep(0.1)
    assert sorted(p.name for p in work.iterdir()) == ["mine"]  # placeholders gone, nothing planted


def test_links_at_protected_names_and_settings_are_refused(tmp_path: Path) -> None:
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    (work / "real").mkdir(parents=True)
    elsewhere.mkdir()
    (work / "real" / "confine.json").write_text("{}")
    confine(
        ("true", []), permit_path=str(work), settings_file=str(work / "real" / "confine.json")
    ).release()  # control
    (work / "sb").symlink_to("real")
    with pytest.raises(CannotEnforce, match="symlink"):  # a link the program could re-aim next run
        confine(("true", []), permit_path=str(work), settings_file=str(work / "sb" / "confine.json"))
    (work / ".claude").symlink_to(elsewhere)
    with pytest.raises(CannotEnforce, match="symbolic link"):
        confine(("true", []), permit_path=str(work))
    confine(("true", []), permit_path=str(work), protect=False).release()  # the documented opt-out
    assert sorted(p.name for p in work.iterdir()) == [".claude", "real", "sb"]  # release removed the rest
