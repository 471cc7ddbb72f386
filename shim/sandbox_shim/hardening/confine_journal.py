"""The placeholder journal: what a confinement is about to create in the user's project, written
down *before* it is created, so a confinement killed with ``SIGKILL`` at any moment leaves nothing
that a later run would take for the user's own.

One file per confinement in ``journal_dir(env)`` (``$XDG_STATE_HOME/sandbox-shim/confine``, else
``~/.local/state/sandbox-shim/confine``, the passwd entry's home when ``$HOME`` is unset; never
inside a read-write path, where the confined program could forge it), named ``PID-STARTTIME``: the
owner (the process whose end releases the placeholders: the CLI process that waits for the
command, or a library caller) and its start time (proc(5) ``/proc/PID/stat`` field 22, so a reused pid is not
mistaken for the owner).  Its content is the paths, NUL-separated; it is written to a temporary
name and renamed (rename(2) is atomic), so it is either whole or absent (no fsync: the journal
guards against SIGKILL, whose victim's writes stay in the page cache, not against power loss).

Beside it, ``PID-STARTTIME.git``: the git directories found before the run
(``confine_git.write_snapshot``), checked after it (``confine_git.check_snapshot``); and
``PID-STARTTIME.rw``: the run's read-write paths, its *claim* (``claim``): while its owner lives no
other confinement of this user may take a path equal to, inside or around one of them — the end of
one run removes its placeholders and disarms repositories, which would lift the protections another
run of the same directory holds (its read-only binds sit on those very files).

Whether an owner is gone is ``alive``'s answer: the owner holds a flock(2) on its claim for its whole
run, which any process can test, in any pid namespace (a pid and start time in /proc only from the
owner's own).  ``sweep`` (run by every confinement before it makes placeholders) removes, for each
journal whose owner is gone, the placeholders still exactly as made (or, for a ``.git`` record, disarms the
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


#: the state directory's subdirectories (``state_root``): journals, git walk caches, /etc views
STATE_SUBDIRS = ("confine", "confine-walk", "confine-etc")


def state_root(env: Mapping[str, str]) -> str | None:
    """sandbox-shim's state directory for this user: the journal directory's parent
    (``$XDG_STATE_HOME/sandbox-shim``, else ``~/.local/state/sandbox-shim``; resolved), or None
    when there is no home to hold it.  No confinement may write it: a read-write path inside it
    is refused, one around it gets it held read-only (``confine_sets.build_sets``)."""
    journal = journal_dir(env)
    return None if journal is None else os.path.dirname(journal)


def owned_dir(path: str) -> bool:
    """True when ``path`` is a directory (lstat(2): a symbolic link is not one) owned by the
    effective uid and not writable by group or others: what only this user (or root) can change.
    A few microseconds: one lstat, no walk.  Never raises."""
    try:
        st = os.lstat(path)
    except (OSError, ValueError):
        return False
    return st.st_mode & 0o170000 == 0o040000 and st.st_uid == posix.geteuid() and not st.st_mode & 0o022


def owned_file(fd: int) -> bool:
    """True when the open ``fd`` is a regular file owned by the effective uid and not writable by
    group or others (fstat(2)).  Never raises."""
    try:
        st = os.fstat(fd)
    except OSError:
        return False
    return st.st_mode & 0o170000 == 0o100000 and st.st_uid == posix.geteuid() and not st.st_mode & 0o022


def prepare_state(env: Mapping[str, str]) -> tuple[str | None, bool]:
    """Make the state directory and its ``STATE_SUBDIRS`` (mode 0700) when missing, before any
    launch; returns ``(state, trusted)``: its path (None: no home) and whether it and each
    subdirectory is ``owned_dir`` (what is kept there — journals, walk caches, the /etc view, the
    Landlock ABI — is used only then).  Another user's directory (root run with that user's
    ``HOME``), a symbolic link or a group-writable one is not trusted.  Never raises."""
    state = state_root(env)
    if state is None:
        return None, False
    try:
        os.makedirs(state, 0o700, exist_ok=True)
    except OSError:
        return state, False
    if not owned_dir(state):  # nothing made in a directory that is not ours (or through a link)
        return state, False
    for sub in STATE_SUBDIRS:
        try:
            os.mkdir(os.path.join(state, sub), 0o700)
        except OSError:
            pass  # there already (checked next), or not makeable (then not trusted)
    return state, all(owned_dir(os.path.join(state, s)) for s in STATE_SUBDIRS)


def start_time(pid: int) -> str | None:
    """Field 22 of ``/proc/PID/stat`` (clock ticks since boot) as text, or None when ``pid`` is gone
    (read by ``procstat.proc_start_time``, the one reader of that file)."""
    from ..procstat import proc_start_time

    ticks = proc_start_time(pid)
    return None if ticks is None else str(ticks)


def record(directory: str, paths: Sequence[str], owner: int, suffix: str = "", hold: bool = False) -> str:
    """Write the journal of ``paths`` for ``owner`` (``suffix``: ``.rw`` for a claim); returns its
    path.  With ``hold`` the file is flock(2)ed before it gets its name and stays locked until
    ``forget`` (this process's liveness, as ``alive`` reads it).  Raises OSError."""
    os.makedirs(directory, 0o700, exist_ok=True)
    name = f"{owner}-{start_time(owner)}{suffix}"
    final = os.path.join(directory, name)
    tmp = os.path.join(directory, f".{name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | posix.O_NOFOLLOW | posix.O_CLOEXEC, 0o600)
    try:
        if hold:
            posix.flock_exclusive(fd)
        os.write(fd, b"\0".join(os.fsencode(p) for p in paths))
        os.rename(tmp, final)
    except BaseException:
        os.close(fd)
        raise
    if hold:
        _HELD[final] = fd
    else:
        os.close(fd)
    return final


#: claims this process holds: path -> the fd whose flock(2) says "its owner lives" (``alive``)
_HELD: dict[str, int] = {}


def alive(directory: str, pid: str, started: str) -> bool:
    """Whether the run ``PID-STARTTIME`` still lives: its claim (``PID-STARTTIME.rw``) is flock(2)ed
    by its owner for as long as the owner runs, which any process on the host can test, whatever
    pid namespace it sees (a run in another one would find no such pid in its /proc); a run without
    a claim is judged by its pid and start time (proc(5)).  Never raises."""
    path = os.path.join(directory, f"{pid}-{started}.rw")
    try:
        fd = os.open(path, os.O_RDONLY | posix.O_NOFOLLOW | posix.O_NONBLOCK | posix.O_CLOEXEC)
    except FileNotFoundError:
        return pid.isdigit() and start_time(int(pid)) == started
    except OSError:
        return True  # cannot tell: keep what it holds
    try:
        return not posix.flock_exclusive(fd, wait=False)
    except OSError:
        return True
    finally:
        os.close(fd)


#: the lock file the claims are checked and written under (flock(2); in the journal directory)
CLAIMS_LOCK = ".claims.lock"


def claim(directory: str, paths: Sequence[str], owner: int) -> str:
    """Claim ``paths`` (a run's read-write paths, canonical) for ``owner``'s run; returns the claim's
    path (``forget`` it after the release).  Checked and written under ``CLAIMS_LOCK``, so of two
    runs started together one claims and the other is refused.  Each path is claimed with the
    identities (st_dev, st_ino) of its directory and of every directory above it, so another name
    for the same directory (a bind mount, an alias made in a mount namespace) meets it too.

    Raises: CannotEnforce("confinement.concurrent") when a live run of this user (``alive``) claims a
    directory equal to, inside or around one of ``paths``; OSError when the claim cannot be written."""
    from ..errors import CannotEnforce
    from .readset import within

    os.makedirs(directory, 0o700, exist_ok=True)
    mine = [(p, _chain(p)) for p in paths]
    flags = os.O_RDWR | os.O_CREAT | posix.O_NOFOLLOW | posix.O_CLOEXEC
    lock = os.open(os.path.join(directory, CLAIMS_LOCK), flags, 0o600)
    try:
        posix.flock_exclusive(lock)
        for name in os.listdir(directory):
            if name.startswith(".") or not name.endswith(".rw"):
                continue
            pid, _, started = name[:-3].partition("-")
            if not pid.isdigit() or int(pid) == owner or not alive(directory, pid, started):
                continue  # not a claim, ours, or its owner is gone (``sweep`` removes it)
            for entry in _read_paths(os.path.join(directory, name)):
                other, _, ids = entry.partition("\n")
                chain = ids.split()
                for path, own in mine:
                    same = bool(chain) and bool(own) and (chain[0] in own or own[0] in chain)
                    if same or within(path, other) or within(other, path):
                        raise CannotEnforce(
                            "confinement.concurrent",
                            f"{path} is in a read-write path of a running confinement (pid {pid}: "
                            f"{other}); one confinement of a directory at a time (the end of one would "
                            "lift the protections of the other); wait for it to end",
                        )
        entries = [f"{p}\n{' '.join(c)}" for p, c in mine]
        return record(directory, entries, owner, ".rw", hold=owner == os.getpid())
    finally:
        os.close(lock)  # and the flock with it


def _chain(path: str) -> list[str]:
    """``DEV:INO`` of ``path`` and of each directory above it, nearest first (stat(2)); stops at the
    first that cannot be read."""
    out = []
    cur = path
    while True:
        try:
            st = os.stat(cur)
        except OSError:
            break
        out.append(f"{st.st_dev}:{st.st_ino}")
        up = os.path.dirname(cur)
        if up == cur:
            break
        cur = up
    return out


def _read_paths(path: str) -> list[str]:
    """The NUL-separated paths of a journal file of this user's (a regular file, not a link, opened
    without blocking); [] when it is anything else."""
    try:
        fd = os.open(path, os.O_RDONLY | posix.O_NOFOLLOW | posix.O_NONBLOCK | posix.O_CLOEXEC)
    except OSError:
        return []
    try:
        if not owned_file(fd):
            return []
        data = os.read(fd, 1 << 20)
    except OSError:
        return []
    finally:
        os.close(fd)
    return [os.fsdecode(p) for p in data.split(b"\0") if p]


def snapshot_path(directory: str, owner: int) -> str:
    """Where the git-directory snapshot of ``owner``'s run goes (``confine_git.write_snapshot``)."""
    os.makedirs(directory, 0o700, exist_ok=True)
    return os.path.join(directory, f"{owner}-{start_time(owner)}.git")


def forget(journal: str | None) -> None:
    """Remove a journal (after its placeholders were released); a claim this process holds is
    unlocked after it is gone.  Never raises."""
    if journal:
        try:
            os.unlink(journal)
        except OSError:
            pass
        held = _HELD.pop(journal, None)
        if held is not None:
            os.close(held)


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
        if name == CLAIMS_LOCK:
            continue
        temporary = name.endswith(".tmp")
        git = name.endswith(".git") or name.endswith(".git.tmp")
        claimed = name.endswith(".rw") or name.endswith(".rw.tmp")
        base = name.removeprefix(".").removesuffix(".tmp").removesuffix(".git").removesuffix(".rw")
        pid, _, started = base.partition("-")
        if not pid.isdigit() or alive(directory, pid, started):
            continue  # its owner still runs (in whatever pid namespace)
        path = os.path.join(directory, name)
        if claimed:  # the claim of a run that is gone: nothing to release
            forget(path)
            continue
        try:
            with open(path, "rb") as fh:
                paths = [os.fsdecode(p) for p in fh.read().split(b"\0") if p]
        except OSError:
            continue
        if temporary:  # a writer killed before the rename: none of its placeholders were made
            forget(path)
            continue
        if git:  # a run killed before its check (or one that could not finish it): check now
            from .confine_git import check_snapshot
            from .confine_launch import warn_disarmed

            changed = check_snapshot(path)
            if changed:  # told like a run's own check (stderr), never silently
                warn_disarmed(changed, None)
            continue
        remove(paths)
        forget(path)
        done += 1
    return done
