"""The Windows Job Object layer: structure layouts, OCI mapping, and the Win32 call sequence.

Off Windows, a fake kernel32 is injected into ``job_object.KERNEL32``; the layouts are checked against
the x64 offsets that follow from the Windows SDK headers (winnt.h, processthreadsapi.h).  Tests marked
``win32`` use the real kernel and skip elsewhere with the reason.
"""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import windows_config
from sandbox_shim.bundle import Settings, Spec
from sandbox_shim.errors import BundleInvalid, CapabilityUnavailable, CouldNotRun, ShimError, UsageError
from sandbox_shim.mechanism import Mechanism, ProvisionOptions, Sandbox
from sandbox_shim.platforms.windows import job_object as jo
from sandbox_shim.platforms.windows.capabilities import windows_capabilities
from sandbox_shim.platforms.windows.mechanism import WindowsJobMechanism
from sandbox_shim.platforms.windows.plan import JobPlan, plan_from_spec

ON_WINDOWS = sys.platform == "win32"


def plan_of(config: dict[str, Any], host_cpus: int | None = None) -> JobPlan:
    """The plan of ``config``, through a ``Spec`` as ``make_plan`` gets it (the settings parsed once,
    by ``bundle.Settings``)."""
    spec = Spec("b", "", config, Settings.from_annotations(config.get("annotations") or {}))
    return plan_from_spec(spec, host_cpus)


win32 = pytest.mark.win32
needs_windows = pytest.mark.skipif(
    not ON_WINDOWS, reason="needs Windows (real Job Objects); runs in platforms.yml"
)
x64 = pytest.mark.skipif(ctypes.sizeof(ctypes.c_void_p) != 8, reason="documented layouts are the x64 ones")

# --- layouts -----------------------------------------------------------------------------------------

# (structure, size, {field: offset}) for x64, derived by hand from the SDK header field lists.
LAYOUTS = [
    (
        jo.JOBOBJECT_BASIC_LIMIT_INFORMATION,
        64,
        {
            "PerProcessUserTimeLimit": 0,
            "PerJobUserTimeLimit": 8,
            "LimitFlags": 16,
            "MinimumWorkingSetSize": 24,
            "MaximumWorkingSetSize": 32,
            "ActiveProcessLimit": 40,
            "Affinity": 48,
            "PriorityClass": 56,
            "SchedulingClass": 60,
        },
    ),
    (
        jo.IO_COUNTERS,
        48,
        {
            "ReadOperationCount": 0,
            "ReadTransferCount": 24,
            "WriteTransferCount": 32,
            "OtherTransferCount": 40,
        },
    ),
    (
        jo.JOBOBJECT_EXTENDED_LIMIT_INFORMATION,
        144,
        {
            "BasicLimitInformation": 0,
            "IoInfo": 64,
            "ProcessMemoryLimit": 112,
            "JobMemoryLimit": 120,
            "PeakProcessMemoryUsed": 128,
            "PeakJobMemoryUsed": 136,
        },
    ),
    (
        jo.JOBOBJECT_BASIC_ACCOUNTING_INFORMATION,
        48,
        {
            "TotalUserTime": 0,
            "TotalKernelTime": 8,
            "TotalPageFaultCount": 32,
            "TotalProcesses": 36,
            "ActiveProcesses": 40,
            "TotalTerminatedProcesses": 44,
        },
    ),
    (jo.JOBOBJECT_BASIC_AND_IO_ACCOUNTING_INFORMATION, 96, {"BasicInfo": 0, "IoInfo": 48}),
    (jo.JOBOBJECT_MEMORY_USAGE_INFORMATION, 16, {"JobMemory": 0, "PeakJobMemoryUsed": 8}),
    (jo.JOBOBJECT_CPU_RATE_CONTROL_INFORMATION, 8, {"ControlFlags": 0, "u": 4}),
    (
        jo.STARTUPINFOW,
        104,
        {
            "cb": 0,
            "lpReserved": 8,
            "lpDesktop": 16,
            "lpTitle": 24,
            "dwX": 32,
            "dwFillAttribute": 56,
            "dwFlags": 60,
            "wShowWindow": 64,
            "cbReserved2": 66,
            "lpReserved2": 72,
            "hStdInput": 80,
            "hStdOutput": 88,
            "hStdError": 96,
        },
    ),
    (jo.PROCESS_INFORMATION, 24, {"hProcess": 0, "hThread": 8, "dwProcessId": 16, "dwThreadId": 20}),
]


