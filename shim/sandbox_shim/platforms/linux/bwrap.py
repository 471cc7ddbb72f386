"""Plan → bwrap arguments (bwrap(1)), with every path resolved inside the sandbox first.

Typed mount operations render to argv here and only here; the argv reaches bwrap through
``--args FD`` (NUL-separated), never a shell.  Mount destinations, masked and read-only paths and
the cwd are resolved with ``paths.View`` — in the rootfs or the mount that covers them (a bind
source such as ``storage/``), never through a symlink of /proc or /dev — so what bwrap receives is
symlink-free: bwrap resolves its destinations while the host's root is still reachable at
``/oldroot``, so a link it followed could make directories or files on the host.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field

from ...errors import BundleInvalid, BundleProblem
from ...hardening.tenant import pid_problem
from ...paths import Layer, View
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
    seccomp: list[int] = field(default_factory=list)  # BPF programs, stacked in this order


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


def _refuse(pointer: str, what: str, e: OSError, fix: str) -> BundleInvalid:
    rule = "path safety: every path resolves inside the sandbox (runtime-spec mounts; runc securejoin)"
    return BundleInvalid([BundleProblem(pointer, f"{what}: {e.strerror}", rule, fix)])


def _dest(view: View, dest: str, is_dir: bool = True) -> str:
    """A mount destination resolved in the sandbox's tree, made if missing (rootfs / rw bind only)."""
    try:
        return view.ensure(dest, is_dir)[0]
    except OSError as e:
        raise _refuse("/mounts", f"mount point {dest} cannot be made inside the sandbox", e,
                      "fix the destination, or the symlink in the rootfs or storage it goes through") from e


def build_args(plan: Plan, fds: Fds) -> list[str]:
    """The bwrap argument list (without the executable) for ``plan``.

    Raises:
        BundleInvalid: a destination or the cwd cannot be placed inside the sandbox safely.
    """
    a: list[str] = []
    for t in plan.unshare:
        if t in UNSHARE_FLAGS and t != "user":
            a.append(UNSHARE_FLAGS[t])
    if "user" in plan.unshare:
        # bwrap maps process.user's ids onto the runtime's own in the namespace it makes (bwrap(1) --uid);
        # without one the ids are the host's, switched by the helper (credentials.py)
        a += ["--unshare-user", "--uid", str(plan.uid), "--gid", str(plan.gid)]
    if plan.hostname and "uts" in plan.unshare:
        a += ["--hostname", plan.hostname]
    if not plan.terminal:
        a.append("--new-session")  # no TIOCSTI into the caller's terminal (bwrap(1) --new-session)

    problem = pid_problem(plan.unshare, plan.join, [mt.kind for mt in plan.mounts])
    if problem:
        raise BundleInvalid([problem])
    view = View(plan.rootfs)
    a += ["--bind", plan.rootfs, "/"]
    for mt in plan.mounts:
        if mt.kind == "bind":
            is_dir = os.path.isdir(mt.source)
            dest = _dest(view, mt.destination, is_dir)
            a += ["--ro-bind" if mt.readonly else "--bind", mt.source, dest]
            view.add(Layer(dest, "bind", mt.source, writable=not mt.readonly and is_dir))
            continue
        dest = _dest(view, mt.destination)
        if mt.kind == "proc":
            a += ["--proc", dest]
        elif mt.kind == "dev":
            a += ["--dev", dest]
        elif mt.kind == "tmpfs":
            mode = _opt(mt.options, "mode") or "1777"  # tmpfs(5): the root's default mode is 1777
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
        view.add(Layer(dest, mt.kind))

    if plan.devices:
        if view.layer_for("/dev").fs != "dev":
            raise BundleInvalid([BundleProblem("/linux/devices", "linux.devices needs the /dev tmpfs mount",
                                               "runtime-spec config-linux.md Devices",
                                               'add {"destination": "/dev", "type": "tmpfs"} to mounts')])
        from .devnodes import bind_args

        for dev in plan.devices:
            if not str(dev.get("path") or "").startswith("/dev/"):
                raise BundleInvalid([BundleProblem("/linux/devices", f"{dev.get('path')!r} is not under /dev",
                                                   "tenant profile: device nodes live in /dev only",
                                                   "put it under /dev")])
        a += bind_args(plan.devices)

    for p in plan.masked_paths:
        found = _existing(view, p, "/linux/maskedPaths")
        if found is None:
            continue
        dest, host = found
        if os.path.isdir(host):
            a += ["--tmpfs", dest, "--remount-ro", dest]
            view.add(Layer(dest, "tmpfs"))  # later paths under it find an empty fs, not the rootfs
        else:
            a += ["--ro-bind", "/dev/null", dest]
            view.add(Layer(dest, "bind", "/dev/null"))
    for p in plan.readonly_paths:
        found = _existing(view, p, "/linux/readonlyPaths")
        if found is not None:
            a += ["--ro-bind", found[1], found[0]]
            if view.layer_for(found[0]).fs in ("rootfs", "bind"):  # a kernel fs shows the same there
                view.add(Layer(found[0], "bind", found[1]))
    if plan.root_readonly:
        a += ["--remount-ro", "/"]

    a += ["--chdir", _cwd(plan, view)]
    a += ["--cap-drop", "ALL"]
    from .credentials import helper_capabilities

    for cap in sorted({*plan.capabilities, *helper_capabilities(plan.unshare, plan.uid, plan.gid)}):
        a += ["--cap-add", cap]
    a.append("--clearenv")
    for k, v in plan.env.items():
        a += ["--setenv", k, v]
    # --info-fd, not --json-status-fd: the outer bwrap is killed once the child is held (mechanism.py),
    # and with --json-status-fd the child's last write before execve would go to the dead monitor.
    a += ["--block-fd", str(fds.block), "--info-fd", str(fds.status)]
    if "pid" in plan.unshare:
        a.append("--as-pid-1")  # the workload is the sandbox's pid 1 (no bwrap init), as with runc
    for fd in fds.seccomp:
        a += ["--add-seccomp-fd", str(fd)]  # repeatable, unlike --seccomp (bwrap(1))
    from .credentials import switches_without_userns, wrap_argv

    if switches_without_userns(plan.unshare, plan.uid, plan.gid):
        from .console import CTTY_HELPER, helper_bind_args

        a += helper_bind_args()
        a.append("--")
        a += wrap_argv(CTTY_HELPER, plan.uid, plan.gid, plan.args)
        return a
    a.append("--")
    a += plan.args
    return a


