"""OCI ``linux.seccomp`` → a classic-BPF program for ``bwrap --seccomp FD``, and the default tenant filter.

Two public steps, in the order the runtime uses them:

* :func:`validate` checks a section against OCI runtime-spec config-linux.md "Seccomp" and against this host's
  libseccomp (every syscall name must resolve) and returns :class:`~sandbox_shim.errors.BundleProblem` s with
  exact JSON pointers.  Messages quote syscall names only, never other config values.
* :func:`compile_bpf` builds the program with libseccomp (through ``pyseccomp``) and exports it.  It raises
  instead of ever returning an empty or more permissive program.

Semantics borrowed from runc (the reference runtime), so the same config behaves the same way here:

* a rule whose action equals the default action is skipped (libseccomp refuses it with EACCES);
* a rule with two or more ``args`` on the same index is split into one rule per condition (OR), because
  libseccomp cannot AND two comparisons on one argument; otherwise all conditions of a rule are ANDed;
* ``errnoRet`` defaults to EPERM and is only allowed with SCMP_ACT_ERRNO and SCMP_ACT_TRACE.

Not supported, refused with a problem: SCMP_ACT_NOTIFY and ``listenerPath`` (no listener process exists:
the notifying syscall would block forever), and the ``flags`` LOG, SPEC_ALLOW and WAIT_KILLABLE_RECV
(bwrap loads the program with prctl(PR_SET_SECCOMP), which takes no flags).  SECCOMP_FILTER_FLAG_TSYNC is
accepted: bwrap installs the filter in its single-threaded child just before exec, so every thread has it.

Architectures.  libseccomp always starts a filter with the native arch.  For an OCI section we add each
``architectures`` entry (as runc does); syscalls made through any other ABI hit the bad-arch action, which
libseccomp sets to KILL.  The default tenant filter adds the native arch's companion ABIs the kernel also
accepts (x86_64: x86 via ``int 0x80`` and x32; aarch64: arm; s390x: s390), the same list Docker's default
profile uses, so a tenant gets EPERM rather than SIGSYS from a 32-bit binary, and no ABI is left unfiltered.
"""

from __future__ import annotations

import errno
import os
import stat

from sandbox_shim.errors import BundleInvalid, BundleProblem, CannotEnforce, LaunchFailed

TYPE_CHECKING = False  # typing is not loaded at run time (bundle validation imports this module)
if TYPE_CHECKING:
    from typing import Any

SPEC = "OCI runtime-spec config-linux.md#seccomp"

# Action values from <linux/seccomp.h> (the kernel ABI; libseccomp's SCMP_ACT_* are the same numbers).
_ACTIONS: dict[str, int] = {
    "SCMP_ACT_KILL": 0x00000000,
    "SCMP_ACT_KILL_THREAD": 0x00000000,
    "SCMP_ACT_KILL_PROCESS": 0x80000000,
    "SCMP_ACT_TRAP": 0x00030000,
    "SCMP_ACT_ERRNO": 0x00050000,
    "SCMP_ACT_TRACE": 0x7FF00000,
    "SCMP_ACT_LOG": 0x7FFC0000,
    "SCMP_ACT_ALLOW": 0x7FFF0000,
}
# errnoRet limits: an errno the kernel will return (MAX_ERRNO, seccomp(2)); TRACE's 16-bit message data.
_RET_DATA_MAX = {"SCMP_ACT_ERRNO": 4095, "SCMP_ACT_TRACE": 0xFFFF}

# Comparison operators, enum scmp_compare in <seccomp.h>.
_OPS: dict[str, int] = {
    "SCMP_CMP_NE": 1,
    "SCMP_CMP_LT": 2,
    "SCMP_CMP_LE": 3,
    "SCMP_CMP_EQ": 4,
    "SCMP_CMP_GE": 5,
    "SCMP_CMP_GT": 6,
    "SCMP_CMP_MASKED_EQ": 7,
}

