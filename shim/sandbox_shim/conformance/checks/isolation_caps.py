"""Isolation checks, capabilities: a tenant bundle asks for a capability that reaches past the mount
namespace.  The "shocker" escape: with ``CAP_DAC_READ_SEARCH`` in the initial user namespace,
open_by_handle_at(2) opens any inode of a file system the sandbox has a mount of (its storage bind) by a
handle it forges, so the mount namespace hides nothing on that file system.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from typing import Any

from ..helpers import (
    ERROR,
    FAIL,
    PASS,
    STARTED,
    Outcome,
    check,
    control_failed,
    host_secret,
    marker,
    mount_root,
    overrides_permissive,
    probe,
    static_tool,
    tail,
)
from ..target import COMPLETED, COULD_NOT_RUN, ConformanceTarget, ProbeResult, ToolMissing, merge

G = "Isolation"

HANDLE_C = r"""
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv) {
    /* argv[1]: a directory on the file system; argv[2]: a path relative to that file system's root */
    if (argc < 3) return 2;
    int mfd = open(argv[1], O_RDONLY | O_DIRECTORY);
    if (mfd < 0) { fprintf(stderr, "open: %s\n", strerror(errno)); return 1; }
    struct { struct file_handle fh; unsigned int ino, gen; } h;
    h.fh.handle_bytes = 8; h.fh.handle_type = 1; h.ino = 2; h.gen = 0;  /* FILEID_INO32_GEN, root inode */
    int root = open_by_handle_at(mfd, &h.fh, O_RDONLY | O_DIRECTORY);
    if (root < 0) { fprintf(stderr, "open_by_handle_at: %s\n", strerror(errno)); return 1; }
    int fd = openat(root, argv[2], O_RDONLY);
    if (fd < 0) { fprintf(stderr, "openat: %s\n", strerror(errno)); return 1; }
    char buf[256]; ssize_t n = read(fd, buf, sizeof buf - 1);
    if (n > 0) { buf[n] = 0; fputs(buf, stdout); }
    return 0;
}
"""

#: ``ProbeResult.reason`` values of a probe that was started and failed to exec (not a refusal)
_EXEC_REASONS = {None, "not_found", "permission_denied", "exec_failed"}

#: how open_by_handle_at(2) refuses a forged handle without CAP_DAC_READ_SEARCH in the initial user
#: namespace: EPERM (man 2 open_by_handle_at; a seccomp filter denying it gives the same), or, since Linux
#: 6.12 ("fhandle: relax open_by_handle_at() permission checks"), ESTALE when the caller holds CAP_SYS_ADMIN
#: over the mount's namespace and the handle's inode lies outside the subtree of the mount it passed
#: (fs/fhandle.c, HANDLE_CHECK_SUBTREE) — the case of a storage bind inside a user namespace.
_REFUSED = re.compile(r"open_by_handle_at: (operation not permitted|stale file handle)")
_ERRNO = {"operation not permitted": "EPERM", "stale file handle": "ESTALE"}


def _with_user_namespace(over: dict[str, Any]) -> dict[str, Any]:
    """``over`` plus a user namespace in ``linux.namespaces`` (the tenant defaults' namespaces kept)."""
    from ...template import default_config

    nss = [n for n in default_config()["linux"]["namespaces"] if n["type"] != "user"]
    return merge(over, {"linux": {"namespaces": [*nss, {"type": "user"}]}})


def _breach(mark: str, breach: ProbeResult, label: str) -> Outcome:
    """One variant: stopped if refused before it ran, or if it ran and open_by_handle_at(2) refused the
    handle (``_REFUSED``); the marker printed is FAIL; anything else is ERROR."""
    if mark in breach.stdout:
        return Outcome(
            "ok",
            "succeeded",
            FAIL,
            f"{label}: the tenant read a host file with "
            f"CAP_DAC_READ_SEARCH via open_by_handle_at ({breach.brief(60)})",
        )
    if breach.outcome == COULD_NOT_RUN and breach.reason not in _EXEC_REASONS:
        where = re.search(r"(/\S+?):", breach.stderr)
        return Outcome(
            "ok",
            "stopped",
            PASS,
            f"{label}: refused, {breach.reason}"
            + (f" at {where.group(1)}" if where else f" ({tail(breach.stderr, 60)})"),
        )
    if breach.outcome != COMPLETED or STARTED not in breach.stdout:
        return Outcome("ok", "not run", ERROR, f"{label}: the breach probe did not run ({breach.brief()})")
    hit = _REFUSED.search(breach.stderr.lower())
    if not hit:
        return Outcome(
            "ok",
            "unclear",
            ERROR,
            f"{label}: no marker, but open_by_handle_at did not refuse "
            f"with EPERM/ESTALE: {tail(breach.stdout + ' ' + breach.stderr)!r}",
        )
    return Outcome("ok", "stopped", PASS, f"{label}: open_by_handle_at {_ERRNO[hit.group(1)]}")


@check(G, "caps: self-granted CAP_DAC_READ_SEARCH opens host files (open_by_handle_at)")
def open_by_handle(t: ConformanceTarget) -> Outcome:
    """Control: the static probe, with CAP_DAC_READ_SEARCH in the host's user namespace and no seccomp
    filter, outside the profile (``run_control``), reads a host file through the storage bind.  Breaches,
    both tenant bundles asking for CAP_DAC_READ_SEARCH and a permissive ``linux.seccomp``: (1) without a
    user namespace — must be refused before it runs, or denied; (2) with a user namespace of its own —
    the capability is that namespace's, so open_by_handle_at(2) must refuse the handle: EPERM (it needs
    the capability in the initial user namespace: man 2 open_by_handle_at, user_namespaces(7)) or, on
    Linux 6.12+, ESTALE (``_REFUSED``).  Either reading the file: FAIL."""
    tool = static_tool(t, "open-by-handle", HANDLE_C)
    m = marker()
    path = host_secret(t, m)
    host_ns = overrides_permissive("CAP_DAC_READ_SEARCH")
    own = t.bundle(overrides=host_ns)
    rel = os.path.relpath(path, mount_root(path))
    if mount_root(own.storage) != mount_root(path):
        raise ToolMissing("the storage and the host file are on different file systems here")
    host = subprocess.run([tool, own.storage, rel], capture_output=True, text=True)
    if m not in host.stdout:
        raise ToolMissing(f"the open_by_handle_at probe does not fit this file system ({tail(host.stderr)})")
    shutil.copy(tool, os.path.join(own.storage, "open-by-handle"))
    s = own.storage_inside
    control = t.run_control(host_ns, f"{s}/open-by-handle {s} {rel}", bundle=own)
    if bad := control_failed(control, m):
        return bad
    parts = []
    for label, over in (("no userns", host_ns), ("own userns", _with_user_namespace(host_ns))):
        attacker = t.bundle(overrides=over)
        shutil.copy(tool, os.path.join(attacker.storage, "open-by-handle"))
        s = attacker.storage_inside
        breach = t.run_probe(None, probe(f"{s}/open-by-handle {s} {rel}"), bundle=attacker)
        parts.append(_breach(m, breach, label))
    for verdict in (FAIL, ERROR):
        worst = [o for o in parts if o.verdict == verdict]
        if worst:
            return Outcome(worst[0].control, worst[0].breach, verdict, "; ".join(o.detail for o in worst))
    return Outcome("ok", "stopped", PASS, "; ".join(o.detail for o in parts))
