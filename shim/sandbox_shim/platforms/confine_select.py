"""Where the confinement profile reaches a platform package: its renderer for this OS.

A companion of the mechanism's composition point, for ``hardening/confinement.py`` (which stays
platform-neutral): it imports the renderer on first use, so importing this module costs nothing.
A renderer module offers ``render(exe, args, sets, cd, **options) -> (argv, layers, not_enforced)``,
``report(bwrap) -> list[Capability]``, ``helper_interpreters(egress) -> list[str]``, ``EGRESS_TCP``
and ``PROXY_PORT``.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import ModuleType


def confine_backend() -> ModuleType | None:
    """The confinement renderer for ``sys.platform`` (Linux: bwrap + Landlock; macOS: SBPL), or None."""
    if sys.platform.startswith("linux"):
        from .linux import confine as linux

        return linux
    if sys.platform == "darwin":
        from .darwin import confine as darwin

        return darwin
    return None
