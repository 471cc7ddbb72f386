"""The inheritable and ambient sets are exactly what the config lists (runc: CVE-2022-24769), not the
whole granted set bwrap's --cap-add puts in every set.  Control: a config that lists the granted set
in inheritable and ambient shows them held, so an empty reading is not a failed probe."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from conftest import base_config
from sandbox_runs import RUNNERS, launch, probe
from sandbox_shim.platforms.linux.credentials import setpriv_argv

CAPS = ["CAP_CHOWN", "CAP_KILL", "CAP_NET_BIND_SERVICE"]  # bits 0, 5, 10
ALL = f"{(1 << 0) | (1 << 5) | (1 << 10):016x}"


def _status(text: str) -> dict[str, str]:
    pairs = (ln.partition(":") for ln in text.splitlines())
    return {k: v.strip() for k, _, v in pairs if k.startswith("Cap")}


def test_setpriv_argv_lowers_only_what_the_config_leaves_out() -> None:
    assert setpriv_argv(CAPS, CAPS, CAPS) == []
    assert setpriv_argv(CAPS, None, None) == []
    assert setpriv_argv(CAPS, ["CAP_KILL"], []) == [
        "setpriv",
        "--inh-caps",
        "-chown,-net_bind_service",
        "--ambient-caps",
        "-chown,-kill,-net_bind_service",
    ]


@pytest.mark.parametrize("how", RUNNERS)
def test_inheritable_and_ambient_are_the_configured_sets(make_bundle, state_root: Path, how: str) -> None:
    if os.geteuid() != 0 or shutil.which("bwrap") is None:
        pytest.skip("sandboxes need root and bwrap here")
    cfg = base_config(probe("grep ^Cap /proc/self/status; echo pid=$$", exit_zero=True))
    caps = cfg["process"]["capabilities"]
    for k in ("bounding", "effective", "permitted", "inheritable", "ambient"):
        caps[k] = list(CAPS)
    r = launch(how, state_root, make_bundle(cfg, name="ctl"), "capctl")  # control: all five listed
    s = _status(r.out)
    assert r.code == 0 and s["CapInh"] == ALL and s["CapAmb"] == ALL and s["CapEff"] == ALL, r
    caps["inheritable"], caps["ambient"] = [], []  # containerd's / Docker's default spec
    r = launch(how, state_root, make_bundle(cfg, name="def"), "capdef")
    s = _status(r.out)
    assert r.code == 0 and s["CapInh"] == "0" * 16 and s["CapAmb"] == "0" * 16, r
    assert s["CapEff"] == ALL and s["CapPrm"] == ALL, r
    assert "pid=1" in r.out, r  # setpriv execs in place: the workload stays the sandbox's pid 1
    caps["inheritable"], caps["ambient"] = ["CAP_KILL", "CAP_CHOWN"], ["CAP_KILL"]
    r = launch(how, state_root, make_bundle(cfg, name="some"), "capsome")
    s = _status(r.out)
    assert r.code == 0 and s["CapInh"] == f"{(1 << 0) | (1 << 5):016x}" and s["CapAmb"] == f"{1 << 5:016x}", r
