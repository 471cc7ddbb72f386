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
active-process-limit``                 runtime-spec has no Windows process-count field.
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
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ...capability import Capability
from ...errors import BundleInvalid, BundleProblem, CapabilityUnavailable

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ...bundle import Settings, Spec

REQUIRES_ANNOTATION = "sandbox-shim.requires"
PROCESS_LIMIT_ANNOTATION = "sandbox-shim.windows.active-process-limit"

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
    """

    argv: tuple[str, ...]
    cwd: str | None
    env: dict[str, str]
    limits: JobLimits
    requires: tuple[str, ...]
    notes: tuple[str, ...] = field(default=())

    @property
    def required(self) -> tuple[str, ...]:
        """``requires`` under the name every platform's plan has (``mechanism.LaunchPlan``)."""
        return self.requires

    @property
    def hooks(self) -> dict[str, list[dict[str, Any]]]:
        """None run with a Job Object (``mechanism.LaunchPlan``): empty."""
        return {}

    @property
    def wall_clock(self) -> float | None:
        """None: a Job Object plan enforces no wall clock (``mechanism.LaunchPlan``)."""
        return None

    @property
    def network(self) -> str | None:
        """None: Job Objects have no network setting (``mechanism.LaunchPlan``)."""
        return None


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
    config: dict[str, Any], host_cpus: int, problems: list[BundleProblem], notes: list[str]
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

    annotations = config.get("annotations") or {}
    procs = None
    raw = annotations.get(PROCESS_LIMIT_ANNOTATION)
    if raw is not None:
        if isinstance(raw, str) and raw.isdigit() and int(raw) >= 1:
            procs = int(raw)
        else:
            problems.append(
                BundleProblem(
                    f"/annotations/{PROCESS_LIMIT_ANNOTATION}",
                    "must be a positive integer as a string",
                    "sandbox-shim annotations",
                )
            )
    return JobLimits(job_memory_bytes=mem, active_processes=procs, cpu_rate=rate, cpu_weight=weight)


def _requires(limits: JobLimits, settings: Settings) -> tuple[str, ...]:
    """The bundle's names (``sandbox-shim.requires``, parsed once by ``bundle.Settings`` and checked
    there against the capability registry, which holds ``KNOWN_CAPABILITIES`` on Windows:
    ``probes.py``), or the tenant set, plus what each limit needs."""
    names = set(TENANT_REQUIREMENTS) if settings.requires is None else set(settings.requires)
    names.add("job-object")
    if limits.job_memory_bytes is not None:
        names.add("job-object.memory")
    if limits.active_processes is not None:
        names.add("job-object.processes")
    if limits.cpu_rate is not None or limits.cpu_weight is not None:
        names.add("job-object.cpu")
    return tuple(sorted(names))


def plan_from_spec(spec: Spec, host_cpus: int | None = None) -> JobPlan:
    """The ``JobPlan`` of a loaded bundle (``bundle.load``): its config (``process.args/cwd/env``,
    ``windows.resources``, the Windows-only annotation above), with the sandbox settings the ``Spec``
    already parsed (``spec.settings``: ``requires``); nothing here parses them again.

    Args:
        spec: the loaded bundle.
        host_cpus: logical processors on the host (for ``cpu.count``); default ``os.cpu_count()``.
    Returns:
        The plan; see the module docstring for each mapping and its source.
    Raises:
        BundleInvalid: with a JSON pointer per problem (no ``process.env`` value is quoted).
    """
    config, settings = spec.config, spec.settings
    problems: list[BundleProblem] = []
    notes: list[str] = []
    process = config.get("process") or {}
    args = process.get("args")
    if not isinstance(args, list) or not args or not all(isinstance(a, str) for a in args):
        problems.append(
            BundleProblem("/process/args", "must be a non-empty list of strings", "OCI runtime-spec config")
        )
        args = []
    cwd = process.get("cwd")
    if cwd is not None and not isinstance(cwd, str):
        problems.append(BundleProblem("/process/cwd", "must be a string", "OCI runtime-spec config"))
        cwd = None
    env: dict[str, str] = {}
    for i, item in enumerate(process.get("env") or []):
        if not isinstance(item, str) or "=" not in item or item.startswith("="):
            problems.append(
                BundleProblem(f"/process/env/{i}", "must be NAME=value", "OCI runtime-spec config")
            )
            continue
        name, value = item.split("=", 1)
        env[name] = value
    limits = _limits(config, host_cpus or os.cpu_count() or 1, problems, notes)
    requires = _requires(limits, settings)
    if problems:
        raise BundleInvalid(problems)
    return JobPlan(tuple(args), cwd, env, limits, requires, tuple(notes))


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
