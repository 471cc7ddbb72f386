"""One probe per capability, each *trying* the thing on this host, never inferring it from versions.

Modules:
  ``proc``    cheap proc(5) reads (``/proc/self/status`` fields, sysctls) shared by all.
  ``child``   running a trial in a forked child; libc through ctypes.
  ``host``    registers the platforms' probes (bwrap, cgroups, sandbox-exec, Job Objects; the kernel's
              namespaces, no_new_privs, seccomp and Landlock in ``platforms/linux/kernel_probes.py``),
              which live in ``platforms/<os>/``, through the composition point ``platforms.select``.
  ``cache``   the cross-process cache (``cached_report``, ``cache_key``).

Every report says what was tried (``measured_by``) and, when unavailable, why in words a person can
act on (``detail``). ``capability._load_probes()`` imports ``host``, which registers them. The names
below are loaded on first use (PEP 562), so ``from . import probes`` is free and a cache hit on a
lifecycle verb never loads ctypes or runs a program.
"""

from __future__ import annotations

from .._lazy import lazy_exports

_LAZY: dict[str, str] = {
    "in_child": "child",
    "CHILD_TIMEOUT": "child",
    "PROBES_VERSION": "cache",
    "CACHE_FILE": "cache",
    "host_facts": "cache",
    "cache_key": "cache",
    "cached_report": "cache",
}

__all__ = sorted(_LAZY)


def load_all() -> None:
    """Import the modules that register probes with ``capability.register``."""
    from importlib import import_module

    import_module(f"{__name__}.host")


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
