"""``Limits``: what OCI ``linux.resources`` asks of a cgroup, in the shim's units.

Source: runtime-spec config-linux.md "Control groups" (field names, -1/0 meaning "unset").  This is
the neutral value the planners and ``control.update`` build; how a field becomes a cgroup file (v1
names, v2 keys, runc's weight conversions, the refusals every version shares) is the cgroup
managers' knowledge (``platforms/linux/cgroups/limits.py``).  A manager either applies a field or
refuses it with ``refusal(pointer, ...)`` — ``LaunchFailed`` whose first words are the field's JSON
pointer.
"""

from __future__ import annotations

from .errors import LaunchFailed
from .values import Value

TYPE_CHECKING = False  # no typing at run time: the lifecycle verbs load this module
if TYPE_CHECKING:
    from typing import Any

#: the OCI blockIO throttle keys (runtime-spec config-linux.md "Block IO"); the cgroup files they
#: become are the managers' (``platforms/linux/cgroups/limits.THROTTLE``)
THROTTLE_KEYS = (
    "throttleReadBpsDevice",
    "throttleWriteBpsDevice",
    "throttleReadIOPSDevice",
    "throttleWriteIOPSDevice",
)

_FIELDS = (
    "memory_limit",
    "memory_swap",
    "memory_reservation",
    "pids_limit",
    "cpu_shares",
    "cpu_quota",
    "cpu_period",
    "cpu_cpus",
    "cpu_mems",
    "memory_swappiness",
    "memory_disable_oom_killer",
    "memory_kernel",
    "memory_kernel_tcp",
    "memory_use_hierarchy",
    "memory_check_before_update",
    "cpu_burst",
    "cpu_realtime_runtime",
    "cpu_realtime_period",
    "cpu_idle",
    "blkio_weight",
    "blkio_leaf_weight",
    "blkio_weight_device",
    "blkio_throttle",
    "hugepage_limits",
    "unified",
    "devices",
)


def refusal(pointer: str, why: str, fix: str = "") -> LaunchFailed:
    """The error for a field this host cannot apply: one line starting with its JSON pointer."""
    return LaunchFailed(f"{pointer}: {why}", fix or f"remove {pointer} from config.json")


