"""containerd 1.6.20 (``ctr`` + containerd-shim-runc-v2) driving sandbox-shim as its runc binary.

A private containerd (temp config, root, state and socket; CRI plugin disabled) runs for the module
and is stopped after.  ``ctr run --runc-binary sandbox-shim`` is the same path a Kubernetes
RuntimeClass takes (``runtime_type = "io.containerd.runc.v2"`` with ``options.BinaryName``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import SHIM, leftovers

NS = "sandbox-shim-e2e"


class Ctr:
    def __init__(self, base: Path, image: str) -> None:
        self.sock = str(base / "containerd.sock")
        self.image = image

    def __call__(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["ctr", "--address", self.sock, "--namespace", NS, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def run(self, cid: str, *args: str, detach: bool = False) -> subprocess.CompletedProcess[str]:
        # containerd's default spec, unmodified (CAP_MKNOD and CAP_NET_RAW included: contained, see
        # hardening/capabilities.py)
        return self("run", *(["-d"] if detach else ["--rm"]), "--runc-binary", SHIM, self.image, cid, *args)


@pytest.fixture(scope="module")
def ctr(
    orchestrators: None, oci_archive: tuple[Path, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Ctr]:
    base = tmp_path_factory.mktemp("containerd")
    (base / "config.toml").write_text(f'''version = 2
root = "{base}/root"
state = "{base}/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "{base}/containerd.sock"
[ttrpc]
  address = "{base}/containerd.sock.ttrpc"
''')
    log = open(base / "containerd.log", "w")
    daemon = subprocess.Popen(["containerd", "--config", str(base / "config.toml")], stdout=log, stderr=log)
    c = Ctr(base, oci_archive[1])
    deadline = time.monotonic() + 20
    while c("version").returncode != 0:
        assert daemon.poll() is None and time.monotonic() < deadline, (base / "containerd.log").read_text()
        time.sleep(0.1)
    r = c("images", "import", str(oci_archive[0]))
    assert r.returncode == 0, r.stderr
    yield c
    for cid in c("containers", "ls", "-q").stdout.split():
        c("tasks", "kill", "-s", "SIGKILL", cid)
        c("tasks", "delete", "-f", cid)
        c("containers", "delete", cid)
    daemon.send_signal(signal.SIGTERM)
    try:
        daemon.wait(timeout=20)
    except subprocess.TimeoutExpired:
        daemon.kill()
        daemon.wait()
    log.close()
    subprocess.run(["umount", "-R", str(base / "root")], capture_output=True)
    subprocess.run(["umount", "-R", str(base / "state")], capture_output=True)


def _clean(ctr: Ctr, cid: str, pids: tuple[int, ...] = ()) -> None:
    time.sleep(0.2)
    assert cid not in ctr("containers", "ls", "-q").stdout.split()
    left = leftovers(cid, [f"/sys/fs/cgroup/*/{NS}/{cid}", f"/run/containerd/runc/{NS}/{cid}"], pids)
    left = [x for x in left if not x.startswith("state: /run/sandbox-shim")]
    assert left == [], left
    assert not os.path.exists(f"/run/containerd/runc/{NS}/{cid}")


def test_run_rm_echo(ctr: Ctr) -> None:
    r = ctr.run("c-echo", "echo", "hi")
    assert r.returncode == 0 and r.stdout == "hi\n", r.stderr
    _clean(ctr, "c-echo")


def test_default_capabilities_granted(ctr: Ctr) -> None:
    """containerd's default set reaches the process (CapEff bits of CAP_MKNOD 27 and CAP_NET_RAW 13)."""
    r = ctr.run("c-caps", "sh", "-c", "grep CapEff /proc/self/status")
    assert r.returncode == 0, r.stderr
    eff = int(r.stdout.split()[1], 16)
    assert eff >> 27 & 1 and eff >> 13 & 1, r.stdout
    _clean(ctr, "c-caps")


def test_exit_status_and_missing_program(ctr: Ctr) -> None:
    r = ctr.run("c-42", "sh", "-c", "exit 42")
    assert r.returncode == 42, r.stderr
    _clean(ctr, "c-42")
    r = ctr.run("c-nf", "no-such-program")
    assert r.returncode != 0 and "executable file not found" in r.stderr
    _clean(ctr, "c-nf")


def test_detached_ps_exec_kill_delete(ctr: Ctr) -> None:
    r = ctr.run("c-d", "sh", "-c", 'trap "exit 7" TERM; while :; do sleep 0.1; done', detach=True)
    assert r.returncode == 0, r.stderr
    time.sleep(0.3)
    tasks = ctr("tasks", "ls").stdout
    assert "c-d" in tasks and "RUNNING" in tasks
    # the task's pid (containerd-shim reads it from --pid-file) is the container process, inside
    task_pid = int(next(x.split()[1] for x in tasks.splitlines() if x.split()[:1] == ["c-d"]))
    for n in ("pid", "net", "ipc", "uts", "mnt"):
        assert os.readlink(f"/proc/{task_pid}/ns/{n}") != os.readlink(f"/proc/self/ns/{n}"), n
    ps = ctr("tasks", "ps", "c-d")
    assert ps.returncode == 0, ps.stderr
    pids = tuple(int(x.split()[0]) for x in ps.stdout.splitlines()[1:] if x.split())
    assert pids
    e = ctr("tasks", "exec", "--exec-id", "e1", "c-d", "sh", "-c", "echo in-exec")
    exec_ok = e.returncode == 0 and e.stdout == "in-exec\n"
    assert ctr("tasks", "kill", "c-d").returncode == 0
    deadline = time.monotonic() + 10
    while "STOPPED" not in ctr("tasks", "ls").stdout:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert ctr("tasks", "delete", "c-d").returncode == 0
    assert ctr("containers", "delete", "c-d").returncode == 0
    _clean(ctr, "c-d", pids)
    assert exec_ok, e.stderr


def test_kill_all_sigkill(ctr: Ctr) -> None:
    r = ctr.run("c-k", "sh", "-c", "sleep 60 & sleep 60", detach=True)
    assert r.returncode == 0, r.stderr
    time.sleep(0.3)
    assert ctr("tasks", "kill", "--all", "-s", "SIGKILL", "c-k").returncode == 0
    deadline = time.monotonic() + 10
    while "STOPPED" not in ctr("tasks", "ls").stdout:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert ctr("tasks", "delete", "c-k").returncode == 0
    assert ctr("containers", "delete", "c-k").returncode == 0
    _clean(ctr, "c-k")
