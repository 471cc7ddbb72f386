"""The lifecycle verbs load nothing heavy: no click, jsonschema, psutil, pyroute2, pyseccomp, ctypes;
nor json, re, enum, signal, contextlib, collections or functools (``fastjson``, ``_signal`` and
``scoped`` do their part at no import cost).

Orchestrators call state/start/kill/delete three or four times per container, and each is a new
process: on this VM click costs ~60 ms, jsonschema ~140, psutil ~40, pyroute2 ~290 against ~11 ms for
the bare interpreter (ARCHITECTURE §1).  Each verb runs here through the real CLI entry point on a
real sandbox; a small wrapper records ``sys.modules`` when the verb exits (the CLI ends lifecycle verbs
with ``os._exit``, so the wrapper hooks that as well as ``atexit``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import BundleFactory, run_shim, wait_pid

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or os.geteuid() != 0 or not Path("/usr/bin/bwrap").exists(),
    reason="needs Linux, root and bwrap",
)

HEAVY = ("click", "jsonschema", "fastjsonschema", "psutil", "pyroute2", "pyseccomp", "ctypes")
# standard-library modules that cost milliseconds and that no lifecycle verb needs on its own path:
# typing, dataclasses (with inspect, ast, dis, tokenize under it), shutil (with bz2, lzma), and
# subprocess and tempfile (running hooks only); contextlib, collections and functools (~2-3 ms together:
# the state store's context managers are ``scoped``'s, telemetry copies what functools.wraps did)
STDLIB_UNUSED = (
    "typing",
    "dataclasses",
    "inspect",
    "ast",
    "shutil",
    "bz2",
    "lzma",
    "subprocess",
    "tempfile",
    "json",
    "re",
    "enum",
    "signal",
    "hashlib",
    "threading",
    "contextlib",
    "collections",
    "collections.abc",
    "functools",
    "operator",
    "reprlib",
)

WRAPPER = """
import atexit, os, sys
out = sys.argv.pop(1)
real_exit = os._exit
def record():
    names = sorted(sys.modules)
    with open(out, "w") as fh:
        fh.write("\\n".join(names))
def fast_exit(code):
    record()
    real_exit(code)
