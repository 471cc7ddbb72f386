"""seccomp: OCI ``linux.seccomp`` → BPF, checked on the real kernel through real bwrap.

Every enforcement test runs a *control* first (the same probe with no filter, or with an allow-all filter
compiled by the same code, must succeed and print MARK) and then the *breach* under the filter (it must fail
with the expected errno text and print no MARK).  Probes that need the host's Python (raw clone/clone3, a
32-bit ``int 0x80`` syscall) bind the host root read-only; the others run in the busybox rootfs.
"""

from __future__ import annotations

import errno
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

if not sys.platform.startswith("linux"):
    pytest.skip("seccomp is Linux only", allow_module_level=True)

pyseccomp = pytest.importorskip("pyseccomp")

from sandbox_shim.errors import BundleInvalid, LaunchFailed  # noqa: E402
from sandbox_shim.platforms.linux import seccomp  # noqa: E402

MARK = "MARK-7f3a"
ALLOW_ALL: dict[str, Any] = {"defaultAction": "SCMP_ACT_ALLOW"}
needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bwrap is not installed")


def run_sandbox(root: Path | None, argv: list[str], bpf: bytes | None) -> subprocess.CompletedProcess[str]:
    """Run argv under bwrap (``root`` None: the host root, read-only) with ``bpf`` passed as --seccomp FD."""
    bind = ["--ro-bind", str(root), "/"] if root is not None else ["--ro-bind", "/", "/"]
    cmd = [
        "bwrap",
        *bind,
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--tmpfs",
        "/tmp",
        "--unshare-pid",
        "--die-with-parent",
        "--clearenv",
        "--setenv",
        "PATH",
        "/bin:/usr/bin",
    ]
    fds: tuple[int, ...] = ()
    if bpf is not None:
        fd = os.memfd_create("test-seccomp")
        os.write(fd, bpf)
        os.lseek(fd, 0, os.SEEK_SET)
        cmd += ["--seccomp", str(fd)]
        fds = (fd,)
    try:
        return subprocess.run([*cmd, "--", *argv], capture_output=True, text=True, timeout=60, pass_fds=fds)
    finally:
        for fd in fds:
            os.close(fd)


def sh(rootfs: Path, script: str, bpf: bytes | None) -> subprocess.CompletedProcess[str]:
    return run_sandbox(rootfs, ["/bin/sh", "-c", script], bpf)


def py(code: str, bpf: bytes | None, *args: str) -> subprocess.CompletedProcess[str]:
    return run_sandbox(None, [os.path.realpath(sys.executable), "-I", "-c", code, *args], bpf)


def control_then_breach(run: Any, bpf: bytes, control_bpf: bytes | None, error: str) -> str:
    """Control prints MARK; the breach prints no MARK and shows ``error``.  Returns the breach's stdout."""
    control = run(control_bpf)
    assert MARK in control.stdout, f"control failed, probe unusable: {control.stdout!r} {control.stderr!r}"
    breach = run(bpf)
    assert MARK not in breach.stdout, f"breach was not stopped: {breach.stdout!r} {breach.stderr!r}"
    assert error in breach.stderr + breach.stdout, (breach.stdout, breach.stderr)
    return breach.stdout


@pytest.fixture(scope="module")
def tenant_bpf() -> bytes:
    return seccomp.compile_bpf(None)


@pytest.fixture(scope="module")
def allow_bpf() -> bytes:
    return seccomp.compile_bpf(ALLOW_ALL)


# ---------------------------------------------------------------- default tenant filter, real kernel


@needs_bwrap
@pytest.mark.parametrize(
    "probe, error",
    [
        ("unshare -n true", "Operation not permitted"),
        ("unshare -m true", "Operation not permitted"),
        ("mount -t tmpfs none /tmp", "permission denied"),  # busybox's wording for EPERM from mount(2)
        ("umount /tmp", "Operation not permitted"),
    ],
)
def test_tenant_filter_denies_namespace_and_mount_syscalls(
    rootfs_template: Path, tenant_bpf: bytes, allow_bpf: bytes, probe: str, error: str
) -> None:
    control_then_breach(
        lambda bpf: sh(rootfs_template, f"{probe} && echo {MARK}", bpf), tenant_bpf, allow_bpf, error
    )


