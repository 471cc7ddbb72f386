"""Isolation checks, file system and environment: a tenant's probe attacks its neighbours and the host.

Bundles are siblings under one bundles root (ARCHITECTURE §3), so the next tenant's storage is one
``..`` away on the host; every check below plants a marker where the attacker must not reach and runs the
same probe first where it is allowed (the control).  Network and process checks: ``isolation_host``.
"""

from __future__ import annotations

import os
import uuid

from ..helpers import (
    FAIL,
    PASS,
    Outcome,
    check,
    control_failed,
    host_process,
    host_secret,
    judge,
    marker,
    overrides_permissive,
    probe,
    split,
)
from ..target import COMPLETED, BundleHandle, ConformanceTarget, ProbeResult, ToolMissing

G = "Isolation"


def _victim(t: ConformanceTarget, mark: str) -> BundleHandle:
    v = t.bundle(t.new_id("victim"))
    with open(os.path.join(v.storage, "secret"), "w") as fh:
        fh.write(mark + "\n")
    return v


def _own_secret_control(
    t: ConformanceTarget, script_for: str = "cat {s}/secret"
) -> tuple[BundleHandle, str, ProbeResult]:
    """A bundle with its own ``storage/secret``; the control reads it with ``script_for`` (``{s}``: the
    storage path inside, ``{base}``: its last component)."""
    m = marker()
    b = _victim(t, m)
    res = t.run_probe(
        None, script_for.format(s=b.storage_inside, base=os.path.basename(b.storage_inside)), bundle=b
    )
    return b, m, res


@check(G, "fs: read a sibling's storage by its host path")
def sibling_read(t: ConformanceTarget) -> Outcome:
    _, m, control = _own_secret_control(t)
    if bad := control_failed(control, m):
        return bad
    m2 = marker()
    victim = _victim(t, m2)
    breach = t.run_probe(None, probe(f"cat {victim.storage}/secret"))
    return judge(control, m, breach, m2)


@check(G, "fs: write a sibling's storage")
def sibling_write(t: ConformanceTarget) -> Outcome:
    m = marker()
    own = t.bundle()
    s = own.storage_inside
    control = t.run_probe(None, f"echo {m} > {s}/written && cat {s}/written", bundle=own)
    if not os.path.exists(os.path.join(own.storage, "written")):
        control.exit_status = control.exit_status or 1  # the host must see the write, or it proves nothing
    if bad := control_failed(control, m):
        return bad
    victim = t.bundle(t.new_id("victim"))
    attacker = t.bundle()
    rel = os.path.relpath(victim.storage, attacker.storage)
    m2 = marker()
    breach = t.run_probe(
        None,
        probe(
            f"cd {attacker.storage_inside}; echo {m2[3:]} > {victim.storage}/pwned; "
            f"echo {m2[3:]} > {rel}/pwned2; cat {victim.storage}/pwned {rel}/pwned2 "
            f"| sed s/^/MAR/"
        ),
        bundle=attacker,
    )
    planted = [n for n in ("pwned", "pwned2") if os.path.exists(os.path.join(victim.storage, n))]
    o = judge(control, m, breach, m2)
    if planted and o.verdict != FAIL:
        return Outcome("ok", "succeeded", FAIL, f"the host sees {planted} written into the sibling's storage")
    return o


@check(G, "fs: '..' out of storage to a sibling")
def dotdot(t: ConformanceTarget) -> Outcome:
    _, m, control = _own_secret_control(t, "cd {s} && cat ../{base}/secret")
    if bad := control_failed(control, m):
        return bad
    m2 = marker()
    victim = _victim(t, m2)
    attacker = t.bundle()
    rel = os.path.relpath(victim.storage, attacker.storage)
    ups = "../" * 12
    s, host = attacker.storage_inside, victim.storage.lstrip("/")
    script = f"cd {s} && cat {rel}/secret; cat {s}/{rel}/secret; cat {ups}{host}/secret"
    breach = t.run_probe(None, probe(script), bundle=attacker)
    return judge(control, m, breach, m2)


