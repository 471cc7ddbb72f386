"""``Limits`` and the cgroup conversions, as the managers import them.

The value type is platform-neutral (the planner and ``control.update`` build it from OCI
``linux.resources``) and lives in ``sandbox_shim.resources``; this module re-exports it for the
managers of this package.
"""

from __future__ import annotations

from ....resources import THROTTLE, Limits, blkio_to_io_weight, check_common, refusal, shares_to_weight

__all__ = ["THROTTLE", "Limits", "blkio_to_io_weight", "check_common", "refusal", "shares_to_weight"]