def _existing(view: View, path: str, pointer: str) -> tuple[str, str] | None:
    """A masked / read-only path as (symlink-free sandbox path, host path showing it), or None if
    nothing is there to mask (absent, or in an empty fs or bwrap's /dev).

    Paths in /proc and /sys are looked up in the host's own mounts (same kernel, same shape);
    others in the rootfs or the bind that covers them.  Nothing is created.
    """
    try:
        dest, _layer = view.resolve(path)
    except OSError as e:
        raise _refuse(pointer, f"{path} cannot be resolved inside the sandbox", e,
                      "list the path itself, not a path through a symbolic link") from e
    host = view.host_of(dest)
    if host is None or not os.path.lexists(host):
        return None
    return dest, host


def _cwd(plan: Plan, view: View) -> str:
    """``process.cwd`` resolved inside the sandbox (made in the rootfs / a rw bind when missing).

    A cwd in a kernel file system (``/proc/self/fd/N``: CVE-2024-21626) is refused.
    """
    try:
        cwd, layer = view.resolve(plan.cwd)
    except OSError as e:
        raise _refuse("/process/cwd", f"cwd {plan.cwd} cannot be resolved inside the sandbox", e,
                      "use a directory of the rootfs or of a bind/tmpfs mount") from e
    if layer.fs in _KERNEL_FS:
        raise BundleInvalid([BundleProblem("/process/cwd", f"cwd {plan.cwd} lies in a kernel filesystem "
                                           f"({layer.fs} at {layer.dest})",
                                           "path safety: the cwd must be inside the sandbox's files",
                                           "use a directory of the rootfs or of a bind/tmpfs mount")])
    try:
        return view.ensure(cwd, True)[0]
    except OSError as e:
        raise _refuse("/process/cwd", f"cwd {plan.cwd} cannot be made inside the sandbox", e,
                      "use an existing directory") from e
