"""One owner per host fact: /proc/PID/stat, /proc/self/mountinfo and /proc/self/status each have one
parser, and every user of the fact gets the same answer from it.

mountinfo: the kernel writes space, tab, newline and backslash in a path as octal escapes (proc(5));
``sandbox_shim.mountinfo`` decodes every one, and the bind-source check (``host_mounts``), the cgroup
detection and the capability cache key all read the table through it.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
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


# -- who may name a host file: a scan of the package's string literals ------------------------------

PACKAGE = Path(__file__).resolve().parents[1] / "shim" / "sandbox_shim"

#: a host path under proc(5) or sysfs(5): ``/proc``, ``/sys`` and anything below them
HOST_PATH = re.compile(r"(^|[\s'\"=:(])/(proc|sys)(/|$|\s)")

#: the modules outside ``platforms/linux/`` that may spell such a path, and why.  Every other one
#: asks an owner (or the platform, through ``platforms.select`` / the mechanism) for the fact.
HOST_PATH_OWNERS = {
    "posix.py": "pid_exists: /proc/PID, the one owner of 'does this pid exist'; fchmod of an O_PATH fd",
    "procstat.py": "/proc/PID/stat, its one reader",
    "mountinfo.py": "/proc/self/mountinfo, its one parser",
    "host_mounts.py": "passes /proc/self/mountinfo to mountinfo.read (and names it in its message)",
    "probes/proc.py": "/proc/self/status, its one parser (and the generic proc(5) read)",
    # paths inside the sandbox, from or for the config: not facts of the host
    "bundle.py": "the container's /proc and /sys mount destinations (config rules)",
    "paths.py": "the container's /proc and /sys mount destinations (config rules)",
    "template.py": "the default config's masked and read-only container paths",
    "hardening/tenant.py": "messages about the container's /proc mounts in a config",
    "platforms/darwin/plan.py": "the container's /proc and /sys mount destinations (refused on macOS)",
    "conformance/checks/isolation.py": "shell probes run inside the sandbox",
    "conformance/checks/isolation_host.py": "shell probes run inside the sandbox",
    "conformance/checks/isolation_kernel.py": "shell probes run inside the sandbox",
}

#: facts of the host with one reader in the whole package: the pattern a literal spelling the file
#: matches (f-string and ``+`` parts that are not text are ``\0``) -> the module that owns it
ONE_READER = {
    r"^/proc/(\0|self|\d+)/stat$": "procstat.py",
    r"^/proc/(\0|\d+)/?$": "posix.py",
    r"^/proc/self/environ$": "platforms/linux/landlock.py",
    r"^/proc/self/status$": "probes/proc.py",
    r"^/proc/self/mountinfo$": "mountinfo.py",
    r"^/sys/fs/cgroup": "platforms/linux/cgroups/",
    r"^/proc/sys/kernel/random/boot_id$": "platforms/linux/__init__.py",
    r"^/proc/(\0|self|\d+)/ns(/|$)": "platforms/linux/__init__.py",
}

#: ``(module, ONE_READER pattern)`` -> why that module still spells the owned file itself
ONE_READER_EXCEPT: dict[tuple[str, str], str] = {}


def _folded(node: ast.AST) -> str | None:
    """The text a string constant, an f-string or a ``+`` chain of them spells (other parts ``\\0``)."""
    if isinstance(node, ast.Constant):
        return node.value if isinstance(node.value, str) else None
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "\0" for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _folded(node.left), _folded(node.right)
        if left is None and right is None:
            return None
        return (left if left is not None else "\0") + (right if right is not None else "\0")
    return None


def host_paths(package: Path) -> list[tuple[str, int, str]]:
    """``(module, line, text)`` for each string (not a docstring: text for readers) in the package
    naming a path under /proc or /sys, after folding f-strings and ``+`` chains."""
    found = []
    for path in sorted(package.rglob("*.py")):
        rel = str(path.relative_to(package))
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        docs = {
            id(n.value)
            for n in ast.walk(tree)
            if isinstance(n, ast.Expr)
            and isinstance(n.value, ast.Constant)
            and isinstance(n.value.value, str)
        }
        for node in ast.walk(tree):
            if isinstance(node, (ast.Constant, ast.JoinedStr, ast.BinOp)) and id(node) not in docs:
                text = _folded(node)
                if text is not None and HOST_PATH.search(text):
                    found.append((rel, getattr(node, "lineno", 0), text))
    return found


def host_path_violations(package: Path) -> list[str]:
    """``module:line: text`` for each host path named outside ``platforms/linux/`` and the owners
    of ``HOST_PATH_OWNERS``, and for each ``ONE_READER`` fact spelled outside its owner."""
    bad = []
    for rel, line, text in host_paths(package):
        if not rel.startswith("platforms/linux/") and rel not in HOST_PATH_OWNERS:
            bad.append(f"{rel}:{line}: {text!r} (not an owner of host facts)")
        for pattern, owner in ONE_READER.items():
            if (
                re.search(pattern, text)
                and not rel.startswith(owner)
                and (rel, pattern) not in ONE_READER_EXCEPT
            ):
                bad.append(f"{rel}:{line}: {text!r} (read only through {owner})")
    return bad


def test_only_the_owners_name_host_files() -> None:
    found = host_paths(PACKAGE)
    assert {r for r, _, _ in found} >= {"posix.py", "procstat.py", "platforms/linux/landlock.py"}  # control
    assert host_path_violations(PACKAGE) == []
    # each allowed owner still names one (no stale entry), and so does each exception
    assert set(HOST_PATH_OWNERS) <= {r for r, _, _ in found}
    for rel, pattern in ONE_READER_EXCEPT:
        assert any(r == rel and re.search(pattern, text) for r, _, text in found), (rel, pattern)


@pytest.mark.parametrize(
    ("module", "code"),
    [
        # the review's plants: a third /proc/PID/stat parser, a cgroup file read in the control plane
        (
            "platforms/linux/process.py",
            'def _b(pid: int) -> bytes:\n    with open(f"/proc/{pid}/stat", "rb") as fh:\n'
            "        return fh.read()\n",
        ),
        (
            "control.py",
            'def _b() -> str:\n    with open("/sys/fs/cgroup/cgroup.controllers") as fh:\n'
            "        return fh.read()\n",
        ),
        # a second "does this pid exist", a second environ parser, a proc read in the core
        (
            "platforms/linux/residue.py",
            'def _b(pid: str) -> bool:\n    return os.path.exists("/proc/" + pid)\n',
        ),
        ("hardening/confinement.py", '_E = "/proc/self/environ"\n'),
        ("probes/cache.py", "def _b(p: str) -> str:\n    return _read(f'/proc/sys/{p}')\n"),
        ("platforms/linux/enter.py", '_S = "/proc/self/" + "stat"\n'),
        # a second boot id reader, a namespace compared by hand outside the owner
        ("platforms/linux/hostkey.py", '_B = "/proc/sys/kernel/random/boot_id"\n'),
        (
            "platforms/linux/network.py",
            "def _b(pid: int) -> bool:\n"
            '    return os.stat(f"/proc/{pid}/ns/net").st_ino == os.stat("/proc/self/ns/net").st_ino\n',
        ),
    ],
)
def test_a_host_file_named_outside_its_owner_is_found(tmp_path: Path, module: str, code: str) -> None:
    pkg = tmp_path / "sandbox_shim"
    shutil.copytree(PACKAGE, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    assert host_path_violations(pkg) == []  # the control: the copy is as clean as the tree
    with open(pkg / module, "a", encoding="utf-8") as fh:
        fh.write("\n\n" + code)
    found = host_path_violations(pkg)
    assert found and all(f.startswith(module + ":") for f in found), found


@linux
def test_the_boot_id_has_one_reader() -> None:
    """The capability cache key and the kept Landlock ABI read the same boot id, from one reader."""
    from sandbox_shim.platforms import linux as hostid
    from sandbox_shim.platforms.linux import confine_state, hostkey

    boot = hostid.boot_id()
    assert len(boot) == 36 and boot.count("-") == 4, boot  # a UUID (proc(5))
    assert hostkey.cache_facts()["boot_id"] == boot
    assert confine_state.boot_id is hostid.boot_id  # the kept Landlock ABI's key: the same reader


@linux
def test_namespace_identity_has_one_owner(tmp_path: Path) -> None:
    """The owner (``platforms/linux/__init__.py``) answers for this process, a child in a new
    namespace, and a namespace file's stat."""
    from sandbox_shim.platforms import linux as hostid
    from sandbox_shim.platforms.linux import namespaces

    me = os.getpid()
    assert hostid.ns_shared(me, "net") and hostid.ns_shared("self", "mnt")
    assert hostid.is_namespace_of(os.stat(f"/proc/{me}/ns/net"), "self", "net")
    assert namespaces.same_namespace(me, "network")
    assert hostid.ns_identity("self", "net") != hostid.ns_identity(
        "self", "mnt"
    )  # the control: two namespaces
    with pytest.raises(FileNotFoundError):
        hostid.ns_identity(2**22 + 1, "net")  # above pid_max: gone
    unshare = shutil.which("unshare")
    if unshare is None or os.geteuid() != 0:
        return
    child = subprocess.Popen([unshare, "--net", "sleep", "5"])
    try:
        for _ in range(100):  # until unshare has made the namespace and exec'd sleep
            if not hostid.ns_shared(child.pid, "net"):
                break
            subprocess.run(["sleep", "0.02"], check=False)
        assert not hostid.ns_shared(child.pid, "net") and hostid.ns_shared(child.pid, "mnt")
        assert not namespaces.same_namespace(child.pid, "network")
    finally:
        child.kill()
        child.wait()


