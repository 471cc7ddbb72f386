"""The control-plane confinement profile, attacked for real (bwrap, Landlock, this kernel).

Every breach test runs its control first: the same probe where it is permitted must succeed and
print the marker; then the breach must fail with a denial errno and no marker.  A probe that dies
(signal, abort) is a failed probe, never a denial.
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from sandbox_shim.errors import CannotEnforce
from sandbox_shim.hardening import confinement
from sandbox_shim.hardening.confinement import confine, resolve_executable
from sandbox_shim.platforms.linux import landlock
from sandbox_shim.platforms.linux.locate import BWRAP_ENV

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or not os.access("/usr/bin/bwrap", os.X_OK),
    reason="needs Linux with bwrap at /usr/bin/bwrap",
)

REPO = Path(__file__).resolve().parent.parent
PY = "/usr/bin/python3"  # the system interpreter, itself a symlink (python3 -> python3.11)
DENIED = {"ENOENT", "EACCES", "EPERM", "EROFS"}
PROBE = r"""
import errno, os, sys
op, path = sys.argv[1], sys.argv[2]
try:
    if op == "read":
        print("MARKER:" + open(path).read().strip())
    elif op == "write":
        open(path, "w").write("x")
        print("MARKER:wrote")
    elif op == "list":
        print("MARKER:" + ",".join(sorted(os.listdir(path))))
    elif op == "env":
        print("MARKER:" + os.environ[path])
except OSError as e:
    print("ERRNO:" + errno.errorcode.get(e.errno, str(e.errno)))
    sys.exit(3)
