"""podman 4.3.1 (through conmon) driving sandbox-shim unchanged: ``podman --runtime sandbox-shim run``.

podman gets the packaged containers.conf unchanged but for what ``OURS`` adds (the runtime listed in
``runtime_supports_json``/``runtime_supports_nocgroups``, the ulimits this VM allows, no network), its own
storage (vfs) and run dirs under a temp dir; the host's configuration is not touched.  After each test
nothing of the container is left (state, cgroups, mounts, processes).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import SHIM, leftovers

PACKAGED_CONF = Path("/usr/share/containers/containers.conf")
#: what the tests add to the packaged containers.conf: the runtime's name in the lists podman picks
#: flags by, the ulimits this VM's root may grant (it lacks CAP_SYS_RESOURCE), no network, cgroupfs
OURS: dict[str, dict[str, object]] = {
    "containers": {"default_ulimits": ["nofile=20000:20000", "nproc=32768:32768"], "netns": "none"},
    "engine": {
        "cgroup_manager": "cgroupfs",
        "events_logger": "file",
        "runtime_supports_json": ["sandbox-shim"],
        "runtime_supports_nocgroups": ["sandbox-shim"],
    },
}


def _toml(tables: dict[str, dict[str, object]]) -> str:
    """TOML for tables of strings, string lists and sub-tables (the shapes containers.conf uses)."""
    out: list[str] = []

    def table(name: str, body: dict[str, object]) -> None:
        out.append(f"[{name}]")
        subs = []
        for k, v in body.items():
            if isinstance(v, dict):
                subs.append((f"{name}.{k}", v))
            else:
                out.append(f"{k} = {json.dumps(v)}")
        for sub_name, sub in subs:
            table(sub_name, sub)

    for name, body in tables.items():
        table(name, body)
    return "\n".join(out) + "\n"


def containers_conf(shim: str) -> str:
    """The packaged containers.conf (podman's defaults: its capabilities, its ping_group_range sysctl)
    with ``OURS`` merged in.  CONTAINERS_CONF replaces the packaged file, so it is restated whole."""
    import tomllib

    conf = tomllib.loads(PACKAGED_CONF.read_text()) if PACKAGED_CONF.exists() else {}
    for name, body in OURS.items():
        conf.setdefault(name, {}).update(body)
    conf.setdefault("engine", {}).setdefault("runtimes", {})["sandbox-shim"] = [shim]
    return _toml(conf)


IMAGE = "localhost/sandbox-shim-e2e:latest"


class Podman:
    def __init__(self, base: Path) -> None:
        self.base = base
        (base / "containers.conf").write_text(containers_conf(SHIM))
        (base / "storage.conf").write_text(
            f'[storage]\ndriver = "vfs"\nrunroot = "{base}/run"\ngraphroot = "{base}/root"\n'
        )
        (base / "tmp").mkdir()
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
            "CONTAINERS_CONF": str(base / "containers.conf"),
            "CONTAINERS_STORAGE_CONF": str(base / "storage.conf"),
            "HOME": str(base),
        }
        self.seen: list[str] = []
        self.pids: list[int] = []

    def argv(self, *args: str) -> list[str]:
        return [
            "podman",
            "--root",
            f"{self.base}/root",
            "--runroot",
            f"{self.base}/run",
            "--storage-driver",
            "vfs",
            "--runtime",
            SHIM,
            "--cgroup-manager",
            "cgroupfs",
            "--events-backend",
            "file",
            "--tmpdir",
            f"{self.base}/tmp",
            *args,
        ]

    def __call__(self, *args: str, timeout: float = 120, **kw: object) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(*args), env=self.env, capture_output=True, text=True, timeout=timeout, **kw
        )  # type: ignore[call-overload]

    def detached(self, *args: str) -> str:
        r = self("run", "-d", "--network=none", *args)
        assert r.returncode == 0, r.stderr
        cid = r.stdout.strip().splitlines()[-1]
        self.seen.append(cid)
        pid = self("inspect", "--format", "{{.State.Pid}}", cid).stdout.strip()
        if pid.isdigit() and int(pid):
            self.pids.append(int(pid))
        return cid


@pytest.fixture(scope="module")
def podman_base(
    orchestrators: None, image_tar: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    base = tmp_path_factory.mktemp("podman")
    pm = Podman(base)
    r = pm("import", str(image_tar), IMAGE)
    assert r.returncode == 0, r.stderr
    yield base
    pm("rm", "-af", "-t", "0")
    subprocess.run(["umount", "-R", str(base / "root")], capture_output=True)


@pytest.fixture
def podman(podman_base: Path) -> Iterator[Podman]:
    pm = Podman.__new__(Podman)
    pm.base, pm.seen, pm.pids = podman_base, [], []
    pm.env = {
        "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
        "CONTAINERS_CONF": str(podman_base / "containers.conf"),
        "CONTAINERS_STORAGE_CONF": str(podman_base / "storage.conf"),
        "HOME": str(podman_base),
    }
    yield pm
    ids = pm("ps", "-aq", "--no-trunc").stdout.split()
    for cid in ids:
        pm("rm", "-f", "-t", "0", cid)
    for cid in pm.seen + ids:
        left = leftovers(
            cid,
            [
                f"/sys/fs/cgroup/*/libpod_parent/libpod-{cid}",  # v1
                f"/sys/fs/cgroup/libpod_parent/libpod-{cid}",
            ],
            tuple(pm.pids),
        )  # v2
        assert left == [], left


def test_run_rm_echo(podman: Podman) -> None:
    r = podman("run", "--rm", "--network=none", IMAGE, "echo", "hi")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "hi\n"
    assert podman("ps", "-aq").stdout.strip() == ""


# the workload is pid 1 of its pid namespace (as with runc): a signal it sends itself without a handler
# is ignored, so the SIGKILL case kills a child shell and passes its status on
@pytest.mark.parametrize(
    ("cmd", "status"), [("exit 0", 0), ("exit 42", 42), ("sh -c 'kill -9 $$'; exit $?", 137)]
)
def test_exit_codes_propagate(podman: Podman, cmd: str, status: int) -> None:
    r = podman("run", "--rm", "--network=none", IMAGE, "sh", "-c", cmd)
    assert r.returncode == status, r.stderr


@pytest.mark.parametrize(
    ("prog", "status", "words"),
    [("no-such-program", 127, "executable file not found"), ("/etc/passwd", 126, "permission denied")],
)
def test_unrunnable_program_maps_to_126_127(podman: Podman, prog: str, status: int, words: str) -> None:
    r = podman("run", "--rm", "--network=none", IMAGE, prog)
    assert r.returncode == status, r.stderr
    assert words in r.stderr


def cgroup_files(pid: int) -> tuple[Path, Path]:
    """(memory limit file, pids.max) of the cgroup process ``pid`` is in, the way the hierarchy in use
    names them (the runtime's own detection, platforms/linux/cgroups/detect.py): v2 ``0::PATH`` in
    /proc/PID/cgroup and ``memory.max``; v1 the ``memory`` and ``pids`` lines and
    ``memory.limit_in_bytes`` (cgroups(7))."""
    from sandbox_shim.platforms.linux.cgroups.detect import detect

    layout = detect()
    lines = [ln.split(":", 2) for ln in Path(f"/proc/{pid}/cgroup").read_text().splitlines()]
    if layout.version == 2:
        assert layout.v2_mount is not None
        (path,) = [p for hid, ctl, p in lines if hid == "0" and ctl == ""]
        d = Path(layout.v2_mount + path)
        return d / "memory.max", d / "pids.max"
    assert layout.version == 1, f"no cgroup hierarchy with memory and pids: {layout}"
    by = {c: p for _, ctl, p in lines for c in ctl.split(",")}
    return (
        Path(layout.v1_mounts["memory"] + by["memory"]) / "memory.limit_in_bytes",
        Path(layout.v1_mounts["pids"] + by["pids"]) / "pids.max",
    )


def test_memory_and_pids_limits(podman: Podman) -> None:
    cid = podman.detached("--memory", "64m", "--pids-limit", "32", IMAGE, "sleep", "30")
    mem, pids = cgroup_files(podman.pids[-1])
    assert f"libpod-{cid}" in str(mem), mem  # the container's own cgroup, not the caller's
    assert mem.read_text().strip() == str(64 << 20)
    assert pids.read_text().strip() == "32"
    # behaviour: the 33rd process cannot be made; control: 10 can
    r = podman(
        "run",
        "--rm",
        "--network=none",
        "--pids-limit",
        "32",
        IMAGE,
        "sh",
        "-c",
        "for i in $(seq 10); do sleep 3 & done; echo TEN-OK; for i in $(seq 40); do sleep 3 & done; wait",
    )
    assert "TEN-OK" in r.stdout and "can't fork" in r.stderr, r.stderr


def test_detached_logs_stop_trapped_term_then_kill(podman: Podman) -> None:
    script = 'echo started; trap "echo got TERM" TERM; while :; do sleep 0.2; done'
    cid = podman.detached(IMAGE, "sh", "-c", script)
    time.sleep(0.5)
    assert "started" in podman("logs", cid).stdout
    t0 = time.monotonic()
    r = podman("stop", "-t", "2", cid)
    assert r.returncode == 0, r.stderr
    assert time.monotonic() - t0 >= 1.9  # waited for TERM, then KILL
    assert podman("inspect", "--format", "{{.State.ExitCode}}", cid).stdout.strip() == "137"
    assert "got TERM" in podman("logs", cid).stdout
    assert podman("rm", cid).returncode == 0


def test_stop_exits_on_term(podman: Podman) -> None:
    cid = podman.detached(IMAGE, "sh", "-c", 'trap "exit 7" TERM; while :; do sleep 0.2; done')
    time.sleep(0.3)
    assert podman("stop", "-t", "10", cid).returncode == 0
    assert podman("inspect", "--format", "{{.State.ExitCode}}", cid).stdout.strip() == "7"


def _counter(pid: int) -> int:
    """The workload's counter file, read through the sandbox's root (/proc/PID/root of state.pid)."""
    return int(Path(f"/proc/{pid}/root/tmp/n").read_text().strip() or 0)


def test_pause_unpause(podman: Podman) -> None:
    script = "i=0; while :; do i=$((i+1)); echo $i > /tmp/n.new; mv /tmp/n.new /tmp/n; sleep 0.05; done"
    cid = podman.detached(IMAGE, "sh", "-c", script)
    time.sleep(0.5)
    assert podman("pause", cid).returncode == 0
    assert podman("inspect", "--format", "{{.State.Status}}", cid).stdout.strip() == "paused"
    frozen = _counter(podman.pids[0])
    time.sleep(0.5)
    assert _counter(podman.pids[0]) == frozen  # nothing ran while paused
    assert podman("unpause", cid).returncode == 0
    assert podman("inspect", "--format", "{{.State.Status}}", cid).stdout.strip() == "running"
    time.sleep(0.5)
    assert _counter(podman.pids[0]) > frozen  # control: it runs again


def test_exec_and_exec_tty(podman: Podman) -> None:
    cid = podman.detached(IMAGE, "sleep", "30")
    r = podman("exec", cid, "sh", "-c", "echo in-exec; exit 3")
    assert r.returncode == 3 and r.stdout == "in-exec\n", r.stderr
    r = podman("exec", "-t", cid, "sh", "-c", "tty")
    assert r.returncode == 0 and "/dev/" in r.stdout, r.stderr


def test_run_tty(podman: Podman) -> None:
    r = podman("run", "--rm", "-t", "--network=none", IMAGE, "sh", "-c", 'tty; cut -d" " -f7 /proc/$$/stat')
    assert r.returncode == 0, r.stderr
    lines = r.stdout.replace("\r", "").split()
    assert lines[0] == "/dev/console" and int(lines[1]) != 0


def test_rm_force_running(podman: Podman) -> None:
    cid = podman.detached(IMAGE, "sleep", "60")
    r = podman("rm", "-f", "-t", "0", cid)
    assert r.returncode == 0, r.stderr
    assert podman("ps", "-aq").stdout.strip() == ""


# -- the container process is inside the sandbox: namespace sharing, cp, top ----------------------------

NS = ("pid", "net", "ipc", "uts", "mnt")


def _ns(pid: int | str, name: str) -> str:
    return os.readlink(f"/proc/{pid}/ns/{name}")


def _state_pid(podman: Podman, cid: str) -> int:
    return int(podman("inspect", "--format", "{{.State.Pid}}", cid).stdout.strip())


def test_state_pid_is_in_the_sandbox_not_the_host(podman: Podman) -> None:
    cid = podman.detached(IMAGE, "sleep", "30")
    pid = _state_pid(podman, cid)
    for n in NS:
        assert _ns(pid, n) != _ns("self", n), f"podman's container pid {pid} is in the host's {n} namespace"
    assert Path(f"/proc/{pid}/cmdline").read_bytes() == b"sleep\x0030\x00"


def test_container_namespaces_are_the_other_containers(podman: Podman) -> None:
    a = podman.detached(IMAGE, "sleep", "60")
    a_pid = _state_pid(podman, a)
    time.sleep(0.3)
    r = podman(
        "run",
        "--rm",
        f"--pid=container:{a}",
        f"--ipc=container:{a}",
        f"--uts=container:{a}",
        f"--network=container:{a}",
        IMAGE,
        "sh",
        "-c",
        "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done; uname -n; "
        "for n in pid net ipc uts; do readlink /proc/self/ns/$n; done",
    )
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "sleep 60" in out and a[:12] in out.split()  # A's processes and A's hostname (podman's)
    assert "conmon" not in out and "podman" not in out and len(out.splitlines()) < 15  # not the host's
    for n in ("pid", "net", "ipc", "uts"):
        assert _ns(a_pid, n) in out and _ns(a_pid, n) != _ns("self", n)


def test_pod_with_two_containers_shares_the_pods_namespaces(podman: Podman) -> None:
    pod = f"pod-{os.getpid()}"
    r = podman(
        "pod",
        "create",
        "--name",
        pod,
        "--network=none",
        "--infra=true",
        "--infra-image",
        IMAGE,
        "--infra-command",
        "sleep 600",
    )  # podman splits it on spaces
    assert r.returncode == 0, r.stderr
    try:
        one = podman("run", "-d", "--pod", pod, IMAGE, "sleep", "601")
        two = podman("run", "-d", "--pod", pod, IMAGE, "sleep", "602")
        assert one.returncode == 0 and two.returncode == 0, one.stderr + two.stderr
        p1 = _state_pid(podman, one.stdout.split()[-1])
        p2 = _state_pid(podman, two.stdout.split()[-1])
        for n in ("net", "ipc", "uts"):
            assert _ns(p1, n) == _ns(p2, n) != _ns("self", n), n
        assert _ns(p1, "pid") != _ns("self", "pid") and _ns(p2, "pid") != _ns("self", "pid")
    finally:
        podman("pod", "rm", "-f", "-t", "0", pod)


def test_cp_both_ways_stays_in_the_container(podman: Podman, tmp_path: Path) -> None:
    cid = podman.detached(IMAGE, "sh", "-c", "echo inside-only > /inside.txt; sleep 60")
    time.sleep(0.3)
    name = f"cp-into-{os.getpid()}"
    src = tmp_path / "in.txt"
    src.write_text("from-host\n")
    assert not Path("/" + name).exists()
    r = podman("cp", str(src), f"{cid}:/{name}")
    assert r.returncode == 0, r.stderr
    assert not Path("/" + name).exists(), "podman cp wrote into the host's /"
    assert podman("exec", cid, "cat", "/" + name).stdout == "from-host\n"
    # out of it: the container's file, never the host's file of the same path
    host_only = f"/tmp/cp-host-only-{os.getpid()}"
    Path(host_only).write_text("HOST-SECRET\n")
    try:
        r = podman("cp", f"{cid}:/inside.txt", str(tmp_path / "out.txt"))
        assert r.returncode == 0, r.stderr
        assert (tmp_path / "out.txt").read_text() == "inside-only\n"
        r = podman("cp", f"{cid}:{host_only}", str(tmp_path / "leak.txt"))
        assert r.returncode != 0 and not (tmp_path / "leak.txt").exists(), "podman cp read a host file"
    finally:
        os.unlink(host_only)


def test_top_lists_only_the_containers_processes(podman: Podman) -> None:
    cid = podman.detached(IMAGE, "sh", "-c", "sleep 61 & sleep 62")
    time.sleep(0.3)
    r = podman("top", cid, "pid", "args")
    assert r.returncode == 0, r.stderr
    rows = r.stdout.strip().splitlines()[1:]
    assert any("sleep 61" in x for x in rows) and any("sleep 62" in x for x in rows)
    assert len(rows) <= 4 and not any("conmon" in x or "pytest" in x or "bwrap" in x for x in rows), rows


def test_user_1000_with_the_default_sysctl_and_exec_user(podman: Podman) -> None:
    """podman's packaged default_sysctls set net.ipv4.ping_group_range: a non-root user must still run."""
    r = podman(
        "run",
        "--rm",
        "--network=none",
        "--user",
        "1000",
        IMAGE,
        "sh",
        "-c",
        "id -u; grep CapEff /proc/self/status",
    )
    assert r.returncode == 0, r.stderr
    out = r.stdout.split()
    assert out[0] == "1000" and int(out[-1], 16) == 0, r.stdout
    cid = podman.detached(IMAGE, "sleep", "30")
    r = podman("exec", "--user", "1000", cid, "sh", "-c", "id -u; grep CapEff /proc/self/status")
    out = r.stdout.split()
    assert r.returncode == 0 and out[0] == "1000" and int(out[-1], 16) == 0, (r.stdout, r.stderr)
    r = podman("exec", cid, "sh", "-c", "grep CapEff /proc/self/status")  # control: root keeps its set
    assert r.returncode == 0 and int(r.stdout.split()[-1], 16) != 0, r.stdout


def test_read_only_tmpfs_dirs_are_1777(podman: Podman) -> None:
    r = podman(
        "run",
        "--rm",
        "--network=none",
        "--read-only",
        IMAGE,
        "stat",
        "-c",
        "%a %n",
        "/tmp",
        "/var/tmp",
        "/run",
    )
    assert r.returncode == 0, r.stderr
    assert [x.split()[0] for x in r.stdout.splitlines()] == ["1777", "1777", "1777"], r.stdout