# OCI name → attribute of pyseccomp.Arch.
ARCHES: tuple[str, ...] = (
    "X86",
    "X86_64",
    "X32",
    "ARM",
    "AARCH64",
    "MIPS",
    "MIPS64",
    "MIPS64N32",
    "MIPSEL",
    "MIPSEL64",
    "MIPSEL64N32",
    "PPC",
    "PPC64",
    "PPC64LE",
    "S390",
    "S390X",
    "PARISC",
    "PARISC64",
    "RISCV64",
)
_COMPANION_ARCHES = {"X86_64": ("X86", "X32"), "AARCH64": ("ARM",), "S390X": ("S390",)}

_ACCEPTED_FLAGS = {"SECCOMP_FILTER_FLAG_TSYNC"}
_REFUSED_FLAGS = {
    "SECCOMP_FILTER_FLAG_LOG",
    "SECCOMP_FILTER_FLAG_SPEC_ALLOW",
    "SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV",
}

BPF_MAXINSNS = 4096  # the kernel's limit on one classic-BPF program (seccomp(2), EINVAL beyond it)

TENANT_DENIED_SYSCALLS: dict[str, tuple[str, ...]] = {
    "keyring": ("keyctl", "add_key", "request_key"),
    "kernel_attack_surface": ("bpf", "perf_event_open", "userfaultfd", "lookup_dcookie", "fanotify_init"),
    "kernel_code": (
        "kexec_load",
        "kexec_file_load",
        "init_module",
        "finit_module",
        "delete_module",
        "create_module",
        "get_kernel_syms",
        "query_module",
        "nfsservctl",
    ),
    "mounts_and_namespaces": ("mount", "umount", "umount2", "pivot_root", "unshare", "setns"),
    "new_mount_api": (
        "fsopen",
        "fsconfig",
        "fsmount",
        "fspick",
        "move_mount",
        "open_tree",
        "open_tree_attr",
        "mount_setattr",
    ),
    "io_uring": ("io_uring_setup", "io_uring_enter", "io_uring_register"),
    "handles_escape": ("open_by_handle_at", "name_to_handle_at"),
    "other_processes": ("ptrace", "process_vm_readv", "process_vm_writev"),
    "host_state": ("swapon", "swapoff", "reboot", "acct", "quotactl", "syslog", "vhangup", "iopl", "ioperm"),
    "clock": ("clock_settime", "settimeofday", "adjtimex", "clock_adjtime", "stime"),
}
"""Syscalls the default tenant filter answers with EPERM (the rest are allowed), by group.

* keyring: the kernel keyring is not namespaced; a tenant could read or fill another's keys.
* kernel_attack_surface: eBPF, perf, userfaultfd (a classic exploit primitive that stalls kernel copies),
  lookup_dcookie and fanotify: large, frequently exploited kernel code a tenant program never needs.
* kernel_code: loading, unloading or replacing kernel code (incl. the long-removed module calls, denied
  where the ABI still has a number, and nfsservctl).
* mounts_and_namespaces: the sandbox's view of the filesystem and its namespaces are fixed by bwrap;
  making new ones or joining others is how a tenant would undo them (clone with CLONE_NEW* is covered by
  :data:`TENANT_CLONE_NAMESPACE_FLAGS`).
* new_mount_api: fsopen/fsconfig/fsmount/fspick/move_mount/open_tree(_attr)/mount_setattr do what mount(2)
  does through file descriptors: with CAP_SYS_ADMIN in a user namespace of its own a tenant would
  otherwise clear the read-only flag of the rootfs or of /proc/sys, or attach a detached copy of a tree
  (open_tree OPEN_TREE_CLONE).
* io_uring: its operations run in kernel workers that seccomp never sees (Docker's default profile
  denies it since 2023; a large, often exploited surface).
* handles_escape: open_by_handle_at opens any inode of a mounted filesystem by handle, bypassing the
  mount tree (the "shocker" container escape); name_to_handle_at is its counterpart.
* other_processes: reading or steering other processes' memory.
* host_state: swap, reboot, process accounting, quotas, the kernel log, the terminal, raw I/O ports.
* clock: the system clock is shared by every sandbox and the host.

Source: the Docker/Moby default seccomp profile and its rationale (docs.docker.com "Seccomp security
profiles"); each name is denied where this host's libseccomp resolves it.
"""

