"""``capture.collect``: the wait for a started program ends when its helper exits, not at a timeout.

The helper here is a plain child that closes its stdout and stderr and exits a moment later: once
both pipes are at end of file nothing is left to read, and an earlier ``collect`` then slept out a
fixed 0.5 s select(2) timeout before it looked at the helper again (a warm ``execute`` of
``/bin/true`` took ~550 ms).  The helper's exit must wake the wait.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from sandbox_shim.capture import collect

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pidfd_open(2) is Linux's")


class _Handle:
    """The part of ``mechanism.Started`` that ``collect`` drives."""

    def __init__(self, helper: subprocess.Popen[bytes]) -> None:
        self.helper = helper

    def kill(self) -> None:
        self.helper.kill()


def _helper(script: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        ["/bin/sh", "-c", script], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


@pytest.mark.parametrize("round_", range(3))
def test_exit_after_the_pipes_closed_ends_the_wait(round_: int) -> None:
    p = _helper("echo out; echo err >&2; exec >&- 2>&-; sleep 0.05")
    t0 = time.monotonic()
    got = collect(_Handle(p), None, None)
    took = time.monotonic() - t0
    assert (bytes(got.out), bytes(got.err), got.timed_out) == (b"out\n", b"err\n", False)
    assert p.returncode == 0
    assert took < 0.4, f"collect waited {took:.3f} s for a helper that exited after ~0.05 s"


def test_a_deadline_still_kills_a_helper_that_closed_its_pipes() -> None:
    p = _helper("exec >&- 2>&-; sleep 30")
    t0 = time.monotonic()
    got = collect(_Handle(p), None, time.monotonic() + 0.2)
    assert got.timed_out
    assert p.returncode is not None and p.returncode < 0
    assert time.monotonic() - t0 < 10
