"""Landlock (Linux 5.13+): an unprivileged, stackable file-system access control layer.

Source of the rules: the kernel's ``Documentation/userspace-api/landlock.rst`` and
``include/uapi/linux/landlock.h``; ``landlock(7)``, ``landlock_create_ruleset(2)``,
``landlock_add_rule(2)``, ``landlock_restrict_self(2)``.

This module imports only the standard library, so it can be carried into a bwrap sandbox as one
read-only file and run there as a script (``python -I -S landlock.py --ro P --rw Q -- CMD ARGS``):
Landlock must be applied *inside* the sandbox, after bwrap has set up the mounts, because a
Landlock-restricted process may not call ``mount(2)`` or ``pivot_root(2)`` (kernel doc, "Current
limitations": file system topology modification).

It also loads the terminal-injection filter (``tty_filter``: seccomp, no ``TIOCSTI``/``TIOCLINUX``)
in every confinement, with or without Landlock.

File-system access is handled, and from ABI 6 the IPC scopes (``LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET``:
no connecting to an abstract unix socket made outside the domain; ``LANDLOCK_SCOPE_SIGNAL``: no
signals to processes outside it) when asked.  Network access rights (ABI 4+) are left unhandled:
egress is the outer layer's business (its own network namespace when an allow-list is given).

Start-up cost matters (it runs once per confined command, in a second interpreter: Landlock cannot be
applied before bwrap has made the mounts).  The restrict-and-exec path imports only ``_ctypes`` (the
C module under ``ctypes``, without the ``ctypes`` package's class set-up), ``os``, ``struct`` and
``sys`` (``struct`` there only: ``tty_filter``, which confine's start-up calls, does without it); the
forwarder's ``socket``/``threading`` only when
``--forward`` is given.
"""

from __future__ import annotations

import errno
import os
import sys

TYPE_CHECKING = False  # start-up cost: no typing at run time
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

# Syscall numbers: the same on x86_64 and aarch64 (asm-generic unistd.h: 444, 445, 446).
_SYSCALLS = {"x86_64": (444, 445, 446), "aarch64": (444, 445, 446), "arm64": (444, 445, 446)}

LANDLOCK_CREATE_RULESET_VERSION = 1 << 0
LANDLOCK_RULE_PATH_BENEATH = 1
PR_SET_NO_NEW_PRIVS = 38

# Access rights for files and directories (include/uapi/linux/landlock.h).
EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
REMOVE_DIR = 1 << 4
REMOVE_FILE = 1 << 5
MAKE_CHAR = 1 << 6
MAKE_DIR = 1 << 7
MAKE_REG = 1 << 8
MAKE_SOCK = 1 << 9
MAKE_FIFO = 1 << 10
MAKE_BLOCK = 1 << 11
MAKE_SYM = 1 << 12
REFER = 1 << 13  # ABI 2
TRUNCATE = 1 << 14  # ABI 3
IOCTL_DEV = 1 << 15  # ABI 5

#: rights that may be granted on a rule whose target is a regular file (not a directory);
#: anything else there is EINVAL (landlock_add_rule(2)).
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV

#: what "read-only" means here: read files, list directories, execute.
READ_ONLY = EXECUTE | READ_FILE | READ_DIR
#: what "read-write" means: every right the ABI handles (filtered by ``handled_fs``).
READ_WRITE = (1 << 16) - 1
#: a device tree such as bwrap's ``--dev``: read, write and ioctl existing nodes, create nothing.
DEVICES = READ_FILE | WRITE_FILE | READ_DIR | IOCTL_DEV

# IPC scopes (ABI 6; struct landlock_ruleset_attr.scoped).
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0
SCOPE_SIGNAL = 1 << 1
SCOPES = {"abstract-unix-socket": SCOPE_ABSTRACT_UNIX_SOCKET, "signal": SCOPE_SIGNAL}


class LandlockError(OSError):
    """A Landlock syscall failed; ``errno`` is the kernel's, ``filename`` the path concerned if any."""


def _syscall_numbers() -> tuple[int, int, int] | None:
    if sys.platform != "linux":
        return None
    return _SYSCALLS.get(os.uname().machine)


_C_TYPES: tuple[Any, Any] | None = None


