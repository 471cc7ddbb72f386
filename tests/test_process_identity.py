"""Process identity is a platform fact: the library asks the mechanism (``Mechanism.same_process``), and
the state store's "is that pid still there" works without ``/proc`` (macOS has none).

Before, ``api.destroy``'s last resort read ``/proc/PID/stat`` (never true on macOS: a process the
mechanism failed to stop was left running) and ``StateStore.sweep`` took a missing ``/proc/PID`` for a
dead creator (on macOS it removed a live concurrent create's half-made directory).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from sandbox_shim import api
from sandbox_shim.durable import MARKER
from sandbox_shim.state import Record, StateStore

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX processes")


class _Mechanism:
    """Only what ``_kill_by_identity`` asks: whether a pid is still the recorded process."""

    def __init__(self, answer: bool) -> None:
        self.answer = answer
        self.asked: list[tuple[int, float | None]] = []

    def same_process(self, pid: int, start: float | None) -> bool:
        self.asked.append((pid, start))
        return self.answer


def test_the_last_resort_kill_asks_the_mechanism_about_identity() -> None:
    child = subprocess.Popen(["sleep", "30"])
    try:
        rec = Record(id="x", bundle="/b", pid=child.pid, pid_start=12.5, init_pid=child.pid, init_start=12.5)
        no = _Mechanism(False)
        api._kill_by_identity(no, rec)  # type: ignore[arg-type]  # a stand-in with the one member used
        assert no.asked == [(child.pid, 12.5), (child.pid, 12.5)]
        assert child.poll() is None  # not the recorded process: left alone
        api._kill_by_identity(_Mechanism(True), rec)  # type: ignore[arg-type]
        assert child.wait(timeout=10) == -9
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_sweep_keeps_a_live_creators_directory_without_proc(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host without ``/proc`` (macOS, simulated): the live creator's ``.new-ID.PID`` stays, a dead
    one's goes."""
    store = StateStore(str(tmp_path / "root"))
    os.makedirs(store.root)
    live = tmp_path / "root" / f".new-x.{os.getppid()}"  # our parent: alive, and not us
    dead_pid = subprocess.Popen(["true"])
    dead_pid.wait()
    dead = tmp_path / "root" / f".new-x.{dead_pid.pid}"
    for d in (live, dead):
        d.mkdir()
        (d / MARKER).write_text("")
    real_exists = os.path.exists
    monkeypatch.setattr(os.path, "exists", lambda p: not str(p).startswith("/proc/") and real_exists(p))
    monkeypatch.setattr(sys, "platform", "darwin")
    store.sweep("x")
    assert live.is_dir() and not dead.exists()
