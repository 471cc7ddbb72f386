"""The conformance suite's control outside the tenant profile: a bundle's rootfs under bare bwrap(1).

What the tenant profile refuses at validation (a capability, a shared network namespace) cannot be
run as a sandbox, so a breach check proves its control here instead: the rootfs read-only and the
storage read-write under bwrap with no seccomp filter and no cgroup, each capability kept with
``--cap-add`` (bwrap runs as root, so in the host's user namespace), in new mount, pid, ipc and uts
namespaces and a new network namespace unless ``share_net``.  Pure: the argv only; bwrap is the one
``locate.bwrap_path`` finds.
"""

from __future__ import annotations

from collections.abc import Sequence


def control_argv(
    bwrap: str,
    rootfs: str,
    storage: str,
    storage_inside: str,
    capabilities: Sequence[str],
    share_net: bool,
    command: Sequence[str],
) -> list[str]:
    """``bwrap --die-with-parent --new-session --unshare-{pid,ipc,uts}[,net] --ro-bind ROOTFS / --proc
    /proc --dev /dev --tmpfs /tmp --bind STORAGE STORAGE_INSIDE --chdir / [--cap-add CAP]... --
    COMMAND``."""
    args = [
        bwrap,
        "--die-with-parent",
        "--new-session",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        *([] if share_net else ["--unshare-net"]),
        "--ro-bind",
        rootfs,
        "/",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--tmpfs",
        "/tmp",
        "--bind",
        storage,
        storage_inside,
        "--chdir",
        "/",
    ]
    for c in capabilities:
        args += ["--cap-add", c]
    return [*args, "--", *command]
