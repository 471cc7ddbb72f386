"""Path rules past form: NAME_MAX/PATH_MAX, and a cwd or mount that would be made inside a masked or
read-only path (the directory made for it would undo the mask)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import base_config, shim_cmd
from sandbox_shim.config_rules import problems
from sandbox_shim.path_rules import NAME_MAX, PATH_MAX

linux_root = pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.geteuid() != 0, reason="needs Linux, root, bwrap and cgroups"
)


def _errors(cfg: dict[str, Any]) -> dict[str, str]:
    return {p.pointer: p.message for p in problems(cfg)[0]}


def _set(cfg: dict[str, Any], pointer: str, value: Any) -> dict[str, Any]:
    *parents, last = pointer.strip("/").split("/")
    node: Any = cfg
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return cfg


@pytest.mark.parametrize(
    "pointer",
    [
        "/process/cwd",
        "/mounts/0/destination",
        "/linux/maskedPaths/0",
        "/linux/readonlyPaths/0",
        "/hooks/prestart/0/path",
        "/process/args/0",
        "/mounts/0/source",
        "/root/path",
    ],
)
def test_path_lengths_are_refused_with_their_pointer(pointer: str) -> None:
    def cfg(value: str) -> dict[str, Any]:
        c = base_config(["true"])
        c["hooks"] = {"prestart": [{"path": "/bin/true"}]}
        return _set(c, pointer, value)

    ok = "/" + "a" * NAME_MAX
    assert pointer not in _errors(cfg(ok))  # the control: NAME_MAX bytes is a valid component
    assert "component" in _errors(cfg(ok + "a"))[pointer]
    assert pointer not in _errors(cfg(("/" + "a" * 200) * ((PATH_MAX - 1) // 201)))
    assert "bytes" in _errors(cfg(("/" + "a" * 200) * 21))[pointer]


@pytest.mark.parametrize(
    ("key", "cwd", "bad"),
    [
        ("maskedPaths", "/tmp/m/x", True),
        ("maskedPaths", "/tmp/m", True),
        ("maskedPaths", "/tmp/mx", False),
        ("readonlyPaths", "/tmp/r/x", True),
        ("readonlyPaths", "/tmp/r", False),
        ("readonlyPaths", "/tmp/rx", False),
    ],
)
def test_a_cwd_inside_a_masked_or_read_only_path_is_refused(key: str, cwd: str, bad: bool) -> None:
    cfg = base_config(["true"])
    cfg["linux"][key] = [*cfg["linux"].get(key, []), "/tmp/m" if key == "maskedPaths" else "/tmp/r"]
    cfg["process"]["cwd"] = cwd
    assert ("/process/cwd" in _errors(cfg)) is bad, _errors(cfg)


@linux_root
@pytest.mark.parametrize("key", ["maskedPaths", "readonlyPaths"])
def test_the_mask_is_applied_or_the_config_refused(make_bundle: Any, tmp_path: Path, key: str) -> None:
    probe = "echo hi > /tmp/p/x/f && cat /tmp/p/x/f"
    control = base_config(["sh", "-c", probe])
    control["process"]["cwd"] = "/tmp/p/x"
    root = tmp_path / "state"
    r = subprocess.run(
        shim_cmd(root, "run", "--bundle", str(make_bundle(control, name="c")), "c"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0 and r.stdout == "hi\n", r.stderr  # the control: the write works unmasked
    cfg = json.loads(json.dumps(control))
    cfg["linux"][key] = ["/tmp/p"]
    bundle = make_bundle(cfg, name="m")
    for verb in (["validate", "--bundle", str(bundle)], ["run", "--bundle", str(bundle), "m"]):
        r = subprocess.run(shim_cmd(root, *verb), capture_output=True, text=True, timeout=60)
        assert r.returncode == 3 and "/process/cwd" in r.stderr and "hi" not in r.stdout, r.stderr
    assert not (root / "m").exists()


@linux_root
@pytest.mark.parametrize("key", ["maskedPaths", "readonlyPaths"])
def test_a_cwd_through_a_symlink_into_a_masked_path_is_refused(
    make_bundle: Any, tmp_path: Path, key: str
) -> None:
    cfg = base_config(["sh", "-c", "echo hi > f && cat f"])
    cfg["process"]["cwd"] = "/lnk/x"
    root = tmp_path / "state"
    control = make_bundle(cfg, name="c")
    (control / "rootfs" / "lnk").symlink_to("/tmp/p")
    r = subprocess.run(
        shim_cmd(root, "run", "--bundle", str(control), "c"), capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0 and r.stdout == "hi\n", r.stderr  # the control: unmasked, the write works
    cfg["linux"][key] = ["/tmp/p"]
    bundle = make_bundle(cfg, name="m")
    (bundle / "rootfs" / "lnk").symlink_to("/tmp/p")
    r = subprocess.run(
        shim_cmd(root, "run", "--bundle", str(bundle), "m"), capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 3 and "/process/cwd" in r.stderr and "hi" not in r.stdout, r.stderr
    assert len(r.stderr.splitlines()) == 1 and not (root / "m").exists()


@pytest.mark.parametrize(
    ("path", "refused"),
    [
        ("/mygroup/sandbox-1", False),  # control: an orchestrator's own path
        ("machine.slice:libpod:abc", False),  # control: the systemd driver's form
        ("/sandbox-shim/0958a05052/victim", True),  # another state root's share
        ("/sandbox-shim/anything", True),
        ("0958a05052/victim", True),  # relative: joined under /sandbox-shim/
        ("mygroup/x", False),
    ],
)
def test_a_cgroups_path_cannot_enter_the_runtimes_own_per_root_cgroups(path: str, refused: bool) -> None:
    cfg = base_config(["true"])
    cfg["linux"]["cgroupsPath"] = path
    assert ("/linux/cgroupsPath" in _errors(cfg)) == refused, _errors(cfg)


@pytest.mark.parametrize(
    ("resources", "pointer"),
    [
        ({"cpu": {"cpus": "0-1,3"}}, None),  # controls: the kernel's list format, empty, swap >= limit
        ({"cpu": {"mems": ""}}, None),
        ({"memory": {"limit": 64 << 20, "swap": 128 << 20}}, None),
        ({"memory": {"limit": 64 << 20, "swap": -1}}, None),
        ({"memory": {"limit": 64 << 20, "swap": 0}}, None),
        ({"cpu": {"cpus": "0-999999x"}}, "/linux/resources/cpu/cpus"),
        ({"cpu": {"mems": "abc"}}, "/linux/resources/cpu/mems"),
        ({"memory": {"limit": 64 << 20, "swap": 1 << 20}}, "/linux/resources/memory/swap"),
    ],
)
def test_resource_values_the_kernel_would_refuse_are_refused_at_validation(
    resources: dict[str, Any], pointer: str | None
) -> None:
    cfg = base_config(["true"])
    cfg["linux"]["resources"] = resources
    errs = _errors(cfg)
    assert (pointer in errs) if pointer else not [p for p in errs if p.startswith("/linux/resources")], errs
