"""Which Linux capabilities a tenant may hold, and what makes each one harmless.

Without a user namespace of its own a sandbox's capabilities are the host's (user_namespaces(7)), so
each granted one must be contained by the kernel some other way.  The orchestrators' default sets are
granted, contained as follows; what no kernel mechanism here can contain is refused.

Default sets (the union is ``ORCHESTRATOR_DEFAULTS``):

* containerd 1.6 ``oci.populateDefaultUnixSpec`` / Docker (moby ``oci/caps.DefaultCapabilities``) /
  OCI runtime-tools ``generate`` defaults: CHOWN, DAC_OVERRIDE, FSETID, FOWNER, MKNOD, NET_RAW, SETGID,
  SETUID, SETFCAP, SETPCAP, NET_BIND_SERVICE, SYS_CHROOT, KILL, AUDIT_WRITE;
* podman 4.3 ``containers.conf`` ``default_capabilities``: the same without MKNOD, NET_RAW, AUDIT_WRITE;
* ``runc spec``: AUDIT_WRITE, KILL, NET_BIND_SERVICE.

Containment:

* ``CAP_MKNOD``: a node the tenant makes can never be opened — every mount bwrap makes is ``nodev``
  (binds, tmpfs, the rootfs; only the device nodes bwrap itself binds into ``/dev`` and the config's
  ``linux.devices`` are not), and the devices cgroup (``devices.allow``/``deny``, kernel doc
  admin-guide/cgroup-v1/devices.rst) allows only runc's default list plus the config's own rules.
  Needs ``cgroup.devices``.
* ``CAP_NET_RAW``: raw and packet sockets reach only the sandbox's own network namespace
  (network_namespaces(7)); refused when the sandbox shares the host's network.
* The rest of the defaults act on the sandbox's own files, processes and ports (its mount and pid
  namespaces bound them); file capabilities and set-user-ID bits they could write are ignored on exec
  because every mount is ``nosuid`` (mount(2) MS_NOSUID).

Refused without a user namespace (no containment here): everything else, among them CAP_SYS_ADMIN
(mount, namespaces, many device ioctls), CAP_SYS_MODULE, CAP_SYS_PTRACE, CAP_SYS_RAWIO,
CAP_DAC_READ_SEARCH (open_by_handle_at(2) opens any host file by handle), CAP_SYS_BOOT, CAP_SYS_TIME,
CAP_NET_ADMIN, CAP_SYS_RESOURCE, CAP_BPF, CAP_PERFMON, CAP_SYSLOG, CAP_MAC_ADMIN.
"""

from __future__ import annotations

from ..errors import BundleProblem

TYPE_CHECKING = False  # no typing at run time: create loads this module
if TYPE_CHECKING:
    from typing import Any

#: capability sets of ``process.capabilities`` (runtime-spec config.md "capabilities")
SETS = ("bounding", "effective", "permitted", "inheritable", "ambient")

#: union of containerd's, Docker's, podman's, runtime-tools' and ``runc spec``'s default sets
ORCHESTRATOR_DEFAULTS: frozenset[str] = frozenset(
    {
        "CAP_AUDIT_WRITE",
        "CAP_CHOWN",
        "CAP_DAC_OVERRIDE",
        "CAP_FOWNER",
        "CAP_FSETID",
        "CAP_KILL",
        "CAP_MKNOD",
        "CAP_NET_BIND_SERVICE",
        "CAP_NET_RAW",
        "CAP_SETFCAP",
        "CAP_SETGID",
        "CAP_SETPCAP",
        "CAP_SETUID",
        "CAP_SYS_CHROOT",
    }
)

#: capability → what the plan must have for it to be contained: ``netns`` (own network namespace),
#: or a capability name the host must have (``cgroup.devices``)
CONTAINMENT: dict[str, str] = {"CAP_MKNOD": "cgroup.devices", "CAP_NET_RAW": "netns"}


def has_userns(config: dict[str, Any]) -> bool:
    nss = (config.get("linux") or {}).get("namespaces") or []
    return any(isinstance(ns, dict) and ns.get("type") == "user" for ns in nss)


def has_netns(config: dict[str, Any]) -> bool:
    nss = (config.get("linux") or {}).get("namespaces") or []
    return any(isinstance(ns, dict) and ns.get("type") == "network" for ns in nss)


def asked(config: dict[str, Any]) -> list[str]:
    """Every capability name in any of the five sets, once, in first-seen order."""
    caps = (config.get("process") or {}).get("capabilities") or {}
    out: list[str] = []
    for kind in SETS:
        for cap in caps.get(kind) or [] if isinstance(caps, dict) else []:
            if isinstance(cap, str) and cap not in out:
                out.append(cap)
    return out


def check_capabilities(config: dict[str, Any]) -> list[BundleProblem]:
    """Refuse, in one problem naming all of them, the capabilities that cannot be contained.

    With a user namespace every capability is the namespace's (user_namespaces(7)): none is refused.
    Without one: any outside ``ORCHESTRATOR_DEFAULTS``, and ``CAP_NET_RAW`` when the host's network
    is shared.  Returns at most one ``BundleProblem`` at ``/process/capabilities``.
    """
    if has_userns(config):
        return []
    names = asked(config)
    refused = [c for c in names if c not in ORCHESTRATOR_DEFAULTS]
    if "CAP_NET_RAW" in names and not has_netns(config):
        refused.append("CAP_NET_RAW")
    if not refused:
        return []
    why = "no kernel mechanism here makes them harmless in the host's user namespace"
    if refused == ["CAP_NET_RAW"]:
        why = "raw sockets would reach the host's network (the sandbox shares it)"
    return [
        BundleProblem(
            "/process/capabilities",
            f"refused without a user namespace: {', '.join(refused)} ({why})",
            "tenant profile: capabilities (hardening/capabilities.py)",
            "remove them from every capability set, or add a user namespace to linux.namespaces",
        )
    ]


def granted(caps: dict[str, Any] | None, uid: int) -> list[str]:
    """The one set bwrap grants (bwrap(1) ``--cap-add``: effective, permitted, inheritable, ambient and
    bounding all equal it), chosen to match what the process holds after runc's execve(2).

    capabilities(7) "Transformation of capabilities during execve()": for uid 0 a file is treated as
    having every file capability, so the permitted and effective sets after exec are the bounding set
    (plus inheritable, which cannot exceed bounding ∪ permitted); for any other uid they are the ambient
    set (which the kernel keeps within permitted ∩ inheritable).  The bounding set then equals that
    set, which can only be narrower than configured: what it bounds beyond it (set-user-ID and file
    capabilities) is ignored on the sandbox's nosuid mounts anyway.

    Returns: sorted names.
    """
    caps = caps or {}
    bounding = set(caps.get("bounding") or [])
    if uid == 0:
        return sorted(bounding)
    amb = set(caps.get("ambient") or [])
    return sorted(amb & set(caps.get("permitted") or []) & set(caps.get("inheritable") or []) & bounding)
