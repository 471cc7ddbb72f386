"""What one confinement leaves must never make a later one enforce less (issue #22): the state
directory is the shim's (never writable inside, trusted only when this user's own), the helpers check
the Landlock ABI themselves, protected files with other hard links get an inode of their own, and a
FIFO settings file is refused.  Real bwrap; control first in each case.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sandbox_shim.errors import CannotEnforce
from sandbox_shim.hardening import confine_git, confine_journal
from sandbox_shim.hardening.confinement import confine

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or not os.access("/usr/bin/bwrap", os.X_OK),
    reason="needs Linux with bwrap at /usr/bin/bwrap",
)
SHIM = [sys.executable, "-m", "sandbox_shim"]
BOOT = Path("/proc/sys/kernel/random/boot_id")


def state_env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "XDG_STATE_HOME": str(tmp_path / "st")}


def sh(work: Path, script: str, env: dict[str, str], **kw: Any) -> subprocess.CompletedProcess[str]:
    spec = confine(("/bin/sh", ["-c", script]), permit_path=str(work), env=env, **kw)
    return subprocess.run(
        [spec["cmd"], *spec["args"]],
        env=spec["env"],
        cwd=spec["cd"],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_hard_link_planted_earlier_cannot_reach_a_protected_config(tmp_path: Path) -> None:
    """F1: run 1 makes a repository and a hard link to its config (not protected yet: it is new);
    run 2 holds .git/config read-only, and the link no longer reaches it."""
    work, env = tmp_path / "pg", state_env(tmp_path)
    work.mkdir()
    r = sh(work, "git init -q sub && ln sub/.git/config cfglink && echo x > hooklink && echo MADE", env)
    assert "MADE" in r.stdout, r.stderr
    os.link(work / "hooklink", work / "sub" / ".git" / "hooks" / "pre-commit")  # a hook with two names
    before = (work / "sub" / ".git" / "config").read_bytes()
    assert (work / "sub" / ".git" / "config").stat().st_nlink == 2
    report = tmp_path / "report.jsonl"
    r = sh(
        work,
        "touch sub/.git/config 2>/dev/null || echo CONTROL-RO;"
        " printf '[core]\\n\\tfsmonitor = evil\\n' >> cfglink && echo evil >> hooklink && echo WROTE",
        env,
        report=str(report),
    )
    assert "CONTROL-RO" in r.stdout and "WROTE" in r.stdout, r.stderr  # control: the name is held
    assert (work / "sub" / ".git" / "config").read_bytes() == before  # the link reached a copy-free inode
    assert b"evil" not in (work / "sub" / ".git" / "hooks" / "pre-commit").read_bytes()
    assert (work / "sub" / ".git" / "config").stat().st_nlink == 1
    assert b"fsmonitor" in (work / "cfglink").read_bytes()
    assert '"relinked"' in report.read_text() and "pre-commit" in report.read_text()


def test_unshare_links_keeps_content_and_mode(tmp_path: Path) -> None:
    from sandbox_shim.hardening.confine_sets import unshare_links

    d = tmp_path / "hooks"
    d.mkdir()
    (d / "a").write_text("#!/bin/sh\n")
    os.chmod(d / "a", 0o751)
    (d / "single").write_text("one\n")
    os.link(d / "a", tmp_path / "other")
    os.symlink(tmp_path / "other", d / "link")  # links are not followed
    assert unshare_links([str(d)]) == [str(d / "a")]
    st = os.stat(d / "a")
    assert st.st_nlink == 1 and st.st_mode & 0o7777 == 0o751 and (d / "a").read_text() == "#!/bin/sh\n"
    assert os.stat(tmp_path / "other").st_nlink == 1 and unshare_links([str(d)]) == []
    if os.geteuid() == 0:  # root confining a user's project: the copy stays the user's
        os.chown(d / "a", 65534, 65534)
        os.link(d / "a", tmp_path / "third")
        assert unshare_links([str(d)]) == [str(d / "a")]
        st = os.stat(d / "a")
        assert (st.st_uid, st.st_gid, st.st_nlink) == (65534, 65534, 1) and st.st_mode & 0o7777 == 0o751


def test_settings_file_outside_with_a_link_inside_is_relinked(tmp_path: Path) -> None:
    """A settings file outside the permit path steers the next run (allowProtectedWrites): a hard
    link to it inside the permit path must not reach it."""
    work, env = tmp_path / "w", state_env(tmp_path)
    work.mkdir()
    settings = tmp_path / "s.json"
    settings.write_text('{"permitPath": "w"}')
    os.link(settings, work / "s-link.json")
    r = sh(work, "echo MARK; cat s-link.json", env, settings_file=str(settings))
    assert "MARK" in r.stdout and "permitPath" in r.stdout, r.stderr  # control: the link is there
    r = sh(work, """printf '{"allowProtectedWrites": true}' > s-link.json && echo WROTE""", env)
    assert "WROTE" in r.stdout, r.stderr
    assert settings.read_text() == '{"permitPath": "w"}' and settings.stat().st_nlink == 1


def test_state_directory_is_never_writable_inside(tmp_path: Path) -> None:
    """F2: a permit path in the state directory is refused (exit 2); one around it holds it
    read-only, with --allow-protected-writes too."""
    env = state_env(tmp_path)
    state = tmp_path / "st" / "sandbox-shim"
    r = sh(tmp_path, "echo ok > x && echo CONTROL", env)
    assert "CONTROL" in r.stdout, r.stderr
    for protect in (True, False):
        r = sh(
            tmp_path,
            f"echo '6.6.6.6 evil' >> {state}/confine-etc/hosts; touch {state}/landlock-abi;"
            f" mkdir {state}/x; echo done",
            env,
            protect=protect,
        )
        assert "done" in r.stdout and "Read-only file system" in r.stderr, r.stderr
        assert not (state / "confine-etc" / "hosts").exists() and not (state / "x").exists()
    for sub in ("", "/confine-etc", "/confine"):
        r = subprocess.run(
            [*SHIM, "confine", "--permit-path", f"{state}{sub}", "--", "/bin/true"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 2 and "/permitPath" in r.stderr and "state directory" in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
    r = subprocess.run(
        [
            *SHIM,
            "confine",
            "--permit-path",
            str(tmp_path),
            "--permit-extra-subpath",
            str(state),
            "--",
            "true",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "/permitExtraSubpaths" in r.stderr, r.stderr


def test_a_state_directory_not_ours_is_not_trusted(tmp_path: Path) -> None:
    """F3: another user's (or a group-writable, or linked) state directory: nothing kept there is
    used, and the journal refuses it (exit 5) unless protected writes are allowed."""
    from sandbox_shim.platforms.linux import confine_state, landlock

    env = state_env(tmp_path)
    state = tmp_path / "st" / "sandbox-shim"
    assert confine_journal.prepare_state(env) == (str(state), True)  # control: ours
    real = landlock.abi_version()
    (state / "landlock-abi").write_text(f"{BOOT.read_text().strip()} 0\n")
    assert confine_state.landlock_abi(env) == 0  # control: a kept value is used when ours
    os.chmod(state, 0o770)  # group-writable: not only ours
    assert confine_journal.prepare_state(env)[1] is False
    assert confine_state.landlock_abi(env) == real
    with pytest.raises(CannotEnforce, match="owned by you"):
        confine(("/bin/true", []), permit_path=str(tmp_path / "st"), env=env)
    spec = confine(("/bin/true", []), permit_path=str(tmp_path / "st"), env=env, protect=False)
    assert f"landlock ABI {real}" in spec.layers  # the live probe, not the planted 0
    assert "--ro-bind" in spec["args"] and not any("confine-etc" in a for a in spec["args"])  # no view
    os.chmod(state, 0o700)
    os.chmod(state / "landlock-abi", 0o666)  # a file others may write
    assert confine_state.landlock_abi(env) == real
    if os.geteuid() == 0:  # another owner: root with a user's HOME (sudo -E)
        os.chmod(state / "landlock-abi", 0o600)
        os.chown(state, 65534, 65534)
        assert confine_journal.prepare_state(env)[1] is False
        assert confine_state.landlock_abi(env) == real
        os.chown(state, 0, 0)
    # a view planted as a link to a directory of the attacker's choosing is no view
    fake = tmp_path / "fakeetc"
    fake.mkdir()
    (fake / "hosts").write_text("6.6.6.6 evil.example\n")
    got = confine_state.etc_view(["/etc/hosts"], [], env)
    assert got is not None  # control: a view made here, used
    confine_state._remove_view(got[0])
    os.symlink(fake, got[0])
    again = confine_state.etc_view(["/etc/hosts"], [], env)
    assert again is None or not os.path.islink(again[0]), again
    # a symlinked state directory is not trusted either
    os.rename(state, tmp_path / "st" / "real")
    os.symlink(tmp_path / "st" / "real", state)
    assert confine_journal.owned_dir(str(state)) is False
    assert confine_journal.prepare_state(env)[1] is False
    assert confine_state.etc_view(["/etc/hosts"], [], env) is None


def test_kept_abi_cannot_lower_enforcement(tmp_path: Path) -> None:
    """F4.1: a kept ABI other than the kernel's stops the launch (126, one line) instead of
    dropping Landlock; nonsense is not read at all."""
    from sandbox_shim.platforms.linux import confine_state, landlock

    real = landlock.abi_version()
    if real < 1:
        pytest.skip("no Landlock on this kernel")
    env = state_env(tmp_path)
    work = tmp_path / "w"
    work.mkdir()
    r = sh(work, "echo RAN", env)
    assert r.returncode == 0 and "RAN" in r.stdout, r.stderr  # control
    kept = tmp_path / "st" / "sandbox-shim" / "landlock-abi"
    boot = BOOT.read_text().strip()
    for value in ("0", str(real - 1)):
        kept.write_text(f"{boot} {value}\n")
        r = sh(work, "echo RAN", env)
        assert r.returncode == 126 and "RAN" not in r.stdout, (value, r.stdout, r.stderr)
        assert "is not the kernel's" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    kept.write_text(f"{boot} 99\n")
    assert confine_state.landlock_abi(env) == real  # nonsense: asked again
    helper = Path(landlock.__file__)
    r = subprocess.run(
        [sys.executable, "-I", "-S", str(helper), "--abi", str(real + 1), "--", "/bin/echo", "RAN"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 126 and "RAN" not in r.stdout and "not the kernel's" in r.stderr


def test_walk_cache_not_ours_is_not_read(tmp_path: Path) -> None:
    """F4.2: a walk cache that is a link or not this user's regular file is ignored."""
    root = tmp_path / "root"
    (root / "a" / ".git").mkdir(parents=True)
    cache = tmp_path / "cache"
    found = confine_git.git_dirs([str(root)], cache=str(cache))
    assert confine_git._load_cache(str(cache))  # control: kept and read back
    os.chmod(cache, 0o666)
    assert confine_git._load_cache(str(cache)) == {}
    os.chmod(cache, 0o600)
    os.symlink(cache, tmp_path / "link")
    assert confine_git._load_cache(str(tmp_path / "link")) == {}
    assert confine_git.git_dirs([str(root)], cache=str(tmp_path / "link")) == found


def test_fifo_settings_is_refused(tmp_path: Path) -> None:
    """F5: a FIFO named as the settings file: exit 2 at once, not a hang."""
    good = tmp_path / "s.json"
    good.write_text("{}")
    r = subprocess.run(
        [*SHIM, "confine", "--settings", str(good), "--print-launch-spec", "--", "true"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "permit-path" in r.stderr, r.stderr  # control: read, then refused
    os.mkfifo(tmp_path / "f.json")
    r = subprocess.run(
        [*SHIM, "confine", "--settings", str(tmp_path / "f.json"), "--", "true"],
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert r.returncode == 2 and "not a regular file" in r.stderr and "--settings" in r.stderr, r.stderr
