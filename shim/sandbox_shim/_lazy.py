"""Names a package loads on first use (PEP 562), so importing the package itself costs nothing.

In the package's ``__init__``::

    __getattr__, __dir__ = lazy_exports(__name__, {"Name": "submodule", "alias": "submodule:attr"})
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing stays off the lifecycle verbs' path (sandbox_shim/__init__ uses this)
if TYPE_CHECKING:
    from collections.abc import Callable


def lazy_exports(
    package: str, exports: dict[str, str]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: each name in ``exports`` maps to ``"submodule"``
    (same attribute name) or ``"submodule:attribute"``; a loaded value is cached in the package.

    Raises (from ``__getattr__``): AttributeError for a name not in ``exports``.
    """
    names = sorted(exports)

    def getattr_(name: str) -> object:
        target = exports.get(name)
        if target is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        mod, _, attr = target.partition(":")
        from importlib import import_module

        value = getattr(import_module(f"{package}.{mod}"), attr or name)
        setattr(sys.modules[package], name, value)
        return value

    def dir_() -> list[str]:
        return names

    return getattr_, dir_
