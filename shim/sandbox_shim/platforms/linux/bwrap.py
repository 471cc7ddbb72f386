"""Plan → bwrap arguments (bwrap(1)), with every path resolved inside the sandbox first.

Typed mount operations render to argv here and only here; the argv reaches bwrap through
``--args FD`` (NUL-separated), never a shell.  Mount destinations, masked and read-only paths and
the cwd are resolved with ``paths.View`` — in the rootfs or the mount that covers them (a bind
source such as ``storage/``), never through a symlink of /proc or /dev — so what bwrap receives is
symlink-free: bwrap resolves its destinations while the host's root is still reachable at
``/oldroot``, so a link it followed could make directories or files on the host.
"""

from __future__ import annotations

import errno
import os

from ...errors import BundleInvalid, BundleProblem
from ...hardening import tenant
from ...hardening.tenant import pid_problem
from ...paths import HOST_BACKED, Layer, View, ensure_in_root
from ...values import FrozenValue, Value
from .locate import bwrap_path as bwrap_path  # re-exported: one lookup (locate.py)
from .plan import Plan

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


class Fds(Value):
    """File descriptors bwrap is given (numbers as in the bwrap process)."""

    __match_args__ = ("block", "status", "seccomp")
    block: int
    status: int
    seccomp: list[int]  # BPF programs, stacked in this order

    def __init__(self, block: int, status: int, seccomp: list[int] | None = None) -> None:
        self.block, self.status = block, status
        self.seccomp = [] if seccomp is None else seccomp


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


class MakeStep(FrozenValue):
    """One mount point or cwd the argv needs that does not exist yet: made by ``make_missing`` in the
    host tree ``root`` (the rootfs or a read-write bind source) at ``rel``, before bwrap runs."""

    __match_args__ = ("dest", "root", "rel", "is_dir")
    dest: str  # the sandbox path, as in the argv
    root: str
    rel: str
    is_dir: bool

    def __init__(self, dest: str, root: str, rel: str, is_dir: bool) -> None:
        self._set(dest=dest, root=root, rel=rel, is_dir=is_dir)


class _PlannedView(View):
    """A ``View`` whose ``ensure`` creates nothing: it runs the same checks (EROFS in a read-only bind,
    a file where a directory is needed) and records a ``MakeStep`` for each missing path, so the
    argument vector is a function of the Plan and the trees it names, and the one side effect is an
    explicit step (``make_missing``).  Later look-ups see a recorded path as made."""

    def __init__(self, rootfs: str) -> None:
        super().__init__(rootfs)
        self.steps: list[MakeStep] = []
        self._planned: dict[str, bool] = {}  # host path -> is_dir

    def ensure(self, path: str, is_dir: bool = True) -> tuple[str, Layer]:
        dest, la = self.resolve(path)
        host = self.host_of(dest)
        if la.fs not in HOST_BACKED or host is None:
            return dest, la
        planned = self._planned.get(host)
        if planned is None and not os.path.lexists(host):
            if not la.writable:
                raise OSError(
                    errno.EROFS,
                    f"{dest} does not exist and {la.dest} is a read-only bind of "
                    f"{la.host}: it would be created on the host",
                    path,
                )
            rel = os.path.relpath(host, la.host)
            parts = rel.split(os.sep)
            for i in range(1, len(parts)):  # the parents are made too (directories)
                self._planned.setdefault(os.path.join(la.host, *parts[:i]), True)
            self._planned[host] = is_dir
            self.steps.append(MakeStep(dest, la.host, rel, is_dir))
        elif is_dir and not (planned if planned is not None else os.path.isdir(host)):
            raise OSError(errno.ENOTDIR, f"{dest} exists and is not a directory", path)
        return dest, la

    def lexists(self, host: str) -> bool:
        """``os.path.lexists`` as it will be once the recorded steps are made."""
        return host in self._planned or os.path.lexists(host)

    def isdir(self, host: str) -> bool:
        """``os.path.isdir`` as it will be once the recorded steps are made."""
        planned = self._planned.get(host)
        return planned if planned is not None else os.path.isdir(host)


def _lexists(view: View, host: str) -> bool:
    return view.lexists(host) if isinstance(view, _PlannedView) else os.path.lexists(host)


def _isdir(view: View, host: str) -> bool:
    return view.isdir(host) if isinstance(view, _PlannedView) else os.path.isdir(host)


