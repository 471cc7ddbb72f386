"""Joining existing namespaces (setns(2)) and writing namespaced sysctls (runtime-spec config-linux.md).

bwrap creates namespaces but cannot join one given by path (only ``--userns``/``--pidns`` FDs).  A
namespace listed with a ``path`` is therefore joined by the spawning step itself: the files are opened
in the runtime (``open_joins``), checked to be namespaces of the listed type (ioctl ``NS_GET_NSTYPE``,
ioctl_ns(2)), and entered with setns(2) in the forked child just before it execs bwrap (``enter``).
bwrap then inherits them.  A pid namespace is the exception: it is handed to bwrap as ``--pidns FD``
(mechanism.py), because bwrap mounts a procfs of its own only when it unshares or is given a pid
namespace — joined behind its back it would bind the host's /proc (bwrap.c SETUP_MOUNT_PROC).  A path
naming the host's namespace (pid 1's or this runtime's, same st_dev/st_ino) is refused
(``host_namespace``).

``linux.sysctl``: only sysctls that belong to a namespace the sandbox does not share with the host are
allowed (runtime-spec config-linux.md "Sysctl": "the runtime MUST ... apply the sysctls within the
container's namespaces"): ``net.*`` (network), ``kernel.msg*``/``kernel.sem``/``kernel.shm*``,
``fs.mqueue.*`` (ipc), ``kernel.hostname``/``kernel.domainname`` (uts).  They are written in a forked
process that has entered the sandbox's namespaces, before any user code runs (``apply_sysctl``).

``check_program``: the workload's executable looked up in the sandbox's mount namespace before it runs.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import stat

from ...errors import BundleInvalid, BundleProblem, CouldNotRun, LaunchFailed
from ...paths import resolve_in_root
from . import is_namespace_of, ns_path, ns_shared

TYPE_CHECKING = False  # no typing at run time: create loads this module
if TYPE_CHECKING:
    from typing import Any

    from .plan import Plan

#: OCI namespace type → (CLONE_NEW* flag, name under /proc/PID/ns)
NAMESPACES: dict[str, tuple[int, str]] = {
    "user": (0x10000000, "user"),
    "ipc": (0x08000000, "ipc"),
    "uts": (0x04000000, "uts"),
    "network": (0x40000000, "net"),
    "pid": (0x20000000, "pid"),
    "cgroup": (0x02000000, "cgroup"),
    "mount": (0x00020000, "mnt"),
}
#: user first (the others may be owned by it), mount last (it changes how paths resolve)
JOIN_ORDER = ("user", "ipc", "uts", "network", "pid", "cgroup", "mount")
NS_GET_NSTYPE = 0xB703  # ioctl_ns(2), Linux 4.11

_IPC_SYSCTLS = frozenset(
    {
        "kernel.msgmax",
        "kernel.msgmnb",
        "kernel.msgmni",
        "kernel.sem",
        "kernel.shmall",
        "kernel.shmmax",
        "kernel.shmmni",
        "kernel.shm_rmid_forced",
    }
)
_UTS_SYSCTLS = frozenset({"kernel.hostname", "kernel.domainname"})


def _libc() -> Any:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.setns.argtypes = [ctypes.c_int, ctypes.c_int]
    libc.setns.restype = ctypes.c_int
    return libc


def open_joins(join: dict[str, str]) -> list[tuple[str, int]]:
    """Open the namespace files of ``join`` (``{type: path}``) in join order.

    Returns:
        ``[(type, fd)]``; the fds are close-on-exec and the caller closes them.
    Raises:
        LaunchFailed: a path cannot be opened or is not a namespace of the listed type
        (the pointer is ``/linux/namespaces``).
    """
    out: list[tuple[str, int]] = []
    try:
        for t in JOIN_ORDER:
            if t not in join:
                continue
            path = join[t]
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError as e:
                raise LaunchFailed(
                    f"/linux/namespaces: cannot open the {t} namespace {path}: {e.strerror}",
                    "give the path of a live namespace (e.g. /proc/PID/ns/net)",
                ) from e
            out.append((t, fd))
            try:
                kind = fcntl.ioctl(fd, NS_GET_NSTYPE)
            except OSError as e:
                raise LaunchFailed(
                    f"/linux/namespaces: {path} is not a namespace file: {e.strerror}",
                    "runtime-spec config-linux.md: path must name a namespace file",
                ) from e
            if kind != NAMESPACES[t][0]:
                raise LaunchFailed(
                    f"/linux/namespaces: {path} is not a {t} namespace",
                    "runtime-spec config-linux.md: the namespace must be of the listed type",
                )
            host = host_namespace(t, os.fstat(fd))
            if host:
                raise BundleInvalid(
                    [
                        BundleProblem(
                            "/linux/namespaces",
                            f"the {t} namespace {path} is {host}'s: joining it would share it with the host",
                            "tenant profile: a sandbox never shares a namespace with the host",
                            f"give the path of another sandbox's {t} namespace, "
                            "or drop the path to get a new one",
                        )
                    ]
                )
    except BaseException:
        for _, fd in out:
            os.close(fd)
        raise
    return out


def host_namespace(ns_type: str, info: os.stat_result) -> str | None:
    """``"the host (pid 1)"`` or ``"this runtime"`` if ``info`` (an fstat of a namespace file) is the
    namespace of that kind pid 1 or this process is in (same st_dev and st_ino: ioctl_ns(2)); else None."""
    name = NAMESPACES[ns_type][1]
    for who, proc in (("the host (pid 1)", "1"), ("this runtime", "self")):
        try:
            if is_namespace_of(info, proc, name):
                return who
        except OSError:
            continue
    return None


def identities(fds: list[tuple[str, int]]) -> dict[str, str]:
    """``{type: "NAME:[INODE]"}`` for opened namespace files, as readlink(/proc/PID/ns/NAME) shows them."""
    return {t: f"{NAMESPACES[t][1]}:[{os.fstat(fd).st_ino}]" for t, fd in fds}


def enter(fds: list[tuple[str, int]]) -> None:
    """setns(2) into each ``(type, fd)``, in the order given.  Meant for a freshly forked child.

    Raises:
        OSError: setns failed (errno kept: EPERM, EINVAL...).
    """
    libc = _libc()
    for t, fd in fds:
        if libc.setns(fd, NAMESPACES[t][0]) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({t}): {os.strerror(err)}")


def sysctl_namespace(key: str) -> str | None:
    """The namespace type a sysctl ``key`` belongs to, or None if it is not namespaced."""
    k = key.replace("/", ".")
    if k.startswith("net."):
        return "network"
    if k in _IPC_SYSCTLS or k.startswith("fs.mqueue."):
        return "ipc"
    if k in _UTS_SYSCTLS:
        return "uts"
    return None


def sysctl_problems(config: dict[str, Any]) -> list[BundleProblem]:
    """Check ``linux.sysctl``: each key namespaced, its namespace not the host's, no path tricks.

    Rule: runtime-spec config-linux.md "Sysctl" (applied within the container's namespaces); a sysctl
    of a namespace shared with the host would change the host, so it is refused.
    """
    linux = config.get("linux") or {}
    sysctl = linux.get("sysctl") or {}
    listed = {ns.get("type") for ns in linux.get("namespaces") or [] if isinstance(ns, dict)}
    out: list[BundleProblem] = []
    for key, value in sysctl.items():
        ptr = "/linux/sysctl/" + key.replace("~", "~0").replace("/", "~1")
        parts = key.replace("/", ".").split(".")
        if not key or any(p in ("", "..") for p in parts):
            out.append(
                BundleProblem(
                    ptr,
                    f"sysctl name {key!r} is malformed",
                    "sysctl.d(5) names",
                    "use a dotted name such as net.ipv4.ip_forward",
                )
            )
            continue
        ns = sysctl_namespace(key)
        if ns is None:
            out.append(
                BundleProblem(
                    ptr,
                    f"sysctl {key} is not namespaced: writing it would change the host",
                    "runtime-spec config-linux.md Sysctl; tenant profile",
                    "only net.*, kernel.msg*/sem/shm*, fs.mqueue.*, kernel.hostname",
                )
            )
        elif ns not in listed:
            out.append(
                BundleProblem(
                    ptr,
                    f"sysctl {key} needs its own {ns} namespace, but the sandbox shares the host's",
                    "runtime-spec config-linux.md Sysctl",
                    f'add {{"type": "{ns}"}} to linux.namespaces or remove the sysctl',
                )
            )
        if not isinstance(value, str):
            out.append(BundleProblem(ptr, "sysctl values are strings", "runtime-spec config-linux.md Sysctl"))
    return out


def check_sysctl(config: dict[str, Any]) -> None:
    """Raise ``BundleInvalid`` with every problem of ``sysctl_problems``; nothing if there is none."""
    problems = sysctl_problems(config)
    if problems:
        raise BundleInvalid(problems)


def apply_sysctl(pid: int, sysctl: dict[str, str]) -> None:
    """Write ``sysctl`` under /proc/sys from inside the namespaces of process ``pid``.

    A forked child setns(2)es into ``pid``'s network, ipc and uts namespaces (those that differ from
    ours) and writes each file; /proc/sys/net, kernel.shm* etc. show the opener's namespaces.

    Raises:
        LaunchFailed: a namespace could not be entered or a value was refused by the kernel.
    """
    if not sysctl:
        return
    r, w = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the forked child
        os.close(r)
        code = 0
        try:
            fds = []
            # as root, our capabilities cover every user namespace below ours (user_namespaces(7)); joining
            # the sandbox's own (bwrap nests one for process.user) would lose them for the ipc/net ones
            for t in ("ipc", "uts", "network") if os.geteuid() == 0 else ("user", "ipc", "uts", "network"):
                name = NAMESPACES[t][1]
                if not ns_shared(pid, name):
                    fds.append((t, os.open(ns_path(pid, name), os.O_RDONLY | os.O_CLOEXEC)))
            enter(fds)
            for key, value in sysctl.items():
                path = "/proc/sys/" + (key if "/" in key else key.replace(".", "/"))
                with open(path, "w") as fh:
                    fh.write(value)
        except OSError as e:
            os.write(w, f"{getattr(e, 'filename', '') or ''}: {e.strerror or e}".encode())
            code = 1
        except BaseException as e:
            os.write(w, str(e).encode())
            code = 1
        os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as fh:
        msg = fh.read().decode(errors="replace")
    _, status = os.waitpid(child, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise LaunchFailed(
            f"/linux/sysctl: cannot apply inside the sandbox: {msg.strip(': ')}",
            "check the names and values (sysctl(8)); the kernel refused it",
        )


def same_namespace(pid: int, ns_type: str) -> bool:
    """True if process ``pid`` is in our namespace of ``ns_type`` (``ns_shared``); True also where
    the kernel has no such namespace."""
    name = NAMESPACES[ns_type][1]
    try:
        return ns_shared(pid, name)
    except OSError as e:
        if e.errno == errno.ENOENT:
            return True
        raise


def check_program(child: int, plan: Plan) -> None:
    """Refuse a workload whose ``process.args[0]`` cannot be executed, before it is released.

    The name is looked up as execvp(3) will do it inside the sandbox: a name with a ``/`` is taken
    against ``process.cwd``, any other is searched in the sandbox's ``PATH`` (from ``process.env``);
    each candidate is resolved in the sandbox's own mount namespace (``/proc/CHILD/root``, so binds
    and tmpfs mounts count) with ``paths.resolve_in_root``.  A candidate that exists but is a
    directory, lacks the execute bit for the sandbox's user, or sits on a ``noexec`` mount is
    "permission denied" (EACCES, execve(2)); none at all is "executable file not found".

    Raises:
        CouldNotRun: ``not_found`` (clients map it to 127) or ``permission_denied`` (126);
        ``exec_failed`` (126) for a ``process.cwd`` bwrap could not enter (``workdir.check``).
    """
    from .workdir import check as check_cwd

    check_cwd(child, plan)  # bwrap enters the cwd first: a cwd it cannot enter never runs the program
    name = plan.args[0] if plan.args else ""
    root = f"/proc/{child}/root"
    if "/" in name:
        candidates = [name if name.startswith("/") else os.path.join(plan.cwd, name)]
    else:
        dirs = plan.env.get("PATH", "").split(":")
        candidates = [
            os.path.join(dd if dd.startswith("/") else os.path.join(plan.cwd, dd), name) for dd in dirs
        ]
    denied = False
    userns = "user" in plan.unshare
    uid, gids = (0, {0}) if userns else (plan.uid, {plan.gid, *plan.additional_gids})
    for cand in candidates if name else []:
        try:
            host = resolve_in_root(root, cand)
            st = os.stat(host)
        except PermissionError:
            denied = True
            continue
        except OSError:
            continue
        if (
            not _executable(st, uid, gids, "CAP_DAC_OVERRIDE" in plan.capabilities)
            or os.statvfs(host).f_flag & os.ST_NOEXEC
        ):
            denied = True
            continue
        _check_interpreter(root, host, cand, plan, uid, gids)
        return
    if denied:
        raise CouldNotRun("permission_denied", f'exec: "{name}"')
    raise CouldNotRun(
        "not_found",
        f'exec: "{name}"',
        "no such file or directory in $PATH" if "/" not in name else "no such file or directory",
    )


def _check_interpreter(
    root: str, host: str, shown: str, plan: Plan, uid: int, gids: set[int], depth: int = 0
) -> None:
    """Follow what execve(2) loads before the program: a ``#!`` script's interpreter ("Interpreter
    scripts": the first word after ``#!`` in the first 256 bytes, BINPRM_BUF_SIZE), recursively up to
    the kernel's 4 levels, and an ELF file's ``PT_INTERP`` loader (elf(5)).  A missing one fails
    execve with ENOENT, one that is not executable with EACCES: both are refused here, by name.

    Raises:
        CouldNotRun(``not_found`` | ``permission_denied``) naming the program and the interpreter.
    """
    try:
        fd = os.open(host, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError:
        return  # unreadable by us is not a judgement on the tenant's exec (execute-only files exist)
    try:
        head = os.read(fd, 256)
    except OSError:
        head = b""
    finally:
        os.close(fd)
    if head.startswith(b"#!"):
        # as fs/binfmt_script.c reads it: the line up to "\n", spaces and tabs (only those: a "\r"
        # stays part of the name) trimmed, the name ending at a space, tab or NUL
        line = head[2:].split(b"\n", 1)[0].strip(b" \t")
        end = min(
            (i for i in (line.find(b" "), line.find(b"\t"), line.find(b"\0")) if i >= 0), default=len(line)
        )
        if not line[:end]:
            raise CouldNotRun("exec_failed", f'exec: "{shown}"', "empty #! line (ENOEXEC)")
        interp = os.fsdecode(line[:end])
    elif head.startswith(b"\x7fELF"):
        from ...hardening.readset import elf_dynamic

        found = elf_dynamic(host)
        interp = found[0] if found and found[0] else ""
        if not interp:
            return
    else:
        return
    if depth >= 4:
        raise CouldNotRun("exec_failed", f'exec: "{shown}"', "interpreter chain deeper than 4 (ELOOP)")
    path = interp if interp.startswith("/") else os.path.join(plan.cwd, interp)
    try:
        ihost = resolve_in_root(root, path)
        ist = os.stat(ihost)
    except PermissionError:
        raise CouldNotRun("permission_denied", f'exec: "{shown}"', f"interpreter {interp}") from None
    except OSError:
        raise CouldNotRun(
            "not_found", f'exec: "{shown}"', f"interpreter {interp}: no such file or directory"
        ) from None
    if (
        not _executable(ist, uid, gids, "CAP_DAC_OVERRIDE" in plan.capabilities)
        or os.statvfs(ihost).f_flag & os.ST_NOEXEC
    ):
        raise CouldNotRun("permission_denied", f'exec: "{shown}"', f"interpreter {interp}")
    _check_interpreter(root, ihost, shown, plan, uid, gids, depth + 1)


def _executable(st: os.stat_result, uid: int, gids: set[int], dac_override: bool) -> bool:
    """execve(2)'s rule: a regular file with x for the caller's class (any x with CAP_DAC_OVERRIDE)."""
    if not stat.S_ISREG(st.st_mode):
        return False
    if dac_override:
        return bool(st.st_mode & 0o111)
    if st.st_uid == uid:
        return bool(st.st_mode & 0o100)
    if st.st_gid in gids:
        return bool(st.st_mode & 0o010)
    return bool(st.st_mode & 0o001)