class Limits(Value):
    """Resource limits from OCI ``linux.resources`` (runtime-spec config-linux.md "Control groups").

    Units: bytes for memory and hugepage limits; microseconds for cpu quota/period/burst/realtime;
    a count for pids; bytes/s or IO/s for blkio throttles.  ``memory_swap`` is memory+swap (the OCI
    meaning).  Every field defaults to None (not set).  Shapes of the list fields:

    * ``blkio_weight_device``: ``[(major, minor, weight|None, leaf_weight|None)]``
    * ``blkio_throttle``: ``{OCI throttle key: [(major, minor, rate)]}`` (keys of ``THROTTLE_KEYS``)
    * ``hugepage_limits``: ``[(page_size e.g. "2MB", limit_bytes)]``
    * ``unified``: ``{name: value}`` as OCI ``linux.resources.unified`` gives it
    * ``devices``: ``[{"allow": bool, "type": "a"|"c"|"b", "major": int|None, "minor": int|None,
      "access": subset of "rwm"}]`` in OCI order (the last matching rule wins; nothing matching is
      denied) — see ``devices.py``.  None leaves the device controller alone.
    """

    __match_args__ = _FIELDS
    # the fields set from ``**more`` (their shapes: the class docstring)
    memory_swappiness: int | None
    memory_disable_oom_killer: bool | None
    memory_kernel: int | None
    memory_kernel_tcp: int | None
    memory_use_hierarchy: bool | None
    memory_check_before_update: bool | None
    cpu_burst: int | None
    cpu_realtime_runtime: int | None
    cpu_realtime_period: int | None
    cpu_idle: int | None
    blkio_weight: int | None
    blkio_leaf_weight: int | None
    blkio_weight_device: list[tuple[int, int, int | None, int | None]] | None
    blkio_throttle: dict[str, list[tuple[int, int, int]]] | None
    hugepage_limits: list[tuple[str, int]] | None
    unified: dict[str, str] | None
    devices: list[dict[str, Any]] | None

    def __init__(
        self,
        memory_limit: int | None = None,
        memory_swap: int | None = None,
        memory_reservation: int | None = None,
        pids_limit: int | None = None,
        cpu_shares: int | None = None,
        cpu_quota: int | None = None,
        cpu_period: int | None = None,
        cpu_cpus: str | None = None,
        cpu_mems: str | None = None,
        **more: Any,
    ) -> None:
        self.memory_limit = memory_limit
        self.memory_swap = memory_swap
        self.memory_reservation = memory_reservation
        self.pids_limit = pids_limit
        self.cpu_shares = cpu_shares
        self.cpu_quota = cpu_quota
        self.cpu_period = cpu_period
        self.cpu_cpus = cpu_cpus
        self.cpu_mems = cpu_mems
        unknown = set(more) - set(_FIELDS)
        if unknown:
            raise TypeError(f"Limits got unknown field(s) {sorted(unknown)}")
        for name in _FIELDS[9:]:
            setattr(self, name, more.get(name))

    @classmethod
    def from_oci(
        cls, resources: dict[str, Any] | None, devices: list[dict[str, Any]] | None = None
    ) -> Limits:
        """Read an OCI ``linux.resources`` object (None → no limits).

        Raises ``LaunchFailed`` (starting with the pointer) for blockIO/hugepageLimits entries of the
        wrong shape, which the schema leaves open.

        ``devices`` is the device rule list (shape above) built from ``linux.resources.devices`` by the
        planner; ``resources["devices"]`` itself is not read here.
        """
        r = resources or {}
        mem = r.get("memory") or {}
        cpu = r.get("cpu") or {}
        pids = r.get("pids") or {}
        bio = r.get("blockIO") or {}

        def pos(v: Any) -> int | None:  # -1 / 0 mean "unlimited"/"unset" in OCI for these fields
            return int(v) if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None

        def num(v: Any) -> int | None:  # 0 is a value here (swappiness 0, idle 0)
            return int(v) if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None

        def flag(v: Any) -> bool | None:
            return v if isinstance(v, bool) else None

        def entries(ptr: str, v: Any) -> list[dict[str, Any]]:
            if v is None:
                return []
            if not isinstance(v, list) or not all(isinstance(e, dict) for e in v):
                raise refusal(ptr, "must be an array of objects")
            return v

        def integer(ptr: str, v: Any, default: int | None = None) -> int:
            if v is None and default is not None:
                return default
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise refusal(ptr, f"{v!r} is not a non-negative integer")
            return v

        def dev(ptr: str, e: dict[str, Any]) -> tuple[int, int]:
            return integer(f"{ptr}/major", e.get("major")), integer(f"{ptr}/minor", e.get("minor"))

        if not isinstance(bio, dict):
            raise refusal("/linux/resources/blockIO", "must be an object")
        b = "/linux/resources/blockIO"
        throttle = {
            k: [
                (*dev(f"{b}/{k}/{i}", e), integer(f"{b}/{k}/{i}/rate", e.get("rate")))
                for i, e in enumerate(entries(f"{b}/{k}", bio.get(k)))
            ]
            for k in THROTTLE_KEYS
            if bio.get(k)
        }
        weight_dev = [
            (*dev(f"{b}/weightDevice/{i}", e), pos(e.get("weight")), pos(e.get("leafWeight")))
            for i, e in enumerate(entries(f"{b}/weightDevice", bio.get("weightDevice")))
        ]
        h = "/linux/resources/hugepageLimits"
        huge = [
            (
                e.get("pageSize") if isinstance(e.get("pageSize"), str) else "",
                integer(f"{h}/{i}/limit", e.get("limit")),
            )
            for i, e in enumerate(entries(h, r.get("hugepageLimits")))
        ]
        return cls(
            memory_limit=pos(mem.get("limit")),
            memory_swap=pos(mem.get("swap")),
            memory_reservation=pos(mem.get("reservation")),
            pids_limit=pos(pids.get("limit")),
            cpu_shares=pos(cpu.get("shares")),
            cpu_quota=pos(cpu.get("quota")),
            cpu_period=pos(cpu.get("period")),
            cpu_cpus=cpu.get("cpus") or None,
            cpu_mems=cpu.get("mems") or None,
            memory_swappiness=num(mem.get("swappiness")),
            memory_disable_oom_killer=flag(mem.get("disableOOMKiller")),
            memory_kernel=pos(mem.get("kernel")),
            memory_kernel_tcp=pos(mem.get("kernelTCP")),
            memory_use_hierarchy=flag(mem.get("useHierarchy")),
            memory_check_before_update=flag(mem.get("checkBeforeUpdate")),
            cpu_burst=num(cpu.get("burst")),
            cpu_realtime_runtime=pos(cpu.get("realtimeRuntime")),
            cpu_realtime_period=pos(cpu.get("realtimePeriod")),
            cpu_idle=num(cpu.get("idle")),
            blkio_weight=pos(bio.get("weight")),
            blkio_leaf_weight=pos(bio.get("leafWeight")),
            blkio_weight_device=weight_dev or None,
            blkio_throttle=throttle or None,
            hugepage_limits=huge or None,
            unified={str(k): str(v) for k, v in (r.get("unified") or {}).items()} or None,
            devices=list(devices) if devices is not None else None,
        )

    def controllers(self) -> list[str]:
        """Controllers these limits need that have a capability probe: memory, pids, cpu, cpuset."""
        need = []
        if (
            self.memory_limit
            or self.memory_swap
            or self.memory_reservation
            or self.memory_swappiness is not None
            or self.memory_disable_oom_killer
        ):
            need.append("memory")
        if self.pids_limit:
            need.append("pids")
        if (
            self.cpu_shares
            or self.cpu_quota
            or self.cpu_period
            or self.cpu_burst is not None
            or self.cpu_idle is not None
            or self.cpu_realtime_runtime
            or self.cpu_realtime_period
        ):
            need.append("cpu")
        if self.cpu_cpus or self.cpu_mems:
            need.append("cpuset")
        return need

    def hierarchies(self) -> list[str]:
        """Every controller these limits touch: ``controllers()`` plus io, hugetlb, devices (v2 names)."""
        need = self.controllers()
        if self.blkio_weight or self.blkio_leaf_weight or self.blkio_weight_device or self.blkio_throttle:
            need.append("io")
        if self.hugepage_limits:
            need.append("hugetlb")
        if self.devices is not None:
            need.append("devices")
        return need