TENANT_CLONE_NAMESPACE_FLAGS: dict[str, int] = {
    "CLONE_NEWNS": 0x00020000,
    "CLONE_NEWCGROUP": 0x02000000,
    "CLONE_NEWUTS": 0x04000000,
    "CLONE_NEWIPC": 0x08000000,
    "CLONE_NEWUSER": 0x10000000,
    "CLONE_NEWPID": 0x20000000,
    "CLONE_NEWNET": 0x40000000,
}
"""clone(2) flags that make new namespaces: clone with any of them set in its flags argument gets EPERM.

One MASKED_EQ rule per flag (flags & F == F), because a rule's conditions are ANDed.  CLONE_NEWTIME is
absent: in clone(2) its bit lies in the exit-signal byte, so it can only be asked for with clone3 or
unshare, both denied.  clone3 passes its flags in memory that seccomp cannot inspect, so it gets ENOSYS
and glibc falls back to clone, which is filtered (what Docker's profile does).  The flags argument is
argument 0, except on s390/s390x where it is argument 1 (clone(2) NOTES).
"""


#: syscalls the tenant filter must deny even where this host's libseccomp cannot name them, by their
#: number in the unified table every arch of the tenant filter shares from 424 up (asm-generic
#: unistd.h; x32 adds __X32_SYSCALL_BIT).  open_tree_attr (Linux 6.15) clones a mount tree and sets its
#: attributes, like open_tree + mount_setattr.
NUMBERED_DENIALS: dict[str, int] = {"open_tree_attr": 467}
_X32_SYSCALL_BIT = 0x40000000


def numbered_program() -> bytes | None:
    """A classic-BPF program answering EPERM to each ``NUMBERED_DENIALS`` syscall this host's libseccomp
    cannot resolve (so the tenant filter could not list it), and allowing everything else; None when
    libseccomp knows them all.  Loaded stacked with the tenant filter (whose bad-arch action already
    kills every ABI other than the listed ones).  Raises CannotEnforce without libseccomp.

    Program (struct sock_filter, seccomp(2)): load seccomp_data.nr; for each number (and its x32 form)
    jump to RET ERRNO(EPERM) on equality; else RET ALLOW.
    """
    import struct

    s = _lib()
    nrs = [nr for name, nr in NUMBERED_DENIALS.items() if s.resolve_syscall(s.Arch.NATIVE, name) == -1]
    if not nrs:
        return None
    values = [v for nr in nrs for v in (nr, nr | _X32_SYSCALL_BIT)]
    ld_w_abs, jeq_k, ret_k = 0x20, 0x15, 0x06
    insns = [(ld_w_abs, 0, 0, 0)]  # A = seccomp_data.nr (offset 0)
    for i, v in enumerate(values):
        insns.append((jeq_k, len(values) - i, 0, v))  # to the EPERM return, else next
    insns.append((ret_k, 0, 0, _ACTIONS["SCMP_ACT_ALLOW"]))
    insns.append((ret_k, 0, 0, _ACTIONS["SCMP_ACT_ERRNO"] | errno.EPERM))
    return b"".join(struct.pack("=HBBI", *x) for x in insns)


def _lib() -> Any:
    """Import pyseccomp (ctypes binding to libseccomp.so.2) lazily; lifecycle verbs that never compile a
    filter should not pay for it.  Raises CannotEnforce when libseccomp is missing."""
    try:
        import pyseccomp
    except (ImportError, RuntimeError, OSError) as e:
        raise CannotEnforce("seccomp", f"libseccomp is not usable on this host: {e}") from e
    return pyseccomp


