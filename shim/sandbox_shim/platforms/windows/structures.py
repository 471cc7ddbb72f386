"""Win32 constants and job object structures, laid out as in the Windows SDK headers.

Structures follow ``winnt.h`` (JOBOBJECT_*, IO_COUNTERS) and ``processthreadsapi.h`` (STARTUPINFOW,
PROCESS_INFORMATION), written with explicit-width ctypes types, never ``ctypes.wintypes`` or ``c_long``
(4 bytes on Windows, 8 on Linux), so they import and lay out identically on any 64-bit host and the
layout tests run on Linux.  Type map: DWORD=c_uint32, WORD=c_uint16, LARGE_INTEGER=c_int64,
ULONGLONG=c_uint64, SIZE_T/ULONG_PTR=c_size_t, HANDLE and pointers=c_void_p.
"""

from __future__ import annotations

import ctypes

# --- Win32 constants (winnt.h, winbase.h, winerror.h) ------------------------------------------------

# JOBOBJECTINFOCLASS (QueryInformationJobObject / SetInformationJobObject "JobObjectInformationClass").
JobObjectBasicAccountingInformation = 1
JobObjectBasicAndIoAccountingInformation = 8
JobObjectExtendedLimitInformation = 9
JobObjectCpuRateControlInformation = 15
JobObjectMemoryUsageInformation = 28

# JOBOBJECT_BASIC_LIMIT_INFORMATION.LimitFlags.
JOB_OBJECT_LIMIT_ACTIVE_PROCESS = 0x00000008
JOB_OBJECT_LIMIT_PROCESS_MEMORY = 0x00000100
JOB_OBJECT_LIMIT_JOB_MEMORY = 0x00000200
JOB_OBJECT_LIMIT_DIE_ON_UNHANDLED_EXCEPTION = 0x00000400
JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE = 0x00002000

# JOBOBJECT_CPU_RATE_CONTROL_INFORMATION.ControlFlags.
JOB_OBJECT_CPU_RATE_CONTROL_ENABLE = 0x1
JOB_OBJECT_CPU_RATE_CONTROL_WEIGHT_BASED = 0x2
JOB_OBJECT_CPU_RATE_CONTROL_HARD_CAP = 0x4

# CreateProcessW dwCreationFlags ("Process Creation Flags").
CREATE_SUSPENDED = 0x00000004
CREATE_UNICODE_ENVIRONMENT = 0x00000400

# Access rights ("Job Object Security and Access Rights", "Process/Thread Security and Access Rights").
JOB_OBJECT_QUERY = 0x0004
JOB_OBJECT_ALL_ACCESS = 0x1F001F
PROCESS_TERMINATE = 0x0001
PROCESS_QUERY_LIMITED_INFORMATION = 0x1000
SYNCHRONIZE = 0x00100000
THREAD_SUSPEND_RESUME = 0x0002

# Return values.
WAIT_OBJECT_0 = 0x0
WAIT_TIMEOUT = 0x102
RESUME_FAILED = 0xFFFFFFFF  # ResumeThread returns (DWORD)-1 on failure
INFINITE = 0xFFFFFFFF

# winerror.h codes this layer interprets.
ERROR_FILE_NOT_FOUND = 2
ERROR_PATH_NOT_FOUND = 3
ERROR_ACCESS_DENIED = 5
ERROR_BAD_EXE_FORMAT = 193
ERROR_ALREADY_EXISTS = 183


# --- Structures (x64 sizes in the comments, checked by tests/test_windows_job_object.py) -----------


class JOBOBJECT_BASIC_LIMIT_INFORMATION(ctypes.Structure):  # noqa: N801  (Win32 name)
    """winnt.h; 64 bytes on x64.  Time limits in 100-ns ticks, working-set sizes in bytes."""

    _fields_ = [
        ("PerProcessUserTimeLimit", ctypes.c_int64),
        ("PerJobUserTimeLimit", ctypes.c_int64),
        ("LimitFlags", ctypes.c_uint32),
        ("MinimumWorkingSetSize", ctypes.c_size_t),
        ("MaximumWorkingSetSize", ctypes.c_size_t),
        ("ActiveProcessLimit", ctypes.c_uint32),
        ("Affinity", ctypes.c_size_t),
        ("PriorityClass", ctypes.c_uint32),
        ("SchedulingClass", ctypes.c_uint32),
    ]


class IO_COUNTERS(ctypes.Structure):  # noqa: N801
    """winnt.h; 48 bytes.  Operation counts and transfer counts in bytes."""

    _fields_ = [
        ("ReadOperationCount", ctypes.c_uint64),
        ("WriteOperationCount", ctypes.c_uint64),
        ("OtherOperationCount", ctypes.c_uint64),
        ("ReadTransferCount", ctypes.c_uint64),
        ("WriteTransferCount", ctypes.c_uint64),
        ("OtherTransferCount", ctypes.c_uint64),
    ]


