"""Cheap reads of proc(5) shared by the probes and the cache key: no ctypes, no subprocess."""

from __future__ import annotations

import sys

from ..capability import Capability


def read(path: str) -> str | None:
    """The stripped text of ``path``, or None when it cannot be read."""
    try:
        with open(path) as fh:
            return fh.read().strip()
    except OSError:
        return None


def status_fields(names: tuple[str, ...], text: str | None = None) -> dict[str, str | None]:
    """Fields of /proc/self/status (proc(5): ``Name:<tab>value`` lines), read once: ``{name: value}``,
    None for a field the file does not show (or when it cannot be read).  ``text`` parses that text
    instead of the file.  The one parser of that file in the package."""
    found: dict[str, str | None] = dict.fromkeys(names)
    for line in ((read("/proc/self/status") if text is None else text) or "").splitlines():
        key, _, value = line.partition(":")
        if key in found:
            found[key] = value.strip()
    return found


def status_field(name: str) -> str | None:
    """A field of /proc/self/status (proc(5)), e.g. ``Seccomp`` (0 none, 1 strict, 2 filter)."""
    return status_fields((name,))[name]


def seccomp_note() -> str:
    """A hint to append to a failure when this process already runs under a seccomp filter ("" if not)."""
    if status_field("Seccomp") == "2":
        return (
            "; this process already runs under a seccomp filter (Seccomp: 2 in /proc/self/status) "
            "that may deny the call: run the shim outside that filter"
        )
    return ""


def linux_only(name: str, measured: str) -> Capability | None:
    """An "unavailable: not Linux" report for ``name`` off Linux, else None."""
    if sys.platform != "linux":
        return Capability(name, False, "", f"not Linux ({sys.platform})", measured)
    return None