class Layout(Value):
    """``build_args``' result: the argument vector and the paths to make before bwrap runs."""

    __match_args__ = ("argv", "steps")
    argv: list[str]
    steps: list[MakeStep]

    def __init__(self, argv: list[str], steps: list[MakeStep]) -> None:
        self.argv, self.steps = argv, steps


def make_missing(steps: list[MakeStep], cwd: str | None = None) -> None:
    """Make each path in ``steps`` in its host tree, one component at a time without following a link
    out of it (``paths.ensure_in_root``).  ``cwd`` (the resolved cwd) names the step to refuse at
    ``/process/cwd``; the others are mount points (``/mounts``).

    Raises:
        BundleInvalid: a path cannot be made (exists with the wrong type, a link leads out, EXDEV).
    """
    for st in steps:
        try:
            ensure_in_root(st.root, st.rel, st.is_dir)
        except OSError as e:
            if st.dest == cwd:
                raise _refuse(
                    "/process/cwd",
                    f"cwd {st.dest} cannot be made inside the sandbox",
                    e,
                    "use an existing directory",
                ) from e
            raise _refuse(
                "/mounts",
                f"mount point {st.dest} cannot be made inside the sandbox",
                e,
                "fix the destination, or the symlink in the rootfs or storage it goes through",
            ) from e


def _dest(view: View, dest: str, is_dir: bool = True) -> str:
    """A mount destination resolved in the sandbox's tree; recorded to be made if missing (rootfs /
    rw bind only: ``_PlannedView``)."""
    try:
        return view.ensure(dest, is_dir)[0]
    except OSError as e:
        raise _refuse(
            "/mounts",
            f"mount point {dest} cannot be made inside the sandbox",
            e,
            "fix the destination, or the symlink in the rootfs or storage it goes through",
        ) from e


def build_args(plan: Plan, fds: Fds) -> list[str]:
    """The bwrap argument list (without the executable) for ``plan``; creates nothing.  The mount
    points and cwd it names that are missing are ``layout(plan, fds).steps``, made by
    ``make_missing`` before bwrap runs.

    Raises:
        BundleInvalid: a destination or the cwd cannot be placed inside the sandbox safely.
    """
    return layout(plan, fds).argv


def layout(plan: Plan, fds: Fds) -> Layout:
    """``Layout(argv, steps)`` for ``plan`` (see ``build_args``).  Reads the rootfs and bind sources
    (lstat, readlink) and the host's /proc and /sys (which kernel files exist); writes nothing."""
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

    if plan.join.get("uts") and {"kernel.hostname", "kernel.domainname"} & set(plan.sysctl):
        ids = set()
        for ref in ("/proc/self/ns/uts", "/proc/1/ns/uts"):  # the runtime's own, and init's if readable
            try:
                st = os.stat(ref)
                ids.add((st.st_dev, st.st_ino))
            except OSError:
                continue
        try:
            st = os.stat(plan.join["uts"])
            mine = (st.st_dev, st.st_ino)
        except OSError:
            mine = None  # _host_problems / the join itself report a missing namespace
        if mine in ids:
            raise BundleInvalid(
                [
                    BundleProblem(
                        "/hostname",
                        "the uts namespace joined is the host's: its hostname would be changed",
                        "tenant profile: host state",
                        "join a sandbox's uts namespace, or remove hostname",
                    )
                ]
            )
    problem = pid_problem(plan.unshare, plan.join, [mt.kind for mt in plan.mounts])
    if problem:
        raise BundleInvalid([problem])
    _refuse_exposed(plan)
    view = _PlannedView(plan.rootfs)
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
        if mt.kind in ("proc", "sysfs"):
            a += _floor(view, dest, mt.kind)

    if plan.devices:
        if view.layer_for("/dev").fs != "dev":
            raise BundleInvalid(
                [
                    BundleProblem(
                        "/linux/devices",
                        "linux.devices needs the /dev tmpfs mount",
                        "runtime-spec config-linux.md Devices",
                        'add {"destination": "/dev", "type": "tmpfs"} to mounts',
                    )
                ]
            )
        from .devnodes import bind_args

        for dev in plan.devices:
            if not str(dev.get("path") or "").startswith("/dev/"):
                raise BundleInvalid(
                    [
                        BundleProblem(
                            "/linux/devices",
                            f"{dev.get('path')!r} is not under /dev",
                            "tenant profile: device nodes live in /dev only",
                            "put it under /dev",
                        )
                    ]
                )
        a += bind_args(plan.devices)

    for i, p in enumerate(plan.masked_paths):
        found = _protected(view, p, f"/linux/maskedPaths/{i}", plan)
        if found is not None:
            a += _mask(view, found[0], found[1] or "/")  # a mount root of an empty fs: a directory
    for i, p in enumerate(plan.readonly_paths):
        found = _protected(view, p, f"/linux/readonlyPaths/{i}", plan)
        if found is None:
            continue
        dest, host = found
        if host is None or dest == "/":
            a += ["--remount-ro", dest]  # a mount root (tmpfs, /dev, the rootfs): remounted in place
            continue
        a += ["--ro-bind", host, dest]
        if view.layer_for(dest).fs in ("rootfs", "bind"):  # a kernel fs shows the same there
            view.add(Layer(dest, "bind", host))
    if plan.root_readonly:
        a += ["--remount-ro", "/"]
    if plan.terminal:
        _check_helper_dir(view)

    a += _cwd(plan, view)
    a += ["--cap-drop", "ALL"]
    from .credentials import helper_capabilities

    held = sorted({*plan.capabilities, *helper_capabilities(plan.unshare, plan.uid, plan.gid)})
    for cap in held:
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
    from .credentials import setpriv_argv, switches_without_userns, wrap_argv

    cap_args = setpriv_argv(held, plan.inheritable, plan.ambient)
    if switches_without_userns(plan.unshare, plan.uid, plan.gid) or cap_args:
        from .console import CTTY_HELPER, helper_bind_args

        _check_helper_dir(view)
        a += helper_bind_args()
        a.append("--")
        argv = list(plan.args)
        if switches_without_userns(plan.unshare, plan.uid, plan.gid):
            argv = wrap_argv(CTTY_HELPER, plan.uid, plan.gid, argv)
        if cap_args:
            argv = [CTTY_HELPER, *cap_args, "--", *argv]
        a += argv
        return Layout(a, view.steps)
    a.append("--")
    a += plan.args
    return Layout(a, view.steps)


