"""Enter a running sandbox and execve a program there (the helper behind ``exec``).

H is forked from the library's own process (``enter_client.exec_in`` calls ``run`` in the child: no
interpreter starts per exec, ~15 ms of start-up and imports saved) with its stdio set and every
other fd closed; ``python -I -S enter.py SPEC_FD STATUS_FD`` runs the same steps standalone.  This
module imports only the standard library, ``procstat`` (the package's one reader of /proc/PID/stat)
and this package's ``__init__`` (namespace identity), which import nothing more, all of it before any
step: after ``setns(CLONE_NEWNS)`` the host's files, Python's own included, are out of reach.  ``run`` takes
the spec (``Spec`` below; standalone: ``marshal``-ed in ``SPEC_FD``); ``STATUS_FD`` receives the
reports (``Status`` below).
The library side is ``sandbox_shim.execution``.

Steps, in this order (each cites its man page).  Everything that becomes visible inside the sandbox is
already confined: H does every step up to the seccomp filter itself, and only then forks C, the one
process that enters the sandbox's pid namespace (setns(2): CLONE_NEWPID affects children only); H stays
in the host's pid namespace, invisible to the tenant (runc CVE-2016-9962, CVE-2019-5736):
  helper H:
    1. open /proc/PID/ns/* of the container process, /proc/PID/root, every file of ``cgroup_procs`` and the
       seccomp programs, then re-check the process's identity (pid + start time, proc(5) field 22);
    2. setns(2) into each namespace that differs from ours: user first, then mnt, pid, net, ipc,
       uts, cgroup;
    3. fchdir(/proc/PID/root) + chroot(2) ".", as nsenter(1) does;
    4. setrlimit(2) for each of the sandbox's rlimits; umask(2) when ``umask`` is given;
    5. PR_SET_KEEPCAPS, drop the bounding set to ``capabilities`` (PR_CAPBSET_DROP), setgroups(2),
       setresgid(2), setresuid(2), capset(2), raise the ambient set (prctl(2), capabilities(7));
    6. chdir(2) to the cwd (as the new user); PR_SET_NO_NEW_PRIVS; PR_SET_DUMPABLE 0 (after the
       last credential change, which would reset it): /proc/PID/exe, fd/, mem of H and C need
       CAP_SYS_PTRACE in the host's user namespace (their memory was made there) until C execs;
    7. PR_SET_SECCOMP with SECCOMP_MODE_FILTER and the sandbox's compiled BPF (seccomp(2)); H lives
       under the filter too, as bwrap's own init does (it needs only read, write, close, wait4, kill);
    8. fork(2) C;
  child C (the program itself: it keeps its pid through execve):
    9. write ``0`` into each cgroup file H opened (``CgroupManager.join_files``: v1 ``tasks``, v2
       ``cgroup.procs``): C, single-threaded (fork(2) copies one thread), moves itself before it can
       run user code, without the thread-group lock an explicit pid takes (its write side waits
       for an RCU grace period, ~10 ms); the kernel checks the opener's (H's) credentials
       (cgroup-v1/cgroups.rst 2.2, cgroup-v2.rst "Processes"); a failed write: C never runs;
       close every fd but 0-2, its error pipe and ``console_fd``; setsid(2);
   9b. with ``console_fd`` (a unix socket connected to ``--console-socket``): open /dev/ptmx of the
       sandbox's own devpts (pty(7); as runc does, so the slave is /dev/pts/N inside), unlock it,
       send the master as one SCM_RIGHTS message (unix(7)), make the slave fds 0-2 and the
       controlling terminal (ioctl TIOCSCTTY, ioctl_tty(2));
   10. execve(2), walking PATH like execvp(3): EACCES seen on any candidate wins over ENOENT.
  C's errno from a failed step goes to H through a CLOEXEC pipe: a successful execve closes it with
  nothing written, so "never ran" is told from "ran and exited 127" by the kernel, not by guessing.

Spec (a ``marshal`` dict: no json, re or enum to import): ``pid``/``start`` (workload pid, its start
time in clock ticks), ``cgroup_procs`` (host paths), ``seccomp_files`` (paths, loaded in order),
``uid``, ``gid``, ``additional_gids``, ``capabilities`` (names, e.g. ``CAP_NET_BIND_SERVICE``),
``rlimits`` ([name, soft, hard]), ``env`` (["K=V"]), ``cwd``, ``argv``, ``umask`` (int or null:
unchanged), ``console_fd`` (fd number or null), ``detach`` (bool: report and exit once the program runs,
without waiting: C, the program, is then re-parented by the kernel to the caller's nearest child
subreaper — conmon, containerd's shim — never to the sandbox's init, because H lives in the host's pid
namespace (prctl(2) PR_SET_CHILD_SUBREAPER); its exit status is the program's, as with ``runc exec
-d``).

Status messages (each a ``marshal``-ed dict after its length, 4 bytes little-endian):
``{"pid": N}`` (C's host pid), then ``{"exec": "ok"}`` or
``{"error": "exec"|"setup", "step": S, "errno": E, "detail": D}``, then (without ``detach``)
``{"exit": N}`` or ``{"signal": N}`` with ``"rusage": {"utime_us", "stime_us", "maxrss_bytes"}``.
H forwards SIGINT/SIGTERM/SIGHUP/SIGQUIT/SIGUSR2 to C and turns SIGUSR1 into SIGKILL of C's group.
Without ``detach``, H also watches ``caller`` (the pid of the process that forked it, through a pidfd,
pidfd_open(2)): when that process dies first (kill -9 of the library's caller or of ``exec``), H
kills C's group, so no program outlives its caller and a caller's deadline is never silently lost.
A process, not a thread: PR_SET_PDEATHSIG would fire when the forking *thread* ends (prctl(2)).
"""

