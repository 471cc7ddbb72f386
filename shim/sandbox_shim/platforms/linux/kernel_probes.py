"""Probes of kernel features, each tried in a forked child: namespaces (unshare(2)), no_new_privs and
seccomp (prctl(2), seccomp(2)), Landlock (landlock(7)).  Importing this module registers them; the
composition point imports it on every OS (``platforms.select.register_probes``), where each reports
unavailable off Linux.

Rules come from the man pages: unshare(2) (CLONE_NEW* flags and their errors), prctl(2)
(PR_SET/GET_NO_NEW_PRIVS, PR_SET_SECCOMP), seccomp(2) (SECCOMP_MODE_FILTER, struct sock_fprog),
landlock(7) / landlock_create_ruleset(2) (ABI version query, restrict_self), netdevice(7)
(SIOCGIFFLAGS / SIOCSIFFLAGS).  Host facts such as sysctls are read only to *explain* a failure.
"""

from __future__ import annotations

import ctypes
import os
import socket
import struct
import sys
from collections.abc import Callable
from functools import partial

from ...capability import Capability, register
from ...probes.child import _call, _libc, _prctl, in_child
from ...probes.proc import linux_only as _linux_only
from ...probes.proc import read as _read
from ...probes.proc import seccomp_note as _seccomp_note
from ...probes.proc import status_field as _status_field
from . import ns_identity, ns_path

UNSHARE = "unshare(2)"
#: CLONE_NEW* flags, from <linux/sched.h> (unshare(2)); the probe name suffix -> (flag, /proc/self/ns entry)
NAMESPACES: dict[str, tuple[int, str, str]] = {
    "user": (0x10000000, "CLONE_NEWUSER", "user"),
    "mount": (0x00020000, "CLONE_NEWNS", "mnt"),
    "pid": (0x20000000, "CLONE_NEWPID", "pid_for_children"),
    "network": (0x40000000, "CLONE_NEWNET", "net"),
    "ipc": (0x08000000, "CLONE_NEWIPC", "ipc"),
    "uts": (0x04000000, "CLONE_NEWUTS", "uts"),
    "cgroup": (0x02000000, "CLONE_NEWCGROUP", "cgroup"),
}
_CONFIG = {
    "user": "USER_NS",
    "pid": "PID_NS",
    "network": "NET_NS",
    "ipc": "IPC_NS",
    "uts": "UTS_NS",
    "cgroup": "CGROUPS",
}  # kernel options whose absence makes unshare(2) fail with EINVAL
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2  # prctl(2)
PR_SET_NO_NEW_PRIVS, PR_GET_NO_NEW_PRIVS = 38, 39  # prctl(2)
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1  # netdevice(7)
LANDLOCK_CREATE_RULESET, LANDLOCK_RESTRICT_SELF = 444, 446  # same number on every arch but alpha
LANDLOCK_ACCESS_FS_READ_FILE = 1 << 2  # landlock(7)

# ---- namespaces: unshare(2) ----------------------------------------------------------------------


def _explain_unshare(kind: str, err: str, in_userns: bool) -> str:
    """Turn an errno name from unshare(2) into an actionable sentence (errors per unshare(2))."""
    head = err.split(":")[0]
    if err.startswith("EPERM"):
        hints = []
        if kind == "user" or in_userns:
            if _read("/proc/sys/kernel/unprivileged_userns_clone") == "0":
                hints.append("kernel.unprivileged_userns_clone=0: set it to 1 or run as root")
            if _read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == "1":
                hints.append("kernel.apparmor_restrict_unprivileged_userns=1: set it to 0 or run as root")
            hints.append("run as root or enable user namespaces")
        else:
            hints.append("needs CAP_SYS_ADMIN: run as root, or enable user namespaces")
        return f"{head}: {'; '.join(hints)}{_seccomp_note()}"
    if err.startswith("ENOSPC"):
        limit = f"user.max_{ {'mount': 'mnt', 'network': 'net'}.get(kind, kind) }_namespaces"
        return f"{head}: the limit {limit} is 0 or reached: raise it with sysctl"
    if err.startswith("EINVAL") and kind in _CONFIG:
        return f"{head}: the kernel does not support it (built without CONFIG_{_CONFIG[kind]})"
    return f"{head}: {err.partition(':')[2] or err}{_seccomp_note()}"


