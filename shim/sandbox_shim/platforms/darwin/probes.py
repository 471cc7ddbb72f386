"""macOS probe: sandbox-exec runs a trivial profile.  Importing this module registers it; elsewhere
it reports unavailable ("not macOS").  sandbox-exec(1)."""

from __future__ import annotations

import subprocess
import sys

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