class JOBOBJECT_EXTENDED_LIMIT_INFORMATION(ctypes.Structure):  # noqa: N801
    """winnt.h; 144 bytes on x64.  Memory limits and peaks in bytes (committed memory)."""

    _fields_ = [
        ("BasicLimitInformation", JOBOBJECT_BASIC_LIMIT_INFORMATION),
        ("IoInfo", IO_COUNTERS),
        ("ProcessMemoryLimit", ctypes.c_size_t),
        ("JobMemoryLimit", ctypes.c_size_t),
        ("PeakProcessMemoryUsed", ctypes.c_size_t),
        ("PeakJobMemoryUsed", ctypes.c_size_t),
    ]


class JOBOBJECT_BASIC_ACCOUNTING_INFORMATION(ctypes.Structure):  # noqa: N801
    """winnt.h; 48 bytes.  Times in 100-ns ticks."""

    _fields_ = [
        ("TotalUserTime", ctypes.c_int64),
        ("TotalKernelTime", ctypes.c_int64),
        ("ThisPeriodTotalUserTime", ctypes.c_int64),
        ("ThisPeriodTotalKernelTime", ctypes.c_int64),
        ("TotalPageFaultCount", ctypes.c_uint32),
        ("TotalProcesses", ctypes.c_uint32),
        ("ActiveProcesses", ctypes.c_uint32),
        ("TotalTerminatedProcesses", ctypes.c_uint32),
    ]


class JOBOBJECT_BASIC_AND_IO_ACCOUNTING_INFORMATION(ctypes.Structure):  # noqa: N801
    """winnt.h; 96 bytes."""

    _fields_ = [("BasicInfo", JOBOBJECT_BASIC_ACCOUNTING_INFORMATION), ("IoInfo", IO_COUNTERS)]


class JOBOBJECT_MEMORY_USAGE_INFORMATION(ctypes.Structure):  # noqa: N801
    """winnt.h (Windows 10+); 16 bytes.  Committed job memory now and at peak, bytes."""

    _fields_ = [("JobMemory", ctypes.c_uint64), ("PeakJobMemoryUsed", ctypes.c_uint64)]


class _MinMaxRate(ctypes.Structure):
    _fields_ = [("MinRate", ctypes.c_uint16), ("MaxRate", ctypes.c_uint16)]


class _CpuRateUnion(ctypes.Union):
    _anonymous_ = ("MinMax",)
    _fields_ = [("CpuRate", ctypes.c_uint32), ("Weight", ctypes.c_uint32), ("MinMax", _MinMaxRate)]


class JOBOBJECT_CPU_RATE_CONTROL_INFORMATION(ctypes.Structure):  # noqa: N801
    """winnt.h; 8 bytes.  CpuRate: cycles per 10,000 (percent x 100); Weight: 1..9."""

    _anonymous_ = ("u",)
    _fields_ = [("ControlFlags", ctypes.c_uint32), ("u", _CpuRateUnion)]


class STARTUPINFOW(ctypes.Structure):  # noqa: N801
    """processthreadsapi.h; 104 bytes on x64."""

    _fields_ = [
        ("cb", ctypes.c_uint32),
        ("lpReserved", ctypes.c_void_p),
        ("lpDesktop", ctypes.c_void_p),
        ("lpTitle", ctypes.c_void_p),
        ("dwX", ctypes.c_uint32),
        ("dwY", ctypes.c_uint32),
        ("dwXSize", ctypes.c_uint32),
        ("dwYSize", ctypes.c_uint32),
        ("dwXCountChars", ctypes.c_uint32),
        ("dwYCountChars", ctypes.c_uint32),
        ("dwFillAttribute", ctypes.c_uint32),
        ("dwFlags", ctypes.c_uint32),
        ("wShowWindow", ctypes.c_uint16),
        ("cbReserved2", ctypes.c_uint16),
        ("lpReserved2", ctypes.c_void_p),
        ("hStdInput", ctypes.c_void_p),
        ("hStdOutput", ctypes.c_void_p),
        ("hStdError", ctypes.c_void_p),
    ]


class PROCESS_INFORMATION(ctypes.Structure):  # noqa: N801
    """processthreadsapi.h; 24 bytes on x64."""

    _fields_ = [
        ("hProcess", ctypes.c_void_p),
        ("hThread", ctypes.c_void_p),
        ("dwProcessId", ctypes.c_uint32),
        ("dwThreadId", ctypes.c_uint32),
    ]
