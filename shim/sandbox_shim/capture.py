"""Collect a started program's output under a wall-clock deadline, keeping at most a bounded amount.

``collect`` reads the program's stdout and stderr pipes (and feeds its stdin) with select(2) until
the program itself has exited — not until every holder of the pipes has closed them: a background
child that keeps stdout open neither extends the deadline nor turns an exit into a timeout.  After
the program exits, what is already in the pipes is drained for ``LINGER`` seconds, then the pipes
are closed.  Past the deadline the program is killed (``Started.kill``) and the result says so.
The helper's exit wakes the wait through a pidfd (pidfd_open(2)), so a program whose pipes reach end
of file before its helper is reaped costs no timeout.

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
    exit_fd = _exit_fd(p.pid)  # readable once the helper has exited: the wait ends then, not at a timeout
    try:
        _drive(s, got, readers, pending, writer, deadline, limit, exit_fd)
    finally:
        if exit_fd is not None:
            os.close(exit_fd)
    for stream in (p.stdin, p.stdout, p.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()
    try:
        p.wait(timeout=KILL_WAIT)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    return got


def _exit_fd(pid: int) -> int | None:
    """A pidfd of ``pid`` (pidfd_open(2), Linux 5.3+: readable once it has exited), or None."""
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    try:
        return int(opener(pid))
    except OSError:
        return None


def _drive(
    s: Started,
    got: Collected,
    readers: dict[int, tuple[bytearray, str]],
    pending: memoryview,
    writer: int | None,
    deadline: float | None,
    limit: int,
    exit_fd: int | None,
) -> None:
    """``collect``'s loop: read, write and wait until the helper has exited and its pipes are drained
    (at most ``LINGER`` seconds after the exit), or ``KILL_WAIT`` seconds after a kill."""
    p = s.helper
    stdin = p.stdin
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
        watch = list(readers)
        if exited_at is None:
            if exit_fd is not None:
                watch.append(exit_fd)  # the exit wakes the wait at once
            elif not readers:
                wait = 0.005  # no pidfd: poll the exit
        if deadline is not None and killed_at is None:
            wait = min(wait, max(0.0, deadline - now))
        ready_r, ready_w, _ = select.select(watch, [writer] if writer is not None else [], [], wait)
        for fd in ready_r:
            if fd == exit_fd:
                continue  # p.poll() above reaps it on the next turn
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
