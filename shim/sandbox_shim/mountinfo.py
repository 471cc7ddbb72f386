"""``/proc/PID/mountinfo``: the one parser of the mount table (proc(5), "/proc/pid/mountinfo").

Each line: mount id, parent id, ``major:minor``, root, mount point, mount options, optional fields
(zero or more, ended by a lone ``-``), then file system type, source and super options.  The kernel
writes the path fields with space, tab, newline and backslash as octal escapes (``\\040``, ``\\011``,
``\\012``, ``\\134``: fs/proc_namespace.c ``show_mountinfo`` -> ``seq_path_root``/``mangle``); every
``\\ooo`` escape is decoded here, for every user of the table (``host_mounts``, the cgroup detection,
the capability cache key), and the bytes are decoded as file names are (``os.fsdecode``).

Platform-neutral and cheap: no ``re``, nothing beyond ``os`` (the cache key reads this on lifecycle verbs).
"""

from __future__ import annotations

import os

from .values import FrozenValue

MOUNTINFO = "/proc/self/mountinfo"


class Mount(FrozenValue):
    """One line of the table, its path fields decoded."""

    __match_args__ = ("mount_point", "fstype", "options", "super_options", "root", "source")

    def __init__(
        self,
        mount_point: str,
        fstype: str,
        options: str = "",
        super_options: str = "",
        root: str = "/",
        source: str = "",
    ) -> None:
        self._set(
            mount_point=mount_point,
            fstype=fstype,
            options=options,
            super_options=super_options,
            root=root,
            source=source,
        )

    mount_point: str
    fstype: str
    options: str
    super_options: str
    root: str
    source: str


def unescape(field: bytes) -> str:
    """A path field with every octal escape (``\\ooo``) decoded, as a file name (``os.fsdecode``)."""
    if b"\\" not in field:
        return os.fsdecode(field)
    out = bytearray()
    i, n = 0, len(field)
    while i < n:
        c = field[i]
        digits = field[i + 1 : i + 4]
        if c == 0x5C and len(digits) == 3 and all(0x30 <= d <= 0x37 for d in digits):
            out.append(int(digits, 8) & 0xFF)
            i += 4
        else:
            out.append(c)
            i += 1
    return os.fsdecode(bytes(out))


def parse(text: bytes | str) -> list[Mount]:
    """Every well-formed line of a mountinfo text (lines without the ``-`` separator are skipped)."""
    data = os.fsencode(text) if isinstance(text, str) else text
    out = []
    for line in data.splitlines():
        fields = line.split(b" ")
        try:
            sep = fields.index(b"-", 6)
        except ValueError:
            continue
        tail = fields[sep + 1 :]
        if len(tail) < 1:
            continue
        out.append(
            Mount(
                unescape(fields[4]),
                os.fsdecode(tail[0]),
                os.fsdecode(fields[5]),
                os.fsdecode(tail[2]) if len(tail) > 2 else "",
                unescape(fields[3]),
                unescape(tail[1]) if len(tail) > 1 else "",
            )
        )
    return out


def read(path: str = MOUNTINFO) -> list[Mount] | None:
    """The mounts of ``path`` (default this process's mount namespace), or None where it cannot be
    read (not Linux, no /proc)."""
    try:
        with open(path, "rb") as fh:
            return parse(fh.read())
    except OSError:
        return None
