"""The CLI's one error boundary and one definition of the global flags; a full or read-only host."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import base_config, run_shim, shim_cmd

linux_root = pytest.mark.skipif(not sys.platform.startswith("linux") or os.geteuid() != 0,
                                reason="needs Linux, root, bwrap and cgroups")


@pytest.mark.parametrize("verb", [["list"], ["state", "nope"], ["capabilities", "--format", "json"]])
def test_global_flags_are_one_definition(tmp_path: Path, verb: list[str]) -> None:
    want = run_shim(tmp_path / "s", *verb).returncode
    for flags in (["--rootless", "true"], ["--rootless=auto"], ["--systemd-cgroup"], ["--criu", "x"],
                  ["--log-format", "json"], ["--debug"]):
        r = run_shim(tmp_path / "s", *flags, *verb)
        assert r.returncode == want, (flags, verb, r.stderr)
    bad = run_shim(tmp_path / "s", "--log-format", "yaml", *verb)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


def test_usage_errors_are_one_line_with_status_2(tmp_path: Path) -> None:
    for args in (["list", "--bogus"], ["--bogus"], ["create"], ["kill", "x", "NOSUCHSIG"],
                 ["no-such-command"]):
        r = run_shim(tmp_path / "s", *args)
        assert r.returncode == 2, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, (args, r.stderr)
        j = run_shim(tmp_path / "s", "--log-format", "json", *args)
        assert j.returncode == 2 and json.loads(j.stderr)["error"] == "usage", (args, j.stderr)


def test_an_unexpected_error_is_status_70_and_a_traceback_only_with_debug(tmp_path: Path) -> None:
    root = tmp_path / "afile"
    root.write_text("not a directory")
    r = run_shim(root, "list")
    assert r.returncode == 70, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "--debug" in r.stderr and "Traceback" not in r.stderr
    d = run_shim(root, "--debug", "list")
    assert d.returncode == 70 and "Traceback" in d.stderr
    j = subprocess.run([*shim_cmd(root, "list")[:-1], "--log-format", "json", "list"], capture_output=True,
                       text=True, timeout=60)
    assert j.returncode == 70 and json.loads(j.stderr)["error"] == "internal"


@contextlib.contextmanager
def _tmpfs(where: Path, size: str) -> Iterator[Path]:
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def _fill(d: Path) -> None:
    with open(d / "filler", "wb") as fh, contextlib.suppress(OSError):
        while True:
            fh.write(b"\0" * 65536)
            fh.flush()


@linux_root
def test_a_full_state_root_keeps_the_previous_state(make_bundle: Any, tmp_path: Path) -> None:
    bundle = make_bundle(base_config(["sleep", "600"]))
    with _tmpfs(tmp_path / "root", "2m") as root:
        made = run_shim(root, "create", "--bundle", str(bundle), "full", stdin=subprocess.DEVNULL)
        assert made.returncode == 0, made.stderr
        before = (root / "full" / "state.json").read_text()
        _fill(root)
        r = run_shim(root, "start", "full")
        assert r.returncode == 11 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert "previous state is kept" in r.stderr
        assert (root / "full" / "state.json").read_text() == before  # never truncated in place
        s = run_shim(root, "state", "full")
        assert s.returncode == 0 and json.loads(s.stdout)["id"] == "full"  # still found, still readable
        c = run_shim(root, "create", "--bundle", str(bundle), "other", stdin=subprocess.DEVNULL)
        assert c.returncode == 11 and "Traceback" not in c.stderr, c.stderr
        assert not (root / "other").exists()
        (root / "filler").unlink()
        assert run_shim(root, "delete", "--force", "full").returncode == 0
        assert run_shim(root, "delete", "--force", "other").returncode == 0
        assert sorted(p.name for p in root.iterdir() if not p.name.startswith(".")) == []


def _read_only(paths: str, argv: list[str]) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` in a private mount namespace where the mounts listed by the shell expression
    ``paths`` are read-only (bind-remounted): the host's own stay writable."""
    script = (f"set -e; for m in {paths}; do mount --bind \"$m\" \"$m\"; "
              "mount -o remount,bind,ro \"$m\" \"$m\"; done; exec \"$@\"")
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", *argv],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


@linux_root
def test_a_read_only_state_root_gives_one_line(make_bundle: Any, state_root: Path) -> None:
    if shutil.which("unshare") is None:
        pytest.skip("unshare(1) is not installed (util-linux)")
    bundle = make_bundle(base_config(["sleep", "600"]))
    made = run_shim(state_root, "create", "--bundle", str(bundle), "ro", stdin=subprocess.DEVNULL)
    assert made.returncode == 0, made.stderr
    before = (state_root / "ro" / "state.json").read_text()
    for args in (["start", "ro"], ["create", "--bundle", str(bundle), "ro2"]):
        r = _read_only(str(state_root), shim_cmd(state_root, *args))
        assert r.returncode == 11, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, (args, r.stderr)
    assert (state_root / "ro" / "state.json").read_text() == before and not (state_root / "ro2").exists()
    assert json.loads(run_shim(state_root, "state", "ro").stdout)["status"] == "created"
    assert run_shim(state_root, "delete", "--force", "ro").returncode == 0


@linux_root
def test_delete_force_with_read_only_cgroups_kills_the_sandbox(make_bundle: Any, state_root: Path) -> None:
    if shutil.which("unshare") is None:
        pytest.skip("unshare(1) is not installed (util-linux)")
    bundle = make_bundle(base_config(["sleep", "600"]))
    pid_file = state_root.parent / "ro.pid"
    assert run_shim(state_root, "create", "--bundle", str(bundle), "--pid-file", str(pid_file), "rocg",
                    stdin=subprocess.DEVNULL).returncode == 0
    assert run_shim(state_root, "start", "rocg").returncode == 0
    st = json.loads(run_shim(state_root, "state", "rocg").stdout)
    assert st["status"] == "running"  # the control
    # read-only cgroup hierarchies in a private mount namespace only: the host's stay writable
    mounts = "$(awk '$3 ~ /^cgroup/ {print $2}' /proc/mounts)"
    r = _read_only(mounts, shim_cmd(state_root, "delete", "--force", "rocg"))
    assert r.returncode == 9, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "delete --force" in r.stderr
    for pid in (st["pid"], int(pid_file.read_text())):
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # a monitor re-parented to this (subreaper) test process
        gone = not os.path.exists(f"/proc/{pid}")
        assert gone or Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] == "Z"
    again = run_shim(state_root, "delete", "--force", "rocg")  # writable again: finishes the job
    assert again.returncode == 0, again.stderr
    assert not (state_root / ".cgroups" / "rocg").exists()
