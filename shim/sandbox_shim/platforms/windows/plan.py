"""``Spec`` -> ``JobPlan``: what a Job Object will enforce, and what the bundle requires.

Mapping (OCI runtime-spec ``config-windows.md`` -> Win32 ``winnt.h`` job object fields):

=====================================  ==========================================================
``windows.resources.memory.limit``     JobMemoryLimit, bytes (JOB_OBJECT_LIMIT_JOB_MEMORY): the
                                       committed memory of every process in the job together.
``windows.resources.cpu.maximum``      CpuRate with JOB_OBJECT_CPU_RATE_CONTROL_HARD_CAP.  Both are
                                       "percent times 100" (cycles per 10,000), so the value passes
                                       unchanged; valid range 1..10000.
``windows.resources.cpu.count``        CpuRate hard cap = count * 10000 / host CPUs, clamped to
                                       1..10000 (count >= host CPUs means no cap).
``windows.resources.cpu.shares``       Weight with JOB_OBJECT_CPU_RATE_CONTROL_WEIGHT_BASED:
                                       shares 1..10000 -> weight ceil(shares * 9 / 10000), 1..9
                                       (the job default weight 5 ~ shares 5000); 0 means unset.
annotation ``sandbox-shim.windows.     ActiveProcessLimit (JOB_OBJECT_LIMIT_ACTIVE_PROCESS); the
active-process-limit``                 runtime-spec has no Windows process-count field.  Parsed
                                       and range-checked once (``bundle.Settings``,
                                       ``config_rules``).
(always)                               JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE.
=====================================  ==========================================================

A job holds one CPU rate mode.  A hard cap is a limit and shares only a preference, so when shares are
given together with ``count`` or ``maximum`` the cap wins and the plan records a note; ``count`` and
``maximum`` together give the smaller rate.

Requirements: a bundle states what it requires with the annotation ``sandbox-shim.requires``, a
comma-separated list of capability names (e.g. ``"job-object.memory,job-object.processes"``).  Without
it the tenant profile's set applies, which includes ``filesystem.confinement`` and ``network.deny``:
Job Objects give neither, so such a bundle is refused on Windows with ``CapabilityUnavailable``.  The
limits a bundle sets add their own requirements (a memory limit requires ``job-object.memory``), so a
short list never lets a limit be silently dropped.

Every other field of the ``Spec`` is applied or refused here, never left unapplied (the same rules as
the macOS planner, ``platforms/darwin/plan.py``):

* ``process.args``/``env``/``cwd``: as the ``Spec`` parsed them (``Spec.args``, ``Spec.env``,
  ``Spec.cwd``); an empty ``args[0]`` fails at CreateProcessW (``CouldNotRun``), as on every platform.
* ``sandbox-shim.wall-clock-seconds``: recorded in ``wall_clock``; the waiting shim enforces it
  (``execution.run_bundle``, as on every platform).
* ``sandbox-shim.network``: ``host`` is what a job has (recorded in ``network``); ``none`` (the
  default) requires ``network.deny`` and ``isolated`` ``network.isolated``, which Job Objects lack:
  ``CapabilityUnavailable``.
* ``linux.namespaces`` become requirements, as on macOS: ``network`` -> ``network.deny``, ``mount``
  -> ``filesystem.confinement``, any other type -> ``namespace.<type>``; ``linux.seccomp`` ->
  ``seccomp``; ``process.noNewPrivileges`` -> ``no_new_privs``.  None is reported available on
  Windows, so such a bundle is refused with ``CapabilityUnavailable`` naming each.
* Refused with ``BundleInvalid`` and the field's pointer (fields a Job Object never supports):
  ``sandbox-shim.cpu-time-seconds`` (this layer sets no per-process time limit), ``process.rlimits``
  (no POSIX rlimits), every entry of ``mounts`` (a job makes no mounts), ``linux.resources`` (use
  ``windows.resources``), ``linux.maskedPaths`` and ``linux.readonlyPaths`` (no path rules).
* Refused with ``BundleInvalid`` and the pointer: every key of the ``windows`` section but the
  ``resources`` mapped above (``hyperv``, ``network``, ``devices``, ``layerFolders``,
  ``resources.storage``, ``credentialSpec``...: container settings of the Host Compute Service that a
  Job Object has no equivalent for).
* Refused with ``BundleInvalid`` and the pointer unless they ask for what a job does anyway (a job
  runs the program as the caller's account, on the host's files, with no umask, terminal or OOM
  score): ``process.user.uid``/``gid`` other than 0 (0 is the Linux user-namespace "root": the caller,
  noted), a non-zero ``umask`` (0 noted), any ``additionalGids`` entry, ``username``,
  ``process.commandLine`` (the command line is built from ``process.args``), ``process.terminal``
  true, ``process.oomScoreAdj`` above 0 (below 0 only protects: noted), ``root.readonly`` true (a job
  cannot keep files read-only).
* Recorded in ``notes`` (they grant, never restrict, so nothing is weakened): ``hostname``,
  ``process.capabilities`` and the other ``linux`` keys (``sysctl``, ``devices``, ``cgroupsPath``...).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ...capability import Capability, linux_requirements
from ...config_rules import terminal_and_oom_problems
from ...errors import BundleInvalid, BundleProblem, CapabilityUnavailable
from ...hardening import tenant
from ...hooks import refuse_in_sandbox, refuse_on_host

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ...bundle import Settings, Spec

REQUIRES_ANNOTATION = "sandbox-shim.requires"
PROCESS_LIMIT_ANNOTATION = "sandbox-shim.windows.active-process-limit"
CPU_TIME_ANNOTATION = "sandbox-shim.cpu-time-seconds"

#: Every capability name this layer reports (``capabilities.py``) and registers (``probes.py``).
KNOWN_CAPABILITIES = (
    "job-object",
    "job-object.memory",
    "job-object.processes",
    "job-object.cpu",
    "job-object.accounting",
    "filesystem.confinement",
    "network.deny",
)

#: What the tenant profile requires when a bundle does not say (ARCHITECTURE.md section 7).
TENANT_REQUIREMENTS = ("job-object", "filesystem.confinement", "network.deny")

_RULE_WIN = "OCI runtime-spec config-windows"
_POLICY = "a security field that cannot be enforced is refused"
#: OCI namespace type -> the requirement it becomes (as on macOS: ``darwin/plan.py``)


@dataclass(frozen=True)
class JobLimits:
    """Limits for one job; None means "not limited".

    Attributes:
        job_memory_bytes: JobMemoryLimit, bytes.
        active_processes: ActiveProcessLimit, processes.
        cpu_rate: hard-cap CpuRate, cycles per 10,000 (1..10000).
        cpu_weight: weight-based rate, 1..9 (only when ``cpu_rate`` is None).
    """

    job_memory_bytes: int | None = None
    active_processes: int | None = None
    cpu_rate: int | None = None
    cpu_weight: int | None = None


@dataclass(frozen=True)
class JobPlan:
    """A launch description for one Job Object sandbox.

    Attributes:
        argv: program and arguments (``process.args``).
        cwd: working directory (``process.cwd``), or None for the shim's own.
        env: environment (``process.env`` split at the first ``=``).
        limits: the job limits.
        requires: capability names this bundle requires, sorted.
        notes: settings adjusted while planning, one line each (never env values).
        wall_clock: seconds (``sandbox-shim.wall-clock-seconds``), or None; enforced by the waiting
            shim (``execution.run_bundle``).
        network: ``host``: a job shares the host's network (any other setting is refused).
    """

    argv: tuple[str, ...]
    cwd: str | None
    env: dict[str, str]
    limits: JobLimits
    requires: tuple[str, ...]
    notes: tuple[str, ...] = field(default=())
    wall_clock: float | None = None
    network: str | None = "host"

    @property
    def required(self) -> tuple[str, ...]:
        """``requires`` under the name every platform's plan has (``mechanism.LaunchPlan``)."""
        return self.requires

    @property
    def hooks(self) -> dict[str, list[dict[str, Any]]]:
        """None run with a Job Object (``mechanism.LaunchPlan``): empty."""
        return {}


