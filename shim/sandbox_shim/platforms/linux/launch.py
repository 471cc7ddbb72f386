"""What ``create`` needs to start bwrap: the seccomp programs, memfds, the spawn itself (into the
sandbox's cgroup, after any setns joins), preserved fds, and waiting until bwrap's child is held.

Only ``create`` imports this module, so ``subprocess`` stays off the other lifecycle verbs' path.
"""

from __future__ import annotations

import contextlib
import os

from ...errors import InvalidArgument, LaunchFailed
from . import process as procs

TYPE_CHECKING = False  # typing is not loaded at run time
if TYPE_CHECKING:
    import subprocess

    from .plan import Plan

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


def spawn_bwrap(
    argv: list[str],
    fds: list[int],
    stdio_fds: tuple[int, ...] | None = None,
    joins: list[tuple[str, int]] | None = None,
    cgroup_procs: list[str] | None = None,
    groups: tuple[int, ...] = (),
    umask: int | None = None,
) -> subprocess.Popen[bytes]:
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
    import subprocess

    from . import namespaces
    from .landlock import pdeathsig_setter

    stdio = dict(zip(("stdin", "stdout", "stderr"), stdio_fds, strict=True)) if stdio_fds else {}
    procs = [os.fsencode(p) for p in cgroup_procs or []]
    die_with_parent = pdeathsig_setter(9)  # SIGKILL; the C library is found here, before the fork
    parent = os.getpid()

    def preexec() -> None:  # between fork and exec: plain syscalls only
        # The outer bwrap dies with this process (kill -9 of create leaves no bwrap in the host's
        # namespaces); the parent-death signal survives execve of a non-set-user-ID binary (prctl(2))
        # and is not inherited by bwrap's child, which outlives the outer bwrap by design.
        if not die_with_parent() or os.getppid() != parent:  # PR_SET_PDEATHSIG, SIGKILL
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
        return subprocess.Popen(
            argv,
            pass_fds=tuple(fds),
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
            close_fds=True,
            preexec_fn=preexec,
            **stdio,
            **extra,
        )  # type: ignore[call-overload]
    except PermissionError as e:
        raise LaunchFailed(
            "cannot set the sandbox's supplementary groups (setgroups(2) needs CAP_SETGID); "
            "the caller's groups would reach the sandbox",
            "run as root, or as a user without supplementary groups",
        ) from e
    except subprocess.SubprocessError as e:  # raised for an exception in preexec_fn (cgroup, setns)
        raise LaunchFailed(
            f"cannot join the sandbox's cgroup or the namespaces listed with a path: {e}",
            "runtime-spec config-linux.md namespaces: give a live namespace",
        ) from e
    except OSError as e:
        raise LaunchFailed(f"cannot run {argv[0]}: {e.strerror}", "install bubblewrap") from e


def preserved_fds(count: int) -> list[int]:
    """fds 3 .. 3+count-1 (``--preserve-fds``), checked open; they reach the workload at those numbers.

    The one check of ``preserve_fds`` (the CLI parses the number only), so the CLI and a library
    caller get the same answer: ``InvalidArgument`` (status 2, the caller's own fds are wrong)."""
    out = list(range(3, 3 + count))
    for fd in out:
        try:
            os.fstat(fd)
        except OSError:
            raise InvalidArgument(
                "preserve_fds",
                f"fd {fd} is not open ({count} preserved from fd 3)",
                "pass as many fds as you preserve",
            ) from None
    return out


def check_sysctl_plan(plan: Plan) -> None:
    from .namespaces import check_sysctl

    ns = [{"type": t} for t in [*plan.unshare, *plan.join]]
    check_sysctl({"linux": {"sysctl": plan.sysctl, "namespaces": ns}})


def child_pid_from(info: bytes) -> int | None:
    """The ``child-pid`` of the JSON object bwrap writes to ``--info-fd``, once it is whole."""
    from ...fastjson import loads  # bwrap's record: no json (re, enum) import on create's path

    if not info.rstrip().endswith(b"}"):  # bwrap writes the object in pieces, a flat one: not whole yet
        return None
    try:
        obj = loads(info)
    except ValueError:  # not all of it yet (or bytes cut inside a UTF-8 sequence)
        return None
    pid = obj.get("child-pid") if isinstance(obj, dict) else None
    return pid if isinstance(pid, int) and not isinstance(pid, bool) and pid > 0 else None


