"""Which cgroup hierarchies this host has, read from /proc/self/mountinfo (proc(5), cgroups(7)).

Detection happens once per process (the youki shape: one manager per version, plus the systemd driver,
picked here and nowhere else).  ``manager(path)`` picks the v2 manager when the cgroup2 mount
holds the controllers we need (memory and pids), else the v1 manager when the v1 hierarchies have
them — a hybrid host (v1 controllers plus a cgroup2 mount holding only e.g. hugetlb) is v1.
"""

from __future__ import annotations

import os

from ....mountinfo import MOUNTINFO, Mount, parse, read
from ....values import FrozenValue
from .base import CgroupManager

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

#: controllers whose absence makes a host unsuitable for resource limits
CORE = ("memory", "pids")
V1_CONTROLLERS = ("memory", "pids", "cpu", "cpuacct", "cpuset", "freezer", "blkio", "hugetlb", "devices")


class Layout(FrozenValue):
    """Cgroup mounts on this host (immutable, compared by value).

    Attributes:
        v2_mount: the cgroup2 mount point, or None.
        v2_controllers: controllers listed in its ``cgroup.controllers``.
        v1_mounts: v1 controller name -> mount point (a co-mounted pair such as ``cpu,cpuacct`` maps both).
    """

    __match_args__ = ("v2_mount", "v2_controllers", "v1_mounts")
    v2_mount: str | None
    v2_controllers: frozenset[str]
    v1_mounts: dict[str, str]

    def __init__(
        self,
        v2_mount: str | None = None,
        v2_controllers: frozenset[str] = frozenset(),
        v1_mounts: dict[str, str] | None = None,
    ) -> None:
        self._set(
            v2_mount=v2_mount, v2_controllers=v2_controllers, v1_mounts={} if v1_mounts is None else v1_mounts
        )

    @property
    def version(self) -> int:
        """2 when the cgroup2 mount serves the core controllers, 1 when v1 does, 0 when neither."""
        if self.v2_mount and all(c in self.v2_controllers for c in CORE):
            return 2
        if all(c in self.v1_mounts for c in CORE):
            return 1
        return 0

    def fingerprint(self) -> str:
        """A short text that changes when the layout changes (for cross-process caches)."""
        return f"v2={self.v2_mount}:{','.join(sorted(self.v2_controllers))};v1=" + ",".join(
            f"{k}@{v}" for k, v in sorted(self.v1_mounts.items())
        )


def parse_mountinfo(text: str | bytes) -> Layout:
    """Build a ``Layout`` from the text of /proc/self/mountinfo (format: proc(5); parsed by
    ``sandbox_shim.mountinfo``, every escape decoded)."""
    return layout_of(parse(text))


def layout_of(table: list[Mount]) -> Layout:
    """The ``Layout`` of a parsed mount table: the first cgroup2 mount, the first mount of each v1
    controller."""
    v2_mount: str | None = None
    v1: dict[str, str] = {}
    for m in table:
        if m.fstype == "cgroup2" and v2_mount is None:
            v2_mount = m.mount_point
        elif m.fstype == "cgroup":
            for opt in m.super_options.split(","):
                if opt in V1_CONTROLLERS:
                    v1.setdefault(opt, m.mount_point)
    controllers: frozenset[str] = frozenset()
    if v2_mount:
        try:
            with open(os.path.join(v2_mount, "cgroup.controllers")) as fh:
                controllers = frozenset(fh.read().split())
        except OSError:
            controllers = frozenset()
    return Layout(v2_mount, controllers, v1)


_detected: list[Layout] = []  # the one cached layout (functools.lru_cache would load functools)


def detect() -> Layout:
    """The layout of this host (cached for the process), from the mount table as ``mountinfo.read``
    reads it (the one reader of /proc/self/mountinfo).

    Raises: OSError when the table cannot be read."""
    if not _detected:
        table = read()
        if table is None:
            raise OSError(f"cannot read {MOUNTINFO}")
        _detected.append(layout_of(table))
    return _detected[0]


def manager(
    path: str,
    version: int | None = None,
    layout: Layout | None = None,
    systemd: bool = False,
    token: str = "",
    ino: int = 0,
) -> CgroupManager:
    """A manager for the cgroup at ``path`` (relative to each hierarchy's root, e.g. ``/sandbox-shim/ID``).

    Args:
        path: cgroup path, absolute within the hierarchy; with ``systemd``, runc's ``slice:prefix:name``.
        version: force 1 or 2 (as recorded in a sandbox's state); default: detect.
        layout: the host layout (default: ``detect()``).
        systemd: the systemd driver (``systemd.SystemdManager``, v2 hosts only).
        token: with ``systemd``, the sandbox's unit token as recorded (a new one when empty).
        ino: with ``systemd``, the scope directory's inode as recorded (0: not recorded).
    Raises:
        LaunchFailed: the host has no usable cgroup hierarchy of that version; with ``systemd``, a
            ``cgroupsPath`` that is not ``slice:prefix:name`` or a host that is not cgroup v2.
    """
    from ....errors import LaunchFailed

    lay = layout or detect()
    ver = version or lay.version
    if systemd:
        if ver != 2 or not lay.v2_mount:
            raise LaunchFailed(
                "--systemd-cgroup: the systemd cgroup driver is implemented for cgroup v2 hosts only",
                "drop --systemd-cgroup on this host",
            )
        from .systemd import SystemdManager

        return SystemdManager(lay.v2_mount, path, token=token, ino=ino)
    if ver == 2 and lay.v2_mount:
        from .v2 import V2Manager

        return V2Manager(lay.v2_mount, path)
    if ver == 1 and lay.v1_mounts:
        from .v1 import V1Manager

        return V1Manager(lay.v1_mounts, path)
    raise LaunchFailed(
        "no usable cgroup hierarchy on this host (need the memory and pids controllers)",
        "mount cgroup2 with memory and pids enabled, or the v1 memory and pids hierarchies",
    )


def manager_of(record: dict[str, Any]) -> CgroupManager:
    """The manager of a sandbox's cgroup as its record holds it (``{"path", "version", "systemd",
    "token", "ino"}``: ``priv["cgroup"]``, or ``ROOT/.cgroups/ID``), so every verb rebuilds the same one.

    Raises:
        LaunchFailed, BundleInvalid: as ``manager``; KeyError: a record without ``path``.
    """
    return manager(
        record["path"],
        record.get("version"),
        systemd=bool(record.get("systemd")),
        token=str(record.get("token") or ""),
        ino=int(record.get("ino") or 0),
    )