"""

LAYERS = [
    pytest.param(False, id="bwrap"),
    pytest.param(
        True,
        id="bwrap+landlock",
        marks=pytest.mark.skipif(landlock.abi_version() == 0, reason="this kernel has no Landlock"),
    ),
]


def run(spec: Mapping[str, Any], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [spec["cmd"], *spec["args"]],
        env=spec["env"],
        cwd=spec["cd"],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def outcome(r: subprocess.CompletedProcess[str]) -> str:
    """``ok`` (marker, exit 0) | ``denied:ERRNO`` (probe caught the error) | ``died:...`` (anything else)."""
    if r.returncode == 0 and "MARKER:" in r.stdout:
        return "ok"
    if r.returncode == 3 and "MARKER:" not in r.stdout and "ERRNO:" in r.stdout:
        return "denied:" + r.stdout.split("ERRNO:", 1)[1].split()[0]
    return f"died:rc={r.returncode}:{r.stderr.strip()[-300:]}"


def control(r: subprocess.CompletedProcess[str], marker: str = "") -> None:
    got = outcome(r)
    assert got == "ok", f"control failed (not a denial): {got}"
    assert f"MARKER:{marker}" in r.stdout


def breach(r: subprocess.CompletedProcess[str]) -> str:
    got = outcome(r)
    assert got.startswith("denied:"), f"breach not denied: {got} stdout={r.stdout!r}"
    assert got.split(":", 1)[1] in DENIED, got
    assert "MARKER:" not in r.stdout
    return got


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[dict[str, Path]]:
    """tenants/a (permitted, holds `mine`), tenants/b (the next tenant, holds `secret`), and a file in
    tenants/ itself (one `..` away)."""
    root = tmp_path / "tenants"
    a, b = root / "a", root / "b"
    a.mkdir(parents=True)
    b.mkdir()
    (a / "mine").write_text("mine")
    (b / "secret").write_text("tenant-b-secret")
    (root / "platform-file").write_text("platform")
    yield {"root": root, "a": a, "b": b}


def probe(
    t: dict[str, Path], op: str, path: str | Path, ll: bool, **kw: Any
) -> subprocess.CompletedProcess[str]:
    return run(confine((PY, ["-c", PROBE, op, str(path)]), permit_path=str(t["a"]), landlock=ll, **kw))


@pytest.mark.parametrize("ll", LAYERS)
def test_permit_path_read_write_is_the_control(tree: dict[str, Path], ll: bool) -> None:
    # protect=False: no placeholders for missing protected names (test_confine_held.py has those)
    control(probe(tree, "read", tree["a"] / "mine", ll, protect=False), "mine")
    control(probe(tree, "write", tree["a"] / "new", ll, protect=False), "wrote")
    assert (tree["a"] / "new").read_text() == "x"
    control(probe(tree, "list", tree["a"], ll, protect=False), "mine,new")


@pytest.mark.parametrize("ll", LAYERS)
def test_sibling_is_denied(tree: dict[str, Path], ll: bool) -> None:
    control(probe(tree, "read", tree["a"] / "mine", ll), "mine")
    breach(probe(tree, "read", tree["b"] / "secret", ll))
    breach(probe(tree, "write", tree["b"] / "planted", ll))
    breach(probe(tree, "list", tree["b"], ll))
    assert not (tree["b"] / "planted").exists()


@pytest.mark.parametrize("ll", LAYERS)
def test_parent_is_denied(tree: dict[str, Path], ll: bool) -> None:
    control(probe(tree, "read", tree["a"] / "mine", ll), "mine")
    breach(probe(tree, "read", f"{tree['a']}/../platform-file", ll))
    # the parent lies in the private /tmp: a write there may succeed, but never reaches the host
    r = probe(tree, "write", f"{tree['a']}/../planted", ll)
    if outcome(r) != "ok":
        breach(r)
    breach(probe(tree, "read", f"{tree['a']}/../b/secret", ll))
    assert not (tree["root"] / "planted").exists()
    r = probe(tree, "list", f"{tree['a']}/..", ll)
    # bwrap alone shows the skeleton directory it made (holding only `a`); Landlock denies it.
    if outcome(r) == "ok":
        assert r.stdout.strip() == "MARKER:a"
    else:
        breach(r)


@pytest.mark.parametrize("ll", LAYERS)
def test_symlink_inside_pointing_outside_is_denied(tree: dict[str, Path], ll: bool) -> None:
    (tree["a"] / "inside-link").symlink_to(tree["a"] / "mine")
    (tree["a"] / "escape-link").symlink_to(tree["b"] / "secret")
    (tree["a"] / "escape-dir").symlink_to(tree["b"])
    control(probe(tree, "read", tree["a"] / "inside-link", ll), "mine")
    breach(probe(tree, "read", tree["a"] / "escape-link", ll))
    breach(probe(tree, "read", tree["a"] / "escape-dir" / "secret", ll))
    breach(probe(tree, "write", tree["a"] / "escape-dir" / "planted", ll))


@pytest.mark.parametrize("ll", LAYERS)
def test_proc_root_of_other_processes_is_denied(tree: dict[str, Path], ll: bool) -> None:
    control(probe(tree, "read", f"/proc/self/root{tree['a']}/mine", ll), "mine")
    breach(probe(tree, "read", f"/proc/1/root{tree['b']}/secret", ll))
    # this test's own process, on the host, is not visible from the sandbox's pid namespace
    breach(probe(tree, "read", f"/proc/{os.getpid()}/root{tree['b']}/secret", ll))
    breach(probe(tree, "read", f"/proc/{os.getpid()}/environ", ll))


@pytest.mark.parametrize("ll", LAYERS)
def test_credential_passes_and_env_is_unmodified(tree: dict[str, Path], ll: bool) -> None:
    env = {"PATH": "/usr/bin:/bin", "SHIM_TEST_API_TOKEN": "tok-123", "LANG": "C"}
    control(probe(tree, "env", "SHIM_TEST_API_TOKEN", ll, env=env), "tok-123")
    spec = confine(("/usr/bin/env", ["-0"]), permit_path=str(tree["a"]), env=env, landlock=ll)
    assert spec["env"] == env
    r = subprocess.run(
        [spec["cmd"], *spec["args"]], env=spec["env"], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    seen = dict(kv.split("=", 1) for kv in r.stdout.split("\0") if kv)
    # bwrap sets PWD to the directory it chdir'd into (as a shell would); nothing else differs
    assert seen.pop("PWD") == str(tree["a"])
    assert seen == env


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server API)
        body = b"hello-from-host"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.mark.parametrize("ll", LAYERS)
def test_egress_to_host_loopback_server(tree: dict[str, Path], ll: bool) -> None:
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}/"
        code = (
            "import urllib.request\n"
            f"print('MARKER:' + urllib.request.urlopen({url!r}, timeout=10).read().decode())"
        )
        r = run(confine((PY, ["-c", code]), permit_path=str(tree["a"]), landlock=ll))
        control(r, "hello-from-host")
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.mark.parametrize("ll", LAYERS)
def test_restriction_survives_three_nested_execs(tree: dict[str, Path], ll: bool) -> None:
    (tree["a"] / "probe.py").write_text(PROBE)

    def go(path: Path) -> subprocess.CompletedProcess[str]:
        # sh -> sh -> sh -> python: three execs below the confined command
        inner = f"exec {PY} probe.py read {path}"
        cmd = f"""sh -c "sh -c 'sh -c \\"{inner}\\"'" """
        return run(confine(("sh", ["-c", cmd]), permit_path=str(tree["a"]), landlock=ll))

    r = go(tree["a"] / "mine")
    control(r, "mine")
    breach(go(tree["b"] / "secret"))


@pytest.mark.parametrize("ll", LAYERS)
def test_bwrap_inside_cannot_widen(tree: dict[str, Path], ll: bool) -> None:
    control(probe(tree, "read", tree["a"] / "mine", ll), "mine")
    for widen in (["--bind", "/", "/"], ["--dev-bind", "/", "/", "--bind", str(tree["b"]), str(tree["b"])]):
        spec = confine(
            ("bwrap", [*widen, "cat", str(tree["b"] / "secret")]), permit_path=str(tree["a"]), landlock=ll
        )
        r = run(spec)
        assert r.returncode != 0 and "tenant-b-secret" not in r.stdout, (r.stdout, r.stderr)


@pytest.mark.parametrize("ll", LAYERS)
def test_confine_again_inside_cannot_widen(tree: dict[str, Path], ll: bool) -> None:
    pkg = tree["a"] / "pkg"
    shutil.copytree(REPO / "shim" / "sandbox_shim", pkg / "sandbox_shim")
    code = (
        f"import sys; sys.path.insert(0, {str(pkg)!r})\n"
        "from sandbox_shim.hardening.confinement import confine\n"
        "import subprocess\n"
        "try:\n"
        "    s = confine(('cat', [sys.argv[2]]), permit_path=sys.argv[1])\n"
        "except Exception as e:\n"
        "    print('REFUSED:' + type(e).__name__); sys.exit(4)\n"
        "r = subprocess.run([s['cmd'], *s['args']], env=s['env'], cwd=s['cd'],\n"
        "                   capture_output=True, text=True)\n"
        "print(r.stdout); sys.exit(r.returncode or 5)\n"
    )
    real_py = os.path.realpath(sys.executable)  # has click etc. in its prefix, granted read-only
    # control: the nested confine, asked for the permitted directory itself
    ctl = run(
        confine(
            (real_py, ["-c", code, str(tree["a"]), str(tree["a"] / "mine")]),
            permit_path=str(tree["a"]),
            landlock=ll,
        )
    )
    for target in (str(tree["b"]), str(tree["root"])):
        r = run(
            confine(
                (real_py, ["-c", code, target, str(tree["b"] / "secret")]),
                permit_path=str(tree["a"]),
                landlock=ll,
            )
        )
        assert r.returncode != 0 and "tenant-b-secret" not in r.stdout, (r.stdout, r.stderr)
    # inside, the nested confine is refused (no capabilities to build namespaces) or it can only
    # narrow: it never yields the permitted file *and* the sibling.
    assert "tenant-b-secret" not in ctl.stdout
    assert "REFUSED:" in ctl.stdout or "mine" in ctl.stdout, (ctl.stdout, ctl.stderr)


@pytest.mark.parametrize("ll", LAYERS)
def test_runtime_read_set_starts_interpreters_and_shells(tree: dict[str, Path], ll: bool) -> None:
    a = str(tree["a"])
    # a bare name through PATH (here: a pyenv shim, a bash script exec'ing the real interpreter)
    r = run(confine(("python3", ["-c", "print(1)"]), permit_path=a, landlock=ll))
    assert (r.returncode, r.stdout) == (0, "1\n"), r.stderr
    r = run(confine(("sh", ["-c", "true"]), permit_path=a, landlock=ll))
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("ll", LAYERS)
def test_symlinked_executable_runs_and_cd_defaults_to_permit_path(tree: dict[str, Path], ll: bool) -> None:
    if not os.path.islink(PY):
        pytest.skip(f"{PY} is not a symlink here")
    spec = confine(
        (PY, ["-c", "import os, sys; print(sys.executable, os.getcwd())"]),
        permit_path=str(tree["a"]),
        landlock=ll,
    )
    assert spec["cd"] == str(tree["a"])
    assert os.path.realpath(PY) in spec["args"]
    r = run(spec)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [os.path.realpath(PY), str(tree["a"])]


def test_a_dying_control_is_not_a_denial(tree: dict[str, Path]) -> None:
    r = run(confine(("sh", ["-c", "kill -ABRT $$"]), permit_path=str(tree["a"])))
    assert r.returncode != 0
    assert outcome(r).startswith("died:")
    with pytest.raises(AssertionError, match="control failed"):
        control(r)
    with pytest.raises(AssertionError, match="not denied"):
        breach(r)


def test_layers_in_force_are_reported(tree: dict[str, Path]) -> None:
    spec = confine(("true", []), permit_path=str(tree["a"]))
    assert spec.layers[0].startswith("bubblewrap")
    abi = landlock.abi_version()
    assert (f"landlock ABI {abi}" in spec.layers) == (abi > 0)
    reports = {c.name: c for c in confinement.report()}
    assert reports["confinement.bwrap"].available
    assert reports["confinement.landlock"].available == (abi > 0)
    off = confine(("true", []), permit_path=str(tree["a"]), landlock=False).layers
    assert off[0] == spec.layers[0] and not any(layer.startswith("landlock") for layer in off)
    assert "seccomp: no TIOCSTI/TIOCLINUX" in off and "seccomp: no TIOCSTI/TIOCLINUX" in spec.layers


def test_extra_subpaths_are_explicit_and_inside_the_permit_path(tree: dict[str, Path]) -> None:
    spec = confine(("true", []), permit_path=str(tree["a"]), protect=False)  # no protected-name anchors
    binds = [spec["args"][i + 1] for i, a in enumerate(spec["args"]) if a == "--bind"]
    assert binds == [str(tree["a"])]  # the library chooses no extra directory itself
    (tree["a"] / "sub").mkdir()
    r = run(
        confine(
            (PY, ["-c", PROBE, "write", str(tree["a"] / "sub" / "f")]),
            permit_path=str(tree["a"]),
            permit_extra_subpaths=[str(tree["a"] / "sub")],
        )
    )
    control(r, "wrote")
    breach(probe(tree, "write", tree["b"] / "shared", False))
    with pytest.raises(CannotEnforce, match="not inside the permit path"):  # a sibling is not a subpath
        confine(("true", []), permit_path=str(tree["a"]), permit_extra_subpaths=[str(tree["b"])])


def test_no_bwrap_raises_cannot_enforce_and_launches_nothing(
    tree: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    witness = tree["a"] / "ran"
    with pytest.raises(CannotEnforce) as ei:
        confine(("touch", [str(witness)]), permit_path=str(tree["a"]), bwrap=str(tmp_path / "no-bwrap"))
    assert ei.value.capability == "bwrap"
    with pytest.raises(CannotEnforce):  # a bwrap that exists but cannot build the namespaces
        confine(("touch", [str(witness)]), permit_path=str(tree["a"]), bwrap="/bin/false")
    # the CLI, with the documented environment knob: exit 5, and the command never ran
    env = {**os.environ, BWRAP_ENV: str(tmp_path / "no-bwrap")}
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            "from sandbox_shim.cli.confine import command; command()",
            "--permit-path",
            str(tree["a"]),
            "--",
            "touch",
            str(witness),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 5, r.stderr
    assert "cannot enforce confinement: bwrap" in r.stderr
    assert not witness.exists()


def test_data_boundary_inside_the_read_set_is_refused(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "lib" / "data").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text(f"home = {os.path.dirname(os.path.realpath(PY))}\n")
    (venv / "bin" / "python").symlink_to(os.path.realpath(PY))
    prog = venv / "bin" / "prog"
    prog.write_text(f"#!{venv}/bin/python\nprint(1)\n")
    prog.chmod(0o755)
    # the venv's lib is the program's runtime tree, granted read-only: a permit path inside it would
    # leave its siblings readable
    with pytest.raises(CannotEnforce) as ei:
        confine((str(prog), []), permit_path=str(venv / "lib" / "data"))
    assert ei.value.capability == "confinement.boundary"


def test_bad_arguments(tree: dict[str, Path]) -> None:
    with pytest.raises(ValueError, match="must not be /"):
        confine(("true", []), permit_path="/")
    with pytest.raises(ValueError, match="not an existing directory"):
        confine(("true", []), permit_path=str(tree["a"] / "missing"))
    with pytest.raises(ValueError, match="not a directory reachable"):
        confine(("true", []), permit_path=str(tree["a"]), cd=str(tree["b"]))
    (tree["a"] / "sub").mkdir()
    r = run(confine(("pwd", []), permit_path=str(tree["a"]), cd=str(tree["a"] / "sub")))
    assert r.stdout.strip() == str(tree["a"] / "sub")


def test_resolve_executable(tmp_path: Path) -> None:
    assert resolve_executable("sh") == os.path.realpath(shutil.which("sh") or "")
    link = tmp_path / "py-link"
    link.symlink_to(PY)
    assert resolve_executable(str(link)) == os.path.realpath(PY)
    assert resolve_executable("py-link", path=str(tmp_path)) == os.path.realpath(PY)
    assert resolve_executable("no-such-program-xyz") == "no-such-program-xyz"
    plain = tmp_path / "plain"
    plain.write_text("not executable")
    assert resolve_executable(str(plain)) == str(plain)
    r = run(confine(("no-such-program-xyz", []), permit_path=str(tmp_path)))
    assert r.returncode != 0 and "no-such-program-xyz" in r.stderr


@pytest.mark.skipif(landlock.abi_version() == 0, reason="this kernel has no Landlock")
def test_landlock_layer_alone(tree: dict[str, Path]) -> None:
    """The second layer holds on its own, without bwrap's mount namespace."""
    ro = ["/usr", "/etc", os.path.realpath(sys.base_prefix)]

    def go(op: str, path: Path) -> subprocess.CompletedProcess[str]:
        argv = landlock.helper_argv(
            os.path.realpath(sys.executable),
            landlock.__file__,
            ro,
            [str(tree["a"])],
            ["/dev"],
            os.path.realpath(PY),
            ["-c", PROBE, op, str(path)],
        )
        return subprocess.run(argv, capture_output=True, text=True, timeout=60)

    control(go("read", tree["a"] / "mine"), "mine")
    assert breach(go("read", tree["b"] / "secret")) == "denied:EACCES"
    assert breach(go("write", tree["root"] / "planted")) == "denied:EACCES"