@x64
@pytest.mark.parametrize("struct,size,offsets", LAYOUTS, ids=[s.__name__ for s, _, _ in LAYOUTS])
def test_structure_layout_matches_sdk_x64(struct: Any, size: int, offsets: dict[str, int]) -> None:
    assert ctypes.sizeof(struct) == size
    for name, offset in offsets.items():
        assert getattr(struct, name).offset == offset, name


def test_cpu_rate_union_aliases_rate_weight_and_min_max() -> None:
    info = jo.JOBOBJECT_CPU_RATE_CONTROL_INFORMATION()
    info.CpuRate = 0x0007_0003
    assert info.Weight == 0x0007_0003
    assert (info.MinRate, info.MaxRate) == (3, 7)  # little-endian halves of the same DWORD
    raw = bytes(info)
    assert raw[4:8] == (0x0007_0003).to_bytes(4, "little")


def test_environment_block_is_sorted_utf16_double_nul() -> None:
    assert jo.environment_block({"b": "2", "A": "1"}).raw.decode("utf-16-le") == "A=1\0b=2\0\0"
    assert jo.environment_block({}).raw == b"\0\0\0\0"  # CreateProcessW: empty block = four zero bytes


# --- fake kernel32 -----------------------------------------------------------------------------------


class FakeKernel32:
    """Records each call; ``fail`` names a function that fails with ``GetLastError() == error``."""

    def __init__(self, fail: str | None = None, error: int = 5, exit_code: int | None = None) -> None:
        self.fail, self.error, self.exit = fail, error, exit_code
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.last = 0
        self.next = 0x100
        self.open: set[int] = set()
        self.kinds: dict[int, str] = {}
        self.info: dict[int, bytes] = {}
        self.in_job = True

    def _rec(self, name: str, *args: Any) -> bool:
        self.calls.append((name, args))
        if self.fail == name:
            self.last = self.error
            return False
        return True

    def _new(self, kind: str) -> int:
        self.next += 4
        self.open.add(self.next)
        self.kinds[self.next] = kind
        return self.next

    def names(self) -> list[str]:
        return [n for n, _ in self.calls if n not in ("GetCurrentProcess",)]

    def args(self, name: str) -> tuple[Any, ...]:
        return next(a for n, a in self.calls if n == name)

    def GetLastError(self) -> int:  # noqa: N802
        return self.last

    def SetLastError(self, code: int) -> None:  # noqa: N802
        self.last = code

    def CreateJobObjectW(self, attrs: Any, name: str | None) -> int:  # noqa: N802
        return self._new("job") if self._rec("CreateJobObjectW", name) else 0

    def OpenJobObjectW(self, access: int, inherit: bool, name: str) -> int:  # noqa: N802
        return self._new("job") if self._rec("OpenJobObjectW", name) else 0

    def SetInformationJobObject(self, job: int, cls: int, ref: Any, size: int) -> bool:  # noqa: N802
        self.info[cls] = bytes(ref._obj)
        return self._rec("SetInformationJobObject", cls, type(ref._obj), size)

    def QueryInformationJobObject(self, job: int, cls: int, ref: Any, size: int, ret: Any) -> bool:  # noqa: N802
        if not self._rec("QueryInformationJobObject", cls):
            return False
        target = ref._obj
        if cls in self.info:
            ctypes.memmove(ctypes.addressof(target), self.info[cls], size)
        if cls == jo.JobObjectBasicAndIoAccountingInformation:
            target.BasicInfo.TotalUserTime = 12_345_670
            target.BasicInfo.TotalKernelTime = 990
            target.BasicInfo.ActiveProcesses = 3
            target.IoInfo.ReadTransferCount = 4096
            target.IoInfo.WriteTransferCount = 512
        if cls == jo.JobObjectMemoryUsageInformation:
            target.JobMemory, target.PeakJobMemoryUsed = 1 << 20, 3 << 20
        return True

    def CreateProcessW(
        self,
        app: Any,
        cmdline: Any,
        pa: Any,
        ta: Any,
        inherit: bool,
        flags: int,  # noqa: N802
        env: Any,
        cwd: Any,
        si: Any,
        pi: Any,
    ) -> bool:
        if not self._rec("CreateProcessW", cmdline.value, flags, env.raw, cwd, inherit, si._obj.cb):
            return False
        pi._obj.hProcess, pi._obj.hThread = self._new("process"), self._new("thread")
        pi._obj.dwProcessId, pi._obj.dwThreadId = 4242, 4343
        return True

    def AssignProcessToJobObject(self, job: int, process: int) -> bool:  # noqa: N802
        return self._rec("AssignProcessToJobObject", self.kinds[job], self.kinds[process])

    def GetCurrentProcess(self) -> int:  # noqa: N802
        self.calls.append(("GetCurrentProcess", ()))
        return -1

    def DuplicateHandle(self, src: int, h: int, dst: int, out: Any, access: int, inh: bool, opt: int) -> bool:  # noqa: N802
        return self._rec("DuplicateHandle", self.kinds[h], self.kinds[dst], access)

    def ResumeThread(self, thread: int) -> int:  # noqa: N802
        return 1 if self._rec("ResumeThread", self.kinds[thread]) else jo.RESUME_FAILED

    def TerminateJobObject(self, job: int, code: int) -> bool:  # noqa: N802
        ok = self._rec("TerminateJobObject", code)
        if ok:
            self.exit = code
        return ok

    def TerminateProcess(self, process: int, code: int) -> bool:  # noqa: N802
        return self._rec("TerminateProcess", self.kinds[process], process in self.open)

    def OpenProcess(self, access: int, inherit: bool, pid: int) -> int:  # noqa: N802
        return self._new("process") if self._rec("OpenProcess", pid) else 0

    def OpenThread(self, access: int, inherit: bool, tid: int) -> int:  # noqa: N802
        return self._new("thread") if self._rec("OpenThread", tid) else 0

    def IsProcessInJob(self, process: int, job: int, out: Any) -> bool:  # noqa: N802
        out._obj.value = int(self.in_job)
        return self._rec("IsProcessInJob")

    def WaitForSingleObject(self, h: int, ms: int) -> int:  # noqa: N802
        self._rec("WaitForSingleObject", ms)
        return jo.WAIT_TIMEOUT if self.exit is None else jo.WAIT_OBJECT_0

    def GetExitCodeProcess(self, h: int, out: Any) -> bool:  # noqa: N802
        out._obj.value = self.exit or 0
        return self._rec("GetExitCodeProcess")

    def CloseHandle(self, h: int) -> bool:  # noqa: N802
        assert h in self.open, f"handle {h:#x} closed twice or never opened"
        self.open.discard(h)
        return self._rec("CloseHandle", self.kinds[h])


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeKernel32:
    k = FakeKernel32()
    monkeypatch.setattr(jo, "KERNEL32", k)
    return k


