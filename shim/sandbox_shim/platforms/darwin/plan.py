"""``Spec`` -> ``DarwinPlan``: how a bundle runs under ``sandbox-exec`` (no mount namespaces).

macOS has no mount, pid, ipc, uts or cgroup namespaces, so a bundle is *interpreted*, not mounted:

* ``root.path`` (relative to the bundle) is realpath'd; the rootfs is **readable** (never writable,
  whatever ``root.readonly`` says) and is where ``args[0]`` and ``cwd`` are looked up.  The workload
  sees the host's file namespace, cut down by the SBPL profile; its binaries must be macOS ones.
* **Sandbox paths -> host paths**: a path under the storage mount's destination maps into the storage
  directory; any other path maps into the rootfs.  Both are resolved with ``paths.resolve_in_root``
  (symlinks followed as if the directory were ``/``), so a mapped path never leaves its directory.
* ``process.args[0]``: a path is mapped (a relative one against ``cwd``); a bare name is searched in
  the ``PATH`` of ``process.env`` (each entry mapped).  It must be an executable regular file there,
  else ``CouldNotRun`` (``not_found`` / ``permission_denied``): nothing on the host is run instead.
  The workload's ``argv[0]`` is then that host path.  ``args[1:]`` pass **unchanged**: a path in them
  is a host path (relative paths, taken against ``cwd``, are the portable form).  A ``#!`` interpreter
  is resolved by the kernel on the host (``/bin/sh`` is the host's, readable in the runtime set).
* ``process.cwd`` is mapped like any path and must be an existing directory (``BundleInvalid``).
* ``mounts``: the bind of the bundle's ``storage/`` is the one mount honoured (read-write, or read
  only with ``ro``).  Any other bind is **refused** (it would make host data visible, and there is no
  destination to bind it at); ``proc``, ``tmpfs``, ``sysfs``, ``mqueue``, ``cgroup``, ``devpts`` are
  **ignored with a warning** (the host's ``/dev`` subset in the profile serves; ``/tmp`` is denied).
* ``linux``: ``namespaces`` become requirements: ``network`` -> ``network.deny``, ``mount`` ->
  ``filesystem.confinement``, every other type -> ``namespace.<type>``, which macOS does not have,
  so such a bundle is refused (``CapabilityUnavailable``).  Security fields that cannot be enforced
  are refused the same way: ``linux.seccomp`` -> ``seccomp``, ``process.noNewPrivileges`` ->
  ``no_new_privs``, ``linux.resources.cpu`` quota (``cpus``, ``realtimeRuntime``) -> ``cpu.rate``.
  ``resources.memory.limit`` and ``resources.pids.limit`` become rlimits (below); ``memory.swap`` of
  -1 or at least ``memory.limit`` holds through RLIMIT_AS, any other is refused, as are
  ``memory.kernel``/``kernelTCP``, ``cpu.mems`` and every other ``resources`` key (no cgroups).
  ``sysctl``, ``devices``, the memory and CPU preferences (``reservation``, ``swappiness``,
  ``disableOOMKiller``, ``cpu.shares``, ``idle``, ``period`` without a quota...) and the rest of
  ``linux`` are ignored with a warning; ``maskedPaths``/``readonlyPaths`` hold under ``/proc`` and
  ``/sys`` only (the rest refused).
* ``process.user``: the workload runs as the caller, with the caller's gid, groups and umask
  (sandbox-exec changes none).  ``uid``/``gid`` 0 asked by a caller without it is a warning (the
  user-namespace "root" of Linux: the caller, no more rights); any other ``uid``/``gid`` than the
  caller's is refused.  Each ``additionalGids`` entry the caller is not in is refused (nothing adds
  a group).  A ``umask`` with a bit the caller's umask leaves clear is refused (files would get more
  than asked); one the caller's masks entirely (``0`` included) is a warning.  ``username`` is
  refused (no account switch).
* ``process.terminal`` true is refused (no console socket on macOS: the workload would get the
  caller's stdio, not a terminal); ``process.commandLine`` (Windows-only) is refused;
  ``process.oomScoreAdj`` above 0 is refused (macOS has no OOM score: the workload would not be the
  first killed), below 0 is a warning (it only protects).  ``root.readonly`` true is what macOS does
  anyway; false is a warning (the rootfs stays read-only).  The ``windows`` section is refused.
* Network (annotation ``sandbox-shim.network``): ``none`` (default) denies every socket, loopback
  included (macOS loopback is the host's, not the sandbox's); ``host`` allows the network;
  ``isolated`` requires ``network.isolated``, which macOS lacks.

Limits are POSIX rlimits set on the held process before user code (setrlimit(2), per *process*, and
inherited by children): ``resources.memory.limit`` -> RLIMIT_AS and RLIMIT_DATA (bytes), annotation
``sandbox-shim.cpu-time-seconds`` -> RLIMIT_CPU (soft n, hard n+1), ``resources.pids.limit`` ->
RLIMIT_NPROC (counted per *real uid* over the whole host, not per sandbox), ``process.rlimits`` as
given (the smaller value wins on overlap; Linux-only kinds are refused).  Each limit adds a
requirement (``rlimit.memory``, ``rlimit.cpu``, ``rlimit.nproc``) probed on the host.  The wall
clock (``sandbox-shim.wall-clock-seconds``) is enforced by the shim while it waits.
Sources: OCI runtime-spec config.md (root, process, mounts, POSIX rlimits), config-linux.md;
macOS setrlimit(2), sandbox-exec(1).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ...capability import Capability, linux_requirements
from ...config_rules import terminal_and_oom_problems
from ...errors import BundleInvalid, BundleProblem, CapabilityUnavailable, CouldNotRun
from ...hardening import tenant
from ...hooks import refuse_in_sandbox, refuse_on_host
from ...paths import canonical, resolve_in_root

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ...bundle import Spec

PREFIX = "sandbox-shim."
_SPEC = "OCI runtime-spec config.md"
_LINUX = "OCI runtime-spec config-linux.md"
_POLICY = "a security field that cannot be enforced is refused"

#: rlimits macOS has (<sys/resource.h>); other OCI kinds are Linux-only.
DARWIN_RLIMITS = (
    "RLIMIT_AS",
    "RLIMIT_CORE",
    "RLIMIT_CPU",
    "RLIMIT_DATA",
    "RLIMIT_FSIZE",
    "RLIMIT_MEMLOCK",
    "RLIMIT_NOFILE",
    "RLIMIT_NPROC",
    "RLIMIT_RSS",
    "RLIMIT_STACK",
)
#: OCI namespace type -> the requirement it becomes on macOS.
#: what macOS does not have at all, with the reason a person can act on
NOT_ON_MACOS = {
    "namespace.pid": "macOS has no pid namespaces (Seatbelt limits signals to the same sandbox only)",
    "namespace.ipc": "macOS has no ipc namespaces",
    "namespace.uts": "macOS has no uts namespaces",
    "namespace.cgroup": "macOS has no cgroups",
    "namespace.user": "macOS has no user namespaces",
    "namespace.time": "macOS has no time namespaces",
    "seccomp": "seccomp is Linux-only; SBPL has no system-call filter this shim generates",
    "no_new_privs": "macOS has no no_new_privs; set-user-ID programs keep their privileges",
    "cpu.rate": "macOS has no CPU quota for a process tree (only RLIMIT_CPU, a time budget)",
    "network.isolated": "no per-sandbox network stack on macOS (only allow-all or deny-all)",
}
#: the names the planner requires that ``trials.darwin_capabilities`` tries on the host (the
#: ``NOT_ON_MACOS`` names are reported too, unavailable); ``probes.py`` registers both lists, so the
#: capability registry, the report and ``sandbox-shim.requires`` use the planner's names
PROBED = ("seatbelt", "filesystem.confinement", "network.deny", "rlimit.memory", "rlimit.cpu", "rlimit.nproc")
_IGNORED_MOUNTS = ("proc", "tmpfs", "sysfs", "mqueue", "cgroup", "cgroup2", "devpts")


@dataclass(frozen=True)
class DarwinPlan:
    """A launch description for one sandbox-exec sandbox (host paths are realpath'd).

    Attributes:
        bundle, rootfs: the bundle directory and its root filesystem.
        storage: host directory of the storage bind, or None; ``storage_readonly`` for ``ro``.
        program: host path of ``args[0]`` (inside ``rootfs`` or ``storage``).
        args: argv of the workload; ``args[0] == program``.
        cwd: host directory to start in.
        env: environment (tenant rules: ``hardening.tenant.build_env``).
        network: ``none`` | ``host``.
        rlimits: ``(RLIMIT_NAME, soft, hard)`` sorted by name; values in the rlimit's unit.
        wall_clock: seconds, or None.
        requires: capability names this bundle requires, sorted.
        warnings: settings ignored on macOS, one line each (never env values).
    """

    bundle: str
    rootfs: str
    storage: str | None
    storage_readonly: bool
    program: str
    args: tuple[str, ...]
    cwd: str
    env: dict[str, str]
    network: str
    rlimits: tuple[tuple[str, int, int], ...]
    wall_clock: float | None
    requires: tuple[str, ...]
    warnings: tuple[str, ...] = field(default=())

    @property
    def required(self) -> tuple[str, ...]:
        """``requires`` under the name every platform's plan has (``mechanism.LaunchPlan``)."""
        return self.requires

    @property
    def hooks(self) -> dict[str, list[dict[str, Any]]]:
        """None run on macOS (``mechanism.LaunchPlan``): empty."""
        return {}


class _Mapper:
    """Sandbox path -> host path: under ``dest`` into ``storage``, anything else into ``rootfs``."""

    def __init__(self, rootfs: str, storage: str | None, dest: str | None) -> None:
        self.rootfs, self.storage, self.dest = rootfs, storage, (dest or "").rstrip("/") or None

    def host(self, path: str) -> str:
        norm = os.path.normpath("/" + path.lstrip("/"))  # normpath keeps a leading "//"
        if self.storage and self.dest and (norm == self.dest or norm.startswith(self.dest + "/")):
            return resolve_in_root(self.storage, norm[len(self.dest) :] or "/")
        return resolve_in_root(self.rootfs, norm)


def _program(arg0: str, cwd: str, env: dict[str, str], mapper: _Mapper) -> str:
    if not arg0:  # no program: not found, as execvp(3) and CreateProcessW answer on the other platforms
        raise CouldNotRun("not_found", arg0, "process.args[0] is empty")
    if "/" in arg0:
        cands = [mapper.host(arg0 if arg0.startswith("/") else os.path.join(cwd, arg0))]
    else:
        dirs = env.get("PATH", "").split(":")
        cands = [
            mapper.host(os.path.join(d if d.startswith("/") else os.path.join(cwd, d), arg0)) for d in dirs
        ]
    denied = None
    for c in cands:
        try:
            st = os.stat(c)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and os.access(c, os.X_OK):
            return c
        denied = denied or c
    if denied:
        raise CouldNotRun("permission_denied", arg0, "not an executable regular file in the rootfs")
    raise CouldNotRun("not_found", arg0, "looked up inside root.path only (macOS has no mount namespace)")


def _storage(
    cfg: dict[str, Any], bundle: str, problems: list[BundleProblem], warnings: list[str]
) -> tuple[str | None, str | None, bool]:
    storage_dir = canonical("storage", bundle)
    found: tuple[str | None, str | None, bool] = (None, None, False)
    for i, m in enumerate(cfg.get("mounts") or []):
        opts = list(m.get("options") or [])
        kind = m.get("type") or ("bind" if {"bind", "rbind"} & set(opts) else "")
        if kind == "bind" or {"bind", "rbind"} & set(opts):
            src = canonical(m.get("source") or "", bundle)
            if src == storage_dir and found[0] is None and os.path.isdir(src):
                found = (src, str(m.get("destination") or ""), "ro" in opts)
                continue
            problems.append(
                BundleProblem(
                    f"/mounts/{i}",
                    "only the bundle's storage/ may be bound on macOS (no mount namespace)",
                    "sandbox-shim darwin: bind mounts",
                    "remove the mount, or bind the bundle's storage/ dir",
                )
            )
        elif kind in _IGNORED_MOUNTS:
            warnings.append(f"/mounts/{i}: {kind} mount ignored on macOS (the host's own is used or denied)")
        else:
            problems.append(
                BundleProblem(
                    f"/mounts/{i}/type",
                    f"mount type {kind!r} is not supported on macOS",
                    "sandbox-shim darwin: mounts",
                    "remove the mount",
                )
            )
    return found


def _limit(problems: list[BundleProblem], value: Any, ptr: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        problems.append(BundleProblem(ptr, "must be a positive integer", _LINUX))
        return None
    return value


#: ``linux.resources.memory`` keys that are preferences or grants, never limits: warned, not applied
_MEMORY_PREFERENCES = ("reservation", "swappiness", "disableOOMKiller", "useHierarchy", "checkBeforeUpdate")
#: ``linux.resources.cpu`` keys that limit nothing without a quota: warned, not applied
_CPU_PREFERENCES = ("shares", "period", "burst", "realtimePeriod", "idle")


def _memory_and_cpu(
    res: dict[str, Any],
    mem: int | None,
    problems: list[BundleProblem],
    requires: set[str],
    warnings: list[str],
) -> None:
    """The keys of ``linux.resources.memory``/``cpu`` beside ``memory.limit``: a limit macOS cannot
    apply is refused (pointer) or required (``cpu.rate``); a preference is a warning."""
    memory = res.get("memory") or {}
    swap = memory.get("swap")
    # memory+swap: RLIMIT_AS (= memory.limit) already bounds the whole address space below it
    if swap is not None and swap != -1 and (mem is None or swap < mem):
        problems.append(
            BundleProblem(
                "/linux/resources/memory/swap",
                "macOS cannot limit swap apart from memory.limit (RLIMIT_AS bounds both together)",
                _POLICY,
                "remove it, or set it to -1 or at least memory.limit",
            )
        )
    for key in ("kernel", "kernelTCP"):
        if memory.get(key) is not None:
            problems.append(
                BundleProblem(
                    f"/linux/resources/memory/{key}",
                    f"memory.{key} cannot be enforced on macOS (no cgroups)",
                    _POLICY,
                    "remove it",
                )
            )
    for key in _MEMORY_PREFERENCES:
        if memory.get(key) is not None:
            warnings.append(f"/linux/resources/memory/{key} ignored on macOS (a preference, not a limit)")
    cpu = res.get("cpu") or {}
    if cpu.get("mems"):
        problems.append(
            BundleProblem(
                "/linux/resources/cpu/mems",
                "macOS cannot bind a process tree to memory nodes",
                _POLICY,
                "remove it",
            )
        )
    if cpu.get("quota") or cpu.get("cpus") or cpu.get("realtimeRuntime"):
        requires.add("cpu.rate")
    else:
        for key in _CPU_PREFERENCES:
            if cpu.get(key):
                warnings.append(f"/linux/resources/cpu/{key} ignored on macOS (a preference, not a limit)")


def _rlimits(
    cfg: dict[str, Any],
    problems: list[BundleProblem],
    requires: set[str],
    warnings: list[str],
    cpu_s: object = None,
) -> tuple[tuple[str, int, int], ...]:
    proc = cfg.get("process") or {}
    res = (cfg.get("linux") or {}).get("resources") or {}
    out: dict[str, tuple[int, int]] = {}

    def put(name: str, soft: int, hard: int) -> None:
        old = out.get(name)
        out[name] = (min(soft, old[0]), min(hard, old[1])) if old else (soft, hard)

    for i, r in enumerate(proc.get("rlimits") or []):
        name = r.get("type") if isinstance(r, dict) else None
        if name not in DARWIN_RLIMITS:
            problems.append(
                BundleProblem(
                    f"/process/rlimits/{i}/type",
                    f"{name!r} does not exist on macOS",
                    "macOS setrlimit(2)",
                    "remove it from process.rlimits",
                )
            )
            continue
        put(name, int(r.get("soft", 0)), int(r.get("hard", 0)))
    mem = _limit(problems, (res.get("memory") or {}).get("limit"), "/linux/resources/memory/limit")
    if mem is not None:
        put("RLIMIT_AS", mem, mem)
        put("RLIMIT_DATA", mem, mem)
    pids = _limit(problems, (res.get("pids") or {}).get("limit"), "/linux/resources/pids/limit")
    if pids is not None:
        put("RLIMIT_NPROC", pids, pids)
    if cpu_s:
        if str(cpu_s).isdigit() and int(str(cpu_s)) > 0:
            put("RLIMIT_CPU", int(str(cpu_s)), int(str(cpu_s)) + 1)
        else:
            problems.append(
                BundleProblem(
                    f"/annotations/{PREFIX}cpu-time-seconds",
                    "must be a positive integer",
                    "sandbox-shim annotations",
                )
            )
    _memory_and_cpu(res, mem, problems, requires, warnings)
    for key in sorted(set(res) - {"memory", "pids", "cpu"}):
        problems.append(
            BundleProblem(
                f"/linux/resources/{key}",
                f"linux.resources.{key} cannot be enforced on macOS (no cgroups)",
                _POLICY,
                "remove it (memory.limit, pids.limit and cpu.shares are what macOS applies)",
            )
        )
    names = set(out)
    if names & {"RLIMIT_AS", "RLIMIT_DATA"}:
        requires.add("rlimit.memory")
    if "RLIMIT_CPU" in names:
        requires.add("rlimit.cpu")
    if "RLIMIT_NPROC" in names:
        requires.add("rlimit.nproc")
    return tuple((n, *out[n]) for n in sorted(out))


#: macOS has neither ``/proc`` nor ``/sys``, and nothing in the sandbox can create them (``/`` is the
#: sealed, read-only system volume): a masked or read-only path under them holds already
_NO_SUCH_TREES = ("/proc", "/sys")


def _path_rules(linux: dict[str, Any], problems: list[BundleProblem]) -> None:
    for key in ("maskedPaths", "readonlyPaths"):
        for i, path in enumerate(linux.get(key) or []):
            norm = os.path.normpath("/" + str(path).lstrip("/"))
            if any(norm == t or norm.startswith(t + "/") for t in _NO_SUCH_TREES):
                continue
            problems.append(
                BundleProblem(
                    f"/linux/{key}/{i}",
                    f"{path} would stay visible on macOS: the profile has no per-path rule for it",
                    _POLICY,
                    f"remove it from linux.{key} (only paths under /proc and /sys hold on macOS)",
                )
            )


def _linux_section(
    cfg: dict[str, Any], requires: set[str], warnings: list[str], problems: list[BundleProblem]
) -> None:
    linux = cfg.get("linux") or {}
    _path_rules(linux, problems)
    requires |= linux_requirements(cfg)
    for key in sorted(set(linux) - {"namespaces", "seccomp", "resources", "maskedPaths", "readonlyPaths"}):
        warnings.append(f"/linux/{key} ignored on macOS (it grants, never restricts)")
    if cfg.get("hostname"):
        warnings.append("/hostname ignored on macOS (no uts namespace)")


@dataclass(frozen=True)
class _Caller:
    """The credentials and umask the workload inherits: sandbox-exec changes none of them."""

    uid: int
    gid: int
    groups: frozenset[int]
    umask: int

    @classmethod
    def of(cls, uid: int | None, gid: int | None, groups: Iterable[int] | None, umask: int | None) -> _Caller:
        if umask is None:
            umask = os.umask(0o077)  # read by setting: POSIX has no getter (restored at once)
            os.umask(umask)
        return cls(
            os.getuid() if uid is None else uid,
            os.getgid() if gid is None else gid,
            frozenset(os.getgroups() if groups is None else groups),
            umask,
        )


def _refuse(ptr: str, message: str, fix: str) -> BundleProblem:
    return BundleProblem(ptr, message, _POLICY + " (macOS sandbox-exec)", fix)


def _process_fields(cfg: dict[str, Any], me: _Caller, warnings: list[str]) -> list[BundleProblem]:
    """``process.user``, ``umask``, ``additionalGids``, ``username``, ``commandLine``, ``terminal``,
    ``oomScoreAdj``, ``root.readonly`` and the ``windows`` section: applied (the workload runs as the
    caller, with its umask and groups, on a rootfs it cannot write) or refused with the pointer;
    what only grants and is not given is a warning (module docstring)."""
    out: list[BundleProblem] = []
    proc = cfg.get("process") or {}
    user = proc.get("user") or {}
    for key, mine in (("uid", me.uid), ("gid", me.gid)):
        asked = user.get(key)
        if asked is None or asked == mine:
            continue
        if asked == 0:  # the user-namespace "root" of Linux: the caller, with no more rights
            warnings.append(f"/process/user/{key} 0 runs as the caller ({key} {mine}) on macOS")
        else:
            out.append(
                _refuse(
                    f"/process/user/{key}",
                    f"{key} {asked} differs from the caller's ({mine}): sandbox-exec keeps the caller's",
                    f"run the shim as that user, or set {key} 0 or {mine}",
                )
            )
    for i, gid in enumerate(user.get("additionalGids") or []):
        if gid not in me.groups:
            out.append(
                _refuse(
                    f"/process/user/additionalGids/{i}",
                    f"the caller is not in group {gid}, and sandbox-exec adds no group",
                    "remove it, or run the shim as a member of that group",
                )
            )
    umask = user.get("umask")
    if umask is not None and umask != me.umask:
        if umask & ~me.umask:  # a bit the caller's umask leaves set: files would get more than asked
            out.append(
                _refuse(
                    "/process/user/umask",
                    f"umask {umask:04o} is not applied: the workload keeps the caller's ({me.umask:04o})",
                    f"remove it, or run the shim with that umask (or set {me.umask:04o})",
                )
            )
        else:  # asks for no more than the caller's masks: files get fewer permissions than asked
            warnings.append(
                f"/process/user/umask {umask:04o}: the caller's umask {me.umask:04o} applies on macOS"
            )
    if user.get("username"):
        out.append(_refuse("/process/user/username", "sandbox-exec runs as the caller", "remove it"))
    if proc.get("commandLine"):
        out.append(
            _refuse("/process/commandLine", "a Windows command line is not run on macOS", "use process.args")
        )
    out += terminal_and_oom_problems(
        proc,
        "macOS",
        _POLICY + " (macOS sandbox-exec)",
        "bound memory with linux.resources.memory.limit (RLIMIT_AS)",
        warnings,
    )
    if (cfg.get("root") or {}).get("readonly") is False:
        warnings.append("/root/readonly false: the rootfs stays read-only on macOS")
    for key in sorted(cfg.get("windows") or {}):
        out.append(
            _refuse(
                f"/windows/{key}",
                "the windows section is not applied on macOS",
                "remove it; use linux.resources (memory.limit, pids.limit) or process.rlimits",
            )
        )
    return out


def plan_from_spec(
    spec: Spec,
    *,
    caller_uid: int | None = None,
    caller_gid: int | None = None,
    caller_groups: Iterable[int] | None = None,
    caller_umask: int | None = None,
) -> DarwinPlan:
    """Interpret a loaded bundle (``bundle.load``) for ``sandbox-exec`` (rules in the module
    docstring): its config, with the sandbox settings the ``Spec`` already parsed (``spec.settings``:
    network, wall clock, CPU time, requires); nothing here parses them again.

    Args:
        spec: the loaded bundle (``root.path`` and mount sources resolve against ``spec.bundle``).
        caller_uid, caller_gid, caller_groups, caller_umask: what the workload runs with, the
            caller's own (defaults ``os.getuid()``, ``os.getgid()``, ``os.getgroups()``, the process
            umask); ``process.user`` is checked against them (module docstring).
    Returns:
        The plan.  It reads the bundle's rootfs (lstat/stat) to resolve ``args[0]`` and ``cwd``.
    Raises:
        BundleInvalid: every problem, each with its JSON pointer (no ``process.env`` value quoted).
        CouldNotRun: ``args[0]`` is not an executable file inside the rootfs or storage.
    """
    config, settings = spec.config, spec.settings
    problems: list[BundleProblem] = []
    warnings: list[str] = []
    requires: set[str] = {"seatbelt", "filesystem.confinement"}
    bundle = canonical(spec.bundle)
    proc = spec.process
    args = spec.args  # the Spec's rules (bundle.load): the same on every platform
    root = (config.get("root") or {}).get("path")
    rootfs = canonical(root, bundle) if isinstance(root, str) and root else ""
    if not rootfs or not os.path.isdir(rootfs):
        problems.append(BundleProblem("/root/path", "root filesystem does not exist", _SPEC + " root.path"))
    network = settings.network
    problems += tenant.check_network(config, network)
    if network == "isolated":
        requires.add("network.isolated")
    elif network != "host":
        network = "none"
    storage, dest, storage_ro = _storage(config, bundle, problems, warnings)
    problems += refuse_in_sandbox(config, "macOS")  # no namespaces to enter (hooks.py says why)
    problems += refuse_on_host(config, "macOS")  # its mechanism runs no hooks: refused, not dropped
    cpu_s = settings.cpu_time
    rlimits = _rlimits(config, problems, requires, warnings, cpu_s)
    _linux_section(config, requires, warnings, problems)
    if network == "host":
        requires.discard("network.deny")
    else:
        requires.add("network.deny")
    problems += _process_fields(
        config, _Caller.of(caller_uid, caller_gid, caller_groups, caller_umask), warnings
    )
    if (proc.get("capabilities") or {}).get("effective"):
        warnings.append("/process/capabilities ignored on macOS (no Linux capabilities; none are granted)")
    wall_clock = settings.wall_clock
    requires |= set(settings.requires or ())
    if problems:
        raise BundleInvalid(problems)
    env = {**tenant.DEFAULT_ENV, **spec.env}  # tenant.build_env, from the Spec's parse
    mapper = _Mapper(rootfs, storage, dest)
    cwd_in = spec.cwd
    cwd = mapper.host(cwd_in)
    if not os.path.isdir(cwd):
        raise BundleInvalid(
            [
                BundleProblem(
                    "/process/cwd",
                    f"{cwd_in} is not a directory in the rootfs or storage",
                    _SPEC + " process.cwd",
                    "create it in the rootfs",
                )
            ]
        )
    program = _program(args[0] if args else "", cwd_in, env, mapper)
    return DarwinPlan(
        bundle,
        rootfs,
        storage,
        storage_ro,
        program,
        (program, *args[1:]),
        cwd,
        env,
        network,
        rlimits,
        wall_clock,
        tuple(sorted(requires)),
        tuple(warnings),
    )


def check_requirements(plan: DarwinPlan, reports: Iterable[Capability]) -> None:
    """Refuse a plan whose required capabilities this host lacks.

    Raises:
        CapabilityUnavailable: each required capability unavailable or not reported.
    """
    by_name = {r.name: r for r in reports}
    missing = [
        by_name.get(n) or Capability(n, False, "sandbox-exec", "not provided on macOS", "not reported")
        for n in plan.requires
    ]
    missing = [r for r in missing if not r.available]
    if missing:
        raise CapabilityUnavailable(missing)