def _c_types() -> tuple[Any, Any]:
    """``(long, function)``: what ``ctypes.c_long`` is, and a cdecl libc function returning long
    with errno saved (``ctypes.CDLL``'s kind).  Made on first use: ``_ctypes`` (a shared library)
    is loaded only when a syscall is made, not by ``confine``'s start-up, which calls none here."""
    global _C_TYPES
    if _C_TYPES is None:
        import _ctypes

        class _Long(_ctypes._SimpleCData):
            _type_ = "l"

        class _Func(_ctypes.CFuncPtr):
            _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
            _restype_ = _Long

        _C_TYPES = (_Long, _Func)
    return _C_TYPES


class _Libc:
    """``syscall(2)`` and ``prctl(2)`` from the C library; arguments are ints (passed as C ``long``),
    ``bytes`` (passed as a pointer to their contents) or None (NULL)."""

    def __init__(self) -> None:
        import _ctypes

        self._long, func = _c_types()
        # typeshed's _ctypes stubs are narrower than the C code: dlopen(NULL) is the running program
        # (dlopen(3)), and a (name, library) pair takes any object with a ``_handle``, as ctypes.CDLL is
        self._handle = _ctypes.dlopen(None)  # type: ignore[arg-type]
        self._syscall = func(("syscall", self))
        self._prctl = func(("prctl", self))

    def _args(self, args: tuple[object, ...]) -> list[object]:
        return [self._long(a) if isinstance(a, int) else a for a in args]

    def syscall(self, *args: object) -> int:
        return int(self._syscall(*self._args(args)))

    def prctl(self, *args: object) -> int:
        return int(self._prctl(*self._args(args)))


def _libc() -> _Libc:
    return _Libc()


#: prctl(2) option: the signal this process gets when its parent thread ends (linux/prctl.h)
PR_SET_PDEATHSIG = 1


def pdeathsig_setter(sig: int) -> Callable[[], bool]:
    """A function that sets ``PR_SET_PDEATHSIG`` to ``sig`` for the process calling it (prctl(2)) and
    returns True when set: the package's one setter of it.  The C library is found here, when the
    setter is made, so a setter made before ``fork`` makes only the syscall in the child (a
    ``preexec_fn``, a forked placeholder).  Loads ``_ctypes``, not the ``ctypes`` package."""
    prctl = _libc().prctl

    def set_() -> bool:
        return prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0) == 0

    return set_


def get_errno() -> int:
    """errno as saved by the last call through ``_Libc``."""
    import _ctypes

    return int(_ctypes.get_errno())


def abi_version() -> int:
    """Return the Landlock ABI version this kernel offers, or 0 when Landlock is unavailable.

    Measured by ``landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)``: the kernel
    returns the ABI number, or fails with ENOSYS (not built) / EOPNOTSUPP (built, not enabled at boot).
    Never raises.
    """
    nums = _syscall_numbers()
    if nums is None:
        return 0
    try:
        v = _libc().syscall(nums[0], None, 0, LANDLOCK_CREATE_RULESET_VERSION)
    except (OSError, AttributeError):
        return 0
    return int(v) if v > 0 else 0


def handled_fs(abi: int) -> int:
    """The file-system rights a ruleset can handle at ``abi`` (kernel doc, "Backward compatibility").

    ABI 1: bits 0-12; ABI 2 adds REFER; ABI 3 adds TRUNCATE; ABI 5 adds IOCTL_DEV.  0 for abi < 1.
    """
    if abi < 1:
        return 0
    mask = (1 << 13) - 1
    if abi >= 2:
        mask |= REFER
    if abi >= 3:
        mask |= TRUNCATE
    if abi >= 5:
        mask |= IOCTL_DEV
    return mask


def _check(libc: _Libc, ret: int, what: str, path: str | None = None) -> int:
    if ret < 0:
        e = get_errno()
        raise LandlockError(e, f"{what}: {os.strerror(e)}", path)
    return ret


