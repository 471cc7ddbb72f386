"""Whether a Linux plan's program can be executed, checked before anything is made (``run``'s preflight).

``process.args[0]`` is resolved in the rootfs as bwrap will lay it out: PATH from the planned
environment (default ``/usr/local/bin:/usr/bin:/bin``), relative to the planned cwd, symlinks kept
inside the root (``paths.resolve_in_root``).  It must be a regular file with an execute bit, as
execve(2) requires even of root.  A candidate under a mount is not judged (the mount hides it).
"""

from __future__ import annotations

import os
import stat

from ...errors import CouldNotRun

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ...bundle import Spec


def check(spec: Spec) -> None:
    """Raise ``CouldNotRun`` (``not_found`` | ``permission_denied``) when ``spec``'s program cannot be
    executed in its sandbox; an empty ``process.args`` passes (the plan refuses it).

    Raises: CouldNotRun; BundleInvalid (from planning).
    """
    from ...paths import resolve_in_root
    from .plan import make_plan

    plan = make_plan(spec, "preflight")
    if not plan.args:
        return
    prog = plan.args[0]
    dirs = [""] if "/" in prog else (plan.env.get("PATH") or "/usr/local/bin:/usr/bin:/bin").split(":")
    mounted = [m.destination.rstrip("/") + "/" for m in plan.mounts]
    denied = False
    for d in dirs:
        cand = os.path.normpath(os.path.join("/", plan.cwd, d, prog))
        if any(cand.startswith(m) or cand + "/" == m for m in mounted):
            return
        try:
            info = os.stat(resolve_in_root(plan.rootfs, cand))
        except OSError:
            continue
        if stat.S_ISREG(info.st_mode) and info.st_mode & 0o111:
            return
        denied = True
    raise CouldNotRun("permission_denied" if denied else "not_found", prog)
