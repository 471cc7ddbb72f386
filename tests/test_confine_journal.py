"""Placeholders survive no crash: ``kill -9`` of ``confine`` at several moments, then the next run.

Control: a normal run leaves nothing behind, and a directory the user made (empty, like a
placeholder) is never removed.  Breach attempt: kill -9 at 0.05-1.0 s (before, during and after the
placeholders are made and the command is exec'd); the next run must remove what the killed one left
(its journal's owner is gone) and a run whose owner is alive must keep its placeholders.
"""

from __future__ import annotations

import os
import shutil
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


#: reads the fd named by its argument: "read:..." or "closed"
FD_PROBE = (
    "import os, sys\n"
    "try:\n    print('read:' + os.read(int(sys.argv[1]), 100).decode())\n"
    "except OSError:\n    print('closed')\n"
)


@pytest.mark.parametrize("waits", [True, False])
def test_the_callers_other_fds_do_not_reach_the_command(proj: Path, tmp_path: Path, waits: bool) -> None:
    """An fd the caller opened on a file outside the permit path is closed before the command runs,
    whether confine waits for it or execs it (--allow-protected-writes)."""
    secret = tmp_path / "secret"
    secret.write_text("s3cret\n")
    env = env_for(proj.parent)
    fd = os.open(secret, os.O_RDONLY)
    try:
        probe = ["/usr/bin/python3", "-c", FD_PROBE, str(fd)]
        control = subprocess.run(probe, pass_fds=(fd,), capture_output=True, text=True, timeout=60)
        assert "read:s3cret" in control.stdout, control.stderr  # control: a plain child reads it
        cmd = confine_cmd(proj, *probe)
        if not waits:
            cmd[4:4] = ["--allow-protected-writes"]
        r = subprocess.run(cmd, env=env, pass_fds=(fd,), capture_output=True, text=True, timeout=60)
    finally:
        os.close(fd)
    assert r.returncode == 0, r.stderr
    assert "s3cret" not in r.stdout and "closed" in r.stdout, r.stdout


