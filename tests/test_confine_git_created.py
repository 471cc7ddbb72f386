"""A repository the confined program creates cannot run code at the user's next ``git``.

The attack: inside the permit path, make ``sub`` a repository whose config sets
``core.fsmonitor = "touch MARKER"`` and register it as a gitlink in the parent's index; the user's
next plain ``git status`` in the parent recurses into ``sub`` and runs the command unconfined.
Control: with ``--allow-protected-writes`` (no check) the same steps make ``git status`` run it.
Then: after a normal exit, and after ``kill -9`` of the whole run followed by the next run, the
repository is disarmed (config reduced to safe keys, original kept aside) and nothing runs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sandbox_shim.hardening import confine_git

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or not os.access("/usr/bin/bwrap", os.X_OK),
    reason="needs Linux with bwrap at /usr/bin/bwrap",
)

ATTACK = """set -e
cd "$1"
git init -q sub
git -C sub config core.fsmonitor "touch $2"
git -C sub -c user.name=x -c user.email=x@x commit -q --allow-empty -m x
git update-index --add --cacheinfo 160000,$(git -C sub rev-parse HEAD),sub
echo ATTACKED
"""


@pytest.fixture
def proj(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    home = tmp_path / "home"
    p = home / "proj"
    p.mkdir(parents=True)
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "GIT_CONFIG_NOSYSTEM": "1"}
    if "PYTHONPATH" in os.environ:  # a source tree under test is the one run
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    subprocess.run(["git", "init", "-q", str(p)], check=True, env=env)
    return p, env


def confine_cmd(p: Path, *cmd: str, opt: tuple[str, ...] = ()) -> list[str]:
    return [sys.executable, "-m", "sandbox_shim", "confine", "--permit-path", str(p), *opt, "--", *cmd]


def user_git_status(p: Path, env: dict[str, str]) -> None:
    subprocess.run(["git", "status"], cwd=p, env=env, capture_output=True, timeout=60)


def test_created_repository_is_disarmed_after_the_run(
    proj: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    p, env = proj
    marker = tmp_path / "pwned"
    r = subprocess.run(
        confine_cmd(p, "sh", "-c", ATTACK, "x", str(p), str(marker), opt=("--allow-protected-writes",)),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "ATTACKED" in r.stdout, r.stderr
    user_git_status(p, env)
    assert marker.exists(), "control: the planted fsmonitor did not run (the probe is broken)"
    marker.unlink()
    subprocess.run(["rm", "-rf", str(p / "sub")], check=True)
    subprocess.run(["git", "rm", "-q", "--cached", "sub"], cwd=p, env=env, capture_output=True)
    r = subprocess.run(
        confine_cmd(p, "sh", "-c", ATTACK, "x", str(p), str(marker)),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "ATTACKED" in r.stdout, r.stderr
    end = time.monotonic() + 10  # the check runs in confine's child when the command ends
    while not (p / "sub" / ".git" / ("config" + confine_git.DISARMED)).exists() and time.monotonic() < end:
        time.sleep(0.05)
    user_git_status(p, env)
    assert not marker.exists(), "the created repository ran code at the user's git status"
    assert "fsmonitor" in (p / "sub" / ".git" / ("config" + confine_git.DISARMED)).read_text()
    assert "fsmonitor" not in (p / "sub" / ".git" / "config").read_text()


def test_created_repository_is_disarmed_after_kill_9(
    proj: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    p, env = proj
    marker = tmp_path / "pwned"
    cmd = confine_cmd(p, "sh", "-c", ATTACK + "sleep 60\n", "x", str(p), str(marker))
    run = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True
    )
    assert run.stdout is not None
    assert run.stdout.readline().strip() == "ATTACKED"
    os.killpg(run.pid, signal.SIGKILL)  # confine, its child and the command: nothing gets to check
    run.wait(timeout=30)
    time.sleep(0.3)
    r = subprocess.run(confine_cmd(p, "true"), env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    user_git_status(p, env)
    assert not marker.exists(), "a killed run's repository ran code after the next run"
    assert (p / "sub" / ".git" / ("config" + confine_git.DISARMED)).exists()


def test_disarm_keeps_safe_keys_and_moves_hooks(tmp_path: Path) -> None:
    g = tmp_path / "r"
    subprocess.run(["git", "init", "-q", str(g)], check=True)
    subprocess.run(["git", "-C", str(g), "remote", "add", "origin", "https://example.com/x.git"], check=True)
    subprocess.run(["git", "-C", str(g), "config", "core.sshCommand", "touch /tmp/x"], check=True)
    (g / ".git" / "hooks" / "post-checkout").write_text("#!/bin/sh\n")
    changed = confine_git.disarm(str(g / ".git"))
    assert str(g / ".git" / "config") in changed and str(g / ".git" / "hooks") in changed
    got = subprocess.run(
        ["git", "-C", str(g), "config", "--get", "remote.origin.url"], capture_output=True, text=True
    ).stdout.strip()
    assert got == "https://example.com/x.git"
    assert "sshcommand" not in (g / ".git" / "config").read_text().lower()
    assert os.listdir(g / ".git" / "hooks") == []


#: run 1 (two variants): leave a repository without a config / with the user's repository lacking
#: commondir, both harmless then; run 2 arms it by creating the missing file (not held: it did not exist)
PLANT = {
    "config": (
        'cd "$1" && git init -q sub && rm sub/.git/config',
        'cd "$1" && printf "[core]\\n\\tfsmonitor = \\"touch $2; false\\"\\n" > sub/.git/config',
    ),
    "commondir": (
        'cd "$1" && git init -q --bare store && rm store/config && rm -rf store/hooks',
        'cd "$1" && cp -a sub/.git/objects/. store/objects/ && cp -a sub/.git/refs/. store/refs/ && '
        'printf "[core]\\n\\tbare = false\\n\\tfsmonitor = \\"touch $2; false\\"\\n" > store/config && '
        "echo ../../store > sub/.git/commondir",
    ),
}


@pytest.mark.parametrize("name", sorted(PLANT))
def test_a_missing_git_file_created_in_a_later_run_is_disarmed(
    proj: tuple[Path, dict[str, str]], tmp_path: Path, name: str
) -> None:
    """A protected git file missing when a run starts cannot be held (it would have to be made): one
    run leaves a repository lacking it, the next creates it with a command in it.  The check after
    that run must disarm the repository (control: with --allow-protected-writes the planted command
    runs at the user's next git status)."""
    p, env = proj
    marker = tmp_path / "pwned"
    if name == "commondir":  # the user's own repository, made outside any confinement
        subprocess.run(["git", "init", "-q", str(p / "sub")], check=True, env=env)
        ident = ["-c", "user.name=x", "-c", "user.email=x@x"]
        subprocess.run(
            ["git", "-C", str(p / "sub"), *ident, "commit", "-q", "--allow-empty", "-m", "i"], env=env
        )
    first, second = PLANT[name]
    for opt in (("--allow-protected-writes",), ()):
        for script in (first, second):
            r = subprocess.run(
                confine_cmd(p, "sh", "-c", script, "x", str(p), str(marker), opt=opt),
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert r.returncode == 0, r.stderr
        subprocess.run(["git", "status"], cwd=p / "sub", env=env, capture_output=True, timeout=60)
        if opt:
            assert marker.exists(), "control: the planted command did not run (the probe is broken)"
            marker.unlink()
            for junk in ("store", "sub") if name == "commondir" else ("sub",):
                subprocess.run(["rm", "-rf", str(p / junk)], check=True)
            if name == "commondir":
                subprocess.run(["git", "init", "-q", str(p / "sub")], check=True, env=env)
                ident = ["-c", "user.name=x", "-c", "user.email=x@x"]
                cmd = ["git", "-C", str(p / "sub"), *ident, "commit", "-q", "--allow-empty", "-m", "i"]
                subprocess.run(cmd, env=env)
    assert not marker.exists(), f"a {name} created in a later run ran code at the user's git status"


def test_names_made_in_the_way_of_the_disarm_do_not_stop_it(
    proj: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    """The program makes non-empty directories at the names the disarm moves things aside to
    (``config.sandbox-shim-disarmed``...), so a plain rename(2) would fail and leave the repository
    armed: the disarm takes the next free name (control: without them, the same plant is disarmed too)."""
    p, env = proj
    marker = tmp_path / "pwned"
    for blocked in (False, True):
        block = (
            "mkdir -p sub/.git/config.sandbox-shim-disarmed/x sub/.git/hooks.sandbox-shim-disarmed/x && "
            if blocked
            else ""
        )
        script = (
            f'cd "$1" && git init -q sub && {block}'
            'git -C sub config core.fsmonitor "touch $2; false" && '
            "git -C sub -c user.name=x -c user.email=x@x commit -q --allow-empty -m x && "
            "git update-index --add --cacheinfo 160000,$(git -C sub rev-parse HEAD),sub"
        )
        r = subprocess.run(
            confine_cmd(p, "sh", "-c", script, "x", str(p), str(marker)),
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 0, r.stderr
        user_git_status(p, env)
        assert not marker.exists(), f"blocked={blocked}: the planted fsmonitor ran"
        assert "fsmonitor" not in (p / "sub" / ".git" / "config").read_text()
        subprocess.run(["rm", "-rf", str(p / "sub")], check=True)
        subprocess.run(["git", "rm", "-q", "--cached", "sub"], cwd=p, env=env, capture_output=True)


def test_a_missing_included_config_made_in_a_run_is_disarmed(
    proj: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    """The user's repository includes a config file that does not exist yet (include.path): one the
    program makes would bring a command in (control: with --allow-protected-writes it runs)."""
    p, env = proj
    marker = tmp_path / "pwned"
    subprocess.run(["git", "-C", str(p), "config", "include.path", "../team.gitconfig"], check=True, env=env)
    plant = 'printf "[core]\\n\\tfsmonitor = \\"touch $2; false\\"\\n" > "$1/team.gitconfig"'
    for opt in (("--allow-protected-writes",), ()):
        r = subprocess.run(
            confine_cmd(p, "sh", "-c", plant, "x", str(p), str(marker), opt=opt),
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 0, r.stderr
        user_git_status(p, env)
        if opt:
            assert marker.exists(), "control: the included fsmonitor did not run (the probe is broken)"
            marker.unlink()
            (p / "team.gitconfig").unlink()
    assert not marker.exists(), "a config included by the user's repository, made in the run, ran code"
