"""The cgroup managers' knowledge of ``Limits``: which v1 file / v2 ``io.max`` key an OCI blockIO
throttle becomes, runc's v1 → v2 weight conversions, and the refusals every cgroup version shares.

The value type ``Limits`` (OCI ``linux.resources`` in the shim's units) is platform-neutral (the
planners and ``control.update`` build it) and lives in ``sandbox_shim.resources``; it and
``refusal`` are re-exported here for the managers of this package.  Sources: runtime-spec
config-linux.md "Control groups", runc ``libcontainer/cgroups/fs2`` and opencontainers/cgroups.
"""

from __future__ import annotations

from ....resources import Limits, refusal

__all__ = ["THROTTLE", "Limits", "blkio_to_io_weight", "check_common", "refusal", "shares_to_weight"]

#: blockIO throttle keys (OCI, ``resources.THROTTLE_KEYS``) -> (v1 file, v2 io.max key)
THROTTLE = {
    "throttleReadBpsDevice": ("blkio.throttle.read_bps_device", "rbps"),
    "throttleWriteBpsDevice": ("blkio.throttle.write_bps_device", "wbps"),
    "throttleReadIOPSDevice": ("blkio.throttle.read_iops_device", "riops"),
    "throttleWriteIOPSDevice": ("blkio.throttle.write_iops_device", "wiops"),
}


def check_common(limits: Limits) -> None:
    """Refusals that do not depend on the cgroup version.

    * ``memory.kernel``: kernel memory limits are deprecated (kernel doc cgroup-v1/memory.rst) and
      gone from v2; runc ignores the field on new kernels — ignoring a limit is not allowed here.
    * ``memory.swap`` below ``memory.limit`` (runc: "memory+swap limit should be >= memory limit").
    """
    if limits.memory_kernel:
        raise refusal(
            "/linux/resources/memory/kernel",
            "kernel memory limits are not supported (deprecated "
            "by the kernel; runc ignores them, this runtime refuses to ignore a limit)",
        )
    if limits.memory_swap and limits.memory_limit and limits.memory_swap < limits.memory_limit:
        raise refusal(
            "/linux/resources/memory/swap",
            "memory+swap must be >= memory.limit",
            "set swap to at least memory.limit (or -1 for unlimited)",
        )
    if limits.memory_swappiness is not None and limits.memory_swappiness > 100:
        raise refusal("/linux/resources/memory/swappiness", "must be 0..100")
    for i, (size, limit) in enumerate(limits.hugepage_limits or []):
        if not (size[:-2].isdigit() and size[-2:] in ("KB", "MB", "GB")):
            raise refusal(
                f"/linux/resources/hugepageLimits/{i}/pageSize",
                f"{size!r} is not a page size",
                'write it as the kernel names it, e.g. "2MB" or "1GB"',
            )
        if limit < 0:
            raise refusal(f"/linux/resources/hugepageLimits/{i}/limit", "must be >= 0")


def shares_to_weight(shares: int) -> int:
    """v1 cpu.shares (2..262144) → v2 cpu.weight (1..10000) as runc >= 1.3.2 and crun >= 1.23 convert it.

    The quadratic fit in log2(shares) maps 2→1, 1024→100 (both defaults) and 262144→10000
    (opencontainers/cgroups ``ConvertCPUSharesToCgroupV2Value``; the earlier linear formula mapped
    the default 1024 shares to weight 39).
    """
    import math

    if shares <= 2:
        return 1
    if shares >= 262144:
        return 10000
    lg = math.log2(shares)
    return int(math.ceil(10 ** ((lg * lg + 125 * lg) / 612.0 - 7.0 / 34.0)))


def blkio_to_io_weight(weight: int) -> int:
    """v1 blkio.weight (10..1000) → v2 io.weight (1..10000), linearly, as runc converts it
    (``ConvertBlkIOToIOWeightValue``: 1 + (w - 10) * 9999 / 990)."""
    return 1 + (max(10, min(weight, 1000)) - 10) * 9999 // 990
