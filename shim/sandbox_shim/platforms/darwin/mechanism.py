"""``DarwinSeatbeltMechanism``: the ``Mechanism`` protocol on macOS ``sandbox-exec`` (tenant bundles).

create (``provision``): plan (``plan.py``), refuse on missing capabilities (``trials.py`` tries
them), write the tenant SBPL profile into the state dir, **compile-check** it by running
``/usr/bin/true`` under the very launch command (``command.py``: a rule this macOS rejects is a
``CannotEnforce`` with sandbox-exec's message, never the workload's exit status), then start the held
monitor (``launcher.py``) whose command is ``/usr/bin/env -i ENV... sandbox-exec -f PROFILE -D
NAME=PATH... -- PROGRAM ARGS``.
start: release the FIFO.  kill: the workload (the monitor's child), or with ``all_processes`` every
member of the process group but the monitor (so it still records the status).  delete: SIGKILL to
the process group.  usage: psutil over the monitor's descendants.  The wall clock is enforced by
``wait`` (a shim process waiting), with ``LimitExceeded("wall_clock")``.

Limits of this design, stated: rlimits are per process (``plan.py``); a workload that calls
setsid(2) leaves the process group and survives ``delete`` (Seatbelt does not stop it); there is no
pause/resume and no exec here.  ``Sandbox.private`` needs ``dir`` (the state dir) and receives
``pid``, ``pid_start``, ``fifo``, ``status_file``, ``profile``, ``started``, ``started_at``, ``wall_clock``.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Callable, Sequence

from ...capability import Capability
from ...errors import CapabilityUnavailable, LaunchFailed, LimitExceeded
from ...mechanism import Identity, ProvisionOptions, Sandbox, Status, Usage
from . import launcher
from .command import TRUE, compile_check, launch_argv, tenant_profile
from .plan import DarwinPlan, check_requirements, plan_from_spec
from .seatbelt import SANDBOX_EXEC
from .trials import darwin_capabilities

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ...bundle import Spec
    from ...control import Facts
    from ...mechanism import CgroupControl, CounterWatch, ExecSpec, HookEntry, HostRecord, LaunchPlan, Started
    from ...state import StateStore

#: the report ``exec`` refuses with (exit status 4, "not available")
EXEC_UNAVAILABLE = Capability(
    "exec", False, "sandbox-exec", "macOS cannot enter a running Seatbelt sandbox", "not offered"
)


def _refuse_options(options: ProvisionOptions) -> None:
    """``CapabilityUnavailable`` for what the launcher cannot give the workload: a terminal through a
    console socket, fds beyond stdio.  Never dropped silently."""
    missing = []
    if options.console_socket:
        missing.append(
            Capability(
                "console-socket", False, "sandbox-exec", "no terminal is passed on macOS", "not offered"
            )
        )
    if options.preserve_fds:
        missing.append(
            Capability(
                "preserve-fds",
                False,
                "sandbox-exec",
                "no fds beyond stdio are passed on macOS",
                "not offered",
            )
        )
    if missing:
        raise CapabilityUnavailable(missing)


class DarwinSeatbeltMechanism:
    """sandbox-exec with a generated deny-default profile (ARCHITECTURE.md section 6, macOS).

    Args:
        probe: returns this host's reports (default ``darwin_capabilities``).
        sandbox_exec: the ``sandbox-exec`` binary.
    """

    name = "darwin-seatbelt"
    root: str | None = None  # the state root (``platforms.select.mechanism`` sets it)

    def __init__(
        self, probe: Callable[[], list[Capability]] | None = None, sandbox_exec: str = SANDBOX_EXEC
    ) -> None:
        self._probe = probe or darwin_capabilities
        self._reports: list[Capability] | None = None
        self.sandbox_exec = sandbox_exec
        self._procs: dict[str, subprocess.Popen[bytes]] = {}

    def capabilities(self) -> list[Capability]:
        """This host's reports (probed on first call, then cached for this instance)."""
        if self._reports is None:
            self._reports = list(self._probe())
        return self._reports

    def make_plan(self, spec: Spec, sandbox_id: str) -> DarwinPlan:
        """The macOS plan for a loaded bundle (``bundle.Spec``); refuses what this host lacks.

        Raises:
            BundleInvalid: the bundle cannot be expressed on macOS; CapabilityUnavailable: see ``require``.
        """
        plan = plan_from_spec(spec)
        check_requirements(plan, self.capabilities())
        return plan

    def require(self, names: Sequence[str]) -> None:  # list[str] in the protocol
        """Raise ``CapabilityUnavailable`` for each of ``names`` this host does not provide."""
        by_name = {r.name: r for r in self.capabilities()}
        missing = [
            by_name.get(n) or Capability(n, False, "sandbox-exec", "not provided on macOS", "not reported")
            for n in names
        ]
        missing = [r for r in missing if not r.available]
        if missing:
            raise CapabilityUnavailable(missing)

    def preflight(self, spec: Spec) -> None:
        """Nothing: ``make_plan`` resolves ``args[0]`` inside the rootfs (``plan._program``) and raises
        ``CouldNotRun`` there, before anything is made."""

    def provision(self, sandbox: Sandbox, plan: LaunchPlan, options: ProvisionOptions) -> Identity:
        """OCI create: profile written and compile-checked, monitor held on the FIFO.

        Args:
            sandbox: ``private["dir"]`` must be an existing private directory (the state dir).
            plan: the ``DarwinPlan`` ``make_plan`` made from the bundle's ``Spec``.
            options: ``stdio`` is the workload's stdin/stdout/stderr (None: /dev/null on all three);
                a ``console_socket`` or ``preserve_fds`` is refused (no terminal or fd passing here);
                ``on_record`` is not called (nothing outlives the state dir).
        Returns:
            the monitor's pid and start time, as both ``pid`` and ``init_pid`` (the workload exists
            only after start; see ``workload_pid``).
        Raises:
            CapabilityUnavailable: before anything is made (also for a console socket or preserved
            fds).  CannotEnforce: sandbox-exec rejected the profile.  LaunchFailed: the monitor did
            not start; ``plan`` is not a ``DarwinPlan``.
        """
        if not isinstance(plan, DarwinPlan):
            raise LaunchFailed(
                f"{type(plan).__name__} is not a macOS plan", "plan with this mechanism's make_plan"
            )
        check_requirements(plan, self.capabilities())
        _refuse_options(options)
        stdio: tuple[int, int, int] = options.stdio or (subprocess.DEVNULL,) * 3
        d = sandbox.private["dir"]
        profile = tenant_profile(plan)
        with contextlib.ExitStack() as undo:
            profile_file = os.path.join(d, "profile.sb")
            fd = os.open(profile_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            undo.callback(_unlink, profile_file)
            with os.fdopen(fd, "w") as fh:
                fh.write(profile.text)
            compile_check(
                launch_argv(plan, profile, profile_file, program=[TRUE], sandbox_exec=self.sandbox_exec)
            )
            fifo, status_file = os.path.join(d, "start.fifo"), os.path.join(d, "exit-status")
            os.mkfifo(fifo, 0o600)
            undo.callback(_unlink, fifo)
            argv = launch_argv(plan, profile, profile_file, sandbox_exec=self.sandbox_exec)
            proc = launcher.spawn_held(
                argv, fifo=fifo, status_file=status_file, rlimits=plan.rlimits, cwd=plan.cwd, stdio=stdio
            )
            undo.callback(launcher.kill_group, proc.pid)
            start = launcher.identity(proc.pid)
            # init_* = the monitor too: the workload exists only after start (see ``workload_pid``)
            sandbox.private.update(
                pid=proc.pid,
                pid_start=start,
                init_pid=proc.pid,
                init_start=start,
                fifo=fifo,
                status_file=status_file,
                profile=profile_file,
                started=False,
                wall_clock=plan.wall_clock,
                cpu_limit=next((soft for name, soft, _ in plan.rlimits if name == "RLIMIT_CPU"), None),
            )
            self._procs[sandbox.id] = proc
            undo.pop_all()
        return Identity(proc.pid, start, proc.pid, start)

    def hook_entry(self, pid: int, phase: str) -> HookEntry:
        """Refused: macOS has no namespaces to enter, and ``plan_from_spec`` refuses createContainer/
        startContainer hooks with their JSON pointer before anything is made (``hooks`` says why they
        are not run in place).  Raises ``LaunchFailed`` if reached."""
        raise LaunchFailed(
            f"{phase} hooks run in the sandbox's namespaces; macOS has none to enter (pid {pid})",
            "remove the hook (refused at create: /hooks/" + phase + "/I)",
        )

    def start(self, sandbox: Sandbox) -> None:
        """OCI start: release the gate.  Raises LaunchFailed when the held process is gone."""
        launcher.release(sandbox.private["fifo"])
        sandbox.private.update(started=True, started_at=time.time())

    def exit_status(self, sandbox: Sandbox) -> int | None:
        """The status the monitor recorded (128+n for a signal), or None while running / unknown."""
        return launcher.read_status(sandbox.private.get("status_file", ""))

    def same_process(self, pid: int, start: float | None) -> bool:
        """``pid`` runs, not a zombie, and started at ``start`` (psutil's create_time, seconds)."""
        return launcher.running(pid, start)

    def alive(self, sandbox: Sandbox) -> bool:
        """True while the monitor (same pid and start time) runs and has recorded no status."""
        p = sandbox.private
        proc = self._procs.get(sandbox.id)
        if proc is not None:
            proc.poll()  # reap our own child so it is not a zombie
        return self.exit_status(sandbox) is None and launcher.running(p.get("pid", 0), p.get("pid_start"))

    def paused(self, sandbox: Sandbox) -> bool:
        """Always False: this mechanism has no pause (no freezer on macOS; SIGSTOP is not offered)."""
        return False

    def watch(self, sandbox: Sandbox, first: Facts) -> CounterWatch | None:
        """``Mechanism.watch``: None, nothing to watch on macOS (no cgroup; its limits are not read from
        counters that vanish with the program)."""
        return None

    def cgroup(self, sandbox: Sandbox) -> CgroupControl | None:
        """None: macOS has no control groups (pause, update and stats refuse)."""
        return None

    def exec(self, sandbox: Sandbox, spec: ExecSpec) -> Started:
        """Refused: a Seatbelt sandbox cannot be entered by another process (no namespaces to join;
        a profile applies only to the process sandbox-exec starts and its descendants)."""
        raise CapabilityUnavailable([EXEC_UNAVAILABLE])

    def cpu_limit(self, sandbox: Sandbox) -> int | None:
        """RLIMIT_CPU's soft value as set on the workload at create, or None."""
        limit = sandbox.private.get("cpu_limit")
        return int(limit) if limit is not None else None

    def network_address(self, sandbox: Sandbox) -> str | None:
        """None: a Seatbelt sandbox has no network address of its own."""
        return None

    def joined_namespaces(self, sandbox: Sandbox) -> dict[str, str]:
        """``{}``: macOS has no namespaces."""
        return {}

    def termination(self, sandbox: Sandbox) -> tuple[int | None, int | None] | None:
        """None: the monitor records a shell status only (``exit_status``)."""
        return None

    def remove_residue(self, store: StateStore, sandbox_id: str) -> list[str]:
        """Nothing lives outside the state dir here: drops the (empty) cgroup record.  Returns []."""
        store.drop_cgroup_index(sandbox_id)
        return []

    def observed_cgroups(self, root: str) -> dict[str, HostRecord]:
        """``{}``: no host object outlives a macOS sandbox's state."""
        return {}

    def lost_pids(self, info: HostRecord) -> list[int] | None:
        """None: no host object outlives a macOS sandbox's state."""
        return None

    def status(self, sandbox: Sandbox) -> Status:
        """created (held), running, or stopped with the recorded exit status."""
        if not self.alive(sandbox):
            return Status(sandbox.id, "stopped", 0, sandbox.bundle, {}, exit_status=self.exit_status(sandbox))
        state = "running" if sandbox.private.get("started") else "created"
        return Status(sandbox.id, state, int(sandbox.private["pid"]), sandbox.bundle, {})

    def workload_pid(self, sandbox: Sandbox) -> int:
        """The workload: the monitor's child once started; the monitor itself while held; 0 if gone."""
        import psutil

        p = sandbox.private
        if not launcher.running(p.get("pid", 0), p.get("pid_start")):
            return 0
        with contextlib.suppress(psutil.Error):
            kids = psutil.Process(p["pid"]).children()
            if kids:
                return int(kids[0].pid)
        return int(p["pid"])

    def signal(self, sandbox: Sandbox, signum: int, all_processes: bool = False) -> None:
        """Deliver ``signum`` to the workload, or to every group member but the monitor."""
        p = sandbox.private
        if not launcher.running(p.get("pid", 0), p.get("pid_start")):
            return
        if all_processes and p.get("started"):
            for m in launcher.members(p["pid"]):
                if m.pid != p["pid"]:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(m.pid, signum)
            return
        pid = self.workload_pid(sandbox)
        if pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    def usage(self, sandbox: Sandbox) -> Usage:
        """psutil over the monitor's descendants: RSS (bytes), CPU (microseconds), process count.

        The peak is not available from psutil on macOS (None); I/O counters are not either (None).
        """
        import psutil

        p = sandbox.private
        if not launcher.running(p.get("pid", 0), p.get("pid_start")):
            return Usage(pids=0)
        rss = user = system = n = 0
        with contextlib.suppress(psutil.Error):
            for c in psutil.Process(p["pid"]).children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    rss += c.memory_info().rss
                    t = c.cpu_times()
                    user += int(t.user * 1e6)
                    system += int(t.system * 1e6)
                    n += 1
        return Usage(memory_bytes=rss, cpu_user_us=user, cpu_system_us=system, pids=n)

    def wait(self, sandbox: Sandbox, timeout_s: float | None = None, poll_s: float = 0.05) -> int | None:
        """Wait for the sandbox to stop, enforcing its wall clock from ``start``.

        Returns: the exit status, or None when ``timeout_s`` (seconds) passed first.
        Raises: LimitExceeded("wall_clock"): the wall clock ran out; the process group was killed.
        """
        p = sandbox.private
        now = time.time()
        end = now + timeout_s if timeout_s is not None else None
        wall = p.get("wall_clock")
        limit = (p.get("started_at") or now) + wall if wall and p.get("started") else None
        while self.alive(sandbox):
            t = time.time()
            if limit is not None and t >= limit:
                self.destroy(sandbox)
                raise LimitExceeded("wall_clock", f"{wall:g} s")
            if end is not None and t >= end:
                return None
            time.sleep(poll_s)
        return self.exit_status(sandbox)

    def destroy(self, sandbox: Sandbox) -> None:
        """OCI delete: SIGKILL to the process group (only while the monitor is ours), files removed."""
        p = sandbox.private
        if launcher.running(p.get("pid", 0), p.get("pid_start")):
            launcher.kill_group(p["pid"])
        proc = self._procs.pop(sandbox.id, None)
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        for key in ("fifo", "profile", "status_file"):
            _unlink(p.get(key))


def _unlink(path: str | None) -> None:
    if path:
        with contextlib.suppress(OSError):
            os.unlink(path)


if TYPE_CHECKING:
    from ...mechanism import Mechanism

    #: never evaluated: mypy checks ``DarwinSeatbeltMechanism`` against the ``Mechanism`` protocol
    #: here, on any OS (``mypy shim``); a member missing or off its type fails.  The one line a
    #: platform's mechanism needs to be on the contract (``tests/test_mechanism_contract.py`` fails for
    #: a mechanism class of a platform folder without it).
    _CONTRACT: Mechanism = DarwinSeatbeltMechanism()
