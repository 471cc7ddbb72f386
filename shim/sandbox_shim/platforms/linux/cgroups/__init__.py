"""cgroups: one manager interface (``base.CgroupManager``), a v1 and a v2 implementation, detection.

``Limits`` (``limits.py``, the resource rules of ``resources.py``) loads on first use: only the verbs that
check or write limits need it, not state, start or delete."""

from .base import CgroupManager
from .detect import Layout, detect, manager

__all__ = ["CgroupManager", "Layout", "Limits", "detect", "manager"]

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .limits import Limits


def __getattr__(name: str) -> object:
    if name == "Limits":
        from .limits import Limits

        return Limits
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
