"""``WindowsJobMechanism``: the ``Mechanism`` protocol on a Windows Job Object.

OCI create (``provision``) = CreateJobObjectW -> SetInformationJobObject (limits) -> CreateProcessW
(CREATE_SUSPENDED) -> AssignProcessToJobObject -> DuplicateHandle (keep-alive): the process exists, is in
its job, and has run no user code.  OCI start = ResumeThread.  Any failure unwinds everything made so far
(the suspended process terminated, every handle closed) before the typed error is raised.

No Python process stays resident: the job is named ``Local\\sandbox-shim-<id>`` and the sandbox's first
process holds a query-only handle to it (``job_object.keep_alive_in``), so a later shim process reopens
the job by name and re-identifies the pid with IsProcessInJob (a reused pid is not in our job).
``Sandbox.private`` holds ``job_name``, ``pid``, ``tid`` and ``started`` (JSON-serialisable).
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from ...capability import Capability
from ...errors import CapabilityUnavailable, CouldNotRun, LaunchFailed, UsageError
from ...mechanism import Identity, ProvisionOptions, Sandbox, Status, Usage
from . import job_object as jo
from .capabilities import windows_capabilities
from .plan import JobLimits, JobPlan, check_requirements, plan_from_spec

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ...bundle import Spec
    from ...control import Facts
    from ...mechanism import CgroupControl, CounterWatch, ExecSpec, HookEntry, HostRecord, LaunchPlan, Started
    from ...state import StateStore

SIGKILL = 9  # POSIX numbers; Python's signal module has no SIGKILL on Windows
SIGTERM = 15


#: the report ``exec`` refuses with (exit status 4, "not available")
EXEC_UNAVAILABLE = Capability(
    "exec",
    False,
    "job object",
    "a running Job Object sandbox cannot be entered by this mechanism",
    "not offered",
)


def _refuse_options(options: ProvisionOptions) -> None:
    """``CapabilityUnavailable`` for what ``create_suspended`` cannot give the process (it inherits no
    handles): stdio fds, a terminal through a console socket, fds beyond stdio.  Never dropped."""
    asked = (
        ("stdio", options.stdio is not None, "the process inherits no standard handles of the caller's"),
        ("console-socket", bool(options.console_socket), "no terminal is passed on Windows"),
        ("preserve-fds", bool(options.preserve_fds), "no handles beyond stdio are passed on Windows"),
    )
    missing = [Capability(n, False, "job object", why, "not offered") for n, given, why in asked if given]
    if missing:
        raise CapabilityUnavailable(missing)


@dataclass
class _Handles:
    job: int
    process: int
    thread: int | None


def job_name(sandbox_id: str) -> str:
    """The job object's name for a sandbox id (session-local namespace; backslashes replaced)."""
    return "Local\\sandbox-shim-" + sandbox_id.replace("\\", "_")


def extended_limits(limits: JobLimits) -> jo.JOBOBJECT_EXTENDED_LIMIT_INFORMATION:
    """JOBOBJECT_EXTENDED_LIMIT_INFORMATION for ``limits``; KILL_ON_JOB_CLOSE and
    DIE_ON_UNHANDLED_EXCEPTION (no error dialog holding the job open) are always set."""
    info = jo.JOBOBJECT_EXTENDED_LIMIT_INFORMATION()
    flags = jo.JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE | jo.JOB_OBJECT_LIMIT_DIE_ON_UNHANDLED_EXCEPTION
    if limits.job_memory_bytes is not None:
        flags |= jo.JOB_OBJECT_LIMIT_JOB_MEMORY
        info.JobMemoryLimit = limits.job_memory_bytes
    if limits.active_processes is not None:
        flags |= jo.JOB_OBJECT_LIMIT_ACTIVE_PROCESS
        info.BasicLimitInformation.ActiveProcessLimit = limits.active_processes
    info.BasicLimitInformation.LimitFlags = flags
    return info


