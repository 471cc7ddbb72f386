"""A state root that refuses writes (read-only, full) and read-only cgroups: every verb ends in one line
and a documented exit status, the previous state stays readable, nothing is half-made, and
``delete --force`` still kills the sandbox's processes and removes its cgroups where it can.

The faults are real: a tmpfs of a few hundred KiB mounted by the test under its own temp dir
(filled to ENOSPC, or bind-mounted read-only), and cgroup hierarchies remounted read-only inside a
private mount namespace (unshare(1) -m) that only the command under test sees.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import run_shim


def cgroups_of(root: Path, sandbox_id: str) -> list[str]:
    """The cgroup directories of ``sandbox_id`` under state root ``root`` (any hierarchy), found by the
    root's tag, so another root's sandbox of the same id is never counted."""
    import glob
    import hashlib

    tag = hashlib.sha256(str(root).encode()).hexdigest()[:10]
    return glob.glob(f"/sys/fs/cgroup/*/sandbox-shim/{tag}/{glob.escape(sandbox_id)}") + glob.glob(
        f"/sys/fs/cgroup/sandbox-shim/{tag}/{glob.escape(sandbox_id)}"
    )


#: exit statuses a verb may end with here (README "Exit statuses"): done, not found, wrong state,
#: capability unavailable and launch failed (a read-only cgroup), state unwritable
DOCUMENTED = {0, 4, 6, 8, 9, 11}


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True)


def _umount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True)


@pytest.fixture
def small_root(tmp_path: Path) -> Iterator[Path]:
    """A 400 KiB tmpfs for the state root, mounted here and removed with everything in it."""
    root = tmp_path / "small"
    root.mkdir()
    _mount("-t", "tmpfs", "-o", "size=400k,mode=0711", "tmpfs", str(root))
    yield root
    (root / "filler").unlink(missing_ok=True)
    for entry in root.iterdir() if root.is_dir() else []:
        if entry.is_dir() and not entry.name.startswith("."):
            run_shim(root, "delete", "--force", entry.name)
    _umount(root)


def _fill(root: Path) -> None:
    """Write until the tmpfs refuses (ENOSPC), down to single bytes."""
    fd = os.open(root / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        for n in (65536, 4096, 512, 1):
            try:
                while True:
                    os.write(fd, b"x" * n)
            except OSError:
                pass
    finally:
        os.close(fd)
    try:
        with pytest.raises(OSError):
            (root / "probe").write_bytes(b"x" * 4096)
    finally:
        (root / "probe").unlink(missing_ok=True)


def _read_only_view(root: Path, at: Path) -> Path:
    at.mkdir()
    _mount("--bind", str(root), str(at))
    _mount("-o", "remount,bind,ro", str(at))
    with pytest.raises(OSError):
        (at / "probe").write_text("x")
    return at


def _sandboxes(root: Path, bundle: Path) -> dict[str, int]:
    """c created, r running, p paused, s stopped; their pids."""
    for sid in "crps":
        assert run_shim(root, "create", "--bundle", str(bundle), sid).returncode == 0, sid
    for sid in "rps":
        assert run_shim(root, "start", sid).returncode == 0
    assert run_shim(root, "pause", "p").returncode == 0
    assert run_shim(root, "kill", "s", "KILL").returncode == 0
    deadline = time.monotonic() + 10
    while _status(root, "s") != "stopped" and time.monotonic() < deadline:
        time.sleep(0.05)
    return {sid: json.loads((root / sid / "state.json").read_text())["pid"] for sid in "crps"}


def _status(root: Path, sid: str) -> str:
    r = run_shim(root, "state", sid)
    return str(json.loads(r.stdout)["status"]) if r.returncode == 0 else f"exit {r.returncode}"


def _dead(pid: int) -> bool:
    """Gone or a zombie: no code runs in it any more."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X")
    except OSError:
        return True


def _one_line(r: subprocess.CompletedProcess[str], verb: str) -> None:
    assert r.returncode in DOCUMENTED, (verb, r.returncode, r.stderr)
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr, (verb, r.stderr)
    if r.returncode:
        assert len(r.stderr.strip().splitlines()) == 1, (verb, r.stderr)


