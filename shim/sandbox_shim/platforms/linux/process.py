"""Reading what bwrap records and finding the sandbox's processes (proc(5))."""

from __future__ import annotations

import json
import os
import time

TYPE_CHECKING = False  # typing is not loaded at run time: the lifecycle verbs import this module
if TYPE_CHECKING:
    from typing import Any


def read_status_file(path: str) -> list[dict[str, Any]]:
    """The JSON objects bwrap wrote to ``--json-status-fd`` (``child-pid`` first, ``exit-code`` last)."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError:
        return []
    out: list[dict[str, Any]] = []
    dec = json.JSONDecoder()
    i = 0
    while i < len(text):
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            break
        try:
            obj, i = dec.raw_decode(text, i)
        except ValueError:
            break  # a record still being written
        if isinstance(obj, dict):
            out.append(obj)
    return out


def status_field(path: str, key: str) -> Any:
    for obj in read_status_file(path):
        if key in obj:
            return obj[key]
    return None


def children(pid: int) -> list[int]:
    """Direct children of ``pid`` (/proc/PID/task/*/children, Linux 3.5+)."""
    out: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as fh:
                    out += [int(x) for x in fh.read().split()]
            except OSError:
                pass
    except OSError:
        pass
    return out


def blocked_on_fd(pid: int, fd: int) -> bool:
    """True while ``pid`` sits in read(2) on ``fd`` (first fields of /proc/PID/syscall: nr, arg0)."""
    try:
        with open(f"/proc/{pid}/syscall") as fh:
            parts = fh.read().split()
    except OSError:
        return False
    # read(2) is syscall 0 on x86_64 and 63 on aarch64
    return len(parts) > 1 and parts[0] in ("0", "63") and int(parts[1], 16) == fd


def wait_for(cond: Any, timeout: float, interval: float = 0.0005) -> bool:
    """Poll ``cond()`` until true or ``timeout`` seconds pass (interval grows to 10 ms)."""
    deadline = time.monotonic() + timeout
    while True:
        if cond():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
        interval = min(interval * 2, 0.01)
