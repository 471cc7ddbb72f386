"""Rules of a config's Linux sections that need only the config, run at validation (``bundle.load``
through ``platforms.select.config_problems``): what bwrap cannot do for ``process.user``
(``credentials.py``), ``linux.sysctl`` (``namespaces.sysctl_problems``), ``linux.seccomp``
(``seccomp.validate``).  Each problem carries its JSON pointer.

``pid_namespace_problems`` is the Linux tenant rule that no other platform has: bwrap gives every
sandbox its own pid namespace, so a config without one is refused; macOS and Windows have none to give
or require.  It is checked by ``validate`` on a Linux host (``platforms.select.host_tenant_problems``)
and by the Linux planner (``plan.make_plan``) at create, whatever the host.
"""

from __future__ import annotations

from ...errors import BundleProblem

TYPE_CHECKING = False  # no typing at run time: create loads this module
if TYPE_CHECKING:
    from typing import Any


def problems(cfg: dict[str, Any], credentials: bool = True) -> list[BundleProblem]:
    """Every problem of ``cfg``'s Linux sections, in the order credentials, sysctl, seccomp.

    Args:
        cfg: the schema-valid config.
        credentials: check ``process.user`` against bwrap (only where bwrap runs: Linux).
    """
    out: list[BundleProblem] = []
    linux = cfg.get("linux") or {}
    if credentials:
        out += _credential_problems(cfg)
    if linux.get("sysctl"):
        from .namespaces import sysctl_problems

        out += sysctl_problems(cfg)
    if linux.get("seccomp") is not None:
        try:
            from . import seccomp
        except ImportError:  # pragma: no cover - pyseccomp is a Linux-only dependency
            return out
        out += seccomp.validate(linux["seccomp"], "/linux/seccomp")
    return out


def _credential_problems(cfg: dict[str, Any]) -> list[BundleProblem]:
    """What bwrap cannot do for ``process.user``: the rule needs only the config, so ``validate`` and
    ``create`` agree."""
    from ...hardening.capabilities import granted
    from .credentials import problems as credential_problems

    proc = cfg.get("process") or {}
    caps = dict(proc.get("capabilities") or {})
    caps.setdefault("bounding", caps.get("effective") or [])
    return credential_problems(cfg, granted(caps, int((proc.get("user") or {}).get("uid", 0))))


def pid_namespace_problems(cfg: dict[str, Any]) -> list[BundleProblem]:
    """Refuse a config without a pid namespace: it would share the host's processes (visible and
    signallable; through ``/proc/PID/root`` a neighbour's files: ``hardening.tenant.pid_problem``).

    Args:
        cfg: the config (``linux.namespaces`` read; wrong types are the schema's to report).
    Returns:
        one problem at ``/linux/namespaces``, or none.  Rule: tenant profile "own pid namespace"
        (runtime-spec config-linux.md: a type not listed is shared with the runtime's).
    """
    linux = cfg.get("linux") if isinstance(cfg.get("linux"), dict) else None
    nss = (linux or {}).get("namespaces") or []
    if isinstance(nss, list) and any(isinstance(ns, dict) and ns.get("type") == "pid" for ns in nss):
        return []
    return [
        BundleProblem(
            "/linux/namespaces",
            "no pid namespace: in OCI terms this shares the host's processes",
            "tenant profile: own pid namespace",
            'add {"type": "pid"} to linux.namespaces',
        )
    ]
