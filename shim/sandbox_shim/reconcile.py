"""What the kernel shows, independent of the state store, so a host can reconcile after a restart.

``observe(mechanism)`` lists every sandbox the state store knows *and* every one it has lost: cgroups
recorded in ``ROOT/.cgroups/ID`` (kept outside the state dir) whose directories still exist.  For each,
the processes in its cgroup are reported with their pid and start time (proc(5) field 22), so a caller
compares them with its own records instead of trusting a pid alone.
"""

from __future__ import annotations

import os
from typing import Any

from .mechanism import Status
from .state import StateStore, proc_start_time


def lost_sandboxes(store: StateStore, known: set[str]) -> list[Status]:
    """``source="observed"`` statuses for ids with recorded cgroups that still exist but no state dir."""
    index = os.path.join(store.root, ".cgroups")
    try:
        lost = sorted({n for n in os.listdir(index) if not n.startswith(".")} - known)
    except FileNotFoundError:
        return []
    out = []
    for sid in lost:
        info = store.read_cgroup_index(sid)
        if not info or os.path.isdir(store.dir(sid)):
            continue
        from .platforms.linux.cgroups import manager

        cg = manager(info["path"], info["version"], systemd=bool(info.get("systemd")))
        if not any(os.path.isdir(d) for d in cg.dirs()):
            continue
        pids = [p for p in cg.pids() if proc_start_time(p) is not None]
        out.append(
            Status(
                id=sid,
                status="running" if pids else "stopped",
                pid=pids[0] if pids else 0,
                bundle="",
                annotations={},
                source="observed",
                pids=pids,
            )
        )
    return out


def observe(mechanism: Any) -> list[Status]:
    """Alias of ``api.list_sandboxes``: the store's sandboxes plus the ones found only in cgroups."""
    from . import api

    return api.list_sandboxes(mechanism)
