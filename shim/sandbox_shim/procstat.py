"""``/proc/PID/stat``: the one reader of that file in the package (proc(5)).

``platforms/linux/enter.py`` (forked, or run standalone) imports it before any step.  Not psutil:
the lifecycle verbs and ``confine`` read this and psutil costs each ~40 ms to import, and its
create_time is rounded seconds, not ticks.  It imports nothing: confine's start-up (the placeholder
journal) reads it too.  ``state`` re-exports the three functions.
"""

from __future__ import annotations

__all__ = ["proc_start_time", "proc_stat", "proc_state"]


def proc_stat(pid: int) -> list[bytes] | None:
    """The fields of /proc/PID/stat after ``comm`` (proc(5): index 0 is field 3 ``state``, index 19 is
    field 22 ``starttime``), or None when ``pid`` is gone.  ``comm`` may hold spaces and parentheses,
    so the split starts after the *last* ``)``."""
    if pid <= 0:
        return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    return data[data.rfind(b")") + 2 :].split()


def proc_start_time(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot (proc(5) field 22), or None if gone."""
    fields = proc_stat(pid)
    return int(fields[19]) if fields and len(fields) > 19 else None


def proc_state(pid: int) -> str | None:
    """One-letter process state (R, S, Z, ...) from /proc/PID/stat, or None if gone."""
    fields = proc_stat(pid)
    return fields[0].decode() if fields else None
