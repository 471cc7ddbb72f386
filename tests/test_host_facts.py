"""One owner per host fact: /proc/PID/stat, /proc/self/mountinfo and /proc/self/status each have one
parser, and every user of the fact gets the same answer from it.

mountinfo: the kernel writes space, tab, newline and backslash in a path as octal escapes (proc(5));
``sandbox_shim.mountinfo`` decodes every one, and the bind-source check (``host_mounts``), the cgroup
detection and the capability cache key all read the table through it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from sandbox_shim import host_mounts, mountinfo, state
from sandbox_shim.hardening import confine_journal
from sandbox_shim.probes import proc

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

#: a mount point holding a space, a tab, a backslash and a newline, as the kernel writes it
ODD = "/mnt/a b\tc\\d\ne"
ODD_ESCAPED = r"/mnt/a\040b\011c\134d\012e"
TABLE = (
    "22 1 0:21 / /proc rw,nosuid shared:12 - proc proc rw\n"
    f"30 22 0:26 / {ODD_ESCAPED} rw,nosuid,nodev shared:9 - cgroup2 cgroup2 rw,nsdelegate\n"
    f"31 22 0:27 / {ODD_ESCAPED}/mem ro master:3 - cgroup cgroup rw,memory\n"
    "a malformed line without the separator\n"
)


def test_the_parser_decodes_every_octal_escape() -> None:
    table = mountinfo.parse(TABLE)
    assert [m.mount_point for m in table] == ["/proc", ODD, ODD + "/mem"]
    assert [m.fstype for m in table] == ["proc", "cgroup2", "cgroup"]
    assert table[2].options == "ro" and table[2].super_options == "rw,memory"
    assert mountinfo.unescape(rb"plain") == "plain"  # the control: nothing to decode
    assert mountinfo.unescape(rb"a\0b\99") == r"a\0b\99"  # not three octal digits: kept as written


def test_every_user_of_the_table_decodes_the_same(tmp_path: Path) -> None:
    f = tmp_path / "mountinfo"
    f.write_text(TABLE)
    from sandbox_shim.platforms.linux.cgroups.detect import parse_mountinfo
    from sandbox_shim.platforms.linux.hostkey import cgroup_mounts

    assert host_mounts.mounts(str(f)) == [("/proc", "proc"), (ODD, "cgroup2"), (ODD + "/mem", "cgroup")]
    layout = parse_mountinfo(TABLE)
    assert layout.v2_mount == ODD and layout.v1_mounts == {"memory": ODD + "/mem"}
    assert cgroup_mounts(mountinfo.parse(TABLE)) == ";".join(
        sorted([f"{ODD} rw,nosuid,nodev cgroup2 rw,nsdelegate", f"{ODD}/mem ro cgroup rw,memory"])
    )


@linux
@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_a_real_mount_point_with_a_space_a_tab_and_a_backslash(tmp_path: Path) -> None:
    where = tmp_path / "a b\tc\\d"
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(where)], check=True)
    try:
        table = mountinfo.read() or []
        assert (str(where), "tmpfs") in [(m.mount_point, m.fstype) for m in table]
        assert (str(where), "tmpfs") in (host_mounts.mounts() or [])
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


@linux
def test_proc_stat_has_one_reader() -> None:
    me = os.getpid()
    assert state.proc_start_time(me) is not None
    assert confine_journal.start_time(me) == str(state.proc_start_time(me))
    assert confine_journal.start_time(2**22 + 1) is None  # above pid_max: gone


def test_proc_status_has_one_parser() -> None:
    text = "Name:\tpython3\nSeccomp:\t2\nCapEff:\t0000000001000000\nNoNewPrivs:\t1\n"
    got = proc.status_fields(("Seccomp", "CapEff", "Missing"), text)
    assert got == {"Seccomp": "2", "CapEff": "0000000001000000", "Missing": None}
    if sys.platform.startswith("linux"):  # the control: this process's own file has the fields
        assert proc.status_field("Seccomp") in ("0", "1", "2")
        from sandbox_shim.platforms.linux.rlimits import _has_sys_resource

        eff = proc.status_field("CapEff")
        assert eff is not None and _has_sys_resource() == bool(int(eff, 16) >> 24 & 1)
