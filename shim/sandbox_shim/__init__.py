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

TYPE_CHECKING = False  # typing is not imported at run time: the CLI's lifecycle verbs stay cheap
if TYPE_CHECKING:
    from typing import Any

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


def __getattr__(name: str) -> Any:
    target = _EXPORTS.get(name)
    if target is None:
        raise AttributeError(f"module 'sandbox_shim' has no attribute {name!r}")
    mod, _, attr = target.partition(":")
    from importlib import import_module

    value = getattr(import_module(f"{__name__}.{mod}"), attr or name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
