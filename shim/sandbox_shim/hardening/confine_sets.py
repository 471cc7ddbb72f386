"""The path sets of the confinement profile: read-only, read-write, and read-only islands.

``build_sets`` turns the resolved executable, the caller's environment and the permitted paths into
``Sets``; the platform builders (bwrap + Landlock on Linux, SBPL on macOS) only render them.

Rules (each checked here, once):

* read-only: the system trees (Linux: ``/usr``, the merged-usr links, a short list of ``/etc``
  entries: loader, resolver, users, TLS), the executable's runtime read set (``readset``), the
  interpreter the platform runs inside first (if any), and ``permit_read`` paths outside the
  read-write ones.  Nothing there may contain a home directory (``$HOME``, the user's passwd entry)
  or the parent of a read-write path: either would expose what the profile exists to hide.
* read-write: ``permit_path`` and the extra subpaths, plus a private ``/tmp`` (made by the builder);
  while protected names are held, none may be or contain a home directory (``check_home``).
* islands: read-only paths *inside* a read-write path: ``permit_read`` entries there, the settings
  file, ``PROTECTED`` names at the top of each read-write path and, in every git directory there,
  ``GIT_PROTECTED`` entries and the ``core.hooksPath`` target (unless ``protect`` is False).
  A confined program that could write ``.git/hooks`` or ``.git/config`` would run code unconfined at
  the user's next ``git commit``; shell start-up files and editor task files likewise.  Missing
  ``hooks``/hooksPath directories are made (as ``git init`` does); missing tool settings are made as
  placeholders (``make_placeholders``; removed after the command).
* anchors: every directory between a read-write root and an island, bound onto itself by the
  builder so rename(2)/rmdir(2) fail with EBUSY (``mv .git .git_old`` cannot move the held paths
  aside).  A protected name that is a link inside a read-write path is refused: a link cannot be held.
  A ``.git`` made by the confined program itself is its own.
"""

from __future__ import annotations

import os
import sys

from .. import posix
from ..errors import CannotEnforce
from . import confine_git, readset

TYPE_CHECKING = False  # start-up cost: no typing at run time
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

LINUX_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
LINUX_ETC = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "alternatives",
    "localtime",
    "nsswitch.conf",
    "passwd",
    "group",
    "hosts",
    "host.conf",
    "resolv.conf",
    "gai.conf",
    "services",
    "protocols",
    "ssl",
    "ca-certificates",
    "ca-certificates.conf",
    "pki",
    "mime.types",
    "locale.alias",
    "os-release",
    "inputrc",
    "terminfo",
    "python3",
    f"python3.{sys.version_info[1]}",
)
#: names held read-only at the top of each read-write path (compare sandbox-runtime's mandatory
#: write denials: git hooks and config, shell start-up files, editor and tool settings)
PROTECTED = (
    ".gitmodules",
    ".gitconfig",
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".profile",
    ".zshrc",
    ".zprofile",
    ".zshenv",
    ".envrc",
    ".ripgreprc",
    ".mcp.json",
    ".vscode",
    ".idea",
    ".claude/commands",
    ".claude/agents",
    ".claude/settings.json",
    ".claude/settings.local.json",
)


#: missing protected names made as placeholders (then held read-only, so creating them inside is
#: denied): tool settings a program reads from the project it starts in, run commands from, and
#: that would not ask first — directories are made empty (git does not list an empty directory),
#: JSON files as ``{}`` (valid, empty settings).  Shell start-up files, ``.envrc``, ``.gitmodules``,
#: ``.gitconfig`` and ``.ripgreprc`` are held only when they exist: in a project directory they run
#: nothing by themselves (shells read them from ``$HOME``, direnv asks before loading a new
#: ``.envrc``, git runs nothing from ``.gitmodules``), and a placeholder would show in ``git status``.
PLACEHOLDER_DIRS = (".vscode", ".idea", ".claude/commands", ".claude/agents")
PLACEHOLDER_JSON = (".mcp.json", ".claude/settings.json", ".claude/settings.local.json")
_EMPTY_JSON = b"{}\n"