@check(G, "fs: absolute host path")
def absolute_host_path(t: ConformanceTarget) -> Outcome:
    _, m, control = _own_secret_control(t)
    if bad := control_failed(control, m):
        return bad
    m2 = marker()
    path = host_secret(t, m2)
    breach = t.run_probe(None, probe(f"cat {path}; ls -d {os.path.dirname(path)}"))
    return judge(control, m, breach, m2)


@check(G, "fs: symlink planted in storage pointing out")
def planted_symlink(t: ConformanceTarget) -> Outcome:
    m = marker()
    own = _victim(t, m)
    os.symlink(f"{own.storage_inside}/secret", os.path.join(own.storage, "abs-link"))
    os.symlink("secret", os.path.join(own.storage, "rel-link"))
    s = own.storage_inside
    control = t.run_probe(None, f"cat {s}/abs-link {s}/rel-link", bundle=own)
    if bad := control_failed(control, m):
        return bad
    m2 = marker()
    victim = _victim(t, m2)
    path = host_secret(t, m2)
    attacker = t.bundle()
    os.symlink(path, os.path.join(attacker.storage, "abs-link"))
    os.symlink(
        os.path.relpath(os.path.join(victim.storage, "secret"), attacker.storage),
        os.path.join(attacker.storage, "rel-link"),
    )
    s = attacker.storage_inside
    breach = t.run_probe(None, probe(f"cat {s}/abs-link; cat {s}/rel-link"), bundle=attacker)
    return judge(control, m, breach, m2)


@check(G, "fs: hard link to a host file")
def hard_link(t: ConformanceTarget) -> Outcome:
    _, m, control = _own_secret_control(t, "ln {s}/secret {s}/hl && cat {s}/hl")
    if bad := control_failed(control, m):
        return bad
    m2 = marker()
    path = host_secret(t, m2)
    victim = _victim(t, m2)
    attacker = t.bundle()
    s = attacker.storage_inside
    breach = t.run_probe(
        None,
        probe(f"ln {path} {s}/hl && cat {s}/hl; ln {victim.storage}/secret {s}/hl2 && cat {s}/hl2"),
        bundle=attacker,
    )
    return judge(control, m, breach, m2, expect=("denied", "absent", "cross_device"))


@check(G, "fs: /proc/1/root")
def proc_1_root(t: ConformanceTarget) -> Outcome:
    _, m, control = _own_secret_control(t, "cat /proc/1/root{s}/secret")
    if bad := control_failed(control, m):
        return bad
    m2 = marker()
    path = host_secret(t, m2)
    breach = t.run_probe(None, probe(f"cat /proc/1/root{path}"))
    return judge(control, m, breach, m2)


@check(G, "fs: /proc/self/cwd")
def proc_self_cwd(t: ConformanceTarget) -> Outcome:
    _, m, control = _own_secret_control(t, "cd {s} && cat /proc/self/cwd/secret")
    if bad := control_failed(control, m):
        return bad
    m2 = marker()
    path = host_secret(t, m2)
    attacker = t.bundle()
    up = "../" * 12
    script = f"cd {attacker.storage_inside} && cat /proc/self/cwd/{up}{path.lstrip('/')}"
    breach = t.run_probe(None, probe(script), bundle=attacker)
    return judge(control, m, breach, m2)


@check(G, "fs: /proc/<host pid>/root")
def proc_host_pid_root(t: ConformanceTarget) -> Outcome:
    _, m, control = _own_secret_control(t, "sleep 60 & cat /proc/$!/root{s}/secret; kill $!")
    if bad := control_failed(control, m):
        return bad
    m2 = marker()
    path = host_secret(t, m2)
    with host_process(str(uuid.uuid4().int % 10**6)) as p:
        breach = t.run_probe(None, probe(f"cat /proc/{p.pid}/root{path}"))
    return judge(control, m, breach, m2)


def _privileged_pair(t: ConformanceTarget, body: str, cap: str = "CAP_SYS_ADMIN") -> Outcome:
    """Control: ``body`` with ``cap`` and no seccomp filter, outside the profile under test
    (``run_control``: the tenant profile refuses ``cap``); breach: ``body`` under the default profile."""
    m = marker()
    control = t.run_control(overrides_permissive(cap), f"{body} && {split(m)}")
    if bad := control_failed(control, m):
        return bad
    m2 = marker()
    breach = t.run_probe(None, probe(f"{body} && {split(m2)}"))
    return judge(control, m, breach, m2, expect=("denied",))