def _ns_trial(kind: str, extra_flags: int) -> Callable[[], str]:
    flag, flag_name, entry = NAMESPACES[kind]

    def trial() -> str:
        before = ns_identity("self", entry)
        what = f"unshare({flag_name}{'|CLONE_NEWUSER' if extra_flags else ''})"
        _call(what, _libc().unshare, ctypes.c_int(flag | extra_flags))
        note = _verify_pid() if kind == "pid" else ""  # pid_for_children is empty until a first child
        if ns_identity("self", entry) == before:
            raise RuntimeError(f"{ns_path('self', entry)} did not change after unshare")
        return note or _VERIFY.get(kind, lambda: "")()

    return trial


def _verify_network() -> str:
    """Bring ``lo`` up in the new network namespace with SIOCSIFFLAGS and read it back (netdevice(7))."""
    names = [n for _, n in socket.if_nameindex()]
    if names != ["lo"]:
        raise RuntimeError(f"new network namespace is not empty: {names}")
    import fcntl  # POSIX only: imported where used so the module loads on Windows

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        ifreq = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(s, SIOCGIFFLAGS, ifreq)[:18])[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | IFF_UP))
        if not struct.unpack("16sH", fcntl.ioctl(s, SIOCGIFFLAGS, ifreq)[:18])[1] & IFF_UP:
            raise RuntimeError("lo did not come up after SIOCSIFFLAGS")
    return "lo up"


def _verify_pid() -> str:
    pid = os.fork()
    if pid == 0:
        os._exit(0 if os.getpid() == 1 else 3)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError("first child in the new pid namespace is not pid 1")
    return "child is pid 1"


def _verify_uts() -> str:
    _libc().sethostname(b"sandbox-shim-probe", 18)
    if socket.gethostname() != "sandbox-shim-probe":
        raise RuntimeError("sethostname in the new UTS namespace did not take")
    return "hostname set"


def _verify_cgroup() -> str:
    lines = (_read("/proc/self/cgroup") or "").splitlines()
    if not lines or any(not line.endswith(":/") for line in lines):
        raise RuntimeError("/proc/self/cgroup does not show the namespace root")
    return "cgroup root is /"


_VERIFY: dict[str, Callable[[], str]] = {
    "network": _verify_network,
    "uts": _verify_uts,
    "cgroup": _verify_cgroup,
}


def probe_namespace(kind: str) -> Capability:
    """Try ``unshare(CLONE_NEW<kind>)`` in a forked child and check the namespace really is new.

    The check: the ``/proc/self/ns`` inode changed, and for ``network`` that only ``lo`` exists and
    comes up via SIOCSIFFLAGS; ``pid`` that the next child is pid 1; ``uts`` that sethostname takes;
    ``cgroup`` that /proc/self/cgroup shows ``/``.  When not root and plain unshare fails with EPERM,
    it retries inside a new user namespace (what unprivileged bwrap does).

    Returns: ``Capability("namespace.<kind>", ...)``, mechanism ``"unshare(2)"`` or
    ``"unshare(2) in a user namespace"``.  Raises: KeyError for an unknown ``kind``.
    """
    flag, flag_name, _ = NAMESPACES[kind]
    name = f"namespace.{kind}"
    if sys.platform != "linux":
        return Capability(name, False, "", f"not Linux ({sys.platform})", UNSHARE)
    measured = f"fork; unshare({flag_name}); compare /proc/self/ns inode"
    ok, text = in_child(_ns_trial(kind, 0))
    if ok:
        return Capability(name, True, UNSHARE, "", f"{measured}{'; ' + text if text else ''}")
    if text.startswith("EPERM") and kind != "user" and os.geteuid() != 0:
        ok2, text2 = in_child(_ns_trial(kind, NAMESPACES["user"][0]))
        if ok2:
            return Capability(
                name, True, f"{UNSHARE} in a user namespace", "", f"fork; unshare({flag_name}|CLONE_NEWUSER)"
            )
        return Capability(name, False, UNSHARE, _explain_unshare(kind, text2, True), measured)
    detail = (
        _explain_unshare(kind, text, False)
        if text[:1].isupper() and ":" in text
        else f"unshare({flag_name}) did not give a working namespace: {text}"
    )
    return Capability(name, False, UNSHARE, detail, measured)


for _kind in NAMESPACES:
    register(f"namespace.{_kind}")(partial(probe_namespace, _kind))


# ---- prctl(2), seccomp(2), landlock(7) ----------------------------------------------------------


class _SockFilter(ctypes.Structure):  # struct sock_filter, <linux/filter.h>
    _fields_ = [
        ("code", ctypes.c_uint16),
        ("jt", ctypes.c_uint8),
        ("jf", ctypes.c_uint8),
        ("k", ctypes.c_uint32),
    ]


