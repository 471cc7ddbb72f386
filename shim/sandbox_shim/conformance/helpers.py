"""Shared helpers of the conformance suite: verdicts, the check registry, the control/breach judge and
host fixtures.

Rule of every check (ARCHITECTURE §8): a CONTROL runs the same probe where it is permitted and must succeed
and print a marker; only then is the BREACH attempted, and it must be stopped — no marker, and the expected
error class seen — by a probe that demonstrably ran (it printed ``STARTED`` first).  Verdicts:

* ``pass``  — control succeeded, breach stopped as expected;
* ``fail``  — the breach succeeded (the marker came out, or the host observed the effect);
* ``error`` — the control failed, or the breach probe never ran, or it stopped in an unexpected way:
  a dead process is never "denied";
* ``skip``  — a tool the check needs is missing (the reason is given).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import struct
import subprocess
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from .target import COMPLETED, ConformanceTarget, ProbeResult, ToolMissing

PASS, FAIL, ERROR, SKIP = "pass", "fail", "error", "skip"

#: the line every breach probe prints first: proof that the probe ran
STARTED = "STARTED"

#: error classes, recognised in what the probe printed (glibc strerror(3) wording and busybox's own)
ERROR_CLASSES: dict[str, str] = {
    "denied": r"operation not permitted|permission denied",  # EPERM, EACCES
    "absent": r"no such file or directory|no such process|can't open|can't cd|not found",  # ENOENT, ESRCH
    "read_only": r"read-only file system",  # EROFS
    "cross_device": r"cross-device link",  # EXDEV
    "unreachable": r"connection refused|network is unreachable|no route to host|timed out|can't resolve|"
    r"can't connect|no servers could be reached",  # ECONNREFUSED, ENETUNREACH, ...
}


@dataclass
class CheckResult:
    """One row of the report.

    Attributes:
        group, check: where it belongs and what it attacks.
        control: ``ok`` | ``failed`` | ``-`` (not run).
        breach: ``stopped`` | ``succeeded`` | ``not run`` | ``unclear``.
        verdict: ``pass`` | ``fail`` | ``error`` | ``skip``.
        detail: the evidence, one line.
    """

    group: str
    check: str
    control: str
    breach: str
    verdict: str
    detail: str

    def to_dict(self) -> dict[str, str]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Check:
    """A registered check: ``func(target) -> (control, breach, verdict, detail)`` via ``Outcome``."""

    group: str
    name: str
    func: Callable[[ConformanceTarget], Outcome]

    @property
    def id(self) -> str:
        return f"{self.group}::{self.name}"

    def run(self, target: ConformanceTarget) -> CheckResult:
        """Run the check; ``ToolMissing`` becomes ``skip``, any other exception ``error``."""
        try:
            o = self.func(target)
        except ToolMissing as e:
            o = Outcome("-", "not run", SKIP, str(e))
        except Exception as e:  # the suite reports; it never crashes on one check
            o = Outcome("-", "not run", ERROR, f"check raised {type(e).__name__}: {e}")
        return CheckResult(self.group, self.name, o.control, o.breach, o.verdict, o.detail)


@dataclass(frozen=True)
class Outcome:
    control: str
    breach: str
    verdict: str
    detail: str


REGISTRY: list[Check] = []


CheckFunc = Callable[[ConformanceTarget], "Outcome"]


def check(group: str, name: str) -> Callable[[CheckFunc], CheckFunc]:
    """Decorator: register ``func(target) -> Outcome`` as check ``name`` of ``group``; a group exists
    because a check names it (a new group module needs no other edit)."""

    def deco(fn: CheckFunc) -> CheckFunc:
        REGISTRY.append(Check(group, name, fn))
        return fn

    return deco


def _load_checks() -> None:
    """Import every module of ``conformance/checks/`` (each registers its checks on import with
    ``check``), in name order."""
    import importlib
    import pkgutil

    from . import checks

    for info in pkgutil.iter_modules(checks.__path__):
        importlib.import_module(f"{checks.__name__}.{info.name}")


def all_checks() -> list[Check]:
    """Every check, in group order (``groups``): a new group module needs no other edit."""
    order = groups()
    return sorted(REGISTRY, key=lambda c: order.index(c.group))


def groups() -> list[str]:
    """Every group that has a check in ``conformance/checks/`` (the one source of the list), in
    ``checks.ORDER`` (the order the report shows), a group not named there after those, by name."""
    from . import checks

    _load_checks()
    found = {c.group for c in REGISTRY}
    known = [g for g in checks.ORDER if g in found]
    return known + sorted(found - set(known))


def marker() -> str:
    """A fresh marker: text only a successful probe can print."""
    return f"MARK{uuid.uuid4().hex[:12]}"


def split(text: str) -> str:
    """Shell code that prints ``text`` without ``text`` appearing in the script (which sits in the
    sandbox's own /proc/*/cmdline): ``printf '%s%s\\n' 'MAR' 'K…'``."""
    return f"printf '%s%s\\n' '{text[:3]}' '{text[3:]}'"


def classes_in(text: str) -> list[str]:
    """The error classes whose wording appears in ``text``."""
    low = text.lower()
    return [name for name, rx in ERROR_CLASSES.items() if re.search(rx, low)]


def tail(text: str, n: int = 120) -> str:
    return " ".join(text.split())[-n:]


# -- judging ------------------------------------------------------------------------------------------
def control_failed(res: ProbeResult, mark: str) -> Outcome | None:
    """``error`` unless the control ran, exited 0 and printed ``mark``."""
    if res.ok and mark in res.stdout:
        return None
    return Outcome(
        "failed",
        "not run",
        ERROR,
        f"control did not succeed ({res.brief()}); a failing control makes the breach's result meaningless",
    )


def judge(
    control: ProbeResult,
    control_mark: str,
    breach: ProbeResult,
    breach_mark: str,
    expect: Iterable[str] = ("denied", "absent"),
    what: str = "",
) -> Outcome:
    """Verdict for a probe pair.  ``expect``: error classes that count as "stopped"; empty means the
    breach only has to run (print ``STARTED``) without the marker (e.g. a variable that is absent)."""
    bad = control_failed(control, control_mark)
    if bad:
        return bad
    expect = list(expect)
    out = breach.stdout + "\n" + breach.stderr
    if breach_mark in breach.stdout:
        return Outcome(
            "ok",
            "succeeded",
            FAIL,
            f"breach succeeded{': ' + what if what else ''} (marker printed; {breach.brief(80)})",
        )
    if breach.outcome != COMPLETED or STARTED not in breach.stdout:
        return Outcome("ok", "not run", ERROR, f"the breach probe did not run ({breach.brief()})")
    seen = classes_in(out)
    if expect and not set(seen) & set(expect):
        return Outcome(
            "ok",
            "unclear",
            ERROR,
            f"no marker, but not the expected error ({'/'.join(expect)}): {tail(out)!r}",
        )
    why = [c for c in seen if c in expect]
    if not why:
        n = len(breach.stdout.splitlines())
        return Outcome("ok", "stopped", PASS, f"absent: the probe ran ({n} lines of output), no marker")
    rx = "|".join(ERROR_CLASSES[c] for c in why)
    evidence = next(ln.strip() for ln in out.splitlines() if re.search(rx, ln.lower()))
    return Outcome("ok", "stopped", PASS, f"{'/'.join(why)}: {evidence}")


def probe(body: str) -> str:
    """A breach script: print ``STARTED``, then run ``body``."""
    return f"echo {STARTED}; {body}"


# -- host fixtures ------------------------------------------------------------------------------------
def host_secret(target: ConformanceTarget, mark: str) -> str:
    """A host file holding ``mark``, outside every bundle (under the target's workdir); its path."""
    d = os.path.join(target.workdir, "host", uuid.uuid4().hex[:8])
    os.makedirs(d)
    path = os.path.join(d, "secret")
    with open(path, "w") as fh:
        fh.write(mark + "\n")
    return path


@contextmanager
def host_process(tag: str) -> Iterator[subprocess.Popen[bytes]]:
    """A host ``sleep`` whose argv is ``sleep 86400.<tag digits>`` (found by that), killed afterwards."""
    exe = shutil.which("sleep") or "/bin/sleep"
    p = subprocess.Popen(
        [exe, f"86400.{tag}"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        env={"CONFORMANCE_HOST_MARK": "MARK" + tag},
    )
    try:
        yield p
    finally:
        p.kill()
        p.wait()


def alive(pid: int) -> bool:
    """True if ``pid`` runs and is not a zombie (proc(5) stat field 3)."""
    from ..state import proc_state

    return proc_state(pid) not in (None, "Z", "X")


@contextmanager
def loopback_server(payload: str, host: str = "127.0.0.1") -> Iterator[int]:
    """A TCP server on ``host`` (port chosen by the kernel) sending ``payload`` to each client; its port."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((host, 0))
    srv.listen(8)
    srv.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                c, _ = srv.accept()
            except OSError:
                continue
            with c:
                try:
                    c.sendall(payload.encode() + b"\n")
                except OSError:
                    pass

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield srv.getsockname()[1]
    finally:
        stop.set()
        t.join(2)
        srv.close()


@contextmanager
def dns_server(answer: str, host: str = "127.0.0.77") -> Iterator[str]:
    """A DNS responder (RFC 1035 §4) on ``host``:53/udp answering every A query with ``answer``; yields
    ``host``.  Raises ``ToolMissing`` when port 53 cannot be bound there."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.bind((host, 53))
    except OSError as e:
        s.close()
        raise ToolMissing(f"cannot bind a test DNS server on {host}:53: {e.strerror}") from e
    s.settimeout(0.2)
    stop = threading.Event()
    rdata = socket.inet_aton(answer)

    def serve() -> None:
        while not stop.is_set():
            try:
                q, addr = s.recvfrom(512)
            except OSError:
                continue
            if len(q) < 12:
                continue
            end = q.index(b"\0", 12) + 5  # question: name, type, class
            qtype = struct.unpack("!H", q[end - 4 : end - 2])[0]
            ans = b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 60, 4) + rdata if qtype == 1 else b""
            head = q[:2] + struct.pack("!HHHHH", 0x8180, 1, 1 if ans else 0, 0, 0)
            try:
                s.sendto(head + q[12:end] + ans, addr)
            except OSError:
                pass

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield host
    finally:
        stop.set()
        t.join(2)
        s.close()


PTRACE_C = r"""
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
int main(int argc, char **argv) {
    if (argc < 2) return 2;
    pid_t pid = (pid_t)atoi(argv[1]);
    if (ptrace(PTRACE_ATTACH, pid, 0, 0) != 0) { fprintf(stderr, "ptrace: %s\n", strerror(errno)); return 1; }
    waitpid(pid, 0, __WALL);
    printf("attached to %d\n", (int)pid);
    ptrace(PTRACE_DETACH, pid, 0, 0);
    return 0;
}
"""


def static_tool(target: ConformanceTarget, name: str, source: str) -> str:
    """Build the C ``source`` as a static binary ``name`` in the target's workdir (once); its host path.

    Raises:
        ToolMissing: no C compiler, or no static libc to link with.
    """
    out = os.path.join(target.workdir, name)
    if os.path.exists(out):
        return out
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise ToolMissing(f"no C compiler to build the static {name} probe (busybox has no such tool)")
    src = out + ".c"
    with open(src, "w") as fh:
        fh.write(source)
    p = subprocess.run([cc, "-static", "-O1", "-o", out, src], capture_output=True, text=True)
    if p.returncode != 0:
        raise ToolMissing(f"cannot build the static {name} probe: {tail(p.stderr)}")
    return out


def mount_root(path: str) -> str:
    """The mount point of the file system holding ``path`` (walk up while ``st_dev`` stays the same)."""
    path = os.path.realpath(path)
    dev = os.stat(path).st_dev
    while path != "/" and os.stat(os.path.dirname(path)).st_dev == dev:
        path = os.path.dirname(path)
    return path


def ptrace_tool(target: ConformanceTarget) -> str:
    """A static ``ptrace-attach PID`` binary (prints ``attached to PID`` once attached); its host path.
    Raises ``ToolMissing`` (see ``static_tool``)."""
    return static_tool(target, "ptrace-attach", PTRACE_C)


def overrides_permissive(*caps: str) -> dict[str, Any]:
    """OCI fragment for a control (``ConformanceTarget.run_control``): ``caps`` granted and a seccomp
    section that allows everything.  A tenant profile refuses it; the control runs outside that profile."""
    return {
        "process": {"capabilities": {k: list(caps) for k in ("bounding", "effective", "permitted")}},
        "linux": {"seccomp": {"defaultAction": "SCMP_ACT_ALLOW"}},
    }


def overrides_host_network() -> dict[str, Any]:
    """OCI fragment for a control: share the host's network (no network namespace, asked for explicitly)."""
    from ..template import default_config

    nss = [n for n in default_config()["linux"]["namespaces"] if n["type"] != "network"]
    return {"linux": {"namespaces": nss}, "annotations": {"sandbox-shim.network": "host"}}
