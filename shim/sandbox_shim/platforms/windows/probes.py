"""Windows probe: a Job Object is made and read back (``capabilities.windows_capabilities``).
Importing this module registers it; elsewhere it reports unavailable ("not Windows")."""

from __future__ import annotations

import sys
from functools import partial

from ...capability import Capability, register

#: the names the Job Object probes report besides ``job-object`` (``capabilities.windows_capabilities``)
JOB_NAMES = ("job-object.memory", "job-object.processes", "job-object.cpu", "job-object.accounting")


def _report(name: str) -> Capability:
    """The report for ``name`` from the Windows probes; elsewhere unavailable, ``"not Windows"``."""
    if sys.platform != "win32":
        return Capability(name, False, "job object", "not Windows", "CreateJobObjectW")
    from .capabilities import windows_capabilities

    for cap in windows_capabilities():
        if cap.name == name:
            return cap
    return Capability(
        name, False, "job object", f"the Windows probes gave no {name} report", "CreateJobObjectW"
    )


@register("job-object")
def probe_job_object() -> Capability:
    """Windows only: create a Job Object with KILL_ON_JOB_CLOSE and read it back (delegates to
    ``platforms.windows.capabilities``).  Elsewhere unavailable with detail ``"not Windows"``.
    """
    return _report("job-object")


# Where Windows is the platform in use, the registry holds every name its planner requires or
# accepts (``plan.KNOWN_CAPABILITIES``: the limits, and ``filesystem.confinement``/``network.deny``,
# reported unavailable), so ``sandbox-shim.requires`` is checked against that one list
# (``bundle.py``); elsewhere the limit names are unknown names, refused with their pointer.
if sys.platform == "win32":
    from .plan import KNOWN_CAPABILITIES

    for _name in KNOWN_CAPABILITIES:
        if _name != "job-object":
            register(_name)(partial(_report, _name))
