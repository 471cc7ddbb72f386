"""Every pre-existing git repository inside a read-write path is held, at any depth.

``--permit-path src`` holding ``repoA/`` and ``repoB/``, a vendored ``vendor/a/b/lib/.git``, a
``--separate-git-dir`` target and its gitfile, a bare repository, a worktree's ``commondir``, and a
``core.hooksPath`` from the user's ``~/.gitconfig`` (relative to each repository): each is written
as a control where it is not protected (``protect=False``, or a file beside it), then denied.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from sandbox_shim.hardening import confine_git
from sandbox_shim.hardening.confinement import confine

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or not os.access("/usr/bin/bwrap", os.X_OK),
    reason="needs Linux with bwrap at /usr/bin/bwrap",
)

PY = "/usr/bin/python3"
WRITE = r"""
import errno, sys
try:
    with open(sys.argv[1], "w") as fh:
        fh.write("#!/bin/sh\ntouch /tmp/pwned\n")
    print("MARKER:wrote")
except OSError as e:
    print("ERRNO:" + errno.errorcode.get(e.errno or 0, str(e)))
    sys.exit(3)
"""


def write(permit: Path, target: Path, env: dict[str, str], **kw: Any) -> str:
    spec = confine((PY, ["-c", WRITE, str(target)]), permit_path=str(permit), env=env, **kw)
    r = subprocess.run(
        [spec["cmd"], *spec["args"]],
        env=spec["env"],
        cwd=spec["cd"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if r.returncode == 0 and "MARKER:wrote" in r.stdout:
        return "ok"
    if r.returncode == 3 and "ERRNO:" in r.stdout:
        return "denied:" + r.stdout.split("ERRNO:", 1)[1].strip()
    return f"died:{r.returncode}:{r.stderr[-300:]}"


def git(*args: str, cwd: Path, env: dict[str, str]) -> None:
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, timeout=60)


@pytest.fixture
def src(tmp_path: Path) -> dict[str, Any]:
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "GIT_CONFIG_NOSYSTEM": "1"}
    s = home / "src"
    for repo in ("repoA", "repoB"):
        (s / repo).mkdir(parents=True)
        git("init", "-q", cwd=s / repo, env=env)
    lib = s / "vendor" / "a" / "b" / "lib"
    lib.mkdir(parents=True)
    git("init", "-q", cwd=lib, env=env)
    (s / "sep").mkdir()
    (s / "store").mkdir()
    git("init", "-q", f"--separate-git-dir={s / 'store' / 'sep.git'}", cwd=s / "sep", env=env)
    git("init", "-q", "--bare", str(s / "bare.git"), cwd=s, env=env)
    (s / "notes").write_text("x")
    return {"home": home, "src": s, "env": env, "lib": lib}


def test_nested_repositories_are_held(src: dict[str, Any]) -> None:
    s, env = src["src"], src["env"]
    targets = [
        s / "repoA" / ".git" / "hooks" / "pre-commit",
        s / "repoB" / ".git" / "config",
        src["lib"] / ".git" / "hooks" / "post-checkout",
        src["lib"] / ".git" / "config",
        s / "store" / "sep.git" / "hooks" / "pre-commit",
        s / "sep" / ".git",
        s / "bare.git" / "hooks" / "post-receive",
    ]
    assert write(s, s / "notes", env) == "ok"  # control: the permit path is writable
    for t in targets:
        assert write(s, t, env, protect=False) == "ok", f"control: {t} writable with the opt-out"
        if t.name == "config":
            t.write_text("[core]\n\trepositoryformatversion = 0\n")
    (s / "sep" / ".git").write_text(f"gitdir: {s / 'store' / 'sep.git'}\n")
    for t in targets:
        assert write(s, t, env).startswith("denied:"), f"{t} is writable inside the confinement"


def test_user_global_hooks_path_is_held_in_every_repository(src: dict[str, Any]) -> None:
    s, env, home = src["src"], src["env"], src["home"]
    (home / ".gitconfig").write_text("[include]\n\tpath = ~/.gitconfig.d/hooks\n")
    (home / ".gitconfig.d").mkdir()
    (home / ".gitconfig.d" / "hooks").write_text('[core]\n\thooksPath = ".githooks"\n')
    assert confine_git.hooks_paths(confine_git.user_configs(env)) == [".githooks"]
    hook = s / "repoA" / ".githooks" / "pre-commit"
    assert write(s, s / "repoA" / "other-file", env) == "ok"  # control
    assert write(s, hook, env).startswith("denied:")
    assert (s / "repoA" / ".githooks").is_dir()  # made (empty) so it could be held
    assert write(s, src["lib"] / ".githooks" / "pre-commit", env).startswith("denied:")


def test_repository_config_include_inside_is_held(src: dict[str, Any]) -> None:
    s, env = src["src"], src["env"]
    shared = s / "repoA" / "shared.gitconfig"
    shared.write_text("[user]\n\tname = x\n")
    assert write(s, shared, env) == "ok"  # control: an ordinary file in the worktree
    git("config", "include.path", "../shared.gitconfig", cwd=s / "repoA", env=env)
    assert write(s, shared, env).startswith("denied:")


def test_walk_cost_on_a_large_tree(tmp_path: Path) -> None:
    """The walk finds a repository among many entries and stops at its limit (cost: scripts/bench)."""
    root = tmp_path / "big"
    for i in range(100):
        d = root / f"d{i // 10}" / f"e{i}"
        d.mkdir(parents=True)
        for j in range(50):
            (d / f"f{j}").touch()
    (root / "d3" / "e37" / ".git").mkdir()
    t0 = time.process_time()
    found = confine_git.git_dirs([str(root)])
    cpu = time.process_time() - t0
    print(f"git_dirs over 5110 entries: {cpu * 1000:.1f} ms CPU")
    assert [f[0] for f in found] == [str(root / "d3" / "e37" / ".git")]
    with pytest.raises(confine_git.TooLarge):
        confine_git.git_dirs([str(root)], limit=1000)


def test_walk_cache_sees_every_change(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ctime cache: an unchanged directory is not listed again, a changed one always is."""
    monkeypatch.setattr(confine_git, "RACY_NS", 0)  # the tree below is seconds old at most
    root = tmp_path / "tree"
    for i in range(20):
        (root / f"a{i}" / "b" / "c").mkdir(parents=True)
    cache = str(tmp_path / "cache")
    assert confine_git.git_dirs([str(root)], cache=cache) == []  # control: nothing there
    assert os.path.isfile(cache)
    deep = root / "a7" / "b" / "c"
    (deep / ".git").mkdir()
    assert [f[0] for f in confine_git.git_dirs([str(root)], cache=cache)] == [str(deep / ".git")]
    (root / "a3" / "b" / "x").mkdir()  # a new directory under a cached one
    (root / "a3" / "b" / "x" / ".git").write_text(f"gitdir: {deep / '.git'}\n")
    got = confine_git.git_dirs([str(root)], cache=cache)
    assert (str(deep / ".git"), str(root / "a3" / "b" / "x"), str(root / "a3" / "b" / "x" / ".git")) in got
    os.rename(root / "a7", root / "a7moved")  # a rename changes the parent's ctime
    got = [f[0] for f in confine_git.git_dirs([str(root)], cache=cache)]
    assert str(root / "a7moved" / "b" / "c" / ".git") in got


