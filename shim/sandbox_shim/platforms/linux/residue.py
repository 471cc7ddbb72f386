"""What a Linux sandbox leaves on the host outside its state dir, recorded before it is made.

``planned(cg, path)`` is written to ``ROOT/.cgroups/ID`` (through the library's
``ProvisionOptions.on_record``, by ``CreateRecord``) *before* any cgroup directory is made:
the leaf directory in every hierarchy, and every ancestor below the hierarchy's mount that does not
exist yet (a nested ``cgroupsPath`` such as ``/a/b/c`` makes ``/a`` and ``/a/b``).  ``remove(store,
id)`` then finds all of it whatever step a verb was killed at: it kills what runs in the leaf
cgroups, removes them, tears the network down (its marker ``ROOT/.network/ID`` is written before the
links exist), and removes every parent made by us once it is empty.  Parents are shared between
sandboxes (of any state root), so the ones create made are listed, with their inodes, in one
host-wide file (``parents_dir``, changed under ``parents_lock``) once create has confirmed them: the
last sandbox to go removes them.  Planned parents of a create that died before confirming are
removed (if empty) by that id's delete.  Kernel doc: admin-guide/cgroup-v1/cgroups.rst,
admin-guide/cgroup-v2.rst (rmdir of a cgroup with no tasks and no children).
"""

from __future__ import annotations

import os

from ... import fastjson as json
from ... import posix
from ...durable import unlink, write_atomic
from ...errors import StateUnwritable
from ...scoped import scoped  # contextlib.contextmanager without contextlib's imports (delete loads this)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Generator
    from contextlib import AbstractContextManager
    from typing import Any

    from ...mechanism import HostRecord
    from ...state import StateStore
    from .cgroups.base import CgroupManager
    from .cgroups.detect import Layout


PROBE_PREFIX = ".probe-"


def root_tag(root: str) -> str:
    """The cgroup directory name of a state root: sandboxes without a ``cgroupsPath`` live under
    ``/sandbox-shim/TAG/ID`` in every hierarchy (ids are unique per state root only); the tree claims
    and the default systemd unit name use it too.  SHA-256 from the C module when the interpreter has
    it (``hashlib`` costs ``delete`` ~5 ms)."""
    try:
        from _sha256 import sha256  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        from hashlib import sha256
    return str(sha256(root.encode()).hexdigest())[:10]


def observed(root: str) -> dict[str, dict[str, Any]]:
    """Sandboxes of this state root that the cgroup tree itself shows: each directory ``ID`` under
    ``/sandbox-shim/TAG`` (``root_tag``) in any hierarchy, as a record shaped like ``planned``'s
    (``planned``: those directories).  Only this root's own tagged parent is read, so another root's
    (or another runtime's) cgroups are never listed or removed.  A state loss that took
    ``ROOT/.cgroups`` with it still leaves these, so ``list`` and ``delete --force`` find them."""
    from ...state import valid_id

    parent = f"/sandbox-shim/{root_tag(root)}"
    found: dict[str, set[str]] = {}
    for mount in _mounts():
        try:
            names = os.listdir(mount.rstrip("/") + parent)
        except OSError:
            continue
        for name in names:
            d = f"{mount.rstrip('/')}{parent}/{name}"
            if not name.startswith(".") and valid_id(name) and os.path.isdir(d):
                found.setdefault(name, set()).add(d)
    return {
        sid: {
            "version": None,
            "path": f"{parent}/{sid}",
            "planned": sorted(dirs),
            "parents": [],
            "created": [],
            "observed": True,
        }
        for sid, dirs in found.items()
    }


def _unwritable(path: str, e: OSError) -> Exception:
    return StateUnwritable(path, e.errno or 0, e.strerror or str(e))


def write_state_file(path: str, data: bytes) -> None:
    """Write a file of the sandbox's state dir in full.  Raises ``StateUnwritable`` (no space, read-only)."""
    try:
        with open(path, "wb") as fh:
            fh.write(data)
    except OSError as e:
        raise _unwritable(path, e) from e


def make_fifo(fifo: str) -> None:
    """Make the start FIFO of the sandbox's state dir.  Raises ``StateUnwritable`` (no space, read-only)."""
    try:
        os.mkfifo(fifo, 0o600)
    except OSError as e:
        raise _unwritable(fifo, e) from e


def sweep_probe_cgroups(layout: Layout | None = None) -> list[str]:
    """Remove throwaway probe cgroups (``/sandbox-shim/.probe-<pid>-<controller>``) whose prober is gone.

    A prober killed mid-probe (kill -9) cannot remove its own directories; the next prober, and every
    ``delete --force``, sweeps them.  Only empty directories are removed (``rmdir(2)``), and only those
    whose pid is no longer alive, so a concurrent prober's directories are never touched.

    Returns: the directories removed.
    """
    from .cgroups import detect

    lay = layout if layout is not None else detect()
    removed: list[str] = []
    for mount in {lay.v2_mount, *lay.v1_mounts.values()} - {None}:
        base = os.path.join(str(mount), "sandbox-shim")
        try:
            names = [n for n in os.listdir(base) if n.startswith(PROBE_PREFIX)]
        except OSError:
            continue
        for n in names:
            pid = n[len(PROBE_PREFIX) :].split("-", 1)[0]
            if pid.isdigit() and posix.pid_exists(int(pid)):  # the one owner of "does this pid exist"
                continue
            try:
                os.rmdir(os.path.join(base, n))
                removed.append(os.path.join(base, n))
            except OSError:
                pass
    return removed


