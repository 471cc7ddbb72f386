"""A running sandbox's cgroup counters, kept current while its program runs (``Mechanism.watch``).

A cgroup can vanish with its counters the moment its last process exits (systemd stops an emptied
transient scope and removes its directory), so a limit that killed the program would go unreported if
the counters were read only afterwards.  The manager's ``events_fd`` (v2: ``memory.events``, which
signals every change, cgroup-v2.rst) wakes the library's wait; the counters are read then, while the
cgroup still exists, and ``final()`` prefers what can still be read after the exit.  Everything here
is kernfs and cgroup-file knowledge: the library sees only the ``mechanism.CounterWatch`` protocol.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ....control import Facts
    from .base import CgroupManager


class EventsWatch:
    """``mechanism.CounterWatch`` for a Linux cgroup manager (v1 or v2; the v1 one has no fd)."""

    def __init__(self, cg: CgroupManager, first: Facts) -> None:
        self.cg, self.last = cg, first
        #: select(2) reports it as an exceptional condition when the counters change (None: v1)
        self.fd: int | None = cg.events_fd()
        self.seen = b""

    def changed(self) -> None:
        """Read the counters again if the event file's text changed.  Called on every wake of the
        wait, the program's exit included: the kernel counts an OOM kill before its victim dies, but
        the file's notification is rate-limited (20 ms, cgroup_file_notify), so the exit can come
        first — and the cgroup may be removed right after it."""
        if self.fd is None:
            return
        try:
            text = os.pread(self.fd, 4096, 0)  # re-arms the notification (kernfs: a read takes the event)
        except OSError:  # ENODEV: the cgroup is gone; the last reading stands
            self.close()
            return
        if text != self.seen:
            self.seen = text
            self._read()

    def final(self) -> Facts:
        """The counters now if the cgroup still exists, else the last ones read while it did."""
        self._read()
        return self.last

    def _read(self) -> None:
        """Read the counters; kept only if the cgroup still existed after the reading (files that
        vanished midway read as zeros, which must not replace a real count)."""
        now = self.cg.facts()
        if any(os.path.isdir(d) for d in self.cg.dirs()):
            self.last = now

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
