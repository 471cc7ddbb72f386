"""Lifecycle checks (runtime-spec runtime.md "Lifecycle" and "Operations"; ORCHESTRATORS.md "The contract").

The control is the allowed path run to its end (the sandbox's program must print its marker); the breach
is the misuse an orchestrator can make, which must be refused with the named error class — or, for
delete of what is gone, tolerated (``delete --force`` is idempotent).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable

from ... import posix
from ..helpers import ERROR, FAIL, PASS, Outcome, check, marker, split
from ..target import BundleHandle, ConformanceTarget

G = "Lifecycle"


def _refused(fn: Callable[[], object], *names: str) -> str | None:
    """Run ``fn``; the class name of the error it raised when that is one of ``names``, '' when it raised
    something else (text in the result), None when it did not raise."""
    try:
        fn()
    except Exception as e:  # any runtime's error: matched by class name (sandbox_shim.errors names)
        return type(e).__name__ if type(e).__name__ in names else f"!{type(e).__name__}: {e}"
    return None


def _sandbox(t: ConformanceTarget, script: str) -> tuple[str, BundleHandle]:
    return t.new_id("lc"), t.bundle(overrides={"process": {"args": ["sh", "-c", script]}})


def _until(t: ConformanceTarget, sid: str, status: str, timeout: float = 10.0) -> str:
    deadline = time.monotonic() + timeout
    now = t.state(sid)
    while now != status and time.monotonic() < deadline:
        time.sleep(0.02)
        now = t.state(sid)
    return now


@check(G, "transitions created -> running -> stopped -> deleted; start when stopped")
def transitions(t: ConformanceTarget) -> Outcome:
    m = marker()
    sid, b = _sandbox(t, f"sleep 0.5; {split(m)}")
    seen = []
    try:
        t.create(sid, b)
        seen.append(t.state(sid))
        held = m not in t.output(sid)
        t.start(sid)
        seen.append(t.state(sid))
        code = t.wait(sid, 15)
        seen.append(t.state(sid))
        if seen != ["created", "running", "stopped"] or code != 0 or not held or m not in t.output(sid):
            return Outcome(
                "failed",
                "not run",
                ERROR,
                f"control: states {seen}, exit {code}, held before "
                f"start {held}, marker {'printed' if m in t.output(sid) else 'missing'}",
            )
        got = _refused(lambda: t.start(sid), "InvalidState")
        t.delete(sid)
        gone = _refused(lambda: t.state(sid), "SandboxNotFound")
    finally:
        with contextlib.suppress(Exception):
            t.delete(sid, force=True)
    if got != "InvalidState":
        return Outcome(
            "ok",
            "succeeded" if got is None else "unclear",
            FAIL,
            f"start of a stopped sandbox was not refused with InvalidState ({got})",
        )
    if gone != "SandboxNotFound":
        return Outcome("ok", "stopped", FAIL, f"state after delete did not say SandboxNotFound ({gone})")
    return Outcome(
        "ok", "stopped", PASS, "created, running, stopped (exit 0), deleted; start when stopped: InvalidState"
    )


@check(G, "duplicate id")
def duplicate_id(t: ConformanceTarget) -> Outcome:
    m = marker()
    sid, b = _sandbox(t, f"{split(m)}; sleep 30")
    _, b2 = _sandbox(t, "echo second")
    try:
        t.create(sid, b)
        t.start(sid)
        if not _printed(t, sid, m) or t.state(sid) != "running":
            return Outcome(
                "failed", "not run", ERROR, f"control: the first sandbox did not run ({t.state(sid)})"
            )
        got = _refused(lambda: t.create(sid, b2), "SandboxExists")
        still = t.state(sid)
    finally:
        with contextlib.suppress(Exception):
            t.delete(sid, force=True)
    if got != "SandboxExists":
        return Outcome("ok", "succeeded" if got is None else "unclear", FAIL, f"duplicate create: {got}")
    if still != "running":
        return Outcome("ok", "stopped", FAIL, f"the duplicate create disturbed the first sandbox ({still})")
    return Outcome("ok", "stopped", PASS, "SandboxExists; the first sandbox still runs")


def _printed(t: ConformanceTarget, sid: str, mark: str, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while mark not in t.output(sid) and time.monotonic() < deadline:
        if t.state(sid) == "stopped":
            break
        time.sleep(0.02)
    return mark in t.output(sid)


@check(G, "delete --force is idempotent")
def delete_idempotent(t: ConformanceTarget) -> Outcome:
    m = marker()
    sid, b = _sandbox(t, f"{split(m)}; sleep 30")
    t.create(sid, b)
    t.start(sid)
    if not _printed(t, sid, m) or t.state(sid) != "running":
        with contextlib.suppress(Exception):
            t.delete(sid, force=True)
        return Outcome("failed", "not run", ERROR, "control: the sandbox did not run")
    refused = _refused(lambda: t.delete(sid), "InvalidState")
    t.delete(sid, force=True)
    gone = _refused(lambda: t.state(sid), "SandboxNotFound")
    again = _refused(lambda: t.delete(sid, force=True))
    plain = _refused(lambda: t.delete(sid), "SandboxNotFound")
    problems = [
        f"delete of a running sandbox without force: {refused}" if refused != "InvalidState" else "",
        f"state after delete: {gone}" if gone != "SandboxNotFound" else "",
        f"second delete --force raised {again}" if again is not None else "",
        f"delete of an unknown id: {plain}" if plain != "SandboxNotFound" else "",
    ]
    problems = [p for p in problems if p]
    if problems:
        return Outcome("ok", "unclear", FAIL, "; ".join(problems))
    return Outcome(
        "ok",
        "tolerated",
        PASS,
        "running: InvalidState without force; --force twice: no error; unknown id: SandboxNotFound",
    )


@check(G, "state after the process died")
def state_after_death(t: ConformanceTarget) -> Outcome:
    m = marker()
    sid, b = _sandbox(t, f"{split(m)}; sleep 60")
    try:
        t.create(sid, b)
        t.start(sid)
        printed = _printed(t, sid, m)
        pid = t.host_pid(sid) if printed else 0
        if t.state(sid) != "running" or not printed or not pid:
            return Outcome("failed", "not run", ERROR, f"control: the sandbox did not run ({t.state(sid)})")
        os.kill(pid, posix.SIGKILL)  # dies behind the runtime's back (OOM killer, operator)
        now = _until(t, sid, "stopped")
        code = t.exit_status(sid)
        kill = _refused(lambda: t.kill(sid, signal.SIGTERM), "InvalidState")
        delete = _refused(lambda: t.delete(sid))
    finally:
        with contextlib.suppress(Exception):
            t.delete(sid, force=True)
    if now != "stopped":
        return Outcome("ok", "succeeded", FAIL, f"state still says {now} after its process died")
    if code != 128 + posix.SIGKILL or kill != "InvalidState" or delete is not None:
        return Outcome(
            "ok",
            "unclear",
            FAIL,
            f"stopped, but exit status {code} (want 137), kill: {kill}, delete without force: {delete}",
        )
    return Outcome("ok", "stopped", PASS, "stopped, exit status 137; kill: InvalidState; delete works")


@check(G, "reconcile after state loss (list_running)")
def reconcile(t: ConformanceTarget) -> Outcome:
    marks = [marker(), marker()]
    sids = []
    try:
        for mk in marks:
            sid, b = _sandbox(t, f"{split(mk)}; sleep 60")
            t.create(sid, b)
            t.start(sid)
            sids.append(sid)
        printed = all([_printed(t, s, mk) for mk, s in zip(marks, sids, strict=True)])
        before = t.list_running()
        if not printed or [before.get(s) for s in sids] != ["running", "running"]:
            return Outcome("failed", "not run", ERROR, f"control: list_running gave {before}")
        os.kill(t.host_pid(sids[1]), posix.SIGKILL)
        fresh = t.reopen()  # a new process on the same state: everything it knows comes from the mechanism
        deadline = time.monotonic() + 10
        after = fresh.list_running()
        while after.get(sids[1]) != "stopped" and time.monotonic() < deadline:
            time.sleep(0.05)
            after = fresh.list_running()
    finally:
        for s in sids:
            with contextlib.suppress(Exception):
                t.delete(s, force=True)
    got = [after.get(s) for s in sids]
    if got != ["running", "stopped"]:
        return Outcome("ok", "unclear", FAIL, f"after a restart list_running: {got}; want running, stopped")
    return Outcome("ok", "stopped", PASS, "a fresh instance sees the live one running, the dead one stopped")