from __future__ import annotations

import ctypes
import errno
import marshal
import os
import resource
import select  # here: nothing is imported in H, a fork of a caller that may hold the import lock
import signal
import sys

if __package__:  # imported before the fork (enter_client), like every other module H uses
    from ...procstat import proc_start_time as start_time  # the one reader of /proc/PID/stat
    from . import ns_path, ns_shared  # namespace identity, its one owner (the package)
else:  # standalone (``python -I -S enter.py``): the package root is three folders up
    sys.path.insert(
        0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    )
    from sandbox_shim.platforms.linux import ns_path, ns_shared
    from sandbox_shim.procstat import proc_start_time as start_time

#: namespace file under /proc/PID/ns -> CLONE_NEW* flag (setns(2)); user first, then the rest
NAMESPACES = (
    ("user", 0x10000000),
    ("mnt", 0x00020000),
    ("pid", 0x20000000),
    ("net", 0x40000000),
    ("ipc", 0x08000000),
    ("uts", 0x04000000),
    ("cgroup", 0x02000000),
)

#: capability names in kernel number order (include/uapi/linux/capability.h)
CAP_NAMES = (
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "LINUX_IMMUTABLE",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_ADMIN",
    "NET_RAW",
    "IPC_LOCK",
    "IPC_OWNER",
    "SYS_MODULE",
    "SYS_RAWIO",
    "SYS_CHROOT",
    "SYS_PTRACE",
    "SYS_PACCT",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_NICE",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "MKNOD",
    "LEASE",
    "AUDIT_WRITE",
    "AUDIT_CONTROL",
    "SETFCAP",
    "MAC_OVERRIDE",
    "MAC_ADMIN",
    "SYSLOG",
    "WAKE_ALARM",
    "BLOCK_SUSPEND",
    "AUDIT_READ",
    "PERFMON",
    "BPF",
    "CHECKPOINT_RESTORE",
)

PR_SET_KEEPCAPS = 8
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
PR_SET_DUMPABLE = 4
SECCOMP_MODE_FILTER = 2
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_RAISE = 2
CAPABILITY_VERSION_3 = 0x20080522
#: ioctl_tty(2) requests (asm-generic/ioctls.h: x86, arm, arm64, riscv, s390)
TIOCGPTN = 0x80045430
TIOCSPTLCK = 0x40045431
TIOCGPTPEER = 0x5441

_libc = ctypes.CDLL(None, use_errno=True)


