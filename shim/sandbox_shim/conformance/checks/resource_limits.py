"""Resource-limit checks: memory, pids, CPU time, wall clock and an output flood, each stopped AND reported
as its kind (ARCHITECTURE §5 ``LimitExceeded(kind)``).

The control runs the same program under a limit it fits in and must complete with its marker; the breach
runs it under a limit it cannot fit in and must end as ``limit_exceeded`` with the right ``limit_kind``.
A breach that completes with the marker means the limit was not enforced (``fail``); one that is stopped
but reported as anything else (an exit status, another kind) is ``fail`` too: the caller is owed the fact.
Sources: the cgroup memory and pids controllers of either version (kernel admin-guide cgroup-v1/,
cgroup-v2.rst), setrlimit(2) RLIMIT_CPU and RLIMIT_FSIZE (SIGXCPU, SIGXFSZ).
"""

from __future__ import annotations

from typing import Any

from ..helpers import ERROR, FAIL, PASS, Outcome, check, control_failed, split
from ..target import COMPLETED, LIMIT_EXCEEDED, ConformanceTarget, ProbeResult

G = "ResourceLimits"
MiB = 1 << 20
#: busybox awk doubling a string to 64 MiB: real anonymous memory, ~100 MiB at peak; prints 67108864
ALLOC_64M = "awk 'BEGIN{s=\"x\"; while (length(s) < 64*1024*1024) s = s s; print length(s)}'"


def _limits(
    memory: int | None = None,
    pids: int | None = None,
    rlimits: list[dict[str, Any]] | None = None,
    **settings: str,
) -> dict[str, Any]:
    res: dict[str, Any] = {}
    if memory:
        res["memory"] = {"limit": memory}
    if pids:
        res["pids"] = {"limit": pids}
    over: dict[str, Any] = {"linux": {"resources": res}}
    if rlimits is not None:
        over["process"] = {"rlimits": rlimits}
    if settings:
        over["annotations"] = {f"sandbox-shim.{k.replace('_', '-')}": v for k, v in settings.items()}
    return over


def judge_limit(control: ProbeResult, breach: ProbeResult, mark: str, kind: str) -> Outcome:
    """``pass`` when the breach ended as ``limit_exceeded`` of ``kind`` without the marker."""
    if bad := control_failed(control, mark):
        return bad
    if mark in breach.stdout and breach.outcome == COMPLETED:
        return Outcome("ok", "succeeded", FAIL, f"not enforced: the program completed ({breach.brief(60)})")
    if breach.outcome == LIMIT_EXCEEDED and breach.limit_kind == kind:
        return Outcome("ok", "stopped", PASS, f"LimitExceeded({kind}) after {breach.duration:.2f} s")
    if breach.outcome == LIMIT_EXCEEDED:
        return Outcome("ok", "stopped", FAIL, f"stopped but reported as {breach.limit_kind}, not {kind}")
    if breach.outcome == COMPLETED:
        return Outcome("ok", "stopped", FAIL, f"stopped but not reported as a limit: {breach.brief(80)}")
    return Outcome("ok", "not run", ERROR, f"the breach never ran: {breach.brief()}")


@check(G, "memory")
def memory(t: ConformanceTarget) -> Outcome:
    control = t.run_probe(_limits(memory=512 * MiB, pids=128), ALLOC_64M)
    if bad := control_failed(control, "67108864"):
        return bad
    breach = t.run_probe(_limits(memory=16 * MiB, pids=128), ALLOC_64M)
    return judge_limit(control, breach, "67108864", "memory")


@check(G, "pids")
def pids(t: ConformanceTarget) -> Outcome:
    script = "for i in $(seq {n}); do sleep 30.5 & done; {mark}"
    mark = "all forked"
    say = "echo all forked"
    control = t.run_probe(_limits(memory=256 * MiB, pids=32), script.format(n=8, mark=say))
    if bad := control_failed(control, mark):
        return bad
    breach = t.run_probe(_limits(memory=256 * MiB, pids=32), script.format(n=60, mark=say), timeout=30)
    return judge_limit(control, breach, mark, "pids")


@check(G, "cpu time")
def cpu_time(t: ConformanceTarget) -> Outcome:
    mark = "loop done"
    control = t.run_probe(
        _limits(cpu_time_seconds="1"), "i=0; while [ $i -lt 2000 ]; do i=$((i+1)); done; echo loop done"
    )
    if bad := control_failed(control, mark):
        return bad
    breach = t.run_probe(_limits(cpu_time_seconds="1"), "while :; do :; done; echo loop done", timeout=20)
    return judge_limit(control, breach, mark, "cpu")


@check(G, "wall clock")
def wall_clock(t: ConformanceTarget) -> Outcome:
    control = t.run_probe(_limits(wall_clock_seconds="2"), "sleep 0.1; " + split("MARKwallclock"))
    if bad := control_failed(control, "MARKwallclock"):
        return bad
    breach = t.run_probe(_limits(wall_clock_seconds="1"), "sleep 20; " + split("MARKwallclock"), timeout=15)
    return judge_limit(control, breach, "MARKwallclock", "wall_clock")


@check(G, "output flood (1 MiB)")
def output_flood(t: ConformanceTarget) -> Outcome:
    rl = [
        {"type": "RLIMIT_NOFILE", "soft": 1024, "hard": 1024},
        {"type": "RLIMIT_FSIZE", "soft": MiB, "hard": MiB},
    ]
    flood = "head -c {n} /dev/zero | tr '\\0' x; echo; " + split("MARKflood")
    control = t.run_probe(_limits(rlimits=rl), flood.format(n=512 * 1024))
    if bad := control_failed(control, "MARKflood"):
        return bad
    breach = t.run_probe(_limits(rlimits=rl), flood.format(n=16 * MiB), timeout=20)
    o = judge_limit(control, breach, "MARKflood", "output")
    if len(breach.stdout) > MiB + 4096:
        return Outcome("ok", "succeeded", FAIL, f"{len(breach.stdout)} bytes of output reached the caller")
    return o
