"""The devices controller: v1 ``devices.deny``/``devices.allow`` lines and the v2 ``BPF_CGROUP_DEVICE``
program, both from one rule list.

A rule is ``{"allow": bool, "type": "a"|"c"|"b", "major": int|None, "minor": int|None, "access": str}``
(None = any; ``access`` a subset of "rwm"), in OCI order: the *last* rule that matches an access
decides it, and an access no rule matches is denied (runtime-spec config-linux.md "Allowed Device
Cgroup"; kernel doc admin-guide/cgroup-v1/devices.rst).  Type "a" means every device and takes no
major/minor.

v2 has no device files: the kernel runs an eBPF program of type BPF_PROG_TYPE_CGROUP_DEVICE attached
to the cgroup (include/uapi/linux/bpf.h: ``struct bpf_cgroup_dev_ctx { u32 access_type; u32 major;
u32 minor; }``, access_type = ``BPF_DEVCG_ACC_* << 16 | BPF_DEVCG_DEV_*``; return 1 allows, 0 denies).
The program is generated as runc's and crun's are: load the context into r2 (type), r3 (access),
r4 (major), r5 (minor); one block per rule, newest rule first, each jumping to the next block on the
first mismatch and otherwise returning the rule's verdict; the last instruction pair denies (left out
after a rule that matches everything, as the verifier refuses unreachable code).
bpf(2) is called through ctypes (no library in between).
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct

from ....errors import LaunchFailed
from .limits import refusal

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# include/uapi/linux/bpf.h
BPF_PROG_LOAD, BPF_PROG_ATTACH = 5, 8
BPF_PROG_TYPE_CGROUP_DEVICE = 15
BPF_CGROUP_DEVICE = 6  # enum bpf_attach_type
BPF_F_ALLOW_MULTI = 2
DEV_BLOCK, DEV_CHAR = 1, 2  # BPF_DEVCG_DEV_*
ACC = {"m": 1, "r": 2, "w": 4}  # BPF_DEVCG_ACC_*
_SYS_BPF = {"x86_64": 321, "aarch64": 280, "armv7l": 386, "ppc64le": 361, "s390x": 351, "riscv64": 280}


def validate(rules: list[dict[str, Any]]) -> None:
    """Refuse a malformed rule with its pointer (``/linux/resources/devices/N/...``)."""
    for i, r in enumerate(rules):
        p = f"/linux/resources/devices/{i}"
        if not isinstance(r.get("allow"), bool):
            raise refusal(f"{p}/allow", "must be true or false")
        if r.get("type", "a") not in ("a", "c", "b"):
            raise refusal(f"{p}/type", f"{r.get('type')!r} is not a, c or b")
        for k in ("major", "minor"):
            v = r.get(k)
            if v is not None and not (isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 32):
                raise refusal(f"{p}/{k}", f"{v!r} is not a device number (or null for any)")
            if v is not None and r.get("type", "a") == "a":
                raise refusal(
                    f"{p}/{k}", 'type "a" (all devices) takes no major/minor', 'use type "c" or "b"'
                )
        acc = r.get("access", "rwm")
        if not isinstance(acc, str) or set(acc) - set("rwm"):
            raise refusal(f"{p}/access", f"{acc!r} is not a subset of rwm")


def v1_lines(rules: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """``(file, line)`` writes for a v1 devices cgroup: deny everything, then each rule in order.

    A rule for every device ("a") switches the kernel's default (allow-all or deny-all, clearing the
    exceptions); later rules add or remove exceptions, which gives "last match wins".
    """
    out = [("devices.deny", "a")]
    for r in rules:
        acc = r.get("access", "rwm")
        if not acc:
            continue
        f = "devices.allow" if r["allow"] else "devices.deny"
        if r.get("type", "a") == "a":
            out.append((f, "a"))
            continue
        major = "*" if r.get("major") is None else str(r["major"])
        minor = "*" if r.get("minor") is None else str(r["minor"])
        out.append((f, f"{r['type']} {major}:{minor} {acc}"))
    return out


def _insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)


# opcodes: class | op | source (include/uapi/linux/bpf_common.h, bpf.h)
_LDXW, _AND32K, _RSH32K, _MOV32K = 0x61, 0x54, 0x74, 0xB4
_MOV32X, _JNEK, _JNEX, _EXIT = 0xBC, 0x55, 0x5D, 0x95


def program(rules: list[dict[str, Any]]) -> bytes:
    """The eBPF instructions (8 bytes each, little-endian) of the device filter for ``rules``."""
    if struct.pack("=H", 1) != struct.pack("<H", 1):
        raise LaunchFailed("the cgroup v2 device filter is built for little-endian hosts only")
    code = [
        _insn(_LDXW, dst=2, src=1, off=0),  # r2 = ctx->access_type
        _insn(_AND32K, dst=2, imm=0xFFFF),  # r2 = device type
        _insn(_LDXW, dst=3, src=1, off=0),
        _insn(_RSH32K, dst=3, imm=16),  # r3 = requested access
        _insn(_LDXW, dst=4, src=1, off=4),  # r4 = major
        _insn(_LDXW, dst=5, src=1, off=8),  # r5 = minor
    ]
    for r in reversed(rules):
        acc = r.get("access", "rwm")
        if not acc:
            continue
        checks: list[list[tuple[int, int, int, int]]] = []  # each: instructions (code, dst, src, imm)
        kind = r.get("type", "a")
        if kind != "a":
            checks.append([(_JNEK, 2, 0, DEV_BLOCK if kind == "b" else DEV_CHAR)])
        mask = sum(ACC[c] for c in set(acc))
        if mask != 7:  # the request must lie inside the rule's access: (r3 & mask) == r3
            checks.append([(_MOV32X, 1, 3, 0), (_AND32K, 1, 0, mask), (_JNEX, 1, 3, 0)])
        if r.get("major") is not None:
            checks.append([(_JNEK, 4, 0, int(r["major"]))])
        if r.get("minor") is not None:
            checks.append([(_JNEK, 5, 0, int(r["minor"]))])
        flat = [i for c in checks for i in c]
        for n, (op, dst, src, imm) in enumerate(flat):
            jump = op in (_JNEK, _JNEX)
            code.append(_insn(op, dst=dst, src=src, off=(len(flat) - n - 1) + 2 if jump else 0, imm=imm))
        code += [_insn(_MOV32K, dst=0, imm=1 if r["allow"] else 0), _insn(_EXIT)]
        if not flat:  # matches every access: what follows could never run (the verifier refuses it)
            return b"".join(code)
    code += [_insn(_MOV32K, dst=0, imm=0), _insn(_EXIT)]
    return b"".join(code)


def _bpf(cmd: int, attr: ctypes.Array[ctypes.c_char]) -> int:
    nr = _SYS_BPF.get(platform.machine())
    if nr is None:
        raise LaunchFailed(f"bpf(2) number unknown for {platform.machine()}: no cgroup v2 device filter here")
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    ret = libc.syscall(ctypes.c_long(nr), ctypes.c_int(cmd), attr, ctypes.c_uint(len(attr)))
    if ret < 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return int(ret)


def load(rules: list[dict[str, Any]]) -> int:
    """BPF_PROG_LOAD the filter for ``rules``; return the program fd (the caller closes it).

    Raises:
        LaunchFailed: the kernel refused it, with the verifier's log when it gave one.
    """
    insns = ctypes.create_string_buffer(program(rules))
    lic = ctypes.create_string_buffer(b"Apache")
    log = ctypes.create_string_buffer(1 << 16)
    attr = ctypes.create_string_buffer(128)
    struct.pack_into(
        "<IIQQIIQ",
        attr,
        0,
        BPF_PROG_TYPE_CGROUP_DEVICE,
        len(insns.raw) // 8,
        ctypes.addressof(insns),
        ctypes.addressof(lic),
        1,
        len(log),
        ctypes.addressof(log),
    )
    struct.pack_into("<16s", attr, 48, b"sandbox_devices")
    struct.pack_into("<I", attr, 68, BPF_CGROUP_DEVICE)  # expected_attach_type
    try:
        return _bpf(BPF_PROG_LOAD, attr)
    except OSError as e:
        detail = [" | ".join(log.value.decode(errors="replace").strip().splitlines()[-3:])]
        why = f"{e.strerror} {detail[0]}".strip()
        raise LaunchFailed(
            f"the kernel refused the cgroup v2 device filter: {why}",
            "run as root (CAP_BPF/CAP_SYS_ADMIN) on a kernel with BPF_CGROUP_DEVICE",
        ) from e


def attach(cgroup_dir: str, rules: list[dict[str, Any]]) -> None:
    """Load the filter for ``rules`` and attach it to ``cgroup_dir`` (BPF_PROG_ATTACH with
    BPF_F_ALLOW_MULTI: the parents' filters still run, so a child can only narrow them).  The kernel
    keeps the program while it is attached; it goes with the cgroup.

    Raises:
        LaunchFailed: load or attach refused.
    """
    prog = load(rules)
    try:
        cg = os.open(cgroup_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            attr = ctypes.create_string_buffer(
                struct.pack("<IIII", cg, prog, BPF_CGROUP_DEVICE, BPF_F_ALLOW_MULTI).ljust(128, b"\0"), 128
            )
            _bpf(BPF_PROG_ATTACH, attr)
        except OSError as e:
            raise LaunchFailed(
                f"cannot attach the device filter to {cgroup_dir}: {e.strerror}",
                "run as root on a cgroup v2 hierarchy",
            ) from e
        finally:
            os.close(cg)
    finally:
        os.close(prog)