def cpu_rate_info(limits: JobLimits) -> jo.JOBOBJECT_CPU_RATE_CONTROL_INFORMATION | None:
    """JOBOBJECT_CPU_RATE_CONTROL_INFORMATION for ``limits`` (hard cap, else weight), or None."""
    info = jo.JOBOBJECT_CPU_RATE_CONTROL_INFORMATION()
    if limits.cpu_rate is not None:
        info.ControlFlags = jo.JOB_OBJECT_CPU_RATE_CONTROL_ENABLE | jo.JOB_OBJECT_CPU_RATE_CONTROL_HARD_CAP
        info.CpuRate = limits.cpu_rate
    elif limits.cpu_weight is not None:
        info.ControlFlags = (
            jo.JOB_OBJECT_CPU_RATE_CONTROL_ENABLE | jo.JOB_OBJECT_CPU_RATE_CONTROL_WEIGHT_BASED
        )
        info.Weight = limits.cpu_weight
    else:
        return None
    return info


def _could_not_run(e: jo.JobObjectError, program: str) -> Exception:
    reason = {
        jo.ERROR_FILE_NOT_FOUND: "not_found",
        jo.ERROR_PATH_NOT_FOUND: "not_found",
        jo.ERROR_ACCESS_DENIED: "permission_denied",
        jo.ERROR_BAD_EXE_FORMAT: "exec_failed",
    }.get(e.winerror)
    return CouldNotRun(reason, program, f"Win32 error {e.winerror}") if reason else e


