"""The runtime read set of the confinement profile: what one executable needs to *run*, and no more.

Given the resolved executable this finds, without running it:

* its ``#!`` interpreter chain, recursively (``/usr/bin/env NAME`` resolved through ``PATH``),
  every symlink on the way (the kernel follows them at exec time, so each link must exist inside);
* for ELF files, the program interpreter (``PT_INTERP``) and the shared libraries (``DT_NEEDED``)
  resolved as ld.so(8) does: ``DT_RPATH`` (when there is no ``DT_RUNPATH``), ``LD_LIBRARY_PATH``,
  ``DT_RUNPATH``, the ``/etc/ld.so.conf`` directories, then the default directories; ``$ORIGIN``
  expanded (elf(5), ld.so(8) "Rpath token expansion").  Only objects outside the system trees are
  listed (the system trees are granted whole) and only those are followed further;
* a Python interpreter's own tree: the standard library directory ``PREFIX/lib/pythonX.Y`` (the
  ``lib/pythonX.Y/os.py`` landmark of CPython's getpath), and for a venv (``pyvenv.cfg`` beside or
  above the interpreter, PEP 405) the venv's ``pyvenv.cfg`` and ``lib``; for a console script in the
  user base (``PYTHONUSERBASE`` or ``~/.local``, PEP 370) that base's ``lib/pythonX.Y/site-packages``;
* a version manager's shim (``ROOT/shims/NAME`` next to ``ROOT/libexec``: pyenv, rbenv, nodenv): that
  manager's ``ROOT``, which holds the versions the shim picks from at run time;
* for a script inside a ``node_modules`` package: that package's root (the directory holding its
  ``package.json``) and, recursively, the packages named in its ``dependencies`` and
  ``optionalDependencies``, found as Node's resolver does (``node_modules`` of the package, then of
  each ancestor).  Never the project around it.

Nothing here grants a directory because it *contains* the executable: a tool in ``~/bin`` gets the
tool, not ``~``.  Stdlib only; no subprocess (start-up cost matters: ``confine`` runs per command).
"""

from __future__ import annotations

import os

from .. import posix

TYPE_CHECKING = False  # start-up cost: no typing at run time
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Literal

#: trees granted whole (read-only) on Linux; what lies below them needs no per-file grant
SYSTEM_TREES = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
DEFAULT_LIB_DIRS = (
    "/lib",
    "/usr/lib",
    "/lib64",
    "/usr/lib64",
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
)
_MAX_DEPTH = 8


def within(path: str, root: str) -> bool:
    """True when ``path`` is ``root`` or lies beneath it (both absolute, normalised)."""
    return path == root or path.startswith(root.rstrip("/") + "/")


def inside_by_identity(path: str, root: str) -> bool:
    """True when ``path`` is ``root`` or lies beneath it by name (``within``) or by identity
    (``paths.contains``: the device and inode of ``root`` are those of ``path`` or of a directory
    above it), so another name for the same directory (a bind mount, a mount namespace's alias)
    counts too.  Never raises."""
    from ..paths import contains

    return within(path, root) or contains(root, path)


def links_on_way(path: str) -> list[str]:
    """Where the symlinks met while resolving ``path`` (absolute) are, in walk order, as the kernel
    walks it (path_resolution(7)); at most 40 links, then ELOOP as OSError."""
    parts = [c for c in path.split("/") if c][::-1]
    cur, seen = "/", []
    while parts:
        c = parts.pop()
        if c == ".":
            continue
        if c == "..":
            cur = os.path.dirname(cur)
            continue
        nxt = os.path.join(cur, c)
        if os.path.islink(nxt):
            seen.append(nxt)
            if len(seen) > 40:
                raise OSError(40, "too many levels of symbolic links", path)
            target = os.readlink(nxt)
            parts.extend([x for x in target.split("/") if x][::-1])
            cur = "/" if target.startswith("/") else cur
        else:
            cur = nxt
    return seen