class StepFailed(Exception):
    """A setup step failed: ``step`` names it, ``err`` is the errno."""

    def __init__(self, step: str, err: int, detail: str = "") -> None:
        super().__init__(step)
        self.step, self.err, self.detail = step, err, detail


def _check(step: str, rc: int) -> None:
    if rc != 0:
        raise StepFailed(step, ctypes.get_errno())


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def cap_number(name: str) -> int:
    """``CAP_NET_RAW`` or ``NET_RAW`` -> 13.  Raises ``StepFailed`` (EINVAL) for an unknown name."""
    short = name.upper().removeprefix("CAP_")
    if short not in CAP_NAMES:
        raise StepFailed("capabilities", errno.EINVAL, f"unknown capability {name}")
    return CAP_NAMES.index(short)


def set_credentials(spec: dict, last_cap: int) -> None:
    """Step 6: groups, gid, uid and exactly ``spec['capabilities']`` in every set (bounding too)."""
    keep = {cap_number(c) for c in spec.get("capabilities") or []}
    _check("prctl(PR_SET_KEEPCAPS)", _libc.prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0))
    for cap in range(last_cap + 1):
        if cap not in keep and _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            e = ctypes.get_errno()
            if e != errno.EINVAL:  # EINVAL: the kernel does not know this capability
                raise StepFailed("prctl(PR_CAPBSET_DROP)", e)
    gids = [int(g) for g in spec.get("additional_gids") or []]
    try:
        os.setgroups(gids)
    except OSError as e:
        # In a user namespace whose setgroups is "deny" only an empty list could be wanted.
        if gids or e.errno != errno.EPERM:
            raise StepFailed("setgroups", e.errno or errno.EPERM) from e
    try:
        os.setresgid(spec["gid"], spec["gid"], spec["gid"])
        os.setresuid(spec["uid"], spec["uid"], spec["uid"])
    except OSError as e:
        raise StepFailed("setresuid/setresgid", e.errno or errno.EPERM) from e
    mask = [0, 0]
    for cap in keep:
        mask[cap // 32] |= 1 << (cap % 32)
    hdr = _CapHeader(CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)(*[_CapData(m, m, m) for m in mask])
    _check("capset", _libc.capset(ctypes.byref(hdr), data))
    for cap in sorted(keep):
        _check("prctl(PR_CAP_AMBIENT_RAISE)", _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, cap, 0, 0))
    _check("prctl(PR_SET_KEEPCAPS)", _libc.prctl(PR_SET_KEEPCAPS, 0, 0, 0, 0))


def load_seccomp(bpf: bytes) -> None:
    """Step 8: install ``bpf`` (struct sock_filter[], 8 bytes each) with PR_SET_SECCOMP."""
    if len(bpf) % 8:
        raise StepFailed("seccomp", errno.EINVAL, "filter length is not a multiple of 8")
    buf = ctypes.create_string_buffer(bpf, len(bpf))
    prog = _SockFprog(len(bpf) // 8, ctypes.addressof(buf))
    rc = _libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0)
    _check("prctl(PR_SET_SECCOMP)", rc)


def exec_program(argv: list[str], env: dict[str, str]) -> None:
    """Step 9: execve ``argv[0]`` (a PATH search when it has no slash).  Returns only by raising."""
    prog = argv[0]
    if "/" in prog:
        candidates = [prog]
    else:
        path = env.get("PATH", "/usr/local/bin:/usr/bin:/bin")
        candidates = [os.path.join(d or ".", prog) for d in path.split(":")]
    seen = errno.ENOENT
    for c in candidates:
        try:
            os.execve(c, argv, env)
        except OSError as e:
            err = e.errno or errno.ENOENT
            if "/" in prog or err not in (errno.ENOENT, errno.ENOTDIR, errno.EACCES):
                raise StepFailed("execve", err, c) from e
            if err == errno.EACCES:
                seen = errno.EACCES
    raise StepFailed("execve", seen, prog)


def _import_console() -> None:
    """Load the modules of ``open_console`` into ``sys.modules`` before setns(2) (afterwards the host's
    files are out of reach; ``open_console``'s own imports then only look them up), and only when there
    is a console (``socket`` alone pulls in ``enum``, ~1.5 ms of every exec otherwise)."""
    import array  # noqa: F401
    import fcntl  # noqa: F401
    import socket  # noqa: F401
    import termios  # noqa: F401


