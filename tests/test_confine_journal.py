"""Placeholders survive no crash: ``kill -9`` of ``confine`` at several moments, then the next run.

Control: a normal run leaves nothing behind, and a directory the user made (empty, like a
placeholder) is never removed.  Breach attempt: kill -9 at 0.05-1.0 s (before, during and after the
placeholders are made and the command is exec'd); the next run must remove what the killed one left
(its journal's owner is gone) and a run whose owner is alive must keep its placeholders.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sandbox_shim.hardening import confine_journal

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or not os.access("/usr/bin/bwrap", os.X_OK),
    reason="needs Linux with bwrap at /usr/bin/bwrap",
)

NAMES = (".claude", ".idea", ".vscode", ".mcp.json")


def env_for(home: Path) -> dict[str, str]:
    """A small environment; ``PYTHONPATH`` is kept, so a source tree under test is the one run."""
    kept = {"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {}
    return {"HOME": str(home), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", **kept}


def confine_cmd(proj: Path, *cmd: str) -> list[str]:
    return [sys.executable, "-m", "sandbox_shim", "confine", "--permit-path", str(proj), "--", *cmd]


def records(journal: str | None) -> list[str]:
    """Journal records (not the walk caches) in ``journal``."""
    if not journal or not os.path.isdir(journal):
        return []
    return [n for n in os.listdir(journal) if not n.startswith("walk-") and n != confine_journal.CLAIMS_LOCK]


def left(proj: Path) -> list[str]:
    return sorted(n for n in NAMES if os.path.lexists(proj / n))


def settle(proj: Path, want: list[str], timeout: float = 10) -> list[str]:
    end = time.monotonic() + timeout
    while left(proj) != want and time.monotonic() < end:
        time.sleep(0.05)
    return left(proj)


@pytest.fixture
def proj(tmp_path: Path) -> Path:
    (tmp_path / "home").mkdir()
    p = tmp_path / "home" / "proj"
    p.mkdir()
    return p


def test_normal_run_leaves_nothing_and_keeps_the_users_own(proj: Path) -> None:
    env = env_for(proj.parent)
    r = subprocess.run(confine_cmd(proj, "true"), env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert settle(proj, []) == []
    (proj / ".vscode").mkdir()  # the user's own, empty: looks like a placeholder, is not one
    r = subprocess.run(confine_cmd(proj, "true"), env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    time.sleep(0.5)
    assert left(proj) == [".vscode"]
    journal = confine_journal.journal_dir(env)
    assert journal and records(journal) == []


def test_confine_returns_only_once_the_release_is_done(proj: Path) -> None:
    """The caller's next command (``git status`` right after confine returns) must find the
    repository the command made disarmed and the placeholders gone: no window after the return."""
    env = env_for(proj.parent)
    script = (
        "git init -q sub && git -C sub config core.fsmonitor 'touch ../ran; false' && "
        "git -C sub config core.fsmonitor > armed"  # control: the config was written inside
    )
    for _ in range(5):
        r = subprocess.run(
            confine_cmd(proj, "/bin/sh", "-c", script), env=env, capture_output=True, text=True, timeout=60
        )
        assert r.returncode == 0, r.stderr
        assert (proj / "armed").read_text().strip() == "touch ../ran; false"
        after = subprocess.run(
            ["git", "-C", str(proj / "sub"), "config", "core.fsmonitor"],
            env=env,
            capture_output=True,
            text=True,
        )
        assert after.stdout == "", "the repository was still armed when confine returned"
        assert left(proj) == [], "placeholders were still there when confine returned"
        subprocess.run(["rm", "-rf", str(proj / "sub"), str(proj / "armed")], check=True)
        for p in proj.glob("sub.sandbox-shim-disarmed*"):
            subprocess.run(["rm", "-rf", str(p)], check=True)


def test_the_commands_status_is_confines(proj: Path) -> None:
    env = env_for(proj.parent)
    r = subprocess.run(confine_cmd(proj, "/bin/sh", "-c", "exit 3"), env=env, capture_output=True, timeout=60)
    assert r.returncode == 3
    assert left(proj) == []


def test_sigterm_to_confine_ends_the_command_before_anything_is_released(proj: Path) -> None:
    """SIGTERM to confine is passed on; the protected names stay held until the command is gone
    (the command keeps trying to write one; not one write may land, during or after)."""
    env = env_for(proj.parent)
    loop = (
        "while :; do (echo x > .mcp.json) 2>/dev/null && echo wrote >> log || echo held >> log; "
        "sleep 0.02; done"
    )
    p = subprocess.Popen(
        confine_cmd(proj, "/bin/sh", "-c", loop), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    end = time.monotonic() + 30
    while not (proj / "log").exists() and time.monotonic() < end:
        time.sleep(0.05)
    time.sleep(0.3)
    assert "held" in (proj / "log").read_text()  # control: the command runs and is refused
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=30)
    time.sleep(0.3)
    log = (proj / "log").read_text()
    assert "wrote" not in log, log
    assert not (proj / ".mcp.json").exists()
    assert left(proj) == []


@pytest.mark.parametrize("delay", [0.05, 0.15, 0.25, 0.4, 0.7, 1.2])
def test_kill_9_at_any_moment_is_cleaned_by_the_next_run(proj: Path, delay: float) -> None:
    env = env_for(proj.parent)
    p = subprocess.Popen(
        confine_cmd(proj, "sleep", "30"),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    time.sleep(delay)
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=30)
    killed_left = left(proj)
    r = subprocess.run(confine_cmd(proj, "true"), env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert settle(proj, []) == [], f"killed at {delay}s left {killed_left}; the next run kept them"
    journal = confine_journal.journal_dir(env)
    end = time.monotonic() + 10
    while records(journal) and time.monotonic() < end:
        time.sleep(0.05)
    assert records(journal) == []
    try:
        os.killpg(p.pid, signal.SIGKILL)  # whatever of the killed run is left (its sandbox dies with it)
    except ProcessLookupError:
        pass


def test_placeholders_of_a_live_run_are_not_swept(proj: Path) -> None:
    env = env_for(proj.parent)
    p = subprocess.Popen(
        confine_cmd(proj, "sleep", "4"), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        assert settle(proj, sorted(NAMES)) == sorted(NAMES)
        r = subprocess.run(confine_cmd(proj, "true"), env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 5 and "confinement.concurrent" in r.stderr, r.stderr  # one run at a time
        assert left(proj) == sorted(NAMES), "a second run removed the placeholders of a live one"
    finally:
        p.wait(timeout=60)
    assert settle(proj, []) == []


def test_sweep_removes_walk_caches_an_older_version_left(tmp_path: Path) -> None:
    """Walk caches once lived among the journals; the sweep lists that directory on every start."""
    journal = tmp_path / "journal"
    journal.mkdir()
    (journal / "walk-0123abcd").write_bytes(b"{}")
    (journal / "walk-0123abcd.99.tmp").write_bytes(b"")
    alive = journal / f"{os.getpid()}-{confine_journal.start_time(os.getpid())}"
    alive.write_bytes(b"/nonexistent/placeholder")  # control: this process's own journal stays
    assert confine_journal.sweep(str(journal), lambda paths: None) == 0
    assert sorted(os.listdir(journal)) == [alive.name]


def test_one_confinement_of_a_directory_at_a_time(proj: Path) -> None:
    """The end of one run removes its placeholders and disarms repositories, which would lift the
    read-only binds a second run of the same directory holds on those files: a second run of an
    overlapping read-write path is refused while the first lives (control: a sibling directory is
    not), and allowed once the first is gone, even by kill -9.  The home lies beside ``proj.parent``
    (a read-write path holding the home is refused on its own, exit 2: confine_sets.check_home)."""
    env = env_for(proj.parent.parent / "user")
    sibling = proj.parent / "other"
    inner = proj / "inner"
    sibling.mkdir()
    inner.mkdir()
    first = subprocess.Popen(
        confine_cmd(proj, "sleep", "30"), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        assert settle(proj, sorted(NAMES)) == sorted(NAMES)  # the first run holds its placeholders
        for path in (proj, inner, proj.parent):
            r = subprocess.run(confine_cmd(path, "true"), env=env, capture_output=True, text=True, timeout=60)
            assert r.returncode == 5 and "confinement.concurrent" in r.stderr, (path, r.stderr)
        r = subprocess.run(confine_cmd(sibling, "true"), env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr  # control: another directory runs alongside
        assert left(proj) == sorted(NAMES)  # the refused runs took nothing of the first one's
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    r = subprocess.run(confine_cmd(proj, "true"), env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert settle(proj, []) == []