def walked_trees(plan: Plan) -> tuple[list[str], list[str]]:
    """(walked, writable): the host trees (the rootfs, bind sources) the set-up of ``plan`` looks inside
    — where a mount point, masked or read-only path or the cwd lies — and the trees its tenant can write
    (the rootfs unless read-only, read-write bind sources).  ``tree_claims`` keeps one live sandbox's
    writable trees apart from another's walked ones.  Nothing is created; a path that cannot be
    resolved is left to ``build_args`` to refuse."""
    view = View(plan.rootfs)
    for mt in plan.mounts:
        try:
            dest, _ = view.resolve(mt.destination)
        except OSError:
            continue
        writable = mt.kind == "bind" and not mt.readonly and os.path.isdir(mt.source)
        view.add(Layer(dest, mt.kind, mt.source if mt.kind == "bind" else "", writable))
    for p in [*plan.masked_paths, *plan.readonly_paths, plan.cwd]:
        try:
            view.resolve(p)
        except OSError:
            continue
    walked = sorted({la.host for la in view.entered if la.fs in ("rootfs", "bind")})
    trees = [] if plan.root_readonly else [plan.rootfs]
    trees += [mt.source for mt in plan.mounts if mt.kind == "bind" and not mt.readonly]
    return walked, sorted(set(trees))


def _mask(view: View, dest: str, host: str) -> list[str]:
    """Hide ``dest``: an empty read-only tmpfs over a directory, /dev/null over anything else."""
    view.masked.add(dest)
    if _isdir(view, host):
        view.add(Layer(dest, "tmpfs"))  # later paths under it find an empty fs, not the rootfs
        return ["--tmpfs", dest, "--remount-ro", dest]
    view.add(Layer(dest, "bind", "/dev/null"))
    return ["--ro-bind", "/dev/null", dest]


def _floor(view: View, dest: str, kind: str) -> list[str]:
    """The tenant's kernel-file floor under a proc or sysfs mount at ``dest`` (hardening.tenant):
    applied whatever maskedPaths/readonlyPaths say.  An entry this kernel does not have is skipped:
    the tenant cannot create files in proc or sysfs."""
    base = "/proc" if kind == "proc" else "/sys"
    masked = tenant.PROC_MASKED if kind == "proc" else tenant.SYS_MASKED
    out: list[str] = []
    for rel in masked:
        if _host_has(f"{base}/{rel}"):
            out += _mask(view, f"{dest.rstrip('/')}/{rel}", f"{base}/{rel}")
    for rel in tenant.PROC_READONLY if kind == "proc" else ():
        if _host_has(f"{base}/{rel}"):
            out += ["--ro-bind", f"{base}/{rel}", f"{dest.rstrip('/')}/{rel}"]
    return out


