"""Plan → bwrap arguments (bwrap(1)), with every path resolved inside the sandbox first.

Typed mount operations render to argv here and only here; the argv reaches bwrap through
``--args FD`` (NUL-separated), never a shell.  Mount destinations, masked and read-only paths and
the cwd are resolved with ``paths.View`` — in the rootfs or the mount that covers them (a bind
source such as ``storage/``), never through a symlink of /proc or /dev — so what bwrap receives is
symlink-free: bwrap resolves its destinations while the host's root is still reachable at
``/oldroot``, so a link it followed could make directories or files on the host.

Three steps, in this order, all in ``create`` just before bwrap is spawned: ``check`` (the plan's
refusals that need no layout), ``render`` (the argv and the ``MakeStep`` list: a pure function of the
Plan, the fds and the answers of one ``LinuxHost``, the only way either step looks at the host), and
``make_missing`` (the one step that writes: the mount points and cwd the argv names).  Refusals that
depend on how a path resolves (a symlink of a kernel fs, a file where a directory is needed, a masked
or read-only path or cwd the profile refuses) stay in ``render``'s one walk: checked on the same
answers the argv is built from, never on an earlier look.
"""

from __future__ import annotations

import errno
import os

from ...errors import BundleInvalid, BundleProblem
from ...hardening import tenant
from ...hardening.tenant import pid_problem
from ...paths import HOST_BACKED, HostFs, Layer, View, ensure_in_root
from ...values import FrozenValue, Value
from .locate import bwrap_path as bwrap_path  # re-exported: one lookup (locate.py)
from .plan import Plan

TYPE_CHECKING = False  # no typing at run time: create loads this module
if TYPE_CHECKING:
    from typing import Any

    from .plan import Mount

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


class LinuxHost(HostFs):
    """The host as bwrap's argv depends on it, one typed view: the files of the rootfs and bind sources
    (``HostFs``), which /proc and /sys entries this kernel has, the host device nodes a
    ``linux.devices`` entry binds, the terminal helper's source, which namespace a path names and
    whether one host directory holds another.  ``check`` and ``render`` read the host through it
    and nothing else, so a fake one (tests) gives argv with no file system at all."""

    def kernel_has(self, path: str) -> bool:
        """Whether this kernel has the /proc or /sys entry ``path`` (the floor skips absent ones)."""
        return _host_has(path)

    def device_args(self, devices: list[dict[str, Any]]) -> list[str]:
        """``--dev-bind HOSTNODE DEST`` per entry (``devnodes.bind_args``; BundleInvalid when no host
        node matches)."""
        from .devnodes import bind_args

        return bind_args(devices)

    def helper_binds(self) -> list[str]:
        """The bwrap options binding the terminal helper (``console.helper_bind_args``; LaunchFailed
        when the host has no static busybox)."""
        from .console import helper_bind_args

        return helper_bind_args()

    def ns_identity(self, path: str) -> tuple[int, int] | None:
        """(st_dev, st_ino) of the namespace file ``path`` (stat(2), following its magic link); None
        when it cannot be read."""
        try:
            st = os.stat(path)
        except OSError:
            return None
        return st.st_dev, st.st_ino

    def runtime_uts(self) -> set[tuple[int, int]]:
        """The identities of this process's and init's uts namespaces (the host's), those readable
        (``platforms.linux.ns_identity``, the one reader of namespace identity)."""
        from . import ns_identity

        out = set()
        for pid in ("self", 1):
            try:
                out.add(ns_identity(pid, "uts"))
            except OSError:
                pass
        return out

    def contains(self, outer: str, inner: str) -> bool:
        """Whether host directory ``outer`` holds ``inner`` (``paths.contains``: by identity)."""
        from ...paths import contains

        return contains(outer, inner)


def _host_has(path: str) -> bool:
    """``LinuxHost.kernel_has`` of the real host: ``os.path.lexists`` of a /proc or /sys entry."""
    return os.path.lexists(path)