def make_placeholders(
    roots: Sequence[str], writable: Sequence[str], journal: str | None = None, owner: int | None = None
) -> tuple[list[str], str | None]:
    """Create what is missing of ``PLACEHOLDER_DIRS`` and ``PLACEHOLDER_JSON`` under each of ``roots`` (and
    missing parents such as ``.claude``), so the builder holds them read-only and their creation
    inside is denied too.  Never through a link (``O_NOFOLLOW``, ``lexists``).  Returns the created
    paths, parents first, and the journal file written (or None); ``remove_placeholders`` takes
    them away after the command, ``confine_journal.forget`` the journal.

    With ``journal`` (a directory: ``confine_journal``), what will be made is recorded there for
    ``owner`` (default this process) *before* anything is made, so a ``SIGKILL`` at any moment
    leaves a record the next confinement's ``confine_journal.sweep`` releases.  Raises OSError when
    the journal cannot be written (nothing made)."""
    todo: list[str] = []
    for root, name in ((r, n) for r in roots for n in (*PLACEHOLDER_DIRS, *PLACEHOLDER_JSON)):
        q = os.path.join(root, name)
        if os.path.lexists(q) or not any(_within(q, w) for w in writable):
            continue
        cur, ok, parents = root, True, []
        for comp in name.split("/")[:-1]:
            cur = os.path.join(cur, comp)
            if os.path.islink(cur) or (os.path.lexists(cur) and not os.path.isdir(cur)):
                ok = False
                break
            if not os.path.lexists(cur) and cur not in todo:
                parents.append(cur)
        if ok:
            todo += [*parents, q]
    if not todo:
        return [], None
    record = None
    if journal is not None:
        from . import confine_journal

        record = confine_journal.record(journal, todo, os.getpid() if owner is None else owner)
    made: list[str] = []
    try:
        for q in todo:
            if q.endswith(PLACEHOLDER_JSON) and any(
                q == os.path.join(r, n) for r in roots for n in PLACEHOLDER_JSON
            ):
                fd = os.open(q, os.O_WRONLY | os.O_CREAT | os.O_EXCL | posix.O_NOFOLLOW, 0o644)
                made.append(q)
                try:
                    os.write(fd, _EMPTY_JSON)
                finally:
                    os.close(fd)
            else:
                os.mkdir(q, 0o755)
                made.append(q)
    except OSError:
        remove_placeholders(made)
        from . import confine_journal

        confine_journal.forget(record)
        raise
    return made, record


def remove_placeholders(made: Sequence[str]) -> None:
    """Remove ``make_placeholders`` results still as made (empty directories, ``{}`` files;
    deepest first); what the user filled in meanwhile stays.  Each name is removed relative to a
    descriptor of its directory opened with no link followed (``confine_git.open_dir``), and a
    file is read only when regular (``O_NONBLOCK``): a ``.claude`` swapped for a link after the
    run cannot aim the removal outside the read-write path, a FIFO cannot block it.  Never raises."""
    for p in reversed(made):
        parent, name = os.path.split(p)
        try:
            dfd = confine_git.open_dir(parent)
        except OSError:
            continue
        try:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            kind = st.st_mode & 0o170000
            if kind == 0o040000:
                os.rmdir(name, dir_fd=dfd)
            elif kind == 0o100000 and st.st_size == len(_EMPTY_JSON):
                data = readset.read_regular(name, len(_EMPTY_JSON) + 1, nofollow=True, dir_fd=dfd)
                if data == _EMPTY_JSON:
                    os.unlink(name, dir_fd=dfd)
        except OSError:
            pass
        finally:
            os.close(dfd)


class Sets:
    """Resolved absolute paths.  ``read_only`` is sorted, without entries under another (non-link)
    entry; links are listed as links (recreated inside, not followed).  ``state``: sandbox-shim's
    state directory when it is trusted (``confine_journal.prepare_state``: its caches may be
    used), else None; ``relinked``: protected files given a new inode (``unshare_links``);
    ``claim``: the run's claim on its read-write paths (``confine_journal.claim``), or None."""

    __slots__ = (
        "read_only",
        "read_write",
        "islands",
        "anchors",
        "placeholders",
        "journal",
        "snapshot",
        "state",
        "relinked",
        "claim",
    )

    def __init__(
        self,
        read_only: tuple[str, ...],
        read_write: tuple[str, ...],
        islands: tuple[str, ...],
        anchors: tuple[str, ...] = (),
        placeholders: tuple[str, ...] = (),
        journal: str | None = None,
        snapshot: str | None = None,
        state: str | None = None,
        relinked: tuple[str, ...] = (),
        claim: str | None = None,
    ) -> None:
        self.read_only, self.read_write, self.islands = read_only, read_write, islands
        self.anchors, self.placeholders, self.journal = anchors, placeholders, journal
        self.snapshot, self.state, self.relinked, self.claim = snapshot, state, relinked, claim

    def __repr__(self) -> str:
        return (
            f"Sets(read_only={self.read_only!r}, read_write={self.read_write!r}, "
            f"islands={self.islands!r}, anchors={self.anchors!r})"
        )