class Guard:
    """What a confined run can change, and what content from there may still grant.

    ``writable`` are the resolved read-write roots.  Whatever the read-set computation reads from
    them — a file's bytes (``#!`` line, ELF headers, ``package.json``), a link's target, a directory
    listing — a confined program could have written in an earlier run, so an entry derived from it
    that lies *outside* them is granted only when ``admit`` says so: a symbolic link (recreated
    as a link: it exposes no data), a file in a system tree, an ELF file (a program or library:
    code, not data), an executable file in a ``PATH`` directory of the caller (a tool the caller can
    run anyway), or a CPython standard library directory (``lib/pythonX.Y`` holding ``os.py``).
    Never another directory: a ``package.json`` dependency, a venv beside a planted link, a version
    manager root.  ``path_dirs``: the caller's ``PATH`` directories outside ``writable``, resolved.
    """

    __slots__ = ("writable", "_path", "_path_dirs")

    def __init__(self, writable: Sequence[str], env: Mapping[str, str]) -> None:
        self.writable = tuple(writable)
        self._path = env.get("PATH", "")
        self._path_dirs: frozenset[str] | None = None

    @property
    def path_dirs(self) -> frozenset[str]:
        if self._path_dirs is None:  # computed on first use: most runs never ask
            self._path_dirs = frozenset(
                os.path.realpath(d)
                for d in self._path.split(":")
                if d and os.path.isabs(d) and not self.touches(d)
            )
        return self._path_dirs

    def inside(self, path: str) -> bool:
        """True when ``path`` (absolute, normalised) lies in a read-write root."""
        return any(within(path, w) for w in self.writable)

    def touches(self, path: str) -> bool:
        """True when reading ``path`` reads what a confined run can change: it is spelled, resolves
        or passes a symbolic link inside a read-write root."""
        a = os.path.abspath(path)
        if self.inside(a) or self.inside(os.path.realpath(a)):
            return True
        try:
            return any(self.inside(q) for q in links_on_way(a))
        except OSError:
            return True

    def on_path(self, path: str) -> bool:
        """True for an executable regular file whose directory is one of the caller's ``PATH``
        directories (outside the read-write roots)."""
        return (
            os.path.realpath(os.path.dirname(os.path.abspath(path))) in self.path_dirs
            and os.path.isfile(path)
            and os.access(path, os.X_OK)
        )

    def admit(self, entry: str) -> bool:
        """Whether ``entry``, derived from content a confined run can change, may be granted."""
        if os.path.islink(entry) or self.inside(os.path.realpath(entry)) or in_system(entry):
            return True
        if os.path.isdir(entry):
            real = os.path.realpath(entry)
            return (
                python_name(os.path.basename(real)) not in (None, "")
                and os.path.basename(os.path.dirname(real)) == "lib"
                and os.path.isfile(os.path.join(real, "os.py"))
            )
        return is_elf(entry) or self.on_path(entry)

    def keep(self, entries: list[str], trusted: bool) -> list[str]:
        """``entries`` as they are when derived from trusted content, else only the admitted ones."""
        return entries if trusted else [e for e in entries if self.admit(e)]


#: bytes of a ``package.json`` read at most (a larger one is a package not followed)
MAX_PACKAGE_JSON = 16 << 20
_RDONLY = os.O_RDONLY | posix.O_NONBLOCK | posix.O_CLOEXEC


def open_regular(path: str, nofollow: bool = False, dir_fd: int | None = None) -> int | None:
    """A descriptor of the regular file ``path`` (the caller closes it), or None when it is
    missing, unreadable or no regular file: opened ``O_NONBLOCK`` and checked with fstat(2), so a
    FIFO or device a confined program planted never blocks (``jsonguard.read_regular``'s rule);
    ``nofollow``: nor is a final symbolic link followed.  Never raises."""
    try:
        fd = os.open(path, _RDONLY | (posix.O_NOFOLLOW if nofollow else 0), dir_fd=dir_fd)
    except (OSError, ValueError):
        return None
    try:
        if os.fstat(fd).st_mode & 0o170000 == 0o100000:  # S_ISREG (stat.h)
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def read_regular(
    path: str, limit: int = 1 << 20, nofollow: bool = False, dir_fd: int | None = None
) -> bytes | None:
    """At most ``limit`` bytes of the regular file ``path`` (relative to ``dir_fd`` when given), or
    None when it is missing, unreadable or no regular file (``open_regular``: a FIFO or device a
    confined program planted — a ``package.json``, a ``#!`` script, ``.git/commondir``, a git
    config — never blocks the read-set computation, the git walk, the release or the sweep).
    Never raises."""
    fd = open_regular(path, nofollow, dir_fd)
    if fd is None:
        return None
    try:
        return posix.read_at_most(fd, limit)
    except OSError:
        return None
    finally:
        os.close(fd)


