"""The generated validator (success path) agrees with jsonschema, is up to date, and loads no jsonschema.

``_validator_generated`` is written by scripts/gen-validator from schemas/config.schema.json; these
tests regenerate it (when fastjsonschema is installed) and compare, check the schema hash it records
(always), and run both validators over the real configs and over invalid mutations of them.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import json
import subprocess
import sys
from importlib.machinery import SourceFileLoader
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from conftest import REPO
from sandbox_shim import _validator_generated as fast
from sandbox_shim.template import default_config
from sandbox_shim.validation import load_schema, schema_problems, unknown_keys


def _generator() -> Any:
    loader = SourceFileLoader("gen_validator", str(REPO / "scripts" / "gen-validator"))
    spec = importlib.util.spec_from_loader("gen_validator", loader)
    assert spec is not None
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def real_configs() -> list[dict[str, Any]]:
    out = [default_config()]
    out += [json.loads(p.read_text()) for p in sorted((REPO / "bundles").glob("*/config.json"))]
    return out


def _set(cfg: dict[str, Any], path: list[Any], value: Any) -> dict[str, Any]:
    cfg = copy.deepcopy(cfg)
    node: Any = cfg
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = value
    return cfg


INVALID = [
    (["ociVersion"], 1),
    (["ociVersion"], "2.0.0"),
    (["process", "args"], []),
    (["process", "args"], [1]),
    (["process", "cwd"], "relative"),
    (["process", "user", "uid"], -1),
    (["process", "user", "uid"], True),
    (["process", "user", "uid"], 1.5),
    (["process", "rlimits"], [{"type": "RLIMIT_BOGUS", "soft": 1, "hard": 1}]),
    (["process", "capabilities", "bounding"], ["CAP_NOPE"]),
    (["root", "path"], ""),
    (["root"], "rootfs"),
    (["mounts"], [{"type": "bind"}]),
    (["linux", "namespaces"], [{"type": "pid", "path": "rel"}]),
    (["linux", "namespaces"], [{"type": "bogus"}]),
    (["linux", "resources", "pids"], {}),
    (["linux", "resources", "memory", "limit"], "1G"),
    (["linux", "maskedPaths"], ["proc"]),
    (["linux", "seccomp"], {"syscalls": []}),
    (["hostname"], None),
    (["annotations"], {"sandbox-shim.network": "internet"}),
    (["annotations"], {"sandbox-shim.nope": "x"}),
    (["annotations"], {"sandbox-shim.port": "123456"}),
    (["annotations"], {"other": 3}),
    (["linux", "resources", "devices"], [{"allow": True, "access": "rwx"}]),
    (["process", "oomScoreAdj"], 1001),
    (["linux", "rootfsPropagation"], "weird"),
]


def _jsonschema_ok(cfg: Any) -> bool:
    return not list(jsonschema.Draft202012Validator(load_schema()).iter_errors(cfg))


def _fast_ok(cfg: Any) -> bool:
    try:
        fast.validate(cfg)
    except fast.JsonSchemaValueException:
        return False
    return True


@pytest.mark.parametrize("i", range(len(real_configs())))
def test_real_configs_are_valid_for_both(i: int) -> None:
    cfg = real_configs()[i]
    assert _jsonschema_ok(cfg) and _fast_ok(cfg)


IDS = [f"{'/'.join(map(str, p))}={v!r}" for p, v in INVALID]


@pytest.mark.parametrize(("path", "value"), INVALID, ids=IDS)
def test_invalid_samples_are_rejected_by_both(path: list[Any], value: Any) -> None:
    cfg = _set(default_config(), path, value)
    assert not _jsonschema_ok(cfg), "the sample must be invalid for jsonschema (fix the sample)"
    assert not _fast_ok(cfg)
    errors, warnings = schema_problems(cfg)
    assert errors and not warnings  # detailed errors still come from jsonschema


def test_generated_module_matches_the_schema_it_was_made_from() -> None:
    raw = (REPO / "shim" / "sandbox_shim" / "schemas" / "config.schema.json").read_bytes()
    assert fast.SCHEMA_SHA256 == hashlib.sha256(raw).hexdigest(), "run scripts/gen-validator"


def test_generated_module_is_up_to_date() -> None:
    pytest.importorskip("fastjsonschema", reason="needs fastjsonschema (pip install it)")
    gen = _generator()
    assert gen.generate() == gen.TARGET.read_text(encoding="utf-8"), "run scripts/gen-validator"


def _strict(schema: Any) -> Any:
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if "properties" in out and "additionalProperties" not in out and "patternProperties" not in out:
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


def _strict_unknown(cfg: Any) -> list[str]:
    """Unknown keys the way a strict copy of the schema (jsonschema) finds them."""
    out = []
    for err in jsonschema.Draft202012Validator(_strict(load_schema())).iter_errors(cfg):
        if err.validator == "additionalProperties":
            known = set((err.schema.get("properties") or {}).keys())
            out += ["".join(f"/{p}" for p in [*err.absolute_path, k]) for k in set(err.instance) - known]
    return sorted(out)


def test_unknown_keys_agree_with_a_strict_schema_and_need_no_jsonschema() -> None:
    cfg = default_config()
    cfg["extraTop"] = 1
    cfg["process"]["user"]["nickname"] = "x"
    cfg["mounts"][0]["weird"] = True
    cfg["linux"]["resources"]["memory"]["futureKnob"] = 3
    cfg["annotations"]["free.form"] = "ok"  # annotations allow any key: no warning
    cfg["linux"]["resources"]["unified"] = {"memory.high": "1"}
    got = [w.pointer for w in unknown_keys(cfg)]
    assert (
        got
        == _strict_unknown(cfg)
        == sorted(
            ["/extraTop", "/process/user/nickname", "/mounts/0/weird", "/linux/resources/memory/futureKnob"]
        )
    )
    errors, warnings = schema_problems(cfg)
    assert not errors and [w.pointer for w in warnings] == got


def test_valid_config_is_checked_without_importing_jsonschema(tmp_path: Path) -> None:
    code = (
        "import sys, json; from sandbox_shim.validation import schema_problems; "
        "from sandbox_shim.template import default_config; e, w = schema_problems(default_config()); "
        "print(json.dumps([len(e), 'jsonschema' in sys.modules, 'fastjsonschema' in sys.modules]))"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == [0, False, False]