def _int(
    problems: list[BundleProblem], obj: dict[str, Any], key: str, pointer: str, lo: int, hi: int
) -> int | None:
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        problems.append(BundleProblem(f"{pointer}/{key}", f"must be an integer in {lo}..{hi}", _RULE_WIN))
        return None
    return value


def _limits(
    config: dict[str, Any],
    procs: int | None,
    host_cpus: int,
    problems: list[BundleProblem],
    notes: list[str],
) -> JobLimits:
    res = (config.get("windows") or {}).get("resources") or {}
    mem = _int(problems, res.get("memory") or {}, "limit", "/windows/resources/memory", 1, 2**64 - 1)
    cpu = res.get("cpu") or {}
    count = _int(problems, cpu, "count", "/windows/resources/cpu", 1, 2**64 - 1)
    shares = _int(problems, cpu, "shares", "/windows/resources/cpu", 0, 10000)
    maximum = _int(problems, cpu, "maximum", "/windows/resources/cpu", 1, 10000)

    rates = []
    if maximum is not None:
        rates.append(maximum)
    if count is not None and count < host_cpus:
        rates.append(max(1, min(10000, count * 10000 // host_cpus)))
    rate = min(rates) if rates else None
    weight = None
    if shares:
        if rate is not None:
            notes.append("windows.resources.cpu.shares ignored: a hard cap (count/maximum) is set")
        else:
            weight = max(1, min(9, math.ceil(shares * 9 / 10000)))

    return JobLimits(job_memory_bytes=mem, active_processes=procs, cpu_rate=rate, cpu_weight=weight)


def _requires(limits: JobLimits, settings: Settings, derived: set[str]) -> tuple[str, ...]:
    """The bundle's names (``sandbox-shim.requires``, parsed once by ``bundle.Settings`` and checked
    there against the capability registry, which holds ``KNOWN_CAPABILITIES`` on Windows:
    ``probes.py``), or the tenant set (without ``network.deny`` when the network is ``host``), plus
    what each limit and each field in ``derived`` needs."""
    if settings.requires is not None:
        names = set(settings.requires)
    else:
        names = set(TENANT_REQUIREMENTS) - ({"network.deny"} if settings.network == "host" else set())
    names |= derived
    names.add("job-object")
    if limits.job_memory_bytes is not None:
        names.add("job-object.memory")
    if limits.active_processes is not None:
        names.add("job-object.processes")
    if limits.cpu_rate is not None or limits.cpu_weight is not None:
        names.add("job-object.cpu")
    return tuple(sorted(names))


def _refuse(ptr: str, message: str, fix: str) -> BundleProblem:
    return BundleProblem(ptr, message, _POLICY + " (Windows Job Objects)", fix)


#: what of the ``windows`` section a Job Object applies (``_limits``): section -> applied keys
_APPLIED_WINDOWS = {"memory": ("limit",), "cpu": ("count", "shares", "maximum")}


def _windows_section(config: dict[str, Any]) -> list[BundleProblem]:
    """Every key of the ``windows`` section this planner does not apply, refused with its pointer:
    only ``resources.memory.limit`` and ``resources.cpu.count``/``shares``/``maximum`` become job
    limits; ``hyperv``, ``network``, ``devices``, ``layerFolders``, ``resources.storage``,
    ``credentialSpec``, ``servicing``, ``ignoreFlushesDuringBoot``... are HCS (container) settings a Job
    Object has no equivalent for (OCI runtime-spec config-windows.md)."""
    win = config.get("windows")
    if not isinstance(win, dict):
        return []  # a wrong type is the schema's to report
    out: list[BundleProblem] = []
    for key in sorted(win):
        if key != "resources":
            out.append(
                _refuse(
                    f"/windows/{key}",
                    f"windows.{key} is not applied by a Job Object",
                    "remove it; a Job Object applies windows.resources memory.limit and cpu only",
                )
            )
    res = win.get("resources")
    res = res if isinstance(res, dict) else {}
    for key in sorted(res):
        applied = _APPLIED_WINDOWS.get(key)
        sub = res[key]
        if applied is None:
            out.append(
                _refuse(
                    f"/windows/resources/{key}",
                    f"windows.resources.{key} is not applied by a Job Object",
                    "remove it; a Job Object applies windows.resources memory.limit and cpu only",
                )
            )
            continue
        for inner in sorted(sub if isinstance(sub, dict) else {}):
            if inner not in applied:
                out.append(
                    _refuse(
                        f"/windows/resources/{key}/{inner}",
                        f"windows.resources.{key}.{inner} is not applied by a Job Object",
                        f"remove it; a Job Object applies windows.resources.{key} " + "/".join(applied),
                    )
                )
    return out


def _process_fields(config: dict[str, Any], notes: list[str]) -> list[BundleProblem]:
    """``process.user`` (``uid``, ``gid``, ``umask``, ``additionalGids``, ``username``),
    ``commandLine``, ``terminal``, ``oomScoreAdj`` and ``root.readonly``: a job runs the program as the
    caller's account on the host's files, with no umask, no terminal and no OOM score, so each is
    refused with its pointer unless it asks for what a job does anyway; what only grants is a note."""
    out: list[BundleProblem] = []
    proc = config.get("process") or {}
    user = proc.get("user") or {}
    for key in ("uid", "gid"):
        asked = user.get(key)
        if asked:  # 0 is the Linux user-namespace "root": the caller, with no more rights
            out.append(
                _refuse(
                    f"/process/user/{key}",
                    f"{key} {asked} is not applied: a Job Object runs as the caller's account",
                    f"remove it or set {key} 0, and run the shim as the account the workload needs",
                )
            )
        elif asked == 0:
            notes.append(f"/process/user/{key} 0 runs as the caller's account on Windows")
    for i, _ in enumerate(user.get("additionalGids") or []):
        out.append(
            _refuse(
                f"/process/user/additionalGids/{i}",
                "Windows has no POSIX groups: the caller's token groups apply",
                "remove it",
            )
        )
    umask = user.get("umask")
    if umask:  # a mask asked to hold: Windows files take inherited ACLs, never a umask
        out.append(
            _refuse(
                "/process/user/umask", f"Windows has no umask; {umask:04o} would not be applied", "remove it"
            )
        )
    elif umask == 0:
        notes.append("/process/user/umask 0: Windows has no umask (new files take inherited ACLs)")
    if user.get("username"):
        out.append(
            _refuse(
                "/process/user/username",
                "a Job Object does not log on as another account: the program runs as the caller",
                "remove it, and run the shim as that account",
            )
        )
    if proc.get("commandLine"):
        out.append(
            _refuse(
                "/process/commandLine",
                "commandLine is not passed: the command line is built from process.args",
                "remove it; put the program and its arguments in process.args",
            )
        )
    out += terminal_and_oom_problems(
        proc,
        "Windows",
        _POLICY + " (Windows Job Objects)",
        "bound memory with windows.resources.memory.limit",
        notes,
    )
    if (config.get("root") or {}).get("readonly"):
        out.append(
            _refuse(
                "/root/readonly",
                "a Job Object cannot make files read-only: the program writes wherever the caller can",
                "set root.readonly to false, or run the bundle on Linux or macOS",
            )
        )
    return out


def _unsupported(spec: Spec, problems: list[BundleProblem], derived: set[str], notes: list[str]) -> None:
    """Every field a Job Object cannot apply: a requirement (refused by ``check_requirements`` as
    ``CapabilityUnavailable``), a ``BundleProblem`` with its pointer, or a note for a field that only
    grants (module docstring)."""
    config, settings, proc, linux = spec.config, spec.settings, spec.process, spec.linux
    if settings.network == "isolated":
        derived.add("network.isolated")
    elif settings.network != "host":
        derived.add("network.deny")
    derived |= linux_requirements(config)
    if settings.cpu_time is not None:
        problems.append(
            _refuse(
                f"/annotations/{CPU_TIME_ANNOTATION}",
                "a CPU-time limit is not set by this Job Object layer",
                "remove it; cap the CPU rate with windows.resources.cpu, or use the wall clock",
            )
        )
    problems += refuse_in_sandbox(config, "Windows")  # no namespaces to enter (hooks.py says why)
    problems += refuse_on_host(config, "Windows")  # its mechanism runs no hooks: refused, not dropped
    for i, _ in enumerate(proc.get("rlimits") or []):
        problems.append(
            _refuse(
                f"/process/rlimits/{i}",
                "Windows has no POSIX rlimits",
                "remove it; limit the job with windows.resources",
            )
        )
    for i, _ in enumerate(config.get("mounts") or []):
        problems.append(
            _refuse(
                f"/mounts/{i}",
                "a Job Object makes no mounts",
                "remove the mount (Windows runs on the host's files)",
            )
        )
    for key, _ in sorted((linux.get("resources") or {}).items()):
        problems.append(
            _refuse(
                f"/linux/resources/{key}",
                "linux.resources is not applied on Windows",
                "use windows.resources (memory.limit, cpu) or sandbox-shim.windows.active-process-limit",
            )
        )
    for key in ("maskedPaths", "readonlyPaths"):
        for i, _ in enumerate(linux.get(key) or []):
            problems.append(
                _refuse(f"/linux/{key}/{i}", "a Job Object has no path rules", f"remove it from linux.{key}")
            )
    problems += _process_fields(config, notes)
    problems += _windows_section(config)
    handled = {"namespaces", "seccomp", "resources", "maskedPaths", "readonlyPaths"}
    for key in sorted(set(linux) - handled):
        notes.append(f"/linux/{key} not applied on Windows (no Linux kernel; it grants, never restricts)")
    if config.get("hostname"):
        notes.append("/hostname not applied on Windows")
    if (proc.get("capabilities") or {}).get("effective"):
        notes.append("/process/capabilities not applied on Windows (no Linux capabilities; none are granted)")


def plan_from_spec(spec: Spec, host_cpus: int | None = None) -> JobPlan:
    """The ``JobPlan`` of a loaded bundle (``bundle.load``): the process as the ``Spec`` parsed it
    (``Spec.args``/``env``/``cwd``), ``windows.resources``, and the sandbox settings the ``Spec``
    already parsed (``spec.settings``: requires, network, wall clock, active-process limit); nothing
    here parses them again.  Every other field is applied or refused (module docstring).

    Args:
        spec: the loaded bundle.
        host_cpus: logical processors on the host (for ``cpu.count``); default ``os.cpu_count()``.
    Returns:
        The plan; see the module docstring for each mapping and its source.
    Raises:
        BundleInvalid: with a JSON pointer per problem (no ``process.env`` value is quoted).
    """
    settings = spec.settings
    problems: list[BundleProblem] = []
    notes: list[str] = []
    derived: set[str] = set()
    problems += tenant.check_network(spec.config, settings.network)  # the Spec's rule (bundle.load)
    _unsupported(spec, problems, derived, notes)
    limits = _limits(
        spec.config, settings.active_process_limit, host_cpus or os.cpu_count() or 1, problems, notes
    )
    requires = _requires(limits, settings, derived)
    if problems:
        raise BundleInvalid(problems)
    return JobPlan(
        spec.args,
        spec.cwd,
        spec.env,
        limits,
        requires,
        tuple(notes),
        wall_clock=settings.wall_clock,
        network=settings.network,
    )


def check_requirements(plan: JobPlan, reports: Iterable[Capability]) -> None:
    """Refuse a plan whose required capabilities this host lacks.

    Args:
        plan: the plan (its ``requires``).
        reports: this host's capability reports (``capabilities.windows_capabilities()``).
    Raises:
        CapabilityUnavailable: listing each required capability that is unavailable or not reported.
    """
    by_name = {r.name: r for r in reports}
    missing = []
    for name in plan.requires:
        report = by_name.get(name)
        if report is None:
            report = Capability(name, False, "job object", "not provided on this host", "not reported")
        if not report.available:
            missing.append(report)
    if missing:
        raise CapabilityUnavailable(missing)