@needs_bwrap
def test_tenant_filter_leaves_ordinary_work_alone(rootfs_template: Path, tenant_bpf: bytes) -> None:
    # fork (clone without CLONE_NEW*), pipes, files, exec: a tenant program's everyday syscalls.
    r = sh(
        rootfs_template,
        f"echo hi > /tmp/f && cat /tmp/f | sh -c 'read x; echo $x-{MARK}'; mkdir /tmp/d",
        tenant_bpf,
    )
    assert r.returncode == 0, r.stderr
    assert f"hi-{MARK}" in r.stdout


CLONE_PROBE = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
if sys.argv[1] == "clone3":
    args = (ctypes.c_uint64 * 8)(0, 0, 0, 0, 17, 0, 0, 0)  # struct clone_args v0, exit_signal=SIGCHLD
    pid = libc.syscall(435, ctypes.byref(args), ctypes.c_size_t(64))
else:
    flags = ctypes.c_ulong(int(sys.argv[1]) | 17)
    pid = libc.syscall(56, flags, ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))
if pid == 0:
    os._exit(0)
if pid < 0:
    print("ERRNO", os.strerror(ctypes.get_errno()))
    sys.exit(1)
os.waitpid(pid, 0)
print("MARK-7f3a")
"""


@needs_bwrap
@pytest.mark.skipif(platform.machine() != "x86_64", reason="raw syscall numbers in the probe are x86_64's")
@pytest.mark.parametrize("flag", sorted(seccomp.TENANT_CLONE_NAMESPACE_FLAGS))
def test_tenant_filter_denies_clone_with_namespace_flag(
    tenant_bpf: bytes, allow_bpf: bytes, flag: str
) -> None:
    value = str(seccomp.TENANT_CLONE_NAMESPACE_FLAGS[flag])
    control_then_breach(
        lambda bpf: py(CLONE_PROBE, bpf, value), tenant_bpf, allow_bpf, "ERRNO " + os.strerror(errno.EPERM)
    )


@needs_bwrap
@pytest.mark.skipif(platform.machine() != "x86_64", reason="raw syscall numbers in the probe are x86_64's")
def test_tenant_filter_allows_plain_clone_and_answers_clone3_with_enosys(
    tenant_bpf: bytes, allow_bpf: bytes
) -> None:
    plain = py(CLONE_PROBE, tenant_bpf, "0")
    assert MARK in plain.stdout, plain.stderr
    control_then_breach(
        lambda bpf: py(CLONE_PROBE, bpf, "clone3"),
        tenant_bpf,
        allow_bpf,
        "ERRNO " + os.strerror(errno.ENOSYS),
    )


INT80_PROBE = r"""
import ctypes, mmap
# push rbx; mov eax, 310 (i386 unshare); mov ebx, CLONE_NEWNET; int 0x80; pop rbx; ret
code = (b"\x53\xb8" + (310).to_bytes(4, "little") + b"\xbb" + (0x40000000).to_bytes(4, "little")
        + b"\xcd\x80\x5b\xc3")
mm = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
mm.write(code)
ret = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(mm)))()
print("RET", ret, flush=True)
if ret == 0:
    print("MARK-7f3a")
