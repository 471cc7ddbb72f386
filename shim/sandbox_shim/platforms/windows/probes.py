"""Windows probe: a Job Object is made and read back (``capabilities.windows_capabilities``).
Importing this module registers it; elsewhere it reports unavailable ("not Windows")."""

from __future__ import annotations

import sys

from ...capability import Capability, register


@register("job-object")
def probe_job_object() -> Capability:
    """Windows only: create a Job Object with KILL_ON_JOB_CLOSE and read it back (delegates to
    ``platforms.windows.capabilities``).  Elsewhere unavailable with detail ``"not Windows"``.
    """
    if sys.platform != "win32":
        return Capability("job-object", False, "job object", "not Windows", "CreateJobObjectW")
    from .capabilities import windows_capabilities

    for cap in windows_capabilities():
        if cap.name == "job-object":
            return cap
    return Capability("job-object", False, "job object", "the Windows probes gave no job-object report",
                      "CreateJobObjectW")
