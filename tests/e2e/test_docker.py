"""Docker 20.10 (Debian's docker.io) driving sandbox-shim with ``docker run --runtime``, Docker's default
spec unmodified (its 14 capabilities, its seccomp profile, /dev/shm from ``shm``, device rules).

A private dockerd runs for the module: its own socket, data root, exec root and an empty daemon.json
(the host's /etc/docker is never read); no bridge, no iptables, no ip forwarding, so the host's network
is left as it is, and containers use ``--network none``.  The image is the test's busybox rootfs,
packed as a ``docker save`` archive and read with ``docker load``.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import signal
import subprocess
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import SHIM, leftovers

IMAGE = "localhost/sandbox-shim-e2e:latest"


def _docker_archive(image_tar: Path, out: Path) -> Path:
    """A ``docker save`` archive (manifest.json, config, one layer) of ``image_tar`` named IMAGE."""
    layer = image_tar.read_bytes()
    diff = "sha256:" + hashlib.sha256(layer).hexdigest()
    cfg = json.dumps(
        {
            "architecture": "amd64" if os.uname().machine == "x86_64" else "arm64",
            "os": "linux",
            "config": {
                "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
                "Cmd": ["sh"],
            },
            "rootfs": {"type": "layers", "diff_ids": [diff]},
        }
    ).encode()
    cfg_name = hashlib.sha256(cfg).hexdigest() + ".json"
    manifest = json.dumps([{"Config": cfg_name, "RepoTags": [IMAGE], "Layers": ["layer/layer.tar"]}]).encode()
    arch = out / "docker-image.tar"
    with tarfile.open(arch, "w") as tf:
        for name, data in ((cfg_name, cfg), ("manifest.json", manifest), ("layer/layer.tar", layer)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return arch


class Docker:
    def __init__(self, sock: str) -> None:
        self.sock = sock

    def __call__(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["docker", "-H", f"unix://{self.sock}", *args], capture_output=True, text=True, timeout=timeout
        )

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self("run", "--runtime", "sandbox-shim", "--network", "none", *args)


@pytest.fixture(scope="module")
def docker(
    orchestrators: None, image_tar: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Docker]:
    import shutil

    if shutil.which("dockerd") is None or shutil.which("docker") is None:
        pytest.skip("docker.io is not installed: scripts/install-orchestrators installs it")
    base = tmp_path_factory.mktemp("docker")
    (base / "daemon.json").write_text("{}")
    sock = str(base / "docker.sock")
    log = open(base / "dockerd.log", "w")
    daemon = subprocess.Popen(
        [
            "dockerd",
            "--config-file",
            str(base / "daemon.json"),
            "-H",
            f"unix://{sock}",
            "--data-root",
            str(base / "data"),
            "--exec-root",
            str(base / "exec"),
            "--pidfile",
            str(base / "dockerd.pid"),
            "--bridge",
            "none",
            "--iptables=false",
            "--ip-forward=false",
            "--ip-masq=false",
            "--userland-proxy=false",
            "--add-runtime",
            f"sandbox-shim={SHIM}",
        ],
        stdout=log,
        stderr=log,
    )
    d = Docker(sock)
    deadline = time.monotonic() + 60
    while d("version").returncode != 0:
        assert daemon.poll() is None and time.monotonic() < deadline, (base / "dockerd.log").read_text()[
            -3000:
        ]
        time.sleep(0.2)
    r = d("load", "-i", str(_docker_archive(image_tar, base)))
    assert r.returncode == 0, r.stderr
    yield d
    for cid in d("ps", "-aq").stdout.split():
        d("rm", "-f", cid)
    daemon.send_signal(signal.SIGTERM)
    try:
        daemon.wait(timeout=30)
    except subprocess.TimeoutExpired:
        daemon.kill()
        daemon.wait()
    log.close()
    subprocess.run(["umount", "-R", str(base / "data")], capture_output=True)
    subprocess.run(["umount", "-R", str(base / "exec")], capture_output=True)


def _clean(d: Docker, name: str, full_id: str) -> None:
    assert name not in d("ps", "-a", "--format", "{{.Names}}").stdout.split()
    left = leftovers(full_id, [f"/sys/fs/cgroup/*/docker/{full_id}"])
    left = [x for x in left if not x.startswith("state: /run/sandbox-shim")]
    assert left == [], left


def test_run_rm_echo_exit_codes_and_missing_program(docker: Docker) -> None:
    r = docker.run("--rm", IMAGE, "echo", "hi")
    assert r.returncode == 0 and r.stdout == "hi\n", r.stderr
    r = docker.run("--rm", IMAGE, "sh", "-c", "exit 42")
    assert r.returncode == 42, r.stderr
    r = docker.run("--rm", IMAGE, "no-such-program")
    assert r.returncode == 127, (r.returncode, r.stderr)


def test_default_capabilities_and_dev_shm(docker: Docker) -> None:
    r = docker.run("--rm", IMAGE, "sh", "-c", "grep CapEff /proc/self/status; grep ' /dev/shm ' /proc/mounts")
    assert r.returncode == 0, r.stderr
    eff = int(r.stdout.split()[1], 16)
    assert eff >> 27 & 1 and eff >> 13 & 1, r.stdout  # CAP_MKNOD, CAP_NET_RAW: Docker's defaults
    assert "nodev" in r.stdout.splitlines()[1], r.stdout


def test_detached_exec_logs_pause_stop(docker: Docker) -> None:
    r = docker.run(
        "-d",
        "--name",
        "d1",
        IMAGE,
        "sh",
        "-c",
        'echo started; trap "exit 7" TERM; while :; do sleep 0.1; done',
    )
    assert r.returncode == 0, r.stderr
    full = r.stdout.strip()
    e = docker("exec", "d1", "sh", "-c", "echo in-exec")
    assert e.returncode == 0 and e.stdout == "in-exec\n", e.stderr
    deadline = time.monotonic() + 10
    while "started" not in docker("logs", "d1").stdout and time.monotonic() < deadline:
        time.sleep(0.1)
    assert docker("logs", "d1").stdout.startswith("started")
    assert docker("pause", "d1").returncode == 0
    assert docker("inspect", "-f", "{{.State.Status}}", "d1").stdout.strip() == "paused"
    assert docker("unpause", "d1").returncode == 0
    s = docker("stop", "-t", "10", "d1")
    assert s.returncode == 0, s.stderr
    assert docker("inspect", "-f", "{{.State.ExitCode}}", "d1").stdout.strip() == "7"
    assert docker("rm", "d1").returncode == 0
    _clean(docker, "d1", full)


def test_user_1000_and_exec_user_have_no_capabilities(docker: Docker) -> None:
    r = docker.run("--rm", "--user", "1000:1000", IMAGE, "sh", "-c", "id -u; grep CapEff /proc/self/status")
    assert r.returncode == 0, r.stderr
    out = r.stdout.split()
    assert out[0] == "1000" and int(out[-1], 16) == 0, r.stdout
    r = docker.run("-d", "--name", "d2", IMAGE, "sleep", "600")
    assert r.returncode == 0, r.stderr
    e = docker("exec", "-u", "1000", "d2", "sh", "-c", "id -u; grep CapEff /proc/self/status")
    assert e.returncode == 0, e.stderr
    out = e.stdout.split()
    assert out[0] == "1000" and int(out[-1], 16) == 0, e.stdout  # as runc: a non-root exec has none
    docker("rm", "-f", "d2")
