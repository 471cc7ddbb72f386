"""The CLI's one error boundary and one definition of the global flags; a full or read-only host."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import base_config, cgroup_dirs, run_shim, shim_cmd

linux_root = pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.geteuid() != 0, reason="needs Linux, root, bwrap and cgroups"
)


@pytest.mark.parametrize("verb", [["list"], ["state", "nope"], ["capabilities", "--format", "json"]])
def test_global_flags_are_one_definition(tmp_path: Path, verb: list[str]) -> None:
    want = run_shim(tmp_path / "s", *verb).returncode
    for flags in (
        ["--rootless", "true"],
        ["--rootless=auto"],
        ["--systemd-cgroup"],
        ["--criu", "x"],
        ["--log-format", "json"],
        ["--debug"],
    ):
        r = run_shim(tmp_path / "s", *flags, *verb)
        assert r.returncode == want, (flags, verb, r.stderr)
    bad = run_shim(tmp_path / "s", "--log-format", "yaml", *verb)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


def test_usage_errors_are_one_line_with_status_2(tmp_path: Path) -> None:
    for args in (
        ["list", "--bogus"],
        ["--bogus"],
        ["create"],
        ["kill", "x", "NOSUCHSIG"],
        ["no-such-command"],
    ):
        r = run_shim(tmp_path / "s", *args)
        assert r.returncode == 2, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, (args, r.stderr)
        j = run_shim(tmp_path / "s", "--log-format", "json", *args)
        assert j.returncode == 2 and json.loads(j.stderr)["error"] == "usage", (args, j.stderr)


def test_a_state_root_that_cannot_be_read_is_status_11_in_one_line(tmp_path: Path) -> None:
    root = tmp_path / "afile"
    root.write_text("not a directory")
    r = run_shim(root, "list")
    assert r.returncode == 11, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "cannot read state" in r.stderr
    assert "Traceback" not in r.stderr
    j = subprocess.run(
        [*shim_cmd(root, "list")[:-1], "--log-format", "json", "list"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert j.returncode == 11 and json.loads(j.stderr)["error"] == "state_unreadable"


@pytest.mark.parametrize("verb", [["features"], ["list"], ["state", "nope"]])
def test_output_that_cannot_be_written_is_status_74_and_errors_keep_their_status(
    tmp_path: Path, verb: list[str]
) -> None:
    root = tmp_path / "root"
    with open("/dev/full", "w") as full:  # control: the same verb to a writable stdout is 0 (or 6)
        r = subprocess.run(shim_cmd(root, *verb), stdout=full, stderr=subprocess.PIPE, text=True, timeout=60)
    ok = subprocess.run(shim_cmd(root, *verb), capture_output=True, text=True, timeout=60)
    if ok.returncode == 0:
        assert r.returncode == 74 and r.stderr.count("\n") == 1 and "could not write the output" in r.stderr
    else:  # an error writes no output: its own status, stdout full or closed, stderr closed
        assert r.returncode == ok.returncode == 6
        closed = subprocess.run(
            shim_cmd(root, *verb),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            timeout=60,
            close_fds=True,
            preexec_fn=lambda: os.close(2),
        )
        assert closed.returncode == 6
    closed_out = subprocess.run(
        shim_cmd(root, *verb), stderr=subprocess.PIPE, text=True, timeout=60, preexec_fn=lambda: os.close(1)
    )
    assert closed_out.returncode == (74 if ok.returncode == 0 else 6), closed_out.stderr


@contextlib.contextmanager
def _tmpfs(where: Path, size: str) -> Iterator[Path]:
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def _fill(d: Path) -> None:
    with open(d / "filler", "wb") as fh, contextlib.suppress(OSError):
        while True:
            fh.write(b"\0" * 65536)
            fh.flush()


@linux_root
def test_a_full_state_root_keeps_the_previous_state(make_bundle: Any, tmp_path: Path) -> None:
    bundle = make_bundle(base_config(["sleep", "600"]))
    with _tmpfs(tmp_path / "root", "2m") as root:
        made = run_shim(root, "create", "--bundle", str(bundle), "full", stdin=subprocess.DEVNULL)
        assert made.returncode == 0, made.stderr
        before = (root / "full" / "state.json").read_text()
        _fill(root)
        r = run_shim(root, "start", "full")
        assert r.returncode == 11 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert "previous state is kept" in r.stderr
        assert (root / "full" / "state.json").read_text() == before  # never truncated in place
        s = run_shim(root, "state", "full")
        assert s.returncode == 0 and json.loads(s.stdout)["id"] == "full"  # still found, still readable
        c = run_shim(root, "create", "--bundle", str(bundle), "other", stdin=subprocess.DEVNULL)
        assert c.returncode == 11 and "Traceback" not in c.stderr, c.stderr
        assert not (root / "other").exists()
        (root / "filler").unlink()
        assert run_shim(root, "delete", "--force", "full").returncode == 0
        assert run_shim(root, "delete", "--force", "other").returncode == 0
        assert sorted(p.name for p in root.iterdir() if not p.name.startswith(".")) == []


def _read_only(paths: str, argv: list[str]) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` in a private mount namespace where the mounts listed by the shell expression
    ``paths`` are read-only (bind-remounted): the host's own stay writable."""
    script = (
        f'set -e; for m in {paths}; do mount --bind "$m" "$m"; '
        'mount -o remount,bind,ro "$m" "$m"; done; exec "$@"'
    )
    return subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