def _within(path: str, root: str) -> bool:
    return readset.within(path, root)


def dedupe(paths: Sequence[str]) -> list[str]:
    """Sorted, without duplicates or paths already under another non-link entry."""
    out: list[str] = []
    held: set[str] = set()  # kept entries that are not links: what they contain is covered
    for p in sorted(set(paths)):  # a parent sorts before what lies beneath it
        up, covered = p, False
        while not covered:
            parent = os.path.dirname(up)
            if parent == up:
                break
            up = parent
            covered = up in held
        if not covered:
            out.append(p)
            if not os.path.islink(p):
                held.add(p)
    return out


def homes(env: Mapping[str, str]) -> list[str]:
    """Home directories the read set must never contain: ``$HOME`` and this user's passwd entry."""
    out = []
    for h in (env.get("HOME", ""), _passwd_home()):
        if h and os.path.isabs(h) and os.path.realpath(h) != "/":
            out.append(os.path.realpath(h))
    return sorted(set(out))


links_on_way = readset.links_on_way


def _planted(p: str, writable: Sequence[str], what: str) -> None:
    """Refuse ``p`` when resolving it passes a symlink inside a read-write path: the confined
    program could have made that link in an earlier run to aim the next run's grant anywhere."""
    try:
        links = links_on_way(os.path.abspath(p))
    except OSError as e:
        raise ValueError(f"{what} {p!r}: {e.strerror}") from e
    bad = [q for q in links if any(_within(q, w) for w in writable)]
    if bad:
        raise CannotEnforce(
            f"confinement.{what}",
            f"{what} {p!r} resolves through the symlink {bad[0]}, "
            "inside a read-write path (the confined program could have made it); "
            "name the target itself",
        )


def _passwd_home() -> str:
    try:
        return posix.home()
    except KeyError:
        return ""


def _system(linux: bool) -> list[str]:
    if not linux:
        return []
    out = [p for p in LINUX_SYSTEM if os.path.lexists(p)]
    out += [p for p in (os.path.join("/etc", n) for n in LINUX_ETC) if os.path.lexists(p)]
    return out + [os.path.realpath(p) for p in out if os.path.islink(p)]


#: inside a git directory (and each ``modules/*`` and ``worktrees/*`` one): what git executes or reads
#: configuration or other repositories' locations from (gitrepository-layout(5))
GIT_PROTECTED = (
    "hooks",
    "config",
    "config.worktree",
    "info",
    "commondir",
    "gitdir",
    "objects/info/alternates",
)


def _resolve_hooks_path(value: str, worktree: str, home: str) -> str:
    if value.startswith("~/") and home:
        value = os.path.join(home, value[2:])
    return os.path.realpath(value if os.path.isabs(value) else os.path.join(worktree, value))


def _git_held(
    gitdir: str, worktree: str | None, writable: Sequence[str], user_hooks: Sequence[str] = (), home: str = ""
) -> list[str]:
    """What to hold in a git directory inside a read-write path, its submodules' and worktrees'
    directories included (``GIT_PROTECTED``), the files its config includes, and the
    ``core.hooksPath`` targets (its own config's and ``user_hooks``, the values in the user's
    system and global config); ``hooks`` and the hooksPath targets are made (empty) when missing,
    as ``git init`` does, so they can be held."""
    out: list[str] = []
    todo, seen = [gitdir], set()
    configs: list[str] = []
    while todo:
        d = todo.pop()
        if d in seen or not any(_within(d, w) for w in writable):
            continue
        seen.add(d)
        hooks = os.path.join(d, "hooks")
        if not os.path.lexists(hooks):
            os.mkdir(hooks, 0o755)
        out += [os.path.join(d, n) for n in GIT_PROTECTED if os.path.lexists(os.path.join(d, n))]
        configs += [os.path.join(d, n) for n in ("config", "config.worktree")]
        for sub in ("modules", "worktrees"):
            top = os.path.join(d, sub)
            if os.path.isdir(top) and not os.path.islink(top):
                for dirpath, dirnames, _ in os.walk(top):
                    dirnames[:] = [n for n in dirnames if not os.path.islink(os.path.join(dirpath, n))]
                    if os.path.exists(os.path.join(dirpath, "HEAD")):
                        todo.append(os.path.realpath(dirpath))
                        dirnames[:] = [n for n in dirnames if n == "modules"]
    included = [i for c in configs for i in confine_git.includes(c, home)]
    out += [i for i in included if os.path.isfile(i) and any(_within(i, w) for w in writable)]
    base = worktree or gitdir
    for value in [*confine_git.hooks_paths(configs + included), *user_hooks]:
        hp = _resolve_hooks_path(value, base, home)
        if any(_within(hp, w) for w in writable) and hp not in out:
            if not os.path.lexists(hp):
                os.makedirs(hp, 0o755, exist_ok=True)
            out.append(hp)
    return out


