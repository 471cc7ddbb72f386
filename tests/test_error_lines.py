"""Every message is one line per fact: text taken from config.json (keys, values, paths) is escaped where
a problem or error is rendered, so no input can break a line or forge one."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import base_config, shim_cmd
from sandbox_shim.errors import BundleProblem, ShimError, printable

PREFIXES = (b"error: ", b"warning: ", b"sandbox-shim: ")


def _ann(c: dict[str, Any]) -> None:
    c.setdefault("annotations", {})["sandbox-shim.x\nFAKE LINE"] = "1"


def _top(c: dict[str, Any]) -> None:
    c["a\nb\nerror: fake"] = 1


def _nul(c: dict[str, Any]) -> None:
    c["a\x00b"] = 1


def _sep(c: dict[str, Any]) -> None:
    c["process"]["cwd"] = "/x\u2028error: fake\r"


def _rel(c: dict[str, Any]) -> None:
    c["process"]["cwd"] = "rel/x"


def _empty(c: dict[str, Any]) -> None:
    c["process"]["cwd"] = ""


def _run(root: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(shim_cmd(root, *args), capture_output=True, timeout=60)


def test_printable_escapes_what_would_break_a_line() -> None:
    assert printable("plain /path ~ é") == "plain /path ~ é"  # the control: printable text is unchanged
    for bad in ("\n", "\r", "\x00", "\x1b", "\x7f", "\x85", "\u2028", "\u2029", "\udc80"):
        out = printable(f"a{bad}b")
        assert out.isprintable() and len(out) > 3, repr(bad)
    assert "\n" not in BundleProblem("/a\nb", "m\x00", "r", "h\r").line()
    assert ShimError("x\ny", "z\n").line() == "x\\ny; z\\n"


@pytest.mark.parametrize(
    ("mutate", "invalid"),
    [(_ann, True), (_top, False), (_nul, True), (_sep, True), (_rel, True), (_empty, True)],
)
def test_input_cannot_break_or_forge_a_line(
    make_bundle: Any, tmp_path: Path, mutate: Callable[[dict[str, Any]], None], invalid: bool
) -> None:
    cfg = base_config(["true"])
    mutate(cfg)
    bundle = make_bundle(cfg)
    root = tmp_path / "state"
    v = _run(root, "validate", "--bundle", str(bundle))
    lines = v.stderr.splitlines()
    assert lines and all(line.startswith(PREFIXES) for line in lines), v.stderr
    assert b"\x00" not in v.stderr and not any(line.startswith(b"error: fake") for line in lines)
    assert v.returncode == (3 if invalid else 0), v.stderr
    verbs = (["create", "--bundle", str(bundle), "c"], ["run", "--bundle", str(bundle), "r"])
    for verb in verbs if invalid else ():
        r = _run(root, *verb)
        assert r.returncode == 3, (verb, r.stderr)
        assert len(r.stderr.splitlines()) == 1 and r.stderr.startswith(b"sandbox-shim: "), r.stderr
        assert b"\x00" not in r.stderr and b"\r" not in r.stderr
        j = _run(root, "--log-format", "json", *verb)
        rec = json.loads(j.stderr)
        assert j.returncode == 3 and rec["error"] == "bundle_invalid" and rec["msg"].isprintable()
        assert not (root / verb[-1]).exists()


pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the CLI runs bundles on Linux")


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or __import__("os").geteuid() != 0, reason="needs root (mount)"
)
def test_spec_on_a_full_disk_is_74_and_leaves_no_file(tmp_path: Path) -> None:
    """spec writes config.json whole or not at all: on a full filesystem exit 74 (output could not be
    written), one line, no config.json and no temporary file.  Control: with room it writes the file."""
    import os

    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)], check=True)
    try:
        ok = subprocess.run(
            shim_cmd(tmp_path / "root", "spec", "--bundle", str(disk / "b1")), capture_output=True
        )
        assert ok.returncode == 0 and json.loads((disk / "b1" / "config.json").read_text())
        (disk / "b2").mkdir()
        fd = os.open(disk / "fill", os.O_WRONLY | os.O_CREAT, 0o600)  # every block taken
        try:
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError:
            pass
        finally:
            os.close(fd)
        r = subprocess.run(
            shim_cmd(tmp_path / "root", "spec", "--bundle", str(disk / "b2")), capture_output=True, text=True
        )
        assert r.returncode == 74, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
        assert os.listdir(disk / "b2") == []
    finally:
        subprocess.run(["umount", str(disk)], check=False)


def test_validate_warnings_are_json_records_with_log_format_json(make_bundle: Any, tmp_path: Path) -> None:
    """With --log-format json every line validate writes on stderr is one JSON record, warnings included
    (control: the same bundle in text mode prints the warning as text)."""
    cfg = base_config(["true"])
    cfg["unknownKey\u2028"] = 1
    b = make_bundle(cfg)
    text = subprocess.run(
        shim_cmd(tmp_path / "root", "validate", "--bundle", str(b)), capture_output=True, text=True
    )
    assert text.returncode == 0 and text.stderr.startswith("warning: "), text.stderr
    r = subprocess.run(
        shim_cmd(tmp_path / "root", "--log-format", "json", "validate", "--bundle", str(b)),
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    lines = r.stderr.strip().splitlines()
    assert lines and all(json.loads(x)["level"] == "warning" for x in lines), r.stderr
    assert "/unknownKey" in json.loads(lines[0])["pointer"]


@pytest.mark.parametrize("kind", ["fifo", "dir"])
def test_a_config_json_that_is_no_regular_file_is_refused_at_once(
    tmp_path: Path, kind: str, make_bundle: Any
) -> None:
    """A FIFO (or a directory) planted as config.json is refused with exit 3 in one line, at once: it is
    opened without blocking and checked before it is read.  Control: a regular config validates."""
    import os

    good = make_bundle(base_config(["true"]))
    ok = subprocess.run(shim_cmd(tmp_path / "root", "validate", "--bundle", str(good)), capture_output=True)
    assert ok.returncode == 0
    bad = tmp_path / "bad"
    bad.mkdir()
    if kind == "fifo":
        os.mkfifo(bad / "config.json")
    else:
        (bad / "config.json").mkdir()
    for verb in (["validate", "--bundle", str(bad)], ["create", "--bundle", str(bad), "x"]):
        r = subprocess.run(shim_cmd(tmp_path / "root", *verb), capture_output=True, text=True, timeout=20)
        assert r.returncode == 3 and len(r.stderr.strip().splitlines()) == 1, (verb, r.stderr)
        assert "regular file" in r.stderr or "directory" in r.stderr.lower(), r.stderr
