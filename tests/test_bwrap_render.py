"""``bwrap.render`` and ``bwrap.build_args`` as pure functions of (Plan, Fds, host view).

Every host observation goes through one ``bwrap.LinuxHost``; ``FakeHost`` answers from an in-memory
tree, so these argv are golden with no file system at all: no rootfs on disk, no bwrap, no root.  A
further test makes every file-system call of ``os`` and ``open`` fail while argv are built, and the
refusals (a symlinked destination, a file where a directory is needed, the host's uts namespace, a
writable tree holding the bundle) are shown to come from the view's answers.
"""

from __future__ import annotations

import builtins
import os
import sys
from typing import Any

import pytest

if not sys.platform.startswith("linux"):
    pytest.skip("bwrap is Linux only", allow_module_level=True)

from sandbox_shim.errors import BundleInvalid  # noqa: E402
from sandbox_shim.platforms.linux import bwrap  # noqa: E402
from sandbox_shim.platforms.linux.console import CTTY_HELPER  # noqa: E402
from sandbox_shim.platforms.linux.plan import Mount, Plan  # noqa: E402

Node = str | tuple[str, str]  # "dir" | "file" | ("link", target)


class FakeHost(bwrap.LinuxHost):
    """The host as a dict: path -> "dir" | "file" | ("link", target); the kernel's /proc and /sys
    entries, namespace identities and directory containment given explicitly.  Calls are recorded."""

    def __init__(
        self,
        tree: dict[str, Node],
        kernel: set[str] | None = None,
        ns: dict[str, tuple[int, int]] | None = None,
        holds: set[tuple[str, str]] | None = None,
    ) -> None:
        self.tree = dict(tree)
        for path in list(self.tree):  # every parent of a listed path is a directory
            parent = os.path.dirname(path)
            while parent not in ("/", "") and parent not in self.tree:
                self.tree[parent] = "dir"
                parent = os.path.dirname(parent)
        self.kernel = kernel or set()
        self.ns = ns or {}
        self.holds = holds or set()
        self.calls: list[tuple[str, str]] = []

    def kind(self, path: str) -> str | None:
        self.calls.append(("kind", path))
        node = self.tree.get(path)
        return None if node is None else "link" if isinstance(node, tuple) else node

    def readlink(self, path: str) -> str:
        node = self.tree.get(path)
        if not isinstance(node, tuple):
            raise OSError(22, "not a link", path)
        return node[1]

    def lexists(self, path: str) -> bool:
        return path in self.tree

    def isdir(self, path: str) -> bool:
        node = self.tree.get(path)
        if isinstance(node, tuple):  # followed, as os.path.isdir does
            target = node[1] if node[1].startswith("/") else os.path.join(os.path.dirname(path), node[1])
            return self.isdir(os.path.normpath(target))
        return node == "dir"

    def kernel_has(self, path: str) -> bool:
        return path in self.kernel

    def device_args(self, devices: list[dict[str, Any]]) -> list[str]:
        return [x for d in devices for x in ("--dev-bind", f"/host{d['path']}", d["path"])]

    def helper_binds(self) -> list[str]:
        return ["--ro-bind", "/fake/busybox", CTTY_HELPER]

    def ns_identity(self, path: str) -> tuple[int, int] | None:
        return self.ns.get(path)

    def runtime_uts(self) -> set[tuple[int, int]]:
        return {v for k, v in self.ns.items() if k in ("/proc/self/ns/uts", "/proc/1/ns/uts")}

    def contains(self, outer: str, inner: str) -> bool:
        return (outer, inner) in self.holds


def plan(**over: Any) -> Plan:
    """A tenant-like plan: new pid/mount/ipc/uts/network namespaces, /proc, /dev and /tmp mounted."""
    base: dict[str, Any] = {
        "id": "g",
        "bundle": "/b",
        "rootfs": "/b/rootfs",
        "root_readonly": True,
        "args": ["sh", "-c", "echo hi"],
        "env": {"PATH": "/bin"},
        "cwd": "/",
        "uid": 0,
        "gid": 0,
        "additional_gids": [],
        "umask": None,
        "terminal": False,
        "hostname": "golden",
        "unshare": ["pid", "mount", "ipc", "uts", "network"],
        "join": {},
        "mounts": [
            Mount("proc", "/proc"),
            Mount("dev", "/dev"),
            Mount("tmpfs", "/tmp", "tmpfs", False, ["nosuid", "size=1m"]),
        ],
        "masked_paths": ["/proc/kcore"],
        "readonly_paths": ["/proc/sys"],
        "devices": [],
        "capabilities": ["CAP_KILL"],
        "rlimits": [],
        "oom_score_adj": None,
        "resources": {},
        "cgroups_path": "/sandbox-shim/g",
        "seccomp": None,
        "network": "none",
        "allow_nested_userns": False,
        "wall_clock": None,
        "cpu_time": None,
        "sysctl": {},
        "hooks": {},
        "annotations": {},
        "required": [],
        "inheritable": ["CAP_KILL"],
        "ambient": ["CAP_KILL"],
    }
    base.update(over)
    return Plan(**base)


