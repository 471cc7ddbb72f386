"""confine's options, attacked for real: private /tmp, --permit-read, protected paths, IPC scopes,
the egress allow-list (servers on loopback only), --report, --settings, and the CLI fast path.

Control first in every breach: the same probe where it is permitted must print the marker.
"""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sandbox_shim.hardening.confinement import confine
from sandbox_shim.platforms.linux import landlock

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or not os.access("/usr/bin/bwrap", os.X_OK),
    reason="needs Linux with bwrap at /usr/bin/bwrap",
)

PY = "/usr/bin/python3"
REPO = Path(__file__).resolve().parent.parent
SHIM = [sys.executable, "-m", "sandbox_shim"]
ABI = landlock.abi_version()
PROBE = r"""
import errno, os, socket, sys
op, arg = sys.argv[1], sys.argv[2]
try:
    if op == "read":
        print("MARKER:" + open(arg).read().strip())
    elif op == "write":
        with open(arg, "w") as fh:
            fh.write("x")
        print("MARKER:wrote")
    elif op == "abstract":
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect("\0" + arg)
        print("MARKER:" + s.recv(64).decode())
    elif op == "get":
        import urllib.request
        print("MARKER:" + urllib.request.urlopen(arg, timeout=20).read().decode())
except OSError as e:
    code = getattr(e, "code", None)
    print("ERRNO:" + (f"HTTP{code}" if code else errno.errorcode.get(e.errno or 0, str(e))))
    sys.exit(3)
"""


def run(spec: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [spec["cmd"], *spec["args"]],
        env=spec["env"],
        cwd=spec["cd"],
        capture_output=True,
        text=True,
        timeout=60,
    )


def outcome(r: subprocess.CompletedProcess[str]) -> str:
    if r.returncode == 0 and "MARKER:" in r.stdout:
        return "ok:" + r.stdout.split("MARKER:", 1)[1].strip()
    if r.returncode == 3 and "ERRNO:" in r.stdout and "MARKER:" not in r.stdout:
        return "denied:" + r.stdout.split("ERRNO:", 1)[1].split()[0]
    return f"died:rc={r.returncode}:{r.stderr.strip()[-300:]}"


def probe(permit: Path, op: str, arg: str | Path, **kw: Any) -> str:
    return outcome(run(confine((PY, ["-c", PROBE, op, str(arg)]), permit_path=str(permit), **kw)))


@pytest.fixture
def work(tmp_path: Path) -> Path:
    w = tmp_path / "work"
    w.mkdir()
    (w / "mine").write_text("mine")
    return w


# ---- /tmp --------------------------------------------------------------------------------------------


def test_tmp_is_private_and_writable(work: Path, tmp_path: Path) -> None:
    host_file = Path("/tmp") / f"sandbox-shim-host-{os.getpid()}"
    host_file.write_text("host-tmp")
    try:
        assert (
            outcome(subprocess.run([PY, "-c", PROBE, "read", str(host_file)], capture_output=True, text=True))
            == "ok:host-tmp"
        )  # control: readable unconfined
        assert probe(work, "read", host_file) == "denied:ENOENT"  # the host's /tmp is not there
        r = run(confine(("sh", ["-c", "echo t > /tmp/scratch && cat /tmp/scratch"]), permit_path=str(work)))
        assert (r.returncode, r.stdout) == (0, "t\n"), r.stderr
        assert not Path("/tmp/scratch").exists() or Path("/tmp/scratch").read_text() != "t\n"
    finally:
        host_file.unlink()


# ---- --permit-read -------------------------------------------------------------------------------------


def test_permit_read_is_read_only(work: Path, tmp_path: Path) -> None:
    ref = tmp_path / "reference"
    ref.mkdir()
    (ref / "doc").write_text("docs")
    assert probe(work, "read", ref / "doc").startswith("denied:")  # not granted: absent
    assert probe(work, "read", ref / "doc", permit_read=[str(ref)]) == "ok:docs"
    assert probe(work, "write", work / "new", permit_read=[str(ref)]) == "ok:wrote"  # control
    assert probe(work, "write", ref / "planted", permit_read=[str(ref)]).startswith("denied:")
    assert not (ref / "planted").exists()
    # inside the permit path: an island that stays read-only
    (work / "vendor").mkdir()
    (work / "vendor" / "lib").write_text("v")
    assert probe(work, "write", work / "vendor" / "lib") == "ok:wrote"
    assert probe(work, "write", work / "vendor" / "lib", permit_read=[str(work / "vendor")]) == "denied:EROFS"
    with pytest.raises(ValueError, match="does not exist"):
        confine(("true", []), permit_path=str(work), permit_read=[str(tmp_path / "missing")])
    with pytest.raises(ValueError, match="must not be /"):
        confine(("true", []), permit_path=str(work), permit_read=["/"])


