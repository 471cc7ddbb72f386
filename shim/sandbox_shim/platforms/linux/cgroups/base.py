"""The cgroup manager interface: one implementation per cgroup version (youki's shape).

A manager owns one cgroup path (``/sandbox-shim/ID`` or the config's ``cgroupsPath``) across all the
hierarchies that version uses.  A version that cannot do a thing raises ``LaunchFailed``; it never
pretends.  Files are written with plain ``open``/``write``: the kernel's cgroup interface is files
(kernel doc: admin-guide/cgroup-v2.rst, admin-guide/cgroup-v1/).
"""

from __future__ import annotations

import errno
import os
import time
from abc import ABC, abstractmethod

from ....errors import LaunchFailed
from ....mechanism import Usage

TYPE_CHECKING = False  # no typing at run time: the lifecycle verbs load this module (nor the limit rules)
if TYPE_CHECKING:
    from typing import Any

    from ....control import Facts
    from .limits import Limits

__all__ = ["CgroupManager", "keyed", "read", "read_int", "rmdir_retry", "write"]


def write(path: str, value: str) -> None:
    """Write ``value`` to a cgroup file, turning OSError into ``LaunchFailed`` naming the file."""
    try:
        with open(path, "w") as fh:
            fh.write(value)
    except OSError as e:
        raise LaunchFailed(
            f"cannot write {value!r} to {path}: {e.strerror}",
            "check that the controller is enabled and writable",
        ) from e


def read(path: str) -> str | None:
    """Read a cgroup file's text, or None if it does not exist / cannot be read."""
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return None


def read_int(path: str) -> int | None:
    text = read(path)
    if text is None:
        return None
    text = text.strip()
    return int(text) if text.isdigit() else None


def keyed(text: str | None) -> dict[str, int]:
    """Parse a flat-keyed file ("key value" per line) into ints."""
    out: dict[str, int] = {}
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            out[parts[0]] = int(parts[1])
    return out


def rmdir_retry(path: str, tries: int = 50, delay: float = 0.02) -> None:
    """rmdir a cgroup directory, retrying while the kernel still reports it busy (EBUSY).

    Raises:
        LaunchFailed: still busy after ``tries`` attempts (processes remain in it).
    """
    for _ in range(tries):
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError as e:
            if e.errno not in (errno.EBUSY, errno.EAGAIN):
                raise LaunchFailed(f"cannot remove cgroup {path}: {e.strerror}") from e
            time.sleep(delay)
    raise LaunchFailed(f"cannot remove cgroup {path}: still busy", "kill the processes left in it")


def wait_exited(pids: list[int], timeout: float) -> None:
    """Return once every process in ``pids`` has exited, or after ``timeout`` seconds: woken by the
    kernel, not by sleeps (a pidfd polls readable once its process has exited: pidfd_open(2)).  A pid
    already gone counts as exited.  (A pid reused between the caller's listing and pidfd_open is
    waited for too, up to ``timeout``: never longer, never a signal.)"""
    import select

    fds = []
    for pid in pids:
        try:
            fds.append(os.pidfd_open(pid))
        except OSError:  # ESRCH: gone already
            pass
    try:
        poller = select.poll()
        for fd in fds:
            poller.register(fd, select.POLLIN)
        pending = len(fds)
        deadline = time.monotonic() + timeout
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            for fd, _ in poller.poll(max(1, int(left * 1000))):
                poller.unregister(fd)
                pending -= 1
    finally:
        for fd in fds:
            os.close(fd)


def rmdir_parent(path: str) -> None:
    """rmdir a parent cgroup we made, unless it is gone or still holds another cgroup (not an error)."""
    try:
        os.rmdir(path)
    except OSError as e:
        if e.errno not in (errno.ENOENT, errno.EBUSY, errno.ENOTEMPTY, errno.EEXIST):
            raise LaunchFailed(f"cannot remove cgroup {path}: {e.strerror}") from e


def make_parents(root: str, rel: str, made: list[str], before: Any = None, after: Any = None) -> None:
    """Make each missing directory of ``rel`` (a parent path under the hierarchy ``root``), appending
    the ones made to ``made``.  ``before(parent)`` runs before each step (v2: enable controllers in
    the parent), ``after(parent, child)`` after each mkdir (v1 cpuset: copy cpus/mems down)."""
    cur = root
    for part in [p for p in rel.strip("/").split("/") if p and p != "."]:
        parent, cur = cur, os.path.join(cur, part)
        if before is not None:
            before(parent)
        try:
            os.mkdir(cur)
            made.append(cur)
            if after is not None:
                after(parent, cur)
        except FileExistsError:
            if (read(os.path.join(cur, "cgroup.procs")) or "").strip():
                from .limits import refusal

                # a cgroup with processes is a container's, not a parent: nesting under it would charge
                # this sandbox to that one and keep its delete from removing it
                raise refusal(
                    "/linux/cgroupsPath",
                    f"{cur} holds processes (another container's cgroup)",
                    "pick a cgroupsPath whose parents hold no processes",
                ) from None
        except OSError as e:
            raise LaunchFailed(f"cannot create cgroup {cur}: {e.strerror}") from e


