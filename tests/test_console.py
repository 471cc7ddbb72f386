"""create's client-facing plumbing on real bwrap: --console-socket (pty master over SCM_RIGHTS, the
slave as the workload's controlling terminal), --preserve-fds, the executable lookup that gives
"executable file not found" / "permission denied", and --log-format json records."""

from __future__ import annotations

import json
import os
import re
import select
import socket
import subprocess
import time
from datetime import datetime
from pathlib import Path

import pytest
from conftest import base_config, cgroup_dirs, run_shim, shim_cmd, wait_pid
from sandbox_shim.platforms.linux.console import receive_master


def _read_until(fd: int, marker: bytes, timeout: float = 20.0) -> bytes:
    out = b""
    deadline = time.monotonic() + timeout
    while marker not in out and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
    return out


def _terminal_bundle(make_bundle, script: str) -> Path:
    cfg = base_config(["sh", "-c", script])
    cfg["process"]["terminal"] = True
    return make_bundle(cfg)


def test_console_socket_gives_the_master_and_a_controlling_tty(
    make_bundle, state_root: Path, tmp_path: Path
) -> None:
    # fields 5-8 of the shell's /proc/PID/stat (proc(5)): pgrp session tty_nr tpgid
    b = _terminal_bundle(
        make_bundle,
        'tty; set -- $(cut -d" " -f5-8 /proc/$$/stat); '
        'echo "pgrp=$1 sid=$2 tty_nr=$3 tpgid=$4 self=$$"; echo END-MARK',
    )
    sock_path = str(tmp_path / "console.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as srv:
        srv.bind(sock_path)
        srv.listen(1)
        r = run_shim(
            state_root,
            "create",
            "--bundle",
            str(b),
            "--console-socket",
            sock_path,
            "--pid-file",
            str(tmp_path / "pid"),
            "con-t1",
        )
        assert r.returncode == 0, r.stderr
        srv.settimeout(5)
        master, name = receive_master(srv)  # sent before create returned
    try:
        assert os.isatty(master) and name.startswith("/dev/pts/")
        assert run_shim(state_root, "start", "con-t1").returncode == 0
        text = _read_until(master, b"END-MARK").decode(errors="replace")
    finally:
        os.close(master)
    assert "/dev/console" in text, text  # tty(1) names the slave (bwrap binds it at /dev/console)
    m = re.search(r"pgrp=(\d+) sid=(\d+) tty_nr=(\d+) tpgid=(-?\d+) self=(\d+)", text)
    assert m, text
    fields = dict(zip(("pgrp", "sid", "tty_nr", "tpgid", "self"), m.groups(), strict=True))
    assert int(fields["tty_nr"]) != 0, text  # a controlling terminal
    assert fields["sid"] == fields["self"] == fields["pgrp"], text  # the workload leads its session
    assert fields["tpgid"] == fields["pgrp"], text  # and is the terminal's foreground group
    assert wait_pid(int((tmp_path / "pid").read_text())) == 0
    assert run_shim(state_root, "delete", "con-t1").returncode == 0
    assert cgroup_dirs("con-t1") == []


def test_control_without_terminal_has_no_tty(make_bundle, state_root: Path, tmp_path: Path) -> None:
    b = make_bundle(args=["sh", "-c", 'echo tty_nr=$(cut -d" " -f7 /proc/self/stat)'])
    out = tmp_path / "out"
    with open(out, "w") as o:
        argv = shim_cmd(
            state_root, "create", "--bundle", str(b), "--pid-file", str(tmp_path / "pid"), "con-t0"
        )
        p = subprocess.run(argv, stdout=o, stderr=subprocess.DEVNULL, timeout=30)
    assert p.returncode == 0
    assert run_shim(state_root, "start", "con-t0").returncode == 0
    wait_pid(int((tmp_path / "pid").read_text()))
    assert out.read_text().strip() == "tty_nr=0"


def test_terminal_and_console_socket_must_come_together(
    make_bundle, state_root: Path, tmp_path: Path
) -> None:
    b = _terminal_bundle(make_bundle, "true")
    r = run_shim(state_root, "create", "--bundle", str(b), "con-t2")
    assert r.returncode != 0 and "console-socket" in r.stderr
    assert not (state_root / "con-t2").exists() and cgroup_dirs("con-t2") == []
    b2 = make_bundle(name="plain", args=["true"])
    r = run_shim(
        state_root, "create", "--bundle", str(b2), "--console-socket", str(tmp_path / "nope"), "con-t3"
    )
    assert r.returncode != 0 and "terminal" in r.stderr
    assert not (state_root / "con-t3").exists() and cgroup_dirs("con-t3") == []


def _run_with_fd3(state_root: Path, bundle: Path, sid: str, tmp_path: Path, *extra: str) -> tuple[str, int]:
    r, w = os.pipe()
    try:  # the pipe's write end becomes fd 3 of create only (pytest holds our own fd 3)
        argv = shim_cmd(
            state_root,
            "create",
            "--bundle",
            str(bundle),
            "--pid-file",
            str(tmp_path / f"{sid}.pid"),
            *extra,
            sid,
        )
        p = subprocess.run(
            argv,
            preexec_fn=lambda: os.dup2(w, 3),
            pass_fds=(3,),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=30,
        )
    finally:
        os.close(w)
    assert p.returncode == 0
    assert run_shim(state_root, "start", sid).returncode == 0
    status = wait_pid(int((tmp_path / f"{sid}.pid").read_text()))
    os.set_blocking(r, False)
    try:
        data = os.read(r, 100).decode()
    except BlockingIOError:
        data = ""
    os.close(r)
    return data, status


def test_preserve_fds_passes_fd_3(make_bundle, state_root: Path, tmp_path: Path) -> None:
    b = make_bundle(args=["sh", "-c", "echo PRESERVED-MARK >&3"])
    data, status = _run_with_fd3(state_root, b, "con-p1", tmp_path, "--preserve-fds", "1")
    assert status == 0 and data == "PRESERVED-MARK\n"
    # control: the same fd without --preserve-fds does not reach the workload
    data, status = _run_with_fd3(state_root, b, "con-p2", tmp_path)
    assert status != 0 and data == ""


def test_preserve_fds_of_closed_fds_is_one_check_with_one_status(make_bundle, state_root: Path) -> None:
    """--preserve-fds is checked once, by the mechanism (the CLI parses the number only): a count
    reaching a closed fd is the caller's usage error (2) from the CLI and the library alike."""
    from sandbox_shim.errors import InvalidArgument
    from sandbox_shim.platforms.linux.launch import preserved_fds

    assert preserved_fds(0) == []  # control
    with pytest.raises(InvalidArgument) as ei:
        preserved_fds(900)
    assert ei.value.exit_status == 2 and "is not open" in str(ei.value)
    b = make_bundle(name="pfd", args=["true"])
    r = run_shim(state_root, "create", "--bundle", str(b), "--preserve-fds", "900", "con-pfd")
    assert r.returncode == 2, r.stderr
    assert "is not open" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (state_root / "con-pfd").exists()
    assert (
        run_shim(state_root, "create", "--bundle", str(b), "--preserve-fds", "x", "con-pfd").returncode == 2
    )


def test_missing_executable_fails_create_with_the_wording(make_bundle, state_root: Path) -> None:
    ok = make_bundle(name="ok", args=["true"])
    assert run_shim(state_root, "create", "--bundle", str(ok), "con-x0").returncode == 0  # control
    for sid, args, status, words in (
        ("con-x1", ["no-such-program"], 127, "executable file not found"),
        ("con-x2", ["/bin/no-such"], 127, "no such file or directory"),
        ("con-x3", ["/etc/passwd"], 126, "permission denied"),
        ("con-x4", ["/etc"], 126, "permission denied"),
    ):
        b = make_bundle(name=sid, args=args)
        r = run_shim(state_root, "create", "--bundle", str(b), sid)
        assert r.returncode == status, r.stderr
        assert words in r.stderr, r.stderr
        assert not (state_root / sid).exists() and cgroup_dirs(sid) == []


def test_program_on_a_bind_mount_is_found(make_bundle, state_root: Path, tmp_path: Path) -> None:
    tool = tmp_path / "tools"
    tool.mkdir()
    (tool / "hello").write_text("#!/bin/sh\necho hi\n")
    (tool / "hello").chmod(0o755)
    cfg = base_config(["hello"])
    cfg["mounts"].append(
        {"destination": "/opt/tools", "type": "bind", "source": str(tool), "options": ["rbind", "ro"]}
    )
    cfg["process"]["env"] = ["PATH=/opt/tools:/bin"]
    b = make_bundle(cfg)
    r = run_shim(state_root, "create", "--bundle", str(b), "con-m1")
    assert r.returncode == 0, r.stderr


def test_json_log_is_one_record_with_rfc3339_time(make_bundle, state_root: Path, tmp_path: Path) -> None:
    b = make_bundle(args=["no-such-program"])
    log = tmp_path / "oci-log"
    r = run_shim(
        state_root, "--log", str(log), "--log-format", "json", "create", "--bundle", str(b), "con-j1"
    )
    assert r.returncode == 127
    rec = json.loads(log.read_text())  # podman parses the whole file as one object
    assert rec["level"] == "error" and "executable file not found" in rec["msg"]
    datetime.fromisoformat(rec["time"].replace("Z", "+00:00"))
    # containerd: the last "level":"error" line of an appended log
    r = run_shim(state_root, "--log", str(log), "--log-format", "json", "start", "con-j1")
    last = [json.loads(x) for x in log.read_text().splitlines() if x.strip()][-1]
    assert last["level"] == "error" and "does not exist" in last["msg"]


def test_state_with_empty_environment_writes_nothing_to_stderr(make_bundle, state_root: Path) -> None:
    b = make_bundle(args=["true"])
    assert run_shim(state_root, "create", "--bundle", str(b), "con-s1").returncode == 0
    r = run_shim(state_root, "state", "con-s1", env={})
    assert r.returncode == 0 and r.stderr == "" and json.loads(r.stdout)["status"] == "created"