def is_elf(path: str) -> bool:
    """True for a regular file starting with the ELF magic (elf(5))."""
    return read_regular(path, 4) == b"\x7fELF"


def in_system(path: str) -> bool:
    """True when ``path`` lies in one of ``SYSTEM_TREES`` (after resolving its parent; a final link
    is not followed: a venv's ``bin/python`` pointing into ``/usr`` is still the venv's)."""
    real = os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))
    return any(within(real, t) for t in SYSTEM_TREES)


def symlink_chain(path: str) -> list[str]:
    """``path`` and each link it goes through to a final non-link, each with a resolved parent.

    ``/usr/bin/python3`` -> ``["/usr/bin/python3", "/usr/bin/python3.11"]``.  At most 40 links
    (path_resolution(7) ELOOP limit); a dangling end is included as is.
    """
    out: list[str] = []
    p = path
    for _ in range(40):
        p = os.path.join(os.path.realpath(os.path.dirname(p)), os.path.basename(p))
        out.append(p)
        if not os.path.islink(p):
            break
        target = os.readlink(p)
        p = target if os.path.isabs(target) else os.path.join(os.path.dirname(p), target)
    return out


def shebang(path: str) -> list[str]:
    """The words of a ``#!`` line (execve(2) "Interpreter scripts"), or ``[]``."""
    head = read_regular(path, 256) or b""
    if not head.startswith(b"#!"):
        return []
    return head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").split()


# ---- ELF (elf(5)) -----------------------------------------------------------------------------------

PT_LOAD, PT_DYNAMIC, PT_INTERP = 1, 2, 3
DT_NULL, DT_NEEDED, DT_STRTAB, DT_RPATH, DT_RUNPATH = 0, 1, 5, 15, 29


def elf_dynamic(path: str) -> tuple[str | None, list[str], list[str], list[str]] | None:
    """``(interpreter, needed, rpath, runpath)`` of an ELF file, or None when ``path`` is not ELF.

    Reads the ELF header, the program headers (``PT_INTERP``, ``PT_DYNAMIC``, ``PT_LOAD``) and the
    dynamic section's string table; malformed files give None rather than an exception.
    """
    fd = open_regular(path)  # not a FIFO or device: they are no ELF file, and would block
    if fd is None:
        return None
    try:
        with os.fdopen(fd, "rb") as fh:
            ident = fh.read(64)
            if len(ident) < 52 or ident[:4] != b"\x7fELF" or ident[4] not in (1, 2) or ident[5] not in (1, 2):
                return None
            order: Literal["little", "big"] = "little" if ident[5] == 1 else "big"
            is64 = ident[4] == 2

            def num(buf: bytes, at: int, size: int, signed: bool = False) -> int:
                if at + size > len(buf):
                    raise ValueError("truncated")
                return int.from_bytes(buf[at : at + size], order, signed=signed)

            # offsets and sizes of elf(5) Elf64_Ehdr/Elf32_Ehdr, Elf64_Phdr/Elf32_Phdr, Elf64_Dyn/Elf32_Dyn
            if is64:
                phoff, phentsize, phnum = num(ident, 32, 8), num(ident, 54, 2), num(ident, 56, 2)
                ph_size, word, at = 56, 8, (0, 8, 16, 32)  # p_type, p_offset, p_vaddr, p_filesz
            else:
                phoff, phentsize, phnum = num(ident, 28, 4), num(ident, 42, 2), num(ident, 44, 2)
                ph_size, word, at = 32, 4, (0, 4, 8, 16)
            if phnum > 512 or phentsize < ph_size:
                return None
            fh.seek(phoff)
            table = fh.read(phentsize * phnum)
            loads: list[tuple[int, int, int]] = []
            interp: str | None = None
            dynamic: tuple[int, int] | None = None
            for i in range(phnum):
                o = i * phentsize
                if o + ph_size > len(table):
                    raise ValueError("truncated")
                p_type = num(table, o + at[0], 4)
                p_offset, p_vaddr, p_filesz = (num(table, o + a, word) for a in at[1:])
                if p_type == PT_LOAD:
                    loads.append((p_vaddr, p_offset, p_filesz))
                elif p_type == PT_INTERP and p_filesz < 4096:
                    fh.seek(p_offset)
                    interp = fh.read(p_filesz).split(b"\0", 1)[0].decode("utf-8", "replace") or None
                elif p_type == PT_DYNAMIC and p_filesz < (1 << 20):
                    dynamic = (p_offset, p_filesz)
            if dynamic is None:
                return interp, [], [], []
            fh.seek(dynamic[0])
            raw = fh.read(dynamic[1])
            entries = [
                (num(raw, o, word, signed=True), num(raw, o + word, word))  # d_tag (signed), d_val
                for o in range(0, len(raw) - 2 * word + 1, 2 * word)
            ]
            strtab = next((v for t, v in entries if t == DT_STRTAB), None)
            base = next(
                (off + strtab - va for va, off, sz in loads if strtab is not None and va <= strtab < va + sz),
                None,
            )
            if base is None:
                return interp, [], [], []

            def string(at: int) -> str:
                fh.seek(base + at)
                return fh.read(4096).split(b"\0", 1)[0].decode("utf-8", "replace")

            needed, rpath, runpath = [], [], []
            for tag, val in entries:
                if tag == DT_NULL:
                    break
                if tag == DT_NEEDED:
                    needed.append(string(val))
                elif tag == DT_RPATH:
                    rpath += string(val).split(":")
                elif tag == DT_RUNPATH:
                    runpath += string(val).split(":")
            return interp, needed, rpath, runpath
    except (OSError, ValueError):
        return None


