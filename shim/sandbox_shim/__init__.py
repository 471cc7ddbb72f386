"""sandbox-shim: run OCI bundles as sandboxes with the host's own isolation primitives.

The public library API (ARCHITECTURE §4).  Names are loaded on first use so that ``import
sandbox_shim`` stays cheap for the CLI's lifecycle verbs.

    from sandbox_shim import default_mechanism, provision, start, status, destroy, Sandbox
    mech = default_mechanism("/run/sandbox-shim")
    provision(mech, Sandbox("demo", "bundles/busybox"))
    start(mech, "demo")

Functions: provision, start, stop, destroy, signal, status, usage, list_running, execute, address,
capabilities, default_mechanism.  Types: Sandbox, Status, Completion, Usage, Capability, Mechanism.
Errors: see ``sandbox_shim.errors``.
"""

from __future__ import annotations

from ._lazy import lazy_exports

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    "provision": "api",
    "start": "api",
    "stop": "api",
    "destroy": "api",
    "signal": "api",
    "status": "api",
    "usage": "api",
    "list_running": "api",
    "default_mechanism": "api",
    "execute": "execution",
    "address": "addresses",
    "capabilities": "capability:report",
    "Sandbox": "mechanism",
    "Status": "mechanism",
    "Completion": "mechanism",
    "Usage": "mechanism",
    "Mechanism": "mechanism",
    "Capability": "capability",
    "ShimError": "errors",
    "BundleInvalid": "errors",
    "CapabilityUnavailable": "errors",
    "CannotEnforce": "errors",
    "CouldNotRun": "errors",
    "LimitExceeded": "errors",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