def wait_ready(
    proc: subprocess.Popen[bytes], info_fd: int, block_fd: int, timeout: float = READY_TIMEOUT
) -> int:
    """Wait until bwrap's child blocks on the FIFO; return its pid.  Woken by events, not by sleeps:

    1. the child's pid: ``info_fd`` is the read end of the pipe bwrap's ``--info-fd`` writes
       ``{"child-pid": N, ...}`` into and closes (bubblewrap.c); poll(2) on it and on a pidfd of the
       outer bwrap (pidfd_open(2): readable once it exited), so a bwrap that dies is seen at once.
    2. the child held: bwrap's child does its mounts, the two pivots and the unmount of the old root,
       drops its privileges and then read(2)s the block fd.  Each mount-table change of its namespace
       wakes this wait (/proc/PID/mountinfo is pollable: POLLPRI on every change, proc(5)); once the
       table has been quiet for 50 µs (doubling) the child is checked, until it sits in read(2) on
       ``block_fd`` (/proc/PID/syscall).  bwrap signals nothing between its last unmount and the
       read, so the interval resets at each mount event and never exceeds 2 ms, and a stream of
       events delays a check by at most 2 ms.

    Raises:
        LaunchFailed: bwrap exited first (its own message went to the sandbox's stderr), or did not
            finish within ``timeout`` seconds.
    """
    import select
    import subprocess
    import time

    deadline = time.monotonic() + timeout
    try:
        pidfd = os.pidfd_open(proc.pid)
    except OSError:  # already reaped: fails below
        pidfd = -1
    child: int | None = None
    try:
        info = b""
        while child is None and proc.poll() is None:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            ready, _, _ = select.select([info_fd, *([pidfd] if pidfd >= 0 else [])], [], [], left)
            if info_fd in ready:
                data = os.read(info_fd, 65536)
                if not data:  # every copy of the write end closed without a pid: bwrap failed
                    proc.wait(timeout=max(0.0, deadline - time.monotonic()))
                    break
                info += data
                child = child_pid_from(info)
            elif ready:  # the pidfd: the outer bwrap is gone
                break
        if child is not None and _wait_held(proc, pidfd, child, block_fd, deadline):
            return child
    except subprocess.TimeoutExpired:
        pass
    finally:
        if pidfd >= 0:
            os.close(pidfd)
    rc = proc.poll()
    raise LaunchFailed(
        f"bwrap failed to set up the sandbox (exit status {rc})"
        if rc is not None
        else f"bwrap did not finish setting up within {timeout:.0f} s",
        "see bwrap's message above; check mounts, rootfs and namespaces in config.json",
    )


def _wait_held(proc: subprocess.Popen[bytes], pidfd: int, child: int, block_fd: int, deadline: float) -> bool:
    """Phase 2 of ``wait_ready``: True once ``child`` sits in read(2) on ``block_fd``."""
    import select
    import time

    try:
        mounts = os.open(f"/proc/{child}/mountinfo", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False  # the child is gone already
    try:
        interval = 0.00005
        check, checked = True, time.monotonic()
        while True:
            if check:
                if procs.blocked_on_fd(child, block_fd):
                    return proc.poll() is None
                checked = time.monotonic()
            if proc.poll() is not None:
                return False
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            watch = [pidfd] if pidfd >= 0 else []
            ready, _, changed = select.select(watch, [], [mounts], min(interval, left))
            if ready:
                return procs.blocked_on_fd(child, block_fd) and proc.poll() is None
            # a mount event means the child is still setting up (its read(2) comes after its last
            # change): /proc/PID/syscall is read once the table has been quiet for ``interval``, or
            # 2 ms after the last read whatever happens (a host whose mount events propagate into
            # the child's namespace delays it no more): ~10 reads per create, ~40 at every event.
            check = not changed or time.monotonic() - checked >= 0.002
            interval = 0.00005 if changed else min(interval * 2, 0.002)
    finally:
        os.close(mounts)


def kill_quietly(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL ``proc`` and reap it (at most 5 s: a process stuck in the kernel is left to init).  The
    exit wakes the wait through a pidfd, not ``Popen.wait``'s polling sleeps (0.5 ms, doubling)."""
    import select

    with contextlib.suppress(OSError):
        proc.kill()
    if proc.returncode is None:  # still our unreaped child: its pid cannot have been reused
        try:
            pidfd = os.pidfd_open(proc.pid)
        except OSError:
            pidfd = -1
        if pidfd >= 0:
            try:
                select.select([pidfd], [], [], 5)
            finally:
                os.close(pidfd)
    with contextlib.suppress(Exception):
        proc.wait(timeout=5)
