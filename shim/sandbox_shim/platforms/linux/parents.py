"""Parent cgroups the runtime made: the shared list, its lock, and one create's record of its cgroups.

A nested ``cgroupsPath`` (``/a/b/c``) makes the parents ``/a`` and ``/a/b`` where they do not exist.
They are shared between sandboxes of any state root, so the ones a ``create`` made are listed, each
with the inode it had when made (``(path, st_ino)``), in one file (``PARENTS`` under ``parents_dir``:
host-wide for root, ``CGROUP_PARENTS_DIR``, else the state root's ``.cgroups``), changed only under
``lock``.  The last sandbox to go removes them once empty, and only while each is still that directory
(one removed and made again by someone else is theirs: ``residue.remove``).

A parent joins the list only once create has confirmed it made it (``CreateRecord.confirmed``): a
create killed before that never owns a directory that appears there later; its own ``delete --force``
removes what it planned, if empty.  Kernel doc: admin-guide/cgroup-v2.rst (rmdir of a cgroup with no
tasks and no children).  This bookkeeping is the Linux mechanism's: the library only writes the record
it is handed (``ProvisionOptions.on_record``), whatever its keys.
"""

from __future__ import annotations

import contextlib
import os

from ... import fastjson as json
from ... import posix
from ...durable import write_atomic
from ...errors import StateUnwritable

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from typing import Any

    from ...mechanism import HostRecord

#: the list's file name, in ``parents_dir``
PARENTS = ".parents"
#: the host-wide list of root (``parents_dir``)
CGROUP_PARENTS_DIR = "/run/sandbox-shim/cgroup-parents"


def parents_dir(root: str) -> str:
    """Where the list lives for the state root ``root``: host-wide for root (``CGROUP_PARENTS_DIR``:
    nested parents are shared by every state root on the host, so the last sandbox to leave one
    removes it whichever root made it), else ``root/.cgroups``."""
    return CGROUP_PARENTS_DIR if posix.geteuid() == 0 else os.path.join(root, ".cgroups")


@contextlib.contextmanager
def lock(directory: str) -> Iterator[None]:
    """Exclusive ``flock(2)`` over the list in ``directory`` (made 0700 if missing), on an fd numbered
    3 or above (a caller started with fd 0-2 closed never hands it to a sandbox as its stdio).

    Raises:
        StateUnwritable: the directory cannot be made or opened.
    """
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        fd = os.open(directory, os.O_RDONLY | posix.O_DIRECTORY | posix.O_CLOEXEC)
        if fd <= 2:
            low, fd = fd, -1
            try:
                fd = posix.dup_above(low, 3)
            finally:
                os.close(low)
    except OSError as e:
        raise StateUnwritable(directory, e.errno or 0, e.strerror or str(e)) from e
    try:
        posix.flock_exclusive(fd)
        yield
    finally:
        os.close(fd)


def read(directory: str) -> list[tuple[str, int]]:
    """The listed parents, ``(path, st_ino)`` each; ``[]`` when there is no list or it is unreadable."""
    try:
        with open(os.path.join(directory, PARENTS), encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError):
        return []
    if not isinstance(doc, list):
        return []
    return [
        (e[0], e[1])
        for e in doc
        if isinstance(e, list) and len(e) == 2 and isinstance(e[0], str) and isinstance(e[1], int)
    ]


def write(directory: str, parents: list[tuple[str, int]]) -> None:
    """Replace the list (sorted, without duplicates; the file is removed when empty), durably.

    Raises:
        StateUnwritable: the file system refused the change (the old list is kept).
    """
    path = os.path.join(directory, PARENTS)
    if parents:
        write_atomic(path, json.dumps(sorted([list(p) for p in set(parents)])))
        return
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as e:
        if os.path.lexists(path):  # a read-only file system says EROFS even for a missing name
            raise StateUnwritable(path, e.errno or 0, e.strerror or str(e)) from e


class CreateRecord:
    """One create's record of its cgroups, written through the library's ``on_record`` hook.

    ``planned(record)`` takes the list's ``lock`` and writes the plan (``residue.planned``: leaves and
    missing parents) before any directory is made, so no delete removes a shared parent meanwhile;
    then exactly one of ``confirmed(made)`` (the parents create made join the list with their inodes,
    then the record gains ``made``'s keys) or ``aborted()`` (create removed what it made: the record
    plans nothing) releases it.  ``release`` (idempotent) frees the lock on any other way out.
    Each record handed to ``on_record`` is whole; it replaces the last one.

    Raises (every method): ``StateUnwritable`` when the state root or the list refuses a write.
    """

    def __init__(self, directory: str, on_record: Callable[[HostRecord], None]) -> None:
        self.directory, self.on_record = directory, on_record
        self.record: dict[str, Any] = {}
        self._held: contextlib.AbstractContextManager[None] | None = None

    def planned(self, record: dict[str, Any]) -> None:
        held = lock(self.directory)
        held.__enter__()
        self._held = held
        try:
            self.record = record
            self.on_record(record)
        except BaseException:
            self.release()
            raise

    def confirmed(self, made: dict[str, Any]) -> None:
        try:
            planned = self.record.get("parents")
            created = made.get("created")
            if isinstance(planned, list) and isinstance(created, list):
                listed = []
                for p in sorted(set(planned) & {c for c in created if isinstance(c, str)}):
                    try:
                        listed.append((p, os.stat(p).st_ino))
                    except OSError:
                        continue
                if listed:  # listed before the record says "created": a crash between leaks nothing
                    write(self.directory, [*read(self.directory), *listed])
            self.record = {**self.record, **made}
            self.on_record(self.record)
        finally:
            self.release()

    def aborted(self) -> None:
        try:
            self.record = {**self.record, "planned": [], "parents": []}
            self.on_record(self.record)
        finally:
            self.release()

    def release(self) -> None:
        if self._held is not None:
            held, self._held = self._held, None
            held.__exit__(None, None, None)
