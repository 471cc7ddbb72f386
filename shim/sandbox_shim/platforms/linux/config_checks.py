"""Rules of a config's Linux sections that need only the config, run at validation (``bundle.load``
through ``platforms.select.config_problems``): what bwrap cannot do for ``process.user``
(``credentials.py``), ``linux.sysctl`` (``namespaces.sysctl_problems``), ``linux.seccomp``
(``seccomp.validate``).  Each problem carries its JSON pointer.
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