class _PlannedView(View):
    """A ``View`` whose ``ensure`` creates nothing: it runs the same checks (EROFS in a read-only bind,
    a file where a directory is needed) and records a ``MakeStep`` for each missing path, so the
    argument vector is a function of the Plan and the host view's answers, and the one side effect is
    an explicit step (``make_missing``).  Later look-ups see a recorded path as made."""

    def __init__(self, rootfs: str, host: LinuxHost) -> None:
        super().__init__(rootfs, host)
        self.host = host
        self.steps: list[MakeStep] = []
        self._planned: dict[str, bool] = {}  # host path -> is_dir

    def ensure(self, path: str, is_dir: bool = True) -> tuple[str, Layer]:
        dest, la = self.resolve(path)
        host = self.host_of(dest)
        if la.fs not in HOST_BACKED or host is None:
            return dest, la
        planned = self._planned.get(host)
        if planned is None and not self.host.lexists(host):
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
        elif is_dir and not (planned if planned is not None else self.host.isdir(host)):
            raise OSError(errno.ENOTDIR, f"{dest} exists and is not a directory", path)
        return dest, la

    def lexists(self, host: str) -> bool:
        """``lexists`` as it will be once the recorded steps are made."""
        return host in self._planned or self.host.lexists(host)

    def isdir(self, host: str) -> bool:
        """``isdir`` as it will be once the recorded steps are made."""
        planned = self._planned.get(host)
        return planned if planned is not None else self.host.isdir(host)


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


def build_args(plan: Plan, fds: Fds, host: LinuxHost | None = None) -> list[str]:
    """The bwrap argument list (without the executable) for ``plan``; creates nothing.  The mount
    points and cwd it names that are missing are ``layout(plan, fds).steps``, made by
    ``make_missing`` before bwrap runs.  ``host``: the view of the host it reads (default: this one).

    Raises:
        BundleInvalid: ``check`` refuses the plan, or a destination or the cwd cannot be placed inside
            the sandbox safely.
    """
    return layout(plan, fds, host).argv


def layout(plan: Plan, fds: Fds, host: LinuxHost | None = None) -> Layout:
    """``check(plan, host)``, then ``render(plan, fds, host)``: the two steps the mechanism runs."""
    host = LinuxHost() if host is None else host
    check(plan, host)
    return render(plan, fds, host)


def check(plan: Plan, host: LinuxHost) -> None:
    """The refusals of ``plan`` that need no layout: a hostname or domainname written into the host's
    own uts namespace, a pid namespace shared with the host under a new proc mount
    (``hardening.tenant.pid_problem``), a writable rootfs or bind holding the bundle, config.json, a
    hook or the state root, a ``linux.devices`` path outside /dev.  Run before ``render``; reads the
    host only through ``host``.

    Raises:
        BundleInvalid: at the pointer of the field refused (``/hostname``, ``/linux/namespaces``,
            ``/root/path`` or ``/mounts``, ``/linux/devices``).
    """
    if plan.join.get("uts") and {"kernel.hostname", "kernel.domainname"} & set(plan.sysctl):
        _refuse_host_uts(plan, host)
    problem = pid_problem(plan.unshare, plan.join, [mt.kind for mt in plan.mounts])
    if problem:
        raise BundleInvalid([problem])
    _refuse_exposed(plan, host)
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


def _refuse_host_uts(plan: Plan, host: LinuxHost) -> None:
    """Refuse writing kernel.hostname/domainname into a joined uts namespace that is the runtime's own
    or init's (the host's)."""
    ids = host.runtime_uts()
    mine = host.ns_identity(plan.join["uts"])  # None: _host_problems / the join itself report it
    if mine is not None and mine in ids:
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


def render(plan: Plan, fds: Fds, host: LinuxHost) -> Layout:
    """``Layout(argv, steps)`` for a ``plan`` that passed ``check``: a function of ``plan``, ``fds`` and
    the answers of ``host`` (the rootfs and bind sources: lstat, readlink; which /proc and /sys entries
    exist; the device nodes and the terminal helper).  Writes nothing and reads nothing else.

    Raises:
        BundleInvalid: a path that cannot be placed inside the sandbox as the walk resolves it (a
            symlink of a kernel fs, a file where a directory is needed, EROFS in a read-only bind, a
            masked or read-only path or cwd the tenant profile refuses: ``_protected``, ``_cwd``).
    """
    view = _PlannedView(plan.rootfs, host)
    a = _namespace_args(plan)
    a += ["--bind", plan.rootfs, "/"]
    for mt in plan.mounts:
        a += _mount_args(view, mt)
    if plan.devices:
        a += _device_args(plan, view)
    a += _protect_args(plan, view)
    if plan.root_readonly:
        a += ["--remount-ro", "/"]
    if plan.terminal:
        _check_helper_dir(view)
    a += _cwd(plan, view)
    a += _process_args(plan, fds, view)
    return Layout(a, view.steps)


