"""Helpers of scripts/bench: processes (proc(5)): subreaper, waiting, reaping, trees, PSS."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path


def set_subreaper() -> None:
    """prctl(PR_SET_CHILD_SUBREAPER): sandboxes' monitors/inits re-parent to us when create exits."""
    ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)


def wait_pid(pid: int, timeout: float = 30.0) -> int:
    """Reap ``pid`` (a child or a re-parented descendant); its exit code.  Raises TimeoutError."""
    return wait_usage(pid, timeout)[0]


def wait_usage(pid: int, timeout: float = 30.0) -> tuple[int, float]:
    """Reap ``pid`` (a child or a re-parented descendant): (its exit code, the CPU ms it and the
    descendants it reaped used: wait4(2) rusage).  Woken by a pidfd (pidfd_open(2)), not by sleeps.
    Raises TimeoutError."""
    import select

    try:
        fd = os.pidfd_open(pid)
    except OSError:
        fd = -1
    try:
        if fd >= 0 and not select.select([fd], [], [], timeout)[0]:
            raise TimeoutError(f"pid {pid} did not exit within {timeout} s")
        _, status, ru = os.wait4(pid, 0)
    finally:
        if fd >= 0:
            os.close(fd)
    return os.waitstatus_to_exitcode(status), (ru.ru_utime + ru.ru_stime) * 1000


def children_cpu_ms() -> float:
    """CPU ms of every descendant this process has reaped so far (getrusage(2) RUSAGE_CHILDREN)."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (ru.ru_utime + ru.ru_stime) * 1000


def reap_all() -> None:
    """Reap every child that has already exited (never blocks)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def process_table() -> dict[int, tuple[int, str]]:
    """pid -> (ppid, comm) for every process (proc(5) /proc/PID/stat)."""
    out = {}
    for e in os.listdir("/proc"):
        if e.isdigit():
            try:
                stat = Path(f"/proc/{e}/stat").read_text()
            except OSError:
                continue
            comm = stat[stat.index("(") + 1 : stat.rindex(")")]
            out[int(e)] = (int(stat[stat.rindex(")") + 2 :].split()[1]), comm)
    return out


def tree(pid: int, table: dict[int, tuple[int, str]]) -> list[int]:
    """``pid`` and all its descendants that exist in ``table``."""
    kids: dict[int, list[int]] = {}
    for p, (pp, _) in table.items():
        kids.setdefault(pp, []).append(p)
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        if p in table:
            out.append(p)
            todo += kids.get(p, [])
    return out


def pss_kib(pid: int) -> int:
    """Proportional set size of ``pid`` in KiB (/proc/PID/smaps_rollup), 0 if gone."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def is_python(pid: int, comm: str) -> bool:
    """Whether ``pid`` runs a Python interpreter (its exe or comm)."""
    try:
        exe = os.path.basename(os.readlink(f"/proc/{pid}/exe"))
    except OSError:
        exe = ""
    return exe.startswith("python") or comm.startswith("python")
