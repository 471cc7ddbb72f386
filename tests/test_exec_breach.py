"""``exec`` attacked from inside, the way runc CVE-2019-5736 and CVE-2016-9962 were exploited.

The tenant (the sandbox's pid 1) watches /proc for every new process while ``exec`` runs, freezes each
one it catches with SIGSTOP before it can execve, and tries what those exploits did: read
/proc/PID/exe (the host's interpreter binary, then open it for writing), list /proc/PID/fd (host file
descriptors) and read its seccomp/no_new_privs state.  A control first: the same probes against the
tenant's own background process succeed, so "denied" is never a crashed probe.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import base_config
from sandbox_shim import api
from sandbox_shim.execution import execute
from sandbox_shim.mechanism import Sandbox

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.geteuid() != 0, reason="needs Linux, root, bwrap and cgroups"
)

# busybox ash: the watch loop uses builtins only (glob, read, case, kill), so it forks nothing itself
TENANT = r"""
sleep 600 & bg=$!
sleep 0.2
readlink /proc/$bg/exe > /storage/control-exe 2>&1 && echo ok >> /storage/control-exe
(exec 3</proc/$bg/fd/1) > /storage/control-fd 2>&1 && echo ok >> /storage/control-fd
kill -STOP $bg; sleep 0.2; grep State: /proc/$bg/status > /storage/control-stop; kill -CONT $bg
: > /storage/ready
while [ ! -e /storage/stop ]; do
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    [ "$p" = 1 ] || [ "$p" = "$bg" ] && continue
    c=; read -r c < $d/comm 2>/dev/null
    case "$c" in python*) ;; *) continue;; esac
    kill -STOP $p 2>/dev/null || continue
    st=; n=0
    while [ "$st" != T ] && [ $n -lt 200 ]; do
      while read -r k v rest; do [ "$k" = State: ] && st=$v; done < $d/status 2>/dev/null
      n=$((n+1))
    done
    c=; read -r c < $d/comm 2>/dev/null
    case "$c" in python*) ;; *) kill -CONT $p 2>/dev/null; continue;; esac
    echo "caught $p $c $st" >> /storage/log
    readlink $d/exe >> /storage/log 2>&1 && echo "BREACH exe-link $p" >> /storage/log
    (exec 3>>$d/exe) 2>/dev/null && echo "BREACH exe-write $p" >> /storage/log
    head -c 4 $d/exe > /dev/null 2>&1 && echo "BREACH exe-read $p" >> /storage/log
    for f in $d/fd/*; do
      (exec 3<$f) 2>/dev/null && echo "BREACH fd-open $f $(readlink $f)" >> /storage/log
    done
    ls $d/cwd/ > /dev/null 2>&1 && echo "BREACH cwd $p" >> /storage/log
    ls $d/root/ > /dev/null 2>&1 && echo "BREACH root $p" >> /storage/log
    grep -E '^(Seccomp|NoNewPrivs|CapEff|CapBnd):' $d/status | tr '\n\t' '  ' >> /storage/log
    echo >> /storage/log
    kill -CONT $p 2>/dev/null
  done
done
kill $bg
"""


@pytest.fixture
def tenant(make_bundle: Any, state_root: Path) -> Iterator[tuple[Any, str, Path]]:
    bundle = make_bundle(base_config(["sh", "-c", TENANT]))
    mech = api.default_mechanism(str(state_root))
    sid = f"cve-{uuid.uuid4().hex[:8]}"
    api.provision(mech, Sandbox(sid, str(bundle)))
    api.start(mech, sid)
    try:
        yield mech, sid, bundle / "storage"
    finally:
        api.destroy(mech, sid, force=True)


def test_exec_exposes_no_host_executable_or_fd(tenant: tuple[Any, str, Path]) -> None:
    mech, sid, storage = tenant
    deadline = time.monotonic() + 20
    while not (storage / "ready").exists():
        assert time.monotonic() < deadline, "the tenant never got ready"
        time.sleep(0.02)
    # control: the probes work against a process the tenant may inspect (its own)
    assert (storage / "control-exe").read_text().split() == ["/bin/busybox", "ok"]
    assert (storage / "control-fd").read_text().split() == ["ok"]
    assert "stopped" in (storage / "control-stop").read_text()
    for _ in range(60):
        done = execute(mech, sid, ("true", []), timeout=30)
        assert done.exit_status == 0
    (storage / "stop").write_text("")
    log = (storage / "log").read_text() if (storage / "log").exists() else ""
    caught = [line for line in log.splitlines() if line.startswith("caught ")]
    print(f"tenant caught {len(caught)} exec helper process(es) before their execve")
    assert "BREACH" not in log, log
    for entry in log.split("caught ")[1:]:
        # whatever it caught was already confined: filtered, no_new_privs, no capabilities
        words = entry.split()
        fields = dict(zip(words[3::2], words[4::2], strict=False))
        assert (fields.get("Seccomp:"), fields.get("NoNewPrivs:")) == ("2", "1"), entry
        assert fields.get("CapEff:") == fields.get("CapBnd:") == "0000000000000000", entry