def _namespace_args(plan: Plan) -> list[str]:
    a = [UNSHARE_FLAGS[t] for t in plan.unshare if t in UNSHARE_FLAGS and t != "user"]
    if "user" in plan.unshare:
        # bwrap maps process.user's ids onto the runtime's own in the namespace it makes (bwrap(1) --uid);
        # without one the ids are the host's, switched by the helper (credentials.py)
        a += ["--unshare-user", "--uid", str(plan.uid), "--gid", str(plan.gid)]
    if plan.hostname and "uts" in plan.unshare:
        a += ["--hostname", plan.hostname]
    if not plan.terminal:
        a.append("--new-session")  # no TIOCSTI into the caller's terminal (bwrap(1) --new-session)
    return a


def _mount_args(view: _PlannedView, mt: Mount) -> list[str]:
    """One mount's options, its destination resolved (and recorded to be made) in ``view``."""
    if mt.kind == "bind":
        is_dir = view.host.isdir(mt.source)
        dest = _dest(view, mt.destination, is_dir)
        view.add(Layer(dest, "bind", mt.source, writable=not mt.readonly and is_dir))
        return ["--ro-bind" if mt.readonly else "--bind", mt.source, dest]
    dest = _dest(view, mt.destination)
    a: list[str] = []
    if mt.kind == "tmpfs":
        mode = _opt(mt.options, "mode") or "1777"  # tmpfs(5): the root's default mode is 1777
        size = _opt(mt.options, "size")
        a += ["--perms", mode]
        if size:
            a += ["--size", _size_bytes(size)]
        a += ["--tmpfs", dest]
        if mt.readonly:
            a += ["--remount-ro", dest]
    else:
        a += _KIND_ARGS[mt.kind](dest)
    view.add(Layer(dest, mt.kind))
    if mt.kind in ("proc", "sysfs"):
        a += _floor(view, dest, mt.kind)
    return a


#: the options of a kernel or empty mount at a destination (tmpfs and bind: ``_mount_args``)
_KIND_ARGS = {
    "proc": lambda dest: ["--proc", dest],
    "dev": lambda dest: ["--dev", dest],
    "mqueue": lambda dest: ["--mqueue", dest],
    "sysfs": lambda dest: ["--ro-bind", "/sys", dest],
    "cgroup": lambda dest: ["--tmpfs", dest, "--remount-ro", dest],
}


def _device_args(plan: Plan, view: _PlannedView) -> list[str]:
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
    return view.host.device_args(plan.devices)


def _protect_args(plan: Plan, view: _PlannedView) -> list[str]:
    """The masked paths, then the read-only ones, in config order (``_protected`` decides each)."""
    a: list[str] = []
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
    return a


def _process_args(plan: Plan, fds: Fds, view: _PlannedView) -> list[str]:
    """Capabilities, environment, the fds bwrap is given, then ``--`` and the workload's argv (through
    the helper when it switches ids or trims capabilities)."""
    from .credentials import helper_capabilities, setpriv_argv, switches_without_userns, wrap_argv

    a = ["--cap-drop", "ALL"]
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
    cap_args = setpriv_argv(held, plan.inheritable, plan.ambient)
    switches = switches_without_userns(plan.unshare, plan.uid, plan.gid)
    if not (switches or cap_args):
        return [*a, "--", *plan.args]
    from .console import CTTY_HELPER

    _check_helper_dir(view)
    a += view.host.helper_binds()
    argv = list(plan.args)
    if switches:
        argv = wrap_argv(CTTY_HELPER, plan.uid, plan.gid, argv)
    if cap_args:
        argv = [CTTY_HELPER, *cap_args, "--", *argv]
    return [*a, "--", *argv]


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


