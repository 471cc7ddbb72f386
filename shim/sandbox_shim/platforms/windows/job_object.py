"""Job Objects through ctypes: the structures, the constants and the calls, each failure typed.

The constants and structures live in ``structures.py`` (re-exported here, so ``job_object.X`` works
for every Win32 name this layer uses).

``kernel32`` is looked up through :func:`kernel32` on every call; tests replace ``KERNEL32`` (module
attribute) with a fake object that has the same method names, including ``GetLastError`` and
``SetLastError``.  Every failing call raises :class:`JobObjectError` (a ``LaunchFailed``) carrying the
Win32 function name and the ``GetLastError`` code.
"""

from __future__ import annotations

import ctypes
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from ...errors import LaunchFailed
from .structures import (  # noqa: F401  (re-exported: callers use job_object.<Win32 name>)
    CREATE_SUSPENDED,
    CREATE_UNICODE_ENVIRONMENT,
    ERROR_ACCESS_DENIED,
    ERROR_ALREADY_EXISTS,
    ERROR_BAD_EXE_FORMAT,
    ERROR_FILE_NOT_FOUND,
    ERROR_PATH_NOT_FOUND,
    INFINITE,
    IO_COUNTERS,
    JOB_OBJECT_ALL_ACCESS,
    JOB_OBJECT_CPU_RATE_CONTROL_ENABLE,
    JOB_OBJECT_CPU_RATE_CONTROL_HARD_CAP,
    JOB_OBJECT_CPU_RATE_CONTROL_WEIGHT_BASED,
    JOB_OBJECT_LIMIT_ACTIVE_PROCESS,
    JOB_OBJECT_LIMIT_DIE_ON_UNHANDLED_EXCEPTION,
    JOB_OBJECT_LIMIT_JOB_MEMORY,
    JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE,
    JOB_OBJECT_LIMIT_PROCESS_MEMORY,
    JOB_OBJECT_QUERY,
    JOBOBJECT_BASIC_ACCOUNTING_INFORMATION,
    JOBOBJECT_BASIC_AND_IO_ACCOUNTING_INFORMATION,
    JOBOBJECT_BASIC_LIMIT_INFORMATION,
    JOBOBJECT_CPU_RATE_CONTROL_INFORMATION,
    JOBOBJECT_EXTENDED_LIMIT_INFORMATION,
    JOBOBJECT_MEMORY_USAGE_INFORMATION,
    PROCESS_INFORMATION,
    PROCESS_QUERY_LIMITED_INFORMATION,
    PROCESS_TERMINATE,
    RESUME_FAILED,
    STARTUPINFOW,
    SYNCHRONIZE,
    THREAD_SUSPEND_RESUME,
    WAIT_OBJECT_0,
    WAIT_TIMEOUT,
    JobObjectBasicAccountingInformation,
    JobObjectBasicAndIoAccountingInformation,
    JobObjectCpuRateControlInformation,
    JobObjectExtendedLimitInformation,
    JobObjectMemoryUsageInformation,
)

# --- kernel32 access -------------------------------------------------------------------------------


class JobObjectError(LaunchFailed):
    """A Win32 call failed.

    Attributes:
        function: the Win32 function that failed (e.g. ``AssignProcessToJobObject``).
        winerror: its ``GetLastError`` code (winerror.h), 0 when the OS gave none.
    """

    kind = "launch_failed"

    def __init__(self, function: str, winerror: int, hint: str = "") -> None:
        self.function = function
        self.winerror = winerror
        super().__init__(f"{function} failed: Win32 error {winerror}", hint)

    def to_dict(self) -> dict[str, Any]:
        d = super().to_dict()
        d.update(function=self.function, winerror=self.winerror)
        return d


#: The kernel32 in use: None loads the real one on first use; tests assign a fake here.
KERNEL32: Any = None

