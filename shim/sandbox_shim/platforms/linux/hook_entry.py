"""How an OCI hook that runs in the sandbox enters it on Linux: an nsenter(1) argv prefix.

runtime-spec config.md: ``createContainer`` hooks run "in the container namespace" after the mount
namespace was set up but from the runtime's view of paths (``path`` resolves on the host), and
``startContainer`` hooks run "in the container namespace" with its root (``path`` resolves inside).
Here: ``createContainer`` enters every namespace of the sandbox's first process that differs from the
runtime's except the mount namespace, with ``/proc/PID/root`` as its cwd; ``startContainer`` enters
them all, mount included, with nsenter's ``--root --wd`` (the sandbox's root and cwd).  A namespace
the sandbox shares with the runtime is not entered (setns(2) into one's own user namespace fails with
EINVAL).  ``LinuxMechanism.hook_entry`` is the protocol member (``mechanism.HookEntry``).
"""

from __future__ import annotations

from ...errors import LaunchFailed
from ...mechanism import HookEntry
from . import ns_shared

#: nsenter(1) option for each entry of /proc/PID/ns, in the order they are given
NSENTER = {"user": "-U", "mnt": "-m", "uts": "-u", "ipc": "-i", "net": "-n", "pid": "-p", "cgroup": "-C"}
#: where nsenter is looked for (never the caller's PATH: hooks run with the runtime's privileges)
SEARCH = "/usr/bin:/bin:/usr/sbin:/sbin"


def entry(nsenter: str, pid: int, phase: str, differing: set[str]) -> HookEntry:
    """The entry for a ``phase`` hook into the sandbox whose first process is ``pid``, given the
    namespaces (``NSENTER`` keys) in which it differs from the runtime.  Pure: the argv is
    ``[nsenter, -t, PID, <one option per differing namespace, in NSENTER's order>, (--root --wd), --]``.

    Raises:
        LaunchFailed: ``phase`` is not ``createContainer`` or ``startContainer``.
    """
    if phase not in ("createContainer", "startContainer"):
        raise LaunchFailed(f"{phase} hooks run on the host, not in the sandbox", "run it without an entry")
    inside = phase == "startContainer"
    opts = [flag for name, flag in NSENTER.items() if name in differing and (inside or name != "mnt")]
    prefix = [nsenter, "-t", str(pid), *opts, *(["--root", "--wd"] if inside else []), "--"]
    return HookEntry(prefix, None if inside else f"/proc/{pid}/root")


def differing(pid: int) -> set[str]:
    """The namespaces (``NSENTER`` keys) of ``pid`` whose inode differs from this process's; one the
    kernel does not have (no /proc/PID/ns entry) is left out."""
    found: set[str] = set()
    for name in NSENTER:
        try:
            if not ns_shared(pid, name):
                found.add(name)
        except FileNotFoundError:
            continue
    return found


def hook_entry(pid: int, phase: str) -> HookEntry:
    """``Mechanism.hook_entry`` on Linux: ``entry`` with nsenter from ``SEARCH`` and ``differing(pid)``.

    Raises:
        LaunchFailed: nsenter(1) is not installed, or ``phase`` does not run in the sandbox.
    """
    import shutil

    nsenter = shutil.which("nsenter", path=SEARCH)
    if not nsenter:
        raise LaunchFailed(
            "nsenter(1) is needed to run it in the sandbox's namespaces", "apt-get install util-linux"
        )
    return entry(nsenter, pid, phase, differing(pid))
