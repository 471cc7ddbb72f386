"""The inside step of ``confine`` on Linux: the C helper ``sandbox-shim-confine-exec``.

Built by ``pip install`` (setup.py); it applies the Landlock ruleset and the terminal filter that
``platforms/linux/confine.py`` precomputed, then execs the program.  Each breach is tried after a
control shows the same probe succeeding where it is allowed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from sandbox_shim.hardening.confinement import confine

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="Linux only (Landlock, bwrap)")

if sys.platform == "linux":
    from sandbox_shim.platforms.linux import confine as lc
    from sandbox_shim.platforms.linux import landlock

    ABI = landlock.abi_version()
else:  # pragma: no cover
    ABI = 0
needs_landlock = pytest.mark.skipif(ABI == 0, reason="this kernel has no Landlock (landlock_create_ruleset)")
REPO = Path(__file__).resolve().parent.parent


def helper() -> str:
    path = lc.native_helper()
    assert path is not None, (
        f"{lc.NATIVE_HELPER} is not built: `pip install -e .` builds it (setup.py; needs a C compiler)"
    )
    return path


def run(argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, **kw)  # type: ignore[call-overload]


def rules(tmp: Path) -> list[str]:
    """Read-only system trees, ``tmp/rw`` read-write; ``tmp/secret`` outside every rule."""
    return lc.native_argv(
        helper(), ["/usr", "/etc", "/proc", "/dev"], [str(tmp / "rw")], [], "/bin/sh", [], abi=ABI
    )[:-2]  # drop "--" and the program


def test_the_helper_is_built_and_static_or_system_only() -> None:
    out = run(["ldd", helper()]).stdout + run(["ldd", helper()]).stderr
    assert "not a dynamic executable" in out or all(
        p.startswith(("/lib", "/usr/lib", "linux-vdso", "/lib64")) or "=>" not in p
        for p in (line.split("=>")[-1].strip() for line in out.splitlines())
    )


def test_pip_build_step_makes_the_helper(tmp_path: Path) -> None:
    r = run(
        [
            sys.executable,
            "setup.py",
            "-q",
            "build_ext",
            "--build-lib",
            str(tmp_path / "lib"),
            "--build-temp",
            str(tmp_path / "tmp"),
        ],
        cwd=REPO,
    )
    assert r.returncode == 0, r.stderr
    built = tmp_path / "lib" / "sandbox_shim" / "platforms" / "linux" / "sandbox-shim-confine-exec"
    assert built.is_file() and os.access(built, os.X_OK)
    control = run([str(built), "--", "/bin/echo", "ran"])
    assert (control.returncode, control.stdout) == (0, "ran\n")


@needs_landlock
def test_landlock_rules_hold_after_a_control(tmp_path: Path) -> None:
    (tmp_path / "rw").mkdir()
    (tmp_path / "rw" / "mine").write_text("mine")
    (tmp_path / "secret").write_text("secret")
    base = rules(tmp_path)
    control = run([*base, "--", "/bin/cat", str(tmp_path / "rw" / "mine")])
    assert (control.returncode, control.stdout) == (0, "mine")
    breach = run([*base, "--", "/bin/cat", str(tmp_path / "secret")])
    assert breach.returncode != 0 and "secret" not in breach.stdout
    assert "Permission denied" in breach.stderr
    new, etc = tmp_path / "rw" / "new", f"/etc/x-{os.getpid()}"
    write = run([*base, "--", "/bin/sh", "-c", f"echo x > {new} && echo x > {etc}"])
    assert new.read_text() == "x\n"
    assert write.returncode != 0 and not os.path.exists(etc)


@needs_landlock
def test_a_file_rule_keeps_only_file_rights(tmp_path: Path) -> None:
    (tmp_path / "rw").mkdir()
    f = tmp_path / "one"
    f.write_text("one")
    argv = lc.native_argv(
        helper(), ["/usr", "/etc", str(f)], [str(tmp_path / "rw")], [], "/bin/cat", [str(f)], abi=ABI
    )
    r = run(argv)
    assert (r.returncode, r.stdout) == (0, "one")  # READ_DIR on a file would be EINVAL: it is dropped


@needs_landlock
def test_fails_closed_when_the_ruleset_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    # a right no ABI has: landlock_create_ruleset fails with EINVAL, nothing runs
    r = run([helper(), "--ruleset", str(1 << 40), "0", "--", "/bin/sh", "-c", f"touch {marker}"])
    assert r.returncode == 126 and not marker.exists()
    assert "could not be applied" in r.stderr and "landlock_create_ruleset" in r.stderr


def test_bad_arguments_run_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    prog = ["--", "/bin/sh", "-c", f"touch {marker}"]
    for bad in (
        ["--bogus"],
        ["--ruleset", "x", "0"],
        ["--ruleset", "0", "0"],
        ["--seccomp", "abc"],
        ["--seccomp", "zz" * 8],
        ["--rule", "1", "/usr"],
        [],
    ):
        r = run([helper(), *bad, *(prog if bad else ["--"])])
        assert r.returncode == 126 and not marker.exists(), (bad, r.stderr)
    control = run([helper(), *prog])
    assert control.returncode == 0 and marker.exists()


def test_exec_failures_exit_like_a_shell() -> None:
    assert run([helper(), "--", "/nonexistent/prog"]).returncode == 127
    assert run([helper(), "--", "/etc/passwd"]).returncode == 126  # not executable


def test_environment_and_argv_pass_through_unchanged() -> None:
    env = {"PATH": "/usr/bin:/bin", "TOKEN": "s3cr=t", "EMPTY": ""}
    r = run([helper(), "--", "/usr/bin/env"], env=env)
    assert sorted(r.stdout.splitlines()) == sorted(f"{k}={v}" for k, v in env.items())
    r = run([helper(), "--", "printf", "%s|", "a b", "", "--rule"], env=env)  # a bare name: PATH search
    assert r.stdout == "a b||--rule|"


def test_terminal_filter_denies_tiocsti_after_a_control() -> None:
    code = (
        "import fcntl, os, pty, termios\n"
        "m, s = pty.openpty()\n"
        "fcntl.ioctl(s, termios.TIOCGWINSZ, b'\\0' * 8)\n"  # control: another ioctl on it works
        "try:\n    fcntl.ioctl(s, termios.TIOCSTI, b'#'); print('pushed')\n"
        "except OSError as e:\n    print('errno', e.errno)\n"
    )
    control = run([helper(), "--", sys.executable, "-I", "-c", code])
    assert control.returncode == 0 and control.stdout.strip() != "errno 1", control.stderr
    filt = landlock.tty_filter().hex()
    r = run([helper(), "--seccomp", filt, "--", sys.executable, "-I", "-c", code])
    assert r.returncode == 0 and r.stdout.strip() == "errno 1", r.stderr  # EPERM from the filter


@needs_landlock
def test_native_and_python_helpers_carry_the_same_rules() -> None:
    ro, rw, dev = ["/usr", "/etc/ssl", "/proc"], ["/tmp/x"], ["/dev"]
    native = lc.native_argv("H", ro, rw, dev, "/bin/true", ["a"], abi=ABI, scopes=["signal"])
    python = landlock.helper_argv("PY", "S", ro, rw, dev, "/bin/true", ["a"], scopes=["signal"])
    handled = landlock.handled_fs(ABI)
    got = [(native[i + 2], int(native[i + 1])) for i, a in enumerate(native) if a == "--rule"]
    rights = {"--ro": landlock.READ_ONLY, "--rw": landlock.READ_WRITE, "--dev": landlock.DEVICES}
    want = [(python[i + 1], rights[a] & handled) for i, a in enumerate(python) if a in rights]
    assert got == want
    at = native.index("--ruleset")
    assert (int(native[at + 1]), int(native[at + 2])) == (handled, landlock.SCOPE_SIGNAL)
    assert native[-3:] == ["--", "/bin/true", "a"]


@needs_landlock
def test_confine_uses_it_and_leaves_the_interpreter_out(tmp_path: Path) -> None:
    spec = confine(("/bin/true", []), permit_path=str(tmp_path), trial=False)
    args = spec["args"]
    assert lc.NATIVE_INSIDE in args and lc.HELPER_PATH not in args
    prefix = os.path.realpath(sys.executable)
    assert not any(a == prefix for a in args), "the C helper needs no Python in the read set"
    r = run([spec["cmd"], *args], env=spec["env"], cwd=spec["cd"])
    spec.release()
    assert r.returncode == 0, r.stderr


@needs_landlock
def test_without_the_built_helper_the_python_one_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lc, "NATIVE_HELPER", str(tmp_path / "not-built"))
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "mine").write_text("mine")
    (tmp_path / "secret").write_text("secret")
    for target, ok in ((tmp_path / "p" / "mine", True), (tmp_path / "secret", False)):
        spec = confine(("/bin/cat", [str(target)]), permit_path=str(tmp_path / "p"), trial=False)
        assert lc.HELPER_PATH in spec["args"] or lc.HELPER_PATH + "c" in spec["args"]
        r = run([spec["cmd"], *spec["args"]], env=spec["env"], cwd=spec["cd"])
        spec.release()
        assert (r.returncode == 0) == ok and ("secret" in r.stdout) is False, r.stderr


@needs_landlock
def test_through_confine_landlock_denies_what_bwrap_alone_allows(tmp_path: Path) -> None:
    probe = "echo renamed > /proc/$$/comm && read name < /proc/$$/comm && echo $name"  # the shell's own
    off = confine(("/bin/sh", ["-c", probe]), permit_path=str(tmp_path), landlock=False, trial=False)
    control = run([off["cmd"], *off["args"]], env=off["env"], cwd=off["cd"])
    off.release()
    assert (control.returncode, control.stdout) == (0, "renamed\n"), control.stderr  # bwrap's /proc is rw
    on = confine(("/bin/sh", ["-c", probe]), permit_path=str(tmp_path), trial=False)
    assert lc.NATIVE_INSIDE in on["args"]
    breach = run([on["cmd"], *on["args"]], env=on["env"], cwd=on["cd"])
    on.release()
    assert breach.returncode != 0 and "renamed" not in breach.stdout
    assert "Permission denied" in breach.stderr  # Landlock's EACCES: /proc is read-only in the ruleset