def _available() -> list[Any]:
    from sandbox_shim.capability import Capability

    names = [
        "job-object",
        "job-object.memory",
        "job-object.processes",
        "job-object.cpu",
        "job-object.accounting",
    ]
    return [Capability(n, True, "job object", "", "test") for n in names] + [
        Capability("filesystem.confinement", False, "job object", "no path rules", "test"),
        Capability("network.deny", False, "job object", "no socket rules", "test"),
    ]


def _config(**resources: Any) -> dict[str, Any]:
    return {
        "process": {
            "args": ["C:\\tools\\prog.exe", "a b", 'q"x'],
            "cwd": "C:\\work",
            "env": ["PATH=C:\\bin", "Z=9"],
        },
        "windows": {"resources": resources},
        # network "host": what a job has (and what bundle.load requires of a config without a network
        # namespace); "none", the default, needs network.deny, which Job Objects lack
        "annotations": {
            "sandbox-shim.requires": "job-object.memory,job-object.processes",
            "sandbox-shim.network": "host",
        },
    }


def _mech() -> WindowsJobMechanism:
    return WindowsJobMechanism(probe=_available)


# --- call sequence -----------------------------------------------------------------------------------

SEQUENCE = [
    "CreateJobObjectW",
    "SetInformationJobObject",
    "SetInformationJobObject",
    "CreateProcessW",
    "AssignProcessToJobObject",
    "DuplicateHandle",
]


