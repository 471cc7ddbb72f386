"""One probe per capability, each *trying* the thing on this host, never inferring it from versions.

Importing this module registers every probe with ``capability.register``.  A Linux kernel feature is
tried in a forked child (fork + a syscall or two, ~1 ms), so the caller's own process is never
changed; bwrap is the one probe that runs a program.  Every report says what was tried
(``measured_by``) and, when unavailable, why in words a person can act on (``detail``); host facts
such as sysctls are read only to *explain* a failure, never to decide one.

Rules come from the man pages: unshare(2) (CLONE_NEW* flags and their errors), prctl(2)
(PR_SET/GET_NO_NEW_PRIVS, PR_SET_SECCOMP), seccomp(2) (SECCOMP_MODE_FILTER, struct sock_fprog),
landlock(7) / landlock_create_ruleset(2) (ABI version query, restrict_self), netdevice(7)
(SIOCGIFFLAGS / SIOCSIFFLAGS), and the kernel's cgroup v1/v2 docs for the limit files.

``cached_report`` (end of this module) keeps reports across processes in a caller's directory, keyed
on everything that can change an answer (``cache_key``); any change of the key means probing again.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from .capability import Capability, register

if TYPE_CHECKING:
    from .platforms.linux.cgroups.detect import Layout

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
_CONFIG = {"user": "USER_NS", "pid": "PID_NS", "network": "NET_NS", "ipc": "IPC_NS", "uts": "UTS_NS",
           "cgroup": "CGROUPS"}  # kernel options whose absence makes unshare(2) fail with EINVAL
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2  # prctl(2)
PR_SET_NO_NEW_PRIVS, PR_GET_NO_NEW_PRIVS = 38, 39  # prctl(2)
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1  # netdevice(7)
LANDLOCK_CREATE_RULESET, LANDLOCK_RESTRICT_SELF = 444, 446  # same number on every arch but alpha
LANDLOCK_ACCESS_FS_READ_FILE = 1 << 2  # landlock(7)
CHILD_TIMEOUT = 5.0  # seconds a probe child may take before it is killed and reported


# ---- running a trial in a forked child ---------------------------------------------------------

@functools.lru_cache(maxsize=1)
def _libc() -> ctypes.CDLL:
    """The C library, loaded once in the parent (never dlopen in a forked child: the loader lock)."""
    return ctypes.CDLL(None, use_errno=True)


def _call(what: str, fn: Callable[..., int], *args: object) -> int:
    """Call a libc function; raise OSError(errno, strerror, what) when it returns -1 (the C convention)."""
    ret = fn(*args)
    if ret == -1:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), what)
    return int(ret)


def _prctl(what: str, option: int, arg2: object = 0, arg3: object = 0) -> int:
    """prctl(2) with every variadic argument passed as a full machine word (or a pointer)."""
    def word(a: object) -> object:
        return ctypes.c_ulong(a) if isinstance(a, int) else a

    zero = ctypes.c_ulong(0)
    return _call(what, _libc().prctl, ctypes.c_int(option), word(arg2), word(arg3), zero, zero)


def in_child(trial: Callable[[], str]) -> tuple[bool, str]:
    """Run ``trial`` in a forked child and return ``(ok, text)``.

    ``trial`` returns a success note (may be "") or raises; an ``OSError`` becomes
    ``"<ERRNAME> from <what>"`` text.  A child killed by a signal (e.g. SIGSYS from a seccomp
    filter) or running past ``CHILD_TIMEOUT`` seconds is a failure.  Never raises.
    """
    _libc()
    try:
        r, w = os.pipe()
    except OSError as e:
        return False, f"cannot make a pipe for the probe child: {e}"
    try:
        pid = os.fork()
    except OSError as e:
        os.close(r)
        os.close(w)
        return False, f"cannot fork a probe child: {e}: raise the pids limit of this process's cgroup"
    if pid == 0:  # child: never return into the caller's stack
        code = 1
        try:
            os.close(r)
            try:
                msg, code = "ok:" + trial(), 0
            except OSError as e:
                where = f" from {e.filename}" if e.filename else ""
                msg = f"{errno.errorcode.get(e.errno or 0, e.errno)}{where}: {e.strerror}"
            except BaseException as e:  # noqa: B036 - report anything, the child must exit
                msg = f"error:{e}"
            os.write(w, msg.encode("utf-8", "replace")[:4096])
        finally:
            os._exit(code)
    os.close(w)
    chunks: list[bytes] = []
    try:
        while select.select([r], [], [], CHILD_TIMEOUT)[0]:
            data = os.read(r, 4096)
            if not data:
                break
            chunks.append(data)
        else:
            os.kill(pid, 9)
    finally:
        os.close(r)
    _, status = os.waitpid(pid, 0)
    text = b"".join(chunks).decode("utf-8", "replace")
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        return False, f"probe child killed by signal {sig} ({_signame(sig)})"
    if text.startswith("ok:") and os.WEXITSTATUS(status) == 0:
        return True, text[3:]
    return False, text or f"probe child exited {os.WEXITSTATUS(status)} without a report"


def _signame(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return "unknown"


def _read(path: str) -> str | None:
    try:
        with open(path) as fh:
            return fh.read().strip()
    except OSError:
        return None


def _status_field(name: str) -> str | None:
    """A field of /proc/self/status (proc(5)), e.g. ``Seccomp`` (0 none, 1 strict, 2 filter)."""
    for line in (_read("/proc/self/status") or "").splitlines():
        key, _, value = line.partition(":")
        if key == name:
            return value.strip()
    return None


def _seccomp_note() -> str:
    if _status_field("Seccomp") == "2":
        return "; this process already runs under a seccomp filter (Seccomp: 2 in /proc/self/status) " \
               "that may deny the call: run the shim outside that filter"
    return ""


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
        limit = f"user.max_{ {'mount': 'mnt', 'network': 'net'}.get(kind, kind)}_namespaces"
        return f"{head}: the limit {limit} is 0 or reached: raise it with sysctl"
    if err.startswith("EINVAL") and kind in _CONFIG:
        return f"{head}: the kernel does not support it (built without CONFIG_{_CONFIG[kind]})"
    return f"{head}: {err.partition(':')[2] or err}{_seccomp_note()}"


def _ns_trial(kind: str, extra_flags: int) -> Callable[[], str]:
    flag, flag_name, entry = NAMESPACES[kind]

    def trial() -> str:
        before = os.stat(f"/proc/self/ns/{entry}").st_ino
        what = f"unshare({flag_name}{'|CLONE_NEWUSER' if extra_flags else ''})"
        _call(what, _libc().unshare, ctypes.c_int(flag | extra_flags))
        note = _verify_pid() if kind == "pid" else ""  # pid_for_children is empty until a first child
        if os.stat(f"/proc/self/ns/{entry}").st_ino == before:
            raise RuntimeError(f"/proc/self/ns/{entry} did not change after unshare")
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
    "network": _verify_network, "uts": _verify_uts, "cgroup": _verify_cgroup,
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
            return Capability(name, True, f"{UNSHARE} in a user namespace", "",
                              f"fork; unshare({flag_name}|CLONE_NEWUSER)")
        return Capability(name, False, UNSHARE, _explain_unshare(kind, text2, True), measured)
    detail = _explain_unshare(kind, text, False) if text[:1].isupper() and ":" in text else \
        f"unshare({flag_name}) did not give a working namespace: {text}"
    return Capability(name, False, UNSHARE, detail, measured)


for _kind in NAMESPACES:
    register(f"namespace.{_kind}")(lambda _k=_kind: probe_namespace(_k))


# ---- prctl(2), seccomp(2), landlock(7) ----------------------------------------------------------

class _SockFilter(ctypes.Structure):  # struct sock_filter, <linux/filter.h>
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8),
                ("k", ctypes.c_uint32)]


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
    _prctl("prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER)", PR_SET_SECCOMP, SECCOMP_MODE_FILTER,
           ctypes.byref(_SockFprog(1, insns)))
    if _status_field("Seccomp") != "2":
        raise RuntimeError("/proc/self/status does not show Seccomp: 2 after loading the filter")
    return ""


def _landlock_trial() -> str:
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    create = ctypes.c_long(LANDLOCK_CREATE_RULESET)
    abi = _call("landlock_create_ruleset(VERSION)", libc.syscall, create, None, ctypes.c_size_t(0),
                ctypes.c_uint32(1))
    attr = ctypes.c_uint64(LANDLOCK_ACCESS_FS_READ_FILE)  # struct landlock_ruleset_attr {handled_access_fs}
    fd = _call("landlock_create_ruleset", libc.syscall, create, ctypes.byref(attr), ctypes.c_size_t(8),
               ctypes.c_uint32(0))
    _nnp_trial()
    _call("landlock_restrict_self", libc.syscall, ctypes.c_long(LANDLOCK_RESTRICT_SELF), ctypes.c_int(fd),
          ctypes.c_uint32(0))
    try:
        os.close(os.open(__file__, os.O_RDONLY))
    except PermissionError:
        return str(abi)
    raise RuntimeError("a file stayed readable after landlock_restrict_self denied READ_FILE")


def _linux_only(name: str, measured: str) -> Capability | None:
    if sys.platform != "linux":
        return Capability(name, False, "", f"not Linux ({sys.platform})", measured)
    return None


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
        why = f"{text}: the kernel lacks CONFIG_SECCOMP_FILTER" if text.startswith(
            "EINVAL from prctl(PR_SET_SECCOMP") else text
        return Capability("seccomp", False, "seccomp BPF", f"{why}{_seccomp_note()}", measured)
    try:
        version = libseccomp_version()
    except (ImportError, OSError, RuntimeError) as e:
        return Capability("seccomp", False, "seccomp BPF", f"libseccomp is not usable ({e}): "
                          "install libseccomp2 and the pyseccomp package", measured)
    measured += "; import pyseccomp"
    return Capability("seccomp", True, f"seccomp BPF, libseccomp {version}", "", measured)


def libseccomp_version() -> str:
    """The loaded libseccomp's version ``"major.minor.micro"`` (seccomp_version(3)).

    Raises: ImportError / OSError when pyseccomp or libseccomp.so cannot be loaded.
    """
    import pyseccomp

    class _Ver(ctypes.Structure):
        _fields_ = [("major", ctypes.c_uint), ("minor", ctypes.c_uint), ("micro", ctypes.c_uint)]

    fn = pyseccomp._libseccomp.seccomp_version  # type: ignore[attr-defined]
    fn.restype = ctypes.POINTER(_Ver)
    v = fn().contents
    return f"{v.major}.{v.minor}.{v.micro}"


@register("landlock")
def probe_landlock() -> Capability:
    """Ask the Landlock ABI version (landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)),
    then in a forked child restrict itself to deny READ_FILE and check an open fails (landlock(7)).

    Returns: ``Capability("landlock", ...)``, mechanism ``"landlock ABI <n>"``.  Never raises.
    """
    measured = ("fork; landlock_create_ruleset(VERSION); landlock_create_ruleset(READ_FILE); "
                "landlock_restrict_self; open() must fail EACCES")
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


# ---- bwrap ------------------------------------------------------------------------------------------

def bwrap_identity() -> tuple[str, str, int] | None:
    """``(path, version, mtime_ns)`` of the bwrap on PATH, or None when absent or it will not run.

    ``version`` is the text after "bubblewrap " in ``bwrap --version`` (e.g. ``"0.8.0"``).
    """
    path = shutil.which("bwrap")
    if path is None:
        return None
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10)
        mtime = os.stat(path).st_mtime_ns
    except (OSError, subprocess.SubprocessError):
        return None
    return path, out.stdout.strip().removeprefix("bubblewrap ").strip() or "unknown", mtime


@register("bwrap")
def probe_bwrap() -> Capability:
    """Find bwrap, read its version, and run ``bwrap --ro-bind / / --unshare-pid ... -- true``.

    Returns: ``Capability("bwrap", ...)``, mechanism ``"bwrap <version>"``, ``detail`` carrying bwrap's
    own stderr when the run fails.  Never raises.
    """
    argv = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid", "--die-with-parent",
            "--", shutil.which("true") or "/bin/true"]
    measured = "bwrap --version; bwrap " + " ".join(argv)
    if (off := _linux_only("bwrap", measured)) is not None:
        return off
    ident = bwrap_identity()
    if ident is None:
        return Capability("bwrap", False, "bwrap", "bwrap is not on PATH (or will not run): "
                          "install bubblewrap (apt-get install bubblewrap)", measured)
    path, version, _ = ident
    try:
        run = subprocess.run([path, *argv], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError) as e:
        return Capability("bwrap", False, f"bwrap {version}", f"cannot run {path}: {e}", measured)
    if run.returncode != 0:
        err = run.stderr.strip().splitlines()[-1:] or [f"exit status {run.returncode}"]
        return Capability("bwrap", False, f"bwrap {version}", f"{path} failed: {err[0]}: run as root, enable "
                          f"user namespaces, or install bwrap setuid{_seccomp_note()}", measured)
    return Capability("bwrap", True, f"bwrap {version}", "", measured)


# ---- cgroups ----------------------------------------------------------------------------------------

#: controller -> (Limits field values, {cgroup version: (file, value written and expected back)})
_CGROUP_TRIALS: dict[str, tuple[dict[str, object], dict[int, tuple[str, str]]]] = {
    "memory": ({"memory_limit": 64 << 20},
               {1: ("memory.limit_in_bytes", "67108864"), 2: ("memory.max", "67108864")}),
    "pids": ({"pids_limit": 64}, {1: ("pids.max", "64"), 2: ("pids.max", "64")}),
    "cpu": ({"cpu_quota": 50000, "cpu_period": 100000},
            {1: ("cpu.cfs_quota_us", "50000"), 2: ("cpu.max", "50000 100000")}),
    "cpuset": ({}, {1: ("cpuset.cpus", ""), 2: ("cpuset.cpus", "")}),
    "freezer": ({}, {1: ("freezer.state", "THAWED"), 2: ("cgroup.freeze", "0")}),
}


def probe_cgroup(controller: str, layout: Layout | None = None) -> Capability:
    """Create a throwaway cgroup ``/sandbox-shim/.probe-<pid>-<controller>``, write one limit file of
    ``controller`` through the cgroup manager, read it back, and remove the cgroup.

    The limit file must already exist in the new directory (the kernel makes it), so a directory that
    is not a cgroup hierarchy is reported, not written into.  ``freezer`` is tried as freeze then thaw.

    Args:
        controller: ``memory`` | ``pids`` | ``cpu`` | ``cpuset`` | ``freezer``.
        layout: a ``cgroups.Layout`` to probe instead of this host's (tests point it elsewhere).
    Returns: ``Capability("cgroup.<controller>", ...)``, mechanism ``"cgroup v1"`` / ``"cgroup v2"``.
    Raises: KeyError for an unknown controller.
    """
    from .errors import LaunchFailed
    from .platforms.linux.cgroups import Limits, detect, manager

    limits_kw, files = _CGROUP_TRIALS[controller]
    name, path = f"cgroup.{controller}", f"/sandbox-shim/.probe-{os.getpid()}-{controller}"
    if (off := _linux_only(name, f"mkdir {path}")) is not None:
        return off
    lay = layout if layout is not None else detect()
    version = lay.version
    mech = f"cgroup v{version}" if version else "cgroup"
    if version == 0:
        return Capability(name, False, mech, "no usable cgroup hierarchy (need memory and pids): mount "
                          "cgroup2 with them enabled, or the v1 memory and pids hierarchies",
                          "read /proc/self/mountinfo")
    fname, want = files[version]
    root = lay.v2_mount if version == 2 else lay.v1_mounts.get(controller)
    if root is None:
        return Capability(name, False, mech, f"the v1 {controller} controller is not mounted: mount its "
                          "hierarchy", "read /proc/self/mountinfo")
    if version == 2 and controller not in ("freezer", *lay.v2_controllers):
        return Capability(name, False, mech, f"{controller} is not in {root}/cgroup.controllers: enable it",
                          f"read {root}/cgroup.controllers")
    cdir = os.path.join(root, path.lstrip("/"))
    measured = f"mkdir {cdir}; write {fname}; read back; rmdir"
    mgr = manager(path, version, lay)
    created: list[str] = []
    try:
        created = mgr.create([] if controller == "freezer" else [controller])
        if not os.path.exists(os.path.join(cdir, fname)):
            return Capability(name, False, mech, f"{root} is not a cgroup v{version} hierarchy: the kernel "
                              f"made no {fname} in a new directory there", measured)
        if controller == "freezer":
            mgr.freeze(True)
            mgr.freeze(False)
        elif controller == "cpuset":
            parent = os.path.dirname(cdir)
            cpus = _read(f"{parent}/cpuset.cpus.effective") or _read(f"{parent}/cpuset.cpus")
            want = (cpus or "0").split(",")[0].split("-")[0]  # the parent's first cpu (cpuset(7) list format)
            mgr.apply(Limits(cpu_cpus=want))
        else:
            mgr.apply(Limits(**limits_kw))  # type: ignore[arg-type]
        got = _read(os.path.join(cdir, fname))
        if got != want:
            return Capability(name, False, mech, f"{fname} reads {got!r} after writing {want!r}", measured)
        return Capability(name, True, mech, "", measured)
    except LaunchFailed as e:
        return Capability(name, False, mech, f"{e.line()}: run as root with a writable cgroup hierarchy"
                          f"{_seccomp_note()}", measured)
    except OSError as e:
        return Capability(name, False, mech, f"{e}: run as root with a writable cgroup hierarchy", measured)
    finally:
        try:
            mgr.remove(created)
        except (LaunchFailed, OSError):
            pass


for _ctl in _CGROUP_TRIALS:
    register(f"cgroup.{_ctl}")(lambda _c=_ctl: probe_cgroup(_c))


# ---- other platforms ---------------------------------------------------------------------------

@register("sandbox-exec")
def probe_sandbox_exec() -> Capability:
    """macOS only: run ``/usr/bin/sandbox-exec -p '(version 1)(allow default)' /usr/bin/true``.

    Returns: ``Capability("sandbox-exec", ...)``; elsewhere unavailable with detail ``"not macOS"``.
    """
    argv = ["/usr/bin/sandbox-exec", "-p", "(version 1)(allow default)", "/usr/bin/true"]
    measured = " ".join(argv[:2]) + " '(version 1)(allow default)' /usr/bin/true"
    if sys.platform != "darwin":
        return Capability("sandbox-exec", False, "sandbox-exec", "not macOS", measured)
    try:
        run = subprocess.run(argv, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError) as e:
        return Capability("sandbox-exec", False, "sandbox-exec", f"cannot run sandbox-exec: {e}", measured)
    ok = run.returncode == 0
    return Capability("sandbox-exec", ok, "sandbox-exec", "" if ok else
                      f"sandbox-exec failed ({run.returncode}): {run.stderr.strip()[:200]}", measured)


@register("job-object")
def probe_job_object() -> Capability:
    """Windows only: create a Job Object with KILL_ON_JOB_CLOSE and read it back (delegates to
    ``platforms.windows.capabilities``).  Elsewhere unavailable with detail ``"not Windows"``.
    """
    if sys.platform != "win32":
        return Capability("job-object", False, "job object", "not Windows", "CreateJobObjectW")
    from .platforms.windows.capabilities import windows_capabilities

    for cap in windows_capabilities():
        if cap.name == "job-object":
            return cap
    return Capability("job-object", False, "job object", "the Windows probes gave no job-object report",
                      "CreateJobObjectW")


# ---- host facts and the cross-process cache ----------------------------------------------------

#: bump when a probe's meaning changes, so old caches are not trusted
PROBES_VERSION = "1"
CACHE_FILE = "capabilities.json"


def host_facts() -> dict[str, str]:
    """``{"kernel": uname release, "arch": uname machine, "platform": sys.platform}``."""
    u = os.uname() if hasattr(os, "uname") else None
    import platform

    return {"kernel": u.release if u else platform.release(), "arch": u.machine if u else platform.machine(),
            "platform": sys.platform}


def cache_key() -> dict[str, str]:
    """Everything whose change may change a probe's answer, as text (cheap reads and ``bwrap --version``).

    Keys: kernel release and build, boot_id (proc(5): new each boot), bwrap path/version/mtime, the
    cgroup layout fingerprint (read fresh from /proc/self/mountinfo), euid, this process's Seccomp and
    NoNewPrivs state, the user-namespace sysctls, and ``PROBES_VERSION``.
    """
    key = dict(host_facts())
    key["kernel_build"] = os.uname().version if hasattr(os, "uname") else ""
    key["boot_id"] = _read("/proc/sys/kernel/random/boot_id") or ""
    ident = bwrap_identity() if sys.platform == "linux" else None
    key["bwrap"] = "|".join(map(str, ident)) if ident else "absent"
    if sys.platform == "linux":
        from .platforms.linux.cgroups.detect import parse_mountinfo

        key["cgroups"] = parse_mountinfo(_read("/proc/self/mountinfo") or "").fingerprint()
    key["euid"] = str(os.geteuid()) if hasattr(os, "geteuid") else ""
    key["confinement"] = f"seccomp={_status_field('Seccomp')};nnp={_status_field('NoNewPrivs')}"
    key["sysctls"] = ";".join(f"{p}={_read('/proc/sys/' + p)}" for p in (
        "user/max_user_namespaces", "kernel/unprivileged_userns_clone",
        "kernel/apparmor_restrict_unprivileged_userns"))
    key["probes_version"] = PROBES_VERSION
    return key


def cached_report(names: list[str], cache_dir: str, key: dict[str, str] | None = None) -> list[Capability]:
    """Reports for ``names``, from ``cache_dir/capabilities.json`` when its key equals ``cache_key()``.

    A name missing from a valid cache is probed and added; a key mismatch (or a file not owned by this
    euid, or unreadable) discards the whole cache and probes again.  The file is written atomically
    (temp file in the same directory, fsync, ``os.replace``).  ``cache_dir`` must be a directory only
    trusted users can write (e.g. the state root): a cached "available" is believed.

    Args:
        names: capability names (see ``capability.PROBES``).
        cache_dir: existing or creatable directory for the cache file.
        key: the key to use (default ``cache_key()``); tests pass a changed one.
    Returns: one ``Capability`` per name, in order.  Raises: OSError only if ``cache_dir`` cannot be made.
    """
    import json
    import tempfile

    from .capability import PROBES, _load_probes

    _load_probes()
    key = key if key is not None else cache_key()
    path = os.path.join(cache_dir, CACHE_FILE)
    cached: dict[str, dict[str, object]] = {}
    try:
        if os.stat(path).st_uid == os.geteuid():
            with open(path) as fh:
                doc = json.load(fh)
            if doc.get("key") == key:
                cached = dict(doc.get("reports", {}))
    except (OSError, ValueError, AttributeError):
        cached = {}
    missing = [n for n in names if n not in cached]
    for n in missing:
        try:
            cached[n] = PROBES[n]().to_dict()
        except KeyError:
            raise
        except Exception as e:  # a crashing probe is "unavailable", as in capability.probe
            cached[n] = Capability(n, False, "", f"probe failed: {e}", "probe raised").to_dict()
    if missing:
        os.makedirs(cache_dir, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".capabilities-", dir=cache_dir)
        try:
            with os.fdopen(fd, "w") as fh:
                json.dump({"key": key, "reports": cached}, fh)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    return [Capability(**cached[n]) for n in names]  # type: ignore[arg-type]