# ---- protected names -------------------------------------------------------------------------------------


def test_git_hooks_and_config_are_read_only_unless_opted_out(work: Path) -> None:
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    hook = work / ".git" / "hooks" / "pre-commit"
    assert probe(work, "write", work / ".git" / "description") == "ok:wrote"  # control: .git writable
    assert probe(work, "write", hook) == "denied:EROFS"
    assert probe(work, "write", work / ".git" / "config") == "denied:EROFS"
    assert probe(work, "read", work / ".git" / "config").startswith("ok:")
    (work / ".bashrc").write_text("# rc")
    assert probe(work, "write", work / ".bashrc") == "denied:EROFS"
    assert not hook.exists()
    assert probe(work, "write", hook, protect=False) == "ok:wrote"  # the explicit opt-out


def test_missing_hooks_dir_is_made_and_held(work: Path) -> None:
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    hooks = work / ".git" / "hooks"
    subprocess.run(["rm", "-rf", str(hooks)], check=True)
    assert probe(work, "write", hooks / "post-checkout").startswith("denied:")
    assert hooks.is_dir() and not (hooks / "post-checkout").exists()


def test_settings_file_inside_is_read_only(work: Path) -> None:
    settings = work / "confine.json"
    settings.write_text("{}")
    assert probe(work, "write", settings) == "ok:wrote"  # control
    assert probe(work, "write", settings, settings_file=str(settings)) == "denied:EROFS"


# ---- IPC scopes -------------------------------------------------------------------------------------------


@pytest.fixture
def abstract_server() -> Iterator[str]:
    name = f"sandbox-shim-test-{os.getpid()}-{time.monotonic_ns()}"
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind("\0" + name)
    srv.listen(8)

    def serve() -> None:
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            c.sendall(b"host-abstract")
            c.close()

    threading.Thread(target=serve, daemon=True).start()
    yield name
    srv.close()


@pytest.mark.skipif(ABI < 6, reason=f"Landlock ABI {ABI} has no IPC scoping (needs 6)")
def test_host_abstract_unix_socket_is_scoped(work: Path, abstract_server: str) -> None:
    assert (
        outcome(
            subprocess.run([PY, "-c", PROBE, "abstract", abstract_server], capture_output=True, text=True)
        )
        == "ok:host-abstract"
    )  # control, unconfined
    assert probe(work, "abstract", abstract_server, landlock=False) == "ok:host-abstract"  # bwrap alone
    assert probe(work, "abstract", abstract_server) == "denied:EPERM"
    spec = confine(("true", []), permit_path=str(work))
    assert any("abstract-unix-socket" in layer for layer in spec.layers)
    assert spec.not_enforced == ()


def test_scope_gap_is_reported_when_not_enforced(work: Path) -> None:
    spec = confine(("true", []), permit_path=str(work), landlock=False)
    assert any("abstract unix sockets" in s for s in spec.not_enforced)


# ---- egress allow-list ----------------------------------------------------------------------------------


class _Named(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server API)
        body = f"served-{self.server.name}".encode()  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def servers() -> Iterator[dict[str, int]]:
    out, made = {}, []
    for name in ("allowed", "denied"):
        s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Named)
        s.name = name  # type: ignore[attr-defined]
        threading.Thread(target=s.serve_forever, daemon=True).start()
        out[name] = s.server_address[1]
        made.append(s)
    yield out
    for s in made:
        s.shutdown()
        s.server_close()


