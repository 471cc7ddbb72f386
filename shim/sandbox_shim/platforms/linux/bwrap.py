"""Plan → bwrap arguments (bwrap(1)), with every destination resolved inside the rootfs first.

Typed mount operations render to argv here and only here; the argv reaches bwrap through
``--args FD`` (NUL-separated), never a shell.  Destinations are pre-resolved with ``paths`` so
bwrap never follows a symlink planted in the rootfs: what bwrap receives is symlink-free.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

from ...errors import BundleInvalid, BundleProblem
from ...paths import ensure_in_root, inside
from ...plan import Plan

#: kernel filesystems mounted by bwrap itself; paths under them are never created in the rootfs
_KERNEL_FS = ("proc", "dev", "sysfs", "mqueue", "cgroup")

UNSHARE_FLAGS = {
    "pid": "--unshare-pid",
    "network": "--unshare-net",
    "ipc": "--unshare-ipc",
    "uts": "--unshare-uts",
    "cgroup": "--unshare-cgroup",
    "user": "--unshare-user",
}


def bwrap_path() -> str | None:
    """The bwrap executable (``SANDBOX_SHIM_BWRAP`` overrides the PATH lookup), or None."""
    return os.environ.get("SANDBOX_SHIM_BWRAP") or shutil.which("bwrap") or (
        "/usr/bin/bwrap" if os.path.exists("/usr/bin/bwrap") else None)


@dataclass
class Fds:
    """File descriptors bwrap is given (numbers as in the bwrap process)."""

    block: int
    status: int
    seccomp: int | None = None


def _norm(path: str) -> str:
    """Absolute, normalised sandbox path (``os.path.normpath`` keeps a leading ``//``; this does not)."""
    return "/" + os.path.normpath("/" + path).lstrip("/")


def _opt(options: list[str], key: str) -> str | None:
    for o in options:
        if o.startswith(key + "="):
            return o.split("=", 1)[1]
    return None


def _size_bytes(text: str) -> str:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    t = text.strip().lower()
    if t and t[-1] in units:
        return str(int(t[:-1]) * units[t[-1]])
    return str(int(t))


class _Mounts:
    """Tracks which destinations lie under a kernel/tmpfs mount (not in the rootfs)."""

    def __init__(self, rootfs: str) -> None:
        self.rootfs = rootfs
        self.virtual: list[str] = []

    def under_virtual(self, dest: str) -> bool:
        return any(dest == v or dest.startswith(v.rstrip("/") + "/") for v in self.virtual)

    def dest(self, dest: str, is_dir: bool = True) -> str:
        """Destination as given to bwrap: resolved in the rootfs (created if missing) unless virtual."""
        norm = _norm(dest)
        if self.under_virtual(norm):
            return norm
        try:
            return inside(self.rootfs, ensure_in_root(self.rootfs, norm, is_dir))
        except OSError as e:
            raise BundleInvalid([BundleProblem("/mounts", f"mount point {dest} cannot be made inside the rootfs: "
                                               f"{e.strerror}", "path safety", "fix the path or the rootfs")]) from e


def build_args(plan: Plan, fds: Fds) -> list[str]:
    """The bwrap argument list (without the executable) for ``plan``.

    Raises:
        BundleInvalid: a destination or the cwd cannot be placed inside the sandbox safely.
    """
    a: list[str] = []
    for t in plan.unshare:
        if t in UNSHARE_FLAGS and t != "user":
            a.append(UNSHARE_FLAGS[t])
    if "user" in plan.unshare or plan.uid != 0 or plan.gid != 0:
        # bwrap can switch uid/gid only inside a user namespace (bwrap(1) --uid).
        a += ["--unshare-user", "--uid", str(plan.uid), "--gid", str(plan.gid)]
    if plan.hostname and "uts" in plan.unshare:
        a += ["--hostname", plan.hostname]
    if not plan.terminal:
        a.append("--new-session")  # no TIOCSTI into the caller's terminal (bwrap(1) --new-session)

    m = _Mounts(plan.rootfs)
    a += ["--bind", plan.rootfs, "/"]
    for mt in plan.mounts:
        if mt.kind == "bind":
            is_dir = os.path.isdir(mt.source)
            dest = m.dest(mt.destination, is_dir)
            a += ["--ro-bind" if mt.readonly else "--bind", mt.source, dest]
            continue
        dest = m.dest(mt.destination)
        if mt.kind == "proc":
            a += ["--proc", dest]
        elif mt.kind == "dev":
            a += ["--dev", dest]
        elif mt.kind == "tmpfs":
            mode = _opt(mt.options, "mode")
            size = _opt(mt.options, "size")
            if mode:
                a += ["--perms", mode]
            if size:
                a += ["--size", _size_bytes(size)]
            a += ["--tmpfs", dest]
            if mt.readonly:
                a += ["--remount-ro", dest]
        elif mt.kind == "mqueue":
            a += ["--mqueue", dest]
        elif mt.kind == "sysfs":
            a += ["--ro-bind", "/sys", dest]
        elif mt.kind == "cgroup":
            a += ["--tmpfs", dest, "--remount-ro", dest]
        m.virtual.append(_norm(mt.destination))

    for p in plan.masked_paths:
        host = _sandbox_path_on_host(plan, m, p)
        if host is None:
            continue
        if os.path.isdir(host):
            a += ["--tmpfs", p, "--remount-ro", p]
        else:
            a += ["--ro-bind", "/dev/null", p]
    for p in plan.readonly_paths:
        host = _sandbox_path_on_host(plan, m, p)
        if host is not None:
            a += ["--ro-bind", host, p if m.under_virtual(p) else inside(plan.rootfs, host)]
    if plan.root_readonly:
        a += ["--remount-ro", "/"]

    a += ["--chdir", _cwd(plan, m)]
    a += ["--cap-drop", "ALL"]
    for cap in plan.capabilities:
        a += ["--cap-add", cap]
    a.append("--clearenv")
    for k, v in plan.env.items():
        a += ["--setenv", k, v]
    a += ["--block-fd", str(fds.block), "--json-status-fd", str(fds.status)]
    if fds.seccomp is not None:
        a += ["--seccomp", str(fds.seccomp)]
    a.append("--")
    a += plan.args
    return a


def _sandbox_path_on_host(plan: Plan, m: _Mounts, path: str) -> str | None:
    """Where a masked/read-only path's content lives on the host, or None if it does not exist.

    Paths under /proc and /sys are the kernel's (same kernel, so the host path shows the type);
    others resolve inside the rootfs.
    """
    norm = _norm(path)
    if norm.startswith(("/proc/", "/sys/")):
        return norm if os.path.lexists(norm) else None
    if m.under_virtual(norm):
        return None
    from ...paths import resolve_in_root

    host = resolve_in_root(plan.rootfs, norm)
    return host if os.path.lexists(host) else None


def _cwd(plan: Plan, m: _Mounts) -> str:
    cwd = _norm(plan.cwd)
    for kfs in m.virtual:
        kinds = {mt.kind for mt in plan.mounts if _norm(mt.destination) == kfs}
        if kinds & set(_KERNEL_FS) and (cwd == kfs or cwd.startswith(kfs.rstrip("/") + "/")):
            raise BundleInvalid([BundleProblem("/process/cwd", f"cwd {plan.cwd} lies in a kernel filesystem ({kfs})",
                                               "path safety: the cwd must be inside the sandbox's files",
                                               "use a directory of the rootfs or of a bind/tmpfs mount")])
    if m.under_virtual(cwd):
        return cwd
    try:
        return inside(plan.rootfs, ensure_in_root(plan.rootfs, cwd, True))
    except OSError as e:
        raise BundleInvalid([BundleProblem("/process/cwd", f"cwd {plan.cwd} cannot be made inside the rootfs: "
                                           f"{e.strerror}", "path safety", "use an existing directory")]) from e
