"""Kernel attack surface under the tenant profile, on real bwrap: capabilities, no_new_privs, setuid,
seccomp, nested user namespaces, masked and read-only paths, the minimal /dev — and the claims the
README's "Security" section makes about what is NOT enforced (each one checked here).

Every breach runs after a CONTROL (the same probe where the config allows it prints its marker);
the breach must fail with the expected errno (EPERM, EROFS, ENOENT) and print no marker.  Runs go
through the CLI (``run``) and the library (``provision``/``start``/``destroy``).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import sandbox_runs
from conftest import base_config, run_shim, wait_pid
from sandbox_runs import RUNNERS, SANDBOX_MARKS, TAG, launch

pytestmark = SANDBOX_MARKS

probe = partial(sandbox_runs.probe, exit_zero=True)  # always exits 0


def status_field(out: str, name: str) -> str:
    """A ``Name:\tvalue`` line of /proc/PID/status as printed by the probe."""
    return next(line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith(name + ":"))


def _caps(cfg: dict[str, Any], *names: str) -> None:
    for k in ("bounding", "effective", "permitted", "inheritable", "ambient"):
        cfg["process"]["capabilities"][k] = list(names)


# -- capabilities, no_new_privs, setuid ----------------------------------------------------------


@pytest.mark.parametrize("how", RUNNERS)
def test_capabilities_default_none_and_config_grants(make_bundle, state_root: Path, how: str) -> None:
    script = (
        "touch /tmp/f && chown 1234 /tmp/f && echo CHOWN-MARKER; "
        "grep -E '^(Cap|NoNewPrivs)' /proc/self/status"
    )
    cfg = base_config(probe(script))
    _caps(cfg, "CAP_CHOWN")
    r = launch(how, state_root, make_bundle(cfg, name="ctl"), "ctl")  # control: the config grants CAP_CHOWN
    assert r.code == 0 and "CHOWN-MARKER" in r.out, r
    assert int(status_field(r.out, "CapEff"), 16) == 1 << 0  # CAP_CHOWN is bit 0 (capability.h)

    r = launch(how, state_root, make_bundle(base_config(probe(script)), name="evil"), "evil")
    assert r.code == 0 and "CHOWN-MARKER" not in r.out and "Operation not permitted" in r.out, r
    for f in ("CapInh", "CapPrm", "CapEff", "CapAmb"):
        assert int(status_field(r.out, f), 16) == 0, f
    assert status_field(r.out, "NoNewPrivs") == "1"
    # README claim: without a user namespace the bounding set stays the host's (inert under no_new_privs)
    host_bnd = status_field(Path("/proc/self/status").read_text(), "CapBnd")
    assert status_field(r.out, "CapBnd") == host_bnd


def test_unknown_capability_is_refused(make_bundle, state_root: Path) -> None:
    cfg = base_config(probe("echo RAN"))
    _caps(cfg, "CAP_NOT_A_THING")
    r = launch("cli", state_root, make_bundle(cfg), "u")
    assert r.code is None and "/process/capabilities" in r.refused and "RAN" not in r.out, r


@pytest.mark.parametrize("how", RUNNERS)
def test_setuid_root_binary_gains_nothing(make_bundle, state_root: Path, tmp_path: Path, how: str) -> None:
    """A setuid-root copy of busybox in the rootfs: exec'ing it as the sandbox's (capability-less)
    root would restore the full bounding set without no_new_privs — the host control shows that."""
    script = (
        "touch /tmp/f; /opt/suid/busybox chown 1234 /tmp/f && echo SUID-MARKER; "
        "/opt/suid/busybox grep -E '^(CapEff|NoNewPrivs)' /proc/self/status"
    )
    b = make_bundle(base_config(probe(script)), name="suid")
    suid = b / "rootfs" / "opt" / "suid" / "busybox"
    suid.parent.mkdir(parents=True)
    shutil.copy2(b / "rootfs" / "bin" / "busybox", suid)
    os.chown(suid, 0, 0)
    os.chmod(suid, 0o4755)
    assert os.stat(suid).st_mode & stat.S_ISUID

    if shutil.which("capsh") is None:
        pytest.skip("capsh is not installed (apt-get install libcap2-bin): no host control")
    victim = tmp_path / "host-f"
    victim.write_text("")
    # control, on the host: a root process with no capabilities exec's the copy and chowns again
    p = subprocess.run(
        ["capsh", "--caps=", f"--shell={suid}", "--", "chown", "1234", str(victim)],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0 and victim.stat().st_uid == 1234, p.stderr

    r = launch(how, state_root, b, "suid")
    assert r.code == 0 and "SUID-MARKER" not in r.out and "Operation not permitted" in r.out, r
    assert int(status_field(r.out, "CapEff"), 16) == 0 and status_field(r.out, "NoNewPrivs") == "1"


@pytest.mark.parametrize("how", RUNNERS)
def test_no_new_privileges_false_is_still_set(make_bundle, state_root: Path, how: str) -> None:
    cfg = base_config(probe("grep NoNewPrivs /proc/self/status"))
    cfg["process"]["noNewPrivileges"] = False
    r = launch(how, state_root, make_bundle(cfg), "nnp")
    assert r.code == 0 and status_field(r.out, "NoNewPrivs") == "1", r  # bwrap sets it unconditionally


# -- seccomp, nested user namespaces -------------------------------------------------------------


@pytest.mark.parametrize("how", RUNNERS)
def test_seccomp_section_is_enforced(make_bundle, state_root: Path, how: str) -> None:
    cfg = base_config(probe("grep Seccomp: /proc/self/status; mkdir /tmp/d && echo MKDIR-MARKER"))
    r = launch(how, state_root, make_bundle(cfg, name="ctl"), "ctl")  # control: the default filter allows it
    assert r.code == 0 and "MKDIR-MARKER" in r.out and status_field(r.out, "Seccomp") == "2", r
    cfg["linux"]["seccomp"] = {
        "defaultAction": "SCMP_ACT_ALLOW",
        "syscalls": [{"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO"}],
    }
    r = launch(how, state_root, make_bundle(cfg, name="evil"), "evil")
    assert r.code == 0 and "MKDIR-MARKER" not in r.out and "Operation not permitted" in r.out, r


NESTED = "unshare -U sh -c 'echo NESTED-MARKER'"


@pytest.mark.parametrize("how", RUNNERS)
def test_nested_user_namespace_only_when_asked(make_bundle, state_root: Path, how: str) -> None:
    cfg = base_config(probe(NESTED))
    cfg["annotations"]["sandbox-shim.allow-nested-userns"] = "true"
    r = launch(how, state_root, make_bundle(cfg, name="ctl"), "ctl")  # control: the config asks for it
    assert r.code == 0 and "NESTED-MARKER" in r.out, r
    r = launch(how, state_root, make_bundle(base_config(probe(NESTED)), name="evil"), "evil")
    assert r.code == 0 and "NESTED-MARKER" not in r.out and "Operation not permitted" in r.out, r


@pytest.mark.parametrize("how", RUNNERS)
def test_nested_user_namespace_refused_with_a_custom_seccomp_section(
    make_bundle, state_root: Path, how: str
) -> None:
    """A bundle's own section is stacked on the tenant filter: it narrows, never widens."""
    cfg = base_config(probe(NESTED + "; mkdir /tmp/d && echo MKDIR-MARKER"))
    cfg["linux"]["seccomp"] = {
        "defaultAction": "SCMP_ACT_ALLOW",
        "syscalls": [{"names": ["mkdir"], "action": "SCMP_ACT_ERRNO"}],
    }
    r = launch(how, state_root, make_bundle(cfg), "sc")
    assert r.code == 0 and "NESTED-MARKER" not in r.out and "MKDIR-MARKER" not in r.out, r
    assert r.out.count("Operation not permitted") == 2, r.out  # EPERM from each filter