def test_cli_print_launch_spec_and_exec(tree: dict[str, Path]) -> None:
    from click.testing import CliRunner
    from sandbox_shim.cli.confine import command

    res = CliRunner().invoke(
        command, ["--permit-path", str(tree["a"]), "--print-launch-spec", "--", "sh", "-c", "exit 7"]
    )
    assert res.exit_code == 0, res.output
    shown = json.loads(res.output)
    assert shown["cmd"].endswith("bwrap") and shown["cd"] == str(tree["a"])
    assert shown["args"][-3:] == [os.path.realpath(shutil.which("sh") or ""), "-c", "exit 7"]
    res = CliRunner().invoke(command, ["--permit-path", str(tree["a"] / "missing"), "--", "true"])
    assert res.exit_code == 2  # a usage error, nothing run
    base = [
        sys.executable,
        "-c",
        "from sandbox_shim.cli.confine import command; command()",
        "--permit-path",
        str(tree["a"]),
        "--",
    ]
    r = subprocess.run(
        [*base[:-1], "--print-launch-spec", "--", "true"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "SHIM_TEST_SECRET_TOKEN": "hunter2"},
    )
    assert "SHIM_TEST_SECRET_TOKEN" in json.loads(r.stdout)["env_names"] and "hunter2" not in r.stdout
    # without --print-launch-spec the CLI execs bwrap: the caller gets the command's own status
    r = subprocess.run([*base, "sh", "-c", "exit 7"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 7, r.stderr
    r = subprocess.run([*base, "cat", str(tree["b"] / "secret")], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "tenant-b-secret" not in r.stdout
