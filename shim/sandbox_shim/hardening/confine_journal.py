"""The placeholder journal: what a confinement is about to create in the user's project, written
down *before* it is created, so a confinement killed with ``SIGKILL`` at any moment leaves nothing
that a later run would take for the user's own.

One file per confinement in ``journal_dir(env)`` (``$XDG_STATE_HOME/sandbox-shim/confine``, else
``~/.local/state/sandbox-shim/confine``, the passwd entry's home when ``$HOME`` is unset; never
inside a read-write path, where the confined program could forge it), named ``PID-STARTTIME``: the
owner (the process whose end releases the placeholders: the one that execs the command, or a
library caller) and its start time (proc(5) ``/proc/PID/stat`` field 22, so a reused pid is not
mistaken for the owner).  Its content is the paths, NUL-separated; it is written to a temporary
name and renamed (rename(2) is atomic), so it is either whole or absent (no fsync: the journal
guards against SIGKILL, whose victim's writes stay in the page cache, not against power loss).

Beside it, ``PID-STARTTIME.git``: the git directories found before the run
(``confine_git.write_snapshot``), checked after it (``confine_git.check_snapshot``).

``sweep`` (run by every confinement before it makes placeholders) removes, for each journal whose
owner is gone, the placeholders still exactly as made (or, for a ``.git`` record, disarms the
repositories that run created) (``confine_sets.remove_placeholders``: empty
directories, ``{}`` files) and then the journal.  ``forget`` removes a journal after a normal
release.  Linux only (the owner's start time comes from ``/proc``).
"""

from __future__ import annotations

import os

from .. import posix

TYPE_CHECKING = False  # start-up cost: no typing at run time
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence


def journal_dir(env: Mapping[str, str]) -> str | None:
    """The journal directory for this user (not created), or None when there is no home to hold it."""
    state = env.get("XDG_STATE_HOME", "")
    if not os.path.isabs(state):
        home = env.get("HOME", "")
        if not os.path.isabs(home):
            try:
                home = posix.home()
            except KeyError:
                return None
        if not os.path.isabs(home) or os.path.realpath(home) == "/":
            return None
        state = os.path.join(home, ".local", "state")
    return os.path.join(os.path.realpath(state), "sandbox-shim", "confine")


def start_time(pid: int) -> str | None:
    """Field 22 of ``/proc/PID/stat`` (clock ticks since boot) as text, or None when ``pid`` is gone
    (read by ``procstat.proc_start_time``, the one reader of that file)."""
    from ..procstat import proc_start_time

    ticks = proc_start_time(pid)
    return None if ticks is None else str(ticks)


def record(directory: str, paths: Sequence[str], owner: int) -> str:
    """Write the journal of ``paths`` for ``owner``; returns its path.  Raises OSError."""
    os.makedirs(directory, 0o700, exist_ok=True)
    name = f"{owner}-{start_time(owner)}"
    final = os.path.join(directory, name)
    tmp = os.path.join(directory, f".{name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | posix.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, b"\0".join(os.fsencode(p) for p in paths))
    finally:
        os.close(fd)
    os.rename(tmp, final)
    return final


def snapshot_path(directory: str, owner: int) -> str:
    """Where the git-directory snapshot of ``owner``'s run goes (``confine_git.write_snapshot``)."""
    os.makedirs(directory, 0o700, exist_ok=True)
    return os.path.join(directory, f"{owner}-{start_time(owner)}.git")


def forget(journal: str | None) -> None:
    """Remove a journal (after its placeholders were released).  Never raises."""
    if journal:
        try:
            os.unlink(journal)
        except OSError:
            pass


def sweep(directory: str | None, remove: Callable[[Sequence[str]], None]) -> int:
    """Release the placeholders of every journal in ``directory`` whose owner is gone (``remove``
    takes the paths, parents first); returns how many journals were released.  Git walk caches an
    older version kept here (``walk-*``; now in ``confine_git.walk_cache``'s own directory) are
    removed, so the listing this runs on every start stays short.  Never raises."""
    if directory is None:
        return 0
    try:
        names = os.listdir(directory)
    except OSError:
        return 0
    done = 0
    for name in names:
        if name.startswith("walk-"):  # a git walk cache of an older version (now in confine-walk)
            forget(os.path.join(directory, name))
            continue
        temporary = name.endswith(".tmp")
        git = name.endswith(".git") or name.endswith(".git.tmp")
        base = name.removeprefix(".").removesuffix(".tmp").removesuffix(".git")
        pid, _, started = base.partition("-")
        if not pid.isdigit() or start_time(int(pid)) == started:
            continue  # its owner still runs
        path = os.path.join(directory, name)
        try:
            with open(path, "rb") as fh:
                paths = [os.fsdecode(p) for p in fh.read().split(b"\0") if p]
        except OSError:
            continue
        if temporary:  # a writer killed before the rename: none of its placeholders were made
            forget(path)
            continue
        if git:  # a run killed before its check: disarm what it created (confine_git)
            from .confine_git import check_snapshot

            check_snapshot(path)
            continue
        remove(paths)
        forget(path)
        done += 1
    return done
