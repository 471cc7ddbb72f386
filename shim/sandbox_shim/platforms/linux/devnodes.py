"""``linux.devices``: the host's own node of each listed device, bound into the sandbox.

bwrap(1) makes no device nodes (it has no mknod option), and a node made in a file system we own would
sit on a nodev mount.  So each entry is served by the host's node in ``/dev`` with the same type and
major:minor (``--dev-bind`` keeps device access for that one bind).  Because that node is the host's,
its mode and owner cannot be changed for the sandbox: an entry whose ``fileMode``/``uid``/``gid``
differ from the host node is refused, as is one the host has no node for (runtime-spec
config-linux.md "Devices").
"""

from __future__ import annotations

import os
import stat

from ...errors import BundleInvalid, BundleProblem

TYPE_CHECKING = False  # no typing at run time: create loads this module
if TYPE_CHECKING:
    from typing import Any

_SKIP = ("/dev/shm", "/dev/mqueue", "/dev/hugepages")
_RULE = "runtime-spec config-linux.md Devices; bwrap binds the host's node (it cannot mknod)"


def _host_nodes() -> dict[tuple[str, int], str]:
    """(type, rdev) -> path of the first node under /dev (``c`` or ``b``)."""
    out: dict[tuple[str, int], str] = {}
    for top, dirs, files in os.walk("/dev"):
        dirs[:] = sorted(d for d in dirs if os.path.join(top, d) not in _SKIP)
        for f in sorted(files):
            p = os.path.join(top, f)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            kind = "c" if stat.S_ISCHR(st.st_mode) else "b" if stat.S_ISBLK(st.st_mode) else ""
            if kind:
                out.setdefault((kind, st.st_rdev), p)
    return out


def bind_args(devices: list[dict[str, Any]]) -> list[str]:
    """``--dev-bind HOSTNODE DEST`` for each entry (DEST as given: absolute, normalised).

    Raises:
        BundleInvalid: a destination that is not a plain absolute path, no host node with that type and
            major:minor, or a fileMode/uid/gid that differs from the host node's.
    """
    if not devices:
        return []
    nodes = _host_nodes()
    problems: list[BundleProblem] = []
    args: list[str] = []
    for i, d in enumerate(devices):
        ptr = f"/linux/devices/{i}"
        path, kind = str(d.get("path") or ""), "c" if d.get("type") == "u" else str(d.get("type"))
        if not path.startswith("/") or os.path.normpath(path) != path or path == "/":
            problems.append(
                BundleProblem(
                    f"{ptr}/path",
                    f"{path!r} is not a normalised absolute path",
                    _RULE,
                    "write it as /dev/NAME",
                )
            )
            continue
        try:
            rdev = os.makedev(int(d.get("major", -1)), int(d.get("minor", -1)))
        except (TypeError, ValueError, OverflowError):
            problems.append(BundleProblem(ptr, "major/minor are not device numbers", _RULE, "fix them"))
            continue
        host = nodes.get((kind, rdev))
        if host is None:
            problems.append(
                BundleProblem(
                    ptr,
                    f"this host has no {kind} {d.get('major')}:{d.get('minor')} "
                    "node in /dev to give the sandbox",
                    _RULE,
                    "load the driver that makes it, or remove the entry",
                )
            )
            continue
        st = os.stat(host)
        mode = d.get("fileMode")
        if mode is not None and stat.S_IFMT(int(mode)) not in (0, stat.S_IFMT(st.st_mode)):
            problems.append(
                BundleProblem(
                    f"{ptr}/fileMode",
                    f"fileMode {int(mode):o} names another file type than the host node {host}",
                    _RULE,
                    "use the node's type",
                )
            )
        for key, have in (("fileMode", stat.S_IMODE(st.st_mode)), ("uid", st.st_uid), ("gid", st.st_gid)):
            # fileMode may carry the file-type bits (podman sends S_IFCHR|0666, as runc accepts)
            want = d.get(key) if key != "fileMode" or mode is None else stat.S_IMODE(int(mode))
            if want is not None and int(want) != have:
                problems.append(
                    BundleProblem(
                        f"{ptr}/{key}",
                        f"{key} {d[key]} differs from the host node {host} ({have:o})"
                        if key == "fileMode"
                        else f"{key} {d[key]} differs from the host node {host} ({have})",
                        _RULE,
                        f"use the host node's {key}, or leave it out",
                    )
                )
        args += ["--dev-bind", host, path]
    if problems:
        raise BundleInvalid(problems)
    return args
