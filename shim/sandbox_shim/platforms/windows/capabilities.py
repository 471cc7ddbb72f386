"""Capability reports for the Job Object layer, each probed by *trying* it on a throwaway job.

Reported names (see ``plan.KNOWN_CAPABILITIES``):

* ``job-object`` - CreateJobObjectW with JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE set.
* ``job-object.memory`` / ``job-object.processes`` - JobMemoryLimit / ActiveProcessLimit set with
  SetInformationJobObject(JobObjectExtendedLimitInformation) and read back equal.
* ``job-object.cpu`` - SetInformationJobObject(JobObjectCpuRateControlInformation), hard cap.
* ``job-object.accounting`` - QueryInformationJobObject(JobObjectBasicAndIoAccountingInformation).
* ``filesystem.confinement`` and ``network.deny`` - always unavailable: the Win32 job object API has
  no file-system or network restriction (JOBOBJECT_NET_RATE_CONTROL_INFORMATION only shapes bandwidth).

On a host that is not Windows every report is unavailable, with the reason.
"""

from __future__ import annotations

from ...capability import Capability
from . import job_object as jo

MECHANISM = "job object"

_NOT_IN_JOBS = {
    "filesystem.confinement": (
        "Job Objects cannot confine file-system access (no path rules in the job object API)",
        "Win32 job object API: no JOBOBJECTINFOCLASS restricts files",
    ),
    "network.deny": (
        "Job Objects cannot deny network access"
        " (JOBOBJECT_NET_RATE_CONTROL_INFORMATION only limits bandwidth)",
        "Win32 job object API: no JOBOBJECTINFOCLASS denies sockets",
    ),
}


def _unsupported() -> list[Capability]:
    return [Capability(n, False, MECHANISM, d, m) for n, (d, m) in _NOT_IN_JOBS.items()]


def windows_capabilities() -> list[Capability]:
    """Probe this host's Job Object capabilities.

    Returns:
        One ``Capability`` per name in ``plan.KNOWN_CAPABILITIES``; never raises (a failed probe is an
        unavailable report whose ``detail`` carries the Win32 function and error code).
    """
    job_names = (
        "job-object",
        "job-object.memory",
        "job-object.processes",
        "job-object.cpu",
        "job-object.accounting",
    )
    try:
        jo.kernel32()
    except jo.JobObjectError as e:
        return [
            Capability(n, False, MECHANISM, f"not Windows ({e.hint})", "kernel32 load") for n in job_names
        ] + (_unsupported())

    reports: list[Capability] = []
    job = 0
    try:
        job = jo.create_job(None)
    except jo.JobObjectError as e:
        return [
            Capability(n, False, MECHANISM, e.message, "CreateJobObjectW") for n in job_names
        ] + _unsupported()
    try:
        ext = jo.JOBOBJECT_EXTENDED_LIMIT_INFORMATION()
        ext.BasicLimitInformation.LimitFlags = (
            jo.JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE
            | jo.JOB_OBJECT_LIMIT_JOB_MEMORY
            | jo.JOB_OBJECT_LIMIT_ACTIVE_PROCESS
        )
        ext.JobMemoryLimit = 64 * 1024 * 1024
        ext.BasicLimitInformation.ActiveProcessLimit = 8
        measured = "SetInformationJobObject(JobObjectExtendedLimitInformation) then Query"
        try:
            jo.set_information(job, jo.JobObjectExtendedLimitInformation, ext)
            back = jo.JOBOBJECT_EXTENDED_LIMIT_INFORMATION()
            jo.query_information(job, jo.JobObjectExtendedLimitInformation, back)
            kill = bool(back.BasicLimitInformation.LimitFlags & jo.JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE)
            mem = back.JobMemoryLimit == ext.JobMemoryLimit
            procs = back.BasicLimitInformation.ActiveProcessLimit == 8
            reports += [
                Capability(
                    "job-object", kill, MECHANISM, "" if kill else "KILL_ON_JOB_CLOSE not kept", measured
                ),
                Capability(
                    "job-object.memory", mem, MECHANISM, "" if mem else "JobMemoryLimit not kept", measured
                ),
                Capability(
                    "job-object.processes",
                    procs,
                    MECHANISM,
                    "" if procs else "ActiveProcessLimit not kept",
                    measured,
                ),
            ]
        except jo.JobObjectError as e:
            reports += [Capability(n, False, MECHANISM, e.message, measured) for n in job_names[:3]]

        cpu = jo.JOBOBJECT_CPU_RATE_CONTROL_INFORMATION()
        cpu.ControlFlags = jo.JOB_OBJECT_CPU_RATE_CONTROL_ENABLE | jo.JOB_OBJECT_CPU_RATE_CONTROL_HARD_CAP
        cpu.CpuRate = 5000
        measured = "SetInformationJobObject(JobObjectCpuRateControlInformation, HARD_CAP 5000)"
        try:
            jo.set_information(job, jo.JobObjectCpuRateControlInformation, cpu)
            reports.append(Capability("job-object.cpu", True, MECHANISM, "", measured))
        except jo.JobObjectError as e:
            reports.append(Capability("job-object.cpu", False, MECHANISM, e.message, measured))

        acct = jo.JOBOBJECT_BASIC_AND_IO_ACCOUNTING_INFORMATION()
        measured = "QueryInformationJobObject(JobObjectBasicAndIoAccountingInformation)"
        try:
            jo.query_information(job, jo.JobObjectBasicAndIoAccountingInformation, acct)
            reports.append(Capability("job-object.accounting", True, MECHANISM, "", measured))
        except jo.JobObjectError as e:
            reports.append(Capability("job-object.accounting", False, MECHANISM, e.message, measured))
    finally:
        jo.close(job)
    return reports + _unsupported()