def test_mechanism_satisfies_protocol() -> None:
    assert isinstance(_mech(), Mechanism)


def test_provision_then_start_call_sequence_and_arguments(fake: FakeKernel32) -> None:
    sb = Sandbox("t1", "C:\\bundles\\t1")
    cfg = _config(memory={"limit": 64 << 20}, cpu={"maximum": 2500})
    m = _mech()
    m.provision(sb, plan_of(cfg), ProvisionOptions())
    assert fake.names() == SEQUENCE
    assert fake.args("CreateJobObjectW") == ("Local\\sandbox-shim-t1",)
    ext = jo.JOBOBJECT_EXTENDED_LIMIT_INFORMATION.from_buffer_copy(
        fake.info[jo.JobObjectExtendedLimitInformation]
    )
    assert ext.JobMemoryLimit == 64 << 20
    assert ext.BasicLimitInformation.LimitFlags & jo.JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE
    assert ext.BasicLimitInformation.LimitFlags & jo.JOB_OBJECT_LIMIT_JOB_MEMORY
    assert not ext.BasicLimitInformation.LimitFlags & jo.JOB_OBJECT_LIMIT_ACTIVE_PROCESS
    cpu = jo.JOBOBJECT_CPU_RATE_CONTROL_INFORMATION.from_buffer_copy(
        fake.info[jo.JobObjectCpuRateControlInformation]
    )
    assert cpu.ControlFlags == jo.JOB_OBJECT_CPU_RATE_CONTROL_ENABLE | jo.JOB_OBJECT_CPU_RATE_CONTROL_HARD_CAP
    assert cpu.CpuRate == 2500
    cmdline, flags, env, cwd, inherit, cb = fake.args("CreateProcessW")
    assert cmdline == 'C:\\tools\\prog.exe "a b" q\\"x'
    assert flags & jo.CREATE_SUSPENDED and flags & jo.CREATE_UNICODE_ENVIRONMENT
    assert env.decode("utf-16-le") == "PATH=C:\\bin\0Z=9\0\0"
    assert (cwd, inherit, cb) == ("C:\\work", False, ctypes.sizeof(jo.STARTUPINFOW))
    assert fake.args("AssignProcessToJobObject") == ("job", "process")
    assert fake.args("DuplicateHandle") == ("job", "process", jo.JOB_OBJECT_QUERY)
    assert "ResumeThread" not in fake.names()
    assert m.status(sb).status == "created"
    assert sb.private == {"job_name": "Local\\sandbox-shim-t1", "pid": 4242, "tid": 4343, "started": False}

    m.start(sb)
    assert fake.args("ResumeThread") == ("thread",)
    assert m.status(sb).status == "running" and m.status(sb).pid == 4242
    m.signal(sb, 15)
    assert fake.args("TerminateJobObject") == (128 + 15,)
    st = m.status(sb)
    assert (st.status, st.exit_status, st.pid) == ("stopped", 143, 0)
    m.destroy(sb)
    assert fake.open == set()


FAILURES = [
    ("CreateJobObjectW", set()),
    ("SetInformationJobObject", set()),
    ("AssignProcessToJobObject", {"process"}),
    ("DuplicateHandle", {"process"}),
]


@pytest.mark.parametrize("call,terminated", FAILURES, ids=[c for c, _ in FAILURES])
def test_each_failing_call_is_typed_and_leaves_nothing(
    fake: FakeKernel32, call: str, terminated: set[str]
) -> None:
    fake.fail, fake.error = call, 1450  # ERROR_NO_SYSTEM_RESOURCES
    sb = Sandbox("t2", "b")
    with pytest.raises(jo.JobObjectError) as ei:
        _mech().provision(sb, plan_of(_config(memory={"limit": 1 << 20})), ProvisionOptions())
    assert isinstance(ei.value, ShimError)
    assert (ei.value.function, ei.value.winerror) == (call, 1450)
    assert fake.open == set(), "every handle made before the failure is closed"
    assert {a[0] for n, a in fake.calls if n == "TerminateProcess"} == terminated
    assert (
        fake.names().index(call)
        == len([n for n in fake.names() if n not in ("CloseHandle", "TerminateProcess")]) - 1
    )
    assert "ResumeThread" not in fake.names() and sb.private == {}


