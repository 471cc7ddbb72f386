"""Crash injection for tests: SIGKILL this process at its k-th side effect on the host.

Installed only when ``SANDBOX_SHIM_CRASH_AT`` is set (``cli.main`` checks the variable; nothing is
imported or hooked otherwise, so the verbs pay nothing).  A ``sys.addaudithook`` hook (PEP 578)
counts the audit events that change the host — creating, writing, renaming or removing files and
directories, making FIFOs, spawning processes, sending signals — and kills the process with SIGKILL
*before* the k-th one happens, so every step of a verb can be interrupted the way ``kill -9`` would.

  SANDBOX_SHIM_CRASH_AT=K        kill before side effect K (1-based)
  SANDBOX_SHIM_CRASH_COUNT=FILE  append one line per side effect seen (event name), to count them
"""

from __future__ import annotations

import os
import sys

from . import posix

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

#: audit events (Python docs "Audit events table") that change the host
EVENTS = frozenset(
    {
        "os.mkdir",
        "os.rmdir",
        "os.remove",
        "os.rename",
        "os.replace",
        "os.truncate",
        "os.symlink",
        "os.link",
        "os.chmod",
        "os.chown",
        "os.mkfifo",
        "os.mknod",
        "os.kill",
        "os.killpg",
        "os.fork",
        "os.posix_spawn",
        "os.exec",
        "os.system",
        "subprocess.Popen",
        "_posixsubprocess.fork_exec",
        "shutil.rmtree",
        "socket.bind",
        "socket.connect",
    }
)
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def _is_side_effect(event: str, args: tuple[Any, ...]) -> bool:
    if event in EVENTS:
        return True
    if event == "open" and len(args) >= 3:
        mode, flags = args[1], args[2]
        if isinstance(flags, int) and flags & _WRITE_FLAGS:
            return True
        return isinstance(mode, str) and any(c in mode for c in "wax+")
    return False


def install() -> None:
    """Install the counting hook (idempotent per process; children do not inherit it)."""
    at = int(os.environ.get("SANDBOX_SHIM_CRASH_AT", "0") or 0)
    count_file = os.environ.get("SANDBOX_SHIM_CRASH_COUNT")
    pid = os.getpid()
    seen = [0]
    busy = [False]

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if busy[0] or os.getpid() != pid or not _is_side_effect(event, args):
            return
        if count_file and args and args[0] == count_file:
            return
        busy[0] = True
        try:
            seen[0] += 1
            if count_file:
                fd = os.open(count_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                os.write(fd, f"{seen[0]} {event}\n".encode())
                os.close(fd)
            if seen[0] == at:
                os.kill(pid, posix.SIGKILL)
        finally:
            busy[0] = False

    sys.addaudithook(hook)