os._exit = fast_exit
atexit.register(record)
from sandbox_shim.cli import main
sys.argv[0] = "sandbox-shim"
main()
"""


def loaded(tmp_path: Path, root: Path, *args: str) -> set[str]:
    out = tmp_path / "modules.json"
    err = tmp_path / "stderr.txt"
    with open(err, "w") as fh:  # a file, not a pipe: a sandbox made by create keeps its stderr open
        run = subprocess.run(
            [sys.executable, "-c", WRAPPER, str(out), "--root", str(root), *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=fh,
            timeout=60,
        )
    assert run.returncode == 0, err.read_text()
    return set(out.read_text().split("\n"))


def heavy(mods: set[str], allowed: tuple[str, ...] = ()) -> list[str]:
    return sorted(m for m in mods if m.split(".")[0] in HEAVY and m.split(".")[0] not in allowed)


def test_lifecycle_verbs_load_nothing_heavy(
    tmp_path: Path, state_root: Path, make_bundle: BundleFactory
) -> None:
    bundle = make_bundle(args=["sleep", "30"])
    pid_file = tmp_path / "pid"
    created = run_shim(state_root, "create", "--bundle", str(bundle), "--pid-file", str(pid_file), "s1")
    assert created.returncode == 0, created.stderr
    found = {}
    found["state"] = heavy(loaded(tmp_path, state_root, "state", "s1"))
    # start re-checks capabilities from ROOT/.capabilities (written by create's probes)
    found["start"] = heavy(loaded(tmp_path, state_root, "start", "s1"))
    found["kill"] = heavy(loaded(tmp_path, state_root, "kill", "s1", "KILL"))
    assert wait_pid(int(pid_file.read_text())) == 137
    found["delete"] = heavy(loaded(tmp_path, state_root, "delete", "s1"))
    assert found == {"state": [], "start": [], "kill": [], "delete": []}


def test_lifecycle_verbs_skip_costly_stdlib_modules(
    tmp_path: Path, state_root: Path, make_bundle: BundleFactory
) -> None:
    """No typing, dataclasses, shutil; no subprocess/tempfile either (a bundle without hooks)."""
    bundle = make_bundle(args=["sleep", "30"])
    pid_file = tmp_path / "pid"
    created = run_shim(state_root, "create", "--bundle", str(bundle), "--pid-file", str(pid_file), "s3")
    assert created.returncode == 0, created.stderr
    mods = {
        "state": loaded(tmp_path, state_root, "state", "s3"),
        "start": loaded(tmp_path, state_root, "start", "s3"),
        "kill": loaded(tmp_path, state_root, "kill", "s3", "KILL"),
    }
    assert wait_pid(int(pid_file.read_text())) == 137
    mods["delete"] = loaded(tmp_path, state_root, "delete", "s3")
    found = {verb: sorted(m for m in names if m in STDLIB_UNUSED) for verb, names in mods.items()}
    assert found == {"state": [], "start": [], "kill": [], "delete": []}
    # nor our own modules a verb does not use: the hooks runner (no hooks here), create's residue helpers,
    # telemetry (no handler attached without --debug)
    residue = "sandbox_shim.platforms.linux.residue"
    ours = {"sandbox_shim.hooks", "sandbox_shim.telemetry", residue}
    unused = {verb: sorted(ours & names) for verb, names in mods.items()}
    assert unused == {"state": [], "start": [], "kill": [], "delete": [residue]}  # delete removes residue
    # state of a created sandbox (its process held on the FIFO) and kill of a running one (a signal to its
    # process) need no cgroup manager nor the mount table; start (the capability check reads the cgroup
    # layout) and delete (it removes the cgroups) load them: the control
    cgroups = {
        verb: any(m.startswith("sandbox_shim.platforms.linux.cgroups") for m in mods[verb]) for verb in mods
    }
    assert cgroups == {"state": False, "start": True, "kill": False, "delete": True}
    # the control: the wrapper does see what a verb imports (our own modules, the C parts fastjson uses)
    assert {"sandbox_shim.api", "sandbox_shim.state", "sandbox_shim.fastjson", "_json"} <= mods["state"]
    assert not (state_root / "s3").exists()  # delete removed the state directory all the same


#: our modules each lifecycle verb may load (a bundle without hooks, network or console), as measured;
#: a module added to a verb's path fails here until it is listed with a reason.  Every verb: the CLI's
#: dispatch and output, the API, the state store and the Linux mechanism.
VERB_COMMON = {
    f"sandbox_shim.{m}"
    for m in (
        "_lazy",
        "fastjson",
        "values",
        "errors",
        "posix",
        "durable",
        "procstat",
        "scoped",
        "state",
        "mechanism",
        "api",
        "cli",
        "cli.output",
        "cli.flags",
        "cli.lifecycle",
        "platforms",
        "platforms.select",
        "platforms.linux",
        "platforms.linux.process",
        "platforms.linux.mechanism",
    )
} | {"sandbox_shim"}
#: the cgroup layout and the mount table it is read from (no manager: ``v1``/``v2``/``systemd`` absent)
CGROUP_LAYOUT = {
    f"sandbox_shim.{m}"
    for m in (
        "mountinfo",
        "platforms.linux.cgroups",
        "platforms.linux.cgroups.base",
        "platforms.linux.cgroups.detect",
    )
}
#: a manager of this host's hierarchy (v1 here, v2 in the VM lane)
CGROUP_MANAGER = {f"sandbox_shim.platforms.linux.cgroups.{v}" for v in ("v1", "v2")}
#: the capability cache start re-checks (its key: host facts, bwrap's identity, the cgroup layout)
CAPABILITY_CACHE = {
    f"sandbox_shim.{m}"
    for m in (
        "capability",
        "probes",
        "probes.cache",
        "probes.proc",
        "platforms.linux.locate",
        "platforms.linux.hostkey",
    )
}
VERB_ALLOWED = {
    "state created": VERB_COMMON,  # the process held on the start FIFO: no freezer to read
    "start": VERB_COMMON | CGROUP_LAYOUT | CGROUP_MANAGER | CAPABILITY_CACHE,  # the freezer: paused?
    "state running": VERB_COMMON | CGROUP_LAYOUT | CGROUP_MANAGER,  # the freezer: paused or running
    "kill": VERB_COMMON,  # a signal to a live process, paused or not
    "delete": VERB_COMMON
    | CGROUP_LAYOUT
    | CGROUP_MANAGER
    | {
        "sandbox_shim.platforms.linux.residue",  # the cgroup records and parents
        "sandbox_shim.platforms.linux.tree_claims",  # the sandbox's tree claim, dropped
    },
}


def test_each_lifecycle_verb_loads_only_its_listed_modules(
    tmp_path: Path, state_root: Path, make_bundle: BundleFactory
) -> None:
    """Our modules on each verb's path are a subset of ``VERB_ALLOWED``; the control is that each verb
    does load the common set (the wrapper saw its path)."""
    bundle = make_bundle(args=["sleep", "30"])
    pid_file = tmp_path / "pid"
    created = run_shim(state_root, "create", "--bundle", str(bundle), "--pid-file", str(pid_file), "s5")
    assert created.returncode == 0, created.stderr
    mods = {"state created": loaded(tmp_path, state_root, "state", "s5")}
    mods["start"] = loaded(tmp_path, state_root, "start", "s5")
    mods["state running"] = loaded(tmp_path, state_root, "state", "s5")
    mods["kill"] = loaded(tmp_path, state_root, "kill", "s5", "KILL")
    assert wait_pid(int(pid_file.read_text())) == 137
    mods["delete"] = loaded(tmp_path, state_root, "delete", "s5")
    ours = {verb: {m for m in names if m.split(".")[0] == "sandbox_shim"} for verb, names in mods.items()}
    extra = {verb: sorted(ours[verb] - VERB_ALLOWED[verb]) for verb in ours}
    assert extra == {verb: [] for verb in ours}
    assert all(VERB_COMMON <= names for names in ours.values())  # the control
    assert not (state_root / "s5").exists()


#: records at the verb's exit whether the cyclic garbage collector is on ("1") or off ("0")
GC_WRAPPER = WRAPPER.replace('fh.write("\\n".join(names))', "import gc; fh.write(str(int(gc.isenabled())))")


def test_lifecycle_verbs_run_without_cycle_collection_and_other_commands_with_it(
    tmp_path: Path, state_root: Path
) -> None:
    """A lifecycle verb's process turns the cyclic collector off (``cli._no_cycle_collection``: ~3 ms
    of create's CPU); a command that may run long (``list``, through click) keeps it, and so does the
    library (the test process itself)."""
    import gc

    assert "fh.write(str(int(gc.isenabled())))" in GC_WRAPPER  # the control: the wrapper was rewritten
    out = tmp_path / "gc.txt"

    def gc_on(*args: str) -> str:
        argv = [sys.executable, "-c", GC_WRAPPER, str(out), "--root", str(state_root), *args]
        subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
        return out.read_text()

    assert gc_on("state", "nope") == "0"  # an unknown id: the verb still ran, and exited with 6
    assert gc_on("list") == "1"
    assert gc.isenabled()


def test_start_reads_the_capability_cache_and_loads_no_ctypes(
    tmp_path: Path, state_root: Path, make_bundle: BundleFactory
) -> None:
    bundle = make_bundle(args=["sleep", "30"])
    pid_file = tmp_path / "pid"
    created = run_shim(state_root, "create", "--bundle", str(bundle), "--pid-file", str(pid_file), "s2")
    assert created.returncode == 0, created.stderr
    try:
        assert heavy(loaded(tmp_path, state_root, "start", "s2")) == []
    finally:
        run_shim(state_root, "delete", "--force", "s2")
        wait_pid(int(pid_file.read_text()))


def test_create_loads_no_cli_framework_schema_library_or_netlink(
    tmp_path: Path, state_root: Path, make_bundle: BundleFactory
) -> None:
    """create needs the seccomp binding (and ctypes under it) to compile the filter; nothing else heavy."""
    bundle = make_bundle(args=["sleep", "30"])
    mods = loaded(tmp_path, state_root, "create", "--bundle", str(bundle), "c1")
    try:
        assert heavy(mods, allowed=("pyseccomp", "ctypes")) == []
        assert "sandbox_shim.platforms.linux.plan" in mods  # the control: the wrapper saw create's own path
    finally:
        run_shim(state_root, "delete", "--force", "c1")


#: what ``create`` stopped loading (a bundle without hooks or a network): the result types are value
#: classes (``values.Value``, no dataclasses with inspect, ast, dis and tokenize under them), typing
#: only under TYPE_CHECKING, SHA-256 from the C module (no hashlib and OpenSSL), trusted JSON through
#: ``fastjson`` and config.json through ``jsonguard``'s C-scanner path (no json); ``re``/``enum`` stay
#: (the generated validator's patterns), and so do ``subprocess`` and ``ctypes`` (bwrap's spawn).
CREATE_UNUSED = (
    "typing",
    "dataclasses",
    "inspect",
    "ast",
    "dis",
    "tokenize",
    "hashlib",
    "_hashlib",
    "json",
    "shutil",
    "tempfile",
    "bz2",
    "lzma",
    "pyseccomp",
)


def test_create_skips_costly_stdlib_modules(
    tmp_path: Path, state_root: Path, make_bundle: BundleFactory
) -> None:
    bundle = make_bundle(args=["sleep", "30"])
    # the first create compiles the seccomp programs into ROOT/.seccomp (pyseccomp); later ones read them
    first = run_shim(state_root, "create", "--bundle", str(bundle), "c0")
    assert first.returncode == 0, first.stderr
    run_shim(state_root, "delete", "--force", "c0")
    mods = loaded(tmp_path, state_root, "create", "--bundle", str(bundle), "c2")
    try:
        assert sorted(m for m in mods if m in CREATE_UNUSED) == []
        # the control: the wrapper saw create's own path, the parts that replace those modules included
        assert {"sandbox_shim.platforms.linux.plan", "sandbox_shim.values", "_sha256", "_json"} <= mods
    finally:
        run_shim(state_root, "delete", "--force", "c2")


def test_an_error_on_a_verbs_path_loads_no_json_either(tmp_path: Path, state_root: Path) -> None:
    """The one-line JSON error (``--log-format json``) is written by fastjson too."""
    out = tmp_path / "modules.txt"
    argv = [
        sys.executable,
        "-c",
        WRAPPER,
        str(out),
        "--root",
        str(state_root),
        "--log-format",
        "json",
        "state",
        "nope",
    ]
    run = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert run.returncode == 6 and json.loads(run.stderr)["level"] == "error", run.stderr
    mods = set(out.read_text().split("\n"))
    assert sorted(m for m in mods if m in ("json", "re", "enum", "signal", "click")) == []
    assert "sandbox_shim.cli.output" in mods


#: records at the exec, in the process that execs (not in the child that outlives it)
CONFINE_WRAPPER = WRAPPER.replace(
    "os._exit = fast_exit\n",
    "real_execve = os.execve\ndef execve(*a):\n    record()\n    real_execve(*a)\nos.execve = execve\n",
).replace("atexit.register(record)\n", "")


def test_confine_loads_nothing_heavy_on_its_way_to_the_exec(tmp_path: Path) -> None:
    """confine runs once per confined command: the library it calls (``hardening/confine_launch``)
    loads no click, jsonschema, json, enum, re or typing before it execs."""
    out = tmp_path / "modules.txt"
    work = tmp_path / "work"
    work.mkdir()
    argv = [sys.executable, "-c", CONFINE_WRAPPER, str(out), "confine", "--permit-path", str(work)]
    argv += ["--", "true"]
    run = subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert run.returncode == 0, run.stderr
    mods = set(out.read_text().split("\n"))
    assert "sandbox_shim.hardening.confine_launch" in mods  # the control: the wrapper saw the exec
    assert sorted(m for m in mods if m.split(".")[0] in (*HEAVY, "json", "re", "enum", "typing")) == []


def test_telemetry_unloaded_by_default_still_reports_with_debug(tmp_path: Path, state_root: Path) -> None:
    """The API looks telemetry up when a call is made: loaded by ``--debug --log-format json`` (which
    attaches the log handler), the verb's events reach the log; the control is the plain run above."""
    log = tmp_path / "log.jsonl"
    p = run_shim(state_root, "--debug", "--log", str(log), "--log-format", "json", "state", "nope")
    assert p.returncode == 6, p.stderr
    msgs = [json.loads(line)["msg"] for line in log.read_text().splitlines()]
    assert msgs[:2] == ["sandbox_shim.status.start", "sandbox_shim.status.exception"], msgs
