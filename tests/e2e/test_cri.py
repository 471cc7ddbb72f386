"""Kubernetes' path: containerd 1.6's CRI plugin driving sandbox-shim through the README's RuntimeClass
handler (``runtime_type = "io.containerd.runc.v2"``, ``BinaryName`` = sandbox-shim), with containerd's
default specs for the pause and app containers unmodified.  A small CRI client of our own
(``tests/e2e/cri``) makes the calls the kubelet makes: RunPodSandbox, CreateContainer, StartContainer,
ContainerStatus, ExecSync, StopContainer, RemoveContainer, StopPodSandbox, RemovePodSandbox.

A second handler, ``sandbox-shim-systemd``, is the same runtime with ``SystemdCgroup = true`` (a node
whose kubelet has ``cgroupDriver: systemd``): containerd's shim passes ``--systemd-cgroup`` and, for a pod
whose ``cgroup_parent`` is a slice, ``cgroupsPath`` ``<pod slice>:cri-containerd:<id>``.  Its test needs
the systemd cgroup driver (cgroup v2, systemd as PID 1: the VM lane, scripts/test-in-vm) and skips
elsewhere with the runtime's own probe's answer.

A private containerd (temp root, state, socket; stream server on an ephemeral loopback port) runs for
the module.  The pod network is CNI's bridge plugin from Debian's containernetworking-plugins, on a
bridge and subnet this module makes and removes (no masquerade, no iptables).  The pause image is the
test's own busybox rootfs running ``sleep``, imported and named as ``sandbox_image``.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import SHIM, build_oci_archive, leftovers

HANDLER = "sandbox-shim"
HANDLER_SYSTEMD = "sandbox-shim-systemd"  # the same runtime with SystemdCgroup = true
APP_IMAGE = "localhost/sandbox-shim-e2e:latest"
PAUSE_IMAGE = "localhost/sandbox-shim-pause:1"
RUNC_ROOT = "/run/containerd/runc/k8s.io"  # containerd-shim-runc-v2's --root for the k8s.io namespace


class Cluster:
    def __init__(self, base: Path, cri: Any) -> None:
        self.base = base
        self.cri = cri
        self.pb = cri.pb
        self.pods: list[str] = []

    def pod_config(self, name: str, cgroup_parent: str = "") -> Any:
        pb = self.pb
        (self.base / "logs" / name).mkdir(parents=True, exist_ok=True)
        return pb.PodSandboxConfig(
            metadata=pb.PodSandboxMetadata(name=name, uid=f"uid-{name}", namespace="default"),
            hostname=name,
            log_directory=str(self.base / "logs" / name),
            linux=pb.LinuxPodSandboxConfig(
                cgroup_parent=cgroup_parent,
                security_context=pb.LinuxSandboxSecurityContext(
                    namespace_options=pb.NamespaceOption(network=pb.POD, pid=pb.CONTAINER, ipc=pb.POD)
                ),
            ),
        )

    def run_pod(self, name: str, handler: str = HANDLER, cgroup_parent: str = "") -> tuple[str, Any]:
        import grpc

        cfg = self.pod_config(name, cgroup_parent)
        try:
            pod = self.cri.call("RunPodSandbox", config=cfg, runtime_handler=handler).pod_sandbox_id
        except grpc.RpcError as e:
            if "/process/oomScoreAdj" in (e.details() or ""):
                # the runtime's own probe (platforms/linux/rlimits.py): containerd's pause container asks
                # -998, which needs CAP_SYS_RESOURCE or a lower floor on this host; runc fails there too
                pytest.skip(f"this host cannot lower oom_score_adj for the pause container: {e.details()}")
            raise
        self.pods.append(pod)
        return pod, cfg

    def container(
        self, pod: str, pod_cfg: Any, name: str, cmd: list[str], uid: int | None = None, resources: Any = None
    ) -> str:
        pb = self.pb
        sc = pb.LinuxContainerSecurityContext(
            namespace_options=pb.NamespaceOption(network=pb.POD, pid=pb.CONTAINER, ipc=pb.POD)
        )
        if uid is not None:
            sc.run_as_user.value = uid
        cfg = pb.ContainerConfig(
            metadata=pb.ContainerMetadata(name=name),
            image=pb.ImageSpec(image=APP_IMAGE),
            command=cmd,
            log_path=f"{name}.log",
            linux=pb.LinuxContainerConfig(security_context=sc, resources=resources),
        )
        cid = self.cri.call(
            "CreateContainer", pod_sandbox_id=pod, config=cfg, sandbox_config=pod_cfg
        ).container_id
        self.cri.call("StartContainer", container_id=cid)
        return cid

    def status(self, cid: str) -> Any:
        return self.cri.call("ContainerStatus", container_id=cid).status

    def exec(self, cid: str, *cmd: str) -> Any:
        return self.cri.call("ExecSync", container_id=cid, cmd=list(cmd), timeout=30)

    def remove_pod(self, pod: str) -> None:
        self.cri.call("StopPodSandbox", pod_sandbox_id=pod)
        self.cri.call("RemovePodSandbox", pod_sandbox_id=pod)
        self.pods.remove(pod)


def _oom_score_adj_minus_999() -> None:
    try:
        fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY)
        os.write(fd, b"-999")
        os.close(fd)
    except OSError:  # no CAP_SYS_RESOURCE and no lower floor: the pause container will say so
        pass


def can_lower_oom_score_adj() -> bool:
    """Whether a child of this process can set oom_score_adj -999 (CAP_SYS_RESOURCE, or a floor at or
    below it): the same write the runtime's own check makes (platforms/linux/rlimits.py)."""
    code = "import os; fd = os.open('/proc/self/oom_score_adj', os.O_WRONLY); os.write(fd, b'-999')"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True)
    return r.returncode == 0


