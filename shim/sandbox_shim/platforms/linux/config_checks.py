"""Rules of a config's Linux sections that need only the config, run at validation (``bundle.load``
through ``platforms.select.config_problems``): what bwrap cannot do for ``process.user``
(``credentials.py``), ``linux.sysctl`` (``namespaces.sysctl_problems``), ``linux.seccomp``
(``seccomp.validate``).  Each problem carries its JSON pointer.

``linux_only_problems`` holds the rules no other platform has: a pid namespace is required (bwrap
gives every sandbox its own; macOS and Windows have none to give or require), and a non-empty
``windows`` section is refused (nothing of it is applied on Linux).  They are checked by ``validate``
on a Linux host (``platforms.select.host_platform_problems``) and by the Linux planner
(``plan.make_plan``) at create, whatever the host.
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


def windows_section_problems(cfg: dict[str, Any]) -> list[BundleProblem]:
    """Refuse each key of a non-empty ``windows`` section: nothing of it is applied on Linux (runc
    ignores it; here a field accepted is a field applied).  One problem per key, ``/windows/KEY``."""
    win = cfg.get("windows")
    return [
        BundleProblem(
            f"/windows/{key}",
            "the windows section is not applied on Linux",
            "sandbox-shim: a field accepted is a field applied",
            "remove it; use linux.resources (memory, cpu, pids)",
        )
        for key in sorted(win if isinstance(win, dict) else {})
    ]


def linux_only_problems(cfg: dict[str, Any]) -> list[BundleProblem]:
    """The Linux rules no other platform has, in the order pid namespace, ``windows`` section
    (module docstring)."""
    return pid_namespace_problems(cfg) + windows_section_problems(cfg)