def _glob(pattern: str) -> list[str]:
    """``DIR/*SUFFIX`` by listing (the common ld.so.conf include); anything else through ``glob``."""
    d, name = os.path.split(pattern)
    if name.startswith("*") and not any(c in name[1:] + d for c in "*?["):
        try:
            return sorted(os.path.join(d, n) for n in os.listdir(d) if n.endswith(name[1:]))
        except OSError:
            return []
    import glob

    return sorted(glob.glob(pattern))


def _ld_conf_dirs(conf: str = "/etc/ld.so.conf", depth: int = 0) -> list[str]:
    """Directories listed in ld.so.conf(5), ``include`` globs followed."""
    out: list[str] = []
    try:
        with open(conf, encoding="utf-8", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return out
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("include") and depth < 4:
            pattern = line.split(None, 1)[1] if " " in line else ""
            pattern = pattern if os.path.isabs(pattern) else os.path.join(os.path.dirname(conf), pattern)
            for inc in _glob(pattern):
                out += _ld_conf_dirs(inc, depth + 1)
        elif os.path.isabs(line):
            out.append(line)
    return out


def _expand(dirs: list[str], origin: str) -> list[str]:
    return [d.replace("${ORIGIN}", origin).replace("$ORIGIN", origin) for d in dirs if d]


def shared_objects(
    path: str,
    env: Mapping[str, str],
    _seen: set[str] | None = None,
    guard: Guard | None = None,
    trusted: bool = True,
) -> list[str]:
    """The ELF interpreter and shared libraries ``path`` loads that lie *outside* the system trees
    (each with its symlink chain), found as ld.so(8) searches; objects inside are not listed.

    With a ``guard``, an object read from a read-write root (or named by one that was: ``trusted``
    False) grants outside them only what ``Guard.admit`` allows (ELF files, links): a planted
    ``DT_RUNPATH``/``DT_NEEDED`` cannot name a data file."""
    seen = set() if _seen is None else _seen
    real = os.path.realpath(path)
    if real in seen:
        return []
    seen.add(real)
    here = trusted and (guard is None or not guard.touches(path))
    dyn = elf_dynamic(real)
    if dyn is None:
        return []
    interp, needed, rpath, runpath = dyn
    origin = os.path.dirname(real)
    out: list[str] = []
    if interp and not in_system(interp):
        out += symlink_chain(interp)
    ld_path = [d for d in env.get("LD_LIBRARY_PATH", "").split(":") if d]
    search = (_expand(rpath, origin) if not runpath else []) + ld_path + _expand(runpath, origin)
    search += _ld_conf_dirs() + list(DEFAULT_LIB_DIRS)
    for name in needed:
        cands = [name] if "/" in name else [os.path.join(d, name) for d in search]
        found = next((c for c in cands if os.path.isfile(c)), None)
        if found is None or in_system(found):
            continue
        chain = symlink_chain(found)
        if guard is not None and not here and not guard.admit(chain[-1]):
            continue
        out += chain
        out += shared_objects(found, env, seen, guard, here)
    return out if guard is None else guard.keep(out, here)


# ---- language runtimes ---------------------------------------------------------------------------------


def python_name(name: str) -> str | None:
    """``"3.11"`` for ``python3.11``, ``""`` for ``python``/``python3``, None for anything else."""
    if name in ("python", "python3"):
        return ""
    rest = name[6:] if name.startswith("python") else ""
    major, dot, minor = rest.partition(".")
    return rest if major.isdigit() and dot and minor.isdigit() else None


def _python_version(real: str) -> str | None:
    """``X.Y`` for a CPython interpreter at ``real``: from its name, else the one ``lib/pythonX.Y``
    holding the ``os.py`` landmark beside it."""
    ver = python_name(os.path.basename(real))
    if ver:
        return ver
    lib = os.path.join(os.path.dirname(os.path.dirname(real)), "lib")
    try:
        found = sorted(
            n for n in os.listdir(lib) if python_name(n) and os.path.isfile(os.path.join(lib, n, "os.py"))
        )
    except OSError:
        return None
    return found[-1][6:] if found else None


def python_tree(invoked: str, env: Mapping[str, str], script: str | None = None) -> list[str]:
    """What a CPython interpreter reached through ``invoked`` needs beyond its binary and libraries:
    its stdlib directory, a venv's ``pyvenv.cfg``/``lib`` (PEP 405), the user base's site-packages
    when ``script`` lives in that base's ``bin`` (PEP 370)."""
    real = os.path.realpath(invoked)
    ver = _python_version(real)
    out: list[str] = []
    if ver is None:
        return out
    prefix = os.path.dirname(os.path.dirname(real))
    stdlib = os.path.join(prefix, "lib", f"python{ver}")
    if os.path.isfile(os.path.join(stdlib, "os.py")):
        out.append(stdlib)
    bindir = os.path.realpath(os.path.dirname(invoked))
    for venv in (bindir, os.path.dirname(bindir)):
        cfg = os.path.join(venv, "pyvenv.cfg")
        if os.path.isfile(cfg):
            out.append(cfg)
            out += [p for p in (os.path.join(venv, "lib"), os.path.join(venv, "lib64")) if os.path.lexists(p)]
            break
    if script is not None:
        home = env.get("HOME", "")
        base = env.get("PYTHONUSERBASE") or (os.path.join(home, ".local") if home else "")
        if base and os.path.realpath(os.path.dirname(script)) == os.path.realpath(os.path.join(base, "bin")):
            site = os.path.join(os.path.realpath(base), "lib", f"python{ver}", "site-packages")
            if os.path.isdir(site):
                out.append(site)
    return out


def _package_root(script: str) -> str | None:
    """The root of the ``node_modules`` package holding ``script`` (nearest ``package.json`` whose
    directory sits directly in a ``node_modules`` dir, scoped ``@scope/name`` included), or None."""
    d = os.path.dirname(os.path.realpath(script))
    while d not in ("/", ""):
        parent = os.path.dirname(d)
        scoped = os.path.basename(parent).startswith("@")
        in_nm = os.path.basename(os.path.dirname(parent) if scoped else parent) == "node_modules"
        if in_nm and os.path.isfile(os.path.join(d, "package.json")):
            return d
        if os.path.basename(d) == "node_modules":
            return None
        d = parent
    return None


def _package_name(dep: object) -> bool:
    """True for a dependency name npm could have installed (``name`` or ``@scope/name``): no
    absolute path, no empty, ``.`` or ``..`` component (``os.path.join`` would drop or climb)."""
    if not isinstance(dep, str) or not dep or dep.startswith("/") or "\\" in dep or "\0" in dep:
        return False
    parts = dep.split("/")
    if len(parts) > (2 if dep.startswith("@") else 1):
        return False
    return all(p not in ("", ".", "..") for p in parts)


def node_packages(script: str, guard: Guard | None = None, trusted: bool = True) -> list[str]:
    """The package root of a script inside ``node_modules`` and its dependencies, recursively.

    With a ``guard``, a ``package.json`` a confined run can change (``Guard.touches``) only leads to
    packages inside the read-write roots: a planted dependency (``node_modules/x -> ../../other``,
    or a name that is an absolute path) grants nothing outside them."""
    root = _package_root(script)
    out: list[str] = []
    todo = [(root, trusted)] if root else []
    while todo:
        pkg, ok = todo.pop()
        if pkg in out or len(out) > 2000:
            continue
        ok = ok and (guard is None or not guard.touches(pkg))
        if guard is not None and not ok and not guard.inside(os.path.realpath(pkg)):
            continue
        out.append(pkg)
        from .. import fastjson  # json.load without json's import (re, enum: milliseconds per run)

        data = read_regular(os.path.join(pkg, "package.json"), MAX_PACKAGE_JSON + 1)
        if data is None or len(data) > MAX_PACKAGE_JSON:  # no regular file (a FIFO), or too big
            continue
        try:
            meta = fastjson.loads(data)
        except (ValueError, RecursionError):  # nested past the interpreter: not followed
            continue
        if not isinstance(meta, dict):
            continue
        deps: list[str] = []
        for key in ("dependencies", "optionalDependencies"):
            if isinstance(meta.get(key), dict):
                deps += [k for k in meta[key] if _package_name(k)]
        for dep in deps:
            d = pkg
            while d not in ("/", ""):
                cand = os.path.join(d, "node_modules", dep)
                if os.path.isfile(os.path.join(cand, "package.json")):
                    todo.append((os.path.realpath(cand), ok and (guard is None or not guard.touches(cand))))
                    break
                d = os.path.dirname(d)
    return out


# ---- the whole set ---------------------------------------------------------------------------------------


def resolve_name(name: str, path: str) -> str | None:
    """``name`` through the PATH-syntax ``path`` as execvp(3) searches (first executable regular
    file; an empty entry is the current directory), or None."""
    if "/" in name:
        return name if os.path.isfile(name) and os.access(name, os.X_OK) else None
    for d in path.split(os.pathsep):
        cand = os.path.join(d or ".", name)
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None


def runtime_read_set(
    exe: str,
    env: Mapping[str, str],
    *,
    invoked: str | None = None,
    depth: int = _MAX_DEPTH,
    guard: Guard | None = None,
    trusted: bool = True,
) -> list[str]:
    """Everything ``exe`` needs read-only to run, outside the system trees (absolute paths; links
    listed as links, to be recreated inside).

    Args:
        exe: the executable, as the kernel will be asked to run it (a path; links allowed).
        env: the environment it will get (``PATH`` for ``env NAME``, ``HOME``/``PYTHONUSERBASE``,
            ``LD_LIBRARY_PATH``).
        invoked: for an interpreter reached from a script, the script (for the user-base rule).
        depth: interpreter-chain depth limit (execve(2) allows 4 levels; we follow up to 8).
        guard: the read-write roots (``Guard``); None trusts every file read.
        trusted: False when ``exe`` itself was named by content a confined run can change.
    """
    if not os.path.isabs(exe) or depth <= 0:
        return []
    here = trusted and (guard is None or not guard.touches(exe))
    chain = symlink_chain(exe)
    real = chain[-1]
    if guard is not None and not here:
        chain = guard.keep(chain, False)
        if not chain or chain[-1] != real:
            return chain  # not admitted: its content is not followed either
    out = chain + shared_objects(real, env, guard=guard, trusted=here)
    own: list[str] = []
    parent = os.path.dirname(real)
    root = os.path.dirname(parent)
    if os.path.basename(parent) == "shims" and os.path.isdir(os.path.join(root, "libexec")):
        own.append(root)  # a version manager's shim (pyenv, rbenv, nodenv): its own tree runs it
    name = os.path.basename(real)
    if python_name(name) is not None:
        own += python_tree(exe, env, invoked)
    out += own if guard is None else guard.keep(own, here)
    words = shebang(real)
    if words:
        interp = words[0]
        out += runtime_read_set(interp, env, invoked=real, depth=depth - 1, guard=guard, trusted=here)
        if os.path.basename(os.path.realpath(interp)) == "env":
            names = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
            found = resolve_name(names[0], env.get("PATH", os.defpath)) if names else None
            if found:  # a tool on the caller's PATH is the caller's: its own content is trusted
                ok = here or (guard is not None and "/" not in names[0] and guard.on_path(found))
                out += runtime_read_set(found, env, invoked=real, depth=depth - 1, guard=guard, trusted=ok)
        out += node_packages(real, guard, here)
    return out
