"""The default config.json written by ``sandbox-shim spec``: safe tenant defaults.

Like ``runc spec``, but tenant-shaped: every namespace but user is new (network included, so only
loopback), no capabilities, ``noNewPrivileges``, a read-only rootfs, ``storage/`` bound read-write at
``/storage``, memory and pids limits, and runc's masked/read-only paths.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
from typing import Any

from .errors import OutputUnwritable, UsageError

OCI_VERSION = "1.0.2"

_DEFAULT: dict[str, Any] = {
    "ociVersion": OCI_VERSION,
    "process": {
        "terminal": False,
        "user": {"uid": 0, "gid": 0},
        "args": ["sh", "-c", "echo hello from the sandbox; uname -n"],
        "env": [
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "TERM=xterm",
            "HOME=/root",
        ],
        "cwd": "/",
        "capabilities": {"bounding": [], "effective": [], "permitted": [], "inheritable": [], "ambient": []},
        "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
        "noNewPrivileges": True,
    },
    "root": {"path": "rootfs", "readonly": True},
    "hostname": "sandbox",
    "mounts": [
        {"destination": "/proc", "type": "proc", "source": "proc"},
        {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "mode=755"]},
        {
            "destination": "/tmp",
            "type": "tmpfs",
            "source": "tmpfs",
            "options": ["nosuid", "nodev", "mode=1777"],
        },
        {"destination": "/storage", "type": "bind", "source": "storage", "options": ["rbind", "rw"]},
    ],
    "linux": {
        "namespaces": [
            {"type": "pid"},
            {"type": "network"},
            {"type": "ipc"},
            {"type": "uts"},
            {"type": "mount"},
            {"type": "cgroup"},
        ],
        "resources": {"memory": {"limit": 268435456}, "pids": {"limit": 128}},
        "maskedPaths": [
            "/proc/acpi",
            "/proc/asound",
            "/proc/kcore",
            "/proc/keys",
            "/proc/latency_stats",
            "/proc/timer_list",
            "/proc/timer_stats",
            "/proc/sched_debug",
            "/proc/scsi",
            "/sys/firmware",
        ],
        "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"],
    },
    "annotations": {},
}


def default_config() -> dict[str, Any]:
    """A fresh copy of the default tenant config.json (a dict; safe to mutate)."""
    return copy.deepcopy(_DEFAULT)


def write_spec(bundle: str, force: bool = False) -> str:
    """Write ``default_config()`` as ``bundle/config.json`` (the directory made if missing), as
    ``sandbox-shim spec`` does; returns the file's path.

    Raises:
        UsageError: the file exists and ``force`` is not given, or the directory cannot be made;
        OutputUnwritable: the file cannot be written (written whole or not at all: a temporary file,
        fsync(2), rename(2)).
    """
    path = os.path.join(bundle, "config.json")
    if os.path.exists(path) and not force:
        raise UsageError(f"{path} already exists", "pass --force to overwrite it")
    try:
        os.makedirs(bundle, exist_ok=True)
    except OSError as e:
        raise UsageError(
            f"cannot make {bundle}: {e.strerror}", "give a bundle directory you can write"
        ) from e
    text = json.dumps(default_config(), indent=2) + "\n"
    tmp = f"{path}.{os.getpid()}.tmp"
    try:  # whole or not at all: a full disk leaves no half-written config.json (and no old one lost)
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise OutputUnwritable(path, e.strerror or str(e)) from e
    return path
