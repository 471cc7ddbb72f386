"""Network modes of a Linux sandbox, and the veth link of mode ``isolated`` (rtnetlink(7), through
the small client in ``rtnetlink.py``: importing pyroute2 cost every isolated create 100-160 ms).

Modes (annotation ``sandbox-shim.network``, reaching the platform as ``plan.network``):

``none`` (default)
    bwrap ``--unshare-net``: a network namespace of the sandbox's own with loopback only.  Nothing
    here runs and no netlink socket is opened.
``isolated``
    the same own namespace plus one veth(4) pair: the host end ``shim<10 hex>`` stays in the host's
    namespace, the other end is created directly inside the sandbox's namespace (the one of bwrap's
    child, ``/proc/PID/ns/net``) as ``eth0``.  Each sandbox gets its own /30 from ``DEFAULT_RANGE``
    (``SANDBOX_SHIM_NETWORK_RANGE`` overrides it): network+1 on the host end, network+2 in the
    sandbox.  The only route inside is the /30's connected route; there is no default route, so the
    sandbox can reach exactly one address outside itself, the host end of its own link.  The host
    reaches the sandbox at network+2 (``address()``; the port is ``sandbox-shim.port``).  Sandboxes
    do not reach each other: each link is its own /30, no route between them is added, and the host
    end is made non-forwarding (``net.ipv4.conf.IF.forwarding=0``: packets received on it are never
    routed on, whatever ``net.ipv4.ip_forward`` says; writing ``ip_forward`` later resets that
    per-interface value, see ip-sysctl docs).  Limit: the sandbox can open connections to host
    services listening on the wildcard address through its host end address (a packet filter would be
    needed to stop that; this kernel has no tc ``gact`` and nftables is outside pyroute2's scope).
``host``
    no network namespace (only when the bundle says so explicitly; the plan decides, bwrap simply
    does not unshare).  Nothing here runs.

Lifecycle: ``setup`` writes a marker ``STATE_ROOT/.network/ID`` (JSON, the ``info`` shape below)
*before* it creates anything, so a create killed at any point can be undone by ``teardown_orphan``;
``teardown`` deletes the host end (deleting one end of a veth deletes both, veth(4)) and then the
marker.  No named network namespace (ip-netns(8)) is created: the sandbox's namespace is bwrap's and
dies with its processes (taking the veth pair with it).

The ``info`` shape (JSON-serialisable, stored in the sandbox's state as ``private["network"]``)::

    {"mode": "isolated", "id": str, "state_root": str, "marker": str,
     "host_if": str, "sandbox_if": "eth0", "host_address": "10.213.a.b", "address": "10.213.a.c",
     "prefixlen": 30, "port": int | None}

Test hook: ``SANDBOX_SHIM_NETWORK_FAULT=after-marker|after-link`` makes ``setup`` SIGKILL its own
process at that point (a deterministic "shim killed mid-create").
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import hashlib
import ipaddress
import json
import os
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

from ...errors import LaunchFailed
from ...state import write_atomic
from . import ns_path, ns_shared

DEFAULT_RANGE = "10.213.0.0/16"
RANGE_ENV = "SANDBOX_SHIM_NETWORK_RANGE"
FAULT_ENV = "SANDBOX_SHIM_NETWORK_FAULT"
LINK_PREFIX = "shim"  # host ends are LINK_PREFIX + 10 hex digits (IFNAMSIZ is 16 with the NUL)
SANDBOX_IF = "eth0"
PREFIXLEN = 30
#: host-wide lock held while a /30 is chosen and claimed (every state root shares the host's addresses)
LOCK_PATH = "/run/lock/sandbox-shim-network.lock"
CLONE_NEWNET = 0x40000000


def link_name(state_root: str, sandbox_id: str) -> str:
    """The host end's name for ``sandbox_id`` under ``state_root``: ``shim`` + 10 hex of SHA-256."""
    digest = hashlib.sha256(f"{os.path.normpath(state_root)}\0{sandbox_id}".encode()).hexdigest()
    return LINK_PREFIX + digest[:10]


def marker_path(state_root: str, sandbox_id: str) -> str:
    """``STATE_ROOT/.network/ID``: present from before the links exist until after they are gone."""
    return os.path.join(state_root, ".network", sandbox_id)


def address_range() -> ipaddress.IPv4Network:
    """The private IPv4 range /30s are taken from (``SANDBOX_SHIM_NETWORK_RANGE`` or ``DEFAULT_RANGE``).

    Raises:
        LaunchFailed: the value is not a private IPv4 network of prefix length 30 or shorter.
    """
    text = os.environ.get(RANGE_ENV) or DEFAULT_RANGE
    try:
        net = ipaddress.IPv4Network(text, strict=True)
    except ValueError as e:
        raise LaunchFailed(
            f"{RANGE_ENV}={text!r} is not an IPv4 network: {e}", "use e.g. 10.213.0.0/16"
        ) from e
    if not net.is_private or net.prefixlen > PREFIXLEN:
        raise LaunchFailed(
            f"{RANGE_ENV}={text!r} must be a private IPv4 range of /{PREFIXLEN} or larger",
            "use e.g. 10.213.0.0/16",
        )
    return net


