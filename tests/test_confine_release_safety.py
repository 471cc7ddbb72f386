"""The release, the sweep and the walks treat what a confined program left as hostile (issue #22).

Each breach an outside attacker reported is attempted after a control shows the probe works:

* a FIFO planted in a new repository (``commondir``, ``gitdir``, ``config``, a gitfile) must not
  block the walk, the disarm or the next run's sweep, and must not keep another new repository
  armed;
* ``sub/.git`` swapped for a link to a victim repository outside every permit path while the
  disarm runs must not rename or rewrite the victim's files; a ``.claude`` swapped for a link
  likewise must not aim the placeholders' removal outside;
* a check that could not complete (too many entries) keeps its snapshot, and a later run finishes
  it before taking its own: the repository is never taken for one that existed before;
* a read-write path that is or contains the home directory is refused unless protection is off.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sandbox_shim.hardening import confine_git, confine_journal, confine_sets

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="Linux: FIFOs, bwrap, /proc start times")
BWRAP = os.access("/usr/bin/bwrap", os.X_OK)
GIT_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "GIT_CONFIG_NOSYSTEM": "1", "HOME": "/nonexistent"}


def git(*args: str) -> None:
    subprocess.run(["git", *args], check=True, env=GIT_ENV, capture_output=True)


def armed_repo(path: Path, marker: Path) -> None:
    git("init", "-q", str(path))
    git("-C", str(path), "config", "core.fsmonitor", f"touch {marker}; false")


def ran_fsmonitor(path: Path, marker: Path) -> bool:
    subprocess.run(["git", "-C", str(path), "status"], env=GIT_ENV, capture_output=True, timeout=60)
    return marker.exists()


def env_for(home: Path) -> dict[str, str]:
    """A small environment; ``PYTHONPATH`` is kept, so a source tree under test is the one run."""
    kept = {"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {}
    return {"HOME": str(home), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "GIT_CONFIG_NOSYSTEM": "1", **kept}


def in_child(code: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter (a blocked open must not hang the test process)."""
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=dict(os.environ)
    )


@pytest.mark.parametrize("where", ["commondir", "gitdir", "config", "config.worktree", "hooks/pre-commit"])
def test_a_fifo_in_a_new_repository_blocks_nothing(tmp_path: Path, where: str) -> None:
    root = tmp_path / "p"
    root.mkdir()
    state = tmp_path / "state"
    state.mkdir()
    record = state / "1-1.git"
    confine_git.write_snapshot(str(record), [str(root)], [])
    marker = tmp_path / "pwned"
    armed_repo(root / "zz", marker)
    assert ran_fsmonitor(root / "zz", marker), "control: the planted fsmonitor did not run"
    marker.unlink()
    git("init", "-q", str(root / "f"))
    fifo = root / "f" / ".git" / where
    if fifo.exists():
        fifo.unlink()
    os.mkfifo(fifo)
    # control: opening the FIFO as the old code did blocks (a reader waits for a writer)
    probe = in_child(
        f"import os\nfd = os.open({str(fifo)!r}, os.O_RDONLY | os.O_NONBLOCK)\nprint(os.fstat(fd).st_mode)"
    )
    assert probe.returncode == 0 and int(probe.stdout) & 0o170000 == 0o010000, probe.stderr  # S_IFIFO
    with pytest.raises(subprocess.TimeoutExpired):
        in_child(f"open({str(fifo)!r}, 'rb').read()", timeout=1.5)
    r = in_child(
        "from sandbox_shim.hardening import confine_git\n"
        f"print(confine_git.check_snapshot({str(record)!r}))\n"
        f"print(confine_git.git_dirs([{str(root)!r}]))\n"
        f"print(confine_git.includes({str(root / 'f' / '.git' / 'config')!r}))\n"
    )
    assert r.returncode == 0, r.stderr
    assert not record.exists()
    assert not ran_fsmonitor(root / "zz", marker), "zz stayed armed"
    assert (root / "zz" / ".git" / ("config" + confine_git.DISARMED)).exists()