"""


@needs_bwrap
@pytest.mark.skipif(platform.machine() != "x86_64", reason="the 32-bit ABI probe is x86 machine code")
def test_tenant_filter_covers_the_32bit_abi(tenant_bpf: bytes, allow_bpf: bytes) -> None:
    control = py(INT80_PROBE, None)
    if f"RET -{errno.ENOSYS}" in control.stdout:
        pytest.skip("kernel without IA32 emulation: no 32-bit ABI to filter")
    # The tenant filter lists x86 next to x86_64, so the i386 unshare gets the same EPERM ...
    out = control_then_breach(lambda bpf: py(INT80_PROBE, bpf), tenant_bpf, None, "RET")
    assert f"RET -{errno.EPERM}" in out
    # ... while a section naming no architectures filters only the native ABI: the bad-arch action kills.
    killed = py(INT80_PROBE, allow_bpf)
    assert "RET" not in killed.stdout and killed.returncode != 0, (killed.stdout, killed.stderr)


# ---------------------------------------------------------------- OCI sections, real kernel


@needs_bwrap
def test_section_errnoret_is_the_errno_returned(rootfs_template: Path, allow_bpf: bytes) -> None:
    section = {
        "defaultAction": "SCMP_ACT_ALLOW",
        "syscalls": [{"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO", "errnoRet": errno.ENOSPC}],
    }
    bpf = seccomp.compile_bpf(section)
    control_then_breach(
        lambda b: sh(rootfs_template, f"mkdir /tmp/d && echo {MARK}", b),
        bpf,
        allow_bpf,
        os.strerror(errno.ENOSPC),
    )
    other = sh(rootfs_template, f"touch /tmp/f && echo {MARK}", bpf)  # only mkdir is denied
    assert MARK in other.stdout, other.stderr


@needs_bwrap
def test_section_args_eq_denies_only_the_matching_call(rootfs_template: Path, allow_bpf: bytes) -> None:
    section = {
        "defaultAction": "SCMP_ACT_ALLOW",
        "syscalls": [
            {
                "names": ["kill"],
                "action": "SCMP_ACT_ERRNO",
                "args": [{"index": 1, "value": 10, "op": "SCMP_CMP_EQ"}],
            }
        ],
    }  # SIGUSR1
    bpf = seccomp.compile_bpf(section)
    script = f"trap 'echo got' USR1; kill -0 $$ && echo zero-ok; kill -USR1 $$ && echo {MARK}"
    out = control_then_breach(
        lambda b: sh(rootfs_template, script, b), bpf, allow_bpf, "Operation not permitted"
    )
    assert "zero-ok" in out  # kill(pid, 0) does not match the condition


@needs_bwrap
def test_section_args_masked_eq(rootfs_template: Path, allow_bpf: bytes) -> None:
    # Deny making a file world-writable: (mode & 0o002) == 0o002 on chmod's and fchmodat's mode argument.
    def cond(index: int) -> list[dict[str, Any]]:
        return [{"index": index, "value": 0o002, "valueTwo": 0o002, "op": "SCMP_CMP_MASKED_EQ"}]

    section = {
        "defaultAction": "SCMP_ACT_ALLOW",
        "syscalls": [
            {"names": ["chmod"], "action": "SCMP_ACT_ERRNO", "args": cond(1)},
            {"names": ["fchmodat"], "action": "SCMP_ACT_ERRNO", "args": cond(2)},
        ],
    }
    bpf = seccomp.compile_bpf(section)
    script = f"touch /tmp/f; chmod 755 /tmp/f && echo 755-ok; chmod 757 /tmp/f && echo {MARK}"
    out = control_then_breach(
        lambda b: sh(rootfs_template, script, b), bpf, allow_bpf, "Operation not permitted"
    )
    assert "755-ok" in out


@needs_bwrap
def test_section_same_index_conditions_are_ored(rootfs_template: Path, allow_bpf: bytes) -> None:
    # runc's rule: two conditions on one index become two rules (libseccomp cannot AND them).
    section = {
        "defaultAction": "SCMP_ACT_ALLOW",
        "syscalls": [
            {
                "names": ["kill"],
                "action": "SCMP_ACT_ERRNO",
                "args": [
                    {"index": 1, "value": 10, "op": "SCMP_CMP_EQ"},
                    {"index": 1, "value": 12, "op": "SCMP_CMP_EQ"},
                ],
            }
        ],
    }
    bpf = seccomp.compile_bpf(section)
    for sig in ("USR1", "USR2"):
        script = f"trap 'echo got' {sig}; kill -0 $$ && echo zero-ok; kill -{sig} $$ && echo {MARK}"
        out = control_then_breach(
            lambda b, s=script: sh(rootfs_template, s, b), bpf, allow_bpf, "Operation not permitted"
        )
        assert "zero-ok" in out


@needs_bwrap
def test_section_kill_process_action(rootfs_template: Path, allow_bpf: bytes) -> None:
    section = {
        "defaultAction": "SCMP_ACT_ALLOW",
        "syscalls": [{"names": ["mkdir"], "action": "SCMP_ACT_KILL_PROCESS"}],
    }
    bpf = seccomp.compile_bpf(section)
    script = f"mkdir /tmp/d && echo {MARK}; echo status=$?"
    out = control_then_breach(lambda b: sh(rootfs_template, script, b), bpf, allow_bpf, "status=")
    assert "status=159" in out  # 128 + SIGSYS: the kernel killed mkdir


# ---------------------------------------------------------------- validation


def test_no_section_is_valid() -> None:
    assert seccomp.validate(None) == []


def test_unknown_syscall_name_points_at_the_entry() -> None:
    section = {
        "defaultAction": "SCMP_ACT_ALLOW",
        "syscalls": [
            {"names": ["read"], "action": "SCMP_ACT_ERRNO"},
            {"names": ["write"], "action": "SCMP_ACT_ERRNO"},
            {"names": ["open"], "action": "SCMP_ACT_ERRNO"},
            {"names": ["getpid", "no_such_syscall"], "action": "SCMP_ACT_ERRNO"},
        ],
    }
    problems = seccomp.validate(section)
    assert [p.pointer for p in problems] == ["/linux/seccomp/syscalls/3/names/1"]
    assert "no_such_syscall" in problems[0].message
    with pytest.raises(BundleInvalid) as e:
        seccomp.compile_bpf(section)
    assert e.value.problems[0].pointer == "/linux/seccomp/syscalls/3/names/1"


def test_pointer_prefix_is_honoured() -> None:
    problems = seccomp.validate(
        {"defaultAction": "SCMP_ACT_ALLOW", "architectures": ["SCMP_ARCH_VAX"]}, pointer="/x/seccomp"
    )
    assert [p.pointer for p in problems] == ["/x/seccomp/architectures/0"]


def _rule(**kw: Any) -> dict[str, Any]:
    return {"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["read"], **kw}]}


def _arg(**kw: Any) -> dict[str, Any]:
    return _rule(action="SCMP_ACT_ERRNO", args=[{"index": 0, "value": 1, "op": "SCMP_CMP_EQ", **kw}])


@pytest.mark.parametrize(
    "section, pointer",
    [
        ({}, "/linux/seccomp/defaultAction"),
        ({"defaultAction": "SCMP_ACT_BOGUS"}, "/linux/seccomp/defaultAction"),
        (
            {"defaultAction": "SCMP_ACT_ALLOW", "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_Z80"]},
            "/linux/seccomp/architectures/1",
        ),
        (
            {"defaultAction": "SCMP_ACT_ALLOW", "flags": ["SECCOMP_FILTER_FLAG_NOPE"]},
            "/linux/seccomp/flags/0",
        ),
        (
            {
                "defaultAction": "SCMP_ACT_ALLOW",
                "flags": ["SECCOMP_FILTER_FLAG_TSYNC", "SECCOMP_FILTER_FLAG_LOG"],
            },
            "/linux/seccomp/flags/1",
        ),
        (_rule(action="SCMP_ACT_NOPE"), "/linux/seccomp/syscalls/0/action"),
        (
            {"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": [], "action": "SCMP_ACT_ERRNO"}]},
            "/linux/seccomp/syscalls/0/names",
        ),
        (_rule(action="SCMP_ACT_KILL", errnoRet=1), "/linux/seccomp/syscalls/0/errnoRet"),
        (_rule(action="SCMP_ACT_ERRNO", errnoRet=5000), "/linux/seccomp/syscalls/0/errnoRet"),
        (_arg(index=6), "/linux/seccomp/syscalls/0/args/0/index"),
        (_arg(value=-1), "/linux/seccomp/syscalls/0/args/0/value"),
        (_arg(value=2**64), "/linux/seccomp/syscalls/0/args/0/value"),
        (_arg(valueTwo=True), "/linux/seccomp/syscalls/0/args/0/valueTwo"),
        (_arg(op="SCMP_CMP_IN"), "/linux/seccomp/syscalls/0/args/0/op"),
    ],
)
def test_problems_have_exact_pointers(section: dict[str, Any], pointer: str) -> None:
    problems = seccomp.validate(section)
    assert [p.pointer for p in problems] == [pointer]
    assert all(p.rule for p in problems)
    with pytest.raises(BundleInvalid):
        seccomp.compile_bpf(section)


@pytest.mark.parametrize(
    "section, pointer",
    [
        ({"defaultAction": "SCMP_ACT_NOTIFY"}, "/linux/seccomp/defaultAction"),
        (
            {
                "defaultAction": "SCMP_ACT_ALLOW",
                "syscalls": [{"names": ["mkdir"], "action": "SCMP_ACT_NOTIFY"}],
            },
            "/linux/seccomp/syscalls/0/action",
        ),
        (
            {"defaultAction": "SCMP_ACT_ALLOW", "listenerPath": "/run/agent.sock"},
            "/linux/seccomp/listenerPath",
        ),
    ],
)
def test_notify_is_refused(section: dict[str, Any], pointer: str) -> None:
    problems = seccomp.validate(section)
    assert [p.pointer for p in problems] == [pointer]
    assert "not supported" in problems[0].message


def test_messages_do_not_echo_config_values() -> None:
    secret = "s3cr3t-VALUE-do-not-print"
    section = {
        "defaultAction": secret,
        "defaultErrnoRet": secret,
        "architectures": [secret],
        "flags": [secret],
        "listenerMetadata": secret,
        "syscalls": [
            {
                "names": ["read"],
                "action": secret,
                "errnoRet": secret,
                "args": [{"index": secret, "value": secret, "valueTwo": secret, "op": secret}],
            }
        ],
    }
    problems = seccomp.validate(section)
    assert len(problems) >= 8
    for p in problems:
        assert secret not in p.message + p.hint + p.rule + p.pointer


def test_tsync_flag_and_default_repeating_rules_are_accepted() -> None:
    section = {
        "defaultAction": "SCMP_ACT_ALLOW",
        "flags": ["SECCOMP_FILTER_FLAG_TSYNC"],
        "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"],
        "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW"}],
    }
    assert seccomp.validate(section) == []
    assert seccomp.compile_bpf(section)


# ---------------------------------------------------------------- default section, failures


def test_default_tenant_section_is_what_compile_none_builds() -> None:
    section = seccomp.default_tenant_section()
    assert seccomp.validate(section) == []
    assert section["architectures"][0] == seccomp.native_arch()
    if seccomp.native_arch() == "SCMP_ARCH_X86_64":
        assert section["architectures"] == ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"]
    denied = section["syscalls"][0]["names"]
    for name in ("keyctl", "bpf", "mount", "unshare", "setns", "ptrace", "open_by_handle_at", "kexec_load"):
        assert name in denied
    clone3 = {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": errno.ENOSYS}
    assert clone3 in section["syscalls"]
    mknod = [r for r in section["syscalls"] if r["names"][0] in ("mknod", "mknodat")]
    assert {(r["names"][0], r["args"][0]["valueTwo"]) for r in mknod} >= {
        ("mknodat", 0o020000),
        ("mknodat", 0o060000),
    }
    bpf = seccomp.compile_bpf(None)
    assert bpf == seccomp.compile_bpf(section)
    assert len(bpf) % 8 == 0 and 50 < len(bpf) // 8 <= seccomp.BPF_MAXINSNS


def test_libseccomp_export_failure_is_launch_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(self: Any, file: Any) -> None:
        raise OSError(errno.ENOMEM, os.strerror(errno.ENOMEM))

    monkeypatch.setattr(pyseccomp.SyscallFilter, "export_bpf", fail)
    with pytest.raises(LaunchFailed):
        seccomp.compile_bpf(None)


def test_libseccomp_rule_failure_is_bundle_invalid_with_pointer(monkeypatch: pytest.MonkeyPatch) -> None:
    real = pyseccomp.SyscallFilter.add_rule

    def add_rule(self: Any, action: int, name: Any, *args: Any) -> None:
        if name == "write":
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        real(self, action, name, *args)

    monkeypatch.setattr(pyseccomp.SyscallFilter, "add_rule", add_rule)
    section = {
        "defaultAction": "SCMP_ACT_ALLOW",
        "syscalls": [{"names": ["read", "write"], "action": "SCMP_ACT_ERRNO"}],
    }
    with pytest.raises(BundleInvalid) as e:
        seccomp.compile_bpf(section)
    assert e.value.problems[0].pointer == "/linux/seccomp/syscalls/0/names/1"