# -- masked / read-only paths, /dev --------------------------------------------------------------


@pytest.mark.parametrize("how", RUNNERS)
def test_masked_and_readonly_paths_apply_in_storage_and_proc(make_bundle, state_root: Path, how: str) -> None:
    script = (
        "echo w > /storage/rw/f && echo RW-MARKER; echo w > /storage/ro/f && echo RO-MARKER; "
        "cat /storage/masked.txt; echo; echo x > /proc/self/comm && echo PROC-MARKER; "
        "echo 1 > /proc/sys/kernel/domainname && echo SYS-MARKER; cat /proc/keys | head -1"
    )
    cfg = base_config(probe(script))
    cfg["linux"]["maskedPaths"].append("/storage/masked.txt")
    cfg["linux"]["readonlyPaths"].append("/storage/ro")
    b = make_bundle(cfg)
    for d in ("rw", "ro"):
        (b / "storage" / d).mkdir()
    (b / "storage" / "masked.txt").write_text("MASKED-CONTENT\n")
    r = launch(how, state_root, b, "mr")
    assert r.code == 0 and "RW-MARKER" in r.out and "PROC-MARKER" in r.out, r  # controls
    assert "RO-MARKER" not in r.out and "SYS-MARKER" not in r.out, r.out
    assert r.out.count("Read-only file system") == 2, r.out
    assert "MASKED-CONTENT" not in r.out and not (b / "storage" / "ro" / "f").exists()
    assert (b / "storage" / "masked.txt").read_text() == "MASKED-CONTENT\n"  # masked, not changed