def test_egress_allow_list(work: Path, servers: dict[str, int], tmp_path: Path) -> None:
    report = tmp_path / "report.jsonl"
    host_map = {
        "api.allowed.test": ("127.0.0.1", servers["allowed"]),
        "sub.wild.test": ("127.0.0.1", servers["allowed"]),
        "evil.denied.test": ("127.0.0.1", servers["denied"]),
    }
    direct = f"http://127.0.0.1:{servers['denied']}/"
    # control: without the option, egress is open (the host's loopback server answers)
    assert probe(work, "get", direct) == "ok:served-denied"

    def go(url: str) -> str:
        spec = confine(
            (PY, ["-c", PROBE, "get", url]),
            permit_path=str(work),
            allow_hosts=["api.allowed.test", "*.wild.test"],
            report=str(report),
            host_map=host_map,
        )
        assert spec.egress is not None
        spec.egress.start()
        try:
            return outcome(run(spec))
        finally:
            spec.egress.close()

    assert go("http://api.allowed.test/") == "ok:served-allowed"
    assert go("http://sub.wild.test/x") == "ok:served-allowed"
    assert go("http://evil.denied.test/") == "denied:HTTP403"
    assert go("http://wild.test/").startswith("denied:")  # *.x admits names below x, not x
    # no way around the proxy: the namespace has loopback only
    spec = confine(
        (
            PY,
            [
                "-c",
                "import os, socket, sys\n"
                "for k in [k for k in os.environ if 'proxy' in k.lower()]: del os.environ[k]\n"
                "s = socket.socket()\n"
                "try:\n"
                f"    s.connect(('127.0.0.1', {servers['denied']})); print('MARKER:direct')\n"
                "except OSError as e:\n"
                "    import errno; print('ERRNO:' + errno.errorcode[e.errno]); sys.exit(3)\n",
            ],
        ),
        permit_path=str(work),
        allow_hosts=["api.allowed.test"],
        host_map=host_map,
    )
    assert spec.egress is not None
    spec.egress.start()
    try:
        assert outcome(run(spec)) == "denied:ECONNREFUSED"
    finally:
        spec.egress.close()
    records = [json.loads(line) for line in report.read_text().splitlines()]
    denied = [r for r in records if r["event"] == "denied"]
    assert {(r["host"], r["operation"]) for r in denied} == {
        ("evil.denied.test", "GET"),
        ("wild.test", "GET"),
    }
    assert all(r["time"].endswith("Z") for r in records)
    assert records[0]["event"] == "start" and "egress denials (proxy)" in records[0]["observed"]


def test_connect_tunnel_is_filtered(work: Path, servers: dict[str, int]) -> None:
    host_map = {"ok.test": ("127.0.0.1", servers["allowed"]), "no.test": ("127.0.0.1", servers["denied"])}
    code = (
        "import socket, sys\n"
        "s = socket.create_connection(('127.0.0.1', 3128))\n"
        "s.sendall(f'CONNECT {sys.argv[1]}:443 HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n'.encode())\n"
        "head = s.recv(200).decode()\n"
        "if ' 200 ' not in head.split('\\r\\n')[0]:\n"
        "    print('ERRNO:' + head.split()[1]); sys.exit(3)\n"
        "s.sendall(b'GET / HTTP/1.0\\r\\n\\r\\n')\n"
        "data = b''\n"
        "while chunk := s.recv(4096): data += chunk\n"
        "print('MARKER:' + data.decode().rsplit('\\n', 1)[-1])\n"
    )
    for host, want in (("ok.test", "ok:served-allowed"), ("no.test", "denied:403")):
        spec = confine(
            (PY, ["-c", code, host]), permit_path=str(work), allow_hosts=["ok.test"], host_map=host_map
        )
        assert spec.egress is not None
        spec.egress.start()
        try:
            assert outcome(run(spec)) == want
        finally:
            spec.egress.close()


def test_bad_allow_host_is_refused(work: Path) -> None:
    for bad in ("", "exa mple.com", "*", "http://x.com", "a/b"):
        with pytest.raises(ValueError, match="allow-host"):
            confine(("true", []), permit_path=str(work), allow_hosts=[bad])


def test_report_inside_permit_path_is_refused(work: Path) -> None:
    with pytest.raises(ValueError, match="inside a read-write path"):
        confine(("true", []), permit_path=str(work), report=str(work / "r.jsonl"))


