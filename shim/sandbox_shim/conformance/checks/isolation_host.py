"""Isolation checks, network and processes: a tenant's probe reaches for the host's loopback, resolver,
raw sockets, processes and user namespaces.  The control-plane confinement profile flips the network
rule (egress is allowed there) and keeps the file-system one.
"""

from __future__ import annotations

import os
import shutil
import socket
import uuid

from ..helpers import (
    FAIL,
    PASS,
    Outcome,
    alive,
    check,
    control_failed,
    dns_server,
    host_process,
    judge,
    loopback_server,
    marker,
    overrides_host_network,
    overrides_permissive,
    probe,
    ptrace_tool,
    split,
)
from ..target import ConformanceTarget

G = "Isolation"


@check(G, "net: connect to a host loopback server")
def host_loopback(t: ConformanceTarget) -> Outcome:
    m, m2 = marker(), marker()
    with loopback_server(m) as port:
        control = t.run_probe(overrides_host_network(), f"nc -w 3 127.0.0.1 {port} </dev/null")
        if bad := control_failed(control, m):
            return bad
    with loopback_server(m2) as port:
        breach = t.run_probe(None, probe(f"nc -w 3 127.0.0.1 {port} </dev/null"))
    return judge(control, m, breach, m2, expect=("unreachable",))


@check(G, "net: DNS to a host resolver")
def dns(t: ConformanceTarget) -> Outcome:
    n = uuid.uuid4().int
    answer = f"10.{n % 250 + 1}.{n // 250 % 250 + 1}.{n // 62500 % 250 + 1}"
    with dns_server(answer) as server:
        control = t.run_probe(overrides_host_network(), f"nslookup conformance.test {server}")
        if bad := control_failed(control, answer):
            return bad
        breach = t.run_probe(None, probe(f"nslookup conformance.test {server}"))
    return judge(control, answer, breach, answer, expect=("unreachable",))


@check(G, "net: raw socket")
def raw_socket(t: ConformanceTarget) -> Outcome:
    m = "64 bytes from 127.0.0.1"
    control = t.run_control(overrides_permissive("CAP_NET_RAW"), "ping -c 1 -W 2 127.0.0.1")
    if bad := control_failed(control, m):
        return bad
    breach = t.run_probe(None, probe("ping -c 1 -W 2 127.0.0.1"))
    return judge(control, m, breach, m, expect=("denied",))


@check(G, "confinement: egress allowed (flipped)")
def confinement_egress(t: ConformanceTarget) -> Outcome:
    m = marker()
    with loopback_server(m) as port:
        with socket.create_connection(("127.0.0.1", port), timeout=3) as c:  # control: the server answers
            got = c.recv(256).decode(errors="replace")
        if m not in got:
            return Outcome("failed", "not run", "error", "the host's own connection to the server failed")
        permit = os.path.join(t.workdir, "confine", uuid.uuid4().hex[:8])
        os.makedirs(permit)
        res = t.confine_probe(f"nc -w 3 127.0.0.1 {port} </dev/null", permit)
    if m in res.stdout:
        return Outcome("ok", "allowed", PASS, "egress allowed under confinement, as the profile says")
    return Outcome("ok", "stopped", FAIL, f"confinement blocked egress it must allow ({res.brief()})")


@check(G, "confinement: sibling of the permit path")
def confinement_sibling(t: ConformanceTarget) -> Outcome:
    base = os.path.join(t.workdir, "confine", uuid.uuid4().hex[:8])
    permit, sibling = os.path.join(base, "permit"), os.path.join(base, "sibling")
    os.makedirs(permit)
    os.makedirs(sibling)
    m, m2 = marker(), marker()
    for d, mk in ((permit, m), (sibling, m2)):
        with open(os.path.join(d, "secret"), "w") as fh:
            fh.write(mk + "\n")
    control = t.confine_probe(f"cat {permit}/secret", permit)
    if bad := control_failed(control, m):
        return bad
    script = f"cat {sibling}/secret; cat {permit}/../sibling/secret; cat ../sibling/secret"
    breach = t.confine_probe(probe(script), permit)
    return judge(control, m, breach, m2)


@check(G, "proc: see host processes")
def see_host_processes(t: ConformanceTarget) -> Outcome:
    listing = "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done"
    wait = "i=0; until grep -q $n /proc/$!/cmdline || [ $i -gt 200 ]; do i=$((i+1)); usleep 10000; done"
    control = t.run_probe(None, f"n=$((86400 + 1)); sleep $n.5 & {wait}; {listing}; kill $!")
    if bad := control_failed(control, "86401.5"):
        return bad
    tag = str(uuid.uuid4().int % 10**6)
    with host_process(tag) as p:
        if not alive(p.pid):
            return Outcome("ok", "not run", "error", "the host process did not start")
        breach = t.run_probe(None, probe(listing + f"; ls -d /proc/{p.pid}"))
    return judge(control, "86401.5", breach, f"86400.{tag}", expect=())


@check(G, "proc: signal a host process")
def signal_host_process(t: ConformanceTarget) -> Outcome:
    m = marker()
    control = t.run_probe(None, f"sleep 60 & kill -9 $! && {split(m)}")
    if bad := control_failed(control, m):
        return bad
    m2 = marker()
    with host_process(str(uuid.uuid4().int % 10**6)) as p:
        breach = t.run_probe(None, probe(f"kill -9 {p.pid} && {split(m2)}"))
        survived = alive(p.pid)
    o = judge(control, m, breach, m2)
    if not survived:
        return Outcome("ok", "succeeded", FAIL, f"the host process {p.pid} died (signalled from the sandbox)")
    return o


@check(G, "proc: ptrace a host process")
def ptrace_host_process(t: ConformanceTarget) -> Outcome:
    tool = ptrace_tool(t)
    m = "attached to"
    permit = overrides_permissive("CAP_SYS_PTRACE")
    own = t.bundle(overrides=permit)
    shutil.copy(tool, os.path.join(own.storage, "ptrace-attach"))
    control = t.run_control(permit, f"sleep 60 & {own.storage_inside}/ptrace-attach $!; kill $!", bundle=own)
    if bad := control_failed(control, m):
        return bad
    attacker = t.bundle()
    shutil.copy(tool, os.path.join(attacker.storage, "ptrace-attach"))
    with host_process(str(uuid.uuid4().int % 10**6)) as p:
        breach = t.run_probe(None, probe(f"{attacker.storage_inside}/ptrace-attach {p.pid}"), bundle=attacker)
    return judge(control, m, breach, m)


@check(G, "proc: create a nested user namespace")
def nested_userns(t: ConformanceTarget) -> Outcome:
    m = marker()
    control = t.run_probe(
        {"annotations": {"sandbox-shim.allow-nested-userns": "true"}}, f"unshare -U true && {split(m)}"
    )
    if bad := control_failed(control, m):
        return bad
    m2 = marker()
    breach = t.run_probe(None, probe(f"unshare -U true && {split(m2)}"))
    return judge(control, m, breach, m2, expect=("denied",))