class _SockFprog(ctypes.Structure):  # struct sock_fprog, seccomp(2)
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def _nnp_trial() -> str:
    _prctl("prctl(PR_SET_NO_NEW_PRIVS)", PR_SET_NO_NEW_PRIVS, 1)
    if _prctl("prctl(PR_GET_NO_NEW_PRIVS)", PR_GET_NO_NEW_PRIVS) != 1:
        raise RuntimeError("PR_GET_NO_NEW_PRIVS reads 0 after PR_SET_NO_NEW_PRIVS")
    return ""


def _seccomp_trial() -> str:
    _nnp_trial()  # seccomp(2): without CAP_SYS_ADMIN a filter needs no_new_privs first
    insns = (_SockFilter * 1)(_SockFilter(0x06, 0, 0, 0x7FFF0000))  # BPF_RET|BPF_K, SECCOMP_RET_ALLOW
    _prctl(
        "prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER)",
        PR_SET_SECCOMP,
        SECCOMP_MODE_FILTER,
        ctypes.byref(_SockFprog(1, insns)),
    )
    if _status_field("Seccomp") != "2":
        raise RuntimeError("/proc/self/status does not show Seccomp: 2 after loading the filter")
    return ""


def _landlock_trial() -> str:
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    create = ctypes.c_long(LANDLOCK_CREATE_RULESET)
    abi = _call(
        "landlock_create_ruleset(VERSION)", libc.syscall, create, None, ctypes.c_size_t(0), ctypes.c_uint32(1)
    )
    attr = ctypes.c_uint64(LANDLOCK_ACCESS_FS_READ_FILE)  # struct landlock_ruleset_attr {handled_access_fs}
    fd = _call(
        "landlock_create_ruleset",
        libc.syscall,
        create,
        ctypes.byref(attr),
        ctypes.c_size_t(8),
        ctypes.c_uint32(0),
    )
    _nnp_trial()
    _call(
        "landlock_restrict_self",
        libc.syscall,
        ctypes.c_long(LANDLOCK_RESTRICT_SELF),
        ctypes.c_int(fd),
        ctypes.c_uint32(0),
    )
    try:
        os.close(os.open(__file__, os.O_RDONLY))
    except PermissionError:
        return str(abi)
    raise RuntimeError("a file stayed readable after landlock_restrict_self denied READ_FILE")


@register("no_new_privs")
def probe_no_new_privs() -> Capability:
    """Set no_new_privs in a forked child and read it back (prctl(2) PR_SET/PR_GET_NO_NEW_PRIVS, Linux 3.5).

    Returns: ``Capability("no_new_privs", ...)``, mechanism ``"prctl(2)"``.  Never raises.
    """
    measured = "fork; prctl(PR_SET_NO_NEW_PRIVS, 1); prctl(PR_GET_NO_NEW_PRIVS) == 1"
    if (off := _linux_only("no_new_privs", measured)) is not None:
        return off
    ok, text = in_child(_nnp_trial)
    return Capability("no_new_privs", ok, "prctl(2)", "" if ok else f"{text}{_seccomp_note()}", measured)


@register("seccomp")
def probe_seccomp() -> Capability:
    """Load an allow-all classic-BPF filter in a forked child (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER),
    seccomp(2)), check /proc/self/status shows ``Seccomp: 2``, then check libseccomp loads (pyseccomp),
    which the shim needs to compile OCI filters.

    Returns: ``Capability("seccomp", ...)``, mechanism ``"seccomp BPF, libseccomp X.Y.Z"``.  Never raises.
    """
    measured = "fork; prctl(PR_SET_NO_NEW_PRIVS); prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, allow-all)"
    if (off := _linux_only("seccomp", measured)) is not None:
        return off
    ok, text = in_child(_seccomp_trial)
    if not ok:
        why = (
            f"{text}: the kernel lacks CONFIG_SECCOMP_FILTER"
            if text.startswith("EINVAL from prctl(PR_SET_SECCOMP")
            else text
        )
        return Capability("seccomp", False, "seccomp BPF", f"{why}{_seccomp_note()}", measured)
    try:
        version = libseccomp_version()
    except (ImportError, OSError, RuntimeError) as e:
        return Capability(
            "seccomp",
            False,
            "seccomp BPF",
            f"libseccomp is not usable ({e}): install libseccomp2 and the pyseccomp package",
            measured,
        )
    measured += "; import pyseccomp"
    return Capability("seccomp", True, f"seccomp BPF, libseccomp {version}", "", measured)


