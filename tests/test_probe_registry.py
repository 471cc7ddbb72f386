"""The probe registry is complete whatever module registered a probe first."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    "first", ["sandbox_shim.platforms.linux.probes", "sandbox_shim.platforms.linux.kernel_probes"]
)
def test_registry_is_complete_whatever_was_imported_first(first: str) -> None:
    code = (
        "import importlib, sys; importlib.import_module(sys.argv[1])\n"
        "from sandbox_shim import capability\n"
        "partial = set(capability.PROBES)\n"
        "capability._load_probes()\n"
        "print(len(partial), len(capability.PROBES), 'bwrap' in capability.PROBES,"
        " 'namespace.network' in capability.PROBES)"
    )
    r = subprocess.run([sys.executable, "-c", code, first], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    partial, full, has_bwrap, has_netns = r.stdout.split()
    assert int(partial) < int(full)  # the control: one module alone registers only part of the set
    assert has_bwrap == has_netns == "True"