def plan_port(plan: Any) -> int | None:
    """The TCP port of ``sandbox-shim.port`` (1..65535) from ``plan.port`` or the annotations, or None."""
    port = getattr(plan, "port", None)
    if port is None:
        text = (getattr(plan, "annotations", None) or {}).get("sandbox-shim.port")
        port = int(text) if isinstance(text, str) and text.strip().isdigit() else None
    return port if port is not None and 0 < int(port) < 65536 else None


# -- setup ------------------------------------------------------------------------------------------
def setup(sandbox_id: str, child_pid: int, plan: Any, state_root: str) -> dict[str, Any]:
    """Give the sandbox whose first process is ``child_pid`` an isolated veth link to the host.

    Args:
        sandbox_id: the sandbox id (one path component).
        child_pid: a process inside the sandbox's network namespace (bwrap's child, held on its FIFO).
        plan: the ``Plan``; ``plan.port`` or annotation ``sandbox-shim.port`` gives the port reported.
        state_root: the state root; the marker goes to ``STATE_ROOT/.network/ID``.
    Returns:
        the ``info`` dict (module docstring).
    Raises:
        LaunchFailed: the namespace is the host's, no /30 is free, a link of that name exists, or a
            netlink request failed.  Whatever was made is removed first.
    """
    net_ns = ns_path(child_pid, "net")
    try:
        if ns_shared(child_pid, "net"):
            raise LaunchFailed(
                "network mode 'isolated' but the sandbox shares the host's network namespace",
                'add {"type": "network"} to linux.namespaces',
            )
    except FileNotFoundError as e:
        raise LaunchFailed(f"the sandbox's process {child_pid} is gone", "see bwrap's message above") from e
    from .rtnetlink import Rtnl

    marker = marker_path(state_root, sandbox_id)
    info: dict[str, Any] = {
        "mode": "isolated",
        "id": sandbox_id,
        "state_root": state_root,
        "marker": marker,
        "host_if": link_name(state_root, sandbox_id),
        "sandbox_if": SANDBOX_IF,
        "host_address": None,
        "address": None,
        "prefixlen": PREFIXLEN,
        "port": plan_port(plan),
    }
    rng = address_range()
    try:
        with _host_lock(state_root), Rtnl() as ipr:
            net = _free_subnet(ipr, rng, f"{state_root}\0{sandbox_id}")
            info["host_address"], info["address"] = str(net[1]), str(net[2])
            os.makedirs(os.path.dirname(marker), mode=0o700, exist_ok=True)
            write_atomic(marker, json.dumps(info))
            _fault("after-marker")
            try:
                ipr.add_veth(info["host_if"], SANDBOX_IF, child_pid)
            except OSError as e:
                if e.errno == errno.EEXIST:  # not ours: never delete it; forget the marker
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(marker)
                    raise LaunchFailed(
                        f"a network link named {info['host_if']} already exists",
                        "delete the stale link or use another sandbox id",
                    ) from e
                raise
            _fault("after-link")
            idx = _index(ipr, info["host_if"])
            _sysctl(f"/proc/sys/net/ipv4/conf/{info['host_if']}/forwarding", "0")
            ipr.add_ipv4(idx, info["host_address"], PREFIXLEN)
            ipr.set_up(idx)
        _in_netns(net_ns, lambda: _configure_inside(info))
    except LaunchFailed:
        if os.path.exists(marker):
            teardown(info)
        raise
    except (OSError, IndexError) as e:
        teardown(info)
        raise LaunchFailed(
            f"cannot set up the sandbox's network link: {e}",
            "check that this host supports veth links (veth(4))",
        ) from e
    return info


def _configure_inside(info: dict[str, Any]) -> None:
    """Inside the sandbox's namespace: address the veth end, bring it and ``lo`` up.  No routes."""
    from .rtnetlink import Rtnl

    with Rtnl() as ipr:
        idx = _index(ipr, SANDBOX_IF)
        ipr.add_ipv4(idx, info["address"], PREFIXLEN)
        ipr.set_up(idx)
        lo = ipr.link_index("lo")
        if lo is not None:
            ipr.set_up(lo)


def _index(ipr: Any, name: str) -> int:
    idx = ipr.link_index(name)
    if idx is None:
        raise LaunchFailed(
            f"the network link {name} vanished while being set up",
            "check that nothing else manages links named shim*",
        )
    return int(idx)