_H = ctypes.c_void_p
_B = ctypes.c_int32  # BOOL
_D = ctypes.c_uint32
_SIGNATURES: dict[str, tuple[Any, list[Any]]] = {
    "CreateJobObjectW": (_H, [ctypes.c_void_p, ctypes.c_wchar_p]),
    "OpenJobObjectW": (_H, [_D, _B, ctypes.c_wchar_p]),
    "SetInformationJobObject": (_B, [_H, ctypes.c_int32, ctypes.c_void_p, _D]),
    "QueryInformationJobObject": (_B, [_H, ctypes.c_int32, ctypes.c_void_p, _D, ctypes.c_void_p]),
    "CreateProcessW": (
        _B,
        [
            ctypes.c_wchar_p,
            ctypes.c_wchar_p,
            ctypes.c_void_p,
            ctypes.c_void_p,
            _B,
            _D,
            ctypes.c_void_p,
            ctypes.c_wchar_p,
            ctypes.c_void_p,
            ctypes.c_void_p,
        ],
    ),
    "AssignProcessToJobObject": (_B, [_H, _H]),
    "IsProcessInJob": (_B, [_H, _H, ctypes.c_void_p]),
    "ResumeThread": (_D, [_H]),
    "TerminateJobObject": (_B, [_H, _D]),
    "TerminateProcess": (_B, [_H, _D]),
    "DuplicateHandle": (_B, [_H, _H, _H, ctypes.c_void_p, _D, _B, _D]),
    "GetCurrentProcess": (_H, []),
    "OpenProcess": (_H, [_D, _B, _D]),
    "OpenThread": (_H, [_D, _B, _D]),
    "WaitForSingleObject": (_D, [_H, _D]),
    "GetExitCodeProcess": (_B, [_H, ctypes.c_void_p]),
    "CloseHandle": (_B, [_H]),
}


class _RealKernel32:
    """kernel32.dll with typed signatures; ``GetLastError`` reads ctypes' saved copy (use_last_error)."""

    def __init__(self) -> None:
        dll = ctypes.WinDLL("kernel32", use_last_error=True)  # type: ignore[attr-defined]
        for name, (restype, argtypes) in _SIGNATURES.items():
            fn = getattr(dll, name)
            fn.restype, fn.argtypes = restype, argtypes
            setattr(self, name, fn)

    @staticmethod
    def GetLastError() -> int:  # noqa: N802  (Win32 name)
        return ctypes.get_last_error()  # type: ignore[attr-defined]

    @staticmethod
    def SetLastError(code: int) -> None:  # noqa: N802
        ctypes.set_last_error(code)  # type: ignore[attr-defined]


def kernel32() -> Any:
    """The kernel32 object in use (the injected ``KERNEL32``, else the real DLL, loaded once).

    Raises:
        JobObjectError: not on Windows (``function`` = ``LoadLibrary``, ``winerror`` 0).
    """
    global KERNEL32
    if KERNEL32 is None:
        if sys.platform != "win32":
            raise JobObjectError("LoadLibrary", 0, "Job Objects exist only on Windows")
        KERNEL32 = _RealKernel32()
    return KERNEL32


def fail(function: str, hint: str = "") -> JobObjectError:
    """A :class:`JobObjectError` for ``function`` with the current ``GetLastError`` code."""
    return JobObjectError(function, int(kernel32().GetLastError()), hint)


def close(handle: int | None) -> None:
    """CloseHandle, ignoring a null handle and a failure (used on cleanup paths)."""
    if handle:
        kernel32().CloseHandle(handle)


# --- The calls ---------------------------------------------------------------------------------------


def create_job(name: str | None) -> int:
    """CreateJobObjectW(NULL, name): a new job object handle.

    Args:
        name: object name (e.g. ``Local\\sandbox-shim-<id>``) or None for an anonymous job.
    Raises:
        JobObjectError: the call failed, or a job of that name already exists (``ERROR_ALREADY_EXISTS``;
            the handle to the existing job is closed, never used).
    """
    k = kernel32()
    k.SetLastError(0)
    handle = k.CreateJobObjectW(None, name)
    if not handle:
        raise fail("CreateJobObjectW")
    if k.GetLastError() == ERROR_ALREADY_EXISTS:
        close(handle)
        raise JobObjectError("CreateJobObjectW", ERROR_ALREADY_EXISTS, f"a job named {name!r} exists")
    return int(handle)


def set_information(job: int, info_class: int, info: ctypes.Structure) -> None:
    """SetInformationJobObject(job, info_class, &info, sizeof(info)).

    Raises:
        JobObjectError: the call failed (e.g. ERROR_INVALID_PARAMETER for a CpuRate outside 1..10000).
    """
    if not kernel32().SetInformationJobObject(job, info_class, ctypes.byref(info), ctypes.sizeof(info)):
        raise fail("SetInformationJobObject")


def query_information(job: int, info_class: int, info: ctypes.Structure) -> None:
    """QueryInformationJobObject(job, info_class, &info, sizeof(info), NULL), filling ``info``.

    Raises:
        JobObjectError: the call failed.
    """
    if not kernel32().QueryInformationJobObject(
        job, info_class, ctypes.byref(info), ctypes.sizeof(info), None
    ):
        raise fail("QueryInformationJobObject")


