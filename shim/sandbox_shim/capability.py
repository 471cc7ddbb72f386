"""Capability reports: each capability is probed by *trying* it, never inferred.

A ``Capability`` says whether this host can enforce one thing, by which mechanism, and how that was
measured.  ``probe(name)`` runs the named probe (cached per process); ``require(names, cache_dir)``
raises ``CapabilityUnavailable`` with every missing report, reading the cross-process cache in
``cache_dir`` when one is given (``probes.cache``: invalidated whenever the host or the caller's
confinement changes).  The probes themselves live in the ``sandbox_shim.probes`` package.
"""

from __future__ import annotations

from .errors import CapabilityUnavailable
from .values import FrozenValue

TYPE_CHECKING = False  # no typing or dataclasses at run time: ``start`` loads this module
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence
    from typing import Any


class Capability(FrozenValue):
    """One probed capability (immutable, hashable, compared by value).

    Attributes:
        name: dotted name, e.g. ``namespace.network``, ``cgroup.memory``, ``bwrap``, ``seccomp``.
        available: True only if the probe succeeded in doing the thing.
        mechanism: what provides it (``bwrap 0.8.0``, ``cgroup v1``, ``unshare(2)``, ...).
        detail: why not, in words a person can act on ("" when available).
        measured_by: how it was measured (the syscall or command tried).
    """

    __match_args__ = ("name", "available", "mechanism", "detail", "measured_by")
    name: str
    available: bool
    mechanism: str
    detail: str
    measured_by: str

    def __init__(self, name: str, available: bool, mechanism: str, detail: str, measured_by: str) -> None:
        self._set(name=name, available=available, mechanism=mechanism, detail=detail, measured_by=measured_by)

    def to_dict(self) -> dict[str, Any]:
        """``{name, available, mechanism, detail, measured_by}``."""
        return {k: getattr(self, k) for k in self.__match_args__}


if TYPE_CHECKING:  # collections.abc (and collections under it) stays unloaded too
    Probe = Callable[[], Capability]

#: name -> probe function; filled by ``sandbox_shim.probes`` on import.
PROBES: dict[str, Probe] = {}

_cache: dict[str, Capability] = {}
_loaded = False


#: the capability a ``linux.namespaces`` entry needs where a platform has no namespaces of that type
NAMESPACE_REQUIREMENTS = {"network": "network.deny", "mount": "filesystem.confinement"}


def linux_requirements(config: dict[str, Any]) -> set[str]:
    """What the ``linux`` and ``process`` sections of an OCI config ask to be enforced, as capability
    names: each namespace type (``namespace.TYPE``, or ``NAMESPACE_REQUIREMENTS``), ``seccomp``,
    ``no_new_privs``.  The non-Linux planners require these (and refuse where their host lacks them);
    runtime-spec config-linux.md, config.md ``noNewPrivileges``."""
    linux = config.get("linux") or {}
    out: set[str] = set()
    for ns in linux.get("namespaces") or []:
        t = ns.get("type") if isinstance(ns, dict) else None
        if t:
            out.add(NAMESPACE_REQUIREMENTS.get(t, f"namespace.{t}"))
    if linux.get("seccomp") is not None:
        out.add("seccomp")
    if (config.get("process") or {}).get("noNewPrivileges"):
        out.add("no_new_privs")
    return out


def register(name: str) -> Callable[[Probe], Probe]:
    """Decorator: register a probe function under ``name``."""

    def deco(fn: Probe) -> Probe:
        PROBES[name] = fn
        return fn

    return deco


def _load_probes() -> None:
    """Import every probe module (they register on import), once per process.

    Keyed on a flag, not on ``PROBES`` being empty: importing one probe module directly (a test, the
    conformance suite) registers some probes, and the registry must still end up complete."""
    global _loaded
    if not _loaded:
        from . import probes

        probes.load_all()
        _loaded = True


def probe(name: str) -> Capability:
    """Return the report for ``name``, probing on first use in this process.

    Raises:
        KeyError: no probe of that name exists.
    """
    if name not in _cache:
        _load_probes()
        try:
            _cache[name] = PROBES[name]()
        except Exception as e:  # a probe that crashes reports "unavailable", never "available"
            _cache[name] = Capability(name, False, "", f"probe failed: {e}", "probe raised")
    return _cache[name]


def report(names: Iterable[str] | None = None) -> list[Capability]:
    """Probe ``names`` (default: every registered capability) and return their reports, in order."""
    _load_probes()
    return [probe(n) for n in (list(names) if names is not None else sorted(PROBES))]


def require(names: Iterable[str], cache_dir: str | None = None) -> None:
    """Raise ``CapabilityUnavailable`` listing every capability in ``names`` that is missing.

    Args:
        names: capability names (``PROBES`` keys).
        cache_dir: a directory only trusted users can write (the state root's ``.capabilities``):
            reports come from ``probes.cache.cached_report`` there, so a lifecycle verb does not
            re-probe on every call; None probes in this process (``probe``).
    Raises:
        CapabilityUnavailable: with the report of each missing capability.
        KeyError: a name no probe has.
    """
    names = list(names)
    if not names:
        return
    if cache_dir is not None:
        from .probes.cache import cached_report

        reports = cached_report(names, cache_dir)
    else:
        reports = report(names)
    missing = [c for c in reports if not c.available]
    if missing:
        raise CapabilityUnavailable(missing)


def document() -> dict[str, Any]:
    """The capabilities document (``sandbox-shim capabilities``, schemas/capabilities.schema.json):
    ``{"host": {kernel, arch, platform}, "elapsed_ms": float, "capabilities": [report dicts]}``,
    every capability probed now (the in-process cache is cleared first: "probe now")."""
    import time

    from .probes.cache import host_facts

    clear_cache()
    started = time.perf_counter()
    reports = report()
    elapsed = (time.perf_counter() - started) * 1000
    return {
        "host": host_facts(),
        "elapsed_ms": round(elapsed, 1),
        "capabilities": [c.to_dict() for c in reports],
    }


def bare_control_argv(
    rootfs: str,
    storage: str,
    storage_inside: str,
    capabilities: Sequence[str],
    share_net: bool,
    command: Sequence[str],
) -> list[str] | None:
    """The argv of the conformance suite's control outside the tenant profile on this host (the
    platform builds it: ``platforms.select.bare_control_argv``; on Linux the rootfs under bare bwrap
    with ``capabilities`` kept and a network namespace of its own unless ``share_net``), or None
    where this host has none (off Linux, no bwrap).  The conformance suite reaches platform code
    only through the library, never the composition point itself."""
    from .platforms.select import bare_control_argv as argv

    return argv(rootfs, storage, storage_inside, capabilities, share_net, command)


def clear_cache() -> None:
    """Forget every probe result (tests; a host change within one process)."""
    _cache.clear()