# ---- the CLI: fast path, settings, egress through the forked proxy -----------------------------------------


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SHIM, *args], capture_output=True, text=True, timeout=60, env=env or dict(os.environ)
    )


def test_cli_settings_file(work: Path, tmp_path: Path) -> None:
    ref = tmp_path / "ref"
    ref.mkdir()
    (ref / "doc").write_text("docs")
    settings = tmp_path / "s.json"
    settings.write_text(json.dumps({"permitPath": "work", "permitRead": ["ref"]}))
    r = cli("confine", "--settings", str(settings), "--", PY, "-c", PROBE, "read", str(ref / "doc"))
    assert outcome(r) == "ok:docs", r.stderr
    settings.write_text(json.dumps({"permitPath": "work", "permitReed": ["ref"]}))
    r = cli("confine", "--settings", str(settings), "--", "true")
    assert r.returncode == 2 and "/permitReed: unknown key" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    settings.write_text(json.dumps({"permitPath": 7}))
    r = cli("confine", "--settings", str(settings), "--", "true")
    assert r.returncode == 2 and "/permitPath" in r.stderr, r.stderr
    settings.write_text("{not json")
    r = cli("confine", "--settings", str(settings), "--", "true")
    assert r.returncode == 2 and "not valid JSON" in r.stderr


def test_cli_usage_errors(work: Path) -> None:
    for args in (
        ["confine", "--", "true"],
        ["confine", "--permit-path", str(work)],
        ["confine", "--permit-pat", str(work), "--", "true"],
        ["confine", "--permit-path", str(work), "--allow-host", "bad host", "--", "true"],
    ):
        r = cli(*args)
        assert r.returncode == 2, (args, r.stderr)
        assert "Traceback" not in r.stderr and r.stderr.count("\n") == 1, r.stderr
    r = cli("confine", "--help")
    assert r.returncode == 0 and "--allow-host" in r.stdout


def test_cli_egress_through_forked_proxy(work: Path, servers: dict[str, int], tmp_path: Path) -> None:
    report = tmp_path / "cli-report.jsonl"
    ok_url, no_url = f"http://127.0.0.1:{servers['allowed']}/", f"http://localhost:{servers['denied']}/"
    base = [
        "confine",
        "--permit-path",
        str(work),
        "--allow-host",
        "127.0.0.1:*",
        "--report",
        str(report),
        "--",
        PY,
        "-c",
        PROBE,
        "get",
    ]
    assert outcome(cli(*base, ok_url)) == "ok:served-allowed"
    assert outcome(cli(*base, no_url)) == "denied:HTTP403"
    denied = [json.loads(x) for x in report.read_text().splitlines() if '"denied"' in x]
    assert [(d["host"], d["port"]) for d in denied] == [("localhost", servers["denied"])]
    time.sleep(0.5)  # the proxy child ends with the command and removes its socket directory
    leftover = [p for p in Path("/tmp").glob("sandbox-shim-egress-*") if p.stat().st_mtime > time.time() - 30]
    assert not leftover, leftover


def test_protected_link_is_refused_not_followed(work: Path, tmp_path: Path) -> None:
    """``.git`` as a link inside the permit path: the link itself cannot be held (a mount lands on its
    target), so the confined program could swap it for one to its own hooks: refused, exit 5."""
    from sandbox_shim.errors import CannotEnforce

    extra = work / "sub" / "gitdir"
    extra.parent.mkdir()
    subprocess.run(["git", "init", "-q", "--separate-git-dir", str(extra), str(work)], check=True)
    assert (work / ".git").is_file()  # a gitfile is held as a file (test_confine_held.py)
    assert probe(work, "write", extra / "hooks" / "pre-commit") == "denied:EROFS"
    (work / ".git").unlink()
    (work / ".git").symlink_to("sub/gitdir")
    with pytest.raises(CannotEnforce, match="symbolic link"):
        confine(("true", []), permit_path=str(work))
    assert probe(work, "write", extra / "hooks" / "pre-commit", protect=False) == "ok:wrote"  # opt-out


def test_cli_missing_bwrap_is_exit_5(work: Path, tmp_path: Path) -> None:
    witness = work / "ran"
    env = {**os.environ, "SANDBOX_SHIM_BWRAP": str(tmp_path / "no-bwrap")}
    r = cli("confine", "--permit-path", str(work), "--", "touch", str(witness), env=env)
    assert r.returncode == 5 and "cannot enforce confinement: bwrap" in r.stderr, r.stderr
    assert not witness.exists()