@pytest.mark.parametrize(
    "code,reason", [(2, "not_found"), (5, "permission_denied"), (193, "exec_failed"), (87, None)]
)
def test_create_process_failure_maps_win32_error(fake: FakeKernel32, code: int, reason: str | None) -> None:
    fake.fail, fake.error = "CreateProcessW", code
    with pytest.raises(ShimError) as ei:
        _mech().provision(Sandbox("t3", "b"), plan_of(_config()), ProvisionOptions())
    err = ei.value
    if reason is None:
        assert isinstance(err, jo.JobObjectError) and err.winerror == 87
    else:
        assert isinstance(err, CouldNotRun) and err.reason == reason
        assert err.__cause__.winerror == code  # type: ignore[union-attr]
    assert fake.open == set()
    assert "TerminateProcess" not in fake.names()  # no process was made


def test_resume_failure_terminates_job_and_closes_everything(fake: FakeKernel32) -> None:
    m, sb = _mech(), Sandbox("t4", "b")
    m.provision(sb, plan_of(_config()), ProvisionOptions())
    fake.fail, fake.error = "ResumeThread", 6
    with pytest.raises(jo.JobObjectError) as ei:
        m.start(sb)
    assert (ei.value.function, ei.value.winerror) == ("ResumeThread", 6)
    assert "TerminateJobObject" in fake.names()
    assert fake.open == set()


def test_existing_job_name_is_refused_and_closed(fake: FakeKernel32) -> None:
    def create(attrs: Any, name: str | None) -> int:
        fake.last = jo.ERROR_ALREADY_EXISTS
        return fake._new("job")

    fake.CreateJobObjectW = create  # type: ignore[method-assign]
    with pytest.raises(jo.JobObjectError) as ei:
        _mech().provision(Sandbox("dup", "b"), plan_of(_config()), ProvisionOptions())
    assert ei.value.winerror == jo.ERROR_ALREADY_EXISTS and fake.open == set()


def test_tenant_default_is_refused_before_any_win32_call(fake: FakeKernel32) -> None:
    cfg = _config()
    del cfg["annotations"]  # no requires: the tenant set; no network setting: "none", a namespace of its own
    cfg["linux"] = {"namespaces": [{"type": "network"}]}  # (bundle.load refuses "none" without one)
    with pytest.raises(CapabilityUnavailable) as ei:
        _mech().provision(Sandbox("t5", "b"), plan_of(cfg), ProvisionOptions())
    assert {r.name for r in ei.value.reports} == {"filesystem.confinement", "network.deny"}
    assert fake.calls == []


def test_reopen_in_new_process_checks_pid_identity(fake: FakeKernel32) -> None:
    sb = Sandbox("t6", "b")
    first = _mech()
    first.provision(sb, plan_of(_config()), ProvisionOptions())
    first.start(sb)
    later = _mech()  # a new shim process: no handles in memory
    assert later.status(sb).status == "running"
    assert fake.args("OpenJobObjectW") == ("Local\\sandbox-shim-t6",)
    assert fake.args("OpenProcess") == (4242,)
    assert "OpenThread" not in fake.names()  # already started: no thread needed
    fake.in_job = False
    with pytest.raises(jo.JobObjectError) as ei:
        _mech().signal(sb, 9)
    assert ei.value.function == "IsProcessInJob"


def test_signal_other_than_kill_term_is_a_usage_error(fake: FakeKernel32) -> None:
    m, sb = _mech(), Sandbox("t7", "b")
    m.provision(sb, plan_of(_config()), ProvisionOptions())
    with pytest.raises(UsageError):
        m.signal(sb, 1)
    m.signal(sb, 9)
    assert fake.args("TerminateJobObject") == (137,)


def test_usage_converts_ticks_and_reads_accounting(fake: FakeKernel32) -> None:
    m, sb = _mech(), Sandbox("t8", "b")
    m.provision(sb, plan_of(_config()), ProvisionOptions())
    u = m.usage(sb)
    assert (u.cpu_user_us, u.cpu_system_us) == (1_234_567, 99)  # 100-ns ticks // 10
    assert (u.pids, u.io_read_bytes, u.io_write_bytes) == (3, 4096, 512)
    assert (u.memory_bytes, u.memory_peak_bytes) == (1 << 20, 3 << 20)


