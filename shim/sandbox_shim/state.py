"""The state store: one directory per sandbox id under the state root (``--root``).

Layout: ``ROOT/ID/state.json`` (written atomically and durably: temp file, fsync, rename, fsync of
the directory), an exclusive ``flock`` on ``ROOT/ID`` while a verb changes it, and ``ROOT/.cgroups/ID``
naming the cgroups made for ID — written *before* they are made — kept outside the state directory
so ``delete --force`` can remove them even when ``ROOT/ID`` is gone.

Crash safety: ``ROOT/ID`` appears whole or not at all.  It is made as ``ROOT/.new-ID.PID`` (marker
inside, lock held) and renamed into place; rename(2) replaces an empty directory, so an empty
``ROOT/ID`` left by anything never blocks the id, and a non-empty one is refused (``SandboxExists``).
It goes the same way: renamed to ``ROOT/.dead-ID.PID`` first, then removed, so a verb killed while
removing leaves the id free; ``sweep`` removes what such a verb left (``delete --force`` calls it).

Identity is pid **and** process start time (field 22 of /proc/PID/stat, proc(5)): a pid whose start
time differs is another process and is never signalled.

Lifecycle rules live here, on the status (runtime-spec "Lifecycle"): ``can_start`` etc.
"""

from __future__ import annotations

import errno
import os

from . import durable as _durable
from . import fastjson as json  # the standard library's text, without loading json, re and enum
from . import posix as _posix
from .durable import MARKER, write_atomic
from .durable import fsync_dir as _fsync_dir
from .durable import rmtree as _rmtree
from .errors import InvalidState, SandboxExists, SandboxNotFound, StateCorrupt, StateUnwritable, UsageError
from .procstat import proc_start_time as proc_start_time  # the one reader of /proc/PID/stat, re-exported
from .procstat import proc_stat as proc_stat
from .procstat import proc_state as proc_state
from .scoped import scoped  # contextlib.contextmanager, without contextlib's imports
from .values import Value

__all__ = ["MARKER", "Record", "StateStore", "write_atomic"]

DEFAULT_ROOT = "/run/sandbox-shim"
_ID_FIRST = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
_ID_CHARS = _ID_FIRST | frozenset("_.+-")


def valid_id(sandbox_id: str) -> bool:
    """``[A-Za-z0-9][A-Za-z0-9_.+-]{0,199}``: one file name, with room for suffixes (no ``re``)."""
    return (
        0 < len(sandbox_id) <= 200 and sandbox_id[0] in _ID_FIRST and all(c in _ID_CHARS for c in sandbox_id)
    )


ACTIVE = ("created", "running", "paused")

TYPE_CHECKING = False  # no typing or dataclasses at run time: every lifecycle verb imports this module
if TYPE_CHECKING:
    from collections.abc import Generator
    from typing import Any


def can_start(status: str) -> bool:
    return status == "created"


def can_kill(status: str) -> bool:
    return status in ACTIVE


def can_delete(status: str, force: bool) -> bool:
    return force or status in ("stopped", "creating")


def can_pause(status: str) -> bool:
    return status == "running"


def require(sandbox_id: str, status: str, verb: str) -> None:
    """Raise ``InvalidState`` unless ``verb`` is allowed in ``status``."""
    rules = {
        "start": (can_start(status), "created"),
        "kill": (can_kill(status), "created, running or paused"),
        "delete": (can_delete(status, False), "stopped (or use --force)"),
        "pause": (can_pause(status), "running"),
        "resume": (status == "paused", "paused"),
        "exec": (status == "running", "running"),
        "update": (status in ACTIVE, "created, running or paused"),
    }
    ok, allowed = rules[verb]
    if not ok:
        raise InvalidState(sandbox_id, status, verb, allowed)