@pytest.mark.skipif(ABI < 6, reason=f"Landlock ABI {ABI} has no IPC scoping (needs 6)")
def test_signal_scope_in_the_landlock_layer_alone(tmp_path: Path) -> None:
    """Inside bwrap the pid namespace already hides host processes; the Landlock layer alone must
    also refuse to signal a process outside its domain."""
    target = subprocess.Popen(["sleep", "30"])
    code = (
        "import os, sys, errno\n"
        "try:\n"
        "    os.kill(int(sys.argv[1]), 0); print('MARKER:signalled')\n"
        "except OSError as e:\n"
        "    print('ERRNO:' + errno.errorcode[e.errno]); sys.exit(3)\n"
    )
    try:

        def go(scopes: list[str]) -> str:
            argv = landlock.helper_argv(
                os.path.realpath(sys.executable),
                landlock.__file__,
                ["/usr", "/etc", "/proc", os.path.realpath(sys.base_prefix)],
                [str(tmp_path)],
                ["/dev"],
                os.path.realpath(PY),
                ["-c", code, str(target.pid)],
                scopes=scopes,
            )
            return outcome(subprocess.run(argv, capture_output=True, text=True, timeout=60))

        assert go([]) == "ok:signalled"  # control: same layer, no scope
        assert go(["signal"]) == "denied:EPERM"
    finally:
        target.kill()
        target.wait()


def test_unwritable_report_leaves_nothing_behind(work: Path, tmp_path: Path) -> None:
    before = set(Path("/tmp").glob("sandbox-shim-egress-*"))
    with pytest.raises(ValueError, match="cannot be written"):
        confine(
            ("true", []),
            permit_path=str(work),
            allow_hosts=["example.com"],
            report=str(tmp_path / "no-such-dir" / "r.jsonl"),
        )
    assert set(Path("/tmp").glob("sandbox-shim-egress-*")) == before


def _legacy_tiocsti() -> bool:
    try:
        return Path("/proc/sys/dev/tty/legacy_tiocsti").read_text().strip() == "1"
    except OSError:
        return True  # kernels before 6.2 have no switch: TIOCSTI is always there


INJECT = (
    "import fcntl, termios, sys, errno\n"
    "try:\n"
    "    fcntl.ioctl(0, termios.TIOCSTI, b'#')\n"
    "    print('MARKER:injected')\n"
    "except OSError as e:\n"
    "    print('ERRNO:' + errno.errorcode[e.errno]); sys.exit(3)\n"
)


@pytest.mark.skipif(
    not _legacy_tiocsti(), reason="dev.tty.legacy_tiocsti=0: the kernel refuses TIOCSTI itself"
)
def test_terminal_injection_is_refused(work: Path) -> None:
    """A confined program on the caller's terminal (its controlling tty) cannot push input into it."""
    import pty

    def on_tty(argv: list[str], env: dict[str, str] | None = None, cwd: str | None = None) -> str:
        master, slave = pty.openpty()
        try:

            def ctty() -> None:
                os.setsid()
                import fcntl
                import termios

                fcntl.ioctl(0, termios.TIOCSCTTY, 0)

            r = subprocess.run(
                argv,
                stdin=slave,
                capture_output=True,
                text=True,
                timeout=60,
                env=env,
                cwd=cwd,
                preexec_fn=ctty,
            )
            return outcome(r)
        finally:
            os.close(master)
            os.close(slave)

    # control: a process without capabilities, owning the terminal, can inject (bwrap alone)
    assert (
        on_tty(["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--cap-drop", "ALL", "--", PY, "-c", INJECT])
        == "ok:injected"
    )
    spec = confine((PY, ["-c", INJECT]), permit_path=str(work))
    assert on_tty([spec["cmd"], *spec["args"]], spec["env"], spec["cd"]) == "denied:EPERM"
    spec = confine((PY, ["-c", INJECT]), permit_path=str(work), landlock=False)
    assert on_tty([spec["cmd"], *spec["args"]], spec["env"], spec["cd"]) == "denied:EPERM"
