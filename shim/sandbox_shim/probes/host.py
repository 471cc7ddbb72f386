"""The probes of the host's launchers and hierarchies (bwrap, cgroups, the systemd driver,
sandbox-exec, Job Objects).  They live with their platform (``platforms/<os>/probes.py``); importing
this module registers all of them through the composition point (``platforms.select``), so every name
is known on every OS and reports unavailable where it does not apply.
"""

from __future__ import annotations

from ..platforms.select import register_probes

register_probes()
