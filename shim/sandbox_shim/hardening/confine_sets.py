"""The path sets of the confinement profile: read-only, read-write, and read-only islands.

``build_sets`` turns the resolved executable, the caller's environment and the permitted paths into
``Sets``; the platform builders (bwrap + Landlock on Linux, SBPL on macOS) only render them.

Rules (each checked here, once):

* read-only: the system trees (Linux: ``/usr``, the merged-usr links, a short list of ``/etc``
  entries: loader, resolver, users, TLS), the executable's runtime read set (``readset``), the
  interpreter this package runs the Landlock helper with, and ``permit_read`` paths outside the
  read-write ones.  Nothing there may contain a home directory (``$HOME``, the user's passwd entry)
  or the parent of a read-write path: either would expose what the profile exists to hide.
* read-write: ``permit_path`` and the extra subpaths, plus a private ``/tmp`` (made by the builder).
* islands: read-only paths *inside* a read-write path: ``permit_read`` entries there, the settings
  file, and ``PROTECTED`` names at the top of each read-write path (unless ``protect`` is False).
  A confined program that could write ``.git/hooks`` or ``.git/config`` would run code unconfined at
  the user's next ``git commit``; shell start-up files and editor task files likewise.  When ``.git``
  exists without ``hooks``, an empty ``hooks`` directory is made (as ``git init`` does) so it can be
  held read-only.  Protection covers existing names only: a ``.git`` made by the confined program
  itself is its own.
"""

from __future__ import annotations

import os
import pwd
import sys

from ..errors import CannotEnforce
from . import readset

TYPE_CHECKING = False  # start-up cost: no typing at run time
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

LINUX_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
LINUX_ETC = (
    "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime", "nsswitch.conf",
    "passwd", "group", "hosts", "host.conf", "resolv.conf", "gai.conf", "services", "protocols",
    "ssl", "ca-certificates", "ca-certificates.conf", "pki", "mime.types", "locale.alias",
    "os-release", "inputrc", "terminfo", "python3", f"python3.{sys.version_info[1]}",
)
#: names held read-only at the top of each read-write path (compare sandbox-runtime's mandatory
#: write denials: git hooks and config, shell start-up files, editor and tool settings)
PROTECTED = (
    ".git/hooks", ".git/config", ".git/info", ".gitmodules", ".gitconfig", ".bashrc", ".bash_profile",
    ".bash_login", ".profile", ".zshrc", ".zprofile", ".zshenv", ".envrc", ".ripgreprc", ".mcp.json",
    ".vscode", ".idea", ".claude/commands", ".claude/agents", ".claude/settings.json",
)


class Sets:
    """Resolved absolute paths.  ``read_only`` is sorted, without entries under another (non-link)
    entry; links are listed as links (recreated inside, not followed)."""

    __slots__ = ("read_only", "read_write", "islands")

    def __init__(self, read_only: tuple[str, ...], read_write: tuple[str, ...],
                 islands: tuple[str, ...]) -> None:
        self.read_only, self.read_write, self.islands = read_only, read_write, islands

    def __repr__(self) -> str:
        return f"Sets(read_only={self.read_only!r}, read_write={self.read_write!r}, islands={self.islands!r})"


def _within(path: str, root: str) -> bool:
    return readset.within(path, root)


def dedupe(paths: Sequence[str]) -> list[str]:
    """Sorted, without duplicates or paths already under another non-link entry."""
    out: list[str] = []
    for p in sorted(set(paths)):
        if not any(_within(p, q) and not os.path.islink(q) for q in out):
            out.append(p)
    return out


def homes(env: Mapping[str, str]) -> list[str]:
    """Home directories the read set must never contain: ``$HOME`` and this user's passwd entry."""
    out = []
    for h in (env.get("HOME", ""), _passwd_home()):
        if h and os.path.isabs(h) and os.path.realpath(h) != "/":
            out.append(os.path.realpath(h))
    return sorted(set(out))