def _host_has(path: str) -> bool:
    """Whether this host's kernel has the /proc or /sys entry ``path`` (the floor skips absent ones)."""
    return os.path.lexists(path)


def _protected(view: View, path: str, pointer: str, plan: Plan) -> tuple[str, str | None] | None:
    """A masked / read-only path as (symlink-free sandbox path, host path showing it — None for the
    root of a tmpfs, mqueue or /dev mount), or None when there is nothing to protect: already masked,
    absent from a kernel file system (same kernel as the host's; the tenant cannot create files
    there) or from a tree the tenant cannot write.

    Refused (``BundleInvalid`` at ``pointer``): a path through a symbolic link of a kernel fs; a
    pid-dependent proc entry (its source would be the host's /proc); a path in bwrap's /dev below its
    mount root (its nodes are bwrap's; below a tmpfs root nothing exists yet: skipped); "/" as a masked
    path; and a path missing from a tenant-writable tree (a persistent rootfs, a read-write bind):
    a previous tenant may have moved it away, so the launch fails closed.  Nothing is created.
    """
    try:
        dest, layer = view.resolve(path)
    except OSError as e:
        raise _refuse(
            pointer,
            f"{path} cannot be resolved inside the sandbox",
            e,
            "list the path itself, not a path through a symbolic link",
        ) from e

    if view.masked_at(dest):
        return None  # already hidden (the floor, or an earlier entry)

    def refuse(why: str, fix: str) -> BundleInvalid:
        return BundleInvalid(
            [
                BundleProblem(
                    pointer,
                    f"{path}: {why}",
                    "tenant profile: masked and read-only paths hold (runtime-spec config-linux.md)",
                    fix,
                )
            ]
        )

    readonly = pointer.startswith("/linux/readonlyPaths")
    if readonly and layer.fs == "proc" and tenant.proc_pid_entry(dest[len(layer.dest.rstrip("/")) :]):
        raise refuse(
            "a pid-dependent proc entry cannot be made read-only (the bind's source would be the "
            "host's /proc)",
            "remove it; mask it instead, or list a path below /proc/sys",
        )
    if dest == "/" and not readonly:
        raise refuse("the root cannot be masked", "remove it")
    host = view.host_of(dest)
    if host is None and dest == layer.dest:
        return dest, None
    if host is None and layer.fs in ("tmpfs", "mqueue", "cgroup"):
        return None  # a new, empty fs: nothing there at set-up, nothing kept from an earlier run
    if host is None:
        raise refuse(
            f"lies in a {layer.fs} mount at {layer.dest}; nothing there can be kept masked or read-only",
            "list a path of the rootfs, a bind, /proc or /sys",
        )
    if _lexists(view, host):
        return dest, host
    tenant_writable = layer.writable and (layer.fs == "bind" or not plan.root_readonly)
    kernel_named = dest.split("/")[1] in ("proc", "sys")  # runtime-spec defaults name kernel files there
    if tenant_writable and not kernel_named:
        raise refuse(
            f"does not exist in {layer.dest}, which the tenant can write (a previous run may have moved it)",
            "restore it, or remove it from the list",
        )
    return None


def _refuse_exposed(plan: Plan) -> None:
    """Refuse a writable rootfs/bind holding the bundle, config.json, a hook or the state root."""
    from ...paths import exposed, writable_exposures

    binds = [("/mounts", mt.source, mt.readonly) for mt in plan.mounts if mt.kind == "bind"]
    protected = [plan.bundle, os.path.join(plan.bundle, "config.json"), *plan.protected]
    for ptr, path in exposed(writable_exposures(plan.rootfs, plan.root_readonly, binds), protected):
        raise BundleInvalid(
            [
                BundleProblem(
                    ptr,
                    f"the tenant could write {path}, which the runtime reads or runs on the host later",
                    "tenant profile: nothing the runtime reads is writable from inside",
                    "move it out, or make the mount read-only",
                )
            ]
        )


