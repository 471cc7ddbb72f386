"""macOS probe: sandbox-exec runs a trivial profile.  Importing this module registers it; elsewhere
it reports unavailable ("not macOS").  sandbox-exec(1)."""

from __future__ import annotations

import subprocess
import sys
from functools import partial

from ...capability import Capability, register


@register("sandbox-exec")
def probe_sandbox_exec() -> Capability:
    """macOS only: run ``/usr/bin/sandbox-exec -p '(version 1)(allow default)' /usr/bin/true``.

    Returns: ``Capability("sandbox-exec", ...)``; elsewhere unavailable with detail ``"not macOS"``.
    """
    argv = ["/usr/bin/sandbox-exec", "-p", "(version 1)(allow default)", "/usr/bin/true"]
    measured = " ".join(argv[:2]) + " '(version 1)(allow default)' /usr/bin/true"
    if sys.platform != "darwin":
        return Capability("sandbox-exec", False, "sandbox-exec", "not macOS", measured)
    try:
        run = subprocess.run(argv, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError) as e:
        return Capability("sandbox-exec", False, "sandbox-exec", f"cannot run sandbox-exec: {e}", measured)
    ok = run.returncode == 0
    return Capability(
        "sandbox-exec",
        ok,
        "sandbox-exec",
        "" if ok else f"sandbox-exec failed ({run.returncode}): {run.stderr.strip()[:200]}",
        measured,
    )


def _report(name: str) -> Capability:
    """The report for ``name`` from the macOS trials (``trials.darwin_capabilities``, run once per
    process: one trial run answers every name)."""
    from .trials import darwin_capabilities

    global _reports
    if _reports is None:
        _reports = {c.name: c for c in darwin_capabilities()}
    return _reports.get(name) or Capability(
        name, False, "sandbox-exec", f"the macOS probes gave no {name} report", "sandbox-exec"
    )


_reports: dict[str, Capability] | None = None

# Where macOS is the platform in use, the registry holds every name its planner requires
# (``plan.plan_from_spec``: the trials of ``plan.PROBED`` and the ``NOT_ON_MACOS`` names), so
# ``sandbox-shim.requires`` is checked against the one list the planner and the capability report
# use.  A name another module already registers (``namespace.*``, ``seccomp``, ``no_new_privs``:
# ``platforms/linux/kernel_probes.py``) keeps its probe.
if sys.platform == "darwin":
    from ...capability import PROBES
    from .plan import NOT_ON_MACOS, PROBED

    for _name in (*PROBED, *NOT_ON_MACOS):
        if _name not in PROBES:
            register(_name)(partial(_report, _name))