def _passwd_home() -> str:
    try:
        return pwd.getpwuid(os.geteuid()).pw_dir
    except KeyError:
        return ""


def _system(linux: bool) -> list[str]:
    if not linux:
        return []
    out = [p for p in LINUX_SYSTEM if os.path.lexists(p)]
    out += [p for p in (os.path.join("/etc", n) for n in LINUX_ETC) if os.path.lexists(p)]
    return out + [os.path.realpath(p) for p in out if os.path.islink(p)]


def _protected(root: str, protect: bool, settings_file: str | None, writable: Sequence[str]) -> list[str]:
    out: list[str] = []
    if settings_file is not None:
        real = os.path.realpath(settings_file)
        if any(_within(real, w) for w in writable):
            out.append(real)
    if not protect:
        return out
    git = os.path.join(root, ".git")
    if os.path.isdir(git) and not os.path.islink(git) and not os.path.lexists(os.path.join(git, "hooks")):
        os.mkdir(os.path.join(git, "hooks"), 0o755)
    for name in PROTECTED:
        q = os.path.join(root, name)
        if not os.path.lexists(q):
            continue
        real = os.path.realpath(q)
        if any(_within(real, w) for w in writable):  # a link to elsewhere: held if that is writable
            out.append(real)
    return out


def build_sets(exe: str, env: Mapping[str, str], read_write: Sequence[str], permit_read: Sequence[str] = (),
               protect: bool = True, settings_file: str | None = None,
               linux: bool | None = None) -> Sets:
    """Compute the three sets (rules in the module docstring).

    Args:
        exe: the resolved executable (absolute), or a bare name the OS will reject.
        env: the environment the command gets (``PATH``, ``HOME``, ``PYTHONUSERBASE``, ...).
        read_write: resolved read-write directories (``permit_path`` first).
        permit_read: extra read-only paths as given (resolved here; must exist, not ``/``).
        protect: hold ``PROTECTED`` names read-only; settings_file: held read-only when inside.
        linux: include the Linux system trees (default: on Linux).

    Raises:
        CannotEnforce("confinement.read_set" | "confinement.boundary", detail): a runtime entry
            contains a home directory or the parent of a read-write path.
        ValueError: a ``permit_read`` entry does not exist or is ``/``.
    """
    linux = sys.platform == "linux" if linux is None else linux
    system = _system(linux)
    runtime = readset.runtime_read_set(exe, env) if os.path.isabs(exe) else []
    if linux:  # the interpreter that runs the Landlock helper inside
        runtime += readset.runtime_read_set(os.path.realpath(sys.executable), env)
    runtime = [p for p in runtime if os.path.lexists(p) and not readset.in_system(p)]
    for p in runtime:
        for h in homes(env):
            if _within(h, p) and not os.path.islink(p):
                raise CannotEnforce("confinement.read_set", f"runtime entry {p} contains the home directory "
                                    f"{h}; install the tool elsewhere or run it through its interpreter")
    extra_ro: list[str] = []
    islands: list[str] = []
    for p in permit_read:
        real = os.path.realpath(p)
        if not os.path.exists(real):
            raise ValueError(f"permit_read {p!r} does not exist")
        if real == "/":
            raise ValueError("permit_read must not be / (it would permit reading everything)")
        (islands if any(_within(real, r) for r in read_write) else extra_ro).append(real)
    ro = [p for p in system + runtime if not any(_within(p, r) for r in read_write)]
    for r in read_write:
        boundary = os.path.dirname(r)
        cover = [q for q in ro if not os.path.islink(q) and _within(boundary, q)]
        if cover:
            raise CannotEnforce("confinement.boundary", f"{r}: its parent {boundary} lies inside the "
                                f"runtime read set entry {cover[0]}, so siblings would be readable")
    for r in read_write:
        islands += _protected(r, protect, settings_file, read_write)
    return Sets(tuple(dedupe(ro + extra_ro)), tuple(read_write), tuple(dedupe(islands)))
