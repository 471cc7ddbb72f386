"""Run a program to its end and report one of three facts: ``Completion``, ``CouldNotRun``, ``LimitExceeded``.

``execute`` runs a program inside a *running* sandbox (started by ``spawn.spawn``, which asks
``Mechanism.exec``; macOS and Windows refuse it): on Linux a helper (``platforms/linux/enter.py``)
joins the workload's namespaces, cgroup, root, credentials, capabilities, rlimits and seccomp
filters, then execve's.  "Never ran" comes from the kernel (the
errno of the failed execve, through a CLOEXEC pipe), never from an exit status or stderr: a program
that ran and exited 127 is a ``Completion``.

``run_bundle`` runs a bundle's own process: provision → start → wait → collect → destroy, with the
``sandbox-shim.wall-clock-seconds`` setting (or ``timeout``) enforced by the shim's own timer.

Which limit stopped a program is read from the cgroup's counters (``control.facts``) taken before and
after, and from how it ended:
  memory     — the OOM killer acted in the cgroup (``Facts.oom_kills`` grew) and the program was killed
               or failed;
  cpu        — it died of SIGXCPU (RLIMIT_CPU soft limit), or of SIGKILL with CPU time ≥ the limit
               (the hard limit, setrlimit(2));
  pids       — it failed while the pids limit refused forks (``Facts.pids_max_hits`` grew);
  wall_clock — the shim's timer expired and the shim killed it.
"""

from __future__ import annotations

import os
import select
import signal as _signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from . import api, posix
from .capture import MAX_OUTPUT, Collected, collect
from .control import Facts, facts
from .errors import LimitExceeded, check_seconds
from .mechanism import Completion, Ended, Sandbox, Started, Usage
from .spawn import spawn

if TYPE_CHECKING:
    from .mechanism import CounterWatch, Mechanism

__all__ = ["Started", "execute", "preflight", "run_bundle", "run_detached", "runc_run", "spawn"]


def _limit_kind(
    code: int | None,
    sig: int | None,
    before: Facts,
    after: Facts,
    cpu_limit: int | None,
    cpu_used_s: float,
    timed_out: bool,
) -> str | None:
    """Which limit stopped a program, from how it ended and the cgroup counters; None if none did."""
    if timed_out:
        return "wall_clock"
    failed = sig is not None or (code or 0) != 0
    if failed and after.oom_kills > before.oom_kills:
        return "memory"
    if sys.platform != "win32" and (  # no signals there
        sig == _signal.SIGXCPU or (sig == _signal.SIGKILL and cpu_limit and cpu_used_s >= cpu_limit)
    ):
        return "cpu"
    if failed and after.pids_max_hits > before.pids_max_hits:
        return "pids"
    return None


def _detail(kind: str, after: Facts, cpu_limit: int | None, cpu_used_s: float, wall: float | None) -> str:
    if kind == "memory":
        return f"OOM kills {after.oom_kills}, peak {after.memory_peak} bytes of limit {after.memory_limit}"
    if kind == "cpu":
        return f"{cpu_used_s:.2f} s of CPU, limit {cpu_limit} s"
    if kind == "pids":
        return f"forks refused {after.pids_max_hits} times, limit {after.pids_limit}"
    return f"ran past {wall} s"


