"""confine's one-line errors: a command name with a newline, a settings file naming a key twice.

Control first: the well-formed name runs and the settings file without the duplicate is accepted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or not os.access("/usr/bin/bwrap", os.X_OK),
    reason="needs Linux with bwrap at /usr/bin/bwrap",
)

SHIM = [sys.executable, "-m", "sandbox_shim"]


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SHIM, "confine", *args], capture_output=True, text=True, timeout=60, cwd=cwd)


def test_command_name_with_a_newline_is_one_line(tmp_path: Path) -> None:
    ok = cli("--permit-path", str(tmp_path), "--", "true", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr  # control
    r = cli("--permit-path", str(tmp_path), "--", "foo\nbar", cwd=tmp_path)
    assert r.returncode == 127
    assert r.stderr.count("\n") == 1 and "foo\\nbar" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_settings_with_a_duplicate_key_is_refused_with_its_pointer(tmp_path: Path) -> None:
    settings = tmp_path / "s.json"
    settings.write_text(json.dumps({"permitPath": str(tmp_path)}))
    ok = cli("--settings", str(settings), "--", "true", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr  # control
    settings.write_text(
        f'{{"permitPath": "{tmp_path}", "allowProtectedWrites": false, "allowProtectedWrites": true}}'
    )
    r = cli("--settings", str(settings), "--", "true", cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert "/allowProtectedWrites" in r.stderr and "more than once" in r.stderr
    assert r.stderr.count("\n") == 1, r.stderr