@linux_root
def test_a_read_only_state_root_gives_one_line(make_bundle: Any, state_root: Path) -> None:
    if shutil.which("unshare") is None:
        pytest.skip("unshare(1) is not installed (util-linux)")
    bundle = make_bundle(base_config(["sleep", "600"]))
    made = run_shim(state_root, "create", "--bundle", str(bundle), "ro", stdin=subprocess.DEVNULL)
    assert made.returncode == 0, made.stderr
    before = (state_root / "ro" / "state.json").read_text()
    for args in (["start", "ro"], ["create", "--bundle", str(bundle), "ro2"]):
        r = _read_only(str(state_root), shim_cmd(state_root, *args))
        assert r.returncode == 11, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, (args, r.stderr)
    assert (state_root / "ro" / "state.json").read_text() == before and not (state_root / "ro2").exists()
    assert json.loads(run_shim(state_root, "state", "ro").stdout)["status"] == "created"
    assert run_shim(state_root, "delete", "--force", "ro").returncode == 0


@linux_root
def test_delete_force_with_read_only_cgroups_kills_the_sandbox(make_bundle: Any, state_root: Path) -> None:
    if shutil.which("unshare") is None:
        pytest.skip("unshare(1) is not installed (util-linux)")
    bundle = make_bundle(base_config(["sleep", "600"]))
    pid_file = state_root.parent / "ro.pid"
    assert (
        run_shim(
            state_root,
            "create",
            "--bundle",
            str(bundle),
            "--pid-file",
            str(pid_file),
            "rocg",
            stdin=subprocess.DEVNULL,
        ).returncode
        == 0
    )
    assert run_shim(state_root, "start", "rocg").returncode == 0
    st = json.loads(run_shim(state_root, "state", "rocg").stdout)
    assert st["status"] == "running"  # the control
    # read-only cgroup hierarchies in a private mount namespace only: the host's stay writable
    mounts = "$(awk '$3 ~ /^cgroup/ {print $2}' /proc/mounts)"
    r = _read_only(mounts, shim_cmd(state_root, "delete", "--force", "rocg"))
    assert r.returncode == 9, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "delete --force" in r.stderr
    for pid in (st["pid"], int(pid_file.read_text())):
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # a monitor re-parented to this (subreaper) test process
        gone = not os.path.exists(f"/proc/{pid}")
        assert gone or Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] == "Z"
    again = run_shim(state_root, "delete", "--force", "rocg")  # writable again: finishes the job
    assert again.returncode == 0, again.stderr
    assert not (state_root / ".cgroups" / "rocg").exists()


