"""Collect a started program's output under a wall-clock deadline, keeping at most a bounded amount.

``collect`` reads the program's stdout and stderr pipes (and feeds its stdin) with select(2) until
the program itself has exited — not until every holder of the pipes has closed them: a background
child that keeps stdout open neither extends the deadline nor turns an exit into a timeout.  After
the program exits, what is already in the pipes is drained for ``LINGER`` seconds, then the pipes
are closed.  Past the deadline the program is killed (``Started.kill``) and the result says so.

Each stream keeps its first ``limit`` bytes (``MAX_OUTPUT`` by default); the rest is read and
dropped, and the number of dropped bytes is reported, so a tenant writing without end costs the
caller no more than ``limit`` bytes of memory per stream.
"""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .mechanism import Started

MAX_OUTPUT = 16 * 1024 * 1024  # bytes kept per stream by default
LINGER = 0.25  # seconds of draining after the program exits
KILL_WAIT = 5.0  # seconds to wait for the program after killing it


class Collected:
    """What ``collect`` saw: output kept, bytes dropped per stream, whether the deadline passed."""

    def __init__(self) -> None:
        self.out = bytearray()
        self.err = bytearray()
        self.dropped = {"stdout": 0, "stderr": 0}
        self.timed_out = False


def collect(s: Started, input: bytes | None, deadline: float | None, limit: int = MAX_OUTPUT) -> Collected:
    """Drive ``s`` (its helper's pipes, as made by ``spawn`` with ``subprocess.PIPE``) to its end.

    Args:
        input: bytes for stdin (closed after), or None (stdin is not a pipe).
        deadline: ``time.monotonic()`` value to kill the program at, or None.
        limit: bytes kept per stream.

    Raises: ``LaunchFailed`` on Windows, where select(2) takes sockets only (POSIX-only for now).
    """
    if sys.platform == "win32":
        from .errors import LaunchFailed

        raise LaunchFailed("capturing output is POSIX-only: select(2) on pipes")
    got = Collected()
    p = s.helper
    readers: dict[int, tuple[bytearray, str]] = {}
    for stream, buf, name in ((p.stdout, got.out, "stdout"), (p.stderr, got.err, "stderr")):
        if stream is not None:
            readers[stream.fileno()] = (buf, name)
    pending = memoryview(input or b"")
    stdin = p.stdin
    writer = stdin.fileno() if stdin is not None else None
    if stdin is not None and not pending:
        stdin.close()
        writer = None
    if writer is not None:
        os.set_blocking(writer, False)
    exited_at: float | None = None
    killed_at: float | None = None
    while True:
        now = time.monotonic()
        if exited_at is None and p.poll() is not None:
            exited_at = now
        if exited_at is not None and (not readers or now - exited_at >= LINGER):
            break
        if killed_at is not None and now - killed_at >= KILL_WAIT:
            break
        if exited_at is None and killed_at is None and deadline is not None and now >= deadline:
            got.timed_out = True
            s.kill()
            killed_at = now
        wait = 0.05 if exited_at is not None or killed_at is not None else 0.5
        if deadline is not None and killed_at is None:
            wait = min(wait, max(0.0, deadline - now))
        ready_r, ready_w, _ = select.select(list(readers), [writer] if writer is not None else [], [], wait)
        for fd in ready_r:
            chunk = os.read(fd, 65536)
            buf, name = readers[fd]
            if not chunk:
                del readers[fd]
                continue
            room = max(0, limit - len(buf))
            buf += chunk[:room]
            got.dropped[name] += len(chunk) - min(room, len(chunk))
        if ready_w and writer is not None:
            try:
                pending = pending[os.write(writer, pending[:65536]) :]
            except (BrokenPipeError, BlockingIOError) as e:
                if isinstance(e, BrokenPipeError):
                    pending = pending[len(pending) :]
            if not pending:
                with contextlib.suppress(OSError):
                    if stdin is not None:
                        stdin.close()
                writer = None
    for stream in (p.stdin, p.stdout, p.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()
    try:
        p.wait(timeout=KILL_WAIT if killed_at is not None or exited_at is not None else 0.5)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    return got