def _resolver() -> Any:
    """``name -> number`` for the native arch through the thin binding (``libseccomp.py``: no
    pyseccomp import, so no ``ldconfig -p``).  Raises CannotEnforce when libseccomp is missing."""
    from . import libseccomp

    try:
        libseccomp.load()
    except OSError as e:
        raise CannotEnforce("seccomp", f"libseccomp is not usable on this host: {e}") from e
    return libseccomp.resolve


def _show(name: str) -> str:
    """A syscall name as it may appear in a message: quoted and cut short."""
    return repr(name[:64] + ("…" if len(name) > 64 else ""))


def _is_uint(v: Any, bits: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**bits


def native_arch() -> str:
    """The OCI name (``SCMP_ARCH_*``) of this host's native arch, per libseccomp's seccomp_arch_native(3)."""
    s = _lib()
    token = s.system_arch()
    for name in ARCHES:
        if getattr(s.Arch, name) == token:
            return f"SCMP_ARCH_{name}"
    raise CannotEnforce("seccomp", f"libseccomp reports an unknown native arch token {token:#x}")


def default_tenant_section() -> dict[str, Any]:
    """The default tenant filter as an OCI ``linux.seccomp`` section.

    Returns: ``{"defaultAction": "SCMP_ACT_ALLOW", "architectures": [native, companions...],
    "syscalls": [...]}`` denying :data:`TENANT_DENIED_SYSCALLS` with EPERM, clone with any
    :data:`TENANT_CLONE_NAMESPACE_FLAGS` flag with EPERM, and clone3 with ENOSYS.  Names this host's
    libseccomp does not know are left out.  Raises CannotEnforce without libseccomp.
    """
    s = _lib()
    native = native_arch()
    companions = _COMPANION_ARCHES.get(native.removeprefix("SCMP_ARCH_"), ())
    flags_arg = 1 if native in ("SCMP_ARCH_S390X", "SCMP_ARCH_S390") else 0
    names = [
        n
        for group in TENANT_DENIED_SYSCALLS.values()
        for n in group
        if s.resolve_syscall(s.Arch.NATIVE, n) != -1
    ]
    syscalls: list[dict[str, Any]] = [{"names": names, "action": "SCMP_ACT_ERRNO", "errnoRet": errno.EPERM}]
    for flag in TENANT_CLONE_NAMESPACE_FLAGS.values():
        syscalls.append(
            {
                "names": ["clone"],
                "action": "SCMP_ACT_ERRNO",
                "errnoRet": errno.EPERM,
                "args": [{"index": flags_arg, "value": flag, "valueTwo": flag, "op": "SCMP_CMP_MASKED_EQ"}],
            }
        )
    syscalls.append({"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": errno.ENOSYS})
    # CAP_MKNOD is granted (orchestrators' defaults) but no character or block node can be made: one
    # made in storage/ or a writable rootfs would outlive the sandbox on the host's file system, where
    # nodev and the devices cgroup do not reach (mknod(2) mode argument, S_IFMT bits: inode(7))
    for name, mode_arg in (("mknod", 1), ("mknodat", 2)):
        if s.resolve_syscall(s.Arch.NATIVE, name) == -1:
            continue
        for kind in (stat.S_IFCHR, stat.S_IFBLK):
            syscalls.append(
                {
                    "names": [name],
                    "action": "SCMP_ACT_ERRNO",
                    "errnoRet": errno.EPERM,
                    "args": [
                        {"index": mode_arg, "value": 0o170000, "valueTwo": kind, "op": "SCMP_CMP_MASKED_EQ"}
                    ],
                }
            )
    return {
        "defaultAction": "SCMP_ACT_ALLOW",
        "architectures": [native, *(f"SCMP_ARCH_{a}" for a in companions)],
        "syscalls": syscalls,
    }


def _check_action(obj: dict[str, Any], key: str, ret_key: str, ptr: str, out: list[BundleProblem]) -> None:
    """Check an action field (``defaultAction`` / ``action``) and its errno field together."""
    action = obj.get(key)
    if action == "SCMP_ACT_NOTIFY":
        out.append(
            BundleProblem(
                f"{ptr}/{key}",
                "SCMP_ACT_NOTIFY is not supported: this runtime runs no "
                "seccomp listener, so a notifying syscall would never return",
                f"{SPEC}: {key}",
                "use SCMP_ACT_ERRNO or SCMP_ACT_KILL_PROCESS instead",
            )
        )
        return
    if action not in _ACTIONS:
        why = f"{key} is required" if action is None else f"{key} is not a known seccomp action"
        out.append(
            BundleProblem(f"{ptr}/{key}", why, f"{SPEC}: {key}", "one of " + ", ".join(sorted(_ACTIONS)))
        )
        return
    if ret_key in obj:
        limit = _RET_DATA_MAX.get(action)
        if limit is None:
            out.append(
                BundleProblem(
                    f"{ptr}/{ret_key}",
                    f"{ret_key} is only allowed with SCMP_ACT_ERRNO or SCMP_ACT_TRACE",
                    f"{SPEC}: {ret_key}",
                    f"remove {ret_key}",
                )
            )
        elif not _is_uint(obj[ret_key], 32) or obj[ret_key] > limit:
            out.append(
                BundleProblem(
                    f"{ptr}/{ret_key}",
                    f"{ret_key} must be an integer from 0 to {limit}",
                    f"{SPEC}: {ret_key}; seccomp(2) SECCOMP_RET_DATA",
                )
            )


def _check_args(args: Any, ptr: str, out: list[BundleProblem]) -> None:
    if not isinstance(args, list):
        out.append(BundleProblem(ptr, "args must be an array", f"{SPEC}: syscalls[].args"))
        return
    if len(args) > 6:
        out.append(
            BundleProblem(ptr, "at most 6 argument conditions per rule", "libseccomp seccomp_rule_add(3)")
        )
    for k, arg in enumerate(args):
        p = f"{ptr}/{k}"
        if not isinstance(arg, dict):
            out.append(
                BundleProblem(p, "an argument condition must be an object", f"{SPEC}: syscalls[].args")
            )
            continue
        if not _is_uint(arg.get("index"), 8) or arg["index"] > 5:
            out.append(
                BundleProblem(
                    f"{p}/index",
                    "index must be an integer from 0 to 5 (syscalls take at most six arguments)",
                    f"{SPEC}: syscalls[].args[].index; seccomp(2)",
                )
            )
        if not _is_uint(arg.get("value"), 64):
            out.append(
                BundleProblem(
                    f"{p}/value",
                    "value is required and must be an unsigned 64-bit integer",
                    f"{SPEC}: syscalls[].args[].value",
                )
            )
        if "valueTwo" in arg and not _is_uint(arg["valueTwo"], 64):
            out.append(
                BundleProblem(
                    f"{p}/valueTwo",
                    "valueTwo must be an unsigned 64-bit integer",
                    f"{SPEC}: syscalls[].args[].valueTwo",
                )
            )
        if arg.get("op") not in _OPS:
            out.append(
                BundleProblem(
                    f"{p}/op",
                    "op is required and must be a known comparison operator",
                    f"{SPEC}: syscalls[].args[].op",
                    "one of " + ", ".join(_OPS),
                )
            )


def validate(section: dict[str, Any] | None, pointer: str = "/linux/seccomp") -> list[BundleProblem]:
    """Check an OCI ``linux.seccomp`` section; return every problem found (empty list: usable here).

    Args:
        section: the parsed section, or None (no section: the default tenant filter applies, nothing
            to check).
        pointer: JSON pointer of the section inside config.json; problems point below it, e.g.
            ``/linux/seccomp/syscalls/3/names/1`` for a syscall name libseccomp does not know.
    Returns:
        ``list[BundleProblem]``.  Rules: OCI runtime-spec config-linux.md "Seccomp" (fields, actions,
        operators, architectures, flags), seccomp(2) (argument count, errno range), and this host's
        libseccomp (names must resolve via seccomp_syscall_resolve_name(3)).  Only syscall names are quoted.
    Raises:
        CannotEnforce: libseccomp is missing, so names cannot be checked.
    """
    if section is None:
        return []
    out: list[BundleProblem] = []
    if not isinstance(section, dict):
        return [BundleProblem(pointer, "linux.seccomp must be an object", SPEC)]
    resolve = _resolver()
    _check_action(section, "defaultAction", "defaultErrnoRet", pointer, out)
    arches = section.get("architectures", [])
    if not isinstance(arches, list):
        out.append(BundleProblem(f"{pointer}/architectures", "architectures must be an array", SPEC))
        arches = []
    for i, arch in enumerate(arches):
        if not (isinstance(arch, str) and arch.startswith("SCMP_ARCH_") and arch[10:] in ARCHES):
            out.append(
                BundleProblem(
                    f"{pointer}/architectures/{i}",
                    "unknown architecture",
                    f"{SPEC}: architectures",
                    "one of SCMP_ARCH_" + ", SCMP_ARCH_".join(ARCHES),
                )
            )
    flags = section.get("flags", [])
    for i, flag in enumerate(flags if isinstance(flags, list) else [None]):
        p = f"{pointer}/flags/{i}" if isinstance(flags, list) else f"{pointer}/flags"
        if flag in _REFUSED_FLAGS:
            out.append(
                BundleProblem(
                    p,
                    f"{flag} cannot be applied: bwrap loads the filter with "
                    "prctl(PR_SET_SECCOMP), which takes no flags",
                    f"{SPEC}: flags",
                    "remove the flag",
                )
            )
        elif flag not in _ACCEPTED_FLAGS:
            out.append(
                BundleProblem(
                    p,
                    "unknown seccomp flag (or flags is not an array of strings)",
                    f"{SPEC}: flags",
                    "SECCOMP_FILTER_FLAG_TSYNC is the one supported flag",
                )
            )
    for key in ("listenerPath", "listenerMetadata"):
        if key in section:
            out.append(
                BundleProblem(
                    f"{pointer}/{key}",
                    f"{key} is not supported: this runtime does not hand seccomp notifications to a listener",
                    f"{SPEC}: {key}",
                    f"remove {key}",
                )
            )
    rules = section.get("syscalls", [])
    if not isinstance(rules, list):
        out.append(BundleProblem(f"{pointer}/syscalls", "syscalls must be an array", SPEC))
        rules = []
    for i, rule in enumerate(rules):
        p = f"{pointer}/syscalls/{i}"
        if not isinstance(rule, dict):
            out.append(BundleProblem(p, "a syscalls entry must be an object", f"{SPEC}: syscalls"))
            continue
        names = rule.get("names")
        if not isinstance(names, list) or not names:
            out.append(
                BundleProblem(
                    f"{p}/names",
                    "names is required: a non-empty array of syscall names",
                    f"{SPEC}: syscalls[].names",
                )
            )
            names = []
        for j, name in enumerate(names):
            if not isinstance(name, str) or not name:
                out.append(
                    BundleProblem(
                        f"{p}/names/{j}",
                        "a syscall name must be a non-empty string",
                        f"{SPEC}: syscalls[].names",
                    )
                )
            elif resolve(name) == -1:  # __NR_SCMP_ERROR
                out.append(
                    BundleProblem(
                        f"{p}/names/{j}",
                        f"unknown syscall {_show(name)}: this host's libseccomp cannot resolve it",
                        "libseccomp seccomp_syscall_resolve_name(3)",
                        "check the spelling, or remove it for this host",
                    )
                )
        _check_action(rule, "action", "errnoRet", p, out)
        if "args" in rule:
            _check_args(rule["args"], f"{p}/args", out)
    return out


def _action_value(obj: dict[str, Any], key: str, ret_key: str) -> int:
    name = obj[key]
    value = _ACTIONS[name]
    if name in _RET_DATA_MAX:
        value |= int(obj.get(ret_key, errno.EPERM)) & 0xFFFF
    return value


def _conditions(s: Any, args: list[dict[str, Any]]) -> list[list[Any]]:
    """One list of ANDed conditions per rule to add (runc: split into single-condition rules when two
    conditions share an index)."""
    conds = [s.Arg(a["index"], _OPS[a["op"]], a["value"], a.get("valueTwo", 0)) for a in args]
    indexes = [a["index"] for a in args]
    if len(set(indexes)) < len(indexes):
        return [[c] for c in conds]
    return [conds]


def compile_bpf(section: dict[str, Any] | None) -> bytes:
    """Compile an OCI ``linux.seccomp`` section (or, for None, :func:`default_tenant_section`) to BPF.

    Args:
        section: the parsed section; None selects the default tenant filter.
    Returns:
        the classic-BPF program as raw ``struct sock_filter`` entries (8 bytes each, native endianness),
        the format ``bwrap --seccomp FD`` reads and passes to prctl(PR_SET_SECCOMP) (seccomp(2)).
    Raises:
        BundleInvalid: the section has problems (see :func:`validate`), libseccomp refused an action, arch
            or rule (pointer names the entry), or the program exceeds the kernel's 4096 instructions.
        LaunchFailed: libseccomp failed to create or export the filter.
        CannotEnforce: libseccomp is missing.
    """
    ptr = "/linux/seccomp"
    if section is None:
        section = default_tenant_section()
    problems = validate(section, ptr)
    if problems:
        raise BundleInvalid(problems)
    s = _lib()
    default = _action_value(section, "defaultAction", "defaultErrnoRet")
    try:
        filt = s.SyscallFilter(default)
    except OSError as e:
        raise BundleInvalid(
            [
                BundleProblem(
                    f"{ptr}/defaultAction",
                    f"libseccomp refused this default action on this host ({e.strerror})",
                    "libseccomp seccomp_init(3)",
                )
            ]
        ) from e
    for i, arch in enumerate(section.get("architectures", [])):
        token = getattr(s.Arch, arch[10:])
        try:
            if not filt.exist_arch(token):
                filt.add_arch(token)
        except OSError as e:
            raise BundleInvalid(
                [
                    BundleProblem(
                        f"{ptr}/architectures/{i}",
                        f"libseccomp refused this architecture ({e.strerror})",
                        "libseccomp seccomp_arch_add(3)",
                    )
                ]
            ) from e
    for i, rule in enumerate(section.get("syscalls", [])):
        action = _action_value(rule, "action", "errnoRet")
        if action == default:
            continue  # runc: a rule that repeats the default changes nothing (libseccomp: EACCES)
        for j, name in enumerate(rule["names"]):
            for conds in _conditions(s, rule.get("args", [])):
                try:
                    filt.add_rule(action, name, *conds)
                except OSError as e:
                    raise BundleInvalid(
                        [
                            BundleProblem(
                                f"{ptr}/syscalls/{i}/names/{j}",
                                f"libseccomp refused the rule for {_show(name)} ({e.strerror})",
                                "libseccomp seccomp_rule_add(3)",
                            )
                        ]
                    ) from e
    fd = os.memfd_create("sandbox-shim-seccomp")
    try:
        filt.export_bpf(_Fd(fd))
        size = os.lseek(fd, 0, os.SEEK_CUR)
        program = os.pread(fd, size, 0)
    except OSError as e:
        raise LaunchFailed(f"libseccomp could not export the seccomp program: {e.strerror}") from e
    finally:
        os.close(fd)
    if not program or len(program) % 8:
        raise LaunchFailed(f"libseccomp exported a malformed seccomp program ({len(program)} bytes)")
    if len(program) // 8 > BPF_MAXINSNS:
        raise BundleInvalid(
            [
                BundleProblem(
                    ptr,
                    f"the seccomp program has {len(program) // 8} instructions; "
                    f"the kernel accepts at most {BPF_MAXINSNS}",
                    "seccomp(2) EINVAL",
                    "merge rules or drop architectures",
                )
            ]
        )
    return program


class _Fd:
    """The ``fileno()`` object pyseccomp's export_bpf wants."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def fileno(self) -> int:
        return self._fd