# -- every verb takes the same global flags, in runc's position (before the verb) ---------------------
ALL_GLOBALS = [
    "--rootless",
    "true",
    "--systemd-cgroup",
    "--criu=x",
    "--log-format",
    "json",
    "--debug",
    "--rootless=auto",
]
#: each verb on a sandbox that does not exist (or with a missing bundle): one documented status each
CASES: dict[str, list[tuple[list[str], int]]] = {
    "list": [(["list"], 0)],
    "state": [(["state", "nope"], 6)],
    "start": [(["start", "nope"], 6)],
    "kill": [(["kill", "nope", "KILL"], 6)],
    "delete": [(["delete", "nope"], 6)],
    "create": [(["create", "--bundle", "/nonexistent", "nope"], 3)],
    "ps": [(["ps", "nope"], 6)],
    "pause": [(["pause", "nope"], 6)],
    "resume": [(["resume", "nope"], 6)],
    "exec": [(["exec", "nope", "true"], 6)],
    "events": [(["events", "--stats", "nope"], 6)],
    "update": [(["update", "--memory", "1048576", "nope"], 6)],
    "run": [
        (["run", "--bundle", "/nonexistent", "nope"], 3),
        (["run", "-d", "--bundle", "/nonexistent", "nope"], 3),
    ],
    "proxy": [(["proxy", "nope"], 6)],
    "validate": [(["validate", "--bundle", "/nonexistent"], 3)],
    "spec": [(["spec", "--bundle", "/dev/null/x"], 2)],
    "bundle": [(["bundle", "create", "--image", "oci:/nonexistent/img:latest", "/nonexistent/b"], 3)],
    "features": [(["features"], 0)],
    "capabilities": [(["capabilities", "--format", "json"], 0)],
    "conformance": [(["conformance", "--mechanism", "no_such_module:Nothing"], 2)],
    "confine": [(["confine", "--permit-path", "/nonexistent", "--", "true"], 2)],
    "checkpoint": [(["checkpoint", "nope"], 4)],
    "restore": [(["restore", "nope"], 4)],
}


def _verbs() -> list[tuple[list[str], int]]:
    """Every verb of the CLI's own command table (the lifecycle fast path and the click group), each
    with its cases; a verb without one runs as ``VERB --help`` (0): a new verb is covered unedited."""
    from sandbox_shim.cli import FAST_VERBS
    from sandbox_shim.cli.app import cli

    names = sorted(FAST_VERBS | set(cli.commands))
    return [c for n in names for c in CASES.get(n, [([n, "--help"], 0)])] + [
        (["--version"], 0),
        (["--help"], 0),
    ]


VERBS = _verbs()


def test_the_verb_list_is_the_command_table() -> None:
    names = {v[0] for v, _ in VERBS}
    assert {"spec", "bundle", "capabilities", "conformance", "confine", "create", "exec"} <= names
    assert set(CASES) <= names, "a case for a verb the CLI does not have"


@pytest.mark.parametrize(("verb", "status"), VERBS, ids=[" ".join(v) for v, _ in VERBS])
def test_every_verb_takes_every_global_flag(tmp_path: Path, verb: list[str], status: int) -> None:
    log = tmp_path / "log.json"
    plain = run_shim(tmp_path / "s", *verb)
    assert plain.returncode == status, plain.stderr
    flagged = run_shim(tmp_path / "s", *ALL_GLOBALS, "--log", str(log), *verb)
    assert flagged.returncode == status, flagged.stderr
    assert "Traceback" not in plain.stderr + flagged.stderr
    if status:
        assert plain.stdout == "", plain.stdout  # an error prints no partial answer (ps: no header)
        assert len(plain.stderr.strip().splitlines()) == 1, plain.stderr
        rec = json.loads(log.read_text().strip().splitlines()[-1])  # runc's record shape, for podman
        assert rec["level"] == "error" and rec["msg"] and rec["time"].endswith("Z"), rec
        j = run_shim(tmp_path / "s", "--log-format=json", *verb)
        assert j.returncode == status and json.loads(j.stderr)["level"] == "error", j.stderr
    if verb[0] not in ("--version", "--help", "checkpoint", "restore"):  # those take any arguments
        # after the verb a global flag is that verb's unknown flag, as with runc: a usage error
        late = run_shim(tmp_path / "s", *verb[:1], "--rootless", "true", *verb[1:])
        assert late.returncode == 2 and len(late.stderr.strip().splitlines()) == 1, late.stderr