def environment_block(env: Mapping[str, str]) -> ctypes.Array[ctypes.c_char]:
    """The CREATE_UNICODE_ENVIRONMENT block: ``NAME=value\\0`` ... ``\\0``, UTF-16-LE, sorted by name.

    Built as bytes so it is the same on every host (``c_wchar`` is 4 bytes off Windows).
    CreateProcessW requires a case-insensitively sorted block ("Changing Environment Variables").
    """
    body = "".join(f"{k}={v}\0" for k, v in sorted(env.items(), key=lambda kv: kv[0].upper()))
    data = (body or "\0") + "\0"  # an empty block is still four zero bytes
    raw = data.encode("utf-16-le")
    return ctypes.create_string_buffer(raw, len(raw))


def create_suspended(argv: Sequence[str], cwd: str | None, env: Mapping[str, str]) -> PROCESS_INFORMATION:
    """CreateProcessW(NULL, cmdline, ..., CREATE_SUSPENDED | CREATE_UNICODE_ENVIRONMENT, env, cwd, ...).

    The command line is ``subprocess.list2cmdline(argv)`` (the MSVC runtime quoting rules); handles are
    not inherited.  The primary thread stays suspended until :func:`resume`.

    Returns:
        PROCESS_INFORMATION with both handles open (the caller owns them).
    Raises:
        JobObjectError: CreateProcessW failed (ERROR_FILE_NOT_FOUND, ERROR_ACCESS_DENIED, ...).
    """
    si = STARTUPINFOW()
    si.cb = ctypes.sizeof(si)
    pi = PROCESS_INFORMATION()
    cmdline = ctypes.create_unicode_buffer(subprocess.list2cmdline(list(argv)))  # must be writable
    ok = kernel32().CreateProcessW(
        None,
        cmdline,
        None,
        None,
        False,
        CREATE_SUSPENDED | CREATE_UNICODE_ENVIRONMENT,
        environment_block(env),
        cwd,
        ctypes.byref(si),
        ctypes.byref(pi),
    )
    if not ok:
        raise fail("CreateProcessW", f"could not start {argv[0]!r}")
    return pi


def assign(job: int, process: int) -> None:
    """AssignProcessToJobObject(job, process).  Raises JobObjectError on failure."""
    if not kernel32().AssignProcessToJobObject(job, process):
        raise fail("AssignProcessToJobObject")


def keep_alive_in(job: int, process: int) -> None:
    """DuplicateHandle the job into ``process`` with JOB_OBJECT_QUERY access only.

    The sandbox's first process then holds a handle to its own job, so the job (and its name) outlives
    the shim process that created it, and KILL_ON_JOB_CLOSE fires when that process and every shim
    handle are gone.  Raises JobObjectError on failure.
    """
    k = kernel32()
    target = ctypes.c_void_p()
    if not k.DuplicateHandle(
        k.GetCurrentProcess(), job, process, ctypes.byref(target), JOB_OBJECT_QUERY, False, 0
    ):
        raise fail("DuplicateHandle")


def resume(thread: int) -> None:
    """ResumeThread(thread).  Raises JobObjectError when it returns (DWORD)-1."""
    if kernel32().ResumeThread(thread) == RESUME_FAILED:
        raise fail("ResumeThread")


def terminate_job(job: int, exit_code: int) -> None:
    """TerminateJobObject(job, exit_code): every process in the job ends with ``exit_code``.

    Raises JobObjectError on failure.
    """
    if not kernel32().TerminateJobObject(job, exit_code):
        raise fail("TerminateJobObject")


def open_job(name: str) -> int:
    """OpenJobObjectW(JOB_OBJECT_ALL_ACCESS, FALSE, name).  Raises JobObjectError when none exists."""
    handle = kernel32().OpenJobObjectW(JOB_OBJECT_ALL_ACCESS, False, name)
    if not handle:
        raise fail("OpenJobObjectW", "the sandbox's job object is gone (its processes have all ended)")
    return int(handle)


def process_in_job(process: int, job: int) -> bool:
    """IsProcessInJob(process, job, &result): identity check for a reopened pid.  Raises on failure."""
    result = ctypes.c_int32(0)
    if not kernel32().IsProcessInJob(process, job, ctypes.byref(result)):
        raise fail("IsProcessInJob")
    return bool(result.value)


def exit_code(process: int, timeout_ms: int = 0) -> int | None:
    """The process's exit code once it has ended, else None after waiting ``timeout_ms`` milliseconds.

    Uses WaitForSingleObject (not STILL_ACTIVE, which a process may legitimately return) and then
    GetExitCodeProcess.  Raises JobObjectError on failure.
    """
    k = kernel32()
    rc = k.WaitForSingleObject(process, timeout_ms)
    if rc == WAIT_TIMEOUT:
        return None
    if rc != WAIT_OBJECT_0:
        raise fail("WaitForSingleObject")
    code = ctypes.c_uint32(0)
    if not k.GetExitCodeProcess(process, ctypes.byref(code)):
        raise fail("GetExitCodeProcess")
    return int(code.value)