def execute(
    mechanism: Mechanism,
    sandbox: Sandbox | str,
    command: tuple[str, Sequence[str]],
    timeout: float | None = None,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    input: bytes | None = None,
    capture: bool = True,
    on_start: Callable[[Started], None] | None = None,
    max_output: int = MAX_OUTPUT,
    *,
    replace_env: bool = False,
    user: Mapping[str, object] | None = None,
    capabilities: list[str] | None = None,
    console_socket: str | None = None,
) -> Completion:
    """Run ``command`` = (program, args) inside the running sandbox; wait; capture stdout/stderr.

    Args:
        sandbox: a ``Sandbox`` or its id (as every call of ``api``).
        timeout: a wall-clock deadline in seconds > 0 and finite, counted from the program's start
            (None: none; 0, a negative number, NaN or infinity: ``InvalidArgument``).  It
            holds whatever the program's children do: the wait ends when the program itself exits
            (a background child holding stdout open does not extend it), or at the deadline, when
            the program is killed.
        env / cwd: as for ``spawn``; input: bytes for its stdin (default: /dev/null).
        capture: False to let the program use this process's stdin/stdout/stderr (the CLI).
        max_output: bytes of stdout and of stderr kept (default ``capture.MAX_OUTPUT``, 16 MiB each);
            the rest is read and dropped, counted in ``Completion.stdout_dropped`` / ``stderr_dropped``.
        on_start: called with the ``Started`` handle once it runs (e.g. to forward signals).
        replace_env / user / capabilities / console_socket: as for ``spawn`` (keywords only).
    Returns:
        ``Completion`` (any exit status).  ``usage`` is the program's getrusage(2): CPU µs and
        ``ru_maxrss`` in bytes — which includes the pre-exec image (on Linux a fork of the calling
        process: its resident size at the call; the kernel carries the high-water mark across
        execve(2)), so it is a ceiling for small programs; the sandbox's own peak is ``api.usage``.
    Raises:
        CouldNotRun, LimitExceeded(``wall_clock`` | ``memory`` | ``cpu`` | ``pids``, completion=partial),
        UsageError (``InvalidArgument`` for ``timeout``), SandboxNotFound, InvalidState, LaunchFailed.
    """
    check_seconds("timeout", timeout)
    cmd, args = command
    sandbox_id = api.id_of(sandbox)
    store = api.store_of(mechanism)
    sb = api.sandbox_of(store.read(sandbox_id), store)
    cg = mechanism.cgroup(sb)
    before = facts(cg) if cg else Facts()
    pipe = subprocess.PIPE if capture else None
    s = spawn(
        mechanism,
        sandbox_id,
        [cmd, *args],
        env=env,
        cwd=cwd,
        stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL if capture else None,
        stdout=pipe,
        stderr=pipe,
        replace_env=replace_env,
        user=user,
        capabilities=capabilities,
        console_socket=console_socket,
    )
    if on_start is not None:
        on_start(s)
    deadline = None if timeout is None else s.started + timeout
    if capture or input is not None:
        got = collect(s, input, deadline, max_output)
    else:
        got = Collected()
        try:
            s.helper.wait(timeout=None if deadline is None else max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            got.timed_out = True
            s.kill()
            s.helper.wait()
    timed_out = got.timed_out
    duration = time.monotonic() - s.started
    end = s.result()
    if end is None:  # no report from the program's end: it was killed with its helper
        end = Ended(None, posix.SIGKILL)
    usage = Usage(
        memory_peak_bytes=end.maxrss_bytes,
        cpu_user_us=end.cpu_user_us,
        cpu_system_us=end.cpu_system_us,
    )
    done = Completion(
        end.exit_status,
        end.signal,
        bytes(got.out),
        bytes(got.err),
        duration,
        usage,
        stdout_dropped=got.dropped["stdout"],
        stderr_dropped=got.dropped["stderr"],
    )
    after = facts(cg) if cg else Facts()
    cpu_limit = mechanism.cpu_limit(sb)
    cpu_used = ((end.cpu_user_us or 0) + (end.cpu_system_us or 0)) / 1e6
    kind = _limit_kind(end.exit_status, end.signal, before, after, cpu_limit, cpu_used, timed_out)
    if kind:
        raise LimitExceeded(kind, _detail(kind, after, cpu_limit, cpu_used, timeout), done)
    return done


def _instrument() -> None:
    from . import telemetry

    global execute
    execute = telemetry.instrument("execute")(execute)


_instrument()


# -- a bundle's own process ---------------------------------------------------------------------------


def _wait_exit(
    mechanism: Mechanism, sb: Sandbox, pid: int, deadline: float | None, watch: CounterWatch | None = None
) -> int | None:
    """Wait until the container process ``pid`` exits or ``deadline`` (monotonic) passes; with
    ``watch`` (``Mechanism.watch``), its counters are read again whenever they signal a change.

    Returns its exit status (128+n for a signal) as the mechanism learns it (on Linux: reaped by this
    process, its subreaper, and recorded), 255 if it is gone with no status known, None on timeout.
    """
    pidfd = -1
    opener = getattr(os, "pidfd_open", None)  # Linux only: readable once the process has exited
    if opener is not None:
        try:
            pidfd = int(opener(pid))
        except OSError:
            pass
    try:
        while True:
            code = mechanism.exit_status(sb)
            if code is not None:
                return code
            if not mechanism.alive(sb):
                code = mechanism.exit_status(sb)
                return code if code is not None else 255
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if deadline is not None and left == 0.0:
                return None
            if pidfd >= 0:
                events = [watch.fd] if watch is not None and watch.fd is not None else []
                select.select([pidfd], [], events, left)
                if watch is not None:
                    watch.changed()
            else:
                time.sleep(0.02)
    finally:
        if pidfd >= 0:
            os.close(pidfd)


def preflight(mechanism: Mechanism, bundle: str) -> None:
    """Refuse a bundle whose program cannot be executed, before anything is made: the platform
    looks ``process.args[0]`` up where it will run it (``Mechanism.preflight``; Linux: in the rootfs
    as bwrap lays it out, ``platforms/linux/program.py``).

    Raises:
        CouldNotRun(``not_found`` | ``permission_denied``); BundleInvalid.
    """
    from .bundle import load

    mechanism.preflight(load(bundle))


def run_bundle(
    mechanism: Mechanism,
    sandbox_id: str,
    bundle: str | os.PathLike[str],
    timeout: float | None = None,
    *,
    stdio: tuple[int, int, int] | None = None,
    pid_file: str | None = None,
    keep: bool = False,
    on_start: Callable[[str], None] | None = None,
    max_output: int = MAX_OUTPUT,
) -> Completion:
    """Run a bundle's own process to its end and remove everything: provision, start, wait, collect, destroy.

    The CLI's ``run`` is this function (with ``stdio=(0, 1, 2)``), so both honour the same limits.

    Args:
        timeout: wall-clock seconds; the bundle's ``sandbox-shim.wall-clock-seconds`` applies too (the
            smaller wins).  Counted from start.  Finite and > 0, else ``InvalidArgument``.
        stdio: fds for the sandbox's stdin/stdout/stderr instead of capturing (output then is b"").
        pid_file: written as by ``api.provision``.  keep: leave the stopped sandbox (no destroy).
        on_start: called with the id once the process is released (e.g. to forward signals).
        max_output: bytes of stdout and of stderr kept (``Completion.stdout_dropped`` counts the rest).
    Returns:
        ``Completion``: exit status (bwrap reports a signal as 128+n, read back as ``signal``), stdout and
        stderr, duration, and the cgroup's usage (peak memory, CPU) read before the cgroup is removed.
    Raises:
        LimitExceeded(kind, completion=...); CouldNotRun (``preflight``); BundleInvalid,
        CapabilityUnavailable, SandboxExists, LaunchFailed (as ``api.provision``).
    """
    check_seconds("timeout", timeout)
    preflight(mechanism, os.fspath(bundle))
    sb = Sandbox(sandbox_id, os.fspath(bundle))
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, open(os.devnull, "rb") as null:
        api.provision(
            mechanism, sb, pid_file=pid_file, stdio=stdio or (null.fileno(), out.fileno(), err.fileno())
        )
        try:
            rec = api.store_of(mechanism).read(sandbox_id)
            sb = api.sandbox_of(rec, api.store_of(mechanism))
            cg = mechanism.cgroup(sb)
            wall = (rec.private.get("plan") or {}).get("wall_clock")
            limit = min((t for t in (timeout, wall) if t), default=None)
            before = facts(cg) if cg else Facts()
            watch = mechanism.watch(sb, before)
            try:
                api.start(mechanism, sandbox_id)
                t0 = time.monotonic()
                if on_start is not None:
                    on_start(sandbox_id)
                code = _wait_exit(mechanism, sb, rec.pid, None if limit is None else t0 + limit, watch)
                timed_out = code is None
                if timed_out:
                    api.stop(mechanism, sandbox_id, grace=0)
                    code = _wait_exit(mechanism, sb, rec.pid, time.monotonic() + 10, watch)
                duration = time.monotonic() - t0
                # exit 137 is not SIGKILL: ask for the wait(2) status where the mechanism keeps it
                ended = mechanism.termination(sb) if not timed_out else None
                after = watch.final() if watch is not None else before
            finally:
                if watch is not None:
                    watch.close()
        finally:
            if not keep:
                api.destroy(mechanism, sandbox_id, force=True)
        dropped = [max(0, os.fstat(f.fileno()).st_size - max_output) for f in (out, err)]
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(max_output), err.read(max_output)
    code = 255 if code is None else code
    if ended is not None:
        sig = ended[1]
        code = ended[0] if ended[0] is not None else code
    else:
        sig = code - 128 if 128 < code < 128 + _signal.NSIG else None
    usage = Usage(
        memory_bytes=after.memory_usage,
        memory_peak_bytes=after.memory_peak,
        cpu_user_us=None if after.cpu_user_ns is None else after.cpu_user_ns // 1000,
        cpu_system_us=None if after.cpu_kernel_ns is None else after.cpu_kernel_ns // 1000,
        pids=after.pids_current,
    )
    done = Completion(
        None if sig else code,
        sig,
        stdout,
        stderr,
        duration,
        usage,
        stdout_dropped=dropped[0],
        stderr_dropped=dropped[1],
    )
    cpu_limit = mechanism.cpu_limit(sb)
    cpu_used = ((after.cpu_total_ns or 0) - (before.cpu_total_ns or 0)) / 1e9
    kind = _limit_kind(None if sig else code, sig, before, after, cpu_limit, cpu_used, timed_out)
    if kind:
        raise LimitExceeded(kind, _detail(kind, after, cpu_limit, cpu_used, limit), done)
    return done


def run_detached(
    mechanism: Mechanism,
    sandbox_id: str,
    bundle: str | os.PathLike[str],
    *,
    stdio: tuple[int, int, int] | None = None,
    pid_file: str | None = None,
) -> None:
    """Provision and start a bundle's process and return while it runs (``runc run --detach``).

    Nothing waits for it here, so nothing could enforce a wall-clock limit: a bundle that sets
    ``sandbox-shim.wall-clock-seconds`` is refused (run it with ``run_bundle``, which keeps the timer),
    before anything is made.  Every other setting applies as for ``api.provision``.
    Raises:
        BundleInvalid (the wall-clock setting, with its pointer; or as ``api.provision``); CouldNotRun
        (``preflight``); CapabilityUnavailable, SandboxExists, LaunchFailed (as ``api.provision``).
    """
    from .bundle import SETTINGS_PREFIX, load
    from .errors import BundleInvalid, BundleProblem

    if load(os.fspath(bundle)).settings.wall_clock is not None:
        raise BundleInvalid(
            [
                BundleProblem(
                    f"/annotations/{SETTINGS_PREFIX}wall-clock-seconds",
                    "a wall-clock limit needs a caller that waits, and a detached run has none",
                    "sandbox-shim.wall-clock-seconds is enforced by the waiting shim",
                    "run without --detach, or remove the setting",
                )
            ]
        )
    preflight(mechanism, os.fspath(bundle))
    sb = Sandbox(sandbox_id, os.fspath(bundle))
    api.provision(mechanism, sb, pid_file=pid_file, stdio=stdio)
    try:
        api.start(mechanism, sandbox_id)
    except BaseException:
        api.destroy(mechanism, sandbox_id, force=True)  # nothing half-made: the failed start's sandbox goes
        raise


def runc_run(
    mechanism: Mechanism,
    sandbox_id: str,
    bundle: str | os.PathLike[str],
    *,
    detach: bool = False,
    stdio: tuple[int, int, int] | None = None,
    pid_file: str | None = None,
    keep: bool = False,
) -> Completion | None:
    """What ``runc run`` does (the CLI's ``run``, one call): with ``detach``, ``run_detached`` (returns
    None once the process runs); otherwise ``run_bundle`` with SIGINT, SIGTERM and SIGHUP sent to this
    process passed on to the sandbox once it runs (``control.signal_forwarder``: installs handlers, so
    the main thread of a process that owns its signals only).

    Returns: the ``Completion`` (``shell_status`` is ``run``'s exit status), or None when detached.
    Raises: as ``run_detached`` / ``run_bundle``.
    """
    if detach:
        run_detached(mechanism, sandbox_id, bundle, stdio=stdio, pid_file=pid_file)
        return None
    from .control import signal_forwarder

    on_start = signal_forwarder(mechanism, sandbox_id)
    return run_bundle(
        mechanism, sandbox_id, bundle, stdio=stdio, pid_file=pid_file, keep=keep, on_start=on_start
    )