INJECT = """
import sys
from sandbox_shim import api
target, exc = sys.argv.pop(1), sys.argv.pop(1)
def broken(*a, **k):
    raise {"KeyError": KeyError, "RuntimeError": RuntimeError, "OSError": OSError}[exc]("injected")
setattr(api, target, broken)
from sandbox_shim.cli import main
main(sys.argv[1:])
"""


@pytest.mark.parametrize(
    ("target", "exc", "verb"),
    [
        ("status", "KeyError", ["state", "x"]),
        ("list_sandboxes", "RuntimeError", ["list"]),
        ("default_mechanism", "OSError", ["ps", "x"]),
        ("default_mechanism", "KeyError", ["exec", "x", "true"]),
        ("signal", "RuntimeError", ["kill", "x", "KILL"]),
        ("destroy", "KeyError", ["delete", "x"]),
    ],
)
def test_the_catch_all_turns_an_injected_failure_into_status_70(
    tmp_path: Path, target: str, exc: str, verb: list[str]
) -> None:
    base = [sys.executable, "-c", INJECT, target, exc, "--root", str(tmp_path / "s")]

    def shim(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*base, *args], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
        )

    r = shim(*verb)
    assert r.returncode == 70, r.stderr
    assert r.stderr.count("\n") == 1 and "injected" in r.stderr and "--debug" in r.stderr
    assert "Traceback" not in r.stderr
    d = shim("--debug", *verb)
    assert d.returncode == 70 and "Traceback" in d.stderr and "injected" in d.stderr
    j = shim("--log-format", "json", *verb)
    rec = json.loads(j.stderr)
    assert j.returncode == 70 and rec["error"] == "internal" and rec["level"] == "error", j.stderr
    log = tmp_path / "log.json"
    lg = shim("--log", str(log), "--log-format", "json", *verb)
    assert lg.returncode == 70 and json.loads(log.read_text())["error"] == "internal"


NO_SIGCHLD = """
import sys, _signal
del _signal.SIGCHLD, _signal.pthread_sigmask  # as on Windows: neither exists
from sandbox_shim.cli import main
main(sys.argv[1:])
"""