ROOTFS: dict[str, Node] = {
    "/b/rootfs": "dir",
    "/b/rootfs/proc": "dir",
    "/b/rootfs/dev": "dir",
    "/b/rootfs/tmp": "dir",
    "/b/rootfs/bin/sh": "file",
    "/b/rootfs/etc/passwd": "file",
    "/b/rootfs/data": ("link", "/srv/data"),  # absolute: resolved inside the sandbox
    "/b/rootfs/srv/data": "dir",
    "/b/storage": "dir",
}
KERNEL = {"/proc/kcore", "/proc/sys", "/proc/keys", "/sys/firmware"}
FDS = bwrap.Fds(5, 6, [7])
TAIL = ["--block-fd", "5", "--info-fd", "6", "--as-pid-1", "--add-seccomp-fd", "7"]

GOLDEN_DEFAULT = [
    *["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net", "--hostname", "golden"],
    "--new-session",
    *["--bind", "/b/rootfs", "/"],
    *["--proc", "/proc", "--ro-bind", "/dev/null", "/proc/kcore", "--ro-bind", "/dev/null", "/proc/keys"],
    *["--ro-bind", "/proc/sys", "/proc/sys"],
    *["--dev", "/dev"],
    *["--perms", "1777", "--size", "1048576", "--tmpfs", "/tmp"],
    *["--remount-ro", "/"],
    *["--chdir", "/"],
    *["--cap-drop", "ALL", "--cap-add", "CAP_KILL", "--clearenv", "--setenv", "PATH", "/bin"],
    *TAIL,
    *["--", "sh", "-c", "echo hi"],
]


def test_the_default_plan_renders_to_its_golden_argv_from_the_view_alone() -> None:
    host = FakeHost(ROOTFS, KERNEL)
    got = bwrap.render(plan(), FDS, host)
    assert got.argv == GOLDEN_DEFAULT
    assert got.steps == []
    assert bwrap.build_args(plan(), FDS, host) == GOLDEN_DEFAULT  # check + render: the same argv
    # the kernel-file floor follows what the kernel reports: without /proc/keys there is no mask for it
    fewer = bwrap.render(plan(), FDS, FakeHost(ROOTFS, KERNEL - {"/proc/keys"}))
    assert "/proc/keys" not in fewer.argv and "/proc/kcore" in fewer.argv