def _verbs(bundle: Path) -> list[list[str]]:
    return [
        ["state", "c"],
        ["list"],
        ["start", "c"],
        ["state", "c"],
        ["kill", "r", "TERM"],
        ["exec", "r", "true"],
        ["update", "--pids-limit", "50", "r"],
        ["events", "--stats", "r"],
        ["pause", "r"],
        ["resume", "p"],
        ["delete", "s"],
        ["delete", "--force", "s"],
        ["delete", "--force", "p"],
        ["delete", "--force", "c"],
        ["delete", "--force", "r"],
        ["delete", "--force", "nosuch"],
        ["list"],
    ]


def _create_refused(root: Path, bundle: Path, sid: str) -> None:
    for verb in ("create", "run"):
        r = run_shim(root, verb, "--bundle", str(bundle), sid)
        assert r.returncode == 11 and "cannot write state" in r.stderr, (verb, r.stderr)
        _one_line(r, verb)
        assert not (root / sid).exists() and cgroups_of(root, sid) == []
        assert not [n for n in os.listdir(root) if n == sid or f"-{sid}." in n], os.listdir(root)


def test_delete_force_on_a_read_only_root_kills_removes_cgroups_and_says_so(
    make_bundle: Any, small_root: Path, tmp_path: Path
) -> None:
    b = make_bundle(args=["sleep", "1000"])
    assert run_shim(small_root, "create", "--bundle", str(b), "last").returncode == 0
    assert run_shim(small_root, "start", "last").returncode == 0
    pid = json.loads((small_root / "last" / "state.json").read_text())["pid"]
    assert cgroups_of(small_root, "last") and not _dead(pid)  # control: it runs, in its cgroups
    before = (small_root / "last" / "state.json").read_text()
    ro = _read_only_view(small_root, tmp_path / "ro")
    try:
        r = run_shim(ro, "delete", "--force", "last")
        assert r.returncode == 11 and "Read-only file system" in r.stderr, r.stderr
        _one_line(r, "delete --force")
        assert _dead(pid) and cgroups_of(small_root, "last") == []
        assert (ro / "last" / "state.json").read_text() == before  # the record is kept, readable
        assert _status(ro, "last") == "stopped"
    finally:
        _umount(ro)
    assert run_shim(small_root, "delete", "--force", "last").returncode == 0  # writable again: finished
    assert sorted(os.listdir(small_root)) == [".capabilities", ".cgroups", ".seccomp"]  # caches stay
    assert os.listdir(small_root / ".cgroups") == []


def test_every_verb_on_a_read_only_root(make_bundle: Any, small_root: Path, tmp_path: Path) -> None:
    b = make_bundle(args=["sleep", "1000"])
    pids = _sandboxes(small_root, b)
    before = {sid: (small_root / sid / "state.json").read_text() for sid in "crps"}
    ro = _read_only_view(small_root, tmp_path / "ro")
    try:
        _create_refused(ro, b, "new")
        for verb in _verbs(b):
            r = run_shim(ro, *verb)
            _one_line(r, " ".join(verb))
            if verb == ["start", "c"]:
                assert r.returncode == 11
                assert _status(ro, "c") == "created"  # refused before the release: still held
        for sid in "crps":
            assert (ro / sid / "state.json").read_text() == before[sid]
        assert all(_dead(p) for p in pids.values())
        assert all(cgroups_of(small_root, sid) == [] for sid in "crps")
    finally:
        _umount(ro)
    for sid in "crps":
        assert run_shim(small_root, "delete", "--force", sid).returncode == 0
    assert os.listdir(small_root / ".cgroups") == []


def test_every_verb_on_a_full_root(make_bundle: Any, small_root: Path) -> None:
    b = make_bundle(args=["sleep", "1000"])
    pids = _sandboxes(small_root, b)
    _fill(small_root)
    _create_refused(small_root, b, "new")
    r = run_shim(small_root, "start", "c")
    assert r.returncode == 11 and "No space left" in r.stderr
    assert _status(small_root, "c") == "created"  # space is taken before the release
    for verb in _verbs(b):
        _one_line(run_shim(small_root, *verb), " ".join(verb))
        for sid in "crps":
            if (small_root / sid).exists():
                json.loads((small_root / sid / "state.json").read_text())  # never truncated
    assert all(_dead(p) for p in pids.values())
    assert all(cgroups_of(small_root, sid) == [] for sid in "crps")
    (small_root / "filler").unlink()
    for sid in "crps":
        assert run_shim(small_root, "delete", "--force", sid).returncode == 0
    assert sorted(os.listdir(small_root)) == [".capabilities", ".cgroups", ".seccomp"]  # caches stay
    assert os.listdir(small_root / ".cgroups") == []


