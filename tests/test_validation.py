"""Bundle validation: real configs accepted, bad input named by JSON pointer, env values never echoed."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from conftest import SHARED, base_config, run_shim
from sandbox_shim.bundle import load
from sandbox_shim.errors import BundleInvalid

CONFIGS = SHARED / "testdata" / "configs"


def _bundle_with(tmp_path: Path, rootfs: Path, cfg: dict, name: str = "b") -> Path:
    b = tmp_path / name
    b.mkdir()
    shutil.copytree(rootfs, b / "rootfs", symlinks=True)
    (b / "config.json").write_text(json.dumps(cfg))
    return b


@pytest.mark.parametrize("name", ["podman-4.3.1-config.json", "runc-1.1.5-spec.json"])
def test_real_generated_configs_are_accepted(tmp_path: Path, rootfs_template: Path, name: str) -> None:
    if not (CONFIGS / name).exists():
        pytest.skip(f"{CONFIGS / name} is not present")
    cfg = json.loads((CONFIGS / name).read_text())
    cfg["root"]["path"] = "rootfs"  # podman's points into its own storage (testdata README)
    b = _bundle_with(tmp_path, rootfs_template, cfg)
    spec = load(str(b), launch=False)  # its bind sources live on the host that generated it
    assert spec.rootfs == str(b / "rootfs")
    r = run_shim(tmp_path / "st", "validate", "--bundle", str(b))
    assert r.returncode == 0, r.stderr
    assert "valid" in r.stdout


def test_unknown_key_is_a_warning_naming_the_pointer(make_bundle) -> None:
    cfg = base_config()
    cfg["process"]["frobnicate"] = 1
    cfg["mystery"] = {"a": 1}
    b = make_bundle(cfg)
    spec = load(str(b))
    pointers = {w.pointer for w in spec.warnings}
    assert {"/process/frobnicate", "/mystery"} <= pointers
    r = run_shim(b.parent, "validate", "--bundle", str(b))
    assert r.returncode == 0
    assert "/process/frobnicate" in r.stderr and "warning" in r.stderr


def test_invalid_json_gives_line_and_column(make_bundle, tmp_path: Path) -> None:
    b = make_bundle()
    (b / "config.json").write_text('{\n  "ociVersion": "1.0.2",\n  "process": {,\n}')
    r = run_shim(tmp_path, "validate", "--bundle", str(b))
    assert r.returncode == 3
    assert "line 3 column" in r.stderr


def test_schema_errors_name_each_pointer_and_fix(make_bundle, tmp_path: Path) -> None:
    cfg = base_config()
    cfg["process"]["cwd"] = "relative/dir"
    cfg["process"]["capabilities"]["effective"] = ["CAP_MAKE_COFFEE"]
    cfg["linux"]["resources"]["pids"]["limit"] = "many"
    del cfg["root"]
    b = make_bundle(cfg)
    with pytest.raises(BundleInvalid) as ei:
        load(str(b))
    pointers = {p.pointer for p in ei.value.problems}
    assert {
        "/process/cwd",
        "/process/capabilities/effective/0",
        "/linux/resources/pids/limit",
        "",
    } <= pointers
    assert all(p.hint for p in ei.value.problems)
    r = run_shim(tmp_path, "validate", "--bundle", str(b), "--format", "json")
    assert r.returncode == 3
    doc = json.loads(r.stdout)
    assert doc["valid"] is False and len(doc["errors"]) >= 4


def test_env_values_are_never_echoed(make_bundle, tmp_path: Path) -> None:
    secret = "s3cr3t-VALUE-do-not-print"
    cfg = base_config()
    cfg["process"]["env"] += [f"NOEQUALS{secret}", f"API_TOKEN={secret}", f"GOOD=a\u0000{secret}", 42]
    b = make_bundle(cfg)
    r = run_shim(tmp_path, "validate", "--bundle", str(b), "--format", "json")
    assert r.returncode == 3
    assert secret not in r.stdout + r.stderr
    doc = json.loads(r.stdout)
    msgs = " ".join(e["pointer"] + " " + e["message"] for e in doc["errors"])
    assert "API_TOKEN" in msgs  # the name is given, the value is not
    assert "/process/env/3" in msgs and "/process/env/4" in msgs and "/process/env/5" in msgs
    r2 = run_shim(tmp_path, "create", "--bundle", str(b), "x")
    assert r2.returncode == 3 and secret not in r2.stdout + r2.stderr


def test_repeated_env_name_is_a_warning_and_last_wins(make_bundle) -> None:
    cfg = base_config()
    cfg["process"]["env"] += ["FOO=1", "FOO=2"]
    spec = load(str(make_bundle(cfg)))
    assert any("FOO" in w.message for w in spec.warnings)
    from sandbox_shim.platforms.linux.plan import make_plan

    assert make_plan(spec, "x").env["FOO"] == "2"


@pytest.mark.parametrize("root_path", ["rootfs", "rootfs/", "./rootfs", "."])
def test_root_path_forms_resolve_against_the_bundle(make_bundle, tmp_path: Path, root_path: str) -> None:
    cfg = base_config()
    cfg["root"]["path"] = root_path
    b = make_bundle(cfg)
    other = tmp_path / "elsewhere"
    other.mkdir()
    old = os.getcwd()
    os.chdir(other)
    try:
        spec = load(os.path.relpath(b, other))
    finally:
        os.chdir(old)
    expected = b if root_path == "." else b / "rootfs"
    assert spec.rootfs == str(expected.resolve())
    assert spec.bundle == str(b.resolve())


@pytest.mark.parametrize("case", ["no-bundle", "no-config", "no-rootfs"])
def test_missing_pieces_are_named(make_bundle, tmp_path: Path, case: str) -> None:
    b = make_bundle()
    if case == "no-bundle":
        target = tmp_path / "nope"
    else:
        target = b
        if case == "no-config":
            (b / "config.json").unlink()
        else:
            shutil.rmtree(b / "rootfs")
    r = run_shim(tmp_path / "st", "validate", "--bundle", str(target))
    assert r.returncode == 3
    want = {"no-bundle": "does not exist", "no-config": "config.json", "no-rootfs": "/root/path"}[case]
    assert want in r.stderr


def test_tenant_refuses_host_network_unless_asked(make_bundle) -> None:
    cfg = base_config()
    cfg["linux"]["namespaces"] = [n for n in cfg["linux"]["namespaces"] if n["type"] != "network"]
    with pytest.raises(BundleInvalid) as ei:
        load(str(make_bundle(cfg, name="a")))
    assert ei.value.problems[0].pointer == "/linux/namespaces"
    assert "sandbox-shim.network" in ei.value.problems[0].hint
    cfg["annotations"]["sandbox-shim.network"] = "host"
    assert load(str(make_bundle(cfg, name="b"))).settings.network == "host"


def test_unknown_sandbox_setting_is_refused(make_bundle) -> None:
    cfg = base_config()
    cfg["annotations"]["sandbox-shim.widen-everything"] = "yes"
    with pytest.raises(BundleInvalid) as ei:
        load(str(make_bundle(cfg)))
    assert "sandbox-shim.widen-everything" in ei.value.problems[0].message


def test_spec_writes_a_valid_default_and_refuses_overwrite(tmp_path: Path, rootfs_template: Path) -> None:
    b = tmp_path / "bundle"
    r = run_shim(tmp_path, "spec", "--bundle", str(b))
    assert r.returncode == 0, r.stderr
    shutil.copytree(rootfs_template, b / "rootfs", symlinks=True)
    (b / "storage").mkdir()
    assert load(str(b)).config["process"]["noNewPrivileges"] is True
    r2 = run_shim(tmp_path, "spec", "--bundle", str(b))
    assert r2.returncode == 2 and "--force" in r2.stderr


def test_unsupported_mount_type_is_refused_not_skipped(make_bundle) -> None:
    cfg = base_config()
    b = make_bundle(cfg, name="ok")
    assert load(str(b)).config["mounts"]  # control: the supported mounts validate
    cfg["mounts"].append(
        {"destination": "/data", "type": "overlay", "source": "overlay", "options": ["lowerdir=/a"]}
    )
    with pytest.raises(BundleInvalid) as ei:
        load(str(make_bundle(cfg, name="bad")))
    assert [p.pointer for p in ei.value.problems] == [f"/mounts/{len(cfg['mounts']) - 1}/type"]


def test_validate_lists_every_problem_create_refuses_with(make_bundle, tmp_path: Path) -> None:
    """create and validate report the same problems: the bundle's own storage/ missing is one of
    them (a fact of the bundle, not of another host), listed by validate's text and JSON."""
    cfg = base_config()
    i = next(n for n, m in enumerate(cfg["mounts"]) if m.get("source") == "storage")  # the storage bind
    cfg["process"]["apparmorProfile"] = "x"  # a policy problem, found with the host facts
    b = make_bundle(cfg)
    shutil.rmtree(b / "storage", ignore_errors=True)
    c = run_shim(tmp_path / "st", "--log-format", "json", "create", "--bundle", str(b), "vx")
    assert c.returncode == 3
    created = {p["pointer"] for p in json.loads(c.stderr.strip().splitlines()[-1])["problems"]}
    v = run_shim(tmp_path / "st", "validate", "--bundle", str(b), "--format", "json")
    assert v.returncode == 3
    assert {p["pointer"] for p in json.loads(v.stdout)["errors"]} == created
    assert created == {f"/mounts/{i}/source", "/process/apparmorProfile"}
    (b / "storage").mkdir()
    assert run_shim(tmp_path / "st", "validate", "--bundle", str(b)).returncode == 3  # apparmor still
    del cfg["process"]["apparmorProfile"]
    (b / "config.json").write_text(json.dumps(cfg))
    assert run_shim(tmp_path / "st", "validate", "--bundle", str(b)).returncode == 0  # control
    shutil.rmtree(b / "storage")
    v2 = run_shim(tmp_path / "st", "validate", "--bundle", str(b), "--format", "json")
    c2 = run_shim(tmp_path / "st", "create", "--bundle", str(b), "vy")
    assert v2.returncode == c2.returncode == 3, v2.stdout + c2.stderr
    assert [e["pointer"] for e in json.loads(v2.stdout)["errors"]] == [f"/mounts/{i}/source"]
