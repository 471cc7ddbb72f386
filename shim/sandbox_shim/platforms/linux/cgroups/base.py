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
from ....values import Value

TYPE_CHECKING = False  # no typing or dataclasses at run time: the lifecycle verbs load this module
if TYPE_CHECKING:
    from typing import Any


class Limits(Value):
    """Resource limits from OCI ``linux.resources`` (runtime-spec config-linux.md "Control groups").

    Units: bytes for memory; microseconds for cpu quota/period; a count for pids.
    ``memory_swap`` is memory+swap (the OCI meaning), as v1's ``memory.memsw.limit_in_bytes``.
    Compared by value; every field defaults to None (no limit).
    """

    __match_args__ = ("memory_limit", "memory_swap", "memory_reservation", "pids_limit", "cpu_shares",
                      "cpu_quota", "cpu_period", "cpu_cpus", "cpu_mems", "devices")

    def __init__(self, memory_limit: int | None = None, memory_swap: int | None = None,
                 memory_reservation: int | None = None, pids_limit: int | None = None,
                 cpu_shares: int | None = None, cpu_quota: int | None = None, cpu_period: int | None = None,
                 cpu_cpus: str | None = None, cpu_mems: str | None = None,
                 devices: list[dict[str, Any]] | None = None) -> None:
        self.memory_limit = memory_limit
        self.memory_swap = memory_swap
        self.memory_reservation = memory_reservation
        self.pids_limit = pids_limit
        self.cpu_shares = cpu_shares
        self.cpu_quota = cpu_quota
        self.cpu_period = cpu_period
        self.cpu_cpus = cpu_cpus
        self.cpu_mems = cpu_mems
        #: devices cgroup rules in order, deny-all first (``sandbox_shim.devices`` shape: ``{"allow",
        #: "type", "major", "minor", "access"}``, None = ``*``); None: the devices controller is not used
        self.devices = devices

    @classmethod
    def from_oci(cls, resources: dict[str, Any] | None) -> Limits:
        """Read the fields we honour from an OCI ``linux.resources`` object (None → no limits)."""
        r = resources or {}
        mem = r.get("memory") or {}
        cpu = r.get("cpu") or {}
        pids = r.get("pids") or {}

        def pos(v: Any) -> int | None:  # -1 / 0 mean "unlimited" in OCI for several fields
            return int(v) if isinstance(v, int) and v > 0 else None

        return cls(
            memory_limit=pos(mem.get("limit")),
            memory_swap=pos(mem.get("swap")),
            memory_reservation=pos(mem.get("reservation")),
            pids_limit=pos(pids.get("limit")),
            cpu_shares=pos(cpu.get("shares")),
            cpu_quota=pos(cpu.get("quota")),
            cpu_period=pos(cpu.get("period")),
            cpu_cpus=cpu.get("cpus") or None,
            cpu_mems=cpu.get("mems") or None,
            devices=list(r["devices"]) if r.get("devices") else None,
        )

    def controllers(self) -> list[str]:
        """Controllers these limits need (names as in cgroups(7))."""
        need = []
        if self.memory_limit or self.memory_swap or self.memory_reservation:
            need.append("memory")
        if self.pids_limit:
            need.append("pids")
        if self.cpu_shares or self.cpu_quota or self.cpu_period:
            need.append("cpu")
        if self.cpu_cpus or self.cpu_mems:
            need.append("cpuset")
        if self.devices:
            need.append("devices")
        return need


def write(path: str, value: str) -> None:
    """Write ``value`` to a cgroup file, turning OSError into ``LaunchFailed`` naming the file."""
    try:
        with open(path, "w") as fh:
            fh.write(value)
    except OSError as e:
        raise LaunchFailed(f"cannot write {value!r} to {path}: {e.strerror}",
                           "check that the controller is enabled and writable") from e


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


class CgroupManager(ABC):
    """One cgroup across the hierarchies of one version."""

    version: int

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
                time.sleep(0.01)
            else:
                return

    def remove(self, created: list[str]) -> None:
        """Kill what is left and remove exactly the directories in ``created`` (deepest first)."""
        if any(os.path.isdir(d) for d in self.dirs()):
            self.kill_all(9)
            deadline = time.monotonic() + 5
            while self.pids() and time.monotonic() < deadline:
                time.sleep(0.01)
        for d in sorted(created, key=len, reverse=True):
            rmdir_retry(d)