def test_a_bind_through_a_rootfs_symlink_renders_the_resolved_destination_and_records_steps() -> None:
    p = plan(
        root_readonly=False,
        mounts=[
            Mount("proc", "/proc"),
            Mount("dev", "/dev"),
            Mount("bind", "/data/new", "/b/storage", False, ["rbind", "rw"]),
        ],
        masked_paths=[],
        readonly_paths=["/data/new"],
        cwd="/work/here",
        uid=1000,
        gid=1000,
        inheritable=[],
        ambient=[],
    )
    got = bwrap.render(p, bwrap.Fds(5, 6), FakeHost(ROOTFS, {"/proc/kcore"}))
    assert got.argv == [
        *["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net", "--hostname", "golden"],
        "--new-session",
        *["--bind", "/b/rootfs", "/"],
        *["--proc", "/proc", "--ro-bind", "/dev/null", "/proc/kcore"],
        *["--dev", "/dev"],
        *["--bind", "/b/storage", "/srv/data/new"],  # the link /data -> /srv/data followed inside
        *["--ro-bind", "/b/storage", "/srv/data/new"],
        *["--chdir", "/work/here"],
        "--cap-drop",
        "ALL",
        *["--cap-add", "CAP_KILL", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETUID"],
        *["--clearenv", "--setenv", "PATH", "/bin", "--block-fd", "5", "--info-fd", "6", "--as-pid-1"],
        *["--ro-bind", "/fake/busybox", CTTY_HELPER, "--"],
        CTTY_HELPER,
        "setpriv",
        *["--inh-caps", "-kill,-setgid,-setuid", "--ambient-caps", "-kill,-setgid,-setuid", "--"],
        *[CTTY_HELPER, "nsenter", "-F", "-S", "1000", "-G", "1000", "--", "sh", "-c", "echo hi"],
    ]
    assert [(s.dest, s.root, s.rel, s.is_dir) for s in got.steps] == [
        ("/srv/data/new", "/b/rootfs", "srv/data/new", True),
        ("/work/here", "/b/rootfs", "work/here", True),
    ]


def test_devices_and_a_sized_tmpfs_with_a_mode() -> None:
    p = plan(
        mounts=[
            Mount("proc", "/proc"),
            Mount("dev", "/dev"),
            Mount("tmpfs", "/tmp", "tmpfs", True, ["mode=0700", "size=8k"]),
            Mount("mqueue", "/dev/mqueue"),
        ],
        masked_paths=[],
        readonly_paths=[],
        devices=[{"path": "/dev/fuse", "type": "c", "major": 10, "minor": 229}],
        unshare=["pid", "mount"],
        hostname=None,
    )
    got = bwrap.render(p, bwrap.Fds(3, 4), FakeHost(ROOTFS))
    sep = got.argv.index("--cap-drop")
    assert got.argv[:sep] == [
        "--unshare-pid",
        "--new-session",
        *["--bind", "/b/rootfs", "/", "--proc", "/proc", "--dev", "/dev"],
        *["--perms", "0700", "--size", "8192", "--tmpfs", "/tmp", "--remount-ro", "/tmp"],
        *["--mqueue", "/dev/mqueue"],
        *["--dev-bind", "/host/dev/fuse", "/dev/fuse"],
        *["--remount-ro", "/", "--chdir", "/"],
    ]


def test_refusals_come_from_the_views_answers() -> None:
    # a file where a mount point directory is needed (below it: ENOTDIR when ``make_missing`` makes it)
    p = plan(mounts=[*plan().mounts, Mount("tmpfs", "/etc/passwd", "tmpfs")])
    with pytest.raises(BundleInvalid) as got:
        bwrap.render(p, FDS, FakeHost(ROOTFS, KERNEL))
    assert got.value.problems[0].pointer == "/mounts"
    # a destination through a symbolic link bwrap makes in /dev (it leads out while mounts are set up)
    p = plan(mounts=[*plan().mounts, Mount("tmpfs", "/dev/fd/x", "tmpfs")])
    with pytest.raises(BundleInvalid) as got:
        bwrap.render(p, FDS, FakeHost(ROOTFS, KERNEL))
    assert got.value.problems[0].pointer == "/mounts"
    # a missing cwd in a read-only bind: it would be made on the host
    p = plan(mounts=[*plan().mounts, Mount("bind", "/data", "/b/storage", True)], cwd="/data/nope")
    with pytest.raises(BundleInvalid) as got:
        bwrap.render(p, FDS, FakeHost(ROOTFS, KERNEL))
    assert got.value.problems[0].pointer == "/process/cwd"


def test_the_check_step_refuses_from_the_views_answers() -> None:
    uts = plan(join={"uts": "/run/ns/uts"}, unshare=["pid", "mount"], sysctl={"kernel.hostname": "x"})
    host_uts = FakeHost(ROOTFS, ns={"/proc/self/ns/uts": (4, 1), "/run/ns/uts": (4, 1)})
    with pytest.raises(BundleInvalid) as got:
        bwrap.check(uts, host_uts)
    assert got.value.problems[0].pointer == "/hostname"
    bwrap.check(uts, FakeHost(ROOTFS, ns={"/proc/self/ns/uts": (4, 1), "/run/ns/uts": (4, 2)}))  # control
    exposed = plan(root_readonly=False)
    with pytest.raises(BundleInvalid) as got:
        bwrap.check(exposed, FakeHost(ROOTFS, holds={("/b/rootfs", "/b")}))
    assert got.value.problems[0].pointer == "/root/path"
    bwrap.check(exposed, FakeHost(ROOTFS))  # control: the rootfs does not hold the bundle
    with pytest.raises(BundleInvalid) as got:
        bwrap.check(plan(devices=[{"path": "/etc/x"}]), FakeHost(ROOTFS))
    assert got.value.problems[0].pointer == "/linux/devices"


def test_rendering_touches_no_file_system(monkeypatch: pytest.MonkeyPatch) -> None:
    host = FakeHost(ROOTFS, KERNEL)
    p = plan(
        root_readonly=False,
        mounts=[*plan().mounts, Mount("bind", "/data/new", "/b/storage", False, ["rbind"])],
        cwd="/work/here",
        uid=1000,
        gid=1000,
    )
    want = bwrap.build_args(p, FDS, host)  # warm: the modules it imports are loaded
    assert host.calls, "the control: the walk asked the view"

    def refuse(*_a: Any, **_k: Any) -> Any:
        raise AssertionError("the file system was touched while rendering")

    for name in ("stat", "lstat", "readlink", "open", "listdir", "scandir", "access", "mkdir", "getcwd"):
        monkeypatch.setattr(os, name, refuse)
    for name in ("exists", "lexists", "isdir", "isfile", "islink", "realpath"):
        monkeypatch.setattr(os.path, name, refuse)
    monkeypatch.setattr(builtins, "open", refuse)
    host.calls.clear()
    assert bwrap.build_args(p, FDS, host) == want
    assert bwrap.render(p, FDS, host).argv == want
    assert host.calls
