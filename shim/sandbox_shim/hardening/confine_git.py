"""Git repositories inside the read-write paths of the confinement profile: where they are, and
which of their files make the user's next ``git`` run code.

* ``git_dirs(roots)``: every git directory at any depth under the read-write roots, found by one
  walk (``os.scandir``, no ``stat`` beyond the directory entry's type, links never followed): a
  ``.git`` directory, a gitfile ``.git`` (``gitdir: PATH``, gitrepository-layout(5)) with its
  target, a bare repository (``HEAD`` file beside ``objects`` and ``refs`` directories), and for
  each the ``commondir`` it names.  The walk does not descend into a git directory (its
  ``modules``/``worktrees`` are the caller's to follow) and stops at ``MAX_ENTRIES`` directory
  entries, beyond which ``TooLarge`` is raised (fail closed: the caller refuses to start rather
  than leave repositories it did not see writable).
* ``hooks_paths(config_files)`` / ``includes``: ``core.hooksPath`` values and ``include.path`` /
  ``includeIf.*.path`` targets of git-config(1) files (a small reader of that syntax: sections,
  subsections, ``key = value``, quotes, ``#``/``;`` comments; every ``includeIf`` is taken as if its
  condition held, which can only hold more).
* ``user_configs(env)``: the configuration files git reads before the repository's own: system
  (``GIT_CONFIG_SYSTEM`` or ``/etc/gitconfig``), global (``GIT_CONFIG_GLOBAL``, else
  ``$XDG_CONFIG_HOME/git/config`` and ``~/.gitconfig``), and what they include.

Stdlib only; no subprocess (``git config --show-origin`` costs a process per repository).
"""

from __future__ import annotations

import os

from .. import posix
from .readset import read_regular, within

TYPE_CHECKING = False  # start-up cost: no typing at run time
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

#: directory entries the walk reads at most (all read-write roots together)
MAX_ENTRIES = 1_000_000
_MAX_INCLUDE_DEPTH = 10  # git's own limit (config.c MAX_INCLUDE_DEPTH)


class TooLarge(Exception):
    """The read-write paths hold more than ``MAX_ENTRIES`` directory entries."""


#: bytes read at most of a file inside a read-write path (a gitfile, ``commondir``, a config)
MAX_READ = 1 << 20
_RDONLY = os.O_RDONLY | posix.O_NONBLOCK | posix.O_CLOEXEC
#: a descriptor that names a directory without reading it (open(2) ``O_PATH``, Linux), else read-only
_PATH = getattr(os, "O_PATH", 0) | posix.O_CLOEXEC if hasattr(os, "O_PATH") else _RDONLY


class Unchecked(Exception):
    """A directory under the read-write paths could not be walked (not ours, or not made walkable)."""


def grant_owner(fd: int) -> bool:
    """Give the owner read, write and search on the directory ``fd`` names (an ``O_PATH`` or
    ordinary descriptor), when it is this user's: a confined run may leave a directory it made
    unreadable (``chmod 311``) or a git directory read-only (``chmod 555``) to hide a repository from
    the check after it, and the check runs as the same user.  True when changed.  Never raises."""
    try:
        st = os.fstat(fd)
        if st.st_uid != posix.geteuid() or (st.st_mode & 0o170000) != 0o040000:
            return False
        posix.fchmod(fd, (st.st_mode & 0o7777) | 0o700)  # an O_PATH descriptor too
    except OSError:
        return False
    return True


def _walkable(d: str) -> bool:
    """Make the directory ``d`` readable and searchable by its owner (``grant_owner``) when it is
    this user's and lacks either; reached with no link followed.  True when it now is."""
    try:
        fd = open_dir(d)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        return (st.st_mode & 0o500) == 0o500 or grant_owner(fd)
    finally:
        os.close(fd)


