"""``/dev/mqueue`` as podman and Docker ask it (nosuid, noexec, nodev): bwrap's --mqueue takes no
options, so the config gets a warning naming the options, and the sandbox shows why they have no
effect: mknod(2) there fails and a file there cannot be executed.  Control: the same script makes a
fifo and runs a script in /tmp (a tmpfs without noexec)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from conftest import base_config
from sandbox_runs import launch, probe
from sandbox_shim.config_rules import mount_option_problems

MQ = {
    "destination": "/dev/mqueue",
    "type": "mqueue",
    "source": "mqueue",
    "options": ["nosuid", "noexec", "nodev"],
}


def test_mqueue_options_are_a_warning_naming_them() -> None:
    cfg = base_config()
    cfg["mounts"].append(dict(MQ))
    errors, warnings = mount_option_problems(cfg)
    assert errors == []
    i = len(cfg["mounts"]) - 1
    assert any(w.pointer == f"/mounts/{i}/options" and "nosuid, nodev" in w.message for w in warnings)
    cfg["mounts"][i]["options"] = ["dev"]
    errors, _ = mount_option_problems(cfg)
    assert [e.pointer for e in errors] == [f"/mounts/{i}/options/0"]


def test_mqueue_holds_no_device_node_and_runs_nothing(make_bundle, state_root: Path) -> None:
    if os.geteuid() != 0 or shutil.which("bwrap") is None:
        pytest.skip("sandboxes need root and bwrap here")
    script = (
        "for d in /tmp /dev/mqueue; do printf '#!/bin/sh\\necho ran\\n' > $d/x; chmod 755 $d/x;"
        " $d/x || echo noexec-$d; mknod $d/n p && echo fifo-$d || echo nomknod-$d; done"
    )
    cfg = base_config(probe(script, exit_zero=True))
    cfg["mounts"].append(dict(MQ))
    cfg["mounts"].append({"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid"]})
    if not any(n["type"] == "ipc" for n in cfg["linux"]["namespaces"]):
        cfg["linux"]["namespaces"].append({"type": "ipc"})
    r = launch("cli", state_root, make_bundle(cfg), "mq")
    assert r.code == 0, r
    assert "ran" in r.out.splitlines()[0] and "fifo-/tmp" in r.out, r  # control
    assert "noexec-/dev/mqueue" in r.out and "nomknod-/dev/mqueue" in r.out, r