def open_console(console_fd: int, uid: int, gid: int) -> None:
    """Step 4b (in C, after chroot): a pty of the sandbox's devpts as fds 0-2 and controlling tty.

    The master goes over the connected socket ``console_fd`` (SCM_RIGHTS, data: the slave's name
    inside the sandbox, as runc sends it) and is closed here; the slave is chowned to ``uid``/``gid``.
    """
    import array  # loaded before setns by _import_console: looked up in sys.modules, no file read
    import fcntl
    import socket
    import termios

    try:
        master = os.open("/dev/ptmx", os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
        fcntl.ioctl(master, TIOCSPTLCK, b"\0\0\0\0")  # unlockpt(3)
        num = int.from_bytes(fcntl.ioctl(master, TIOCGPTN, b"\0\0\0\0"), sys.byteorder)
        slave = fcntl.ioctl(master, TIOCGPTPEER, os.O_RDWR | os.O_NOCTTY)  # no path lookup
    except OSError as e:
        raise StepFailed("console", e.errno or errno.EIO, "/dev/ptmx of the sandbox") from e
    try:
        os.fchown(slave, uid, gid)
    except OSError:
        pass  # an unmapped owner: the fds opened here still work
    name = f"/dev/pts/{num}"
    try:
        with socket.socket(fileno=console_fd) as sock:
            sock.sendmsg(
                [name.encode()],
                [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [master]).tobytes())],
            )
    except OSError as e:
        raise StepFailed(
            "console", e.errno or errno.EPIPE, "cannot send the terminal to --console-socket"
        ) from e
    os.close(master)
    for fd in (0, 1, 2):
        os.dup2(slave, fd)
    if slave > 2:
        os.close(slave)
    try:
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)
    except OSError as e:
        raise StepFailed("ioctl(TIOCSCTTY)", e.errno or errno.EPERM, name) from e


def confine(spec: dict, root_fd: int, bpfs: list[bytes], last_cap: int) -> None:
    """Steps 4-8 in H, after the setns(2) joins and before the fork: everything C will inherit."""
    os.fchdir(root_fd)
    os.chroot(".")
    os.close(root_fd)
    for name, soft, hard in spec.get("rlimits") or []:
        try:
            resource.setrlimit(getattr(resource, name), (soft, hard))
        except (OSError, ValueError, AttributeError) as e:
            raise StepFailed(f"setrlimit({name})", getattr(e, "errno", None) or errno.EINVAL) from e
    if spec.get("umask") is not None:
        os.umask(int(spec["umask"]) & 0o777)
    set_credentials(spec, last_cap)
    try:
        os.chdir(spec.get("cwd") or "/")
    except OSError as e:
        raise StepFailed("chdir", e.errno or errno.ENOENT, spec.get("cwd") or "/") from e
    _check("prctl(PR_SET_NO_NEW_PRIVS)", _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
    # after the last credential change (which resets it: prctl(2) PR_SET_DUMPABLE): /proc/PID/exe,
    # fd/, mem, environ of H and C are then closed to everyone without CAP_SYS_PTRACE in the host's
    # user namespace (ptrace(2) "Ptrace access mode checking"), until C's execve
    _check("prctl(PR_SET_DUMPABLE)", _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0))
    for bpf in bpfs:  # the sandbox's filters, stacked in the same order
        load_seccomp(bpf)


def _until_exit_or_orphaned(c: int, caller: object) -> None:
    """Return once C has exited; when ``caller`` (H's parent's pid) dies first, kill C's group with
    SIGKILL, then return.  The caller's pidfd is trusted only if H is still its child after it was
    opened (a dead caller's pid can be reused; H is re-parented the moment its parent dies)."""
    if not isinstance(caller, int):
        return
    try:
        caller_fd = os.pidfd_open(caller)
        c_fd = os.pidfd_open(c)
    except (OSError, AttributeError):  # no pidfds (Linux < 5.3): waited for as before
        return
    try:
        orphaned = os.getppid() != caller
        while not orphaned:
            ready, _, _ = select.select([caller_fd, c_fd], [], [])
            if c_fd in ready:
                return
            orphaned = caller_fd in ready
        try:
            os.killpg(c, signal.SIGKILL)
        except ProcessLookupError:  # C has not called setsid yet
            try:
                os.kill(c, signal.SIGKILL)
            except ProcessLookupError:
                pass
    finally:
        os.close(caller_fd)
        os.close(c_fd)


