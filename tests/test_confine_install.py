"""The confinement holds wherever the tool is installed: ``~/bin``, ``~/.local/bin`` (a pip --user
console script), a project's ``node_modules/.bin``, a venv, ``~/.cargo/bin``, nvm's node.

Each case builds the install place under a fake ``$HOME`` (a temp dir) holding ``~/.ssh/id_rsa``.
Control first: the tool, run unconfined, reads the fake key (so a later failure is a denial, not a
broken tool); then confined with ``permit_path=~/work`` it reads a file there (it *runs*), and the
same read of the key is denied.  Neighbours of the install place (the rest of ``~/.local``, the
project around ``node_modules``, other nvm packages) are denied too.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sandbox_shim.hardening.confinement import confine
from sandbox_shim.platforms.linux import landlock

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or not os.access("/usr/bin/bwrap", os.X_OK),
    reason="needs Linux with bwrap at /usr/bin/bwrap",
)

SYS_PY = "/usr/bin/python3"
NODE = shutil.which("node")
LAYERS = [
    pytest.param(False, id="bwrap"),
    pytest.param(
        True,
        id="bwrap+landlock",
        marks=pytest.mark.skipif(landlock.abi_version() == 0, reason="this kernel has no Landlock"),
    ),
]
PY_PROBE = """import errno, sys
def main():
    try:
        print("MARKER:" + open(sys.argv[1]).read().strip())
    except OSError as e:
        print("ERRNO:" + errno.errorcode.get(e.errno, str(e.errno)))
        return 3
    return 0
