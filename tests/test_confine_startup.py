"""confine's start-up aids: the bytecode read ahead (``_lazy.read_ahead`` of ``cli.CONFINE_PATH``) is
exactly what the confine command imports, so a cold page cache costs one batch of reads, not one per
module."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sandbox_shim.hardening import confine_launch

PACKAGE_ROOT = Path(confine_launch.__file__).resolve().parents[2]  # the directory holding sandbox_shim/

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or not os.access("/usr/bin/bwrap", os.X_OK),
    reason="needs Linux with bwrap at /usr/bin/bwrap",
)

PROBE = """
import os, sys
import sandbox_shim.cli as cli
def _exit(status):  # confine ends with os._exit: here the probe reports first
    raise SystemExit(status)
os._exit = _exit
before = set(sys.modules)
try:
    cli.main(["confine", "--permit-path", sys.argv[1], "--print-launch-spec", "--", "/bin/true"])
except SystemExit:
    pass
sys.stderr.write(" ".join(sorted(set(sys.modules) - before)))
"""


def module_name(path: str) -> str:
    name = "sandbox_shim." + path.replace("/", ".")
    return name.removesuffix(".__init__")


def test_read_ahead_names_exactly_what_the_confine_command_imports(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-c", PROBE, str(tmp_path)], capture_output=True, text=True, timeout=60, check=False
    )
    from sandbox_shim import cli
    from sandbox_shim.platforms import select

    loaded = set(r.stderr.strip().splitlines()[-1].split())
    ours = {m for m in loaded if m.startswith("sandbox_shim.")}
    assert r.returncode == 0 and '"cmd"' in r.stdout, r.stderr  # control: the command did its work
    assert ours, r.stderr  # control: the path does import modules after sandbox_shim.cli
    listed = {module_name(m) for m in (*cli.CONFINE_PATH, *select.LINUX_CONFINE_MODULES)}
    listed |= {"sandbox_shim.platforms", "sandbox_shim.platforms.select"}  # the way in: read as met
    assert listed - ours == set(), "read ahead but not imported: drop them from CONFINE_PATH"
    assert ours - listed == set(), "imported but not read ahead: add them to CONFINE_PATH"
    extensions = {m for m in loaded - ours if m not in sys.builtin_module_names and _is_extension(m)}
    builtin = set(sys.builtin_module_names)
    assert extensions - builtin == set(cli.CONFINE_EXTENSIONS) - builtin


def _is_extension(name: str) -> bool:
    import importlib.util

    spec = importlib.util.find_spec(name)
    return spec is not None and spec.origin is not None and spec.origin.endswith(".so")


def test_read_ahead_paths_are_where_the_interpreter_reads_them() -> None:
    import importlib.util

    from sandbox_shim import _lazy, cli

    paths = _lazy.module_bytecode(cli.CONFINE_PATH, cli.CONFINE_EXTENSIONS)
    assert cli.__file__ is not None
    assert _lazy.module_bytecode(["cli/__init__"]) == [importlib.util.cache_from_source(cli.__file__)]
    for ext in cli.CONFINE_EXTENSIONS:
        if ext in sys.builtin_module_names:
            continue
        spec = importlib.util.find_spec(ext)
        assert spec is not None and spec.origin in paths  # the very file the import opens
    missing = [p for p in paths if not os.path.exists(p)]
    assert len(missing) < len(paths)  # control: bytecode was written for most of them already


def test_read_ahead_skips_what_it_cannot_open(tmp_path: Path) -> None:
    from sandbox_shim import _lazy

    f = tmp_path / "f"
    f.write_bytes(b"x" * 4096)
    _lazy.read_ahead([str(tmp_path / "missing"), str(tmp_path), str(f)], limit=4096)  # no raise
    assert f.read_bytes() == b"x" * 4096


def build_elf(is64: bool, little: bool, interp: str, needed: list[str], runpath: str) -> bytes:
    """A minimal ELF file (elf(5)): PT_INTERP, one PT_LOAD mapping the file at 0, PT_DYNAMIC with
    DT_NEEDED entries, DT_RUNPATH, DT_STRTAB and DT_NULL."""
    import struct

    e = "<" if little else ">"
    ehsize, phentsize = (64, 56) if is64 else (52, 32)
    phoff = ehsize
    interp_off = phoff + 3 * phentsize
    interp_b = interp.encode() + b"\0"
    strtab_off = interp_off + len(interp_b)
    strtab = b"\0"
    offs = []
    for s in [*needed, runpath]:
        offs.append(len(strtab))
        strtab += s.encode() + b"\0"
    dyn_off = strtab_off + len(strtab)
    dyn = [(1, o) for o in offs[:-1]] + [(29, offs[-1]), (5, strtab_off), (0, 0)]
    dyn_fmt = e + ("qQ" if is64 else "iI")
    dyn_b = b"".join(struct.pack(dyn_fmt, t, v) for t, v in dyn)
    total = dyn_off + len(dyn_b)
    ident = b"\x7fELF" + bytes([2 if is64 else 1, 1 if little else 2, 1]) + b"\0" * 9
    if is64:
        ehdr = ident + struct.pack(
            e + "HHIQQQIHHHHHH", 3, 62, 1, 0, phoff, 0, 0, ehsize, phentsize, 3, 0, 0, 0
        )
        ph = e + "IIQQQQQQ"
        phdrs = [
            struct.pack(ph, 3, 4, interp_off, interp_off, interp_off, len(interp_b), len(interp_b), 1),
            struct.pack(ph, 1, 5, 0, 0, 0, total, total, 4096),
            struct.pack(ph, 2, 6, dyn_off, dyn_off, dyn_off, len(dyn_b), len(dyn_b), 8),
        ]
    else:
        ehdr = ident + struct.pack(
            e + "HHIIIIIHHHHHH", 3, 3, 1, 0, phoff, 0, 0, ehsize, phentsize, 3, 0, 0, 0
        )
        ph = e + "IIIIIIII"
        phdrs = [
            struct.pack(ph, 3, interp_off, interp_off, interp_off, len(interp_b), len(interp_b), 4, 1),
            struct.pack(ph, 1, 0, 0, 0, total, total, 5, 4096),
            struct.pack(ph, 2, dyn_off, dyn_off, dyn_off, len(dyn_b), len(dyn_b), 6, 4),
        ]
    out = ehdr + b"".join(phdrs) + interp_b + strtab + dyn_b
    assert len(out) == total
    return out


@pytest.mark.parametrize("is64", [True, False])
@pytest.mark.parametrize("little", [True, False])
def test_elf_reader_every_class_and_byte_order(tmp_path: Path, is64: bool, little: bool) -> None:
    """``readset.elf_dynamic`` reads ELF with int.from_bytes (no ``struct`` import on the way)."""
    from sandbox_shim.hardening import readset

    f = tmp_path / "prog"
    data = build_elf(is64, little, "/opt/ld.so", ["libfoo.so.1", "libbar.so"], "$ORIGIN/../lib:/opt/x")
    f.write_bytes(data)
    assert readset.elf_dynamic(str(f)) == (
        "/opt/ld.so",
        ["libfoo.so.1", "libbar.so"],
        [],
        ["$ORIGIN/../lib", "/opt/x"],
    )
    for cut in (20, 51, 57, 100, len(data) - 20):  # truncated: None or what is there, never a raise
        f.write_bytes(data[:cut])
        got = readset.elf_dynamic(str(f))
        assert got is None or got[0] in (None, "/opt/ld.so")
    f.write_bytes(b"\x7fELF\x03" + data[5:])  # no such class
    assert readset.elf_dynamic(str(f)) is None


def test_landlock_abi_is_kept_for_the_boot(tmp_path: Path) -> None:
    """The ABI is asked of the kernel once per boot, then read from the state directory."""
    from sandbox_shim.platforms.linux import confine_state, landlock

    env = {"XDG_STATE_HOME": str(tmp_path / "state"), "HOME": str(tmp_path)}
    real = landlock.abi_version()
    assert confine_state.landlock_abi(env) == real  # control: the kernel's answer, now kept
    kept = tmp_path / "state" / "sandbox-shim" / "landlock-abi"
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert kept.read_text() == f"{boot} {real}\n"
    kept.write_text(f"{boot} {real + 3}\n")  # what is kept for this boot is what is used
    assert confine_state.landlock_abi(env) == real + 3
    kept.write_text(f"another-boot {real + 3}\n")  # another boot's value: asked again, kept anew
    assert confine_state.landlock_abi(env) == real
    assert kept.read_text() == f"{boot} {real}\n"
    kept.write_text(f"{boot} {real + 3}\n")
    # a read-write path around the state directory: the confined program could have written it
    assert confine_state.landlock_abi(env, [str(tmp_path)]) == real
    assert confine_state.landlock_abi(None) == real


def test_node_packages_read_without_json_and_survive_a_nesting_bomb(tmp_path: Path) -> None:
    """package.json is read with fastjson (no json, re, enum on a node tool's start-up); one nested
    past the interpreter's limit (a confined run can write one) is a package not followed."""
    nm = tmp_path / "proj" / "node_modules"
    for name, deps in (("a", {"b": "1"}), ("b", {"c": "1"}), ("c", {})):
        (nm / name).mkdir(parents=True)
        (nm / name / "package.json").write_text(json.dumps({"name": name, "dependencies": deps}))
    (nm / "a" / "cli.js").write_text("#!/usr/bin/env node\n")
    probe = (
        "import sys\n"
        "from sandbox_shim.hardening import readset\n"
        f"print(readset.node_packages({str(nm / 'a' / 'cli.js')!r}), "
        "'json' in sys.modules, 're' in sys.modules)"
    )
    env = {**os.environ, "PYTHONPATH": str(PACKAGE_ROOT)}  # -S: no site, so no editable install's .pth
    r = subprocess.run(
        [sys.executable, "-S", "-c", probe], capture_output=True, text=True, timeout=60, check=True, env=env
    )
    assert r.stdout.split() == [f"['{nm / 'a'}',", f"'{nm / 'b'}',", f"'{nm / 'c'}']", "False", "False"]
    (nm / "b" / "package.json").write_text("[" * 200_000 + "]" * 200_000)
    from sandbox_shim.hardening import readset

    assert readset.node_packages(str(nm / "a" / "cli.js")) == [str(nm / "a"), str(nm / "b")]


WAIT_GC = """
import gc, os, sys
from sandbox_shim.hardening import confine_launch

class Spec(dict):
    egress = None
    placeholders = ("x",)  # something to release: the command is waited for, not exec'd
    snapshot = None
    report = None

    def release(self):
        with open(sys.argv[1], "w") as fh:
            fh.write("%d %d" % (gc.isenabled(), os.getpid() == PARENT))
        return []

PARENT = os.getpid()
gc.disable()  # as the CLI leaves it for confine (cli._no_cycle_collection)
spec = Spec(cmd="/bin/sh", args=["-c", "exit 3"], env={"PATH": "/usr/bin:/bin"}, cd="/")
sys.exit(confine_launch.run_spec(spec))
"""


def test_the_process_that_waits_for_the_command_collects_cycles(tmp_path: Path) -> None:
    """The CLI runs confine without the cyclic collector until the command starts; the process that
    then waits for it (serving an egress proxy, maybe for hours) turns the collector back on, and
    releases the spec itself, after the command, before it exits with the command's status."""
    out = tmp_path / "gc"
    r = subprocess.run([sys.executable, "-c", WAIT_GC, str(out)], timeout=60)
    assert r.returncode == 3  # the command's own status
    assert out.read_text() == "1 1"  # enabled, and released by this process before it exited
