"""The v1 devices controller: write an ordered rule list to ``devices.deny``/``devices.allow``
(kernel doc admin-guide/cgroup-v1/devices.rst).

Rules have the ``sandbox_shim.devices`` shape.  ``a`` written to ``devices.deny`` empties the allow
list and denies everything; any other rule adds (allow) or removes (deny) one entry.  The rules are
written before any process joins the cgroup, and read back from ``devices.list`` so a controller that
ignored them is reported, not trusted.
"""

from __future__ import annotations

import os

from ....devices import line
from ....errors import LaunchFailed
from .base import read, write

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def apply(cgroup_dir: str, rules: list[dict[str, Any]]) -> None:
    """Write ``rules`` in order into the devices cgroup at ``cgroup_dir``.

    Raises:
        LaunchFailed: a write failed, or ``devices.list`` still allows everything after a deny-all.
    """
    for rule in rules:
        write(os.path.join(cgroup_dir, "devices.allow" if rule["allow"] else "devices.deny"), line(rule))
    listed = (read(os.path.join(cgroup_dir, "devices.list")) or "").split("\n")
    if any(r["type"] == "a" and not r["allow"] for r in rules) and "a *:* rwm" in listed and \
            not any(r["type"] == "a" and r["allow"] for r in rules):
        raise LaunchFailed(f"{cgroup_dir}/devices.list still allows every device after a deny-all",
                           "check the devices cgroup hierarchy")