def test_capability_probe_tries_each_limit(fake: FakeKernel32) -> None:
    reports = {r.name: r for r in windows_capabilities()}
    assert all(
        reports[n].available
        for n in (
            "job-object",
            "job-object.memory",
            "job-object.processes",
            "job-object.cpu",
            "job-object.accounting",
        )
    )
    assert not reports["filesystem.confinement"].available and not reports["network.deny"].available
    assert reports["network.deny"].mechanism == "job object" and reports["network.deny"].detail
    assert fake.open == set()


def test_capability_probe_reports_a_failing_cpu_call(fake: FakeKernel32) -> None:
    original = fake.SetInformationJobObject

    def set_info(job: int, cls: int, ref: Any, size: int) -> bool:
        if cls == jo.JobObjectCpuRateControlInformation:
            fake.last = 87
            return False
        return original(job, cls, ref, size)

    fake.SetInformationJobObject = set_info  # type: ignore[method-assign]
    reports = {r.name: r for r in windows_capabilities()}
    assert not reports["job-object.cpu"].available and "87" in reports["job-object.cpu"].detail
    assert reports["job-object.memory"].available


@pytest.mark.skipif(ON_WINDOWS, reason="checks the off-Windows report")
def test_capabilities_off_windows_are_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jo, "KERNEL32", None)
    reports = windows_capabilities()
    assert reports and not any(r.available for r in reports)


# --- OCI mapping -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cpu,rate,weight",
    [
        ({"maximum": 1500}, 1500, None),
        ({"count": 2}, 2500, None),  # 2 of 8 host CPUs
        ({"count": 16}, None, None),  # more than the host: no cap
        ({"count": 4, "maximum": 1500}, 1500, None),
        ({"shares": 5000}, None, 5),
        ({"shares": 1}, None, 1),
        ({"shares": 10000}, None, 9),
        ({"shares": 5000, "maximum": 9000}, 9000, None),
    ],
)
def test_cpu_mapping(cpu: dict[str, int], rate: int | None, weight: int | None) -> None:
    plan = plan_of(_config(cpu=cpu), host_cpus=8)
    assert (plan.limits.cpu_rate, plan.limits.cpu_weight) == (rate, weight)
    assert bool(plan.notes) == ("shares" in cpu and rate is not None)
    assert ("job-object.cpu" in plan.requires) == (rate is not None or weight is not None)


def test_plan_fields_and_implied_requirements() -> None:
    cfg = _config(memory={"limit": 1 << 30})
    cfg["annotations"] = {
        "sandbox-shim.requires": "job-object.processes",
        "sandbox-shim.windows.active-process-limit": "16",
        "sandbox-shim.network": "host",
    }
    plan = plan_of(cfg)
    assert isinstance(plan, JobPlan)
    assert plan.argv[0] == "C:\\tools\\prog.exe" and plan.cwd == "C:\\work"
    assert plan.env == {"PATH": "C:\\bin", "Z": "9"}
    assert (plan.limits.job_memory_bytes, plan.limits.active_processes) == (1 << 30, 16)
    assert plan.requires == ("job-object", "job-object.memory", "job-object.processes")


def test_invalid_config_gives_pointers_and_hides_env_values() -> None:
    cfg = _config(cpu={"maximum": 20000, "shares": -1}, memory={"limit": "1G"})
    cfg["process"]["args"] = []
    cfg["process"]["env"] = ["SECRET_TOKEN"]  # no '=': the value must never appear in a message
    cfg["annotations"]["sandbox-shim.requires"] = "job-object.memory,teleport"
    with pytest.raises(BundleInvalid) as ei:
        plan_of(cfg)
    pointers = {p.pointer for p in ei.value.problems}
    # process.args and process.env are the Spec's (bundle.load refuses args [] and "SECRET_TOKEN" with
    # their pointers on every platform: tests/test_platform_plans.py); the planner reads them parsed
    assert pointers == {
        "/windows/resources/cpu/maximum",
        "/windows/resources/cpu/shares",
        "/windows/resources/memory/limit",
    }  # "teleport" is refused by bundle.load against the capability registry, the one list of names
    # (tests/test_capabilities_registry.py), not by a list of the planner's own
    assert all("SECRET_TOKEN" not in p.message for p in ei.value.problems)