def open_dir(path: str) -> int:
    """A file descriptor of the directory ``path`` (absolute, resolved: no ``.``/``..``), opened one
    component at a time from ``/`` with ``O_NOFOLLOW | O_DIRECTORY``: no component may be a symbolic
    link, so the descriptor is the directory that the path names *now*, wherever a concurrent
    rename(2) of a link into the path would have pointed it (what ``disarm`` and
    ``confine_sets.remove_placeholders`` work relative to).  ``O_PATH`` where the OS has it: a
    directory without read permission is still reached (search permission is what a lookup needs).
    Raises OSError (``ELOOP``/``ENOTDIR`` for a link or a non-directory on the way, ``EINVAL`` for a
    relative path)."""
    import errno

    parts = path.split("/")
    if not path.startswith("/") or any(c in (".", "..") for c in parts):
        raise OSError(errno.EINVAL, "not an absolute resolved path", path)
    fd = os.open("/", os.O_RDONLY | posix.O_DIRECTORY | posix.O_CLOEXEC)
    try:
        for comp in parts:
            if comp:
                nfd = os.open(comp, _PATH | posix.O_DIRECTORY | posix.O_NOFOLLOW, dir_fd=fd)
                os.close(fd)
                fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd


def gitfile_target(path: str) -> str | None:
    """The directory a gitfile names (``gitdir: PATH``, relative to the file's directory), resolved,
    or None when ``path`` is no gitfile (a link, a FIFO: not read) or names no directory."""
    data = read_regular(path, 4096, nofollow=True)
    line = "" if data is None else data.decode("utf-8", "replace").strip()
    if not line.startswith("gitdir:"):
        return None
    real = os.path.realpath(os.path.join(os.path.dirname(path), line[7:].strip()))
    return real if os.path.isdir(real) else None


def commondir(gitdir: str) -> str | None:
    """The ``commondir`` a (worktree) git directory names, resolved, or None (also when it is no
    regular file: ``read_regular``)."""
    data = read_regular(os.path.join(gitdir, "commondir"), 4096)
    rel = "" if data is None else data.decode("utf-8", "replace").strip()
    if not rel:
        return None
    real = os.path.realpath(os.path.join(gitdir, rel))
    return real if os.path.isdir(real) else None


def _load_cache(path: str | None) -> dict[str, tuple[int, int, int, tuple[str, ...], tuple[str, ...]]]:
    if not path:
        return {}
    import marshal

    from .confine_journal import owned_file

    try:  # only a regular file of this user's, not through a link (confine_journal.prepare_state)
        fd = os.open(path, os.O_RDONLY | posix.O_NOFOLLOW | posix.O_NONBLOCK)
    except OSError:
        return {}
    try:
        if not owned_file(fd):
            return {}
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = marshal.loads(fh.read())
    except (OSError, EOFError, ValueError, TypeError):
        return {}
    finally:
        os.close(fd)
    return data if isinstance(data, dict) else {}


