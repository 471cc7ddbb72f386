"""``process.user`` as runc applies it, on bwrap, and the containment checks that need the host
(``net_raw_problem``).  process.user (bwrap(1) can switch uid/gid only inside a user
namespace it makes, mapping that one uid onto the runtime's own).

* Without a user namespace in the config the ids are the host's (runtime-spec config.md "user"): bwrap
  runs the sandbox as root and the workload is started through the host's static busybox, bound
  read-only at ``console.CTTY_HELPER``: ``busybox nsenter -F -S UID -G GID -- PROG ARGS`` (no
  namespace option: it only calls setgroups(0, NULL), setgid(2), setuid(2), then execvp(3)s in place,
  so the workload keeps its pid).  A uid other than 0 then holds no capabilities after execve, which is
  runc's result for an empty ambient set (capabilities(7)).
* With a user namespace bwrap maps exactly one id: ``process.user.uid``/``gid`` onto the runtime's
  (uid 0).  ``linux.uidMappings``/``gidMappings`` must then be that one mapping or absent.

Refused (each with its pointer): additional gids other than ``gid`` (neither path can set
supplementary groups: the helper clears them, bwrap's user namespace denies setgroups(2)); ambient
capabilities for a uid other than 0 without a user namespace (setuid(2) clears them); mappings bwrap
cannot make (more than one range, or a host id other than the runtime's own).
"""

from __future__ import annotations

import os

from ...errors import BundleProblem
from . import is_namespace_of

TYPE_CHECKING = False  # no typing at run time: create loads this module
if TYPE_CHECKING:
    from typing import Any

_RULE = "runtime-spec config.md user / config-linux.md user namespace mappings; bwrap(1) --uid/--gid"


def switches_without_userns(unshare: list[str], uid: int, gid: int) -> bool:
    """True when the workload runs with other host ids than root's, without a user namespace."""
    return "user" not in unshare and (uid != 0 or gid != 0)


def helper_capabilities(unshare: list[str], uid: int, gid: int) -> list[str]:
    """What the helper needs to switch ids: CAP_SETUID and CAP_SETGID for a uid other than 0 (setuid(2)
    to it then clears every capability set: capabilities(7) "Effect of user ID changes"); nothing
    otherwise (a gid switch for uid 0 uses the granted CAP_SETGID, ``problems`` requires it)."""
    return ["CAP_SETGID", "CAP_SETUID"] if switches_without_userns(unshare, uid, gid) and uid != 0 else []


def wrap_argv(helper: str, uid: int, gid: int, args: list[str]) -> list[str]:
    """``HELPER nsenter -F -S UID -G GID -- ARGS`` (busybox nsenter: -F no fork, -S/-G set ids)."""
    return [helper, "nsenter", "-F", "-S", str(uid), "-G", str(gid), "--", *args]


def setpriv_argv(held: list[str], inheritable: list[str] | None, ambient: list[str] | None) -> list[str]:
    """``setpriv --inh-caps -a,-b --ambient-caps -c`` (busybox setpriv: lowercase names without
    ``cap_``) lowering the inheritable and ambient sets from ``held`` (what bwrap's --cap-add put in
    every set) to the configured ones; [] when nothing needs lowering.  Lowering either set needs no
    capability (capset(2), PR_CAP_AMBIENT_LOWER in prctl(2)); setpriv then execs in place.
    """
    out: list[str] = []
    for opt, keep in (("--inh-caps", inheritable), ("--ambient-caps", ambient)):
        if keep is None:
            continue
        drop = [c for c in held if c not in keep]
        if drop:
            out += [opt, ",".join("-" + c.lower().removeprefix("cap_") for c in drop)]
    return ["setpriv", *out] if out else []


def problems(config: dict[str, Any], granted_caps: list[str]) -> list[BundleProblem]:
    """The refusals above for ``config`` (``granted_caps``: the plan's capability set)."""
    proc = config.get("process") or {}
    user = proc.get("user") or {}
    linux = config.get("linux") or {}
    uid, gid = int(user.get("uid", 0)), int(user.get("gid", 0))
    userns = any(isinstance(n, dict) and n.get("type") == "user" for n in linux.get("namespaces") or [])
    out: list[BundleProblem] = []
    extra = sorted({int(g) for g in user.get("additionalGids") or []} - {gid})
    if extra and (userns or uid != 0 or gid != 0):
        out.append(
            BundleProblem(
                "/process/user/additionalGids",
                f"supplementary gids {extra} cannot be set for a switched uid here",
                _RULE,
                "leave additionalGids out, or use gid",
            )
        )
    if not userns and uid == 0 and gid != 0 and "CAP_SETGID" not in granted_caps:
        out.append(
            BundleProblem(
                "/process/user/gid",
                f"gid {gid} for uid 0 needs CAP_SETGID, which the config does not grant",
                _RULE,
                "grant CAP_SETGID, or use gid 0",
            )
        )
    if not userns and uid != 0 and granted_caps:
        out.append(
            BundleProblem(
                "/process/capabilities/ambient",
                f"ambient capabilities for uid {uid} are lost at setuid(2) without a user namespace",
                _RULE,
                "run as uid 0, or drop the ambient set",
            )
        )
    if userns:
        me = os.getuid()
        for key, want_id, host in (("uidMappings", uid, me), ("gidMappings", gid, os.getgid())):
            maps = linux.get(key)
            if not maps:
                continue
            ok = (
                len(maps) == 1
                and isinstance(maps[0], dict)
                and maps[0].get("containerID") == want_id
                and maps[0].get("hostID") == host
                and maps[0].get("size") == 1
            )
            if not ok:
                out.append(
                    BundleProblem(
                        f"/linux/{key}",
                        "bwrap maps exactly one id: the process's own "
                        f"({want_id}) onto the runtime's ({host})",
                        _RULE,
                        f'use [{{"containerID": {want_id}, "hostID": {host}, "size": 1}}] or leave it out',
                    )
                )
    return out


def net_raw_problem(capabilities: list[str], join: dict[str, str]) -> BundleProblem | None:
    """CAP_NET_RAW is contained by the sandbox's own network namespace (hardening/capabilities.py); a
    network namespace joined by path that is the runtime's own (the host's) would not contain it.

    Rule: network_namespaces(7); namespace identity: device and inode
    (ioctl_ns(2)), compared by ``is_namespace_of`` (``platforms/linux/__init__.py``).
    """
    path = join.get("network")
    if "CAP_NET_RAW" not in capabilities or not path:
        return None
    try:
        same = is_namespace_of(os.stat(path), "self", "net")
    except OSError:
        return None  # a missing path is refused where namespaces are joined
    if not same:
        return None
    return BundleProblem(
        "/linux/namespaces",
        f"the network namespace {path} is the host's: CAP_NET_RAW there reaches the host's network",
        "tenant profile: capabilities (CAP_NET_RAW)",
        "join the pod's own network namespace, or drop CAP_NET_RAW",
    )
