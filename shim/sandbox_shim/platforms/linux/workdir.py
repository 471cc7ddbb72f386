"""``process.cwd`` checked in the held sandbox, before its program is released.

bwrap changes to ``--chdir`` after the start gate opens, as the sandbox's user, just before it
execs the program; when that chdir(2) fails bwrap exits 1 and the program never runs (bwrap(1)
``--chdir``; bubblewrap.c "Can't chdir").  A ``create`` that returned 0 would then be followed by a
``start`` that returned 0 for a program that never ran.  ``check`` makes the same decision earlier,
while the process is held: the cwd is looked up in the sandbox's own mount namespace
(``/proc/CHILD/root``, so binds and tmpfs mounts count) and must be a directory the sandbox's user
may search, as path_resolution(7) requires of every component (search permission for the owner,
group or other class; CAP_DAC_OVERRIDE or CAP_DAC_READ_SEARCH bypass it, capabilities(7)).
Both bwrap's entry (as the runtime's ids, with the capabilities it keeps) and the program's (as
``process.user`` — uid, gid, additionalGids — with its effective capabilities after execve(2)) are
checked along the whole path.  A failure is ``CouldNotRun("exec_failed")`` (126) — the program never
ran — as ``exec`` reports a cwd it cannot enter (``spawn._refusal``).
"""

from __future__ import annotations

import os
import stat

from ...errors import CouldNotRun
from ...paths import resolve_in_root

TYPE_CHECKING = False  # no typing at run time: create loads this module
if TYPE_CHECKING:
    from .plan import Plan


def _searchable(st: os.stat_result, uid: int, gids: set[int]) -> bool:
    if st.st_uid == uid:
        return bool(st.st_mode & 0o100)
    if st.st_gid in gids:
        return bool(st.st_mode & 0o010)
    return bool(st.st_mode & 0o001)


def problem(root: str, cwd: str, uid: int, gids: set[int], bypass: bool, userns: bool = False) -> str | None:
    """Why chdir(2) to sandbox path ``cwd`` inside ``root`` would fail for ``uid``/``gids``, or None.

    Args:
        root: the sandbox's root as the host sees it (``/proc/CHILD/root``).
        bypass: the process holds CAP_DAC_OVERRIDE or CAP_DAC_READ_SEARCH.
        userns: it runs in bwrap's user namespace, where those capabilities apply only to a file whose
            owner and group are mapped into it (the runtime's uid and gid 0; capabilities(7)).
    Returns:
        an errno text (``No such file or directory``, ``Not a directory``, ``Permission denied``).
    """
    try:
        host = resolve_in_root(root, cwd)
    except OSError as e:
        return e.strerror or str(e)
    rel = os.path.relpath(host, root)
    cur = root
    for part in [] if rel == "." else rel.split("/"):
        cur = os.path.join(cur, part)
        try:
            st = os.stat(cur)
        except OSError as e:
            return e.strerror or str(e)
        if not stat.S_ISDIR(st.st_mode):
            return os.strerror(20)  # ENOTDIR
        bypassed = bypass and (not userns or (st.st_uid == 0 and st.st_gid == 0))
        if not bypassed and not _searchable(st, uid, gids):
            return os.strerror(13)  # EACCES
    return None


def check(child: int, plan: Plan) -> None:
    """Refuse a held sandbox whose ``process.cwd`` its program could not enter.

    Raises:
        CouldNotRun: ``exec_failed``, naming the cwd and the errno text.
    """
    from .credentials import helper_capabilities

    # bwrap enters the cwd before it execs anything, with the capabilities it keeps and as the
    # runtime's own host uid and gid 0: in its user namespace the sandbox's ids map onto those
    # (bwrap(1) --uid), and without one the ids are switched later, by the helper it execs
    # (credentials.py), so the same ids decide as ``check_program`` uses.
    held = {*plan.capabilities, *helper_capabilities(plan.unshare, plan.uid, plan.gid)}
    bypass = bool({"CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH"} & held)
    userns = "user" in plan.unshare
    gids = {0} if userns or plan.uid or plan.gid else {0, *plan.additional_gids}
    uid = 0
    root = f"/proc/{child}/root"
    why = problem(root, plan.cwd, uid, gids, bypass, userns)
    if not why and not userns and (plan.uid or plan.gid):
        # then the helper switches to the process's ids and execs the program: its cwd stays the one
        # bwrap entered, but every relative lookup (``ls``, ``./x``) is searched with the ids and the
        # effective capabilities it holds after execve(2) (``plan.capabilities``: hardening.capabilities
        # .granted), so the cwd must be searchable for those too (path_resolution(7)).
        after = bool({"CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH"} & set(plan.capabilities))
        why = problem(root, plan.cwd, plan.uid, {plan.gid, *plan.additional_gids}, after)
    if why:
        name = plan.args[0] if plan.args else ""
        raise CouldNotRun(
            "exec_failed", f'exec: "{name}"', f"cannot change to the working directory {plan.cwd}: {why}"
        )