DEV_EXPECTED = {
    "core",
    "fd",
    "full",
    "null",
    "ptmx",
    "pts",
    "random",
    "shm",
    "stderr",
    "stdin",
    "stdout",
    "tty",
    "urandom",
    "zero",
}


@pytest.mark.parametrize("how", RUNNERS)
def test_dev_is_minimal(make_bundle, state_root: Path, how: str) -> None:
    host_disks = [d for d in os.listdir("/dev") if d.startswith(("vd", "sd", "nvme", "xvd"))][:2]
    reads = "; ".join(f"head -c1 /dev/{d} && echo DEV-BREACH" for d in [*host_disks, "mem", "kmsg", "port"])
    script = (
        f"echo x > /dev/null && echo NULL-MARKER; ls /dev | tr '\\n' ' '; echo; {reads}; "
        "mknod /tmp/disk b 8 0 && echo MKNOD-BREACH"
    )
    r = launch(how, state_root, make_bundle(base_config(probe(script))), "dev")
    assert r.code == 0 and "NULL-MARKER" in r.out, r
    assert set(r.out.splitlines()[1].split()) == DEV_EXPECTED
    assert "BREACH" not in r.out and "No such file or directory" in r.out, r.out
    assert "Operation not permitted" in r.out, r.out  # mknod(2) needs CAP_MKNOD


# -- README claims about what is NOT enforced ----------------------------------------------------


@pytest.mark.parametrize("how", RUNNERS)
def test_claim_sysfs_is_the_hosts_read_only_view(make_bundle, state_root: Path, how: str) -> None:
    cfg = base_config(
        probe(
            "ls /sys/class/net | tr '\\n' ' '; echo; echo 1 > /sys/kernel/uevent_helper && echo SYSFS-BREACH"
        )
    )
    cfg["mounts"].append(
        {
            "destination": "/sys",
            "type": "sysfs",
            "source": "sysfs",
            "options": ["nosuid", "noexec", "nodev", "ro"],
        }
    )
    r = launch(how, state_root, make_bundle(cfg), "sys")
    assert r.code == 0 and "SYSFS-BREACH" not in r.out and "Read-only file system" in r.out, r
    # the host's interfaces, not the sandbox's (loopback only): /sys is a read-only bind of the host's
    assert set(r.out.splitlines()[0].split()) == set(os.listdir("/sys/class/net"))


@pytest.mark.parametrize("how", RUNNERS)
def test_claim_tmpfs_noexec_is_not_enforced(make_bundle, state_root: Path, how: str) -> None:
    cfg = base_config(
        probe(
            "mkdir /tmp/x && cp /bin/busybox /tmp/x/busybox && "
            "/tmp/x/busybox echo EXEC-FROM-TMP; grep ' /tmp ' /proc/mounts"
        )
    )
    cfg["mounts"][2]["options"] = ["nosuid", "nodev", "noexec", "mode=1777"]
    r = launch(how, state_root, make_bundle(cfg), "nx")
    assert r.code == 0 and "EXEC-FROM-TMP" in r.out, r  # bwrap 0.8's --tmpfs takes no noexec
    assert "noexec" not in r.out.splitlines()[-1]


def test_claim_config_json_is_not_reread(make_bundle, state_root: Path, tmp_path: Path) -> None:
    """The plan is rendered at create: a config edited between create and start changes nothing."""
    b = make_bundle(base_config(probe("grep CapEff /proc/self/status")))
    sid = f"rr-{TAG}"
    assert (
        run_shim(
            state_root, "create", "--bundle", str(b), "--pid-file", str(tmp_path / "pid"), sid
        ).returncode
        == 0
    )
    cfg = json.loads((b / "config.json").read_text())
    _caps(cfg, "CAP_SYS_ADMIN")
    (b / "config.json").write_text(json.dumps(cfg))
    assert run_shim(state_root, "start", sid).returncode == 0
    assert wait_pid(int((tmp_path / "pid").read_text())) == 0
    assert int(status_field((b / "storage" / "out").read_text(), "CapEff"), 16) == 0
