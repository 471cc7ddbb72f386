"""Execution checks: the three facts a run ends in are told apart (ARCHITECTURE §5).

``Completion`` — it ran and ended, whatever the status (an exit status of 127 is still a completion);
``CouldNotRun`` — it never ran (not found, not executable), which is not an exit status;
``LimitExceeded`` — a limit stopped it, and what it wrote before is kept.
"""

from __future__ import annotations

from ..helpers import FAIL, PASS, Outcome, check, control_failed, marker, split
from ..target import COMPLETED, COULD_NOT_RUN, LIMIT_EXCEEDED, ConformanceTarget

G = "Execution"


@check(G, "Completion: exit 127 with output is a completion")
def completion(t: ConformanceTarget) -> Outcome:
    m = marker()
    control = t.run_probe(None, split(m))
    if bad := control_failed(control, m):
        return bad
    m2 = marker()
    res = t.run_probe(None, f"{split(m2)}; echo to-stderr >&2; exit 127")
    facts = (res.outcome, res.exit_status, m2 in res.stdout, "to-stderr" in res.stderr)
    if facts == (COMPLETED, 127, True, True):
        return Outcome("ok", "reported", PASS, "Completion(exit 127) with stdout and stderr kept")
    return Outcome("ok", "misreported", FAIL, f"expected Completion(exit 127) with output, got {res.brief()}")


@check(G, "CouldNotRun: missing or non-executable program")
def could_not_run(t: ConformanceTarget) -> Outcome:
    m = marker()
    control = t.run_probe(None, "", argv=["/bin/echo", m])
    if bad := control_failed(control, m):
        return bad
    missing = t.run_probe(None, "", argv=["/nonexistent/program"])
    not_exec = t.run_probe(None, "", argv=["/etc/passwd"])
    got = [(r.outcome, r.reason) for r in (missing, not_exec)]
    if got == [(COULD_NOT_RUN, "not_found"), (COULD_NOT_RUN, "permission_denied")]:
        return Outcome("ok", "reported", PASS, "CouldNotRun(not_found), CouldNotRun(permission_denied)")
    return Outcome(
        "ok",
        "misreported",
        FAIL,
        f"expected CouldNotRun not_found/permission_denied, got {missing.brief(40)} / {not_exec.brief(40)}",
    )


@check(G, "LimitExceeded: partial output kept")
def limit_exceeded(t: ConformanceTarget) -> Outcome:
    m = marker()
    over = {"annotations": {"sandbox-shim.wall-clock-seconds": "1"}}
    control = t.run_probe(over, split(m))
    if bad := control_failed(control, m):
        return bad
    m2 = marker()
    res = t.run_probe(over, f"{split(m2)}; sleep 20", timeout=15)
    if res.outcome == LIMIT_EXCEEDED and res.limit_kind == "wall_clock" and m2 in res.stdout:
        return Outcome(
            "ok", "reported", PASS, f"LimitExceeded(wall_clock) after {res.duration:.2f} s, output kept"
        )
    return Outcome(
        "ok",
        "misreported",
        FAIL,
        f"expected LimitExceeded(wall_clock) with the output so far, "
        f"got {res.brief(60)} (marker {'kept' if m2 in res.stdout else 'lost'})",
    )