@pytest.mark.skipif(not BWRAP, reason="needs bwrap at /usr/bin/bwrap")
def test_a_fifo_does_not_stop_the_release_or_hang_the_next_run(tmp_path: Path) -> None:
    """The attacker's run: ``mkfifo f/.git/commondir`` beside an armed ``zz``; confine's child must
    disarm ``zz`` and the next run must start (its sweep and walk read no FIFO)."""
    home = tmp_path / "home"
    p = home / "proj"
    p.mkdir(parents=True)
    env = env_for(home)
    marker = tmp_path / "pwned"
    script = (
        f'cd "{p}" && git init -q f && mkfifo f/.git/commondir f/.git/gitdir && git init -q zz && '
        f"git -C zz config core.fsmonitor 'touch {marker}; false'"
    )
    cmd = [
        sys.executable,
        "-m",
        "sandbox_shim",
        "confine",
        "--permit-path",
        str(p),
        "--",
        "/bin/sh",
        "-c",
        script,
    ]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    kept = p / "zz" / ".git" / ("config" + confine_git.DISARMED)
    end = time.monotonic() + 20  # the check runs in confine's child when the command ends
    while not kept.exists() and time.monotonic() < end:
        time.sleep(0.05)
    assert kept.exists(), "zz was not disarmed"
    assert not ran_fsmonitor(p / "zz", marker)
    t0 = time.monotonic()
    r = subprocess.run(
        [*cmd[:6], "--", "/bin/true"], env=env, capture_output=True, text=True, timeout=60
    )  # hung for good before (the sweep opened the FIFO)
    assert r.returncode == 0 and time.monotonic() - t0 < 30, r.stderr
    journal = home / ".local" / "state" / "sandbox-shim" / "confine"
    end = time.monotonic() + 10
    while any(n.endswith(".git") for n in os.listdir(journal)) and time.monotonic() < end:
        time.sleep(0.05)
    assert not [n for n in os.listdir(journal) if n.endswith(".git")], "a snapshot stayed behind"