def _mounts() -> list[str]:
    from .cgroups import detect

    lay = detect()
    return sorted({m for m in (lay.v2_mount, *lay.v1_mounts.values()) if m}, key=len, reverse=True)


def planned(cg: CgroupManager, path: str) -> dict[str, Any]:
    """The record of what ``cg.create`` may make: ``{"version", "path", "systemd", "planned": [leaf
    dirs], "parents": [ancestors missing now], "created": []}``.

    Under the systemd driver (``systemd``: true) the leaf is the transient scope, which ``remove``
    stops through systemd (a kill -9 between StartTransientUnit and the record of what was created
    leaves an active unit that only StopUnit ends), and no parent is ever ours: the slices above a
    scope are systemd's units, made and kept by systemd (systemd.slice(5))."""
    mounts = _mounts()
    driver = bool(getattr(cg, "systemd", False))
    parents: list[str] = []
    for d in [] if driver else cg.dirs():
        mount = next((m for m in mounts if d.startswith(m.rstrip("/") + "/")), None)
        if mount is None:
            continue
        cur = os.path.dirname(d)
        while cur.startswith(mount.rstrip("/") + "/") and not os.path.isdir(cur):
            parents.append(cur)
            cur = os.path.dirname(cur)
    # a leaf that exists already is not ours (create refuses it): never recorded, so a cleanup after a
    # failed create cannot kill what runs there or remove it
    return {
        "version": cg.version,
        "path": path,
        "systemd": driver,
        **({"token": getattr(cg, "token", "")} if driver else {}),
        "planned": [d for d in cg.dirs() if not os.path.lexists(d)],
        "parents": sorted(set(parents)),
        "created": [],
    }


def remove(store: StateStore, sandbox_id: str) -> list[str]:
    """Remove every host object recorded for ``sandbox_id`` (network, cgroups, parents made by us).

    Idempotent; a record that is missing or unreadable removes nothing.  Returns problems, one line
    each (e.g. a read-only cgroup hierarchy): processes are killed by their recorded identity
    elsewhere (``LinuxMechanism.destroy``).  The host objects go first and every one is tried: a
    state root that refuses the bookkeeping (read-only, full) is reported only after them.

    Raises:
        StateUnwritable: the state root refused a change of the records (they are kept as they
        were, so ``delete --force`` again, once it is writable, finishes the job).
    """
    problems: list[str] = []
    refused: StateUnwritable | None = None
    marker = os.path.join(store.root, ".network", sandbox_id)
    if os.path.exists(marker):
        from ...errors import ShimError
        from . import network

        try:
            network.teardown_orphan(store.root, sandbox_id)
        except OSError as e:
            if e.filename == marker:  # the link is gone; its marker could not be removed
                refused = StateUnwritable(marker, e.errno or 0, e.strerror or str(e))
            else:
                problems.append(f"network: {e}")
        except ShimError as e:
            problems.append(f"network: {e}")
    # the record, else (the record lost with the state) what the cgroup tree shows under this root's tag
    info = store.read_cgroup_index(sandbox_id) or observed(store.root).get(sandbox_id)
    if info:
        try:
            problems += _remove_cgroups(store, info)
        except StateUnwritable as e:
            refused = refused or e
    if not problems and refused is None and not (info or {}).get("observed"):
        store.drop_cgroup_index(sandbox_id)
    if refused is not None:
        raise refused
    return problems