# --- the real kernel ---------------------------------------------------------------------------------


@win32
@needs_windows
def test_real_job_runs_and_reports(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jo, "KERNEL32", None)
    import os

    m, sb = WindowsJobMechanism(), Sandbox(f"pytest-{os.getpid()}", os.getcwd())
    cfg = {
        "process": {
            "args": [sys.executable, "-c", "import sys; sys.exit(7)"],
            "cwd": os.getcwd(),
            "env": ["SYSTEMROOT=" + os.environ.get("SYSTEMROOT", r"C:\Windows")],
        },
        "windows": {"resources": {"memory": {"limit": 512 << 20}, "cpu": {"maximum": 5000}}},
        "annotations": {"sandbox-shim.requires": "job-object.memory,job-object.cpu"},
    }
    try:
        m.provision(sb, plan_of(cfg), ProvisionOptions())
        assert m.status(sb).status == "created"
        m.start(sb)
        assert m.wait(sb, 60) == 7
        assert m.status(sb).exit_status == 7
        assert m.usage(sb).cpu_user_us is not None
    finally:
        m.destroy(sb)


@win32
@needs_windows
def test_real_memory_limit_stops_allocation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jo, "KERNEL32", None)
    import os

    m, sb = WindowsJobMechanism(), Sandbox(f"pytest-mem-{os.getpid()}", os.getcwd())
    prog = "import sys\ntry:\n b = bytearray(512 << 20)\nexcept MemoryError:\n sys.exit(3)\nsys.exit(0)"
    cfg = {
        "process": {
            "args": [sys.executable, "-c", prog],
            "cwd": os.getcwd(),
            "env": ["SYSTEMROOT=" + os.environ.get("SYSTEMROOT", r"C:\Windows")],
        },
        "windows": {"resources": {"memory": {"limit": 128 << 20}}},
        "annotations": {"sandbox-shim.requires": "job-object.memory"},
    }
    try:
        m.provision(sb, plan_of(cfg), ProvisionOptions())
        m.start(sb)
        assert m.wait(sb, 60) == 3
    finally:
        m.destroy(sb)


@win32
@needs_windows
def test_real_probe_reports_limits_but_no_confinement(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jo, "KERNEL32", None)
    reports = {r.name: r for r in windows_capabilities()}
    assert reports["job-object.memory"].available and reports["job-object.processes"].available
    assert not reports["filesystem.confinement"].available


# --- through the library: api.provision / start / status / destroy ------------------------------------


def test_the_library_drives_the_windows_mechanism(fake: FakeKernel32, tmp_path: Path) -> None:
    """The library's own path (bundle.load -> make_plan -> provision -> the record) with the Windows
    mechanism over the fake kernel32: the api reads what ``provision`` returns, no Linux key of
    ``Sandbox.private`` (``init_pid``, ``pid_start``).

    The config has no pid namespace (a Job Object has none to give): ``bundle.load`` takes it, the
    pid-namespace floor being the Linux planner's rule (``platforms/linux/config_checks.py``)."""
    import json

    from sandbox_shim import api

    bundle = tmp_path / "bundle"
    (bundle / "rootfs").mkdir(parents=True)
    (bundle / "storage").mkdir()
    cfg = windows_config(["/prog.exe", "a"])  # valid: bundle.load's policy holds on every OS
    cfg["windows"] = {"resources": {"memory": {"limit": 64 << 20}}}
    cfg["annotations"]["sandbox-shim.requires"] = "job-object"  # the limit adds job-object.memory
    (bundle / "config.json").write_text(json.dumps(cfg))
    m = _mech()
    m.root = str(tmp_path / "state")
    created = api.provision(m, Sandbox("w1", str(bundle)))
    assert (created.status, created.pid) == ("created", 4242)
    made = ["CreateJobObjectW", "SetInformationJobObject", "CreateProcessW", "AssignProcessToJobObject"]
    assert fake.names()[:4] == made  # the memory limit only: no CPU-rate call
    rec = api.store_of(m).read("w1")
    assert (rec.pid, rec.init_pid, rec.pid_start) == (4242, 4242, None)
    assert rec.private["plan"] == {"hooks": {}, "wall_clock": None, "network": "host"}
    assert api.start(m, "w1").status == "running"
    assert "ResumeThread" in fake.names()
    assert api.status(m, "w1").status == "running"
    api.signal(m, "w1", 9)
    assert api.status(m, "w1").status == "stopped"
    api.destroy(m, "w1")
    assert not fake.open  # every handle closed
    assert api.list_sandboxes(m) == []