def resolve_root(root: str | None) -> str:
    """The canonical state root.  A relative ``root`` is taken under ``DEFAULT_ROOT``, not the cwd,
    so the same ``--root`` finds the same sandboxes from any working directory."""
    root = root or DEFAULT_ROOT
    if not os.path.isabs(root):
        joined = os.path.normpath(os.path.join(DEFAULT_ROOT, root))
        if joined != DEFAULT_ROOT and not joined.startswith(DEFAULT_ROOT + "/"):
            raise UsageError(
                f"relative --root {root!r} leaves {DEFAULT_ROOT}",
                "give an absolute path, or a relative one without '..'",
            )
        return joined
    return os.path.normpath(root)


def check_id(sandbox_id: str) -> None:
    """Ids are one path component of safe characters (runc's rule)."""
    if not sandbox_id or not valid_id(sandbox_id):
        shown = sandbox_id if len(sandbox_id) <= 64 else sandbox_id[:64] + "..."
        raise UsageError(
            f"invalid container id {shown!r}",
            "use 1 to 200 letters, digits, and _ . + - (not starting with a symbol)",
        )


class Record(Value):
    """What is stored for a sandbox (``state.json``): one attribute per key of ``FIELDS``."""

    FIELDS = (
        "id",
        "bundle",
        "status",
        "pid",
        "pid_start",
        "init_pid",
        "init_start",
        "created",
        "annotations",
        "mechanism",
        "required",
        "private",
        "owner_ref",
        "context",
    )
    __match_args__ = FIELDS

    def __init__(
        self,
        id: str,
        bundle: str,
        status: str = "creating",
        pid: int = 0,
        pid_start: float | None = None,
        init_pid: int = 0,
        init_start: float | None = None,
        created: str = "",
        annotations: dict[str, str] | None = None,
        mechanism: str = "linux",
        required: list[str] | None = None,
        private: dict[str, Any] | None = None,
        owner_ref: str | None = None,
        context: dict[str, Any] | None = None,
    ) -> None:
        self.id = id
        self.bundle = bundle
        self.status = status
        self.pid = pid
        self.pid_start = pid_start
        self.init_pid = init_pid
        self.init_start = init_start
        self.created = created
        self.annotations: dict[str, str] = {} if annotations is None else annotations
        self.mechanism = mechanism
        self.required: list[str] = [] if required is None else required
        self.private: dict[str, Any] = {} if private is None else private
        self.owner_ref = owner_ref
        self.context: dict[str, Any] = {} if context is None else context

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Record:
        known = {k: v for k, v in d.items() if k in cls.FIELDS}
        return cls(**known)


