"""What the kernel shows, independent of the state store, so a host can reconcile after a restart.

``observe(mechanism)`` lists every sandbox the state store knows *and* every one it has lost: cgroups
recorded in ``ROOT/.cgroups/ID`` (kept outside the state dir) whose directories still exist, and
those the cgroup tree shows under the root's own parent (``Mechanism.observed_cgroups``; ``{}`` where
the platform leaves nothing behind), so a loss of ``ROOT/.cgroups`` too still lists them.  For each,
the processes in its cgroup are reported with their pid and start time (proc(5) field 22), so a caller
compares them with its own records instead of trusting a pid alone.  What "still exists" means is the
mechanism's to say (``Mechanism.lost_pids``).
"""

from __future__ import annotations

import os

from .mechanism import Status

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .mechanism import Mechanism
    from .state import StateStore


def lost_sandboxes(mechanism: Mechanism, store: StateStore, known: set[str]) -> list[Status]:
    """``source="observed"`` statuses for ids with recorded cgroups that still exist but no state dir.

    Args:
        mechanism: asked for the live pids of each recorded cgroup.
        store: the state root's store.
        known: ids already reported from the store (skipped).
    Returns: one ``Status`` per lost id, sorted by id; ``running`` with its pids while any process
    lives there, else ``stopped``.
    """
    index = os.path.join(store.root, ".cgroups")
    try:
        recorded = {n for n in os.listdir(index) if not n.startswith(".")}
    except FileNotFoundError:
        recorded = set()
    except OSError as e:
        from .errors import StateUnreadable

        raise StateUnreadable(index, e.errno or 0, e.strerror or str(e)) from e
    # the cgroup tree itself (the root's tagged parent), for a loss that took ROOT/.cgroups too
    seen = mechanism.observed_cgroups(store.root)
    out = []
    for sid in sorted((recorded | set(seen)) - known):
        info = store.read_cgroup_index(sid) or seen.get(sid)
        if not info or os.path.isdir(store.dir(sid)):
            continue
        pids = mechanism.lost_pids(info)
        if pids is None:
            continue
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


def observe(mechanism: Mechanism) -> list[Status]:
    """Alias of ``api.list_sandboxes``: the store's sandboxes plus the ones found only in cgroups."""
    from . import api

    return api.list_sandboxes(mechanism)
