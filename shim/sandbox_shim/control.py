"""Controlling a sandbox that runs: pause, resume, update, ps, stats and the events stream.

The library side of ``sandbox-shim pause|resume|update|ps|events``; the CLI (``cli/control.py``) only
parses and renders (``update_limits`` takes ``update``'s flags as they come).  Everything is read
from or written to the sandbox's control group through
``Mechanism.cgroup`` (a ``mechanism.CgroupControl``; on Linux the ``platforms/linux/cgroups`` managers):
``freeze()`` for pause/resume, ``apply()`` for update, ``pids()`` for ps.  ``facts()`` gives the
counters a limit leaves behind (OOM kills, failcnt, pids limit hits; the platform reads its own files,
``platforms/linux/cgroups/facts.py``) — the facts ``execute``/``run_bundle`` turn into
``LimitExceeded(kind)``; read them *before* the cgroup is removed.

Sources: kernel docs admin-guide/cgroup-v1/{memory,pids,cpuacct,freezer-subsystem}.rst and
admin-guide/cgroup-v2.rst; runc's ``events`` JSON (libcontainer/types: ``Event``, ``Stats``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from . import state as st
from .api import observed_status, sandbox_of, store_of
from .errors import InvalidState, LaunchFailed, ShimError, UsageError

if TYPE_CHECKING:
    from .mechanism import CgroupControl, Mechanism, Sandbox


@dataclass
class Facts:
    """Counters of one cgroup at one moment.  Bytes, nanoseconds, counts; None where the host has none.

    Attributes:
        memory_usage / memory_peak / memory_limit: bytes (limit None = unlimited).
        memory_failcnt: times usage hit the limit.
        oom_kills: processes the OOM killer killed here.
        pids_current / pids_limit: processes now / the pids limit (None = unlimited).
        pids_max_hits: forks refused by the pids limit.
        (Which file of each cgroup version gives each counter: ``platforms/linux/cgroups/facts.py``.)
        cpu_total_ns / cpu_user_ns / cpu_kernel_ns: CPU time, nanoseconds.
        io_read_bytes / io_write_bytes: block I/O, bytes (v2 io.stat, v1 blkio service bytes).
        psi: v2 pressure stall information ``{"cpu"|"memory"|"io": {"some"|"full": {"avg10", "avg60",
            "avg300", "total"}}}`` (kernel doc accounting/psi.rst); empty on v1.
    """

    memory_usage: int | None = None
    memory_peak: int | None = None
    memory_limit: int | None = None
    memory_failcnt: int | None = None
    oom_kills: int = 0
    pids_current: int | None = None
    pids_limit: int | None = None
    pids_max_hits: int = 0
    cpu_total_ns: int | None = None
    cpu_user_ns: int | None = None
    cpu_kernel_ns: int | None = None
    io_read_bytes: int | None = None
    io_write_bytes: int | None = None
    psi: dict[str, Any] | None = None


def facts(cg: CgroupControl) -> Facts:
    """``Facts`` of a cgroup (``CgroupControl.facts``: the platform reads its own files, with the same
    parser its manager uses; missing files give None / 0)."""
    return cg.facts()


#: mechanism name -> the platform, for mechanisms of a platform without control groups (their
#: ``cgroup`` is always None: ``platforms/darwin/mechanism.py``, ``platforms/windows/mechanism.py``)
_NO_CGROUPS = {"darwin-seatbelt": "macOS", "windows-job-object": "Windows"}


def _cgroup(mechanism: Mechanism, sb: Sandbox, verb: str) -> CgroupControl:
    """The sandbox's control group for ``verb`` (``pause``, ``resume``, ``update``, ``stats``,
    ``events``).

    Raises:
        CapabilityUnavailable: the platform has no control groups (macOS, Windows): the verb is not
            supported there (exit status 4, as ``checkpoint``), naming the platform.
        LaunchFailed: a Linux sandbox whose record holds no cgroup (it was created without one).
    """
    cg = mechanism.cgroup(sb)
    if cg is not None:
        return cg
    platform = _NO_CGROUPS.get(mechanism.name)
    if platform is not None:
        from .capability import Capability
        from .errors import CapabilityUnavailable

        why = f"{platform} has no control groups: {verb} is not supported on {platform}"
        raise CapabilityUnavailable([Capability(verb, False, mechanism.name, why, "not offered")])
    raise LaunchFailed(f"sandbox {sb.id!r} has no cgroup", "it was created without one; recreate it")


def pause(mechanism: Mechanism, sandbox_id: str) -> None:
    """Freeze every process of a running sandbox (the cgroup freezer, ``CgroupControl.freeze``).

    Raises:
        SandboxNotFound; InvalidState unless running; LaunchFailed if the freezer is missing or stuck;
        CapabilityUnavailable on a platform without control groups (macOS, Windows).
    """
    store = store_of(mechanism)
    with store.locked(sandbox_id) as rec:
        st.require(sandbox_id, observed_status(mechanism, rec, store), "pause")
        _cgroup(mechanism, sandbox_of(rec, store), "pause").freeze(True)


def resume(mechanism: Mechanism, sandbox_id: str) -> None:
    """Thaw a paused sandbox.  Raises SandboxNotFound; InvalidState unless paused; LaunchFailed;
    CapabilityUnavailable on a platform without control groups (macOS, Windows)."""
    store = store_of(mechanism)
    with store.locked(sandbox_id) as rec:
        st.require(sandbox_id, observed_status(mechanism, rec, store), "resume")
        _cgroup(mechanism, sandbox_of(rec, store), "resume").freeze(False)


_UPDATABLE = {
    "memory": {"limit", "reservation", "swap"},
    "pids": {"limit"},
    "cpu": {"shares", "quota", "period", "cpus", "mems"},
}


def update(mechanism: Mechanism, sandbox_id: str, resources: dict[str, Any]) -> None:
    """Apply new limits (OCI ``linux.resources`` shape: memory, pids, cpu) to an active sandbox.

    Values are bytes (memory), a count (pids), µs (cpu quota/period); lowering memory below what is in
    use makes the kernel reclaim first, and fails with EBUSY (v1) when it cannot.
    Raises:
        UsageError: an unknown section or key, or a value that is not a positive integer.
        InvalidState: the sandbox is stopped.  LaunchFailed: the kernel refused a write.
        CapabilityUnavailable: the platform has no control groups (macOS, Windows).
    """
    from .resources import Limits

    if not isinstance(resources, dict):
        raise UsageError("resources must be a JSON object", 'e.g. {"memory": {"limit": 33554432}}')
    for section, body in resources.items():
        if section not in _UPDATABLE or not isinstance(body, dict):
            raise UsageError(f"update cannot change {section!r}", "use memory, pids or cpu")
        for key, val in body.items():
            if key not in _UPDATABLE[section]:
                raise UsageError(f"update cannot change {section}.{key}")
            if key not in ("cpus", "mems") and not (isinstance(val, int) and val > 0):
                raise UsageError(
                    f"{section}.{key} must be a positive integer (got {val!r})",
                    "removing a limit (-1) is not supported by update",
                )
    store = store_of(mechanism)
    with store.locked(sandbox_id) as rec:
        now = observed_status(mechanism, rec, store)
        if now not in st.ACTIVE:
            raise InvalidState(sandbox_id, now, "update", "created, running or paused")
        _cgroup(mechanism, sandbox_of(rec, store), "update").apply(Limits.from_oci(resources))


def update_limits(
    mechanism: Mechanism,
    sandbox_id: str,
    resources_file: str | None = None,
    *,
    memory: int | None = None,
    pids_limit: int | None = None,
    cpu_quota: int | None = None,
    cpu_period: int | None = None,
    cpu_shares: int | None = None,
) -> None:
    """``update`` from runc's flags: the OCI ``linux.resources`` object in ``resources_file`` (``-``:
    standard input; read under ``jsonguard``'s limits), with each given flag set over it.

    Raises: UsageError: the file holds no JSON object, or nothing is to be changed; and as ``update``.
    """
    from .jsonguard import read_file

    res: dict[str, Any] = read_file(resources_file) if resources_file else {}
    if not isinstance(res, dict):
        raise UsageError("--resources must hold a JSON object")
    for section, key, val in (
        ("memory", "limit", memory),
        ("pids", "limit", pids_limit),
        ("cpu", "quota", cpu_quota),
        ("cpu", "period", cpu_period),
        ("cpu", "shares", cpu_shares),
    ):
        if val is not None:
            res.setdefault(section, {})[key] = val
    if not res:
        raise UsageError("nothing to update", "give --resources FILE or a limit flag")
    update(mechanism, sandbox_id, res)


def ps(mechanism: Mechanism, sandbox_id: str) -> list[int]:
    """Host pids of the sandbox's processes (the container process and exec'd ones), sorted: every
    member of its cgroup (no process of the runtime's stays in it once create returns)."""
    store = store_of(mechanism)
    rec = store.read(sandbox_id)
    cg = mechanism.cgroup(sandbox_of(rec, store))
    return sorted(cg.pids()) if cg is not None else []


def stats(mechanism: Mechanism, sandbox_id: str) -> dict[str, Any]:
    """One runc-style stats event: ``{"type": "stats", "id", "data": {"cpu", "memory", "pids"}}``.

    Units as runc's: cpu usage in nanoseconds, memory in bytes; a limit of 0 means unlimited.
    Raises: SandboxNotFound; CapabilityUnavailable on a platform without control groups (macOS,
    Windows).
    """
    store = store_of(mechanism)
    cg = _cgroup(mechanism, sandbox_of(store.read(sandbox_id), store), "stats")
    return _stats_event(sandbox_id, facts(cg))


def _stats_event(sandbox_id: str, f: Facts) -> dict[str, Any]:
    """runc's stats shape; ``psi`` (runc 1.2, cgroup v2) under cpu, memory and blkio where present."""
    data: dict[str, Any] = {
        "cpu": {
            "usage": {
                "total": f.cpu_total_ns or 0,
                "user": f.cpu_user_ns or 0,
                "kernel": f.cpu_kernel_ns or 0,
            }
        },
        "memory": {
            "usage": {
                "usage": f.memory_usage or 0,
                "max": f.memory_peak or 0,
                "failcnt": f.memory_failcnt or 0,
                "limit": f.memory_limit or 0,
            }
        },
        "pids": {"current": f.pids_current or 0, "limit": f.pids_limit or 0},
        "blkio": {
            "ioServiceBytesRecursive": [
                {"op": op, "value": v}
                for op, v in (("Read", f.io_read_bytes), ("Write", f.io_write_bytes))
                if v is not None
            ]
        },
    }
    for res, key in (("cpu", "cpu"), ("memory", "memory"), ("io", "blkio")):
        if f.psi and res in f.psi:
            data[key]["psi"] = f.psi[res]
    return {"type": "stats", "id": sandbox_id, "data": data}


def events(
    mechanism: Mechanism, sandbox_id: str, interval: float = 5.0, once: bool = False
) -> Iterator[dict[str, Any]]:
    """Yield a stats event every ``interval`` seconds, and ``{"type": "oom", "id"}`` when the OOM
    killer acts, until the sandbox stops (runc ``events``); with ``once``, the one event ``stats``
    gives, whatever the sandbox's status (runc ``events --stats``).  Raises SandboxNotFound;
    CapabilityUnavailable on a platform without control groups (macOS, Windows)."""
    if once:
        yield stats(mechanism, sandbox_id)
        return
    store = store_of(mechanism)
    rec = store.read(sandbox_id)
    sb = sandbox_of(rec, store)
    cg = _cgroup(mechanism, sb, "events")
    seen_ooms = facts(cg).oom_kills
    while True:
        try:
            if observed_status(mechanism, store.read(sandbox_id), store) not in st.ACTIVE:
                return
        except ShimError:  # deleted meanwhile
            return
        f = facts(cg)
        if f.oom_kills > seen_ooms:
            seen_ooms = f.oom_kills
            yield {"type": "oom", "id": sandbox_id}
        yield _stats_event(sandbox_id, f)
        deadline = time.monotonic() + interval
        while time.monotonic() < deadline and mechanism.alive(sb):
            time.sleep(min(0.1, interval))


def to_json(obj: Facts | Mapping[str, object]) -> str:
    """One line of JSON for an event or ``Facts``."""
    return json.dumps(asdict(obj) if isinstance(obj, Facts) else obj)


def signal_forwarder(mechanism: Mechanism, sandbox_id: str) -> Callable[[str], None]:
    """An ``on_start`` callback for ``execution.run_bundle``: once the sandbox runs, SIGINT, SIGTERM and
    SIGHUP sent to this process are passed on to it (``api.signal``), as ``runc run`` forwards them.
    Installs handlers, so only for the main thread of a process that owns its signals (the CLI)."""
    import signal as _signal

    from . import api

    def forward(signum: int, _frame: object) -> None:
        try:
            api.signal(mechanism, sandbox_id, signum)
        except ShimError:  # gone meanwhile: nothing left to signal
            pass

    def on_start(_sid: str) -> None:
        for s in (_signal.SIGINT, _signal.SIGTERM, getattr(_signal, "SIGHUP", None)):
            if s is not None:
                _signal.signal(s, forward)

    return on_start