class StateStore:
    """Sandboxes under one state root."""

    def __init__(self, root: str | None = None) -> None:
        self.root = resolve_root(root)

    def dir(self, sandbox_id: str) -> str:
        check_id(sandbox_id)
        return os.path.join(self.root, sandbox_id)

    def cgroup_index(self, sandbox_id: str) -> str:
        return os.path.join(self.root, ".cgroups", sandbox_id)

    @scoped
    def new(self, sandbox_id: str) -> Generator[str, None, None]:
        """Make ``ROOT/ID`` whole (marker inside) and hold its lock; yield the directory.

        Raises:
            SandboxExists: ``ROOT/ID`` exists and is not empty.
            StateUnwritable: the state root refused the directory.
        """
        d = self.dir(sandbox_id)
        tmp = os.path.join(self.root, f".new-{sandbox_id}.{os.getpid()}")
        try:
            os.makedirs(self.root, mode=0o711, exist_ok=True)
            if os.path.isdir(d) and self.is_ours(sandbox_id):  # the common refusal, before making anything
                raise SandboxExists(sandbox_id)
            _rmtree(tmp)  # a leftover of a crashed create with our (reused) pid
            os.mkdir(tmp, 0o700)
        except OSError as e:
            raise StateUnwritable(tmp, e.errno or 0, e.strerror or str(e)) from e
        fd = _lock_fd(tmp)
        try:
            _posix.flock_exclusive(fd)
            try:
                with open(os.path.join(tmp, MARKER), "w"):
                    pass
                os.rename(tmp, d)  # atomic; replaces only an empty directory
            except OSError as e:
                _rmtree(tmp)
                if e.errno in (errno.EEXIST, errno.ENOTEMPTY, errno.EISDIR, errno.ENOTDIR):
                    raise SandboxExists(sandbox_id) from None
                raise StateUnwritable(d, e.errno or 0, e.strerror or str(e)) from e
            _fsync_dir(self.root)
            yield d
        finally:
            os.close(fd)

    def is_ours(self, sandbox_id: str) -> bool:
        """True if ``ROOT/ID`` exists and was made by this store (carries ``MARKER``)."""
        return os.path.isfile(os.path.join(self.dir(sandbox_id), MARKER))

    @scoped
    def locked(self, sandbox_id: str) -> Generator[Record, None, None]:
        """Hold the id's lock and yield its record (re-read under the lock)."""
        d = self.dir(sandbox_id)
        if not self.is_ours(sandbox_id):
            raise SandboxNotFound(sandbox_id, self.root)
        try:
            lock_cm = self._flock(d)
            lock_cm.__enter__()
        except FileNotFoundError:
            raise SandboxNotFound(sandbox_id, self.root) from None
        try:
            yield self.read(sandbox_id)
        finally:
            lock_cm.__exit__(None, None, None)

    @scoped
    def _flock(self, d: str) -> Generator[None, None, None]:
        fd = _lock_fd(d)
        try:
            _posix.flock_exclusive(fd)
            yield
        finally:
            os.close(fd)

    def read(self, sandbox_id: str) -> Record:
        """The stored record.

        Raises:
            SandboxNotFound: no sandbox directory of ours; StateCorrupt: state.json cannot be parsed.
        """
        if not self.is_ours(sandbox_id):
            raise SandboxNotFound(sandbox_id, self.root)
        path = os.path.join(self.dir(sandbox_id), "state.json")
        try:
            with open(path, encoding="utf-8") as fh:
                return Record.from_dict(json.load(fh))
        except FileNotFoundError:
            return Record(id=sandbox_id, bundle="", status="creating")
        except (OSError, ValueError, TypeError) as e:
            raise StateCorrupt(sandbox_id, path) from e

    def write(self, rec: Record) -> None:
        """Replace ``state.json`` atomically and durably.  Raises ``StateUnwritable`` (old state kept)."""
        doc = {k: getattr(rec, k) for k in rec.FIELDS}
        write_atomic(os.path.join(self.dir(rec.id), "state.json"), json.dumps(doc))

    @scoped
    def staged(self, rec: Record) -> Generator[None, None, None]:
        """``write(rec)`` split around a side effect: the new ``state.json`` is written (in full,
        fsync'd) before the block runs and renamed into place after it; if the block raises, the
        old state stays and the new one is dropped.

        Raises:
            StateUnwritable: before the block, when the state root refuses the write (the block does
            not run); after it, when the rename is refused.
        """
        doc = {k: getattr(rec, k) for k in rec.FIELDS}
        path = os.path.join(self.dir(rec.id), "state.json")
        tmp = _durable.prepare(path, json.dumps(doc))
        try:
            yield
        except BaseException:
            _durable.discard(tmp)
            raise
        _durable.commit(path, tmp)

    def remove(self, sandbox_id: str) -> None:
        """Remove ``ROOT/ID`` entirely (idempotent) — only a directory this store made, or an empty one.

        The directory is renamed out of the way first (``ROOT/.dead-ID.PID``), so the id is free at
        once even if this process is killed while removing the rest.

        Raises:
            StateUnwritable: the state root refused it (read-only); ``ROOT/ID`` is left as it was.
        """
        d = self.dir(sandbox_id)
        if self.is_ours(sandbox_id):
            dead = os.path.join(self.root, f".dead-{sandbox_id}.{os.getpid()}")
            _rmtree(dead)
            refused: OSError | None = None
            try:
                os.rename(d, dead)
            except OSError as e:
                refused, dead = e, d
            _rmtree(dead)
            if dead == d and self.is_ours(sandbox_id):  # still there: the id stays taken, and says so
                err = refused.errno if refused is not None and refused.errno else errno.EROFS
                raise StateUnwritable(d, err, os.strerror(err))
        else:
            try:
                os.rmdir(d)  # an empty directory of anyone's: blocks nothing, holds nothing
            except OSError:
                pass

    def sweep(self, sandbox_id: str) -> None:
        """Remove what a crashed create or delete of ``sandbox_id`` left (``.new-ID.PID`` /
        ``.dead-ID.PID`` whose process is gone)."""
        check_id(sandbox_id)
        for sub in (".cgroups", ".network"):  # temp files of a write_atomic killed before its rename
            try:
                for n in os.listdir(os.path.join(self.root, sub)):
                    pid = n.rsplit(".tmp.", 1)[-1]
                    dead = pid.isdigit() and not _posix.pid_exists(int(pid))
                    if n.startswith(".") and ".tmp." in n and dead:
                        os.unlink(os.path.join(self.root, sub, n))
            except OSError:
                pass
        try:
            names = os.listdir(self.root)
        except OSError:
            return
        for n in names:
            for prefix in (f".new-{sandbox_id}.", f".dead-{sandbox_id}."):
                pid = n[len(prefix) :]
                if n.startswith(prefix) and pid.isdigit():
                    if int(pid) != os.getpid() and _posix.pid_exists(int(pid)):
                        continue
                    p = os.path.join(self.root, n)
                    if os.path.isfile(os.path.join(p, MARKER)) or not os.listdir(p):
                        _rmtree(p)

    def ids(self) -> list[str]:
        """Ids with a state directory, sorted."""
        try:
            names = os.listdir(self.root)
        except FileNotFoundError:  # no root yet: no sandboxes
            return []
        except OSError as e:
            from .errors import StateUnreadable

            raise StateUnreadable(self.root, e.errno or 0, e.strerror or str(e)) from e
        return sorted(e for e in names if not e.startswith(".") and valid_id(e) and self.is_ours(e))

    def write_cgroup_index(self, sandbox_id: str, info: dict[str, Any]) -> None:
        """Record ``info`` (what will be made, then what was) for ``delete --force``.

        Atomic and written before the cgroups are made (a kill at any step leaves the record), but not
        fsync'd: a cgroup lives in the kernel's memory, so no crash of the host can keep one whose
        record it lost (``durable.write_atomic``'s ``durable=False``; ~3.5 ms per write on a
        disk-backed root, twice per ``create``)."""
        try:
            os.makedirs(os.path.dirname(self.cgroup_index(sandbox_id)), exist_ok=True)
        except OSError as e:
            raise StateUnwritable(self.cgroup_index(sandbox_id), e.errno or 0, e.strerror or str(e)) from e
        write_atomic(self.cgroup_index(sandbox_id), json.dumps(info), durable=False)

    def read_cgroup_index(self, sandbox_id: str) -> dict[str, Any] | None:
        try:
            with open(self.cgroup_index(sandbox_id), encoding="utf-8") as fh:
                info = json.load(fh)
            return info if isinstance(info, dict) else None
        except (OSError, ValueError):
            return None

    def drop_cgroup_index(self, sandbox_id: str) -> None:
        """Remove the record of ``sandbox_id``'s cgroups.  Raises ``StateUnwritable`` (record kept)."""
        _durable.unlink(self.cgroup_index(sandbox_id))


def _lock_fd(d: str) -> int:
    """An fd of directory ``d`` to flock, numbered 3 or above: a caller started with stdin, stdout or
    stderr closed would otherwise get it as fd 0, 1 or 2 — which it hands to the sandbox as its stdio,
    and the sandbox would then hold the lock and block every later verb (F_DUPFD_CLOEXEC, fcntl(2))."""
    fd = os.open(d, os.O_RDONLY | _posix.O_DIRECTORY | _posix.O_CLOEXEC)
    if fd > 2:
        return fd
    try:
        return _posix.dup_above(fd, 3)
    finally:
        os.close(fd)