def test_walk_cache_lives_outside_the_roots_and_not_among_the_journals(tmp_path: Path) -> None:
    """The cache is beside the journal directory, never where the confined program could write it."""
    journal = tmp_path / "state" / "sandbox-shim" / "confine"
    root = tmp_path / "proj"
    cache = confine_git.walk_cache(str(journal), [str(root)])
    assert cache is not None and os.path.dirname(cache) == str(
        tmp_path / "state" / "sandbox-shim" / "confine-walk"
    )
    assert confine_git.walk_cache(str(journal), [str(root)]) == cache  # the same roots, the same file
    assert confine_git.walk_cache(str(journal), [str(root), str(root / "x")]) != cache
    (root / "a" / ".git").mkdir(parents=True)
    assert [f[0] for f in confine_git.git_dirs([str(root)], cache=cache)] == [str(root / "a" / ".git")]
    assert os.path.isfile(cache)  # its directory made on first use
    # a read-write root holding (or inside) the cache's directory: no cache at all
    assert confine_git.walk_cache(str(journal), [str(tmp_path / "state")]) is None
    assert confine_git.walk_cache(str(journal), [str(root), os.path.dirname(cache)]) is None
    assert (
        confine_git.walk_cache(str(journal), [str(root), os.path.join(os.path.dirname(cache), "x")]) is None
    )