def child(spec: dict, procs: list[int], err_w: int) -> None:
    """Steps 9-10 in C (already confined).  Never returns: execve, or report to ``err_w`` and
    _exit(127).

    C is the program: with ``detach`` H exits once it runs, and the kernel re-parents C to the
    caller's subreaper (see the module docstring), which waits for its exit status.
    """
    keep = {0, 1, 2, err_w}
    if spec.get("console_fd") is not None:
        keep.add(int(spec["console_fd"]))
    try:
        for fd in procs:
            try:
                os.write(fd, b"0")  # "0": the writer itself, C's one thread (cgroups(7))
            except OSError as e:  # never run outside the sandbox's cgroup
                raise StepFailed("cgroup", e.errno or errno.EIO, str(e)) from e
        for fd in _open_fds():
            if fd not in keep:
                try:
                    os.close(fd)  # nothing of the host's but stdio reaches the program
                except OSError:
                    pass  # the listing's own fd, already closed
        os.setsid()
        if spec.get("console_fd") is not None:
            open_console(int(spec["console_fd"]), int(spec.get("uid", 0)), int(spec.get("gid", 0)))
        env = dict(e.split("=", 1) for e in spec.get("env") or [] if "=" in e)
        exec_program(list(spec["argv"]), env)
    except StepFailed as e:
        stage = "exec" if e.step == "execve" else "setup"
        msg = {"error": stage, "step": e.step, "errno": e.err, "detail": e.detail}
    except OSError as e:
        msg = {"error": "setup", "step": "enter", "errno": e.errno or 0, "detail": str(e)}
    except BaseException as e:  # noqa: BLE001 - anything else must still be reported, never run on
        msg = {"error": "setup", "step": "enter", "errno": 0, "detail": repr(e)}
    try:
        os.write(err_w, frame(msg))
    finally:
        os._exit(127)


def _open_fds() -> list[int]:
    """This process's open fds, from /proc/self/fd (the sandbox's procfs after chroot: same process)."""
    try:
        return [int(x) for x in os.listdir("/proc/self/fd")]
    except OSError:
        return list(range(3, 1024))


def frame(obj: dict) -> bytes:
    """One status message: its ``marshal`` bytes after their length (4 bytes, little-endian)."""
    data = marshal.dumps(obj)
    return len(data).to_bytes(4, "little") + data


def unframe(data: bytes) -> list[dict]:
    """The messages of ``frame`` in ``data`` (a truncated last one is dropped)."""
    out, i = [], 0
    while i + 4 <= len(data):
        n = int.from_bytes(data[i : i + 4], "little")
        if i + 4 + n > len(data):
            break
        out.append(marshal.loads(data[i + 4 : i + 4 + n]))
        i += 4 + n
    return out


def main(spec_fd: int, status_fd: int) -> int:
    """The standalone form (``python -I -S enter.py SPEC_FD STATUS_FD``): ``run`` on the spec read
    from ``SPEC_FD``.  Returns H's status."""
    with os.fdopen(spec_fd, "rb") as fh:
        spec = marshal.loads(fh.read())
    return run(spec, status_fd)