def _mask(view: _PlannedView, dest: str, host: str) -> list[str]:
    """Hide ``dest``: an empty read-only tmpfs over a directory, /dev/null over anything else."""
    view.masked.add(dest)
    if view.isdir(host):
        view.add(Layer(dest, "tmpfs"))  # later paths under it find an empty fs, not the rootfs
        return ["--tmpfs", dest, "--remount-ro", dest]
    view.add(Layer(dest, "bind", "/dev/null"))
    return ["--ro-bind", "/dev/null", dest]


def _floor(view: _PlannedView, dest: str, kind: str) -> list[str]:
    """The tenant's kernel-file floor under a proc or sysfs mount at ``dest`` (hardening.tenant):
    applied whatever maskedPaths/readonlyPaths say.  An entry this kernel does not have is skipped:
    the tenant cannot create files in proc or sysfs."""
    base = "/proc" if kind == "proc" else "/sys"
    masked = tenant.PROC_MASKED if kind == "proc" else tenant.SYS_MASKED
    out: list[str] = []
    for rel in masked:
        if view.host.kernel_has(f"{base}/{rel}"):
            out += _mask(view, f"{dest.rstrip('/')}/{rel}", f"{base}/{rel}")
    for rel in tenant.PROC_READONLY if kind == "proc" else ():
        if view.host.kernel_has(f"{base}/{rel}"):
            out += ["--ro-bind", f"{base}/{rel}", f"{dest.rstrip('/')}/{rel}"]
    return out


def _protected(view: _PlannedView, path: str, pointer: str, plan: Plan) -> tuple[str, str | None] | None:
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
        return _protect_refusal(pointer, path, why, fix)

    _refuse_unprotectable(pointer, path, dest, layer)
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
    if view.lexists(host):
        return dest, host
    if _tenant_could_have_moved(plan, layer, dest):
        raise refuse(
            f"does not exist in {layer.dest}, which the tenant can write (a previous run may have moved it)",
            "restore it, or remove it from the list",
        )
    return None


def _refuse_unprotectable(pointer: str, path: str, dest: str, layer: Layer) -> None:
    """The tenant profile's refusals of a resolved masked / read-only path: a pid-dependent proc entry
    made read-only (the bind's source would be the host's /proc), "/" masked."""
    readonly = pointer.startswith("/linux/readonlyPaths")
    if readonly and layer.fs == "proc" and tenant.proc_pid_entry(dest[len(layer.dest.rstrip("/")) :]):
        raise _protect_refusal(
            pointer,
            path,
            "a pid-dependent proc entry cannot be made read-only (the bind's source would be the "
            "host's /proc)",
            "remove it; mask it instead, or list a path below /proc/sys",
        )
    if dest == "/" and not readonly:
        raise _protect_refusal(pointer, path, "the root cannot be masked", "remove it")


def _protect_refusal(pointer: str, path: str, why: str, fix: str) -> BundleInvalid:
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


def _tenant_could_have_moved(plan: Plan, layer: Layer, dest: str) -> bool:
    """Whether a protected path missing at ``dest`` lies in a tree the tenant can write (a persistent
    rootfs, a read-write bind) outside the /proc and /sys names runtime-spec's defaults list."""
    tenant_writable = layer.writable and (layer.fs == "bind" or not plan.root_readonly)
    kernel_named = dest.split("/")[1] in ("proc", "sys")  # runtime-spec defaults name kernel files there
    return tenant_writable and not kernel_named


def _refuse_exposed(plan: Plan, host: LinuxHost) -> None:
    """Refuse a writable rootfs/bind holding the bundle, config.json, a hook or the state root."""
    from ...paths import writable_exposures

    binds = [("/mounts", mt.source, mt.readonly) for mt in plan.mounts if mt.kind == "bind"]
    protected = [plan.bundle, os.path.join(plan.bundle, "config.json"), *plan.protected]
    exposures = writable_exposures(plan.rootfs, plan.root_readonly, binds)
    for ptr, path in [(ptr, p) for ptr, tree in exposures for p in protected if host.contains(tree, p)]:
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