def _save_cache(path: str, data: dict[str, tuple[int, int, int, tuple[str, ...], tuple[str, ...]]]) -> None:
    import marshal

    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(os.path.dirname(path), 0o700, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | posix.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(marshal.dumps(data))
        try:  # rename(2) onto a free name: replacing a file makes ext4 (auto_da_alloc) start writing
            os.unlink(path)  # the new one out at once, 0.1-1 ms on confine's start-up; meanwhile a
        except FileNotFoundError:  # reader finds no cache and walks the whole tree
            pass
        os.rename(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass


#: a directory whose ctime is this close to the walk's start is listed again every time: ctime
#: has the kernel's coarse clock, so an entry made in the same tick could leave it unchanged
RACY_NS = 2_000_000_000


def git_dirs(
    roots: Sequence[str], limit: int | None = None, cache: str | None = None, repair: bool = False
) -> list[tuple[str, str | None, str | None]]:
    """``(gitdir, worktree, gitfile)`` for every repository under ``roots``: ``worktree`` is the
    directory holding ``.git`` (None for a bare repository), ``gitfile`` the ``.git`` file that
    named ``gitdir`` (else None).  Raises ``TooLarge`` past ``limit`` entries (default
    ``MAX_ENTRIES``, read at each call).

    ``cache``: a file (outside the read-write paths: the confined program must not write it) that
    keeps, per directory, its inode and ctime with its subdirectories and git entries.  A directory
    whose ``(st_ino, st_ctime_ns)`` is unchanged (and not within ``RACY_NS`` of now) is not listed
    again: any entry made, removed or renamed in it changes its ctime (inode(7)), which no
    unprivileged program can set back.  Gitfiles are read again every time (their content is not
    in their directory's ctime).

    ``repair`` (the check after a run): a directory of this user's that cannot be listed or searched
    is made so for its owner (``grant_owner``) and listed; one that still cannot be raises
    ``Unchecked``.  Without it such a directory is skipped (the snapshot before a run)."""
    import time

    limit = MAX_ENTRIES if limit is None else limit
    old = _load_cache(cache)
    new: dict[str, tuple[int, int, int, tuple[str, ...], tuple[str, ...]]] = {}
    racy = time.time_ns() - RACY_NS
    out: list[tuple[str, str | None, str | None]] = []
    count = 0
    todo = list(roots)
    while todo:
        d = todo.pop()
        try:
            st = os.lstat(d)
        except FileNotFoundError:
            continue
        except OSError:
            if repair:
                raise Unchecked(d) from None
            continue
        if (st.st_mode & 0o170000) != 0o040000:
            continue  # no longer a directory (a link swapped in): nothing is followed
        hit = old.get(d)
        if hit is not None and hit[0] == st.st_ino and hit[1] == st.st_ctime_ns and st.st_ctime_ns < racy:
            n, subdirs, found = hit[2], hit[3], hit[4]
        else:
            if repair and (st.st_mode & 0o500) != 0o500 and not _walkable(d):
                raise Unchecked(d)
            try:
                with os.scandir(d) as it:
                    entries = list(it)
            except OSError:
                if repair:
                    raise Unchecked(d) from None
                continue
            n = len(entries)
            dirs, found_l = [], []
            names: dict[str, bool] = {}
            for e in entries:
                name = e.name
                is_dir = e.is_dir(follow_symlinks=False)
                if name in ("HEAD", "objects", "refs"):
                    names[name] = is_dir
                if name == ".git":
                    if is_dir:
                        found_l.append("dir")
                    elif e.is_file(follow_symlinks=False):
                        found_l.append("file")
                elif is_dir:
                    dirs.append(name)
            if names.get("HEAD") is False and names.get("objects") and "refs" in names:
                found_l, dirs = ["bare"], []  # a bare repository (or a git dir met whole)
            subdirs, found = tuple(dirs), tuple(found_l)
        new[d] = (st.st_ino, st.st_ctime_ns, n, subdirs, found)
        count += n
        if count > limit:
            raise TooLarge(f"more than {limit} entries under {', '.join(roots)}")
        for kind in found:
            if kind == "bare":
                out.append((os.path.realpath(d), None, None))
            elif kind == "dir":
                out.append((os.path.realpath(os.path.join(d, ".git")), d, None))
            else:
                target = gitfile_target(os.path.join(d, ".git"))
                if target is not None:
                    out.append((target, d, os.path.join(d, ".git")))
        todo += [os.path.join(d, n) for n in subdirs]
    if cache and new != old:
        _save_cache(cache, new)
    extra = []
    for gitdir, _, _ in out:
        common = commondir(gitdir)
        if common is not None:
            extra.append((common, None, None))
    return out + extra


def _parse(path: str) -> list[tuple[str, str, str]]:
    """``(section.subsection, key, value)`` of a git-config(1) file, lower-cased section and key
    (the subsection keeps its case); unreadable files, and what is no regular file (a FIFO: not
    waited on, ``read_regular``), give ``[]``; the first ``MAX_READ`` bytes are read."""
    data = read_regular(path)
    return [] if data is None else _parse_text(data.decode("utf-8", "replace"))


def _parse_text(text: str) -> list[tuple[str, str, str]]:
    out: list[tuple[str, str, str]] = []
    section = ""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("["):
            end = line.find("]")
            head = line[1:end] if end > 0 else line[1:]
            name, _, sub = head.partition(" ")
            section = name.strip().lower() + ("." + sub.strip().strip('"') if sub.strip() else "")
            line = line[end + 1 :].strip() if end > 0 else ""
            if not line:
                continue
        if not line or line[0] in "#;":
            continue
        key, eq, value = line.partition("=")
        value = value.strip()
        if value.startswith('"'):
            value = value[1 : value.find('"', 1)] if '"' in value[1:] else value[1:]
        else:
            for c in "#;":
                value = value.split(c, 1)[0]
        out.append((section, key.strip().lower(), value.strip() if eq else "true"))
    return out


def includes(path: str, home: str = "") -> list[str]:
    """The files ``path`` includes (``include.path``, every ``includeIf.*.path``), recursively,
    resolved (relative to the including file's directory; ``~/`` from ``home``)."""
    out: list[str] = []
    todo = [(path, 0)]
    while todo:
        p, depth = todo.pop()
        for section, key, value in _parse(p):
            if key != "path" or not (section == "include" or section.startswith("includeif.")):
                continue
            if value.startswith("~/") and home:
                value = os.path.join(home, value[2:])
            inc = os.path.realpath(value if os.path.isabs(value) else os.path.join(os.path.dirname(p), value))
            if inc not in out and depth < _MAX_INCLUDE_DEPTH:
                out.append(inc)
                todo.append((inc, depth + 1))
    return out


def hooks_paths(files: Sequence[str]) -> list[str]:
    """Every ``core.hooksPath`` value set in ``files`` (as written: absolute, ``~/`` or relative)."""
    return [v for f in files for s, k, v in _parse(f) if s == "core" and k == "hookspath" and v]


def user_configs(env: Mapping[str, str]) -> list[str]:
    """The system and global git configuration files (git-config(1) FILES) and their includes."""
    home = env.get("HOME", "")
    files = [env.get("GIT_CONFIG_SYSTEM") or "/etc/gitconfig"] if not env.get("GIT_CONFIG_NOSYSTEM") else []
    if env.get("GIT_CONFIG_GLOBAL"):
        files.append(env["GIT_CONFIG_GLOBAL"])
    else:
        xdg = env.get("XDG_CONFIG_HOME") or (os.path.join(home, ".config") if home else "")
        files += [
            p
            for p in (
                os.path.join(xdg, "git", "config") if xdg else "",
                os.path.join(home, ".gitconfig") if home else "",
            )
            if p
        ]
    out = [f for f in files if os.path.isfile(f)]
    for f in list(out):
        out += includes(f, home)
    return out


# ---- repositories a confined run created ---------------------------------------------------------------

#: the configuration keys kept in a repository a confined run created (``disarm``): none of them
#: names a program, a file git reads code or configuration from, or another repository
#: (git-config(1); ``remote.*.url`` stays, a transport helper's ``ext::`` form is off by default,
#: ``protocol.allow``).  ``section.*.key`` matches any subsection.
SAFE_KEYS = frozenset(
    (
        "core.repositoryformatversion",
        "core.filemode",
        "core.bare",
        "core.logallrefupdates",
        "core.ignorecase",
        "core.precomposeunicode",
        "core.symlinks",
        "core.autocrlf",
        "core.eol",
        "extensions.objectformat",
        "extensions.worktreeconfig",
        "init.defaultbranch",
        "user.name",
        "user.email",
        "remote.*.url",
        "remote.*.pushurl",
        "remote.*.fetch",
        "branch.*.remote",
        "branch.*.merge",
        "branch.*.rebase",
        "submodule.*.url",
        "submodule.*.active",
    )
)
DISARMED = ".sandbox-shim-disarmed"
#: the start of the item ``disarm_new`` returns when it could not walk the read-write paths
TOO_LARGE = "!not checked (too many entries): "


def all_git_dirs(
    roots: Sequence[str], found: Sequence[str] | None = None, cache: str | None = None, repair: bool = False
) -> list[str]:
    """Every git directory under ``roots`` (``git_dirs``, or the given ``found`` ones), with each
    one's ``modules/*`` and ``worktrees/*`` git directories, resolved, sorted; only those inside
    ``roots`` (a gitfile may name a repository elsewhere)."""
    out: set[str] = set()
    if found is None:
        found = [g for g, _, _ in git_dirs(roots, cache=cache, repair=repair)]
    todo = list(found)
    while todo:
        d = todo.pop()
        if d in out:
            continue
        out.add(d)
        for sub in ("modules", "worktrees"):
            top = os.path.join(d, sub)
            if os.path.isdir(top) and not os.path.islink(top):
                for dirpath, dirnames, filenames in os.walk(top):
                    dirnames[:] = [n for n in dirnames if not os.path.islink(os.path.join(dirpath, n))]
                    if "HEAD" in filenames:
                        todo.append(os.path.realpath(dirpath))
                        dirnames[:] = []
    return sorted(d for d in out if any(d == r or d.startswith(r.rstrip("/") + "/") for r in roots))


def _safe_key(section: str, key: str) -> bool:
    name, _, sub = section.partition(".")
    return f"{name}.{key}" in SAFE_KEYS or (bool(sub) and f"{name}.*.{key}" in SAFE_KEYS)


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def disarm(gitdir: str) -> list[str]:
    """Make a repository a confined run created harmless to the user's next ``git`` there: its
    ``config`` (and ``config.worktree``) rewritten with ``SAFE_KEYS`` only, the original kept as
    ``config.sandbox-shim-disarmed`` (one that is no regular file — a link, a FIFO, a directory —
    only moved aside); a ``hooks`` directory holding anything but git's ``*.sample`` files (or a
    ``hooks`` that is no directory) moved to ``hooks.sandbox-shim-disarmed`` (an empty one made).
    Returns what was changed (paths); never raises.  See ``disarm_at`` (which also says whether it
    completed)."""
    return disarm_at(gitdir)[0]


#: names in a git directory whose *appearance* during a run re-arms a repository that existed before
#: it (gitrepository-layout(5)): a config or per-worktree config (commands: core.fsmonitor, hooksPath,
#: aliases...), and the files that point git at another repository's config or objects.  Held read-only
#: when present at the start (``confine_sets.GIT_PROTECTED``); one missing then cannot be held (it
#: would have to be created), so the check after the run looks for it (``write_snapshot``).
WATCHED = ("config", "config.worktree", "commondir", "gitdir", "objects/info/alternates")


def appeared(known: Sequence[str], roots: Sequence[str] = (), home: str = "") -> list[tuple[str, str]]:
    """``(gitdir, name)`` for each ``WATCHED`` name missing now in each of the git directories
    ``known`` (lstat(2): a link counts as present), and ``(gitdir, /absolute/path)`` for each file
    one of its configs includes (``includes``: ``include.path``, ``includeIf.*.path``) that is
    missing now and lies under ``roots``: made during a run, it would bring its keys (commands) into
    a configuration that existed before.  Never raises."""
    out = [(g, n) for g in known for n in WATCHED if not os.path.lexists(os.path.join(g, n))]
    for g in known:
        for conf in ("config", "config.worktree"):
            try:
                targets = includes(os.path.join(g, conf), home)
            except OSError:
                continue
            for t in targets:
                inside = any(t == r or t.startswith(r.rstrip("/") + "/") for r in roots)
                if inside and not os.path.lexists(t):
                    out.append((g, t))
    return out


def _move_aside_at(name: str, dfd: int) -> bool:
    """Move ``name`` (relative to ``dfd``, maybe with ``/``: each directory on the way opened with
    no link followed) aside as ``name + DISARMED``.  True when moved; False when absent.
    Raises OSError."""
    *dirs, leaf = name.split("/")
    fd = dfd
    try:
        for d in dirs:
            nfd = os.open(d, _PATH | posix.O_DIRECTORY | posix.O_NOFOLLOW, dir_fd=fd)
            if fd != dfd:
                os.close(fd)
            fd = nfd
        return _move_aside(leaf, fd)
    except FileNotFoundError:
        return False
    finally:
        if fd != dfd:
            os.close(fd)


def disarm_at(gitdir: str, also: Sequence[str] = ()) -> tuple[list[str], bool]:
    """``disarm`` with whether it completed: False when ``gitdir`` could not be reached without a
    symbolic link (``open_dir``) or a change failed (the repository may still be armed).

    Every step works relative to a descriptor of ``gitdir`` opened with no link followed on the
    way (``open_dir``): a path swapped under it (``sub/.git`` exchanged for a link to another
    repository, renameat2(2) ``RENAME_EXCHANGE``) cannot aim the rename(2)s and the new ``config``
    at a directory outside the read-write paths.  Files are opened ``O_NONBLOCK | O_NOFOLLOW`` and
    read only when regular (``read_regular``), so a FIFO never blocks it.  ``also``: further names
    (``WATCHED`` pointers such as ``commondir``) moved aside too.  Never raises."""
    try:
        dfd = open_dir(gitdir)
    except FileNotFoundError:
        return [], True  # gone since the walk: nothing left to arm
    except OSError:
        return [], False
    try:
        changed, ok = _disarm_fd(gitdir, dfd)
        for name in also:
            try:
                if _move_aside_at(name, dfd):
                    changed.append(os.path.join(gitdir, name))
            except OSError:
                ok = False
        return changed, ok
    finally:
        os.close(dfd)


def _move_aside(name: str, dfd: int) -> bool:
    """Rename ``name`` (relative to ``dfd``) to ``name + DISARMED``, or to the first of
    ``name + DISARMED + ".N"`` that is free: the confined program may have made the plain name
    already (a non-empty directory there makes rename(2) fail, which would leave the repository
    armed).  True when moved, False when ``name`` is absent.  Raises OSError."""
    import errno

    for n in range(100):
        target = name + DISARMED + (f".{n}" if n else "")
        try:
            os.stat(target, dir_fd=dfd, follow_symlinks=False)
            continue  # taken: never replaced (rename(2) would replace a file or an empty directory)
        except FileNotFoundError:
            pass
        try:
            os.rename(name, target, src_dir_fd=dfd, dst_dir_fd=dfd)
        except FileNotFoundError:
            return False
        except OSError as e:
            if e.errno in (errno.EEXIST, errno.ENOTEMPTY, errno.EISDIR, errno.ENOTDIR):
                continue  # made meanwhile
            raise
        return True
    raise OSError(errno.EEXIST, "no free name to move it aside", name)


def _disarm_fd(gitdir: str, dfd: int) -> tuple[list[str], bool]:
    st = os.fstat(dfd)
    if (st.st_mode & 0o700) != 0o700:  # a read-only git directory cannot be changed: made writable
        grant_owner(dfd)
    changed: list[str] = []
    ok = True
    for name in ("config", "config.worktree"):
        path = os.path.join(gitdir, name)
        try:
            os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            continue
        except OSError:
            ok = False
            continue
        data = read_regular(name, MAX_READ + 1, nofollow=True, dir_fd=dfd)
        if data is None or len(data) > MAX_READ:  # a link, FIFO, directory, device, or too big
            try:
                if _move_aside(name, dfd):
                    changed.append(path)
            except OSError:
                ok = False
            continue
        entries = _parse_text(data.decode("utf-8", "replace"))
        kept = [(s, k, v) for s, k, v in entries if _safe_key(s, k)]
        if len(kept) == len(entries):
            continue
        lines, current = [], None
        for s, k, v in kept:
            if s != current:
                head, _, sub = s.partition(".")
                lines.append(f"[{head}" + (f" {_quote(sub)}" if sub else "") + "]")
                current = s
            lines.append(f"\t{k} = {_quote(v)}")
        try:
            if not _move_aside(name, dfd):
                continue
            changed.append(path)
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | posix.O_NOFOLLOW | posix.O_CLOEXEC
            fd = os.open(name, flags, 0o644, dir_fd=dfd)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write("\n".join(lines) + "\n")
        except OSError:
            ok = False
    path = os.path.join(gitdir, "hooks")
    try:
        hfd = os.open("hooks", _RDONLY | posix.O_DIRECTORY | posix.O_NOFOLLOW, dir_fd=dfd)
    except FileNotFoundError:
        armed = False
    except OSError:  # a link, a file, a FIFO: not git's empty hooks directory
        armed = True
    else:
        try:
            with os.scandir(hfd) as it:
                armed = any(not e.name.endswith(".sample") for e in it)
        except OSError:
            armed = True
        finally:
            os.close(hfd)
    if armed:
        try:
            if _move_aside("hooks", dfd):
                changed.append(path)
            os.mkdir("hooks", 0o755, dir_fd=dfd)
        except OSError:
            ok = False
    return changed, ok


#: the start of the item ``disarm_new`` returns for a repository it could not disarm
NOT_DISARMED = "!could not be disarmed: "


def disarm_new(
    roots: Sequence[str],
    known: Sequence[str],
    cache: str | None = None,
    missing: Sequence[tuple[str, str]] = (),
) -> list[str]:
    """``disarm`` every git directory under ``roots`` that is not in ``known`` (the ones found
    before the run), and every known one in which a ``WATCHED`` name listed ``missing`` before the
    run (``appeared``) now exists (that name moved aside if it is a pointer, the configs reduced);
    returns what was changed.  Never raises: a walk past its limit disarms nothing and returns one
    item starting with ``TOO_LARGE``, a repository not disarmed completely one starting with
    ``NOT_DISARMED`` (items starting with ``!``: the check is not complete; the caller warns,
    ``check_snapshot`` keeps its record)."""
    try:
        now = all_git_dirs(roots, cache=cache, repair=True)
    except TooLarge:
        return [TOO_LARGE + ", ".join(roots)]
    except Unchecked as e:
        return [TOO_LARGE + f"{e} (a directory that could not be walked)"]
    seen = set(known)
    out: list[str] = []
    for g in now:
        if g not in seen:
            changed, ok = disarm_at(g)
            out += changed if ok else [*changed, NOT_DISARMED + g]
    came: dict[str, list[str]] = {}
    for g, name in missing:
        if g in seen and os.path.lexists(os.path.join(g, name)):  # an absolute name: that file itself
            came.setdefault(g, []).append(name)
    for g, names in sorted(came.items()):
        # the configs reduced to safe keys (an include among them is dropped); pointers moved aside
        pointers = [n for n in names if n not in ("config", "config.worktree") and not n.startswith("/")]
        changed, ok = disarm_at(g, pointers)
        out += changed if ok else [*changed, NOT_DISARMED + g]
    return out


def write_snapshot(path: str, roots: Sequence[str], known: Sequence[str], home: str = "") -> None:
    """Record ``roots``, the git directories ``known`` before a run and, for each, the ``WATCHED``
    names it lacks (``appeared``): NUL-separated, the three lists apart by an empty field (the
    last as git directory, name pairs), atomically (a temporary name, then rename(2)).  Raises
    OSError."""
    pairs = [os.fsencode(x) for g, n in appeared(known, roots, home) for x in (g, n)]
    data = b"\0".join([*(os.fsencode(r) for r in roots), b"", *(os.fsencode(k) for k in known), b"", *pairs])
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | posix.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.rename(tmp, path)


def check_snapshot(path: str | None) -> list[str]:
    """``disarm_new`` against a ``write_snapshot`` record, then remove the record; returns what was
    changed.  Never raises.

    A check that could not complete (an item starting with ``!``: the walk passed
    ``MAX_ENTRIES``, a repository could not be disarmed) keeps the record: every later run's
    ``confine_journal.sweep`` (once its owner is gone) does the check again against the same
    snapshot *before* that run takes its own, so a repository the run created is never taken
    for one that existed before (issue #22).  The record is read as a regular file of this user's
    (``O_NOFOLLOW | O_NONBLOCK``, ``confine_journal.owned_file``)."""
    if not path:
        return []
    from .confine_journal import owned_file

    try:
        fd = os.open(path, _RDONLY | posix.O_NOFOLLOW)
    except OSError:
        return []
    try:
        if not owned_file(fd):
            return []
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        data = b"".join(chunks)
    except OSError:
        return []
    finally:
        os.close(fd)
    fields = [os.fsdecode(f) for f in data.split(b"\0")]
    cut = fields.index("") if "" in fields else len(fields)
    rest = fields[cut + 1 :]
    cut2 = rest.index("") if "" in rest else len(rest)  # a record of an earlier version has no pairs
    known, flat = rest[:cut2], rest[cut2 + 1 :]
    missing = list(zip(flat[0::2], flat[1::2], strict=False))
    cache = walk_cache(os.path.dirname(path), fields[:cut])
    changed = disarm_new(fields[:cut], known, cache, missing) if fields[:cut] else []
    if any(c.startswith("!") for c in changed):
        return changed  # not complete: the record stays for the next run's sweep to finish
    try:
        os.unlink(path)
    except OSError:
        pass
    return changed


#: the walk caches' name prefix: caches written before the state directory was held read-only in
#: every confinement (issue #22) may have been emptied from inside one, so none of them is read again
WALK_FORMAT = "walk2-"


def walk_cache(directory: str, roots: Sequence[str]) -> str | None:
    """The ``git_dirs`` cache file for ``roots``: ``confine-walk/walk2-KEY`` beside ``directory``
    (the journal directory), ``KEY`` the 32-bit FNV-1a hash of the roots (a name, not a check: the
    cache holds the roots' own paths; no ``zlib``, whose import costs confine's start-up a shared
    library).  None when that directory lies in (or around) one of ``roots``: the confined program
    could write the cache there.  The caches have their own directory so that the journal sweep,
    which runs on every start, lists only journals."""
    cache_dir = os.path.join(os.path.dirname(directory), "confine-walk")
    if any(within(cache_dir, r) or within(r, cache_dir) for r in roots):
        return None
    key = 0x811C9DC5
    for byte in b"\0".join(os.fsencode(r) for r in roots):
        key = ((key ^ byte) * 0x01000193) & 0xFFFFFFFF
    return os.path.join(cache_dir, f"{WALK_FORMAT}{key:08x}")