def run(spec: dict, status_fd: int) -> int:
    """Steps 1-8 in H, the fork, then report and (without ``detach``) wait for C.  Returns H's status.

    H is a process of its own: the library forks it (``enter_client.exec_in``) with stdio set and
    every other fd closed but ``status_fd`` and ``console_fd``, so no interpreter starts per exec."""

    def report(obj: dict) -> None:
        os.write(status_fd, frame(obj))

    os.set_inheritable(status_fd, False)  # never into C or the program
    if spec.get("console_fd") is not None:
        os.set_inheritable(int(spec["console_fd"]), False)  # C uses it before execve, never after
        _import_console()
    pid = int(spec["pid"])
    try:
        ns_fds = [
            (flag, os.open(ns_path(pid, name), os.O_RDONLY | os.O_CLOEXEC))
            for name, flag in NAMESPACES
            if os.path.exists(ns_path(pid, name)) and not ns_shared(pid, name)
        ]
        root_fd = os.open(f"/proc/{pid}/root", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        procs = [os.open(p, os.O_WRONLY | os.O_CLOEXEC) for p in spec.get("cgroup_procs") or []]
        bpfs = []
        for path in spec.get("seccomp_files") or []:
            with open(path, "rb") as fh:
                bpfs.append(fh.read())
        with open("/proc/sys/kernel/cap_last_cap") as cap_fh:
            last_cap = int(cap_fh.read())
        if start_time(pid) != spec.get("start"):
            raise StepFailed("identity", errno.ESRCH, "the sandbox's process is gone")
        for flag, fd in ns_fds:
            _check("setns", _libc.setns(fd, flag))
            os.close(fd)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        confine(spec, root_fd, bpfs, last_cap)
    except StepFailed as e:
        stage = "exec" if e.step == "execve" else "setup"
        report({"error": stage, "step": e.step, "errno": e.err, "detail": e.detail})
        return 125
    except OSError as e:
        report({"error": "setup", "step": "open", "errno": e.errno or 0, "detail": str(e)})
        return 125

    forwarded = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR2, signal.SIGUSR1)
    old = signal.pthread_sigmask(signal.SIG_BLOCK, forwarded)  # C must not die of a signal meant for H
    try:
        c = os.fork()  # C is born in the sandbox's pid namespace, already confined (steps 2-7)
    except OSError as e:  # e.g. EAGAIN: the sandbox's RLIMIT_NPROC, now H's own
        report({"error": "setup", "step": "fork", "errno": e.errno or 0, "detail": str(e)})
        return 125
    if c == 0:
        for s in (*forwarded, signal.SIGPIPE, signal.SIGXFSZ):  # Python ignores SIGPIPE and SIGXFSZ:
            signal.signal(s, signal.SIG_DFL)  # the program gets the defaults (Popen's restore_signals)
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
        child(spec, procs, err_w)
    os.close(err_w)
    for fd in procs:
        os.close(fd)  # C holds them, and writes "0" into each before anything else
    if spec.get("console_fd") is not None:
        os.close(int(spec["console_fd"]))  # C holds it now

    def forward(signum: int, _frame: object) -> None:
        try:
            if signum == signal.SIGUSR1:
                try:
                    os.killpg(c, signal.SIGKILL)
                except ProcessLookupError:  # C has not called setsid yet
                    os.kill(c, signal.SIGKILL)
            else:
                os.kill(c, signum)
        except ProcessLookupError:
            pass

    for s in forwarded:
        signal.signal(s, forward)
    signal.pthread_sigmask(signal.SIG_SETMASK, old)
    detach = bool(spec.get("detach"))
    report({"pid": c})
    chunks = []
    while True:
        b = os.read(err_r, 4096)
        if not b:
            break
        chunks.append(b)
    os.close(err_r)
    for m in unframe(b"".join(chunks)):
        if "error" in m:
            report(m)
            os.waitpid(c, 0)
            return 127
    report({"exec": "ok"})
    if detach:
        return 0  # C runs on; the kernel gives it to the caller's subreaper when H exits
    _until_exit_or_orphaned(c, spec.get("caller"))
    _, status, ru = os.wait4(c, 0)
    usage = {
        "utime_us": int(ru.ru_utime * 1e6),
        "stime_us": int(ru.ru_stime * 1e6),
        "maxrss_bytes": ru.ru_maxrss * 1024,
    }
    if os.WIFSIGNALED(status):
        report({"signal": os.WTERMSIG(status), "rusage": usage})
        return 128 + os.WTERMSIG(status)
    report({"exit": os.WEXITSTATUS(status), "rusage": usage})
    return os.WEXITSTATUS(status)


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]), int(sys.argv[2])))