def _config(base: Path, bridge: str, subnet: str, restrict_oom: bool = False) -> None:
    cni = base / "cni"
    cni.mkdir()
    (cni / "10-sandbox-shim-e2e.conflist").write_text(
        json.dumps(
            {
                "cniVersion": "0.4.0",
                "name": "sandbox-shim-e2e",
                "plugins": [
                    {
                        "type": "bridge",
                        "bridge": bridge,
                        "isGateway": False,
                        "ipMasq": False,
                        "ipam": {"type": "host-local", "subnet": subnet, "dataDir": str(base / "ipam")},
                    }
                ],
            }
        )
    )
    (base / "config.toml").write_text(f'''version = 2
root = "{base}/root"
state = "{base}/state"
[grpc]
  address = "{base}/containerd.sock"
[ttrpc]
  address = "{base}/containerd.sock.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  restrict_oom_score_adj = {"true" if restrict_oom else "false"}
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{cni}"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.{HANDLER}]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.{HANDLER}.options]
      BinaryName = "{SHIM}"
      SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.{HANDLER_SYSTEMD}]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.{HANDLER_SYSTEMD}.options]
      BinaryName = "{SHIM}"
      SystemdCgroup = true
''')


@pytest.fixture(scope="module")
def cluster(
    orchestrators: None,
    image_tar: Path,
    oci_archive: tuple[Path, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Cluster]:
    try:
        from .cri import CRI, compile_proto
    except ImportError as e:  # grpcio / grpcio-tools / protobuf come with the test extra
        pytest.skip(f"the CRI client needs grpcio, grpcio-tools and protobuf (pip install -e .[test]): {e}")
    if not os.path.exists("/usr/lib/cni/bridge"):
        pytest.skip("CNI plugins missing (/usr/lib/cni/bridge): scripts/install-orchestrators installs them")
    base = tmp_path_factory.mktemp("cri")
    bridge = f"ssh{os.getpid() % 100000}"
    # A real node runs containerd at -999 (containerd.service OOMScoreAdjust), so the pause container's
    # -998 is a raise.  Where this host cannot lower oom_score_adj at all (root without
    # CAP_SYS_RESOURCE, as in some VMs and containers; runc fails there too), containerd's documented
    # CRI option restrict_oom_score_adj keeps every container's score at or above containerd's own.
    restrict = not can_lower_oom_score_adj()
    if restrict:
        print("this host cannot lower oom_score_adj: the test's containerd runs with restrict_oom_score_adj")
    _config(base, bridge, f"10.250.{os.getpid() % 250}.0/24", restrict)
    pause = build_oci_archive(image_tar, PAUSE_IMAGE, ["sleep", "2147483647"], base / "pause")
    log = open(base / "containerd.log", "w")
    # as containerd.service runs it (OOMScoreAdjust=-999): its shims get its score + 1, so the pause
    # container's oomScoreAdj -998 (containerd's default) is a raise for them, which needs no privilege
    daemon = subprocess.Popen(
        ["containerd", "--config", str(base / "config.toml")],
        stdout=log,
        stderr=log,
        preexec_fn=_oom_score_adj_minus_999,
    )
    sock = str(base / "containerd.sock")

    def ctr(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["ctr", "--address", sock, "--namespace", "k8s.io", *args],
            capture_output=True,
            text=True,
            timeout=120,
        )

    deadline = time.monotonic() + 30
    while ctr("version").returncode != 0:
        assert daemon.poll() is None and time.monotonic() < deadline, (base / "containerd.log").read_text()
        time.sleep(0.1)
    for archive in (oci_archive[0], pause):
        r = ctr("images", "import", str(archive))
        assert r.returncode == 0, r.stderr
    pb, pb_grpc = compile_proto(base / "pb")
    c = Cluster(base, CRI(sock, pb, pb_grpc))
    deadline = time.monotonic() + 30
    while True:  # the CRI plugin serves once it has loaded (Version answers)
        try:
            v = c.cri.call("Version", version="v1", deadline=5)
            break
        except Exception:
            assert daemon.poll() is None and time.monotonic() < deadline, (
                base / "containerd.log"
            ).read_text()
            time.sleep(0.2)
    assert v.runtime_api_version == "v1", v
    yield c
    for pod in list(c.pods):
        try:
            c.remove_pod(pod)
        except Exception:
            pass
    c.cri.close()
    daemon.send_signal(signal.SIGTERM)
    try:
        daemon.wait(timeout=20)
    except subprocess.TimeoutExpired:
        daemon.kill()
        daemon.wait()
    log.close()
    subprocess.run(["umount", "-R", str(base / "root")], capture_output=True)
    subprocess.run(["umount", "-R", str(base / "state")], capture_output=True)
    subprocess.run(["ip", "link", "del", bridge], capture_output=True)


def _wait_state(c: Cluster, cid: str, state: int, timeout: float = 20) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        st = c.status(cid)
        if st.state == state or time.monotonic() > deadline:
            return st
        time.sleep(0.1)


def _clean(ids: list[str]) -> None:
    for cid in ids:
        left = leftovers(
            cid,
            [
                f"/sys/fs/cgroup/*/sandbox-shim/*/{cid}",  # v1
                f"/sys/fs/cgroup/sandbox-shim/*/{cid}",  # v2
                f"/sys/fs/cgroup/kubepods.slice/*/*/cri-containerd-{cid}.scope",  # systemd
                f"{RUNC_ROOT}/{cid}",
            ],
        )
        left = [x for x in left if not x.startswith("state: /run/sandbox-shim")]
        assert left == [], left


def test_pod_lifecycle_exec_logs_stop(cluster: Cluster) -> None:
    c = cluster
    pod, cfg = c.run_pod("p1")
    cid = c.container(
        pod, cfg, "app", ["sh", "-c", 'echo started; trap "exit 3" TERM; while :; do sleep 0.1; done']
    )
    st = _wait_state(c, cid, c.pb.CONTAINER_RUNNING)
    assert st.state == c.pb.CONTAINER_RUNNING, st
    r = c.exec(cid, "sh", "-c", "echo in-exec; id -u; grep CapEff /proc/self/status; exit 5")
    assert r.exit_code == 5 and r.stdout.decode().startswith("in-exec\n0\n"), r
    eff = int(r.stdout.decode().split()[-1], 16)
    assert eff >> 27 & 1 and eff >> 13 & 1  # containerd's defaults: CAP_MKNOD, CAP_NET_RAW
    deadline = time.monotonic() + 10
    logf = Path(cfg.log_directory) / "app.log"
    while "started" not in (logf.read_text() if logf.exists() else "") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert " stdout F started" in logf.read_text()  # CRI log format: time stream tag line
    c.cri.call("StopContainer", container_id=cid, timeout=10)
    st = _wait_state(c, cid, c.pb.CONTAINER_EXITED)
    assert st.state == c.pb.CONTAINER_EXITED and st.exit_code == 3, st
    c.cri.call("RemoveContainer", container_id=cid)
    c.remove_pod(pod)
    _clean([cid, pod])


def test_run_as_user_and_exec_have_no_capabilities(cluster: Cluster) -> None:
    c = cluster
    pod, cfg = c.run_pod("p2")
    cid = c.container(pod, cfg, "user", ["sleep", "600"], uid=1000)
    assert _wait_state(c, cid, c.pb.CONTAINER_RUNNING).state == c.pb.CONTAINER_RUNNING
    r = c.exec(cid, "sh", "-c", "id -u; grep CapEff /proc/self/status")
    out = r.stdout.decode().split()
    assert r.exit_code == 0 and out[0] == "1000" and int(out[-1], 16) == 0, r
    c.cri.call("StopContainer", container_id=cid, timeout=2)
    c.cri.call("RemoveContainer", container_id=cid)
    c.remove_pod(pod)
    _clean([cid, pod])


def _ns(pid: int, kind: str) -> str:
    return os.readlink(f"/proc/{pid}/ns/{kind}")


def test_two_containers_share_the_pods_namespaces(cluster: Cluster) -> None:
    """Depends on ``state.pid`` being the pause container's own process: containerd's CRI joins the
    pod's ipc/uts namespaces through ``/proc/<sandbox pid>/ns``."""
    c = cluster
    pod, cfg = c.run_pod("p3")
    st = subprocess.run([SHIM, "--root", RUNC_ROOT, "state", pod], capture_output=True, text=True)
    assert st.returncode == 0, st.stderr
    pid = json.loads(st.stdout)["pid"]
    if _ns(pid, "ipc") == _ns(os.getpid(), "ipc"):
        pytest.skip(
            f"state.pid {pid} of the pod sandbox is in the host's ipc namespace (not the pause "
            "process itself): pods cannot share its namespaces until that holds"
        )
    a = c.container(pod, cfg, "a", ["sleep", "600"])
    b = c.container(pod, cfg, "b", ["sleep", "600"])
    probe = "for n in net ipc uts; do readlink /proc/self/ns/$n; done; hostname"  # busybox: one link each
    ra, rb = c.exec(a, "sh", "-c", probe), c.exec(b, "sh", "-c", probe)
    assert ra.exit_code == 0 and rb.exit_code == 0, (ra, rb)
    assert ra.stdout == rb.stdout, (ra.stdout, rb.stdout)
    seen = ra.stdout.decode().split()
    assert seen[-1] == "p3"
    for kind, link in zip(("net", "ipc", "uts"), seen[:3], strict=True):
        assert link != _ns(os.getpid(), kind), f"{kind} is the host's"
        assert link == _ns(pid, kind), f"{kind} is not the pod's"
    for cid in (a, b):
        c.cri.call("StopContainer", container_id=cid, timeout=2)
        c.cri.call("RemoveContainer", container_id=cid)
    c.remove_pod(pod)
    _clean([a, b, pod])


@pytest.fixture(scope="module")
def systemd_driver() -> None:
    """Skip unless the runtime's own probe finds the systemd cgroup driver usable (systemd PID 1 with its
    D-Bus API, cgroup v2): platforms/linux/cgroups/systemd.py ``probe()``, the check ``--systemd-cgroup``
    makes at create."""
    from sandbox_shim.platforms.linux.cgroups.systemd import probe

    ok, why = probe()
    if not ok:
        pytest.skip(f"SystemdCgroup = true needs the systemd cgroup driver; the runtime's probe says: {why}")


def _systemctl_show(unit: str, *props: str) -> dict[str, str]:
    r = subprocess.run(
        ["systemctl", "show", unit, *(f"--property={p}" for p in props)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 0, r.stderr
    return dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)


def _cgroup_of(cid: str) -> str:
    """The v2 cgroup (``0::PATH`` of /proc/PID/cgroup) of the sandbox's process (state.pid)."""
    st = subprocess.run([SHIM, "--root", RUNC_ROOT, "state", cid], capture_output=True, text=True)
    assert st.returncode == 0, st.stderr
    pid = json.loads(st.stdout)["pid"]
    lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    (path,) = [ln[3:] for ln in lines if ln.startswith("0::")]
    return path


def test_systemd_cgroup_scope_in_the_pod_slice_with_limits(systemd_driver: None, cluster: Cluster) -> None:
    """SystemdCgroup = true with a kubelet-style pod slice: the pause and app containers are transient
    scopes ``cri-containerd-<id>.scope`` under kubepods.slice/kubepods-burstable.slice/<pod slice>; the
    CRI resources are the scope's unit properties (systemctl show) and its v2 files; a 96 MiB allocation
    is OOM-killed under the 64 MiB limit after an 8 MiB one succeeds; the scopes are gone after removal."""
    c = cluster
    pb = c.pb
    pod_slice = f"kubepods-burstable-pod{os.getpid()}_e2e.slice"
    parent = f"/kubepods.slice/kubepods-burstable.slice/{pod_slice}"
    pod, cfg = c.run_pod("p4", handler=HANDLER_SYSTEMD, cgroup_parent=pod_slice)
    try:
        assert _cgroup_of(pod) == f"{parent}/cri-containerd-{pod}.scope"
        res = pb.LinuxContainerResources(
            memory_limit_in_bytes=64 << 20,
            cpu_period=100000,
            cpu_quota=50000,
            cpu_shares=512,
            unified={"pids.max": "64"},
        )
        cid = c.container(pod, cfg, "limited", ["sleep", "600"], resources=res)
        assert _wait_state(c, cid, pb.CONTAINER_RUNNING).state == pb.CONTAINER_RUNNING
        scope = f"cri-containerd-{cid}.scope"
        cg = Path("/sys/fs/cgroup" + parent) / scope
        assert _cgroup_of(cid).startswith(f"{parent}/{scope}"), _cgroup_of(cid)
        # 512 shares as weight, as runc >= 1.3.2 converts them (opencontainers/cgroups: the quadratic fit
        # in log2(shares) through 2->1, 1024->100, 262144->10000)
        weight = str(math.ceil(10 ** ((9 * 9 + 125 * 9) / 612 - 7 / 34)))
        show = _systemctl_show(scope, "ActiveState", "Slice", "MemoryMax", "CPUQuotaPerSecUSec", "CPUWeight")
        assert show == {
            "ActiveState": "active",
            "Slice": pod_slice,
            "MemoryMax": str(64 << 20),
            "CPUQuotaPerSecUSec": "500ms",
            "CPUWeight": weight,
        }, show
        assert (cg / "memory.max").read_text().split() == [str(64 << 20)]
        assert (cg / "cpu.max").read_text().split() == ["50000", "100000"]
        assert (cg / "cpu.weight").read_text().split() == [weight]
        assert (cg / "pids.max").read_text().split() == ["64"]
        # behaviour: control first (8 MiB fits), then the breach (96 MiB does not)
        ok = c.exec(cid, "dd", "if=/dev/zero", "of=/dev/null", "bs=8M", "count=1")
        assert ok.exit_code == 0, ok
        big = c.exec(cid, "dd", "if=/dev/zero", "of=/dev/null", "bs=96M", "count=1")
        assert big.exit_code != 0, big
        events = dict(ln.split() for ln in (cg / "memory.events").read_text().splitlines())
        assert int(events["oom_kill"]) >= 1, events
        c.cri.call("StopContainer", container_id=cid, timeout=2)
        c.cri.call("RemoveContainer", container_id=cid)
        assert not cg.exists(), f"{cg} left after RemoveContainer"
        assert _systemctl_show(scope, "ActiveState")["ActiveState"] != "active"
        c.remove_pod(pod)
        assert not (Path("/sys/fs/cgroup" + parent) / f"cri-containerd-{pod}.scope").exists()
        _clean([cid, pod])
    finally:  # the pod slice is the kubelet's to remove on a node; here the test made it
        if pod in c.pods:
            try:
                c.remove_pod(pod)
            except Exception:  # noqa: BLE001 - the fixture's teardown tries again
                pass
        subprocess.run(["systemctl", "stop", "--no-block", pod_slice], capture_output=True, timeout=60)
