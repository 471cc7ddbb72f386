"""Isolation checks, kernel files and mounts: what a tenant that holds CAP_SYS_ADMIN in a user namespace
of its own, or is uid 0 without capabilities, can do to the read-only parts of its tree.

* The new mount API (fsopen, fsmount, move_mount, open_tree, mount_setattr, and open_tree_attr of Linux
  6.15) does what mount(2) does through file descriptors; a filter denying only mount(2) leaves it open:
  mount_setattr(2) clears the read-only flag of the root (or of /proc/sys) in a mount namespace the
  tenant's user namespace owns.  io_uring is probed alongside (its work runs where seccomp never looks).
* The kernel-file floor: /proc/sys is read-only whatever ``readonlyPaths`` says (uid 0 passes the DAC
  check of /proc/sys files with no capability at all: host sysctls, ``kernel.core_pattern``).
"""

from __future__ import annotations

import os
import shutil
from typing import Any

from ..helpers import (
    ERROR,
    FAIL,
    PASS,
    STARTED,
    Outcome,
    check,
    control_failed,
    judge,
    marker,
    probe,
    static_tool,
)
from ..target import COMPLETED, ConformanceTarget, merge

G = "Isolation"

MOUNT_API_C = r"""
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <linux/mount.h>
#include <linux/io_uring.h>
/* mount-api TARGET FILE: clear MOUNT_ATTR_RDONLY of the mount at TARGET, write FILE, then try the other
   calls of the new mount API and io_uring; one line per call: NAME-OK or NAME: strerror */
static void say(const char *what, long r) {
    if (r < 0) printf("%s: %s\n", what, strerror(errno)); else printf("%s-OK\n", what);
}
int main(int argc, char **argv) {
    if (argc < 3) return 2;
    struct mount_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.attr_clr = MOUNT_ATTR_RDONLY;
    say("MOUNT_SETATTR", syscall(SYS_mount_setattr, AT_FDCWD, argv[1], 0, &attr, sizeof attr));
    int fd = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) { if (write(fd, "x\n", 2) == 2) printf("WROTE-FILE\n"); close(fd); }
    else printf("write %s: %s\n", argv[2], strerror(errno));
    say("FSOPEN", syscall(SYS_fsopen, "tmpfs", 0));
    say("OPEN_TREE", syscall(SYS_open_tree, AT_FDCWD, "/", OPEN_TREE_CLONE));
    say("OPEN_TREE_ATTR", syscall(467, AT_FDCWD, "/", OPEN_TREE_CLONE, NULL, 0));
    struct io_uring_params p;
    memset(&p, 0, sizeof p);
    say("IO_URING", syscall(SYS_io_uring_setup, 4, &p));
    return 0;
}
"""

#: the calls the probe makes besides the write; each must be refused in the breach
MOUNT_API_CALLS = ("MOUNT_SETATTR", "FSOPEN", "OPEN_TREE", "OPEN_TREE_ATTR", "IO_URING")


def mount_api_tool(t: ConformanceTarget) -> str:
    """The static ``mount-api TARGET FILE`` probe's host path (``ToolMissing`` without a C compiler)."""
    return static_tool(t, "mount-api", MOUNT_API_C)


def _own_userns_admin() -> dict[str, Any]:
    from ...template import default_config

    nss = [n for n in default_config()["linux"]["namespaces"] if n["type"] != "user"]
    caps = ["CAP_SYS_ADMIN"]
    return {
        "process": {"capabilities": {k: caps for k in ("bounding", "effective", "permitted")}},
        "root": {"readonly": True},
        "linux": {"namespaces": [*nss, {"type": "user"}]},
    }


@check(G, "mounts: CAP_SYS_ADMIN in its own user namespace makes the read-only root writable (new mount API)")
def new_mount_api(t: ConformanceTarget) -> Outcome:
    """Control: the static probe with CAP_SYS_ADMIN and no syscall filter, outside the profile
    (``run_control``): mount_setattr(2) clears the root's read-only flag and the probe writes a file at
    ``/``, and fsopen/open_tree work.  Breach: a tenant bundle with a user namespace of its own granting
    itself CAP_SYS_ADMIN (the profile allows it there) runs the same probe: every call of the new mount
    API and io_uring must be refused and nothing written.  Any call succeeding: FAIL."""
    tool = mount_api_tool(t)
    over = _own_userns_admin()
    own = t.bundle(overrides=merge(over, {"linux": {"seccomp": {"defaultAction": "SCMP_ACT_ALLOW"}}}))
    shutil.copy(tool, os.path.join(own.storage, "mount-api"))
    s = own.storage_inside
    control = t.run_control(
        merge(over, {"linux": {"seccomp": {"defaultAction": "SCMP_ACT_ALLOW"}}}),
        probe(f"{s}/mount-api / /mount-api-wrote"),
        bundle=own,
    )
    if bad := control_failed(control, "WROTE-FILE"):
        return bad
    attacker = t.bundle(overrides=over)
    shutil.copy(tool, os.path.join(attacker.storage, "mount-api"))
    s = attacker.storage_inside
    breach = t.run_probe(None, probe(f"{s}/mount-api / /mount-api-wrote"), bundle=attacker)
    if breach.outcome != COMPLETED or STARTED not in breach.stdout:
        if breach.outcome != COMPLETED and "refused" in breach.brief().lower():
            return Outcome("ok", "stopped", PASS, f"refused before it ran: {breach.brief(80)}")
        return Outcome("ok", "not run", ERROR, f"the breach probe did not run ({breach.brief()})")
    got = [c for c in ("WROTE-FILE", *(f"{c}-OK" for c in MOUNT_API_CALLS)) if c in breach.stdout]
    if got:
        return Outcome(
            "ok", "succeeded", FAIL, f"with CAP_SYS_ADMIN in its own user namespace: {', '.join(got)}"
        )
    return Outcome(
        "ok",
        "stopped",
        PASS,
        "mount_setattr, fsopen, open_tree, open_tree_attr, io_uring_setup refused; the root stayed read-only",
    )


@check(G, "kernel files: uid 0 writes /proc/sys when readonlyPaths leaves it out")
def proc_sys_floor(t: ConformanceTarget) -> Outcome:
    """Control: outside the profile (``run_control``: a plain proc mount, no read-only paths) uid 0 with
    no capabilities writes /proc/sys/kernel/hostname (the UTS namespace's own: harmless) and prints the
    marker.  Breach: a tenant bundle with ``readonlyPaths`` and ``maskedPaths`` empty writes the same
    file: the floor keeps /proc/sys read-only (EROFS) whatever the config lists."""
    m = marker()
    script = probe(f"echo sandbox > /proc/sys/kernel/hostname && echo {m}")
    empty: dict[str, dict[str, list[str]]] = {"linux": {"readonlyPaths": [], "maskedPaths": []}}
    control = t.run_control(empty, script)
    breach = t.run_probe(empty, script)
    return judge(control, m, breach, m, expect=("read_only", "denied"), what="/proc/sys written")
