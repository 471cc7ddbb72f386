"""The cross-process capability cache: reports kept in a caller's directory, keyed on the host.

``cached_report(names, cache_dir)`` returns reports from ``cache_dir/capabilities.json`` while its key
equals ``cache_key()``, and probes (then rewrites the file) otherwise.  The key holds everything whose
change may change a probe's answer; it is built from cheap reads only (``uname``, euid, and the
platform's part from ``platforms.select.cache_facts``: on Linux proc(5) files and ``stat`` of
bwrap), so a lifecycle verb
can check it on every call (well under a millisecond) without running a program.  Nothing here
imports ctypes or subprocess: a cache hit loads no probe.
"""

from __future__ import annotations

import os
import sys

from .. import fastjson as json  # start reads the cache on every call: no json, re, enum
from .. import posix
from ..capability import Capability

#: bump when a probe's meaning changes, so old caches are not trusted
PROBES_VERSION = "2"
CACHE_FILE = "capabilities.json"


def host_facts() -> dict[str, str]:
    """``{"kernel": uname release, "arch": uname machine, "platform": sys.platform}``."""
    if hasattr(os, "uname"):
        u = os.uname()
        return {"kernel": u.release, "arch": u.machine, "platform": sys.platform}
    import platform

    return {"kernel": platform.release(), "arch": platform.machine(), "platform": sys.platform}


def python_identity() -> str:
    """This interpreter and what it can import, as text: ``sys.executable``, its version, then each
    ``sys.path`` entry with the inode and mtime (ns) of the directory or file there (``-`` when it is
    missing).  Installing or removing a package changes its directory's entries, so its mtime; a
    process started with another path (``-S``, ``-I``, ``PYTHONPATH``, another venv) has another
    identity.  The first entry is left out when it is the current directory (``python -c`` and
    ``-m`` put it there): where a verb is run from is no install.  One ``stat`` per entry."""
    parts = [sys.executable, sys.version]
    try:
        cwd = os.getcwd() if sys.path and sys.path[0] else ""
    except OSError:  # the current directory was removed
        cwd = ""
    for i, entry in enumerate(sys.path):
        if i == 0 and entry in ("", cwd):  # ``-c``/``-m``: the directory a verb runs in, not an install
            continue
        try:
            st = os.stat(entry or ".")
            parts.append(f"{entry}:{st.st_ino}:{st.st_mtime_ns}")
        except OSError:
            parts.append(f"{entry}:-")
    return "\n".join(parts)


def cache_key() -> dict[str, str]:
    """Everything whose change may change a probe's answer, as text (cheap reads only).

    Keys: kernel release and build, euid, ``PROBES_VERSION``, ``python_identity()`` (what this
    interpreter can import: a probe that loads a binding, e.g. seccomp's, answers for it), and the
    platform's own facts
    (``platforms.select.cache_facts``; on Linux ``platforms/linux/hostkey.py``: boot_id, the
    identity of the bwrap create runs, the cgroup layout, the user namespace, this process's
    confinement from /proc/self/status and the user-namespace sysctls).  No host file is read here.
    """
    key = dict(host_facts())
    key["kernel_build"] = os.uname().version if hasattr(os, "uname") else ""
    key["euid"] = str(os.geteuid()) if hasattr(os, "geteuid") else ""
    key["python"] = python_identity()
    from ..platforms.select import cache_facts

    key.update(cache_facts())
    key["probes_version"] = PROBES_VERSION
    return key


def _load(path: str, key: dict[str, str]) -> dict[str, dict[str, object]]:
    """The reports of the cache file at ``path`` if it is ours and its key is ``key``, else {}."""
    try:
        fd = os.open(path, os.O_RDONLY | posix.O_NOFOLLOW | posix.O_CLOEXEC)
    except OSError:
        return {}
    try:
        if os.fstat(fd).st_uid != posix.geteuid():
            return {}
        with os.fdopen(fd, "rb", closefd=False) as fh:
            doc = json.loads(fh.read())
        if isinstance(doc, dict) and doc.get("key") == key and isinstance(doc.get("reports"), dict):
            return dict(doc["reports"])
    except (OSError, ValueError):
        pass
    finally:
        os.close(fd)
    return {}


def _store(cache_dir: str, key: dict[str, str], reports: dict[str, dict[str, object]]) -> None:
    """Write the cache atomically: a temp file in ``cache_dir``, fsync, ``os.replace``."""
    os.makedirs(cache_dir, mode=0o700, exist_ok=True)
    tmp = os.path.join(cache_dir, f".capabilities-{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | posix.O_NOFOLLOW | posix.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump({"key": key, "reports": reports}, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, os.path.join(cache_dir, CACHE_FILE))
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _probe(name: str) -> Capability:
    """Run the probe of ``name``; one that raises is "unavailable", as in ``capability.probe``.
    Raises KeyError for a name no probe has."""
    from ..capability import PROBES, _load_probes

    _load_probes()
    probe = PROBES[name]  # KeyError: no such probe
    try:
        return probe()
    except Exception as e:
        return Capability(name, False, "", f"probe failed: {e}", "probe raised")


def cached_report(names: list[str], cache_dir: str, key: dict[str, str] | None = None) -> list[Capability]:
    """Reports for ``names``, from ``cache_dir/capabilities.json`` when its key equals ``cache_key()``.

    A name missing from a valid cache is probed and added; a key mismatch (or a file not owned by this
    euid, a symlink, or unreadable) discards the whole cache and probes again, so a cached "available"
    never survives a change of kernel, boot, bwrap, cgroup layout or the caller's confinement.  Only
    "available" is kept: a refusal is probed again on every call, so a caller confined more narrowly
    than the key can tell (another seccomp filter in the same mode, a Landlock domain, a module
    directory first on ``sys.path``) never leaves a refusal for the next caller; and a caller under a
    seccomp filter (whose rules the key cannot hold: the platform's ``uncacheable`` fact) neither
    reads nor writes the cache.  What remains, a kept "available" read by a caller whose Landlock
    domain (invisible to any key) denies the capability, weakens nothing: the launch itself then
    fails (bwrap, the seccomp load, the cgroup writes each stop it).  The file is written
    atomically.  ``cache_dir`` must be a directory only trusted users can write (e.g. the state
    root): a cached "available" is believed.

    Args:
        names: capability names (see ``capability.PROBES``).
        cache_dir: existing or creatable directory for the cache file.
        key: the key to use (default ``cache_key()``); tests pass a changed one.
    Returns: one ``Capability`` per name, in order.
    Raises: KeyError for a name no probe has (a ``cache_dir`` that cannot be written is not cached in).
    """
    key = key if key is not None else cache_key()
    if key.get("uncacheable"):  # the caller's confinement is more than the key can tell
        return [_probe(n) for n in names]
    cached = {
        n: r for n, r in _load(os.path.join(cache_dir, CACHE_FILE), key).items() if r.get("available") is True
    }
    missing = [n for n in names if n not in cached]
    fresh: dict[str, dict[str, object]] = {}
    if missing:
        fresh = {n: _probe(n).to_dict() for n in missing}
        kept = {n: r for n, r in fresh.items() if r.get("available") is True}
        if kept:
            try:
                _store(cache_dir, key, {**cached, **kept})
            except OSError:
                pass  # a full or read-only state root: the reports stand, uncached
    both = {**cached, **fresh}
    return [Capability(**both[n]) for n in names]  # type: ignore[arg-type]