@check(G, "fs: mount")
def mount(t: ConformanceTarget) -> Outcome:
    return _privileged_pair(t, "mount -t tmpfs none /tmp")


@check(G, "fs: umount")
def umount(t: ConformanceTarget) -> Outcome:
    return _privileged_pair(t, "umount /tmp")


@check(G, "fs: pivot_root")
def pivot_root(t: ConformanceTarget) -> Outcome:
    return _privileged_pair(t, "cd /tmp && mkdir -p old && pivot_root . old")


@check(G, "fs: write to a read-only rootfs")
def readonly_rootfs(t: ConformanceTarget) -> Outcome:
    name = f"/root/.conformance-{uuid.uuid4().hex[:8]}"
    m = marker()
    control = t.run_probe({"root": {"readonly": False}}, f"echo {m[3:]} > {name} && sed s/^/MAR/ {name}")
    if bad := control_failed(control, m):
        return bad
    m2 = marker()
    breach = t.run_probe(
        {"root": {"readonly": True}}, probe(f"echo {m2[3:]} > {name} && sed s/^/MAR/ {name}")
    )
    if os.path.exists(name):  # a runtime that runs on the host wrote the host's /root: undo, and say so
        with open(name) as fh:
            leaked = m2[3:] in fh.read()
        os.unlink(name)
        if leaked:
            return Outcome("ok", "succeeded", FAIL, f"the breach wrote {name} on the host")
    return judge(control, m, breach, m2, expect=("read_only", "denied"))


@check(G, "fs: masked paths are unreadable")
def masked_paths(t: ConformanceTarget) -> Outcome:
    if not os.path.exists("/proc/timer_list"):
        raise ToolMissing("this kernel has no /proc/timer_list to mask")
    """Control: outside the profile (``run_control``: a plain proc mount) the probe reads
    /proc/timer_list.  Breach: a tenant bundle whose ``maskedPaths`` is empty reads it: the kernel-file
    floor masks it whatever the config lists (README "Security")."""
    m = "Timer List Version"
    empty: dict[str, dict[str, list[str]]] = {"linux": {"maskedPaths": []}}
    control = t.run_control(empty, "head -c 200 /proc/timer_list")
    if bad := control_failed(control, m):
        return bad
    breach = t.run_probe(empty, probe("head -c 200 /proc/timer_list"))
    return judge(control, m, breach, m, expect=())


@check(G, "env: credential-named host variable absent inside")
def env_host_credential(t: ConformanceTarget) -> Outcome:
    m = marker()
    control = t.run_probe({"process": {"env": ["PATH=/bin:/usr/bin", f"CONFORMANCE_VALUE={m}"]}}, "env")
    if bad := control_failed(control, m):
        return bad
    m2 = marker()
    name = "CONFORMANCE_API_TOKEN"
    os.environ[name] = m2
    try:
        breach = t.run_probe(None, probe("env; cat /proc/self/environ | tr '\\0' '\\n'"))
    finally:
        os.environ.pop(name, None)
    return judge(control, m, breach, m2, expect=())


@check(G, "env: credential-named variable in config refused")
def env_config_credential(t: ConformanceTarget) -> Outcome:
    m = marker()
    control = t.run_probe({"process": {"env": ["PATH=/bin:/usr/bin", f"CONFORMANCE_VALUE={m}"]}}, "env")
    if bad := control_failed(control, m):
        return bad
    m2 = marker()
    env = ["PATH=/bin:/usr/bin", f"CONFORMANCE_API_TOKEN={m2}"]
    breach = t.run_probe({"process": {"env": env}}, probe("env"))
    if m2 in breach.stdout:
        return Outcome("ok", "succeeded", FAIL, "the credential-named variable reached the sandbox")
    if breach.outcome != COMPLETED:
        return Outcome(
            "ok",
            "stopped",
            PASS,
            f"refused before it ran: {breach.reason}: {breach.stderr.split(';')[0][:90]}",
        )
    return judge(control, m, breach, m2, expect=())
