"""The few libseccomp calls the lifecycle path needs, through ctypes on the library's soname.

pyseccomp (the binding ``compile_bpf`` uses) finds the library with ``ctypes.util.find_library``,
which runs ``ldconfig -p`` in a subprocess, twice, on import.  Validating a bundle's syscall names and
keying the BPF cache need only seccomp_version(3) and seccomp_syscall_resolve_name(3): this module
dlopen(3)s ``libseccomp.so.2`` by its soname (ld.so(8) search: the ld.so cache, no subprocess), the
same file pyseccomp loads.
"""

from __future__ import annotations

import ctypes

SONAME = "libseccomp.so.2"
NR_SCMP_ERROR = -1  # seccomp_syscall_resolve_name(3): "__NR_SCMP_ERROR" for an unknown name

_loaded: list[ctypes.CDLL] = []


class _Version(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint), ("minor", ctypes.c_uint), ("micro", ctypes.c_uint)]


def load() -> ctypes.CDLL:
    """The library, loaded once.  Raises ``OSError`` when it is not installed."""
    if not _loaded:
        lib = ctypes.CDLL(SONAME)
        lib.seccomp_version.restype = ctypes.POINTER(_Version)
        lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
        lib.seccomp_syscall_resolve_name.restype = ctypes.c_int
        _loaded.append(lib)
    return _loaded[0]


def version() -> str:
    """``"major.minor.micro"`` of the loaded library (seccomp_version(3)).  Raises ``OSError``."""
    v = load().seccomp_version().contents
    return f"{v.major}.{v.minor}.{v.micro}"


def resolve(name: str) -> int:
    """The native arch's number for syscall ``name``, or ``NR_SCMP_ERROR`` (-1) when libseccomp does
    not know it (seccomp_syscall_resolve_name(3)).  Raises ``OSError`` without the library."""
    if "\0" in name:
        return NR_SCMP_ERROR
    return int(load().seccomp_syscall_resolve_name(name.encode()))
