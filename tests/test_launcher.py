"""The installed ``sandbox-shim`` command on Linux (``bin/sandbox-shim``, installed by setup.py): /bin/sh
starts the venv's interpreter with ``-I -S`` and the file's Python part puts the package on sys.path itself,
so ``site`` (its .pth files) never runs for a venv install, a wheel's or an editable one's; any other
layout falls back to ``site``.  Each case is a real venv (``python -m venv --without-pip``) holding the
launcher, as pip lays them out; a .pth file that leaves a marker tells whether ``site`` ran.  The real
installs (``pip install`` of the wheel, ``pip install -e``) are exercised by CI's package lane."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

LAUNCHER = REPO / "bin" / "sandbox-shim"
PACKAGE = REPO / "shim" / "sandbox_shim"
pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the launcher is installed on Linux only")


def make_venv(where: Path, system_site: bool = False) -> tuple[Path, Path]:
    """A venv with the launcher in bin/ and a .pth that leaves ``where/site-ran`` when ``site`` runs;
    returns (the launcher, site-packages)."""
    base = getattr(sys, "_base_executable", sys.executable)
    system = ["--system-site-packages"] if system_site else []
    cmd = [base, "-m", "venv", "--without-pip", *system, str(where)]
    subprocess.run(cmd, check=True, capture_output=True)
    sp = where / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    assert sp.is_dir()
    (sp / "zz-marker.pth").write_text(f"import pathlib; pathlib.Path({str(where / 'site-ran')!r}).touch()\n")
    launcher = where / "bin" / "sandbox-shim"
    shutil.copy(LAUNCHER, launcher)
    return launcher, sp


def run(launcher: Path, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``state`` of an id that does not exist: exit status 6 and its line, through the real CLI."""
    return subprocess.run(
        [str(launcher), "--root", str(tmp_path / "state"), "state", "nope"],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        cwd=tmp_path,
        timeout=60,
    )


def decoy(tmp_path: Path) -> Path:
    """A ``sandbox_shim`` package that exits 99: found only if PYTHONPATH were honoured."""
    d = tmp_path / "decoy" / "sandbox_shim"
    (d / "cli").mkdir(parents=True)
    (d / "__init__.py").write_text("")
    (d / "cli" / "__init__.py").write_text("import os\ndef main():\n    os._exit(99)\n")
    return d.parent


def test_wheel_layout_runs_without_site_and_ignores_pythonpath(tmp_path: Path) -> None:
    launcher, sp = make_venv(tmp_path / "venv")
    (sp / "sandbox_shim").symlink_to(PACKAGE)  # where pip puts the wheel's package
    p = run(launcher, tmp_path, PYTHONPATH=str(decoy(tmp_path)))
    assert (p.returncode, p.stdout) == (6, ""), p.stderr
    assert "does not exist" in p.stderr
    assert not (tmp_path / "venv" / "site-ran").exists()


def test_editable_layout_runs_without_site(tmp_path: Path) -> None:
    launcher, sp = make_venv(tmp_path / "venv")
    (sp / "__editable__.sandbox_shim-0.1.0.pth").write_text(f"{PACKAGE.parent}\n")  # setuptools' own line
    p = run(launcher, tmp_path)
    assert p.returncode == 6, p.stderr
    assert not (tmp_path / "venv" / "site-ran").exists()


def test_other_layouts_fall_back_to_site(tmp_path: Path) -> None:
    """A venv that includes the system's packages: ``site`` decides sys.path (the control: the marker
    appears, and the package is still found, through the editable .pth that site processes)."""
    launcher, sp = make_venv(tmp_path / "venv", system_site=True)
    (sp / "__editable__.sandbox_shim-0.1.0.pth").write_text(f"{PACKAGE.parent}\n")
    p = run(launcher, tmp_path)
    assert p.returncode == 6, p.stderr
    assert (tmp_path / "venv" / "site-ran").exists()


def test_an_editable_import_hook_falls_back_to_site(tmp_path: Path) -> None:
    """An editable install through an import hook (a .pth of ``import`` lines) is ``site``'s to run."""
    launcher, sp = make_venv(tmp_path / "venv")
    (sp / "__editable__.sandbox_shim-0.1.0.pth").write_text(
        f"import sys; sys.path.append({str(PACKAGE.parent)!r})\n"
    )
    p = run(launcher, tmp_path)
    assert p.returncode == 6, p.stderr
    assert (tmp_path / "venv" / "site-ran").exists()


def test_exit_status_and_arguments_pass_through(tmp_path: Path) -> None:
    """The shell part execs: the status is the CLI's own, arguments with spaces arrive intact."""
    launcher, sp = make_venv(tmp_path / "venv")
    (sp / "sandbox_shim").symlink_to(PACKAGE)
    p = subprocess.run(
        [str(launcher), "--root", str(tmp_path / "state"), "kill", "no such id", "KILL"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2 and "invalid container id 'no such id'" in p.stderr, p.stderr  # one argument
    p = subprocess.run([str(launcher), "--root", str(tmp_path / "state"), "state", "a"], capture_output=True)
    assert p.returncode == 6, p.stderr


def test_a_symlink_to_the_launcher_runs_the_venv_it_points_into(tmp_path: Path) -> None:
    """pipx's layout: the venv's command linked from a directory on PATH that holds no python3.  The
    interpreter and the package are the venv's (the control: the same link to a venv without the
    package fails to import, so the package is not found some other way)."""
    launcher, sp = make_venv(tmp_path / "venv")
    (sp / "sandbox_shim").symlink_to(PACKAGE)
    on_path = tmp_path / "bin"
    on_path.mkdir()
    (on_path / "sandbox-shim").symlink_to(launcher)
    env = {"PATH": f"{on_path}:/usr/bin:/bin"}
    p = subprocess.run(
        ["sandbox-shim", "--root", str(tmp_path / "state"), "state", "nope"],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        cwd=tmp_path,
        timeout=60,
    )
    assert (p.returncode, p.stdout) == (6, ""), p.stderr
    assert not (tmp_path / "venv" / "site-ran").exists()
    (sp / "sandbox_shim").unlink()
    p = subprocess.run(
        ["sandbox-shim", "--root", str(tmp_path / "state"), "state", "nope"],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        cwd=tmp_path,
        timeout=60,
    )
    assert p.returncode == 70 and "cannot import the package" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and len(p.stderr.splitlines()) == 1


def test_a_python3_beside_the_symlink_is_not_taken_for_the_venvs(tmp_path: Path) -> None:
    """A link in a directory that holds another interpreter (/usr/local/bin beside a venv's command):
    the venv's own interpreter runs, not the python3 beside the link (control: that python3 is one
    that cannot import the package, so taking it would fail)."""
    launcher, sp = make_venv(tmp_path / "venv")
    (sp / "sandbox_shim").symlink_to(PACKAGE)
    on_path = tmp_path / "bin"
    on_path.mkdir()
    (on_path / "sandbox-shim").symlink_to(launcher)
    other = on_path / "python3"
    other.write_text("#!/bin/sh\necho FOREIGN-PYTHON >&2\nexit 42\n")
    other.chmod(0o755)
    assert subprocess.run([str(other)], capture_output=True).returncode == 42  # the control
    p = subprocess.run(
        [str(on_path / "sandbox-shim"), "--root", str(tmp_path / "state"), "state", "nope"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (p.returncode, p.stdout) == (6, ""), p.stderr
    assert "FOREIGN-PYTHON" not in p.stderr