def _free_subnet(ipr: Any, rng: ipaddress.IPv4Network, key: str) -> ipaddress.IPv4Network:
    """The first /30 of ``rng`` from a slot derived from ``key`` that no host address or route overlaps."""
    used: list[ipaddress.IPv4Network] = []
    for addr, plen in ipr.ipv4_addresses():
        used.append(ipaddress.IPv4Network(f"{addr}/{plen}", strict=False))
    for dst, dst_len in ipr.ipv4_routes():  # the main table
        used.append(ipaddress.IPv4Network(f"{dst}/{dst_len}", strict=False))
    used = [u for u in used if u.overlaps(rng)]
    count = 1 << (PREFIXLEN - rng.prefixlen)
    start = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") % count
    base = int(rng.network_address)
    for i in range(count):
        slot = (start + i) % count
        net = ipaddress.IPv4Network((base + (slot << (32 - PREFIXLEN)), PREFIXLEN))
        if not any(net.overlaps(u) for u in used):
            return net
    raise LaunchFailed(f"no free /{PREFIXLEN} left in {rng}", f"delete sandboxes or widen {RANGE_ENV}")


@contextlib.contextmanager
def _host_lock(state_root: str) -> Iterator[None]:
    """An exclusive flock(2) held while a /30 is chosen and its host address assigned."""
    path = LOCK_PATH
    if not os.path.isdir(os.path.dirname(LOCK_PATH)):
        path = os.path.join(state_root, ".network.lock")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _in_netns(ns_path: str, fn: Callable[[], None]) -> None:
    """Run ``fn`` in a new thread that first joins the network namespace at ``ns_path`` (setns(2)).

    setns(2) with CLONE_NEWNET changes only the calling thread; netlink sockets opened in that
    thread belong to that namespace.  The thread ends afterwards, so no other code runs there.
    """
    err: list[BaseException] = []

    def run() -> None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = os.open(ns_path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                if libc.setns(fd, CLONE_NEWNET) != 0:
                    n = ctypes.get_errno()
                    raise OSError(n, f"setns({ns_path}): {os.strerror(n)}")
            finally:
                os.close(fd)
            fn()
        except BaseException as e:  # re-raised in the caller's thread
            err.append(e)

    t = threading.Thread(target=run, name="sandbox-shim-netns")
    t.start()
    t.join()
    if err:
        raise err[0]


def _sysctl(path: str, value: str) -> None:
    with open(path, "w", encoding="ascii") as fh:
        fh.write(value)


def _fault(point: str) -> None:
    """Test hook: SIGKILL this process at ``point`` when ``SANDBOX_SHIM_NETWORK_FAULT`` names it."""
    if os.environ.get(FAULT_ENV) == point:
        os.kill(os.getpid(), signal.SIGKILL)


# -- teardown ---------------------------------------------------------------------------------------
def teardown(info: dict[str, Any]) -> None:
    """Delete the host end of the sandbox's veth pair (which deletes both ends), then the marker.

    Idempotent: a link already gone (the namespace died and took the pair with it) is no error.
    Only a veth named ``shim<hex>`` is ever deleted.

    Raises:
        LaunchFailed: a netlink request other than "no such device" failed (the marker is kept).
    """
    name = info.get("host_if")
    if isinstance(name, str) and name.startswith(LINK_PREFIX):
        from .rtnetlink import Rtnl

        try:
            with Rtnl() as ipr:
                idx = ipr.link_index(name)
                if idx is not None and ipr.link_kind(idx) == "veth":
                    try:
                        ipr.delete_link(idx)
                    except OSError as e:
                        if e.errno != errno.ENODEV:
                            raise
        except OSError as e:
            raise LaunchFailed(f"cannot delete network link {name}: {e}", "delete it by hand") from e
    marker = info.get("marker")
    if isinstance(marker, str):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(marker)


def teardown_orphan(state_root: str, sandbox_id: str) -> None:
    """Undo a ``setup`` whose process died (``delete --force`` after the shim was killed mid-create).

    Reads the marker ``STATE_ROOT/.network/ID``; if it is unreadable the link name is derived again
    from ``(state_root, sandbox_id)``.  Idempotent; no marker and no link is no error.
    """
    marker = marker_path(state_root, sandbox_id)
    info: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError):
        with open(marker, encoding="utf-8") as fh:
            loaded = json.load(fh)
        info = loaded if isinstance(loaded, dict) else {}
    info["host_if"] = info.get("host_if") or link_name(state_root, sandbox_id)
    info["marker"] = marker
    teardown(info)


def our_links() -> list[str]:
    """Names of host-side veth links this module makes (``shim<hex>``) that exist now."""
    from .rtnetlink import Rtnl

    with Rtnl() as ipr:
        names = ipr.link_names()
    return [n for n in names if n and n.startswith(LINK_PREFIX) and len(n) == len(LINK_PREFIX) + 10]
