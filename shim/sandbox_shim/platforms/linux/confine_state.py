"""What ``confine`` keeps on Linux in the user's state directory, to start sooner: a copy of the
``/etc`` entries of the read set bound as one (``etc_view``) and the Landlock ABI of this boot
(``landlock_abi``).

The state directory is the placeholder journal's parent (``confine_journal.state_root``:
``$XDG_STATE_HOME/sandbox-shim``, else ``~/.local/state/sandbox-shim``); nothing here is used unless
it is this user's own (``state_dir``: owned by the effective uid, not group/other-writable, not a
link) and out of the confined program's reach (no read-write path in it; one around it only when it
is held read-only inside).
Both are caches of what the renderer (``platforms/linux/confine.py``) would otherwise compute or
bind each time: a missing or unusable one means the slower way, never a weaker confinement.
"""

from __future__ import annotations

import os

from . import boot_id
from . import landlock as ll

TYPE_CHECKING = False  # start-up cost (confine runs per command): no typing at run time
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence


def state_dir(env: Mapping[str, str], read_write: Sequence[str], held: Sequence[str] = ()) -> str | None:
    """The user's sandbox-shim state directory (the placeholder journal's parent,
    ``confine_journal.state_root``) when what is kept there may be trusted, else None: it must be
    a directory owned by the effective uid, not writable by group or others, not a symbolic link
    (``confine_journal.owned_dir``: one lstat, no walk), and out of the confined program's reach —
    no read-write path in it, none around it unless it is ``held`` read-only inside (an island:
    ``confine_sets.build_sets`` holds it).  Another user's directory (root run with that user's
    ``HOME``) is not: its owner could plant a view, an ABI or a cache for root's confinement."""
    from ...hardening.confine_journal import owned_dir, state_root
    from ...hardening.readset import within

    state = state_root(env)
    if state is None:
        return None
    if any(within(w, state) for w in read_write):
        return None
    if any(within(state, w) for w in read_write) and not any(within(state, h) for h in held):
        return None
    if not os.path.lexists(state):
        try:
            os.makedirs(state, 0o700, exist_ok=True)
        except OSError:
            return None
    return state if owned_dir(state) else None


#: the largest Landlock ABI a kept value may name (Linux 6.15 has 7); more is no kernel's answer
ABI_MAX = 64