"""
JS_PROBE = """const fs = require('fs');
try { console.log('MARKER:' + fs.readFileSync(process.argv[2], 'utf8').trim()); }
catch (e) { console.log('ERRNO:' + e.code); process.exit(3); }
"""
SH_PROBE = """#!/bin/sh
if c=$(cat "$1" 2>/dev/null); then echo "MARKER:$c"; else echo "ERRNO:denied"; exit 3; fi
"""


def outcome(r: subprocess.CompletedProcess[str]) -> str:
    if r.args and os.path.basename(str(r.args[-2])) in ("ctool",):  # a plain cat: no markers
        r = subprocess.CompletedProcess(
            r.args,
            3 if r.returncode == 1 else r.returncode,
            f"MARKER:{r.stdout}" if r.returncode == 0 else "ERRNO:",
            r.stderr,
        )
    if r.returncode == 0 and "MARKER:" in r.stdout:
        return "ok:" + r.stdout.split("MARKER:", 1)[1].strip()
    if r.returncode in (1, 3) and "MARKER:" not in r.stdout and ("ERRNO:" in r.stdout or r.stderr):
        return "denied"
    return f"died:rc={r.returncode}:{r.stdout[-200:]}{r.stderr[-300:]}"


@pytest.fixture
def home(tmp_path: Path) -> dict[str, Any]:
    h = tmp_path / "home"
    (h / ".ssh").mkdir(parents=True)
    (h / ".ssh" / "id_rsa").write_text("FAKE-PRIVATE-KEY")
    (h / "work").mkdir()
    (h / "work" / "mine").write_text("mine")
    env = {"HOME": str(h), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    return {"home": h, "work": h / "work", "key": h / ".ssh" / "id_rsa", "env": env}


def check(
    h: dict[str, Any],
    tool: str,
    ll: bool,
    env: dict[str, str] | None = None,
    also_denied: tuple[Path, ...] = (),
) -> None:
    env = env or h["env"]
    # control: unconfined, the tool reads the key (and each neighbour)
    for p in (h["key"], *also_denied):
        r = subprocess.run([tool, str(p)], env=env, capture_output=True, text=True, timeout=60)
        assert outcome(r).startswith("ok:"), f"control failed: {outcome(r)}"
    spec = confine((tool, [str(h["work"] / "mine")]), permit_path=str(h["work"]), env=env, landlock=ll)
    r = subprocess.run(
        [spec["cmd"], *spec["args"]],
        env=spec["env"],
        cwd=spec["cd"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert outcome(r) == "ok:mine", f"the tool does not run confined: {outcome(r)}"
    home_binds = [a for a in spec["args"] if a == str(h["home"])]
    assert not home_binds, "the home directory itself is in the read set"
    for p in (h["key"], *also_denied):
        spec = confine((tool, [str(p)]), permit_path=str(h["work"]), env=env, landlock=ll)
        r = subprocess.run(
            [spec["cmd"], *spec["args"]],
            env=spec["env"],
            cwd=spec["cd"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert outcome(r) == "denied", f"breach of {p}: {outcome(r)}"


def script(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


@pytest.mark.parametrize("ll", LAYERS)
def test_tool_in_home_bin(home: dict[str, Any], ll: bool) -> None:
    tool = script(home["home"] / "bin" / "tool", SH_PROBE)
    check(home, str(tool), ll, also_denied=(home["home"] / "bin" / ".." / ".ssh" / "id_rsa",))


@pytest.mark.parametrize("ll", LAYERS)
def test_pip_user_console_script_in_local_bin(home: dict[str, Any], ll: bool) -> None:
    ver = f"{sys.version_info[0]}.{sys.version_info[1]}"
    real = os.path.basename(os.path.realpath(SYS_PY))
    if real != f"python{ver}":
        ver = real[len("python") :]
    site = home["home"] / ".local" / "lib" / f"python{ver}" / "site-packages"
    script(site / "faketool" / "__init__.py", "")
    script(site / "faketool" / "cli.py", PY_PROBE)
    # the form pip writes for a console_scripts entry point
    tool = script(
        home["home"] / ".local" / "bin" / "faketool",
        f"#!{SYS_PY}\nimport sys\nfrom faketool.cli import main\nif __name__ == '__main__':\n"
        "    sys.exit(main())\n",
    )
    (home["home"] / ".local" / "share").mkdir(parents=True)
    other = home["home"] / ".local" / "share" / "token"
    other.write_text("other-secret")
    check(home, str(tool), ll, also_denied=(other,))


@pytest.mark.skipif(NODE is None, reason="node is not installed")
@pytest.mark.parametrize("ll", LAYERS)
def test_project_node_modules_bin(home: dict[str, Any], ll: bool) -> None:
    proj = home["home"] / "proj"
    nm = proj / "node_modules"
    script(nm / "ntool" / "package.json", '{"name": "ntool", "bin": "cli.js", "dependencies": {"dep": "1"}}')
    script(nm / "dep" / "package.json", '{"name": "dep", "main": "index.js"}')
    script(nm / "dep" / "index.js", "module.exports = 'dep';\n")
    script(nm / "ntool" / "cli.js", "#!/usr/bin/env node\nrequire('dep');\n" + JS_PROBE)
    (nm / ".bin").mkdir()
    (nm / ".bin" / "ntool").symlink_to("../ntool/cli.js")
    (proj / "secret.txt").write_text("project-secret")
    check(home, str(nm / ".bin" / "ntool"), ll, also_denied=(proj / "secret.txt",))


@pytest.mark.parametrize("ll", LAYERS)
def test_venv_console_script(home: dict[str, Any], ll: bool) -> None:
    venv = home["home"] / "venvs" / "v"
    subprocess.run([SYS_PY, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = next((venv / "lib").glob("python3*/site-packages"))
    script(site / "vtool.py", PY_PROBE)
    tool = script(
        venv / "bin" / "vtool", f"#!{venv}/bin/python\nimport sys\nfrom vtool import main\nsys.exit(main())\n"
    )
    (home["home"] / "venvs" / "notes").write_text("beside-the-venv")
    check(home, str(tool), ll, also_denied=(home["home"] / "venvs" / "notes",))


@pytest.mark.parametrize("ll", LAYERS)
def test_cargo_bin_elf(home: dict[str, Any], ll: bool) -> None:
    bin_dir = home["home"] / ".cargo" / "bin"
    bin_dir.mkdir(parents=True)
    # a statically-placed ELF binary (a copy of the system cat, as `cargo install` leaves one binary)
    cat = bin_dir / "ctool"
    shutil.copy2("/bin/cat", cat)
    (home["home"] / ".cargo" / "credentials.toml").write_text("cargo-token")
    check(home, str(cat), ll, also_denied=(home["home"] / ".cargo" / "credentials.toml",))


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler to build the ELF fixture")
@pytest.mark.parametrize("ll", LAYERS)
def test_elf_with_its_own_shared_library(home: dict[str, Any], ll: bool, tmp_path: Path) -> None:
    """A binary whose library sits beside it (RUNPATH $ORIGIN/../lib): found by the ELF reading."""
    root = home["home"] / ".cargo"
    (root / "lib").mkdir(parents=True)
    (root / "bin").mkdir(parents=True)
    src = tmp_path / "src"
    src.mkdir()
    (src / "lib.c").write_text(
        '#include <stdio.h>\nint say(const char *p){FILE *f=fopen(p,"r");'
        "char b[256];"
        'if(!f){puts("ERRNO:denied");return 3;}size_t n=fread(b,1,255,f);b[n]=0;'
        'printf("MARKER:%s\\n",b);return 0;}\n'
    )
    (src / "main.c").write_text("int say(const char*);int main(int c,char**v){return say(v[1]);}\n")
    subprocess.run(
        ["cc", "-shared", "-fPIC", "-o", str(root / "lib" / "libsay.so"), str(src / "lib.c")],
        check=True,
        timeout=120,
    )
    subprocess.run(
        [
            "cc",
            "-o",
            str(root / "bin" / "sayer"),
            str(src / "main.c"),
            f"-L{root / 'lib'}",
            "-lsay",
            "-Wl,-rpath,$ORIGIN/../lib",
            "-Wl,--enable-new-dtags",
        ],
        check=True,
        timeout=120,
    )
    (root / "lib" / "other.txt").write_text("not-needed")
    check(home, str(root / "bin" / "sayer"), ll, also_denied=(root / "lib" / "other.txt",))


@pytest.mark.skipif(NODE is None, reason="node is not installed")
@pytest.mark.parametrize("ll", LAYERS)
def test_nvm_node_and_global_package(home: dict[str, Any], ll: bool) -> None:
    prefix = home["home"] / ".nvm" / "versions" / "node" / "v20.0.0"
    (prefix / "bin").mkdir(parents=True)
    node = prefix / "bin" / "node"
    try:
        os.link(os.path.realpath(NODE or ""), node)
    except OSError:
        shutil.copy2(os.path.realpath(NODE or ""), node)
    pkgs = prefix / "lib" / "node_modules"
    script(pkgs / "gtool" / "package.json", '{"name": "gtool", "bin": "cli.js"}')
    script(pkgs / "gtool" / "cli.js", "#!/usr/bin/env node\n" + JS_PROBE)
    (prefix / "bin" / "gtool").symlink_to("../lib/node_modules/gtool/cli.js")
    script(pkgs / "other" / "package.json", '{"name": "other"}')
    (pkgs / "other" / "secret").write_text("other-package")
    env = {**home["env"], "PATH": f"{prefix / 'bin'}:/usr/bin:/bin"}
    check(home, str(prefix / "bin" / "gtool"), ll, env=env, also_denied=(pkgs / "other" / "secret",))