#: a cgroup interface file (cgroups(7), cgroup-v1/*.rst, cgroup-v2.rst), alone or at the end of a path
CGROUP_FILE = re.compile(
    r"(^|/)(tasks|cgroup\.(procs|threads|events|kill|freeze|controllers|subtree_control|type|stat|max\.\w+)"
    r"|(memory|memsw|pids|cpu|cpuacct|cpuset|blkio|freezer|hugetlb)\.[a-z_.]*[a-z_]"
    r"|io\.(max|stat|weight|pressure|latency|cost\.\w+|bfq\.\w+))$"
)

#: modules outside ``platforms/<os>/`` that may name a cgroup file, and why
CGROUP_FILE_EXCEPT: dict[str, str] = {}


def cgroup_file_names(package: Path) -> list[str]:
    """``module:line: text`` for each string outside ``platforms/<os>/`` naming a cgroup file: which
    files a cgroup has, how they are read and when they signal is the Linux mechanism's (the library
    asks ``Mechanism.cgroup`` / ``Mechanism.watch``)."""
    plats = {p.parent.name for p in (package / "platforms").glob("*/__init__.py")}
    return [
        f"{rel}:{line}: {text!r}"
        for rel, line, text in _strings(package)
        if not (rel.startswith("platforms/") and rel.split("/")[1] in plats)
        and rel not in CGROUP_FILE_EXCEPT
        and CGROUP_FILE.search(text)
    ]