def _repositories(
    read_write: Sequence[str],
    env: Mapping[str, str],
    known: list[str] | None = None,
    cache: str | None = None,
) -> list[str]:
    """What to hold of every git repository at any depth under the read-write paths
    (``confine_git.git_dirs``): each git directory's ``_git_held`` set and each gitfile (rewritten
    to name another directory it would bring that one's hooks).  ``known`` gets every git
    directory found (``confine_git.all_git_dirs``), for the check after the run.

    Raises: CannotEnforce("confinement.protected") past ``confine_git.MAX_ENTRIES`` entries."""
    try:
        found = confine_git.git_dirs(read_write, cache=cache)
    except confine_git.TooLarge as e:
        raise CannotEnforce(
            "confinement.protected",
            f"{e}: too many to find every git directory; "
            "name a smaller permit path, or pass --allow-protected-writes",
        ) from e
    if known is not None:
        known += confine_git.all_git_dirs(read_write, [g for g, _, _ in found])
    home = env.get("HOME", "")
    user_hooks = confine_git.hooks_paths(confine_git.user_configs(env))
    out: list[str] = []
    done: set[tuple[str, str | None]] = set()
    for gitdir, worktree, gitfile in found:
        if gitfile is not None:
            out.append(gitfile)
        if (gitdir, worktree) in done:
            continue
        done.add((gitdir, worktree))
        out += _git_held(gitdir, worktree, read_write, user_hooks, home)
    return out


def _protected(
    root: str, protect: bool, settings_file: str | None, writable: Sequence[str], missing: bool = False
) -> list[str]:
    out: list[str] = []
    if settings_file is not None:
        _planted(settings_file, writable, "settings")
        real = os.path.realpath(settings_file)
        if any(_within(real, w) for w in writable):
            out.append(real)
        elif any(readset.inside_by_identity(real, w) for w in writable):
            raise ValueError(  # held only under its own name: the other one would stay writable
                f"settings {settings_file!r} lies inside a read-write path under another name (a bind "
                "mount): it could not be held read-only; name it by the read-write path's own path"
            )
    if not protect:
        return out
    for name in (".git", *PROTECTED):  # a link cannot be held (a mount lands on its target), only swapped
        q = os.path.join(root, name)
        if os.path.islink(q) or any(os.path.islink(a) for a in _ancestors(q, root)):
            raise CannotEnforce(
                "confinement.protected",
                f"{q} is (or lies under) a symbolic link inside "
                "a read-write path: it cannot be held read-only (the confined program could "
                "replace the link); make it a real file or directory, or pass "
                "--allow-protected-writes",
            )
    for name in PROTECTED:
        q = os.path.join(root, name)
        if not os.path.lexists(q):
            if missing:  # a path rule (SBPL) holds a name whether or not it exists
                out.append(q)
            continue
        real = os.path.realpath(q)
        if any(_within(real, w) for w in writable):  # a link to elsewhere: held if that is writable
            out.append(real)
    return out


def _ancestors(path: str, root: str) -> list[str]:
    """The directories strictly between ``root`` and ``path``."""
    out, d = [], os.path.dirname(path)
    while d != root and _within(d, root):
        out.append(d)
        d = os.path.dirname(d)
    return out


def anchors(islands: Sequence[str], writable: Sequence[str]) -> list[str]:
    """Every directory between a read-write root and an island (exclusive), outermost first.

    Bound onto themselves they become mount points, which rename(2) and rmdir(2) refuse with
    ``EBUSY``: the confined program cannot move ``.git`` (or the settings file's directory) aside
    and put a copy with its own hooks in its place."""
    out: set[str] = set()
    for i in islands:
        roots = [w for w in writable if _within(i, w) and i != w]
        if not roots:
            continue
        top = max(roots, key=len)
        d = os.path.dirname(i)
        while d != top and _within(d, top) and not os.path.islink(d):
            out.add(d)
            d = os.path.dirname(d)
    return sorted(out, key=lambda p: (p.count("/"), p))


