"""The device policy: OCI ``linux.resources.devices`` + runc's default allow list + ``linux.devices``
→ the ordered rule list the cgroup manager applies (devices cgroup v1 ``devices.allow``/``deny``,
kernel doc admin-guide/cgroup-v1/devices.rst; v2 a ``BPF_CGROUP_DEVICE`` program).

Rule shape (the OCI ``linux.resources.devices`` entry, runtime-spec config-linux.md "Device
allowlist"): ``{"allow": bool, "type": "a"|"c"|"b", "major": int|None, "minor": int|None,
"access": subset of "rwm"}``; None is the wildcard ``*``.  Rules apply in order on a deny-all start,
the last matching rule wins, as runc applies them (libcontainer/specconv ``CreateCgroupConfig``):
the config's rules, then runc's ``AllowedDevices``, then ``rwm`` for each ``linux.devices`` entry.

Tenant rules (the devices cgroup is what makes a granted CAP_MKNOD harmless, with nodev mounts):

* a rule that allows read or write on every device (``type`` ``a``) or on block devices is refused:
  it would let a node the tenant makes open the host's disks;
* ``linux.devices`` (the host's own nodes, bound) are limited to ``BINDABLE``: the nodes of runc's
  default list plus FUSE and TUN.  Any other host node is refused — a host disk (type ``b``), and
  character devices that reach past the sandbox: ``/dev/kmsg`` (writes to the host's log), terminals
  (``TIOCSTI`` into a host console), input devices, NVMe generic nodes (raw disk I/O), ``/dev/mem``.
"""

from __future__ import annotations

from .errors import BundleProblem

TYPE_CHECKING = False  # no typing at run time: create loads this module
if TYPE_CHECKING:
    from typing import Any

    Rule = dict[str, Any]


#: runc's default allow list (libcontainer/specconv ``AllowedDevices``): mknod of any node, and the
#: nodes every container's /dev holds
RUNC_DEFAULT_ALLOW: tuple[Rule, ...] = tuple(
    {"allow": True, "type": t, "major": ma, "minor": mi, "access": acc}
    for t, ma, mi, acc in (
        ("c", None, None, "m"),
        ("b", None, None, "m"),
        ("c", 1, 3, "rwm"),  # /dev/null
        ("c", 1, 8, "rwm"),  # /dev/random
        ("c", 1, 7, "rwm"),  # /dev/full
        ("c", 5, 0, "rwm"),  # /dev/tty
        ("c", 1, 5, "rwm"),  # /dev/zero
        ("c", 1, 9, "rwm"),  # /dev/urandom
        ("c", 136, None, "rwm"),  # /dev/pts/*
        ("c", 5, 2, "rwm"),  # /dev/ptmx
        ("c", 10, 200, "rwm"),  # /dev/net/tun
    )
)

#: (type, major, minor) of host nodes ``linux.devices`` may bind: runc's default list, FUSE, TUN
BINDABLE: frozenset[tuple[str, int, int]] = frozenset(
    {
        ("c", 1, 3),
        ("c", 1, 5),
        ("c", 1, 7),
        ("c", 1, 8),
        ("c", 1, 9),
        ("c", 5, 0),
        ("c", 5, 2),
        ("c", 10, 200),
        ("c", 10, 229),
    }
)

DENY_ALL: Rule = {"allow": False, "type": "a", "major": None, "minor": None, "access": "rwm"}


def _rule(d: dict[str, Any]) -> Rule:
    return {
        "allow": bool(d.get("allow")),
        "type": d.get("type") or "a",
        "major": d.get("major"),
        "minor": d.get("minor"),
        "access": d.get("access") or "rwm",
    }


def rules(linux: dict[str, Any]) -> list[Rule]:
    """The ordered rule list for ``linux`` (the config's ``linux`` object), deny-all first."""
    out = [DENY_ALL]
    out += [_rule(d) for d in (linux.get("resources") or {}).get("devices") or [] if isinstance(d, dict)]
    out += [dict(r) for r in RUNC_DEFAULT_ALLOW]
    for d in linux.get("devices") or []:
        if isinstance(d, dict):
            out.append(
                {
                    "allow": True,
                    "type": "c" if d.get("type") == "u" else d.get("type"),
                    "major": d.get("major"),
                    "minor": d.get("minor"),
                    "access": "rwm",
                }
            )
    return out


def problems(linux: dict[str, Any]) -> list[BundleProblem]:
    """The tenant refusals above, each with its JSON pointer."""
    out: list[BundleProblem] = []
    for i, d in enumerate((linux.get("resources") or {}).get("devices") or []):
        if not isinstance(d, dict) or not d.get("allow"):
            continue
        r = _rule(d)
        if r["type"] in ("a", "b") and set(r["access"]) & {"r", "w"}:
            out.append(
                BundleProblem(
                    f"/linux/resources/devices/{i}",
                    f"allows {'r/w on every device' if r['type'] == 'a' else 'r/w on block devices'}: a node "
                    "the tenant makes could open the host's disks",
                    "tenant profile: devices cgroup (hardening/capabilities.py CAP_MKNOD)",
                    "allow the character devices it needs by type c, major and minor",
                )
            )
    for i, d in enumerate(linux.get("devices") or []):
        if not isinstance(d, dict):
            continue
        kind = "c" if d.get("type") == "u" else d.get("type")
        if kind == "b":
            out.append(
                BundleProblem(
                    f"/linux/devices/{i}",
                    "a block device (a host disk) for a tenant",
                    "tenant profile: host disks never reach a tenant",
                    "give the tenant its data through storage/ or a bind mount",
                )
            )
        elif (kind, d.get("major"), d.get("minor")) not in BINDABLE:
            out.append(
                BundleProblem(
                    f"/linux/devices/{i}",
                    f"host device {kind} {d.get('major')}:{d.get('minor')} is not one a tenant may hold",
                    "tenant profile: devices (devices.py BINDABLE)",
                    "only null, zero, full, random, urandom, tty, ptmx, net/tun and fuse",
                )
            )
    return out


def line(rule: Rule) -> str:
    """One rule in devices cgroup v1 syntax: ``TYPE MAJOR:MINOR ACCESS`` (``*`` for None)."""

    def num(v: Any) -> str:
        return "*" if v is None or v == -1 else str(int(v))

    if rule["type"] == "a":
        return "a"
    return f"{rule['type']} {num(rule['major'])}:{num(rule['minor'])} {rule['access']}"