def _exchange(a: Path, b: Path) -> None:
    """renameat2(2) RENAME_EXCHANGE: swap two names atomically."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.renameat2(-100, os.fsencode(a), -100, os.fsencode(b), 2) != 0:  # AT_FDCWD, RENAME_EXCHANGE
        raise OSError(ctypes.get_errno(), "renameat2", str(a))


def test_disarm_is_not_redirected_by_a_swapped_link(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "p"
    root.mkdir()
    victim = tmp_path / "victim"  # outside every permit path: the user's own repository
    git("init", "-q", str(victim))
    git("-C", str(victim), "config", "core.sshCommand", "ssh -i key")  # an unsafe key: disarm would cut it
    before = (victim / ".git" / "config").read_text()
    marker = tmp_path / "pwned"
    armed_repo(root / "sub", marker)
    gitdir = root / "sub" / ".git"
    (root / "sub" / "swap").symlink_to(victim / ".git")
    # control: through the swapped name, a path reaches the victim's config (the old disarm's way)
    _exchange(gitdir, root / "sub" / "swap")
    assert os.path.realpath(gitdir / "config") == str(victim / ".git" / "config")
    # the swap before the disarm: no link is followed, the victim is untouched, the run is incomplete
    changed, ok = confine_git.disarm_at(str(gitdir))
    assert not ok and changed == []
    assert (victim / ".git" / "config").read_text() == before
    assert not (victim / ".git" / ("config" + confine_git.DISARMED)).exists()
    _exchange(gitdir, root / "sub" / "swap")  # back: sub/.git is the new repository again
    # the swap during the disarm (after its directory was opened): it goes on in the directory it opened
    real_read = confine_git.read_regular
    swapped: list[bool] = []

    def swap_then_read(*a: object, **kw: object) -> bytes | None:
        if not swapped:
            _exchange(gitdir, root / "sub" / "swap")
            swapped.append(True)
        return real_read(*a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(confine_git, "read_regular", swap_then_read)
    changed, ok = confine_git.disarm_at(str(gitdir))
    assert swapped and ok, changed
    assert (victim / ".git" / "config").read_text() == before
    assert not (victim / ".git" / ("config" + confine_git.DISARMED)).exists()
    new_repo = root / "sub" / "swap"  # where the exchange moved the new repository's directory
    assert "fsmonitor" in (new_repo / ("config" + confine_git.DISARMED)).read_text()
    assert "fsmonitor" not in (new_repo / "config").read_text()


def test_placeholder_removal_is_not_redirected(tmp_path: Path) -> None:
    root = tmp_path / "p"
    root.mkdir()
    outside = tmp_path / "outside"
    (outside / "commands").mkdir(parents=True)
    (outside / "settings.json").write_bytes(b"{}\n")
    made, _ = confine_sets.make_placeholders([str(root)], [str(root)])
    assert str(root / ".claude" / "commands") in made
    os.rename(root / ".claude", tmp_path / "claude-aside")
    (root / ".claude").symlink_to(outside)
    assert os.path.isdir(root / ".claude" / "commands")  # control: the path reaches outside
    confine_sets.remove_placeholders(made)
    assert (outside / "commands").is_dir() and (outside / "settings.json").read_bytes() == b"{}\n"
    assert not (root / ".vscode").exists()  # the other placeholders, still as made, were removed
    fifo = root / ".mcp.json"
    os.mkfifo(fifo)  # a FIFO where a placeholder was: not read, not removed
    confine_sets.remove_placeholders([str(fifo)])
    assert fifo.exists()


def test_an_incomplete_check_is_finished_by_a_later_sweep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """F6a: past the walk's limit the record stays; once the junk is gone the next sweep (owner
    dead) disarms the repository the run created — never taking it for a pre-existing one."""
    root = tmp_path / "p"
    root.mkdir()
    journal = tmp_path / "state" / "confine"
    journal.mkdir(parents=True)
    record = journal / "999999999-1.git"  # an owner that is gone
    git("init", "-q", str(root / "old"))
    known = confine_git.all_git_dirs([str(root)])
    confine_git.write_snapshot(str(record), [str(root)], known)
    marker = tmp_path / "pwned"
    armed_repo(root / "new", marker)
    junk = root / "junk"
    junk.mkdir()
    for i in range(60):
        (junk / str(i)).touch()
    monkeypatch.setattr(confine_git, "MAX_ENTRIES", 50)
    changed = confine_git.check_snapshot(str(record))
    assert changed and changed[0].startswith(confine_git.TOO_LARGE)
    assert record.exists(), "an incomplete check dropped its snapshot"
    assert ran_fsmonitor(root / "new", marker), "control: the repository is armed while unchecked"
    marker.unlink()
    assert confine_journal.sweep(str(journal), confine_sets.remove_placeholders) == 0
    assert record.exists()  # still too many: kept again
    subprocess.run(["rm", "-rf", str(junk)], check=True)
    confine_journal.sweep(str(journal), confine_sets.remove_placeholders)
    assert not record.exists()
    assert not ran_fsmonitor(root / "new", marker), "the repository created in the unchecked run stayed armed"
    assert (root / "new" / ".git" / ("config" + confine_git.DISARMED)).exists()
    assert not (root / "old" / ".git" / ("config" + confine_git.DISARMED)).exists()


@pytest.mark.skipif(not BWRAP, reason="needs bwrap at /usr/bin/bwrap")
def test_a_read_write_home_is_refused(tmp_path: Path) -> None:
    """F6b: the confined program could create ``~/.bash_profile``, ``~/.gitconfig``, ``~/.ssh``."""
    home = tmp_path / "home"
    home.mkdir()
    env = {**env_for(home), "XDG_STATE_HOME": str(tmp_path / "state")}
    plant = "touch $HOME/.bash_profile $HOME/.gitconfig"
    base = [sys.executable, "-m", "sandbox_shim", "confine"]
    r = subprocess.run(
        [*base, "--permit-path", str(home), "--allow-protected-writes", "--", "/bin/sh", "-c", plant],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0 and (home / ".bash_profile").exists(), r.stderr  # control: the probe plants
    (home / ".bash_profile").unlink()
    (home / ".gitconfig").unlink()
    for permit in (home, tmp_path):  # the home itself, and a directory around it
        r = subprocess.run(
            [*base, "--permit-path", str(permit), "--", "/bin/sh", "-c", plant],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 2 and "--permit-path" in r.stderr and "home directory" in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
        assert not (home / ".bash_profile").exists() and not (home / ".gitconfig").exists()
    proj = home / "proj"  # a project inside the home stays allowed
    proj.mkdir()
    r = subprocess.run(
        [*base, "--permit-path", str(proj), "--", "/bin/true"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr


def test_the_read_set_computation_reads_no_fifo(tmp_path: Path) -> None:
    """A confined run can leave a FIFO as a dependency's ``package.json`` or as a script the next
    run's read set looks at (``#!``, ELF): the next run must start, not wait for a writer."""
    nm = tmp_path / "proj" / "node_modules"
    (nm / "a").mkdir(parents=True)
    (nm / "b").mkdir()
    (nm / "a" / "package.json").write_text('{"name": "a", "dependencies": {"b": "1"}}')
    (nm / "a" / "cli.js").write_text("#!/usr/bin/env node\n")
    os.mkfifo(nm / "b" / "package.json")
    os.mkfifo(tmp_path / "script")
    with pytest.raises(subprocess.TimeoutExpired):  # control: an ordinary open waits for a writer
        in_child(f"open({str(nm / 'b' / 'package.json')!r}, 'rb').read()", timeout=1.5)
    r = in_child(
        "from sandbox_shim.hardening import readset\n"
        f"print(readset.node_packages({str(nm / 'a' / 'cli.js')!r}))\n"
        f"s = {str(tmp_path / 'script')!r}\n"
        "print(readset.shebang(s), readset.is_elf(s), readset.elf_dynamic(s))\n"
    )
    assert r.returncode == 0, r.stderr
    assert str(nm / "a") in r.stdout.splitlines()[0]  # the package itself is still found
    assert r.stdout.splitlines()[1] == "[] False None"


