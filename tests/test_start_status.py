"""``start`` returns the status it observes, the freezer included: a cgroup frozen behind the library's
back (an orchestrator, a frozen parent cgroup) is reported paused, never running."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or os.geteuid() != 0, reason="needs Linux and root (bwrap, cgroups)"
)


def test_start_reports_a_sandbox_frozen_behind_its_back_as_paused(make_bundle: Any, state_root: Path) -> None:
    from sandbox_shim import api
    from sandbox_shim.platforms.select import mechanism as make_mechanism

    mech = make_mechanism(str(state_root))
    b = make_bundle(args=["sleep", "100"])
    api.provision(mech, api.Sandbox("plain", str(b)))
    assert api.start(mech, "plain").status == "running"  # control: not frozen, running
    b2 = make_bundle(args=["sleep", "100"], name="b2")
    api.provision(mech, api.Sandbox("frozen", str(b2)))
    rec = api.store_of(mech).read("frozen")
    cg = mech.cgroup(api.sandbox_of(rec, api.store_of(mech)))
    assert cg is not None
    cg.freeze(True)  # behind the library's back: no lock, no state change
    try:
        assert api.start(mech, "frozen").status == "paused"
    finally:
        cg.freeze(False)
    for sid in ("plain", "frozen"):
        api.destroy(mech, sid, force=True)
