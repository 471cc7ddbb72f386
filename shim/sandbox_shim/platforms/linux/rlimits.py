"""What ``process.rlimits`` and ``process.oomScoreAdj`` ask, checked against what this host lets the
runtime grant, before anything is made (setrlimit(2) EPERM: raising a hard limit needs
CAP_SYS_RESOURCE; RLIMIT_NOFILE never above ``/proc/sys/fs/nr_open``; proc(5) ``oom_score_adj``:
lowering it below the floor a privileged ancestor left needs CAP_SYS_RESOURCE — tried in a forked
child, since the floor is not shown in /proc), and applied to the held process.
"""

from __future__ import annotations

import os
import resource

from ...errors import BundleInvalid, BundleProblem, LaunchFailed
from ...probes.proc import status_field

_CAP_SYS_RESOURCE = 24  # include/uapi/linux/capability.h
_RULE = "runtime-spec config.md POSIX process rlimits; setrlimit(2)"


def _has_sys_resource() -> bool:
    """CAP_SYS_RESOURCE in this process's effective set (``CapEff`` of /proc/self/status)."""
    eff = status_field("CapEff")
    return eff is not None and bool(int(eff, 16) >> _CAP_SYS_RESOURCE & 1)


def _nr_open() -> int:
    try:
        with open("/proc/sys/fs/nr_open") as fh:
            return int(fh.read())
    except (OSError, ValueError):
        return 1 << 20


def _oom_settable(value: int) -> bool:
    """Try ``value`` in a forked child's own ``oom_score_adj`` (the child inherits ours and the floor a
    privileged ancestor set, proc(5)); True if the kernel took it."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the forked child
        try:
            fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY)
            os.write(fd, str(value).encode())
            os._exit(0)
        except OSError:
            os._exit(1)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


def check(rlimits: list[tuple[str, int, int]], oom_score_adj: int | None) -> None:
    """Refuse, naming ``/process/rlimits/N`` or ``/process/oomScoreAdj``, what cannot be granted here.

    Raises:
        BundleInvalid: a soft limit above its hard limit, an unknown name, a hard limit above ours
            without CAP_SYS_RESOURCE, RLIMIT_NOFILE above nr_open, or an oomScoreAdj the kernel
            refuses a child of ours.
    """
    problems: list[BundleProblem] = []
    privileged = _has_sys_resource()
    for i, (name, soft, hard) in enumerate(rlimits):
        ptr = f"/process/rlimits/{i}"
        res = getattr(resource, name, None)
        if not isinstance(res, int):
            problems.append(
                BundleProblem(
                    f"{ptr}/type", f"{name} is not a resource limit of this kernel", _RULE, "remove it"
                )
            )
            continue
        if soft > hard:
            problems.append(
                BundleProblem(ptr, f"{name} soft {soft} is above its hard {hard}", _RULE, "make soft <= hard")
            )
        own_hard = resource.getrlimit(res)[1]
        if not privileged and own_hard != resource.RLIM_INFINITY and hard > own_hard:
            problems.append(
                BundleProblem(
                    ptr,
                    f"{name} hard {hard} is above this runtime's own hard limit "
                    f"{own_hard}, and it lacks CAP_SYS_RESOURCE to raise it",
                    _RULE,
                    f"ask at most {own_hard}, or run the runtime with a higher limit",
                )
            )
        if name == "RLIMIT_NOFILE" and hard > _nr_open():
            problems.append(
                BundleProblem(
                    ptr,
                    f"RLIMIT_NOFILE hard {hard} is above fs.nr_open ({_nr_open()})",
                    _RULE,
                    "ask at most fs.nr_open",
                )
            )
    if oom_score_adj is not None and not privileged and not _oom_settable(oom_score_adj):
        problems.append(
            BundleProblem(
                "/process/oomScoreAdj",
                f"{oom_score_adj} is below the lowest value "
                "this runtime may set, and it lacks CAP_SYS_RESOURCE to go lower",
                "proc(5) oom_score_adj",
                "ask a higher value",
            )
        )
    if problems:
        raise BundleInvalid(problems)


def apply(pid: int, rlimits: list[tuple[str, int, int]], oom_score_adj: int | None) -> None:
    """prlimit(2) each limit and write ``oom_score_adj`` of the held process ``pid``.

    Raises:
        LaunchFailed: the kernel refused one (naming its pointer).
    """
    for i, (name, soft, hard) in enumerate(rlimits):
        try:
            resource.prlimit(pid, getattr(resource, name), (soft, hard))
        except (OSError, ValueError) as e:
            raise LaunchFailed(
                f"/process/rlimits/{i}: {name} ({soft}, {hard}) refused by the kernel: {e}", "lower the limit"
            ) from e
    if oom_score_adj is not None:
        try:
            with open(f"/proc/{pid}/oom_score_adj", "w") as fh:
                fh.write(str(oom_score_adj))
        except OSError as e:
            raise LaunchFailed(
                f"/process/oomScoreAdj: {oom_score_adj} refused by the kernel: {e.strerror}",
                "ask a value the runtime may set (proc(5))",
            ) from e
