"""cgroups: one manager interface (``base.CgroupManager``), a v1 and a v2 implementation, detection."""

from .base import CgroupManager, Limits
from .detect import Layout, detect, manager

__all__ = ["CgroupManager", "Layout", "Limits", "detect", "manager"]
