"""The probe rootfs, built from what this host has: its static busybox, one symlink per applet.

The installed package needs no source checkout: ``fill(dest)`` does what ``scripts/make-rootfs`` does
(the test suite's recipe), in Python.  busybox must be statically linked (no ELF ``PT_INTERP``
program header, elf(5)): a dynamic one would need the host's libc inside the rootfs.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess

PT_INTERP = 3
DIRS = ("bin", "proc", "dev", "sys", "tmp", "etc", "root", "storage", "var/www", "usr")


class NoBusybox(Exception):
    """The host has no usable static busybox (the message says how to get one)."""


def is_static(path: str) -> bool:
    """True if the ELF file at ``path`` has no interpreter (``PT_INTERP``), i.e. is statically linked."""
    with open(path, "rb") as fh:
        ident = fh.read(64)
        if ident[:4] != b"\x7fELF":
            return False
        is64, little = ident[4] == 2, ident[5] == 1
        end = "<" if little else ">"
        if is64:
            (phoff,) = struct.unpack(end + "Q", ident[32:40])
            phentsize, phnum = struct.unpack(end + "HH", ident[54:58])
        else:
            (phoff,) = struct.unpack(end + "I", ident[28:32])
            phentsize, phnum = struct.unpack(end + "HH", ident[42:46])
        for i in range(phnum):
            fh.seek(phoff + i * phentsize)
            (p_type,) = struct.unpack(end + "I", fh.read(4))
            if p_type == PT_INTERP:
                return False
    return True


def host_busybox() -> str:
    """Path of the host's static busybox.  Raises ``NoBusybox``."""
    known = (p for p in ("/bin/busybox", "/usr/bin/busybox") if os.path.isfile(p))
    bb = shutil.which("busybox") or next(known, None)
    if bb is None:
        raise NoBusybox("busybox is not installed (apt-get install busybox-static)")
    bb = os.path.realpath(bb)
    if not is_static(bb):
        raise NoBusybox(f"{bb} is dynamically linked (apt-get install busybox-static)")
    return bb


def fill(dest: str) -> str:
    """Fill ``dest`` with a busybox rootfs (made if missing).  Returns the busybox used.
    Raises ``NoBusybox``; OSError if ``dest`` cannot be written."""
    bb = host_busybox()
    for d in DIRS:
        os.makedirs(os.path.join(dest, d), exist_ok=True)
    target = os.path.join(dest, "bin", "busybox")
    shutil.copy2(bb, target)
    os.chmod(target, 0o755)
    listed = subprocess.run([bb, "--list"], capture_output=True, text=True, timeout=30, check=True)
    applets = listed.stdout.split()
    for applet in applets:
        link = os.path.join(dest, "bin", applet)
        if applet != "busybox" and not os.path.lexists(link):
            os.symlink("busybox", link)
    for link, to in (("usr/bin", "../bin"), ("sbin", "bin")):
        if not os.path.lexists(os.path.join(dest, link)):
            os.symlink(to, os.path.join(dest, link))
    with open(os.path.join(dest, "etc", "passwd"), "w") as fh:
        fh.write("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n")
    with open(os.path.join(dest, "etc", "group"), "w") as fh:
        fh.write("root:x:0:\nnogroup:x:65534:\n")
    os.chmod(os.path.join(dest, "tmp"), 0o1777)
    return bb
