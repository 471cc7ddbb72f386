"""What ``create`` needs to start bwrap: the seccomp programs, memfds, the spawn itself (into the
sandbox's cgroup, after any setns joins), preserved fds, and waiting until bwrap's child is held.

Only ``create`` imports this module, so ``subprocess`` stays off the other lifecycle verbs' path.
"""

from __future__ import annotations

import contextlib
import os
import time

from ...errors import LaunchFailed
from . import process as procs

TYPE_CHECKING = False  # typing is not loaded at run time
if TYPE_CHECKING:
    import subprocess

    from ...plan import Plan

READY_TIMEOUT = 30.0  # seconds bwrap may take to set up mounts


def seccomp_programs(plan: Plan, cache_dir: str | None = None) -> list[bytes]:
    """BPF programs for the sandbox, in load order (``seccomp_cache.compile_programs``), read from
    ``cache_dir`` (``ROOT/.seccomp``) when compiled before for the same inputs and host."""
    from .seccomp_cache import programs

    return programs(plan, cache_dir)


def memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def spawn_bwrap(argv: list[str], fds: list[int], stdio_fds: tuple[int, ...] | None = None,
           joins: list[tuple[str, int]] | None = None, cgroup_procs: list[str] | None = None,
           groups: tuple[int, ...] = (), umask: int | None = None) -> subprocess.Popen[bytes]:
    """Start bwrap with ``fds`` (kept at their numbers) in a minimal environment.

    Args:
        stdio_fds: (stdin, stdout, stderr) for bwrap and so the sandbox — a pty slave thrice for a
            terminal sandbox, the library caller's choice, or None for this process's own.
        joins: ``(type, fd)`` namespaces to setns(2) into in the child before exec (namespaces.enter).
        cgroup_procs: the files the child writes ``0`` into before exec, to place itself in the
            sandbox's cgroups (``CgroupManager.join_files``: v1 ``tasks``, v2 ``cgroup.procs``).
        groups: the supplementary groups bwrap (so the sandbox) gets — exactly these, never the
            caller's (setgroups(2) in the child; bwrap has no option for it and keeps its own).
        umask: umask(2) for bwrap and so the sandbox (``process.user.umask``), None: the caller's.
    Raises:
        LaunchFailed: bwrap could not be started, or a namespace could not be joined.
    """
    import ctypes
    import subprocess

    from . import namespaces

    stdio = dict(zip(("stdin", "stdout", "stderr"), stdio_fds, strict=True)) if stdio_fds else {}
    procs = [os.fsencode(p) for p in cgroup_procs or []]
    libc = ctypes.CDLL(None, use_errno=True)
    parent = os.getpid()

    def preexec() -> None:  # between fork and exec: plain syscalls only
        # The outer bwrap dies with this process (kill -9 of create leaves no bwrap in the host's
        # namespaces); the parent-death signal survives execve of a non-set-user-ID binary (prctl(2))
        # and is not inherited by bwrap's child, which outlives the outer bwrap by design.
        if libc.prctl(1, 9, 0, 0, 0) != 0 or os.getppid() != parent:  # PR_SET_PDEATHSIG, SIGKILL
            os._exit(125)
        for path in procs:
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, b"0")  # "0": the writer itself (this child has one thread: fork(2))
            finally:
                os.close(fd)
        if joins:
            namespaces.enter(joins)
    extra: dict[str, object] = {"umask": -1 if umask is None else umask}
    if sorted(set(os.getgroups()) - {os.getegid()}) != sorted(set(groups) - {os.getegid()}):
        extra["extra_groups"] = list(groups)
    try:
        return subprocess.Popen(argv, pass_fds=tuple(fds), env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
                                close_fds=True, preexec_fn=preexec, **stdio, **extra)  # type: ignore[call-overload]
    except PermissionError as e:
        raise LaunchFailed("cannot set the sandbox's supplementary groups (setgroups(2) needs CAP_SETGID); "
                           "the caller's groups would reach the sandbox", "run as root, or as a user "
                           "without supplementary groups") from e
    except subprocess.SubprocessError as e:  # raised for an exception in preexec_fn (cgroup, setns)
        raise LaunchFailed(f"cannot join the sandbox's cgroup or the namespaces listed with a path: {e}",
                           "runtime-spec config-linux.md namespaces: give a live namespace") from e
    except OSError as e:
        raise LaunchFailed(f"cannot run {argv[0]}: {e.strerror}", "install bubblewrap") from e


def preserved_fds(count: int) -> list[int]:
    """fds 3 .. 3+count-1 (``--preserve-fds``), checked open; they reach the workload at those numbers."""
    out = list(range(3, 3 + count))
    for fd in out:
        try:
            os.fstat(fd)
        except OSError as e:
            raise LaunchFailed(f"--preserve-fds {count}: fd {fd} is not open", "pass fewer fds") from e
    return out


def check_sysctl_plan(plan: Plan) -> None:
    from .namespaces import check_sysctl

    ns = [{"type": t} for t in [*plan.unshare, *plan.join]]
    check_sysctl({"linux": {"sysctl": plan.sysctl, "namespaces": ns}})


def wait_ready(proc: subprocess.Popen[bytes], status_file: str, block_fd: int) -> int:
    """Wait until bwrap's child blocks on the FIFO; return its pid.

    Raises:
        LaunchFailed: bwrap exited first (its own message went to the sandbox's stderr).
    """
    child: list[int] = []

    def ready() -> bool:
        if proc.poll() is not None:
            return True
        if not child:
            pid = procs.status_field(status_file, "child-pid")
            if pid is None:
                return False
            child.append(int(pid))
        return procs.blocked_on_fd(child[0], block_fd)

    ok = procs.wait_for(ready, READY_TIMEOUT)
    if proc.poll() is not None or not ok or not child:
        rc = proc.poll()
        raise LaunchFailed(
            f"bwrap failed to set up the sandbox (exit status {rc})" if rc is not None
            else f"bwrap did not finish setting up within {READY_TIMEOUT:.0f} s",
            "see bwrap's message above; check mounts, rootfs and namespaces in config.json")
    return child[0]


def kill_quietly(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(OSError):
        proc.kill()
    with contextlib.suppress(Exception):
        proc.wait(timeout=5)
    time.sleep(0)