def _check_helper_dir(view: View) -> None:
    """The terminal helper is bound under /dev: only into bwrap's own /dev tmpfs, never through a
    directory or link of the image (it would be created on the host)."""
    from .console import CTTY_HELPER

    layer = view.layer_for(CTTY_HELPER)
    if layer.fs != "dev":
        raise BundleInvalid(
            [
                BundleProblem(
                    "/mounts",
                    f"a terminal sandbox needs a tmpfs mount at /dev "
                    f"({CTTY_HELPER} would be made in {layer.fs} at {layer.dest})",
                    "path safety: files the runtime creates are made in its own tmpfs",
                    'add {"destination": "/dev", "type": "tmpfs"} to mounts',
                )
            ]
        )


def _cwd(plan: Plan, view: View) -> list[str]:
    """``--chdir`` to ``process.cwd`` resolved inside the sandbox, and the directory made when missing:
    in the rootfs / a rw bind here (``View.ensure``); in a config tmpfs by bwrap (``--dir``, after
    every mount, as runc makes the cwd of an image inside its mounts).

    Refused (``BundleInvalid`` at /process/cwd): a cwd in a kernel file system (``/proc/self/fd/N``:
    CVE-2024-21626); below the root of a masked path, of a read-only tmpfs or of an mqueue mount
    (nothing exists there, and nothing can be made).
    """
    try:
        cwd, layer = view.resolve(plan.cwd)
    except OSError as e:
        raise _refuse(
            "/process/cwd",
            f"cwd {plan.cwd} cannot be resolved inside the sandbox",
            e,
            "use a directory of the rootfs or of a bind/tmpfs mount",
        ) from e
    for key, paths, equal in (("masked", plan.masked_paths, True), ("read-only", plan.readonly_paths, False)):
        for p in paths:  # after symlinks: path_rules.hidden_problems decides on the config's spelling
            try:
                top = view.resolve(p)[0]
            except OSError:
                continue
            if top != "/" and ((equal and cwd == top) or cwd.startswith(top.rstrip("/") + "/")):
                raise BundleInvalid(
                    [
                        BundleProblem(
                            "/process/cwd",
                            f"cwd {plan.cwd} resolves into the {key} "
                            f"path {p}: making it would undo the {key} path",
                            "runtime-spec config-linux.md masked/readonly paths",
                            f"use a cwd outside {p}",
                        )
                    ]
                )
    if layer.fs in _KERNEL_FS:
        raise BundleInvalid(
            [
                BundleProblem(
                    "/process/cwd",
                    f"cwd {plan.cwd} lies in a kernel filesystem ({layer.fs} at {layer.dest})",
                    "path safety: the cwd must be inside the sandbox's files",
                    "use a directory of the rootfs or of a bind/tmpfs mount",
                )
            ]
        )
    if view.host_of(cwd) is None and cwd != layer.dest:  # an empty fs bwrap mounts: nothing is there yet
        if layer.fs == "tmpfs" and not view.masked_at(cwd) and not _readonly_tmpfs(plan, view, layer.dest):
            return ["--dir", cwd, "--chdir", cwd]
        raise BundleInvalid(
            [
                BundleProblem(
                    "/process/cwd",
                    f"cwd {plan.cwd} lies below the root of an "
                    f"empty read-only {layer.fs} at {layer.dest}: it cannot exist",
                    "path safety: the cwd must be inside the sandbox's files",
                    "use the mount's root, a writable tmpfs, or a directory of the rootfs or a bind",
                )
            ]
        )
    try:
        return ["--chdir", view.ensure(cwd, True)[0]]
    except OSError as e:
        raise _refuse(
            "/process/cwd",
            f"cwd {plan.cwd} cannot be made inside the sandbox",
            e,
            "use an existing directory",
        ) from e


def _readonly_tmpfs(plan: Plan, view: View, dest: str) -> bool:
    """Whether the tmpfs at ``dest`` ends read-only: its (last) mount is ``ro``, or a
    ``linux.readonlyPaths`` entry names it (bwrap applies ``--remount-ro`` in order: a ``--dir``
    after it fails with EROFS)."""

    def at(path: str) -> bool:
        try:
            return view.resolve(path)[0] == dest
        except OSError:
            return False

    last = next((mt for mt in reversed(plan.mounts) if mt.kind == "tmpfs" and at(mt.destination)), None)
    return bool(last is not None and last.readonly) or any(at(p) for p in plan.readonly_paths)
