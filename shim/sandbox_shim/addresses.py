"""``address(mechanism, sandbox_id)``: where the host reaches a sandbox's server, as ``"ip:port"``.

One shape, None, for both "this mechanism has no addresses" and "this sandbox has nothing to reach":
network mode ``none`` or ``host``, no ``sandbox-shim.port``, or a sandbox that has stopped.  Only
mode ``isolated`` (see ``platforms/linux/network.py``) gives a sandbox an address of its own.

Source: ``Mechanism.network_address`` over the sandbox's stored record (Linux: what create recorded of
the network it made).  Nothing heavy is imported: no pyroute2, no netlink request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .state import ACTIVE, StateStore

if TYPE_CHECKING:
    from .mechanism import Mechanism


def address(mechanism: Mechanism, sandbox_id: str) -> str | None:
    """``"10.213.a.c:PORT"`` for an isolated sandbox with a port that is created or running, else None.

    Args:
        mechanism: a mechanism from ``api.default_mechanism``; one without a state ``root`` has no
            addresses.
        sandbox_id: the sandbox id.
    Raises:
        SandboxNotFound: no sandbox ``sandbox_id`` under the mechanism's state root.
    """
    root = mechanism.root
    if root is None:
        return None
    store = StateStore(root)
    rec = store.read(sandbox_id)
    from .api import observed_status, sandbox_of

    where = mechanism.network_address(sandbox_of(rec, store))
    if where is None or observed_status(mechanism, rec, store) not in ACTIVE:
        return None
    return where