def test_disarm_under_an_exchange_loop_never_touches_the_victim(tmp_path: Path) -> None:
    """The reported attack as it was run: a concurrent process exchanges ``sub/.git`` with a link
    to the victim's git directory in a loop (renameat2 ``RENAME_EXCHANGE``) while the disarm runs."""
    import threading

    victim = tmp_path / "victim"
    git("init", "-q", str(victim))
    git("-C", str(victim), "config", "core.sshCommand", "ssh -i key")
    (victim / ".git" / "victim-mark").touch()
    before = (victim / ".git" / "config").read_text()
    root = tmp_path / "p"
    seen_victim = False
    for n in range(10):
        sub = root / f"s{n}"
        armed_repo(sub, tmp_path / "pwned")
        (sub / "swap").symlink_to(victim / ".git")
        stop = threading.Event()

        def loop(sub: Path = sub, stop: threading.Event = stop) -> None:
            while not stop.is_set():
                try:
                    _exchange(sub / ".git", sub / "swap")
                except OSError:
                    pass

        t = threading.Thread(target=loop)
        t.start()
        try:
            for _ in range(20):
                seen_victim = seen_victim or (sub / ".git" / "victim-mark").exists()  # control
                confine_git.disarm(str(sub / ".git"))
        finally:
            stop.set()
            t.join()
        assert (victim / ".git" / "config").read_text() == before, f"round {n}: the victim was rewritten"
        assert not (victim / ".git" / ("config" + confine_git.DISARMED)).exists()
        assert not (victim / ".git" / ("hooks" + confine_git.DISARMED)).exists()
    assert seen_victim, "control: the exchange never showed the victim at sub/.git (the probe is broken)"


#: as uid 65534: ``disarm_new`` of the root in argv[1], nothing known before; prints what it returned
AS_NOBODY = (
    "import json, sys\n"
    "from sandbox_shim.hardening import confine_git\n"
    "print(json.dumps(confine_git.disarm_new([sys.argv[1]], [])))\n"
)


def _plant_repo(where: Path) -> Path:
    """A git directory (HEAD, objects, refs, a config with core.fsmonitor) at ``where/.git``."""
    git = where / ".git"
    for d in (git / "objects", git / "refs", git / "hooks"):
        d.mkdir(parents=True)
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    (git / "config").write_text("[core]\n\tfsmonitor = touch /tmp/pwned; false\n")
    return git


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the check as another user")
@pytest.mark.parametrize("hide", ["none", "unreadable-parent", "read-only-git-dir"])
def test_a_repository_hidden_by_permissions_is_still_disarmed(tmp_path: Path, hide: str) -> None:
    """A confined run (as an unprivileged user) leaves the repository it made inside a directory it
    made unreadable (chmod 311), or its git directory read-only (chmod 555): the check after it runs
    as the same user and must still find and disarm it (control: nothing hidden)."""
    import shutil
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="sandbox-shim-hidden-", dir="/tmp"))  # reachable by uid 65534
    try:
        _hidden_case(base, hide)
    finally:
        for p in base.rglob("*"):
            if p.is_dir() and not p.is_symlink():
                p.chmod(0o700)
        shutil.rmtree(base)


def _hidden_case(base: Path, hide: str) -> None:
    root = base / "proj"
    git = _plant_repo(root / "d" / "sub")
    for p in [base, *root.rglob("*"), root]:
        os.chown(p, 65534, 65534)
    if hide == "unreadable-parent":
        (root / "d").chmod(0o311)
    elif hide == "read-only-git-dir":
        git.chmod(0o555)

    def as_nobody() -> None:
        os.setgroups([])
        os.setresgid(65534, 65534, 65534)
        os.setresuid(65534, 65534, 65534)

    import sandbox_shim

    package = str(Path(sandbox_shim.__file__).parents[1])  # the checkout or site-packages under test
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": package}
    r = None
    for python in (sys.executable, "/usr/bin/python3"):  # one that uid 65534 can run
        try:
            r = subprocess.run(
                [python, "-c", AS_NOBODY, str(root)],
                env=env,
                preexec_fn=as_nobody,
                capture_output=True,
                text=True,
                timeout=60,
            )
        except PermissionError:
            continue
        if "No module named" not in r.stderr and "Permission denied" not in r.stderr:
            break
    if r is None or "No module named" in r.stderr or "Permission denied" in r.stderr:
        pytest.skip("no interpreter with this package that uid 65534 can run here")
    assert r.returncode == 0, r.stderr
    assert (git / "config.sandbox-shim-disarmed").exists(), r.stdout
    assert "fsmonitor" not in (git / "config").read_text()
