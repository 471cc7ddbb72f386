"""exec into a running sandbox, on the real kernel: what the exec'd process sees and which fact comes back.

Each test runs against a busybox sandbox whose own process sleeps; the exec'd process must see the
sandbox's root (a marker only in its rootfs), not the host's; count in the sandbox's cgroup; run under
its seccomp filter with no capabilities.  "Never ran" (``CouldNotRun``) is told from "ran and exited
127" (``Completion``).  Every test ends with nothing of the sandbox left on the host.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import run_shim, wait_pid
from sandbox_shim import api
from sandbox_shim.control import facts, ps
from sandbox_shim.errors import CouldNotRun, InvalidState, LimitExceeded
from sandbox_shim.execution import execute, spawn
from sandbox_shim.mechanism import Sandbox

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.geteuid() != 0, reason="needs Linux, root, bwrap and cgroups"
)

ALLOC_64M = ["awk", 'BEGIN{s="x"; while (length(s) < 64*1024*1024) s = s s; print length(s)}']
#: the CLI, through its entry point (global flags and error boundary included)
CLI = "import sys; from sandbox_shim.cli import main; main(sys.argv[1:])"


def cli(root: Path, *args: str, **kw: Any) -> Any:
    """Run ``sandbox-shim --root ROOT ARGS...`` (text output captured)."""
    kw.setdefault("timeout", 60)
    if "stdout" not in kw:
        kw["capture_output"] = True
    return subprocess.run([sys.executable, "-c", CLI, "--root", str(root), *args], text=True, **kw)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


class Running:
    """A started sandbox: ``mech``, ``id``, ``bundle``, ``marker`` (a file only in its rootfs)."""

    def __init__(self, mech: Any, sid: str, bundle: Path, marker: str) -> None:
        self.mech, self.id, self.bundle, self.marker = mech, sid, bundle, marker

    def cgroup(self) -> Any:
        store = api.store_of(self.mech)
        return self.mech.cgroup(api.sandbox_of(store.read(self.id), store))


@pytest.fixture
def running(make_bundle: Any, state_root: Path) -> Iterator[Running]:
    bundle = make_bundle(args=["sleep", "600"])
    marker = f"marker-{uuid.uuid4().hex[:8]}"
    (bundle / "rootfs" / marker).write_text("inside\n")
    noexec = bundle / "rootfs" / "noexec.sh"
    noexec.write_text("#!/bin/sh\necho ran\n")
    noexec.chmod(0o644)
    mech = api.default_mechanism(str(state_root))
    sid = f"ex-{uuid.uuid4().hex[:8]}"
    api.provision(mech, Sandbox(sid, str(bundle)))
    api.start(mech, sid)
    r = Running(mech, sid, bundle, marker)
    dirs = r.cgroup().dirs()
    pids: list[int] = []
    try:
        yield r
        pids = r.cgroup().pids()
    finally:
        api.destroy(mech, sid, force=True)
    # nothing left: the cgroup directories are gone and every process that was in them is dead
    assert not [d for d in dirs if os.path.isdir(d)]
    deadline = time.monotonic() + 5
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not [
        (p, Path(f"/proc/{p}/cmdline").read_bytes(), Path(f"/proc/{p}/status").read_text())
        for p in pids
        if alive(p)
    ]


def test_exec_sees_the_sandbox_root_not_the_host(running: Running, tmp_path: Path) -> None:
    host_only = tmp_path / f"host-{uuid.uuid4().hex[:8]}"
    host_only.write_text("host")
    # control: the host sees its file and not the sandbox's marker at /
    assert host_only.exists() and not Path("/" + running.marker).exists()
    probe = f"cat /{running.marker}; test -e {host_only}; echo $?"
    done = execute(running.mech, running.id, ("sh", ["-c", probe]))
    assert done.exit_status == 0 and done.stdout.decode().split() == ["inside", "1"]
    r = cli(running.mech.root, "exec", running.id, "cat", f"/{running.marker}")
    assert r.returncode == 0 and r.stdout == "inside\n"


def test_exec_runs_confined(running: Running) -> None:
    done = execute(running.mech, running.id, ("cat", ["/proc/self/status"]))
    status = dict(line.split(":", 1) for line in done.stdout.decode().splitlines() if ":" in line)
    assert status["Seccomp"].strip() == "2"
    assert [int(status[k], 16) for k in ("CapEff", "CapPrm", "CapBnd", "CapAmb")] == [0, 0, 0, 0]
    assert status["NoNewPrivs"].strip() == "1"
    # in the sandbox's pid namespace: pid 1 is the workload itself (no bwrap init); the host is invisible
    probe = "tr '\\0' ' ' < /proc/1/cmdline; echo; ls /proc | wc -l"
    done = execute(running.mech, running.id, ("sh", ["-c", probe]))
    first, count = done.stdout.decode().splitlines()
    assert first.startswith("sleep ") and int(count) < 60
    # control: the same file read by the host shows no filter
    assert open("/proc/self/status").read().count("Seccomp:\t0") == 1


def test_exec_process_is_in_the_sandbox_cgroup(running: Running, tmp_path: Path) -> None:
    s = spawn(running.mech, running.id, ["sleep", "30"], detach=True)
    s.helper.wait()
    try:
        assert s.pid in ps(running.mech, running.id)
        assert s.pid in running.cgroup().pids()
    finally:
        os.kill(s.pid, 9)
        # the program is ours (we are a subreaper) and carries the status, as runc exec -d's does
        assert wait_pid(s.pid) == 137
    pid_file = tmp_path / "exec.pid"
    # a detached program keeps the stdio it was given: give it none we wait on
    r = cli(
        running.mech.root,
        "exec",
        "-d",
        "--pid-file",
        str(pid_file),
        running.id,
        "sleep",
        "30",
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    assert r.returncode == 0
    text = pid_file.read_text()
    assert text.isdigit()
    r = cli(running.mech.root, "ps", "--format", "json", running.id)
    assert int(text) in json.loads(r.stdout)
    os.kill(int(text), 9)
    assert wait_pid(int(text)) == 137


def test_exec_memory_counts_against_the_sandbox(running: Running) -> None:
    cg = running.cgroup()
    before = facts(cg).memory_peak or 0
    assert before < 32 << 20  # control: an idle busybox sandbox is small
    done = execute(running.mech, running.id, (ALLOC_64M[0], ALLOC_64M[1:]))
    assert done.exit_status == 0 and done.stdout == b"67108864\n"
    assert (facts(cg).memory_peak or 0) >= 64 << 20


def test_could_not_run_is_told_from_a_status(running: Running) -> None:
    m, sid = running.mech, running.id
    with pytest.raises(CouldNotRun) as e:
        execute(m, sid, ("/nonexistent", []))
    assert e.value.reason == "not_found" and e.value.exit_status == 127
    with pytest.raises(CouldNotRun) as e:
        execute(m, sid, ("no-such-program", []))
    assert e.value.reason == "not_found"
    with pytest.raises(CouldNotRun) as e:
        execute(m, sid, ("/noexec.sh", []))
    assert e.value.reason == "permission_denied" and e.value.exit_status == 126
    # control: the same file run through sh did run; and a program that ran may exit 127
    assert execute(m, sid, ("sh", ["/noexec.sh"])).stdout == b"ran\n"
    done = execute(m, sid, ("sh", ["-c", "exit 127"]))
    assert done.exit_status == 127 and done.signal is None
    r = cli(m.root, "exec", sid, "/nonexistent")
    assert r.returncode == 127 and "executable file not found" in r.stderr
    r = cli(m.root, "exec", sid, "/noexec.sh")
    assert r.returncode == 126 and "permission denied" in r.stderr
    r = cli(m.root, "exec", sid, "sh", "-c", "echo out; exit 127")
    assert r.returncode == 127 and r.stdout == "out\n" and "not found" not in r.stderr


def test_exec_env_cwd_and_process_file(running: Running, tmp_path: Path) -> None:
    done = execute(running.mech, running.id, ("sh", ["-c", "echo $FOO; pwd"]), env={"FOO": "bar"}, cwd="/tmp")
    assert done.stdout == b"bar\n/tmp\n"
    proc = tmp_path / "process.json"
    proc.write_text('{"args": ["sh", "-c", "echo $A; pwd"], "env": ["A=b"], "cwd": "/etc"}')
    r = cli(running.mech.root, "exec", "--process", str(proc), running.id)
    assert r.returncode == 0 and r.stdout == "b\n/etc\n"
    r = cli(
        running.mech.root, "exec", "-e", "X=1", "--cwd", "/bin", running.id, "--", "sh", "-c", "echo $X; pwd"
    )
    assert r.stdout == "1\n/bin\n"
    r = cli(running.mech.root, "exec", "-t", running.id, "sh")
    assert r.returncode == 2 and "--console-socket" in r.stderr


def test_exec_timeout_is_a_wall_clock_limit(running: Running) -> None:
    t0 = time.monotonic()
    with pytest.raises(LimitExceeded) as e:
        execute(running.mech, running.id, ("sh", ["-c", "echo started; sleep 60.25"]), timeout=1)
    assert e.value.kind_of_limit == "wall_clock" and time.monotonic() - t0 < 10
    assert e.value.completion.stdout == b"started\n"
    assert not [p for p in running.cgroup().pids() if b"60.25" in open(f"/proc/{p}/cmdline", "rb").read()]


def test_exec_needs_a_running_sandbox(make_bundle: Any, state_root: Path) -> None:
    mech = api.default_mechanism(str(state_root))
    api.provision(mech, Sandbox("ex-created", str(make_bundle(args=["true"]))))
    try:
        with pytest.raises(InvalidState):
            execute(mech, "ex-created", ("true", []))
        r = cli(state_root, "exec", "ex-created", "true")
        assert r.returncode == 8 and "running" in r.stderr
    finally:
        api.destroy(mech, "ex-created", force=True)
    r = run_shim(state_root, "state", "ex-created")
    assert r.returncode != 0


# -- exec --process: user, capabilities, terminal; exec --detach's pid contract -------------------------


def test_detached_exec_pid_is_ours_and_carries_the_exit_status(running: Running, tmp_path: Path) -> None:
    """runc exec -d: the pid-file process re-parents to the caller's subreaper, which reaps its status."""
    pid_file = tmp_path / "run" / "exec.pid"
    pid_file.parent.mkdir()
    r = cli(
        running.mech.root,
        "exec",
        "-d",
        "--pid-file",
        str(pid_file),
        running.id,
        "sh",
        "-c",
        "sleep 0.5; exit 7",
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    assert r.returncode == 0
    text = pid_file.read_text()
    assert text.isdigit() and os.listdir(pid_file.parent) == ["exec.pid"]  # digits only, no temp left
    pid = int(text)
    ppid = int(
        next(
            x.split()[1]
            for x in Path(f"/proc/{pid}/status").read_text().splitlines()
            if x.startswith("PPid:")
        )
    )
    assert ppid == os.getpid()  # not the sandbox's init: the caller (a subreaper) has it
    assert wait_pid(pid) == 7
    # a signal death reads as one too
    r = cli(
        running.mech.root,
        "exec",
        "-d",
        "--pid-file",
        str(pid_file),
        running.id,
        "sleep",
        "30",
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    assert r.returncode == 0
    os.kill(int(pid_file.read_text()), 15)
    assert wait_pid(int(pid_file.read_text())) == 143


def _process_file(tmp_path: Path, doc: dict[str, Any]) -> str:
    path = tmp_path / f"process-{uuid.uuid4().hex[:6]}.json"
    path.write_text(json.dumps(doc))
    return str(path)


def test_exec_process_user_ids_and_umask(running: Running, tmp_path: Path) -> None:
    probe = ["sh", "-c", "id -u; id -g; id -G; umask; echo $A; echo PATH=$PATH"]
    # control: without process.user the program runs as the sandbox's process (root, no user namespace)
    r = cli(
        running.mech.root,
        "exec",
        "--process",
        _process_file(tmp_path, {"args": probe, "env": ["A=1"]}),
        running.id,
    )
    assert r.returncode == 0 and r.stdout.splitlines()[:3] == ["0", "0", "0"], r.stderr
    doc = {
        "args": probe,
        "env": ["A=2", "PATH=/bin"],
        "cwd": "/tmp",
        "terminal": False,
        "noNewPrivileges": False,
        "apparmorProfile": "",
        "user": {"uid": 1000, "gid": 1001, "additionalGids": [5, 6], "umask": 0o077},
    }
    r = cli(running.mech.root, "exec", "--process", _process_file(tmp_path, doc), running.id)
    assert r.returncode == 0, r.stderr
    # process.env is the whole environment (as runc's exec -p): PATH is the one given
    assert r.stdout.splitlines() == ["1000", "1001", "1001 5 6", "0077", "2", "PATH=/bin"]
    # noNewPrivileges false is not honoured: always on; the sandbox's seccomp filter too
    doc = {**doc, "args": ["grep", "-E", "^(NoNewPrivs|Seccomp):", "/proc/self/status"]}
    r = cli(running.mech.root, "exec", "--process", _process_file(tmp_path, doc), running.id)
    words = r.stdout.split()
    assert dict(zip(words[::2], words[1::2], strict=True)) == {"Seccomp:": "2", "NoNewPrivs:": "1"}, r.stdout


def test_exec_process_refusals_echo_no_secret(running: Running, tmp_path: Path) -> None:
    ok = {"args": ["echo", "RAN-MARKER"], "env": ["PATH=/bin"]}
    r = cli(running.mech.root, "exec", "--process", _process_file(tmp_path, ok), running.id)
    assert r.returncode == 0 and r.stdout == "RAN-MARKER\n"  # control
    for bad, words in (
        ({"env": ["PATH=/bin", "API_TOKEN=s3cr3t-value"]}, "API_TOKEN"),
        ({"apparmorProfile": "unconfined"}, "apparmorProfile"),
        ({"user": {"uid": -1, "gid": 0}}, "uid"),
    ):
        r = cli(running.mech.root, "exec", "--process", _process_file(tmp_path, {**ok, **bad}), running.id)
        assert r.returncode == 3 and words in r.stderr and "RAN-MARKER" not in r.stdout, r.stderr
        assert "s3cr3t" not in r.stderr


@pytest.fixture
def capable(make_bundle: Any, state_root: Path) -> Iterator[Running]:
    """A running sandbox given CAP_CHOWN and CAP_KILL (bit 0 and bit 5)."""
    from conftest import base_config

    cfg = base_config(["sleep", "600"])
    caps = ["CAP_CHOWN", "CAP_KILL"]
    cfg["process"]["capabilities"] = {k: caps for k in ("bounding", "effective", "permitted", "ambient")}
    mech = api.default_mechanism(str(state_root))
    sid = f"cap-{uuid.uuid4().hex[:8]}"
    api.provision(mech, Sandbox(sid, str(make_bundle(cfg))))
    try:
        api.start(mech, sid)
        yield Running(mech, sid, Path(), "")
    finally:
        api.destroy(mech, sid, force=True)


def test_exec_capabilities_never_exceed_the_sandbox(capable: Running, tmp_path: Path) -> None:
    def cap_eff(doc: dict[str, Any]) -> Any:
        r = cli(capable.mech.root, "exec", "--process", _process_file(tmp_path, doc), capable.id)
        eff = [int(x.split()[1], 16) for x in r.stdout.splitlines() if x.startswith("CapEff:")]
        return r, eff[0] if eff else None

    probe = {"args": ["sh", "-c", "grep -E '^Cap(Eff|Bnd):' /proc/self/status; echo CAP-MARKER"]}
    r, eff = cap_eff(probe)  # absent: the sandbox's own set
    assert eff == 0x21, r.stderr
    both = ["CAP_CHOWN", "CAP_KILL"]
    r, eff = cap_eff({**probe, "capabilities": {k: both for k in ("bounding", "effective", "permitted")}})
    assert eff == 0x21, r.stderr  # control: asking exactly the sandbox's set is allowed
    r, eff = cap_eff({**probe, "capabilities": {"bounding": ["CAP_CHOWN"], "effective": ["CAP_CHOWN"]}})
    assert eff == 0x1, r.stderr  # narrower
    more = [*both, "CAP_SYS_ADMIN"]
    r, eff = cap_eff({**probe, "capabilities": {k: more for k in ("bounding", "effective", "permitted")}})
    assert r.returncode == 3 and "CAP_SYS_ADMIN" in r.stderr and "CAP-MARKER" not in r.stdout, r.stderr


def test_exec_user_must_be_mapped_in_a_user_namespace() -> None:
    from sandbox_shim.errors import BundleInvalid
    from sandbox_shim.process_spec import resolve_credentials

    own = {"uid": 1000, "gid": 1000, "capabilities": [], "userns": True}
    # control: its own ids pass; then ids the namespace does not map are refused
    assert resolve_credentials(own, {"uid": 1000, "gid": 1000}, None)["uid"] == 1000
    with pytest.raises(BundleInvalid, match="uid 0 is not mapped"):
        resolve_credentials(own, {"uid": 0, "gid": 1000}, None)
    # without a user namespace any ids may be taken (the runtime is root in the host's namespace)
    assert resolve_credentials({**own, "userns": False}, {"uid": 0, "gid": 0}, None)["uid"] == 0


def _read_master(fd: int, timeout: float = 10) -> str:
    import select

    out = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # EIO: every slave fd is closed
            break
        if not chunk:
            break
        out += chunk
    os.close(fd)
    return out.decode(errors="replace").replace("\r", "")


@pytest.mark.parametrize("how", ["--tty", "process.terminal"])
def test_exec_with_a_terminal(running: Running, tmp_path: Path, how: str) -> None:
    import socket

    from sandbox_shim.platforms.linux.console import receive_master

    probe = ["sh", "-c", 'tty; cut -d" " -f7 /proc/$$/stat; echo TTY-DONE']
    # control: without a terminal the same probe has none
    r = cli(running.mech.root, "exec", running.id, *probe, stdin=subprocess.DEVNULL)
    assert r.stdout.splitlines()[0] == "not a tty" and r.stdout.splitlines()[1] == "0"
    sock_path = str(tmp_path / "console.sock")
    pid_file = tmp_path / "tty.pid"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as srv:
        srv.bind(sock_path)
        srv.listen(1)
        if how == "--tty":
            args = ["--tty", running.id, *probe]
        else:
            args = ["--process", _process_file(tmp_path, {"args": probe, "terminal": True}), running.id]
        r = cli(
            running.mech.root,
            "exec",
            "-d",
            "--pid-file",
            str(pid_file),
            "--console-socket",
            sock_path,
            *args,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        assert r.returncode == 0, r.stderr
        master, name = receive_master(srv)  # sent before exec returned
    assert name.startswith("/dev/pts/")
    lines = _read_master(master).split()
    assert lines[0] == name and int(lines[1]) != 0 and lines[2] == "TTY-DONE", lines
    assert wait_pid(int(pid_file.read_text())) == 0


def test_exec_console_socket_needs_a_terminal(running: Running, tmp_path: Path) -> None:
    r = cli(running.mech.root, "exec", "--console-socket", str(tmp_path / "none.sock"), running.id, "true")
    assert r.returncode == 2 and "no terminal" in r.stderr
    r = cli(
        running.mech.root,
        "exec",
        "-d",
        "--tty",
        "--console-socket",
        str(tmp_path / "none.sock"),
        running.id,
        "echo",
        "NO-MARKER",
    )
    assert r.returncode != 0 and "console-socket" in r.stderr and "NO-MARKER" not in r.stdout


def test_the_forked_helper_keeps_none_of_the_callers_fds_locks_or_handlers(
    running: Running, tmp_path: Path
) -> None:
    """The joining helper is forked from the caller (no interpreter per exec): it must not hold the
    caller's files (an inheritable one included) nor the sandbox's state lock while the program runs,
    and a Python signal handler of the caller must never run in it."""
    import fcntl
    import signal

    leak = tmp_path / "caller-file"
    fd = os.open(leak, os.O_WRONLY | os.O_CREAT)
    os.set_inheritable(fd, True)
    ran_in: list[int] = []
    old = signal.signal(signal.SIGWINCH, lambda *_: ran_in.append(os.getpid()) or leak.write_text("handler"))
    try:
        s = spawn(running.mech, running.id, ["sleep", "3"])
        try:
            helper_fds = {
                os.readlink(f"/proc/{s.helper.pid}/fd/{n}") for n in os.listdir(f"/proc/{s.helper.pid}/fd")
            }
            program_fds = {n for n in os.listdir(f"/proc/{s.pid}/fd")}
            assert str(leak) not in helper_fds and program_fds == {"0", "1", "2"}
            # the state lock is free while the program runs: another verb is not held up
            lock = os.open(os.path.join(running.mech.root, running.id), os.O_RDONLY | os.O_DIRECTORY)
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            finally:
                os.close(lock)
            os.kill(s.helper.pid, signal.SIGWINCH)  # default action in the helper: ignored
            time.sleep(0.2)
            assert s.helper.poll() is None
        finally:
            s.kill()
            s.helper.wait()
        assert ran_in == [] and leak.read_text() == ""
        os.kill(os.getpid(), signal.SIGWINCH)  # the control: the caller's own handler runs here
        assert ran_in == [os.getpid()]
    finally:
        signal.signal(signal.SIGWINCH, old)
        os.close(fd)


def test_exec_with_the_callers_stdio_closed(running: Running) -> None:
    """A caller that runs with fd 0 closed gets fd 0 for the helper's status pipe: it is moved above
    2 in the helper before the program's stdio is set there."""
    saved = os.dup(0)
    os.close(0)
    try:
        done = execute(running.mech, running.id, ("sh", ["-c", "echo out; echo err >&2"]))
    finally:
        os.dup2(saved, 0)
        os.close(saved)
    assert (done.exit_status, done.stdout, done.stderr) == (0, b"out\n", b"err\n")


def test_the_program_starts_with_no_signal_blocked(running: Running) -> None:
    """A calling thread's blocked signals are not the program's: it starts with an empty mask (control:
    the caller's thread has them blocked while it calls)."""
    import signal

    blocked = {signal.SIGUSR1, signal.SIGTERM}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
    try:
        assert blocked <= signal.pthread_sigmask(signal.SIG_BLOCK, [])  # the control
        done = execute(running.mech, running.id, ("grep", ["SigBlk", "/proc/self/status"]))
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
    assert done.exit_status == 0, done.stderr
    assert int(done.stdout.split()[1], 16) == 0, done.stdout


def test_cli_exec_with_closed_stdio_gives_the_program_dev_null(running: Running) -> None:
    """``exec`` started with fds 0 and 1 closed: the program's are /dev/null (what the verb opened in
    their place), never closed fds its first open(2) would take (control: started with them open,
    the program's fd 1 is the caller's pipe)."""
    # the shell's own fds, read from a subshell (busybox runs applets such as ls in-process with
    # their redirections applied, so /proc/$$ would show those instead)
    script = 'a=$(readlink /proc/$$/fd/0); b=$(readlink /proc/$$/fd/1); echo "$a $b" > /storage/fds'
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    listing = running.bundle / "storage" / "fds"
    for closing, want in (("", 0), ("os.close(0); os.close(1); ", 2)):
        code = f"import os; {closing}{CLI}"
        argv = ["--root", str(running.mech.root), "exec", running.id, "sh", "-c", script]
        p = subprocess.run(
            [sys.executable, "-c", code, *argv], capture_output=True, text=True, env=env, timeout=60
        )
        assert p.returncode == 0, p.stderr
        text = listing.read_text()
        assert "No such file" not in text and text.count("/dev/null") >= want, text
        if not closing:  # the control: fd 1 was the caller's stdout pipe
            assert "pipe:" in text, text


def test_a_callers_death_ends_its_program(running: Running) -> None:
    """kill -9 of a process inside ``execute`` (a deadline of its own pending): the helper ends the
    program's group, so nothing of the exec outlives the caller (control: while the caller lives, the
    program runs)."""
    token = str(40000 + os.getpid() % 10000)
    code = (
        "import sys; from sandbox_shim import api; from sandbox_shim.execution import execute; "
        f"execute(api.default_mechanism({str(running.mech.root)!r}), {running.id!r}, ('sleep', [{token!r}]), "
        "timeout=600)"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    caller = subprocess.Popen([sys.executable, "-c", code], env=env)

    def programs() -> list[int]:
        found = []
        for pid in (p for p in os.listdir("/proc") if p.isdigit()):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    argv = fh.read().split(b"\0")
            except OSError:
                continue
            if argv[:2] == [b"sleep", token.encode()]:
                found.append(int(pid))
        return found

    try:
        deadline = time.monotonic() + 20
        while not programs() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert programs(), "the program never ran"  # the control
        caller.kill()
        caller.wait(10)
        deadline = time.monotonic() + 10
        while programs() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert programs() == []
    finally:
        if caller.poll() is None:
            caller.kill()
            caller.wait()