def restrict_self(rules: Sequence[tuple[str, int]], abi: int | None = None, scoped: int = 0) -> int:
    """Confine the calling thread (and everything it execs) to ``rules``; return the ABI used.

    Args:
        rules: ``(path, access)`` pairs; ``access`` is a mask of the rights above, granted beneath
            ``path`` (or on the file itself).  Rights the ABI does not know are dropped; on a
            non-directory only ``FILE_RIGHTS`` are kept.  Paths that do not exist are skipped.
        abi: the ABI to target (default: what the kernel offers).
        scoped: a mask of ``SCOPE_*`` bits; needs ABI 6 (fails closed below it).

    Sets ``PR_SET_NO_NEW_PRIVS`` first (required unless CAP_SYS_ADMIN, landlock_restrict_self(2)).
    Call it in a single-threaded process right before ``execve``: only the calling thread is
    restricted.

    Raises:
        LandlockError: Landlock unavailable, or a syscall failed (errno kept).
    """
    import struct

    nums = _syscall_numbers()
    abi = abi_version() if abi is None else abi
    if nums is None or abi < 1:
        raise LandlockError(errno.EOPNOTSUPP, "landlock: not available on this kernel")
    if scoped and abi < 6:
        raise LandlockError(errno.EOPNOTSUPP, f"landlock: IPC scoping needs ABI 6, the kernel has {abi}")
    handled = handled_fs(abi)
    libc = _libc()
    if scoped:  # struct landlock_ruleset_attr {handled_access_fs, handled_access_net, scoped} (ABI 6 size)
        attr = struct.pack("=QQQ", handled, 0, scoped)
    else:  # the ABI 1 size: handled_access_fs only
        attr = struct.pack("=Q", handled)
    ruleset = _check(libc, libc.syscall(nums[0], attr, len(attr), 0), "landlock_create_ruleset")
    try:
        for path, access in rules:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except FileNotFoundError:
                continue
            try:
                allowed = access & handled
                if not os.path.isdir(f"/proc/self/fd/{fd}"):
                    allowed &= FILE_RIGHTS
                if not allowed:
                    continue
                # struct landlock_path_beneath_attr { __u64 allowed_access; __s32 parent_fd; } packed
                pb = struct.pack("=Qi", allowed, fd)
                _check(
                    libc,
                    libc.syscall(nums[1], ruleset, LANDLOCK_RULE_PATH_BENEATH, pb, 0),
                    "landlock_add_rule",
                    path,
                )
            finally:
                os.close(fd)
        _check(libc, libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
        _check(libc, libc.syscall(nums[2], ruleset, 0), "landlock_restrict_self")
    finally:
        os.close(ruleset)
    return abi


# ---- the terminal-injection filter (seccomp(2), ioctl_tty(2)) ---------------------------------------

TIOCSTI, TIOCLINUX = 0x5412, 0x541C  # push a byte into the terminal's input; console ioctls
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
#: audit arch -> ioctl syscall numbers (x86_64 incl. x32; i386; aarch64; arm) (audit.h, unistd.h)
_IOCTL_NR = {0xC000003E: (16, 0x40000000 | 16), 0x40000003: (54,), 0xC00000B7: (29,), 0x40000028: (54,)}


def tty_filter() -> bytes:
    """A classic-BPF seccomp program: ``ioctl(fd, TIOCSTI | TIOCLINUX, ...)`` fails with EPERM,
    everything else is allowed.  A confined program sharing the caller's terminal could otherwise
    type commands into the caller's shell after it exits (ioctl_tty(2) TIOCSTI; kernels before 6.2
    or with ``dev.tty.legacy_tiocsti=1`` allow it).  The command is the low 32 bits of ``args[1]``
    (the kernel takes ``unsigned int cmd``)."""
    ld_w, jeq, ret = 0x20, 0x15, 0x06  # BPF_LD|BPF_W|BPF_ABS, BPF_JMP|BPF_JEQ|BPF_K, BPF_RET|BPF_K
    allow, deny = 0x7FFF0000, 0x00050000 | errno.EPERM
    # (code, k, jt, jf); a str code is a label marking the next instruction, a str jt/jf jumps to one
    prog: list[tuple[int | str, int, int | str, int | str]] = []
    for arch, nrs in _IOCTL_NR.items():
        prog += [(ld_w, 4, 0, 0), (jeq, arch, 0, f"next{arch}"), (ld_w, 0, 0, 0)]
        prog += [(jeq, nr, "check", 0) for nr in nrs]
        prog += [(ret, allow, 0, 0), (f"next{arch}", 0, 0, 0)]
    prog += [
        (ret, allow, 0, 0),
        ("check", 0, 0, 0),
        (ld_w, 24, 0, 0),
        (jeq, TIOCSTI, "deny", 0),
        (jeq, TIOCLINUX, "deny", 0),
        (ret, allow, 0, 0),
        ("deny", 0, 0, 0),
        (ret, deny, 0, 0),
    ]
    labels: dict[str, int] = {}
    real: list[tuple[int, int, int | str, int | str]] = []
    for op, k, jt, jf in prog:
        if isinstance(op, str):
            labels[op] = len(real)
        else:
            real.append((op, k, jt, jf))
    out = b""

    def rel(t: int | str, at: int) -> int:
        return labels[t] - at - 1 if isinstance(t, str) else int(t)

    order = sys.byteorder  # struct sock_filter {__u16 code; __u8 jt; __u8 jf; __u32 k;}, native order
    for i, (code, k, jt, jf) in enumerate(real):
        out += code.to_bytes(2, order) + bytes((rel(jt, i), rel(jf, i))) + k.to_bytes(4, order)
    return out


def apply_tty_filter(libc: _Libc | None = None) -> None:
    """Load ``tty_filter()`` into this thread (no_new_privs must be set, or CAP_SYS_ADMIN held).

    Raises: LandlockError (an OSError) with the kernel's errno when seccomp refuses it.
    """
    import _ctypes
    import struct

    libc = libc or _libc()
    code = tty_filter()

    class _Char(_ctypes._SimpleCData):  # what ctypes.c_char is
        _type_ = "c"

    class _Prog(_ctypes.Array):  # what ctypes.c_char * len(code) is
        _type_ = _Char
        _length_ = len(code)

    buf = _Prog.from_buffer_copy(code)
    fprog = struct.pack("=HxxxxxxQ", len(code) // 8, _ctypes.addressof(buf))  # struct sock_fprog
    _check(libc, libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
    _check(libc, libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, fprog, 0, 0), "prctl(PR_SET_SECCOMP)")
    del buf  # the kernel copied the program


def helper_argv(
    python: str,
    script: str,
    read_only: Sequence[str],
    read_write: Sequence[str],
    devices: Sequence[str],
    program: str,
    args: Sequence[str],
    *,
    scopes: Sequence[str] = (),
    forward: str | None = None,
    landlock: bool = True,
    abi: int | None = None,
) -> list[str]:
    """argv that runs this file as a script: apply Landlock, then exec ``program`` with ``args``.

    ``args`` excludes argv[0]; the program receives ``program`` as argv[0].  ``scopes`` are names in
    ``SCOPES``; ``forward`` is ``PORT=SOCKET`` (serve ``127.0.0.1:PORT`` by connecting to the unix
    socket ``SOCKET``); ``landlock=False`` only forwards (no rules are applied).  ``abi``: the ABI
    the caller believed (``--abi``): the script asks the kernel and runs nothing when they differ.
    """
    out = [python, "-I", "-S", "-B", script]
    if abi is not None:
        out += ["--abi", str(abi)]
    if not landlock:
        out.append("--no-landlock")
    for flag, paths in (("--ro", read_only), ("--rw", read_write), ("--dev", devices)):
        for p in paths:
            out += [flag, p]
    for name in scopes:
        out += ["--scope", name]
    if forward:
        out += ["--forward", forward]
    return [*out, "--", program, *args]


def _serve_forward(listener: object, target: str) -> None:
    """Forwarder body: every connection to ``listener`` is bridged to the unix socket ``target``."""
    import socket
    import threading

    def pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def bridge(conn: socket.socket) -> None:
        try:
            up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            up.connect(target)
        except OSError:
            conn.close()
            return
        t = threading.Thread(target=pump, args=(up, conn), daemon=True)
        t.start()
        pump(conn, up)
        t.join()
        conn.close()
        up.close()

    assert isinstance(listener, socket.socket)
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=bridge, args=(conn,), daemon=True).start()


def _start_forwarder(spec: str) -> None:
    """Listen on ``127.0.0.1:PORT`` now (so the program never races it), then leave the serving to a
    grandchild re-parented to the sandbox's init: the program gets no child it did not make."""
    import socket

    port, _, target = spec.partition("=")
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", int(port)))
    listener.listen(64)
    pid = os.fork()
    if pid == 0:
        try:
            if os.fork() == 0:
                os.setsid()
                for fd in (0, 1):
                    os.dup2(os.open(os.devnull, os.O_RDWR), fd)
                _serve_forward(listener, target)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    listener.close()


def initial_environ() -> dict[bytes, bytes] | None:
    """The environment block this process was exec'd with, untouched by the interpreter's startup
    (PEP 538 locale coercion may set LC_CTYPE in ``os.environ``; ``/proc/self/environ`` is the
    original block): the package's one parser of that file (proc(5); ``confine.initial_environ``
    decodes it for the control plane).  None when it cannot be read."""
    try:
        with open("/proc/self/environ", "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    env: dict[bytes, bytes] = {}
    for item in raw.split(b"\0"):
        if b"=" in item:
            k, _, v = item.partition(b"=")
            env.setdefault(k, v)
    return env


def main(argv: Sequence[str]) -> int:
    """Script entry: ``[--abi N] [--ro P | --rw P | --dev P]... -- PROGRAM ARGS...``.

    Fails closed: if Landlock cannot be applied the program is not run (exit 126 with a message).
    Exec failures exit 127 (not found) or 126 (anything else), like a shell.
    """
    rules: list[tuple[str, int]] = []
    rights = {"--ro": READ_ONLY, "--rw": READ_WRITE, "--dev": DEVICES}
    scoped, forward, apply, told = 0, None, True, None
    i = 0
    while i < len(argv) and argv[i] != "--":
        if argv[i] == "--no-landlock":
            apply = False
            i += 1
            continue
        if argv[i] == "--abi" and i + 1 < len(argv) and argv[i + 1].isdigit():
            told = int(argv[i + 1])
            i += 2
            continue
        ok = i + 1 < len(argv) and (argv[i] in rights or argv[i] in ("--forward", "--scope"))
        if not ok or (argv[i] == "--scope" and argv[i + 1] not in SCOPES):
            sys.stderr.write(f"landlock: bad argument {argv[i]!r}\n")
            return 126
        if argv[i] == "--scope":
            scoped |= SCOPES[argv[i + 1]]
        elif argv[i] == "--forward":
            forward = argv[i + 1]
        else:
            rules.append((argv[i + 1], rights[argv[i]]))
        i += 2
    cmd = list(argv[i + 1 :])
    if not cmd:
        sys.stderr.write("landlock: no program given\n")
        return 126
    if told is not None and told != abi_version():
        sys.stderr.write(
            f"sandbox-shim confine: the Landlock ABI given ({told}) is not the kernel's "
            f"({abi_version()}); not running\n"
        )
        return 126
    env = initial_environ()
    try:
        if apply:
            restrict_self(rules, scoped=scoped)
        apply_tty_filter()
        if forward:
            _start_forwarder(forward)
    except OSError as e:
        what = "landlock layer" if apply else "terminal filter or egress forwarder"
        sys.stderr.write(f"sandbox-shim confine: {what} could not be applied: {e}; not running\n")
        return 126
    import _signal  # type: ignore[import-not-found,unused-ignore]  # the C module: no enum

    # the launcher leaves SIGINT and SIGQUIT ignored for bwrap (a terminal's ^C reaches the whole
    # foreground group; bwrap dying of it would end the sandbox): the program gets them at their
    # defaults, as a shell would start it (the forwarder above keeps ignoring them)
    _signal.signal(_signal.SIGINT, _signal.SIG_DFL)
    _signal.signal(_signal.SIGQUIT, _signal.SIG_DFL)
    try:
        if "/" in cmd[0]:
            os.execve(cmd[0], cmd, env if env is not None else os.environ)
        else:  # unresolved name: let the PATH search give the OS's own error
            os.execvpe(cmd[0], cmd, env if env is not None else os.environ)
    except OSError as e:
        sys.stderr.write(f"sandbox-shim confine: {cmd[0]!r}: {e.strerror}\n")
        return 127 if e.errno == errno.ENOENT else 126
    return 126  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
