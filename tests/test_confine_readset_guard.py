"""Content inside the permit path never widens the read set beyond it.

A confined program can rewrite anything in its permit path between runs: a ``package.json``, a ``#!``
line, a link.  The next run's read set is computed from those files, so what they name outside the
permit path is granted only when ``readset.Guard.admit`` allows it.  Each case: a control run shows
the probe reads the target when that is allowed (unconfined, or the same layout outside the permit
path), then the planted layout inside the permit path leaves it unreadable.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sandbox_shim.hardening import readset
from sandbox_shim.hardening.confinement import confine

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or not os.access("/usr/bin/bwrap", os.X_OK),
    reason="needs Linux with bwrap at /usr/bin/bwrap",
)

NODE = "/usr/bin/node"
JS_PROBE = """const fs = require('fs');
try { console.log('MARKER:' + fs.readFileSync(process.argv[2], 'utf8').trim()); }
catch (e) { console.log('ERRNO:' + e.code); process.exit(3); }
"""


def run_confined(tool: str, target: Path, permit: Path, env: dict[str, str]) -> str:
    spec = confine((tool, [str(target)]), permit_path=str(permit), env=env)
    r = subprocess.run(
        [spec["cmd"], *spec["args"]],
        env=spec["env"],
        cwd=spec["cd"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if r.returncode == 0 and "MARKER:" in r.stdout:
        return "ok:" + r.stdout.split("MARKER:", 1)[1].strip()
    if "MARKER:" not in r.stdout and r.returncode != 0:
        return "denied"
    return f"died:{r.returncode}:{r.stdout}{r.stderr}"


def bound(spec: Any) -> set[str]:
    """The paths bwrap binds (or recreates as links) inside."""
    a = spec["args"]
    return {a[i + 2] for i, x in enumerate(a[:-2]) if x in ("--ro-bind", "--bind", "--symlink")}


@pytest.fixture
def home(tmp_path: Path) -> dict[str, Any]:
    h = tmp_path / "home"
    proj, other = h / "proj", h / "otherproj"
    proj.mkdir(parents=True)
    other.mkdir()
    (other / ".env").write_text("OTHER-SECRET")
    (proj / "mine").write_text("mine")
    env = {"HOME": str(h), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    return {"home": h, "proj": proj, "other": other, "secret": other / ".env", "env": env}


def node_tool(proj: Path, deps: dict[str, str]) -> Path:
    pkg = proj / "node_modules" / "ntool"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "package.json").write_text(json.dumps({"name": "ntool", "bin": "cli.js", "dependencies": deps}))
    (pkg / "cli.js").write_text("#!/usr/bin/env node\n" + JS_PROBE)
    (pkg / "cli.js").chmod(0o755)
    (proj / "node_modules" / ".bin").mkdir(exist_ok=True)
    link = proj / "node_modules" / ".bin" / "ntool"
    if not link.is_symlink():
        link.symlink_to("../ntool/cli.js")
    return link


@pytest.mark.skipif(not os.access(NODE, os.X_OK), reason="node is not installed at /usr/bin/node")
def test_planted_node_dependency_link_grants_nothing_outside(home: dict[str, Any]) -> None:
    proj, other = home["proj"], home["other"]
    tool = node_tool(proj, {"x": "1"})
    os.symlink("../../otherproj", proj / "node_modules" / "x")
    (other / "package.json").write_text('{"name": "x"}')
    # control: the same tool run with the permit path beside the project (the package.json is then
    # the caller's, not the confined program's) grants the dependency, and the secret is read there
    work = home["home"] / "work"
    work.mkdir()
    assert run_confined(str(tool), home["secret"], work, home["env"]) == "ok:OTHER-SECRET"
    # inside the permit path the tool still runs (reads its own project) ...
    assert run_confined(str(tool), proj / "mine", proj, home["env"]) == "ok:mine"
    # ... and the planted dependency does not widen the read set
    assert run_confined(str(tool), home["secret"], proj, home["env"]) == "denied"


@pytest.mark.skipif(not os.access(NODE, os.X_OK), reason="node is not installed at /usr/bin/node")
def test_absolute_or_climbing_dependency_names_are_ignored(home: dict[str, Any]) -> None:
    proj, other = home["proj"], home["other"]
    (other / "package.json").write_text('{"name": "x"}')
    tool = node_tool(proj, {str(other): "1", "../../../otherproj": "1", "@s/../../x": "1"})
    assert readset._package_name("@scope/name") and readset._package_name("left-pad")
    for bad in (str(other), "../x", "@s/../x", "a/b", "", "."):
        assert not readset._package_name(bad), bad
    # control: unconfined the tool reads the secret
    r = subprocess.run([str(tool), str(home["secret"])], env=home["env"], capture_output=True, text=True)
    assert "MARKER:OTHER-SECRET" in r.stdout
    assert run_confined(str(tool), home["secret"], proj, home["env"]) == "denied"
    # trusted content (outside the permit path) also never climbs out through such a name
    guard = readset.Guard([str(home["home"] / "work")], home["env"])
    assert str(other) not in readset.node_packages(str(proj / "node_modules" / "ntool" / "cli.js"), guard)


def test_planted_shebang_naming_a_file_outside_is_not_granted(home: dict[str, Any]) -> None:
    proj, secret = home["proj"], home["secret"]
    secret.chmod(0o755)  # even an executable file outside is no interpreter to grant
    tool = proj / "tool"
    tool.write_text(f"#!{secret}\n")
    tool.chmod(0o755)
    guard = readset.Guard([str(proj)], home["env"])
    # control: the same script outside the permit path names its interpreter, which is granted
    outside = home["home"] / "tool"
    outside.write_text(f"#!{secret}\n")
    outside.chmod(0o755)
    assert str(secret) in readset.runtime_read_set(str(outside), home["env"], guard=guard)
    assert str(secret) not in readset.runtime_read_set(str(tool), home["env"], guard=guard)
    spec = confine((str(outside), []), permit_path=str(proj), env=home["env"])
    assert str(secret) in bound(spec)
    spec = confine((str(tool), []), permit_path=str(proj), env=home["env"])
    assert str(secret) not in bound(spec), "a #! line inside the permit path granted a file outside"


def test_link_inside_permit_path_to_a_data_file_is_not_granted(home: dict[str, Any]) -> None:
    proj, secret = home["proj"], home["secret"]
    secret.chmod(0o755)
    (proj / "bin").mkdir()
    os.symlink(str(secret), proj / "bin" / "tool")
    # control: a link the caller made outside the permit path is the caller's choice
    os.symlink(str(secret), home["home"] / "tool")
    spec = confine((str(home["home"] / "tool"), []), permit_path=str(proj), env=home["env"])
    assert str(secret) in bound(spec)
    spec = confine((str(proj / "bin" / "tool"), []), permit_path=str(proj), env=home["env"])
    assert str(secret) not in bound(spec), "a link inside the permit path granted a file outside"


def test_venv_link_inside_permit_path_cannot_point_at_another_tree(home: dict[str, Any]) -> None:
    """``proj/.venv/bin -> ~/otherproj/bin``: the venv root beside it is not granted."""
    proj, other = home["proj"], home["other"]
    (other / "bin").mkdir()
    os.symlink("/usr/bin/python3", other / "bin" / "python3")
    (other / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (other / "lib").mkdir()
    (other / "lib" / "data").write_text("lib-secret")
    (proj / ".venv").mkdir()
    os.symlink(str(other / "bin"), proj / ".venv" / "bin")
    guard = readset.Guard([str(proj)], home["env"])
    control = readset.runtime_read_set(str(other / "bin" / "python3"), home["env"], guard=guard)
    assert str(other / "lib") in control  # control: the caller's own venv gets its lib
    got = readset.runtime_read_set(str(proj / ".venv" / "bin" / "python3"), home["env"], guard=guard)
    assert str(other / "lib") not in got and str(other / "pyvenv.cfg") not in got