class WindowsJobMechanism:
    """The Job Object mechanism (ARCHITECTURE.md section 6, Windows).

    Args:
        probe: returns this host's capability reports (default ``windows_capabilities``; probed once).
    """

    name = "windows-job-object"
    root: str | None = None  # the state root (``platforms.select.mechanism`` sets it)

    def __init__(self, probe: Any = windows_capabilities) -> None:
        self._probe = probe
        self._reports: list[Capability] | None = None
        self._open: dict[str, _Handles] = {}

    def capabilities(self) -> list[Capability]:
        """This host's reports (probed on first call, then cached for this instance)."""
        if self._reports is None:
            self._reports = list(self._probe())
        return self._reports

    def make_plan(self, spec: Spec, sandbox_id: str) -> JobPlan:
        """The Job Object plan for a loaded bundle (``bundle.Spec``); refuses what this host lacks.

        Raises:
            BundleInvalid: a field cannot be expressed with Job Objects; CapabilityUnavailable.
        """
        plan = plan_from_spec(spec)
        check_requirements(plan, self.capabilities())
        return plan

    def require(self, names: list[str]) -> None:
        """Raise ``CapabilityUnavailable`` for each of ``names`` this host does not provide."""
        by_name = {r.name: r for r in self.capabilities()}
        missing = [
            by_name.get(n) or Capability(n, False, "job object", "not provided on this host", "not reported")
            for n in names
        ]
        missing = [r for r in missing if not r.available]
        if missing:
            raise CapabilityUnavailable(missing)

    def preflight(self, spec: Spec) -> None:
        """Nothing: CreateProcessW finds the program, and ``provision`` reports a missing one as
        ``CouldNotRun`` with the job undone."""

    def provision(self, sandbox: Sandbox, plan: LaunchPlan, options: ProvisionOptions) -> Identity:
        """OCI create: a job with the plan's limits holding the suspended process.

        Args:
            sandbox: fills ``sandbox.private`` (``job_name``, ``pid``, ``tid``, ``started``).
            plan: the ``JobPlan`` ``make_plan`` made from the bundle's ``Spec``.
            options: only the defaults are accepted: no handles of the caller's are inherited
                (``create_suspended``), so a ``stdio`` tuple, a ``console_socket`` or ``preserve_fds``
                is refused (``CapabilityUnavailable``, before any Win32 call), never dropped;
                ``on_record`` is not called (nothing outlives the job's handles).
        Returns:
            the suspended process's pid, as ``pid`` and ``init_pid`` (no start time: a reused pid is
            told apart by IsProcessInJob instead).
        Raises:
            LaunchFailed: ``plan`` is not a ``JobPlan``.
            CapabilityUnavailable: a required capability is missing, or an option above was given
                (before any Win32 call).
            CouldNotRun: CreateProcessW could not find or execute the program (cause: JobObjectError).
            JobObjectError: any other failing call; nothing is left behind.
        """
        if not isinstance(plan, JobPlan):
            raise LaunchFailed(
                f"{type(plan).__name__} is not a Job Object plan", "plan with this mechanism's make_plan"
            )
        check_requirements(plan, self.capabilities())
        _refuse_options(options)
        name = job_name(sandbox.id)
        with ExitStack() as undo:
            job = jo.create_job(name)
            undo.callback(jo.close, job)
            jo.set_information(job, jo.JobObjectExtendedLimitInformation, extended_limits(plan.limits))
            cpu = cpu_rate_info(plan.limits)
            if cpu is not None:
                jo.set_information(job, jo.JobObjectCpuRateControlInformation, cpu)
            try:
                pi = jo.create_suspended(plan.argv, plan.cwd, plan.env)
            except jo.JobObjectError as e:
                mapped = _could_not_run(e, plan.argv[0])
                if mapped is e:
                    raise
                raise mapped from e
            process, thread = int(pi.hProcess), int(pi.hThread)
            undo.callback(jo.close, thread)
            undo.callback(jo.close, process)
            undo.callback(jo.kernel32().TerminateProcess, process, 1)
            jo.assign(job, process)
            jo.keep_alive_in(job, process)
            undo.pop_all()
        self._open[sandbox.id] = _Handles(job, process, thread)
        pid = int(pi.dwProcessId)
        sandbox.private.update(job_name=name, pid=pid, tid=int(pi.dwThreadId), started=False)
        return Identity(pid, None, pid, None)

    def _handles(self, sandbox: Sandbox) -> _Handles:
        """The open handles, reopening them by name/pid in a new shim process.

        Raises:
            JobObjectError: the job is gone, or the pid is no longer a process of this job.
        """
        h = self._open.get(sandbox.id)
        if h is not None:
            return h
        k = jo.kernel32()
        job = jo.open_job(sandbox.private["job_name"])
        with ExitStack() as undo:
            undo.callback(jo.close, job)
            access = jo.PROCESS_QUERY_LIMITED_INFORMATION | jo.SYNCHRONIZE | jo.PROCESS_TERMINATE
            process = k.OpenProcess(access, False, sandbox.private["pid"])
            if not process:
                raise jo.fail("OpenProcess")
            undo.callback(jo.close, process)
            if not jo.process_in_job(process, job):
                raise jo.JobObjectError(
                    "IsProcessInJob", 0, "the pid was reused by a process outside the job"
                )
            thread = None
            if not sandbox.private.get("started"):
                thread = k.OpenThread(jo.THREAD_SUSPEND_RESUME, False, sandbox.private["tid"])
                if not thread:
                    raise jo.fail("OpenThread")
            undo.pop_all()
        h = _Handles(int(job), int(process), int(thread) if thread else None)
        self._open[sandbox.id] = h
        return h

    def hook_entry(self, pid: int, phase: str) -> HookEntry:
        """Refused: a Job Object has no namespaces to enter, and ``plan_from_spec`` refuses
        createContainer/startContainer hooks with their JSON pointer before anything is made (``hooks``
        says why they are not run in place).  Raises ``LaunchFailed`` if reached."""
        raise LaunchFailed(
            f"{phase} hooks run in the sandbox's namespaces; Windows has none to enter (pid {pid})",
            "remove the hook (refused at create: /hooks/" + phase + "/I)",
        )

    def start(self, sandbox: Sandbox) -> None:
        """OCI start: ResumeThread on the held primary thread.

        Raises:
            JobObjectError: ResumeThread (or reopening) failed; the job is then terminated and closed.
        """
        h = self._handles(sandbox)
        if h.thread is None:
            raise jo.JobObjectError("ResumeThread", 0, "the sandbox was already started")
        try:
            jo.resume(h.thread)
        except jo.JobObjectError:
            self.destroy(sandbox)
            raise
        jo.close(h.thread)
        h.thread = None
        sandbox.private["started"] = True

    def signal(self, sandbox: Sandbox, signum: int, all_processes: bool = False) -> None:
        """SIGKILL and SIGTERM both become TerminateJobObject(job, 128 + signum).

        Job Objects have no graceful stop, so SIGTERM is as final as SIGKILL and always reaches every
        process in the job (``all_processes`` changes nothing).
        Raises:
            UsageError: any other signal (no Job Object equivalent).
            JobObjectError: TerminateJobObject failed.
        """
        if signum not in (SIGKILL, SIGTERM):
            raise UsageError(
                f"signal {signum} has no Job Object equivalent", "use SIGKILL (9) or SIGTERM (15)"
            )
        jo.terminate_job(self._handles(sandbox).job, 128 + signum)

    def wait(self, sandbox: Sandbox, timeout_s: float | None = None) -> int | None:
        """Wait for the first process to end: its exit code, or None on timeout (seconds; None = forever)."""
        ms = jo.INFINITE if timeout_s is None else max(0, int(timeout_s * 1000))
        return jo.exit_code(self._handles(sandbox).process, ms)

    def status(self, sandbox: Sandbox) -> Status:
        """created (suspended), running, or stopped (with the exit status; 128+n after a signal)."""
        try:
            code = jo.exit_code(self._handles(sandbox).process, 0)
        except jo.JobObjectError:
            code, gone = None, True
        else:
            gone = code is not None
        if gone:
            return Status(sandbox.id, "stopped", 0, sandbox.bundle, {}, exit_status=code)
        state = "running" if sandbox.private.get("started") else "created"
        return Status(sandbox.id, state, int(sandbox.private["pid"]), sandbox.bundle, {})

    def same_process(self, pid: int, start: float | None) -> bool:
        """Always False: no start time is recorded here (a reused pid is told apart by
        IsProcessInJob), so the library never signals a recorded pid itself; ``destroy`` closes the job."""
        return False

    def alive(self, sandbox: Sandbox) -> bool:
        """True until the primary process ended (or the job is gone)."""
        return self.status(sandbox).status != "stopped"

    def paused(self, sandbox: Sandbox) -> bool:
        """Always False: Job Objects have no freeze."""
        return False

    def exit_status(self, sandbox: Sandbox) -> int | None:
        """The primary process's exit code once it ended (128 + n after a signal), else None."""
        now = self.status(sandbox)
        return now.exit_status if now.status == "stopped" else None

    def termination(self, sandbox: Sandbox) -> tuple[int | None, int | None] | None:
        """None: a Windows exit code does not tell a signal from an exit status."""
        return None

    def workload_pid(self, sandbox: Sandbox) -> int:
        """The primary process's pid while it runs, else 0."""
        return int(sandbox.private.get("pid") or 0) if self.alive(sandbox) else 0

    def watch(self, sandbox: Sandbox, first: Facts) -> CounterWatch | None:
        """``Mechanism.watch``: None, nothing to watch on Windows (no cgroup; its limits are not read from
        counters that vanish with the program)."""
        return None

    def cgroup(self, sandbox: Sandbox) -> CgroupControl | None:
        """None: Windows has no control groups (pause, update and stats refuse)."""
        return None

    def exec(self, sandbox: Sandbox, spec: ExecSpec) -> Started:
        """Refused: a process started later is not confined like the job's first one (this mechanism
        creates it suspended into the job at create only)."""
        raise CapabilityUnavailable([EXEC_UNAVAILABLE])

    def cpu_limit(self, sandbox: Sandbox) -> int | None:
        """None: Job Objects have no RLIMIT_CPU (the CPU rate is a share, not a time limit)."""
        return None

    def network_address(self, sandbox: Sandbox) -> str | None:
        """None: a Job Object has no network of its own."""
        return None

    def joined_namespaces(self, sandbox: Sandbox) -> dict[str, str]:
        """``{}``: Windows has no namespaces."""
        return {}

    def remove_residue(self, store: StateStore, sandbox_id: str) -> list[str]:
        """Nothing outlives the job's handles: drops the (empty) cgroup record.  Returns []."""
        store.drop_cgroup_index(sandbox_id)
        return []

    def observed_cgroups(self, root: str) -> dict[str, HostRecord]:
        """``{}``: a Job Object does not outlive the process holding its handle."""
        return {}

    def lost_pids(self, info: HostRecord) -> list[int] | None:
        """None: a Job Object does not outlive the process holding its handle."""
        return None

    def usage(self, sandbox: Sandbox) -> Usage:
        """Job accounting: CPU from 100-ns ticks to microseconds, I/O bytes (all I/O, not only block),
        active processes, committed memory now and at peak (JobObjectMemoryUsageInformation, Windows 10+;
        else the peak from the extended limit information).

        Raises:
            JobObjectError: the accounting query failed.
        """
        job = self._handles(sandbox).job
        acct = jo.JOBOBJECT_BASIC_AND_IO_ACCOUNTING_INFORMATION()
        jo.query_information(job, jo.JobObjectBasicAndIoAccountingInformation, acct)
        memory: int | None = None
        try:
            mem = jo.JOBOBJECT_MEMORY_USAGE_INFORMATION()
            jo.query_information(job, jo.JobObjectMemoryUsageInformation, mem)
            memory, peak = int(mem.JobMemory), int(mem.PeakJobMemoryUsed)
        except jo.JobObjectError:
            ext = jo.JOBOBJECT_EXTENDED_LIMIT_INFORMATION()
            jo.query_information(job, jo.JobObjectExtendedLimitInformation, ext)
            peak = int(ext.PeakJobMemoryUsed)
        return Usage(
            memory_bytes=memory,
            memory_peak_bytes=peak,
            cpu_user_us=acct.BasicInfo.TotalUserTime // 10,
            cpu_system_us=acct.BasicInfo.TotalKernelTime // 10,
            pids=int(acct.BasicInfo.ActiveProcesses),
            io_read_bytes=int(acct.IoInfo.ReadTransferCount),
            io_write_bytes=int(acct.IoInfo.WriteTransferCount),
        )

    def destroy(self, sandbox: Sandbox) -> None:
        """OCI delete: TerminateJobObject and close every handle.  Never raises for a job already gone."""
        try:
            h = self._handles(sandbox)
        except (jo.JobObjectError, KeyError):
            self._open.pop(sandbox.id, None)
            return
        try:
            jo.terminate_job(h.job, 128 + SIGKILL)
        except jo.JobObjectError:
            pass  # every process already ended; closing the handles below is all that is left
        for handle in (h.thread, h.process, h.job):
            jo.close(handle)
        self._open.pop(sandbox.id, None)


if TYPE_CHECKING:
    from ...mechanism import Mechanism

    #: never evaluated: mypy checks ``WindowsJobMechanism`` against the ``Mechanism`` protocol
    #: here, on any OS (``mypy shim``); a member missing or off its type fails.  The one line a
    #: platform's mechanism needs to be on the contract (``tests/test_mechanism_contract.py`` fails for
    #: a mechanism class of a platform folder without it).
    _CONTRACT: Mechanism = WindowsJobMechanism()
