"""tmpfs mounts whose config ``source`` is not ``tmpfs`` (Docker's and containerd's ``/dev/shm`` is
``shm``): bwrap(1) ``--tmpfs`` always names its mounts ``tmpfs``, so once bwrap's child is held (all
mounts made, no user code run) each such mount is replaced (bwrap's, still empty, is detached) by one
with the config's source, from
inside the sandbox's mount namespace: a forked child setns(2)es into it (root and cwd become the
namespace's root) and calls mount(2) with ``MS_NOSUID|MS_NODEV`` (+ ``MS_NOEXEC``/``MS_RDONLY`` as the
options say) and the config's ``mode=``/``size=`` (tmpfs(5)).  The sandbox's mounts are private to it,
so nothing reaches the host.
"""

from __future__ import annotations

import ctypes
import os

from ...errors import LaunchFailed
from . import ns_path

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .plan import Mount

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
_CLONE_NEWNS = 0x00020000
_MNT_DETACH = 2


def wanted(mounts: list[Mount]) -> list[tuple[Mount, str]]:
    """The plan's tmpfs mounts under /dev (bwrap's own tmpfs: no path there comes from the rootfs) whose
    config source is not ``tmpfs``, with that source."""
    return [
        (m, m.source)
        for m in mounts
        if m.kind == "tmpfs"
        and m.source not in ("", "tmpfs")
        and m.destination.startswith("/dev/")
        and ".." not in m.destination.split("/")
    ]


def _data(options: list[str]) -> str:
    keep = [o for o in options if o.split("=", 1)[0] in ("mode", "size", "nr_inodes", "uid", "gid")]
    if not any(o.startswith("mode=") for o in keep):
        keep.append("mode=1777")
    return ",".join(keep)


def apply(pid: int, todo: list[tuple[Mount, str]]) -> None:
    """Mount each ``(mount, source)`` again inside process ``pid``'s mount namespace.

    Raises:
        LaunchFailed: the namespace could not be entered or a mount failed (the errno is named).
    """
    if not todo:
        return
    r, w = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the forked child
        os.close(r)
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = os.open(ns_path(pid, "mnt"), os.O_RDONLY | os.O_CLOEXEC)
            if libc.setns(fd, _CLONE_NEWNS) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"setns(mnt): {os.strerror(err)}")
            for m, source in todo:
                flags = MS_NOSUID | MS_NODEV
                flags |= MS_NOEXEC if "noexec" in m.options else 0
                flags |= MS_RDONLY if m.readonly else 0
                if libc.umount2(m.destination.encode(), _MNT_DETACH) != 0:  # bwrap's, empty still
                    err = ctypes.get_errno()
                    raise OSError(err, f"umount {m.destination}: {os.strerror(err)}")
                if (
                    libc.mount(
                        source.encode(), m.destination.encode(), b"tmpfs", flags, _data(m.options).encode()
                    )
                    != 0
                ):
                    err = ctypes.get_errno()
                    raise OSError(err, f"mount {source} on {m.destination}: {os.strerror(err)}")
            os._exit(0)
        except OSError as e:
            os.write(w, str(e.strerror).encode())
            os._exit(1)
    os.close(w)
    with os.fdopen(r, "rb") as fh:
        msg = fh.read().decode(errors="replace")
    _, status = os.waitpid(child, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise LaunchFailed(
            f"/mounts: cannot mount the tmpfs sources inside the sandbox: {msg}",
            "use source tmpfs for that mount",
        )