def clean_path(path: str) -> str:
    """``path`` as ``/a/b`` after refusing what would leave the hierarchy: ``..`` or ``.`` components
    (``/../../tmp/x`` would make plain directories outside cgroupfs, and limits would silently not
    apply), NUL and newline.

    Raises:
        LaunchFailed: starting with ``/linux/cgroupsPath``.
    """
    parts = [p for p in path.split("/") if p]
    if any(p in (".", "..") for p in parts) or "\0" in path or "\n" in path:
        from .limits import refusal

        raise refusal(
            "/linux/cgroupsPath",
            f"{path!r} leaves the cgroup hierarchy",
            "name a path below the hierarchy's root, without . or .. components",
        )
    return "/" + "/".join(parts)


class CgroupManager(ABC):
    """One cgroup across the hierarchies of one version."""

    version: int

    def facts(self) -> Facts:
        """The counters a limit leaves behind here (``facts.read_facts``: OOM kills, failcnt, ...)."""
        from .facts import read_facts

        return read_facts(self)

    @abstractmethod
    def dirs(self) -> list[str]:
        """Every directory this manager's cgroup occupies (one per hierarchy)."""

    @abstractmethod
    def create(self, controllers: list[str]) -> list[str]:
        """Make the cgroup; return the directories it created (to remove exactly those later).

        Raises:
            LaunchFailed: a needed controller is missing or the directory cannot be made.
        """

    @abstractmethod
    def apply(self, limits: Limits) -> None:
        """Write ``limits`` into the cgroup's files."""

    @abstractmethod
    def add(self, pid: int) -> None:
        """Move process ``pid`` (all its threads) into the cgroup."""

    @abstractmethod
    def pids(self) -> list[int]:
        """Pids of every process in the cgroup (no descendant cgroups are made by us)."""

    @abstractmethod
    def freeze(self, frozen: bool) -> None:
        """Freeze (True) or thaw (False) every process in the cgroup, waiting until done."""

    @abstractmethod
    def usage(self) -> Usage:
        """Memory (current, peak), CPU (user, system in µs) and pids, read from the cgroup."""

    @abstractmethod
    def oom_killed(self) -> bool:
        """True if the kernel's OOM killer acted inside this cgroup."""

    def events_fd(self) -> int | None:
        """``CgroupControl.events_fd``: None here (cgroup v1 signals OOM only through an eventfd
        registered on memory.oom_control, and v1 cgroups stay until delete removes them)."""
        return None

    def join_files(self) -> list[str]:
        """The files a single-threaded process about to execve(2) writes ``0`` into to place itself in
        this cgroup (every existing directory of ``dirs()``): ``cgroup.procs`` here, which moves the
        whole thread group (cgroup-v2.rst "Processes"; a domain cgroup takes no thread through
        ``cgroup.threads``, which works only inside a threaded subtree, cgroup-v2.rst "Threads").
        Children forked after the write are born in the cgroup (cgroups(7))."""
        return [os.path.join(d, "cgroup.procs") for d in self.dirs() if os.path.isdir(d)]

    def placed(self) -> None:
        """The sandbox's first process is in the cgroup: drop whatever held it until then (systemd's
        placeholder); a no-op for the cgroupfs managers."""
        return None

    def kill_all(self, signum: int = 9, exclude: set[int] | frozenset[int] = frozenset()) -> None:
        """Send ``signum`` to every process in the cgroup but ``exclude`` (freezing first for SIGKILL,
        so none can fork away)."""
        for _ in range(20):
            pids = [p for p in self.pids() if p not in exclude]
            if not pids:
                return
            if signum == 9:
                self.freeze(True)
            for pid in pids:
                try:
                    os.kill(pid, signum)
                except ProcessLookupError:
                    pass
            if signum == 9:
                self.freeze(False)
                wait_exited(pids, 0.1)  # then look again: none can have forked while frozen
            else:
                return

    def remove(self, created: list[str]) -> None:
        """Kill what is left and remove exactly the directories in ``created`` (deepest first).

        The cgroup's own directories must go (retried while the kernel reports them busy); parents
        in ``created`` (made by ``create`` for a nested ``cgroupsPath``) are removed when empty and
        left alone while another cgroup lives under them.
        """
        mine = set(created)
        if any(d in mine and os.path.isdir(d) for d in self.dirs()):  # never kill in a cgroup we did not make
            self.kill_all(9)
            deadline = time.monotonic() + 5
            seen: list[int] = []
            while (left := self.pids()) and time.monotonic() < deadline:
                if left == seen:  # listed although exited (never a busy loop on a stale listing)
                    time.sleep(0.001)
                seen = left
                wait_exited(left, deadline - time.monotonic())
        own = set(self.dirs())
        for d in sorted(created, key=lambda p: p.count("/"), reverse=True):
            if d in own:
                rmdir_retry(d)
            else:
                rmdir_parent(d)