def check_state(state: str, read_write: Sequence[str]) -> None:
    """Refuse a read-write path equal to or inside sandbox-shim's state directory ``state``
    (``confine_journal.state_root``): the journals, walk caches, the /etc copy and the kept Landlock
    ABI there steer later confinements, so no confined program may write them (one around it gets
    it held read-only instead: ``build_sets``; one that holds it under another name — a bind mount
    — is refused too, since the read-only bind is made at the state directory's own path).
    Containment is by name and by identity (``readset.inside_by_identity``).  ``read_write[0]`` is
    the permit path, the rest the extra subpaths.

    Raises: ValueError naming the option and its settings pointer (``confine``: exit 2)."""
    for i, w in enumerate(read_write):
        what = "--permit-path (/permitPath)" if i == 0 else "--permit-extra-subpath (/permitExtraSubpaths)"
        if readset.inside_by_identity(w, state):
            raise ValueError(
                f"{what} {w!r} lies inside sandbox-shim's state directory {state}, which no "
                "confinement may write (journals, caches, the /etc copy); name a directory outside "
                "it, or set XDG_STATE_HOME elsewhere"
            )
        if readset.inside_by_identity(state, w) and not _within(state, w):
            raise ValueError(  # held read-only only under its own name: another one would stay writable
                f"{what} {w!r} holds sandbox-shim's state directory {state} under another name (a "
                "bind mount of a directory above it), where it could not be held read-only; name the "
                "directory by its own path"
            )


def check_home(home_dirs: Sequence[str], read_write: Sequence[str]) -> None:
    """Refuse a read-write path that is or contains a home directory (``homes``) while protected
    names are held: a home's start-up and credential files (``~/.bash_profile``, ``~/.gitconfig``,
    ``~/.config/git/config``, ``~/.ssh/authorized_keys``, ``~/.config/systemd/user``,
    ``~/.local/bin`` on ``PATH``, ...) run code or grant access wherever the user goes next, a
    missing one cannot be held without making it on the host (a placeholder ``~/.bash_profile``
    alone stops bash reading ``~/.profile``), and the list is open-ended (issue #22).
    ``read_write[0]`` is the permit path, the rest the extra subpaths.

    Raises: ValueError naming the option and its settings pointer (``confine``: exit 2)."""
    for i, w in enumerate(read_write):
        for h in home_dirs:
            if readset.inside_by_identity(h, w):  # by name or by identity: a bind mount of the home too
                what = (
                    "--permit-path (/permitPath)"
                    if i == 0
                    else "--permit-extra-subpath (/permitExtraSubpaths)"
                )
                raise ValueError(
                    f"{what} {w!r} is or contains the home directory {h}, whose start-up and "
                    "credential files (shell profiles, ~/.gitconfig, ~/.ssh, ~/.config) the "
                    "confined program could create or change; name a project directory inside "
                    "it, or pass --allow-protected-writes"
                )


def unshare_links(held: Sequence[str]) -> list[str]:
    """Give every regular file in ``held`` (a protected path, or a file at any depth in a
    protected directory such as ``.git/hooks``) that has other hard links (``st_nlink > 1``) an
    inode of its own: a copy (same content and permission bits) under a temporary name in the same
    directory, renamed over it (rename(2): atomic).  A protected name is held read-only by its
    mount, but a link made in an earlier run (``ln .git/config x``, while it was not yet protected)
    would reach the same inode from a writable name; after this none does.  Links are not
    followed.  Returns the paths replaced.

    Raises: ValueError when a file cannot be replaced (the confinement is not built: fail
    closed; ``confine``: exit 2)."""
    out: list[str] = []
    todo = list(held)
    while todo:
        p = todo.pop()
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            continue
        kind = st.st_mode & 0o170000
        if kind == 0o040000:
            with os.scandir(p) as it:
                todo += [e.path for e in it if not e.is_symlink()]
        elif kind == 0o100000 and st.st_nlink > 1:
            try:
                _replace_with_copy(p, st)
            except OSError as e:
                raise ValueError(
                    f"{p} is held read-only but has {st.st_nlink - 1} other hard link(s), and it could "
                    f"not be given an inode of its own ({e.strerror or e}); remove the other links"
                ) from e
            out.append(p)
    return sorted(out)


