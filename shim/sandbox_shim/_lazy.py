"""Loading on first use, and reading ahead what will be loaded.

Names a package loads on first use (PEP 562), so importing the package itself costs nothing; in
the package's ``__init__``::

    __getattr__, __dir__ = lazy_exports(__name__, {"Name": "submodule", "alias": "submodule:attr"})

``read_ahead(module_bytecode([...]))``: a path that runs once per command (``confine``) asks the
kernel for the files its imports will read next, in one batch.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # typing stays off the lifecycle verbs' path (sandbox_shim/__init__ uses this)
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence


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


def module_bytecode(modules: Sequence[str], extensions: Sequence[str] = ()) -> list[str]:
    """Where the interpreter reads ``modules`` (paths like ``hardening/readset`` in this package,
    ``__init__`` for a package) from: their ``__pycache__`` files (PEP 3147, with the ``-O`` level's
    suffix, PEP 488); then, for each of ``extensions`` (standard-library extension modules such as
    ``_json``) that is not built into this interpreter, its shared object in the ``lib-dynload``
    entry of ``sys.path``."""
    import _imp

    root = os.path.dirname(os.path.abspath(__file__))
    tag = sys.implementation.cache_tag
    opt = f".opt-{sys.flags.optimize}" if sys.flags.optimize else ""
    out = []
    for m in modules:
        d, _, name = m.rpartition("/")
        out.append(os.path.join(root, d, "__pycache__", f"{name}.{tag}{opt}.pyc"))
    dynload = [p for p in sys.path if p.endswith("lib-dynload")]
    suffixes = _imp.extension_suffixes()
    if dynload and suffixes:
        out += [
            os.path.join(dynload[0], e + suffixes[0]) for e in extensions if e not in sys.builtin_module_names
        ]
    return out


def read_ahead(paths: Sequence[str], limit: int = 0) -> None:
    """Ask the kernel to start reading ``paths`` into the page cache now, all at once
    (posix_fadvise(2) ``POSIX_FADV_WILLNEED``: asynchronous readahead, the first ``limit`` bytes, 0:
    all), so that the reads which follow one at a time (imports, execs) find them there.  When the
    files are cached already it costs a few microseconds each; on a cold cache it turns a dozen
    disk round trips in a row into one batch.  Missing files and systems without posix_fadvise are
    skipped.  Never raises."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is None:  # macOS, Windows
        return
    willneed = os.POSIX_FADV_WILLNEED  # type: ignore[attr-defined,unused-ignore]  # absent on macOS
    for p in paths:
        try:
            fd = os.open(p, os.O_RDONLY)  # not inherited (PEP 446)
        except OSError:
            continue
        try:
            advise(fd, 0, limit, willneed)
        except OSError:
            pass
        finally:
            os.close(fd)