def libseccomp_version() -> str:
    """The loaded libseccomp's version ``"major.minor.micro"`` (seccomp_version(3)).

    Raises: ImportError / OSError when pyseccomp or libseccomp.so cannot be loaded.
    """
    import pyseccomp

    class _Ver(ctypes.Structure):
        _fields_ = [("major", ctypes.c_uint), ("minor", ctypes.c_uint), ("micro", ctypes.c_uint)]

    fn = pyseccomp._libseccomp.seccomp_version
    fn.restype = ctypes.POINTER(_Ver)
    v = fn().contents
    return f"{v.major}.{v.minor}.{v.micro}"


@register("landlock")
def probe_landlock() -> Capability:
    """Ask the Landlock ABI version (landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)),
    then in a forked child restrict itself to deny READ_FILE and check an open fails (landlock(7)).

    Returns: ``Capability("landlock", ...)``, mechanism ``"landlock ABI <n>"``.  Never raises.
    """
    measured = (
        "fork; landlock_create_ruleset(VERSION); landlock_create_ruleset(READ_FILE); "
        "landlock_restrict_self; open() must fail EACCES"
    )
    if (off := _linux_only("landlock", measured)) is not None:
        return off
    ok, text = in_child(_landlock_trial)
    if ok:
        return Capability("landlock", True, f"landlock ABI {text}", "", measured)
    if text.startswith("ENOSYS"):
        text += ": the kernel has no Landlock (needs Linux >= 5.13 with CONFIG_SECURITY_LANDLOCK)"
    elif text.startswith(("EOPNOTSUPP", "ENOTSUP")):
        text += ": Landlock is built but not enabled: add landlock to the lsm= boot parameter"
    return Capability("landlock", False, "landlock", f"{text}{_seccomp_note()}", measured)


def _landlock_scope_trial() -> str:
    """In the child: listen on an abstract unix socket, restrict self with the ABI 6 scopes, then
    connect to it: the socket was made outside the domain, so the connect must fail EPERM."""
    import socket

    name = f"\0sandbox-shim-scope-probe-{os.getpid()}"
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(name)
    srv.listen(1)
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    create = ctypes.c_long(LANDLOCK_CREATE_RULESET)
    abi = _call(
        "landlock_create_ruleset(VERSION)", libc.syscall, create, None, ctypes.c_size_t(0), ctypes.c_uint32(1)
    )
    if abi < 6:
        raise RuntimeError(f"Landlock ABI {abi} has no IPC scoping (needs ABI 6, Linux >= 6.12)")
    attr = (ctypes.c_uint64 * 3)(0, 0, 1 | 2)  # {handled_access_fs, handled_access_net, scoped}
    fd = _call(
        "landlock_create_ruleset(scoped)", libc.syscall, create, attr, ctypes.c_size_t(24), ctypes.c_uint32(0)
    )
    _nnp_trial()
    _call(
        "landlock_restrict_self",
        libc.syscall,
        ctypes.c_long(LANDLOCK_RESTRICT_SELF),
        ctypes.c_int(fd),
        ctypes.c_uint32(0),
    )
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        c.connect(name)
    except PermissionError:
        return str(abi)
    raise RuntimeError("an abstract unix socket made outside the domain stayed reachable")


@register("landlock.scope")
def probe_landlock_scope() -> Capability:
    """Landlock IPC scoping (ABI 6: LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET, LANDLOCK_SCOPE_SIGNAL), tried:
    in a forked child, an abstract socket made before ``landlock_restrict_self`` must refuse a connect
    after it.  ``sandbox-shim confine`` scopes both where this is available; else host abstract
    sockets stay reachable from a confined command (unless it has its own network namespace).

    Returns: ``Capability("landlock.scope", ...)``.  Never raises.
    """
    measured = (
        "fork; bind abstract socket; landlock_create_ruleset(scoped=ABSTRACT_UNIX_SOCKET|SIGNAL); "
        "landlock_restrict_self; connect() must fail EPERM"
    )
    if (off := _linux_only("landlock.scope", measured)) is not None:
        return off
    ok, text = in_child(_landlock_scope_trial)
    if ok:
        return Capability(
            "landlock.scope", True, f"landlock ABI {text} scopes: abstract-unix-socket, signal", "", measured
        )
    return Capability(
        "landlock.scope",
        False,
        "landlock scopes",
        f"{text}; not enforced: confined commands can reach the host's abstract unix sockets",
        measured,
    )