def _replace_with_copy(path: str, st: os.stat_result) -> None:
    """``path`` (lstat ``st``) replaced by a copy with a new inode: same content, permission bits,
    times and (when run as root) owner.  Raises OSError (the copy is removed, ``path`` untouched)."""
    tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.{os.getpid()}.relink")
    src = os.open(path, os.O_RDONLY | posix.O_NOFOLLOW | posix.O_NONBLOCK)
    try:
        now = os.fstat(src)
        if (now.st_ino, now.st_dev) != (st.st_ino, st.st_dev):
            raise OSError(f"{path} changed while it was copied")
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | posix.O_NOFOLLOW, 0o600)
        try:
            while chunk := os.read(src, 1 << 20):
                os.write(out, chunk)
            if posix.geteuid() == 0 and (st.st_uid, st.st_gid) != (0, 0):
                posix.fchown(out, st.st_uid, st.st_gid)  # root confining a user's project: theirs still
            posix.fchmod(out, st.st_mode & 0o7777)
        finally:
            os.close(out)
        os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
        os.rename(tmp, path)
    except BaseException:
        from ..durable import discard  # the failure path only: durable is not on confine's start-up

        discard(tmp)
        raise
    finally:
        os.close(src)


def build_sets(
    exe: str,
    env: Mapping[str, str],
    read_write: Sequence[str],
    permit_read: Sequence[str] = (),
    protect: bool = True,
    settings_file: str | None = None,
    linux: bool | None = None,
    placeholders: bool = True,
    interpreters: Sequence[str] = (),
    spelled: str | None = None,
    owner: int | None = None,
) -> Sets:
    """Compute the three sets (rules in the module docstring).

    Args:
        exe: the resolved executable (absolute), or a bare name the OS will reject.
        env: the environment the command gets (``PATH``, ``HOME``, ``PYTHONUSERBASE``, ...).
        read_write: resolved read-write directories (``permit_path`` first).
        permit_read: extra read-only paths as given (resolved here; must exist, not ``/``).
        protect: hold ``PROTECTED`` names read-only; settings_file: held read-only when inside.
        linux: include the Linux system trees (default: on Linux).
        placeholders: create the missing protected names (``make_placeholders``) so they are held
            too; the caller removes ``Sets.placeholders`` after the command.
        interpreters: executables the platform runs inside before the command (the Python Landlock
            helper's interpreter); their runtime read sets join the read-only set.
        owner: the process whose end releases the placeholders (default this one), journalled
            (``confine_journal``) before they are made.
        spelled: ``exe`` as the caller named it, before links were resolved: when that passes a
            link inside a read-write path, ``exe`` was chosen by what a confined run can change.

    Content a confined run can change (inside ``read_write``: a ``#!`` line, ELF headers, a
    ``package.json``, a link) grants nothing outside ``read_write`` but what ``readset.Guard.admit``
    allows.

    Raises:
        CannotEnforce("confinement.read_set" | "confinement.boundary" | "confinement.permit_read",
            detail): a runtime entry contains a home directory or the parent of a read-write path;
            a ``permit_read`` entry resolves through a symlink inside a read-write path.
        CannotEnforce("confinement.protected"): with ``protect`` on Linux, the state directory
            (``confine_journal.prepare_state``) is missing or not this user's own.
        ValueError: a ``permit_read`` entry does not exist or is ``/``; a read-write path is (or
            lies inside) the state directory (``check_state``); with ``protect``, a read-write
            path is or contains a home directory (``check_home``); a protected file (or the settings
            file) with other hard links cannot be replaced (``unshare_links``).

    The state directory is made before anything else and, when a read-write path covers it, held
    read-only (an island, whatever ``protect`` says: it is the shim's, not the project's).
    Protected files with other hard links, and the settings file (inside a read-write path or
    not: the next run reads it), are replaced by copies (``unshare_links``; listed in
    ``Sets.relinked``).
    """
    linux = sys.platform == "linux" if linux is None else linux
    system = _system(linux)
    guard = readset.Guard(read_write, env)
    trusted = spelled is None or not guard.touches(spelled)
    runtime = readset.runtime_read_set(exe, env, guard=guard, trusted=trusted) if os.path.isabs(exe) else []
    for interpreter in interpreters:  # what runs inside before the command
        runtime += readset.runtime_read_set(interpreter, env, guard=guard)
    runtime = [p for p in runtime if os.path.lexists(p) and not readset.in_system(p)]
    home_dirs = homes(env)  # once: realpath and a passwd lookup each time
    for p in runtime:
        for h in home_dirs:
            if _within(h, p) and not os.path.islink(p):
                raise CannotEnforce(
                    "confinement.read_set",
                    f"runtime entry {p} contains the home directory "
                    f"{h}; install the tool elsewhere or run it through its interpreter",
                )
    extra_ro: list[str] = []
    islands: list[str] = []
    for p in permit_read:
        _planted(p, read_write, "permit_read")
        real = os.path.realpath(p)
        if not os.path.exists(real):
            raise ValueError(f"permit_read {p!r} does not exist")
        if real == "/":
            raise ValueError("permit_read must not be / (it would permit reading everything)")
        (islands if any(_within(real, r) for r in read_write) else extra_ro).append(real)
    extra_islands = set(islands)  # the caller's own read-only grants: held, never relinked
    ro = [p for p in system + runtime if not any(_within(p, r) for r in read_write)]
    for r in read_write:
        boundary = os.path.dirname(r)
        cover = [q for q in ro if not os.path.islink(q) and _within(boundary, q)]
        if cover:
            raise CannotEnforce(
                "confinement.boundary",
                f"{r}: its parent {boundary} lies inside the "
                f"runtime read set entry {cover[0]}, so siblings would be readable",
            )
    from . import confine_journal

    if protect:
        check_home(home_dirs, read_write)
    state, trusted = confine_journal.prepare_state(env)
    if state is not None:
        check_state(state, read_write)
        if any(_within(state, w) for w in read_write):
            islands.append(state)  # held read-only inside, whatever ``protect`` says: the shim's
    made: list[str] = []
    record = snapshot = claimed = None
    journal: str | None = None
    if protect and linux:
        journal = confine_journal.journal_dir(env)
        if journal is None or not trusted:
            why = (
                "could not be made"
                if state is not None and not os.path.lexists(state)
                else f"must be a directory owned by you (uid {posix.geteuid()}), not writable by "
                "group or others, and not a symbolic link"
            )
            raise CannotEnforce(
                "confinement.protected",
                f"no usable place for the placeholder journal ({journal or 'no $HOME'}): "
                f"sandbox-shim's state directory {why}; set XDG_STATE_HOME to a directory of your "
                "own, or pass --allow-protected-writes",
            )
        confine_journal.sweep(journal, remove_placeholders)  # what killed confinements left
        claimed = confine_journal.claim(journal, read_write, os.getpid() if owner is None else owner)
        if placeholders:
            try:
                made, record = make_placeholders(read_write, read_write, journal, owner)
            except BaseException:
                confine_journal.forget(claimed)
                raise
    try:
        for r in read_write:
            islands += _protected(r, protect, settings_file, read_write, missing=not linux)
        if protect:
            known: list[str] | None = [] if journal is not None else None
            cache = confine_git.walk_cache(journal, read_write) if journal is not None else None
            islands += _repositories(read_write, env, known, cache)
            if journal is not None and known is not None:
                from . import confine_journal

                snapshot = confine_journal.snapshot_path(journal, os.getpid() if owner is None else owner)
                confine_git.write_snapshot(snapshot, read_write, known, env.get("HOME", ""))
    except BaseException:
        remove_placeholders(made)
        from . import confine_journal

        confine_journal.forget(record)
        confine_journal.forget(snapshot)
        confine_journal.forget(claimed)
        raise
    held = dedupe(islands)
    try:  # before the launch: no link elsewhere may reach a protected inode
        steer = [os.path.realpath(settings_file)] if settings_file is not None else []  # read next run
        relinked = unshare_links(
            dedupe([p for p in [*islands, *steer] if p != state and p not in extra_islands])
        )
    except BaseException:
        remove_placeholders(made)
        confine_journal.forget(record)
        confine_journal.forget(snapshot)
        confine_journal.forget(claimed)
        raise
    return Sets(
        tuple(dedupe(ro + extra_ro)),
        tuple(read_write),
        tuple(held),
        tuple(anchors(held, read_write)),
        tuple(made),
        record,
        snapshot,
        state if trusted else None,
        tuple(relinked),
        claimed,
    )
