"""The global flags, defined once (runc grammar) and parsed before any command, cheap and click-free.

  --root DIR            state root (default /run/sandbox-shim; relative: under it)
  --log FILE            append log records here
  --log-format text|json
  --debug               tracebacks for internal errors; telemetry in a json --log
  --systemd-cgroup      cgroupsPath is slice:prefix:name; systemd makes the scope (refused without systemd)
  --rootless VALUE      accepted for runc compatibility (true|false|auto)
  --criu PATH           accepted for runc compatibility

Each may be written ``--flag VALUE`` or ``--flag=VALUE`` and must come before the command, as with runc.
"""

from __future__ import annotations

from ..errors import UsageError
from .output import Globals

#: flag -> (Globals attribute or None when only accepted, takes a value, allowed values or None)
GLOBAL_FLAGS: dict[str, tuple[str | None, bool, tuple[str, ...] | None]] = {
    "--root": ("root", True, None),
    "--log": ("log", True, None),
    "--log-format": ("log_format", True, ("text", "json")),
    "--debug": ("debug", False, None),
    "--systemd-cgroup": ("systemd_cgroup", False, None),
    "--rootless": (None, True, ("true", "false", "auto")),
    "--criu": (None, True, None),
}

HELP = __doc__.split("\n\n")[1] if __doc__ else ""


def parse_globals(argv: list[str]) -> tuple[Globals, list[str]]:
    """Take the global flags off the front of ``argv``.  Returns ``(globals, rest)``; ``rest`` starts
    with the command (or a flag such as ``--help`` / ``--version`` that the command parser handles).

    Raises:
        UsageError: a global flag without its value, or with a value it does not take.
    """
    g = Globals()
    i = 0
    while i < len(argv) and argv[i].startswith("--"):
        name, eq, inline = argv[i].partition("=")
        if name not in GLOBAL_FLAGS:
            break
        attr, takes_value, allowed = GLOBAL_FLAGS[name]
        if takes_value:
            if eq:
                value = inline
            else:
                i += 1
                if i >= len(argv):
                    raise UsageError(f"{name} needs a value")
                value = argv[i]
            if allowed and value not in allowed:
                raise UsageError(f"{name} {value!r} is not one of {', '.join(allowed)}")
            if attr:
                setattr(g, attr, value)
        elif eq:
            raise UsageError(f"{name} takes no value")
        elif attr:
            setattr(g, attr, True)
        i += 1
    return g, argv[i:]