def test_state_write_is_refused_before_anything_on_a_full_root(make_bundle: Any, small_root: Path) -> None:
    """A full root refuses create before any cgroup, process or directory exists (control: it
    creates once there is space)."""
    b = make_bundle(args=["sleep", "1000"])
    _fill(small_root)
    _create_refused(small_root, b, "x")
    (small_root / "filler").unlink()
    assert run_shim(small_root, "create", "--bundle", str(b), "x").returncode == 0
    assert cgroups_of(small_root, "x")


READ_ONLY_CGROUPS = """
for m in $(awk '$3 ~ /^cgroup/ {print $2}' /proc/self/mounts); do
  mount -o remount,bind,ro "$m" || exit 99
done
exec "$@"
"""


def test_read_only_cgroups(make_bundle: Any, state_root: Path) -> None:
    if shutil.which("unshare") is None:
        pytest.skip("unshare(1) is not installed (util-linux): no private mount namespace to test in")
    b = make_bundle(args=["sleep", "1000"])
    pids = _sandboxes(state_root, b)

    def ro_cgroups(*args: str) -> subprocess.CompletedProcess[str]:
        from conftest import shim_cmd

        cmd = [
            "unshare",
            "-m",
            "--propagation",
            "private",
            "sh",
            "-c",
            READ_ONLY_CGROUPS,
            "sh",
            *shim_cmd(state_root, *args),
        ]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        assert p.returncode != 99, p.stderr
        return p

    r = ro_cgroups("update", "--pids-limit", "50", "r")  # the hierarchy is read-only in there
    assert r.returncode == 9 and "Read-only file system" in r.stderr
    assert run_shim(state_root, "update", "--pids-limit", "50", "r").returncode == 0  # control: not here
    for verb in _verbs(b):
        if verb[0] in ("exec", "events", "pause", "resume", "update", "start"):
            _one_line(ro_cgroups(*verb), " ".join(verb))
            continue
        r = ro_cgroups(*verb)
        _one_line(r, " ".join(verb))
        if verb[:2] == ["delete", "--force"] and verb[2] in ("r", "c"):
            assert r.returncode == 9 and "killed its processes" in r.stderr, r.stderr
            assert _dead(pids[verb[2]])  # the processes go even though their cgroups cannot
            assert cgroups_of(state_root, verb[2])  # kept, and still recorded for the next delete --force
    for sid in "crps":
        assert run_shim(state_root, "delete", "--force", sid).returncode == 0
        assert cgroups_of(state_root, sid) == []
    assert os.listdir(state_root / ".cgroups") == []


def test_create_with_a_few_pages_left_is_whole_or_unwritable(make_bundle: Any, small_root: Path) -> None:
    """Each file create writes in the state root (state.json, the cgroup record and parents, the BPF
    filters, bwrap's --info-fd file) meets ENOSPC in turn as the free space grows page by page: the
    answer is exit 11 with nothing left, or a whole sandbox (never a bwrap failure or a traceback)."""
    b = make_bundle(args=["sleep", "1000"])
    assert run_shim(small_root, "create", "--bundle", str(b), "warm").returncode == 0  # parents exist
    answers = []
    for pages in range(8):
        _fill(small_root)
        filler = small_root / "filler"
        os.truncate(filler, max(0, filler.stat().st_size - pages * 4096))
        r = run_shim(small_root, "create", "--bundle", str(b), "x")
        answers.append(r.returncode)
        _one_line(r, f"create with {pages} pages free")
        filler.unlink()
        if r.returncode:
            assert r.returncode == 11 and "No space left" in r.stderr, r.stderr
            assert not (small_root / "x").exists() and cgroups_of(small_root, "x") == []
        else:
            assert _status(small_root, "x") == "created"
            assert run_shim(small_root, "delete", "--force", "x").returncode == 0
    assert answers[0] == 11 and answers[-1] == 0, answers  # control: the fault, and enough space