def landlock_abi(
    env: Mapping[str, str] | None = None, read_write: Sequence[str] = (), held: Sequence[str] = ()
) -> int:
    """``landlock.abi_version()``, kept for the boot in ``STATE/landlock-abi`` (``state_dir``) as
    ``BOOT_ID ABI``: the ABI is the running kernel's (Landlock is built in, not a module) and
    the boot id changes with every boot (``boot_id`` in the package's ``__init__``).  Asking the kernel takes
    ``_ctypes`` (a shared library to load) and a libc call; reading the file does not.  Without a
    usable state directory, or a boot id, the kernel is asked; so it is when the file is not a
    regular file of this user's (``confine_journal.owned_file``) or names no ABI in ``0..ABI_MAX``.
    The helper that applies Landlock asks the kernel itself and refuses to run the program when
    the two differ (``confine_exec.c`` ``--abi``), so a value altered here cannot lower the
    enforcement, only stop the launch.  Never raises."""
    from ...hardening.confine_journal import owned_file

    state = state_dir(env, read_write, held) if env is not None else None
    boot = boot_id().encode()
    if state is None or not boot:
        return ll.abi_version()
    path = os.path.join(state, "landlock-abi")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        try:
            seen, _, value = os.read(fd, 128).partition(b" ") if owned_file(fd) else (b"", b"", b"")
        finally:
            os.close(fd)
        value = value.strip()
        if seen == boot and value.isdigit() and len(value) <= 2 and int(value) <= ABI_MAX:
            return int(value)
    except OSError:
        pass
    abi = ll.abi_version()
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(state, 0o700, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, boot + b" %d\n" % abi)
        finally:
            os.close(fd)
        os.rename(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
    return abi


#: the views' name prefix: views made before the state directory was held read-only in every
#: confinement (issue #22) may have been written from inside one, so none of them is used again
VIEW_FORMAT = "v2-"
#: the largest /etc file copied into the view (bigger: no view, every entry bound)
ETC_VIEW_MAX_BYTES = 4 << 20
#: a directory in /etc with at most this many entries beneath it is copied into the view too
#: (listing and stat-ing a few entries costs less than a bind); a bigger one keeps its bind
ETC_VIEW_MAX_TREE = 16
#: a view not used for this long is removed when a new one is made (one used meanwhile may be about
#: to be bound)
ETC_VIEW_STALE_S = 60
_DIR, _REG, _LNK = 0o040000, 0o100000, 0o120000
if TYPE_CHECKING:
    #: (path relative to its /etc entry, "" for the entry itself; file type; lstat; link target)
    _Entry = tuple[str, int, os.stat_result, str]


def _small_tree(path: str, st: os.stat_result) -> list[_Entry] | None:
    """Everything beneath the directory ``path`` (``st`` its lstat), links not followed, when it is
    small enough to copy (``ETC_VIEW_MAX_TREE`` entries; directories of one block) and holds only
    directories, links and regular files this process can read; else None."""
    out: list[_Entry] = [("", _DIR, st, "")]
    todo = [("", st)]
    while todo:
        rel, dst = todo.pop()
        if dst.st_size > 4096:  # a directory of more than one block: too many names, not listed
            return None
        try:
            names = sorted(os.listdir(os.path.join(path, rel)))
        except OSError:
            return None
        for n in names:
            r = os.path.join(rel, n)
            q = os.path.join(path, r)
            try:
                est = os.lstat(q)
                kind = est.st_mode & 0o170000
                target = os.readlink(q) if kind == _LNK else ""
            except OSError:
                return None
            if kind == _DIR:
                todo.append((r, est))
            elif kind != _LNK and (
                kind != _REG or est.st_size > ETC_VIEW_MAX_BYTES or not os.access(q, os.R_OK)
            ):
                return None
            out.append((r, kind, est, target))
            if len(out) > ETC_VIEW_MAX_TREE:
                return None
    return out


def _copy_file(src: str, dest: str, st: os.stat_result) -> None:
    """Copy the regular file ``src`` (whose lstat was ``st``) to the new file ``dest`` with its
    permission bits (no setuid/setgid/sticky) and times.  Raises OSError when ``src`` is not as
    ``st`` said."""
    fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        now = os.fstat(fd)
        data = os.read(fd, ETC_VIEW_MAX_BYTES + 1)
    finally:
        os.close(fd)
    seen = (now.st_ino, now.st_dev, now.st_size, now.st_mtime_ns, now.st_ctime_ns)
    if seen != (st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns, st.st_ctime_ns):
        raise OSError("changed while the view was made")
    if len(data) != st.st_size:
        raise OSError("short read")
    out = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(out, data)
        os.fchmod(out, st.st_mode & 0o777)
        os.utime(out, ns=(st.st_atime_ns, st.st_mtime_ns))
    finally:
        os.close(out)


def etc_view(
    read_only: Sequence[str],
    read_write: Sequence[str],
    env: Mapping[str, str],
    etc: str = "/etc",
    held: Sequence[str] = (),
) -> tuple[str, frozenset[str]] | None:
    """One directory to bind read-only at ``/etc`` instead of one bind per ``/etc`` entry, and the
    entries it holds whole (not to be bound), or None (then each entry is bound as before).

    bwrap makes two mount(2) calls and reads ``/proc/self/mountinfo`` for every bind (about 0.13 ms
    each here; ``LINUX_ETC`` alone is some 20 entries).  The view holds, for each read-only entry
    directly in ``etc``: a copy of a regular file (same permission bits, no setuid/setgid), the same
    symbolic link, a copy of a small directory tree (``_small_tree``; times and permission bits
    kept), or an empty directory as the mount point of a bigger directory, which stays bound on its
    own.  Nothing else is in it, so nothing more is readable than with the binds, and only what this
    user can read is copied; Landlock's rules are the same paths either way.  A bound file, too, is
    the inode found when the sandbox was made.

    The view lives in ``confine-etc/VIEW_FORMAT KEY`` in the user's state directory (``state_dir``: beside
    the placeholder journal, never in or around a read-write path), ``KEY`` a hash of the
    ``lstat`` (device, inode, size, mode, mtime, ctime) and link target of every copied entry: one
    replaced, written or touched gives another key, hence a new view, made under a temporary name,
    each copy checked against the ``lstat`` it was keyed by, then renamed into place (rename(2):
    whole or absent).  A view's mtime is set at each use; views not used for ``ETC_VIEW_STALE_S``
    seconds are removed when a new one is made.

    None when: an entry lies deeper in ``etc`` (it would need its mount point made in the view),
    ``etc`` is a link, the state directory is missing, not trusted (``state_dir``: not this user's,
    a link, group-writable) or inside (or around, unless ``held``) a read-write path, a
    file is unreadable or over ``ETC_VIEW_MAX_BYTES``, or anything changes while the view is made.
    Never raises."""
    from ...hardening.readset import within

    top = [p for p in read_only if p != etc and within(p, etc)]
    if not top or any(os.path.dirname(p) != etc for p in top) or os.path.islink(etc):
        return None
    from ...hardening.confine_journal import owned_dir

    state = state_dir(env, read_write, held)
    if state is None:
        return None
    base = os.path.join(state, "confine-etc")
    if os.path.lexists(base) and not owned_dir(base):
        return None  # a link, or not this user's: nothing in it is used
    entries: list[tuple[str, list[_Entry] | None]] = []  # (path, what is copied; None: a mount point)
    try:
        for p in top:
            st = os.lstat(p)
            kind = st.st_mode & 0o170000
            if kind == _DIR:
                entries.append((p, _small_tree(p, st)))
            elif kind == _LNK:
                entries.append((p, [("", kind, st, os.readlink(p))]))
            elif kind == _REG and st.st_size <= ETC_VIEW_MAX_BYTES:
                entries.append((p, [("", kind, st, "")]))
            else:
                return None  # a device, socket or fifo (bound as before), or too big a file
    except OSError:
        return None
    key = hash(  # ints and tuples of ints hash alike in every process (only str/bytes are salted)
        tuple(
            (int.from_bytes(os.fsencode(p), "little"), -1)
            if tree is None
            else tuple(
                (
                    int.from_bytes(os.fsencode(f"{p}/{rel}\0{target}"), "little"),
                    kind,
                    *(() if kind == _LNK else (st.st_dev, st.st_ino, st.st_size, st.st_mode)),
                    *(() if kind == _LNK else (st.st_mtime_ns, st.st_ctime_ns)),
                )
                for rel, kind, st, target in tree
            )
            for p, tree in entries
        )
    )
    name = f"{VIEW_FORMAT}{key & 0xFFFFFFFFFFFFFFFF:016x}"
    view = os.path.join(base, name)
    folded = frozenset(p for p, tree in entries if tree is not None)
    if owned_dir(view):  # lstat: a link planted as a view is no view
        try:
            os.utime(view)  # in use: not stale for another ETC_VIEW_STALE_S (_remove_stale_views)
        except OSError:
            pass
        return view, folded
    try:
        os.makedirs(base, 0o700, exist_ok=True)
        tmp = os.path.join(base, f".{name}.{os.getpid()}.tmp")
        os.mkdir(tmp, 0o755)
    except OSError:
        return None
    try:
        dirs: list[tuple[str, os.stat_result]] = []  # directories copied: bits and times once filled
        for p, tree in entries:
            top_dest = os.path.join(tmp, os.path.basename(p))
            if tree is None:
                os.mkdir(top_dest, 0o755)  # the mount point of a directory bound on its own
            for rel, kind, st, target in tree or ():
                dest = os.path.join(top_dest, rel) if rel else top_dest
                src = os.path.join(p, rel) if rel else p
                if kind == _DIR:
                    os.mkdir(dest, 0o700)
                    dirs.append((dest, st))
                elif kind == _LNK:
                    os.symlink(target, dest)
                    os.utime(dest, ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=False)
                else:
                    _copy_file(src, dest, st)
        for dest, st in reversed(dirs):
            os.chmod(dest, st.st_mode & 0o777)
            os.utime(dest, ns=(st.st_atime_ns, st.st_mtime_ns))
        os.rename(tmp, view)
    except OSError:
        _remove_view(tmp)
        return (view, folded) if owned_dir(view) else None  # another confinement made it
    _remove_stale_views(base, name)
    return view, folded


def _remove_view(path: str) -> None:
    """Remove a view directory and everything in it (its copied directories made writable first:
    they carry the original's bits).  Never raises."""
    try:
        st = os.lstat(path)
    except OSError:
        return
    if (st.st_mode & 0o170000) != _DIR:
        try:
            os.unlink(path)
        except OSError:
            pass
        return
    try:
        os.chmod(path, 0o700)
        names = os.listdir(path)
    except OSError:
        names = []
    for n in names:
        _remove_view(os.path.join(path, n))
    try:
        os.rmdir(path)
    except OSError:
        pass


def _remove_stale_views(base: str, current: str) -> None:
    """Remove the views in ``base`` other than ``current`` not used for ``ETC_VIEW_STALE_S`` seconds
    (and temporary ones left that long)."""
    import time

    try:
        names = os.listdir(base)
    except OSError:
        return
    old = time.time() - ETC_VIEW_STALE_S
    for n in names:
        q = os.path.join(base, n)
        try:
            if n != current and os.lstat(q).st_mtime < old:
                _remove_view(q)
        except OSError:
            pass