def _strings(package: Path) -> list[tuple[str, int, str]]:
    """``(module, line, text)`` for each string of code (docstrings left out), f-strings folded."""
    found = []
    for path in sorted(package.rglob("*.py")):
        rel = str(path.relative_to(package))
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        docs = {
            id(n.value)
            for n in ast.walk(tree)
            if isinstance(n, ast.Expr)
            and isinstance(n.value, ast.Constant)
            and isinstance(n.value.value, str)
        }
        for node in ast.walk(tree):
            if isinstance(node, (ast.Constant, ast.JoinedStr, ast.BinOp)) and id(node) not in docs:
                text = _folded(node)
                if text is not None:
                    found.append((rel, getattr(node, "lineno", 0), text))
    return found


def test_the_neutral_code_names_no_cgroup_file(tmp_path: Path) -> None:
    assert cgroup_file_names(PACKAGE) == []
    linux = [t for r, _, t in _strings(PACKAGE) if r.startswith("platforms/linux/cgroups/")]
    assert any(CGROUP_FILE.search(t) for t in linux)  # the control: the managers do name them
    pkg = tmp_path / "sandbox_shim"
    shutil.copytree(PACKAGE, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    with open(pkg / "execution.py", "a", encoding="utf-8") as fh:  # the watch's old home
        fh.write('\n\ndef _b(d: str) -> str:\n    return os.path.join(d, "memory.events")\n')
    with open(pkg / "control.py", "a", encoding="utf-8") as fh:
        fh.write('\n\n_P = "/sys/fs/cgroup/x/cgroup.procs"\n')
    found = cgroup_file_names(pkg)
    assert [f.split(":")[0] for f in found] == ["control.py", "execution.py"], found


def mountinfo_opens(package: Path) -> list[str]:
    """``module:line`` for each ``open(MOUNTINFO ...)`` outside ``mountinfo.py`` (the constant hides
    the path from the literal scan above): the table is read through ``mountinfo.read`` only."""
    found = []
    for path in sorted(package.rglob("*.py")):
        rel = str(path.relative_to(package))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if (
                rel != "mountinfo.py"
                and isinstance(node, ast.Call)
                and node.args
                and ast.unparse(node.func) in ("open", "os.open", "io.open")
                and ast.unparse(node.args[0]).split(".")[-1] == "MOUNTINFO"
            ):
                found.append(f"{rel}:{node.lineno}")
    return found


def test_the_mount_table_has_one_reader(tmp_path: Path) -> None:
    assert mountinfo_opens(PACKAGE) == []
    from sandbox_shim.platforms.linux.cgroups.detect import detect, layout_of

    if sys.platform.startswith("linux"):  # the detection reads the table the one reader gives
        assert detect() == layout_of(mountinfo.read() or [])
    pkg = tmp_path / "sandbox_shim"
    shutil.copytree(PACKAGE, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    with open(pkg / "platforms" / "linux" / "cgroups" / "detect.py", "a", encoding="utf-8") as fh:
        fh.write('\n\ndef _b() -> bytes:\n    with open(MOUNTINFO, "rb") as fh:\n        return fh.read()\n')
    assert [f.split(":")[0] for f in mountinfo_opens(pkg)] == ["platforms/linux/cgroups/detect.py"]