def _library_bundle(tmp_path: Path) -> Path:
    """A Windows-shaped bundle without a pid namespace, as in the library test above."""
    import json

    bundle = tmp_path / "bundle"
    (bundle / "rootfs").mkdir(parents=True)
    (bundle / "storage").mkdir()
    prog = bundle / "rootfs" / "prog.exe"
    prog.write_text("")
    prog.chmod(0o755)  # run_bundle's preflight finds the program
    cfg = windows_config(["/prog.exe", "a"])
    cfg["annotations"]["sandbox-shim.requires"] = "job-object"  # as the library test above
    (bundle / "config.json").write_text(json.dumps(cfg))
    return bundle


def test_the_library_refuses_stdio_on_windows(fake: FakeKernel32, tmp_path: Path) -> None:
    """``ProvisionOptions.stdio``: the Job Object path passes no handles, so stdio given to
    ``api.provision`` (and ``run_bundle``'s capture path) is refused before any Win32 call, never
    dropped."""
    from sandbox_shim import api
    from sandbox_shim.execution import run_bundle

    bundle = _library_bundle(tmp_path)
    m = _mech()
    m.root = str(tmp_path / "state")
    with pytest.raises(CapabilityUnavailable) as e:
        api.provision(m, Sandbox("w2", str(bundle)), stdio=(0, 1, 2))
    assert [r.name for r in e.value.reports] == ["stdio"]
    with pytest.raises(CapabilityUnavailable) as e:
        run_bundle(m, "w3", bundle, timeout=5)
    assert [r.name for r in e.value.reports] == ["stdio"] and e.value.exit_status == 4
    assert fake.names() == [] and api.list_sandboxes(m) == []


def test_exec_is_refused_as_not_available_on_windows(fake: FakeKernel32, tmp_path: Path) -> None:
    from sandbox_shim import api
    from sandbox_shim.execution import execute

    m = _mech()
    m.root = str(tmp_path / "state")
    api.provision(m, Sandbox("w4", str(_library_bundle(tmp_path))))
    assert api.start(m, "w4").status == "running"
    with pytest.raises(CapabilityUnavailable) as e:
        execute(m, "w4", ("/prog.exe", []))
    assert e.value.exit_status == 4 and [r.name for r in e.value.reports] == ["exec"]
    api.destroy(m, "w4", force=True)
    assert not fake.open


def test_cgroup_verbs_are_not_supported_on_windows_naming_it(fake: FakeKernel32, tmp_path: Path) -> None:
    """pause, update, stats and events (and resume, after the state check) need control groups, which
    Windows has none of: each is refused as not supported (``CapabilityUnavailable``, exit status 4)
    naming Windows, never as a failed launch with "recreate it".  Control: the same running sandbox
    answers ``status``."""
    from sandbox_shim import api, control

    m = _mech()
    m.root = str(tmp_path / "state")
    api.provision(m, Sandbox("w5", str(_library_bundle(tmp_path))))
    assert api.start(m, "w5").status == "running"
    calls = {
        "pause": lambda: control.pause(m, "w5"),
        "update": lambda: control.update(m, "w5", {"memory": {"limit": 1 << 25}}),
        "stats": lambda: control.stats(m, "w5"),
        "events": lambda: next(control.events(m, "w5", 0.01)),
    }
    for verb, call in calls.items():
        with pytest.raises(CapabilityUnavailable) as e:
            call()
        assert e.value.exit_status == 4 and [r.name for r in e.value.reports] == [verb], verb
        assert f"Windows has no control groups: {verb} is not supported on Windows" in e.value.line()
    assert api.status(m, "w5").status == "running"
    api.destroy(m, "w5", force=True)
    assert not fake.open