@pytest.mark.skipif(shutil.which("unshare") is None, reason="unshare(1) is not installed (util-linux)")
def test_a_run_in_another_pid_namespace_sees_a_live_run_as_live(proj: Path) -> None:
    """In another pid namespace (unshare -p, a container sharing $HOME) the first run's pid is not in
    /proc: a sweep judged by pid would take its placeholders and claim.  Liveness is the claim's lock."""
    env = env_for(proj.parent)
    other = proj.parent / "other"
    other.mkdir()
    first = subprocess.Popen(
        confine_cmd(proj, "sleep", "30"), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        assert settle(proj, sorted(NAMES)) == sorted(NAMES)
        ns = ["unshare", "--pid", "--fork", "--mount-proc"]
        r = subprocess.run(
            [*ns, *confine_cmd(other, "true")], env=env, capture_output=True, text=True, timeout=60
        )
        assert r.returncode == 0, r.stderr  # control: the other run did run (and swept)
        assert left(proj) == sorted(NAMES), "a run in another pid namespace swept a live run's placeholders"
        again = subprocess.run(
            [*ns, *confine_cmd(proj, "true")], env=env, capture_output=True, text=True, timeout=60
        )
        assert again.returncode == 5 and "confinement.concurrent" in again.stderr, again.stderr
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    r = subprocess.run(confine_cmd(proj, "true"), env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert settle(proj, []) == []


@pytest.mark.skipif(shutil.which("unshare") is None, reason="unshare(1) is not installed (util-linux)")
def test_another_name_for_a_confined_directory_is_the_same_directory(proj: Path) -> None:
    """A bind mount of the permit path under another name (made in a private mount namespace here)
    is the same directory: refused while the first run lives (control: a bind of another directory
    runs)."""
    env = env_for(proj.parent)
    alias, other = proj.parent / "alias", proj.parent / "other"
    alias.mkdir()
    other.mkdir()

    def through_alias(source: Path) -> subprocess.CompletedProcess[str]:
        inner = " ".join(confine_cmd(alias, "true"))
        script = f"mount --bind {source} {alias} && exec {inner}"
        return subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    first = subprocess.Popen(
        confine_cmd(proj, "sleep", "30"), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        assert settle(proj, sorted(NAMES)) == sorted(NAMES)
        control = through_alias(other)
        assert control.returncode == 0, control.stderr  # another directory under that name runs
        r = through_alias(proj)
        assert r.returncode == 5 and "confinement.concurrent" in r.stderr, r.stderr
        assert left(proj) == sorted(NAMES)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)


#: a program that handles ^C itself: marks itself ready, then exits 9 from its SIGINT handler
CTRL_C_PROGRAM = (
    "import signal, sys, time, pathlib\n"
    "p = pathlib.Path(sys.argv[1])\n"
    "def h(*_):\n    p.with_name('caught').write_text('x')\n    sys.exit(9)\n"
    "signal.signal(signal.SIGINT, h)\n"
    "p.write_text('ready')\n"
    "time.sleep(30)\n"
)


def _ctrl_c(argv: list[str], env: dict[str, str], ready: Path) -> int:
    """Run ``argv`` on a new pseudo-terminal (its foreground group), type ^C once ``ready`` exists;
    returns the exit status (-N for a signal)."""
    import pty

    pid, master = pty.fork()
    if pid == 0:  # the child: session leader, the pty its controlling terminal
        try:
            os.execve(argv[0], argv, env)
        finally:
            os._exit(127)
    try:
        end = time.monotonic() + 30
        while not ready.exists() and time.monotonic() < end:
            time.sleep(0.02)
        os.write(master, b"\x03")
        while True:  # drain the terminal until the child is gone
            try:
                if not os.read(master, 4096):
                    break
            except OSError:
                break
        _, status = os.waitpid(pid, 0)
    finally:
        os.close(master)
    return os.waitstatus_to_exitcode(status)


@pytest.mark.parametrize("helper", ["native", "python"])
def test_ctrl_c_is_the_commands_to_handle(proj: Path, helper: str) -> None:
    """A terminal's ^C goes to the whole foreground group; bwrap must not die of it (that would end
    the sandbox and the command's own handling of ^C): the command catches it and ends as it chooses.
    With an egress list the helper inside is the Python one (it runs the proxy's forwarder)."""
    env = env_for(proj.parent)
    program = ["/usr/bin/python3", "-c", CTRL_C_PROGRAM, str(proj / "ready")]
    assert _ctrl_c(program, env, proj / "ready") == 9  # control: the program alone
    assert (proj / "caught").exists()
    (proj / "ready").unlink()
    (proj / "caught").unlink()
    cmd = confine_cmd(proj, *program)
    if helper == "python":
        cmd[4:4] = ["--allow-host", "127.0.0.1:9"]
    assert _ctrl_c(cmd, env, proj / "ready") == 9
    assert (proj / "caught").exists()
    assert settle(proj, []) == []  # released after the command


@pytest.mark.skipif(shutil.which("unshare") is None, reason="unshare(1) is not installed (util-linux)")
@pytest.mark.parametrize("case", ["home", "state-around", "settings"])
def test_a_bind_mount_alias_is_checked_like_the_directory(proj: Path, tmp_path: Path, case: str) -> None:
    """The home, the state directory and the settings file are found inside a read-write path by
    identity too: a bind mount of the home (a devcontainer's mount, say) named as the permit path is
    refused like the home itself (control: a bind of a plain project directory runs)."""
    env = env_for(proj.parent)
    home = proj.parent
    alias = tmp_path / "alias"
    alias.mkdir()
    (home / ".local" / "state").mkdir(parents=True, exist_ok=True)
    settings = proj / "confine.json"
    settings.write_text("{}")

    def through_alias(source: Path, *opts: str, permit: Path = alias) -> subprocess.CompletedProcess[str]:
        inner = " ".join(
            [
                sys.executable,
                "-m",
                "sandbox_shim",
                "confine",
                "--permit-path",
                str(permit),
                *opts,
                "--",
                "true",
            ]
        )
        return subprocess.run(
            [
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                f"mount --bind {source} {alias} && {inner}",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    control = through_alias(proj)
    assert control.returncode == 0, control.stderr  # a project directory under another name runs
    if case == "home":
        r = through_alias(home)
        assert r.returncode == 2 and "home directory" in r.stderr, r.stderr
    elif case == "state-around":  # the state directory inside the alias: also the home, refused first
        r = through_alias(home / ".local", "--allow-protected-writes")
        assert r.returncode == 2 and "under another name" in r.stderr, r.stderr
    else:
        r = through_alias(proj, "--settings", str(alias / "confine.json"), permit=proj)  # its own name
        assert r.returncode == 2 and "another name" in r.stderr, r.stderr


def test_a_report_with_other_hard_links_is_refused(proj: Path, tmp_path: Path) -> None:
    """A report file hard-linked into the permit path could be written by the command through the
    other name (control: a report of its own is taken)."""
    env = env_for(proj.parent)
    report = tmp_path / "report.jsonl"
    report.write_text("")
    ok = subprocess.run(
        confine_cmd(proj, "true")[:5] + [str(proj), "--report", str(report), "--", "true"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ok.returncode == 0, ok.stderr
    os.link(report, proj / "r.jsonl")
    r = subprocess.run(
        confine_cmd(proj, "true")[:5] + [str(proj), "--report", str(report), "--", "true"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "hard links" in r.stderr, r.stderr
