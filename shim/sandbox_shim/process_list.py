"""``ps``: the processes of a sandbox, as host pids and their command lines.

``pids`` is every member of the sandbox's cgroup (``control.ps``: the container process and exec'd
ones; no process of the runtime's stays in it once create returns), sorted.  ``processes`` adds each
one's command line, read by psutil (the one reader of ``/proc/PID`` facts here; loaded only for this),
"" for a process that ended meanwhile or whose command line cannot be read (a kernel thread, a zombie).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .mechanism import Mechanism, Sandbox


def pids(mechanism: Mechanism, sandbox: Sandbox | str) -> list[int]:
    """Host pids of the sandbox's processes, sorted.  Raises SandboxNotFound."""
    from . import api, control

    return control.ps(mechanism, api.id_of(sandbox))


def processes(mechanism: Mechanism, sandbox: Sandbox | str, commands: bool = True) -> list[tuple[int, str]]:
    """``[(pid, command line with arguments joined by spaces)]``, sorted by pid; with ``commands``
    False every command line is "" and psutil is not loaded (``ps --format json`` wants pids only).
    Raises SandboxNotFound."""
    found = pids(mechanism, sandbox)
    if not commands:
        return [(pid, "") for pid in found]
    import psutil

    out = []
    for pid in found:
        try:
            cmd = " ".join(psutil.Process(pid).cmdline())
        except (psutil.Error, OSError):
            cmd = ""
        out.append((pid, cmd))
    return out