def _remove_cgroups(store: StateStore, info: dict[str, Any]) -> list[str]:
    from ...errors import ShimError
    from .cgroups.detect import manager_of

    problems: list[str] = []
    try:
        cg = manager_of(info)
    except (ShimError, KeyError, TypeError, ValueError) as e:
        return [f"cgroups: {e}"]
    recorded = {*info.get("planned", []), *info.get("created", [])}
    leaves = [d for d in recorded if os.path.isdir(d)]
    try:
        # a scope recorded as planned is stopped through systemd even when its directory is gone already
        # (systemd keeps the unit); ``SystemdManager.remove`` acts only on a unit carrying the recorded
        # token (a record without one proves nothing, so nothing is stopped for it)
        if leaves or (getattr(cg, "systemd", False) and recorded):
            cg.remove(leaves)
    except (ShimError, OSError) as e:
        problems.append(f"cgroups: {e}")
    where = parents_dir(store.root)
    with parents_lock(where):
        # made and confirmed (inode recorded): removed once empty, only while still that directory
        shared = read_parents(where)
        # planned by a create that died before confirming what it made: removed now if empty, by this
        # id's own delete only (never left listed, so a directory someone makes there later is safe)
        planned = info.get("parents") if not info.get("created") else None
        unconfirmed = [p for p in planned if isinstance(p, str)] if isinstance(planned, list) else []
        left = []
        for p, ino in sorted(shared, key=lambda e: len(e[0]), reverse=True):
            try:
                if os.stat(p).st_ino != ino:
                    continue  # removed and made again by someone else: theirs
                os.rmdir(p)
            except FileNotFoundError:
                pass  # gone already
            except OSError:
                left.append((p, ino))  # still used by another cgroup (or not removable): kept listed
        for p in sorted(unconfirmed, key=len, reverse=True):
            try:
                os.rmdir(p)
            except OSError:
                pass  # never made, gone, or holding another cgroup
        if set(left) != set(shared):  # unchanged (the common case: every parent still holds another cgroup):
            write_parents(where, left)  # no rewrite, no fsyncs under the host-wide lock
    return problems


# -- the parent cgroups the runtime made (module docstring): the list, its lock, a create's record --
# The library never sees this list; it only writes the record it is handed (``on_record``).

#: the list's file name, in ``parents_dir``
PARENTS = ".parents"
#: the host-wide list of root (``parents_dir``)
CGROUP_PARENTS_DIR = "/run/sandbox-shim/cgroup-parents"


def parents_dir(root: str) -> str:
    """Where the list lives for the state root ``root``: host-wide for root (``CGROUP_PARENTS_DIR``:
    nested parents are shared by every state root on the host, so the last sandbox to leave one
    removes it whichever root made it), else ``root/.cgroups``."""
    return CGROUP_PARENTS_DIR if posix.geteuid() == 0 else os.path.join(root, ".cgroups")


@scoped
def parents_lock(directory: str) -> Generator[None, None, None]:
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


def read_parents(directory: str) -> list[tuple[str, int]]:
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


def write_parents(directory: str, parents: list[tuple[str, int]]) -> None:
    """Replace the list (sorted, without duplicates; the file is removed when empty); atomic, not
    fsync'd: cgroups do not outlive a crash of the host (``StateStore.write_cgroup_index``).

    Called under ``parents_lock`` only, so a temporary file of an earlier writer found here is what a
    writer killed between its write and its rename(2) left: removed first.

    Raises:
        StateUnwritable: the file system refused the change (the old list is kept).
    """
    path = os.path.join(directory, PARENTS)
    _drop_stale_temporaries(directory)
    if parents:
        write_atomic(path, json.dumps(sorted([list(p) for p in set(parents)])), durable=False)
        return
    unlink(path)


def _drop_stale_temporaries(directory: str) -> None:
    """Remove ``.PARENTS.tmp.PID`` files (``durable.write_atomic``'s names) left by killed writers."""
    prefix = f".{PARENTS}.tmp."
    try:
        names = [n for n in os.listdir(directory) if n.startswith(prefix)]
    except OSError:
        return
    for name in names:
        try:
            os.unlink(os.path.join(directory, name))
        except OSError:
            pass


class CreateRecord:
    """One create's record of its cgroups, written through the library's ``on_record`` hook.

    ``planned(record)`` writes the plan (``planned``: leaves and missing parents) before any directory
    is made, then takes the list's ``parents_lock``, so no delete removes a shared parent meanwhile;
    then exactly one of ``confirmed(made)`` (the parents create made join the list with their inodes,
    the lock is released, then the record gains ``made``'s keys) or ``aborted()`` (the lock is
    released, then the record plans nothing: create removed what it made) follows.  ``release``
    (idempotent) frees the lock on any other way out.  The id's own record is written outside the
    host-wide lock: its fsyncs would otherwise serialise every create of a burst.  Each record handed
    to ``on_record`` is whole; it replaces the last one.

    Raises (every method): ``StateUnwritable`` when the state root or the list refuses a write.
    """

    def __init__(self, directory: str, on_record: Callable[[HostRecord], None]) -> None:
        self.directory, self.on_record = directory, on_record
        self.record: dict[str, Any] = {}
        self._held: AbstractContextManager[None] | None = None

    def planned(self, record: dict[str, Any]) -> None:
        self.record = record
        self.on_record(record)
        held = parents_lock(self.directory)
        held.__enter__()
        self._held = held

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
                    write_parents(self.directory, [*read_parents(self.directory), *listed])
        finally:
            self.release()
        self.record = {**self.record, **made}
        self.on_record(self.record)

    def aborted(self) -> None:
        self.release()
        self.record = {**self.record, "planned": [], "parents": []}
        self.on_record(self.record)

    def release(self) -> None:
        if self._held is not None:
            held, self._held = self._held, None
            held.__exit__(None, None, None)