def test_main_runs_without_sigchld_or_signal_masks(tmp_path: Path) -> None:
    """On an OS without SIGCHLD and pthread_sigmask (Windows) main() still answers; the reset of the
    inherited signal state is guarded and inside the boundary."""
    root = str(tmp_path / "s")
    control = run_shim(tmp_path / "s", "list")
    assert control.returncode == 0, control.stderr
    for verb in (["list"], ["state", "nope"]):
        r = subprocess.run(
            [sys.executable, "-c", NO_SIGCHLD, "--root", root, *verb],
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
        assert r.returncode == run_shim(tmp_path / "s", *verb).returncode, r.stderr
        assert "Traceback" not in r.stderr and "AttributeError" not in r.stderr


def test_exec_capabilities_as_a_string_are_refused_with_their_pointer(tmp_path: Path) -> None:
    proc = tmp_path / "process.json"
    proc.write_text(
        json.dumps(
            {
                "args": ["true"],
                "cwd": "/",
                "capabilities": {"effective": "CAP_KILL", "bounding": ["CAP_KILL"]},
            }
        )
    )
    r = run_shim(tmp_path / "s", "exec", "--process", str(proc), "--detach", "nope")
    assert r.returncode == 3, r.stderr  # refused before the sandbox is looked up: the request is wrong
    assert "/process/capabilities/effective" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    proc.write_text(json.dumps({"args": ["true"], "capabilities": {"effective": ["CAP_KILL"]}}))
    control = run_shim(tmp_path / "s", "exec", "--process", str(proc), "--detach", "nope")
    assert control.returncode == 6, control.stderr  # the same request with a list gets to the lookup


def test_the_loopback_rule_is_the_librarys(tmp_path: Path) -> None:
    from sandbox_shim import api, proxy
    from sandbox_shim.errors import UsageError

    mech = api.default_mechanism(str(tmp_path / "s"))
    for listen in (("0.0.0.0", 0), "192.0.2.1:80", "[::]:0", "localhost:80", "127.0.0.1:70000"):
        with pytest.raises(UsageError):
            proxy.serve(mech, "nope", listen)
    assert proxy.loopback_listen("[::1]:0") == ("::1", 0)
    assert proxy.loopback_listen(("127.0.0.2", 8080)) == ("127.0.0.2", 8080)
    r = run_shim(tmp_path / "s", "proxy", "nope", "--listen", "0.0.0.0:8080")
    assert r.returncode == 2 and "loopback" in r.stderr, r.stderr
    control = run_shim(tmp_path / "s", "proxy", "nope", "--listen", "127.0.0.1:0")
    assert control.returncode == 6, control.stderr


@linux_root
def test_run_honours_the_wall_clock_and_detach_refuses_it(make_bundle: Any, state_root: Path) -> None:
    cfg = base_config(["sleep", "30"])
    cfg.setdefault("annotations", {})["sandbox-shim.wall-clock-seconds"] = "1"
    bundle = make_bundle(cfg)
    import time

    t0 = time.monotonic()
    r = run_shim(state_root, "run", "--bundle", str(bundle), "wall", stdin=subprocess.DEVNULL)
    assert r.returncode == 10 and "wall_clock" in r.stderr, r.stderr  # LimitExceeded, as the library's
    assert time.monotonic() - t0 < 20 and not (state_root / "wall").exists()
    d = run_shim(state_root, "run", "-d", "--bundle", str(bundle), "wall-d", stdin=subprocess.DEVNULL)
    assert d.returncode == 3 and "/annotations/sandbox-shim.wall-clock-seconds" in d.stderr, d.stderr
    assert not (state_root / "wall-d").exists() and cgroup_dirs("wall-d") == []
    del cfg["annotations"]["sandbox-shim.wall-clock-seconds"]
    (bundle / "config.json").write_text(json.dumps(cfg))
    ok = run_shim(state_root, "run", "-d", "--bundle", str(bundle), "wall-d", stdin=subprocess.DEVNULL)
    assert ok.returncode == 0, ok.stderr  # the control: the same bundle without the limit runs detached
    assert json.loads(run_shim(state_root, "state", "wall-d").stdout)["status"] == "running"
    assert run_shim(state_root, "delete", "--force", "wall-d").returncode == 0


@linux_root
def test_lifecycle_output_survives_the_fast_exit(make_bundle: Any, state_root: Path) -> None:
    """The verbs end with os._exit: what they print must still arrive whole, through a pipe too."""
    bundle = make_bundle(base_config(["sleep", "30"]))
    made = run_shim(state_root, "create", "--bundle", str(bundle), "fx", stdin=subprocess.DEVNULL)
    assert made.returncode == 0, made.stderr
    for _ in range(3):
        p = subprocess.run(shim_cmd(state_root, "state", "fx"), capture_output=True, text=True, timeout=60)
        assert p.returncode == 0 and json.loads(p.stdout)["status"] == "created", p.stderr
    closed = subprocess.run(
        shim_cmd(state_root, "state", "fx"),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        timeout=60,
        preexec_fn=lambda: os.close(2),
    )
    assert closed.returncode == 0 and json.loads(closed.stdout)["id"] == "fx"  # podman closes state's stderr
    assert run_shim(state_root, "delete", "--force", "fx").returncode == 0
    assert not (state_root / "fx").exists()


def test_commands_hold_no_error_handling_of_their_own() -> None:
    """Parse -> one library call -> render: a command module (each of ``app.COMMANDS``, the lifecycle
    fast path, ``confine_run``) has no ``try/finally`` and catches nothing but a parse's ``ValueError``
    (turned into a ``UsageError``); cleanup belongs to the library call, errors to ``cli.run``."""
    import ast

    from sandbox_shim.cli.app import COMMANDS

    cli_dir = Path(__file__).resolve().parents[1] / "shim" / "sandbox_shim" / "cli"
    modules = sorted({entry.split(":")[0] for entry in COMMANDS} | {"lifecycle", "confine_run"})
    found = []
    for mod in modules:
        for node in ast.walk(ast.parse((cli_dir / f"{mod}.py").read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Try):
                continue
            if node.finalbody:
                found.append(f"{mod}.py:{node.lineno}: try/finally")
            for h in node.handlers:
                if not (isinstance(h.type, ast.Name) and h.type.id == "ValueError"):
                    found.append(f"{mod}.py:{h.lineno}: except {ast.unparse(h.type) if h.type else ''}")
    assert not found, found


def test_confine_on_its_own_goes_through_the_boundary(tmp_path: Path) -> None:
    """``cli.confine.command`` called on its own (a script) ends at ``cli.run``: one line, status 2."""
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            "from sandbox_shim.cli.confine import command; command()",
            "--permit-path",
            str(tmp_path / "missing"),
            "--",
            "true",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and r.stderr.startswith("sandbox-shim: "), r.stderr


#: the CLI as the installed Linux command starts it: ``python -I -S``, the package and click found on
#: ``sys.path`` without ``site`` (bin/sandbox-shim)
NO_SITE = (
    "import sys; sys.path[:0] = sys.argv[1:3]; del sys.argv[1:3]; from sandbox_shim.cli import main; main()"
)


@pytest.mark.parametrize("verb", [["features"], ["list"]])
def test_output_that_cannot_be_written_is_74_without_site_too(tmp_path: Path, verb: list[str]) -> None:
    """Without ``site`` the interpreter's last flush of what is left in stdout's buffer failed again
    after the boundary had reported it: "Exception ignored" and status 120."""
    import click
    import sandbox_shim

    paths = [str(Path(sandbox_shim.__file__).parents[1]), str(Path(click.__file__).parents[1])]
    cmd = [sys.executable, "-I", "-S", "-c", NO_SITE, *paths, "--root", str(tmp_path / "root"), *verb]
    ok = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and ok.stdout, ok.stderr  # control: the same start writes its output
    with open("/dev/full", "w") as full:
        r = subprocess.run(cmd, stdout=full, stderr=subprocess.PIPE, text=True, timeout=60)
    assert r.returncode == 74, r.stderr
    assert r.stderr.count("\n") == 1 and "could not write the output" in r.stderr


#: callees that are not library operations: building the mechanism and the state root the global
#: flags name (part of parsing); output rendering: ``fastjson.dumps`` and ``conformance.runner``'s
#: renderers of the rows its one call returned.  A CamelCase callee is a value built from parsed
#: input (``Limits``).
_NOT_OPERATIONS = {"api.default_mechanism", "resolve_root", "dumps", "render_table", "to_json", "exit_status"}


def _library_calls(source: str) -> dict[str, list[str]]:
    """For each command of a CLI module's source: the calls into ``sandbox_shim`` outside ``cli/``
    (names bound by ``from .. import`` / ``from ..mod import`` / ``from sandbox_shim.X import``),
    less ``_NOT_OPERATIONS`` and constructors.  A command is a function decorated with a click
    command, ``confine_run.run``, or one ``if verb == "..."`` branch of ``lifecycle.main``."""
    import ast

    tree = ast.parse(source)

    def imported(node: ast.AST) -> set[str]:
        out: set[str] = set()
        for n in ast.walk(node):
            if isinstance(n, ast.ImportFrom):
                mod = n.module or ""
                if n.level == 2 or (n.level == 0 and mod.startswith("sandbox_shim") and ".cli" not in mod):
                    out |= {a.asname or a.name for a in n.names}
        return out

    def root(f: ast.expr) -> str | None:
        while isinstance(f, ast.Attribute):
            f = f.value
        return f.id if isinstance(f, ast.Name) else None

    def calls(node: ast.AST, names: set[str]) -> list[str]:
        found = []
        for c in ast.walk(node):
            if not isinstance(c, ast.Call) or root(c.func) not in names:
                continue
            name = ast.unparse(c.func)
            last = name.rsplit(".", 1)[-1]
            if name not in _NOT_OPERATIONS and last not in _NOT_OPERATIONS and not last[:1].isupper():
                found.append(name)
        return found

    out: dict[str, list[str]] = {}
    module_names = imported(tree)
    for fn in tree.body:
        if not isinstance(fn, ast.FunctionDef):
            continue
        names = module_names | imported(fn)
        if any("command" in ast.unparse(d) for d in fn.decorator_list) or fn.name == "run":
            out[fn.name] = calls(fn, names)
        elif fn.name == "main":  # the lifecycle fast path: one branch per verb
            for node in ast.walk(fn):
                if (
                    isinstance(node, ast.If)
                    and isinstance(node.test, ast.Compare)
                    and ast.unparse(node.test.left) == "verb"
                    and isinstance(node.test.comparators[0], ast.Constant)
                ):
                    out[f"main[{node.test.comparators[0].value}]"] = calls(
                        ast.Module(body=node.body, type_ignores=[]), names
                    )
    return out


def test_commands_make_one_library_call() -> None:
    """Parse -> one library call -> render: each command (``app.COMMANDS``' modules, each verb of the
    lifecycle fast path, ``confine_run``) calls at most one library operation; a second one (a
    forwarder built beside ``run_bundle``, a call per output format) belongs in the library."""
    from sandbox_shim.cli.app import COMMANDS

    cli_dir = Path(__file__).resolve().parents[1] / "shim" / "sandbox_shim" / "cli"
    modules = sorted({entry.split(":")[0] for entry in COMMANDS} | {"lifecycle", "confine_run"})
    seen, found = 0, []
    for mod in modules:
        for name, called in _library_calls((cli_dir / f"{mod}.py").read_text(encoding="utf-8")).items():
            seen += 1
            if len(called) > 1:
                found.append(f"{mod}.{name}: {called}")
    assert seen >= len(COMMANDS) + 5, seen  # every command and the five lifecycle verbs were scanned
    assert not found, found


def test_the_one_call_rule_sees_a_planted_second_call() -> None:
    """Control for the scan above: a command that builds the forwarder itself before ``run_bundle``
    (what ``run`` did), one that calls per output format, and a lifecycle verb with two calls are
    each caught; the same commands with one call pass."""
    planted = """
import click
@click.command("run")
def run(g, bundle, sid):
    from .. import api, control
    from ..execution import run_bundle
    mech = api.default_mechanism(g.root)
    on_start = control.signal_forwarder(mech, sid)
    run_bundle(mech, sid, bundle, on_start=on_start)

@click.command("ps")
def ps_cmd(g, fmt, sid):
    from .. import api, process_list
    mech = api.default_mechanism(g.root)
    if fmt == "json":
        print(process_list.pids(mech, sid))
        return
    print(process_list.processes(mech, sid))

@click.command("one")
def one(g, sid):
    from .. import api, control
    from ..resources import Limits
    control.update(api.default_mechanism(g.root), sid, Limits())

def main(argv, g):
    from .. import api
    mech = api.default_mechanism(g.root)
    if verb == "state":
        s = api.status(mech, sid)
        api.list_sandboxes(mech)
    elif verb == "start":
        api.start(mech, sid)
"""
    got = _library_calls(planted)
    assert got["run"] == ["control.signal_forwarder", "run_bundle"]
    assert sorted(got["ps_cmd"]) == ["process_list.pids", "process_list.processes"]
    assert got["main[state]"] == ["api.status", "api.list_sandboxes"]
    assert got["one"] == ["control.update"] and got["main[start]"] == ["api.start"]


def test_state_document_with_exit_status_is_the_librarys() -> None:
    """``state`` renders ``Status.to_oci(with_exit_status=True)``: ``exitStatus`` once known, after
    ``created`` (the order ``state`` printed before); ``list`` keeps runc's shape without it."""
    from sandbox_shim.mechanism import Status

    done = Status("s", "stopped", 0, "/b", {}, exit_status=3, created="2026-01-01T00:00:00Z")
    assert list(done.to_oci(with_exit_status=True))[-2:] == ["created", "exitStatus"]
    assert done.to_oci(with_exit_status=True)["exitStatus"] == 3
    assert "exitStatus" not in done.to_oci()  # list --format json
    running = Status("r", "running", 42, "/b", {})
    assert "exitStatus" not in running.to_oci(with_exit_status=True)
