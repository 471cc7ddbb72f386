"""Every ``linux.resources`` field has its runtime-spec type and range in the schema: a wrong type or an
out-of-range number is refused at validation with its pointer, never accepted and ignored or left to
fail at create (exit 9).  Generated over the schema itself, so a field added without a type fails here."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import base_config
from sandbox_shim.bundle import pointer
from sandbox_shim.validation import load_schema, schema_problems

RESOURCES = load_schema()["properties"]["linux"]["properties"]["resources"]
SAMPLES = {"^[1-9][0-9]*[KMGT]B$": "2MB", "^[rwm]*$": "rwm"}


def _sample(schema: dict[str, Any]) -> Any:
    """A valid value of ``schema`` (objects with their required fields only)."""
    t = schema.get("type")
    t = t[0] if isinstance(t, list) else t
    if t == "integer":
        return max(schema.get("minimum", 0), 0)
    if t == "string":
        return SAMPLES.get(schema.get("pattern", ""), "x")
    if t == "boolean":
        return True
    if t == "array":
        return [_sample(schema["items"])] if "items" in schema else []
    if t == "object":
        return {k: _sample(schema["properties"][k]) for k in schema.get("required", [])}
    raise AssertionError(f"no type in {schema}")


def _leaves(schema: dict[str, Any], path: list[Any]) -> Iterator[tuple[list[Any], dict[str, Any]]]:
    t = schema.get("type")
    if t == "object" and "properties" in schema:
        for k, sub in schema["properties"].items():
            yield from _leaves(sub, [*path, k])
    elif t == "object" and isinstance(schema.get("additionalProperties"), dict):
        yield from _leaves(schema["additionalProperties"], [*path, "k"])
    elif t == "array" and "items" in schema:
        yield from _leaves(schema["items"], [*path, 0])
    else:
        yield path, schema


def _place(path: list[Any], value: Any) -> dict[str, Any]:
    """base_config with ``value`` at linux.resources/PATH, the containers on the way made valid."""
    cfg = base_config(["true"])
    node: Any = cfg["linux"].setdefault("resources", {})
    schema: dict[str, Any] = RESOURCES
    for i, part in enumerate(path):
        last = i == len(path) - 1
        sub = (
            schema["items"]
            if isinstance(part, int)
            else (schema.get("properties", {}).get(part) or schema["additionalProperties"])
        )
        if last:
            node[part] = value
            break
        if isinstance(part, int):
            while len(node) <= part:
                node.append(_sample(sub))
        elif part not in node:
            node[part] = [] if sub.get("type") == "array" else _sample(sub)
        node, schema = node[part], sub
    return cfg


LEAVES = [(p, s) for p, s in _leaves(RESOURCES, []) if p[0] not in ("unified",)]


def test_every_resources_leaf_has_a_type() -> None:
    untyped = [pointer(p) for p, s in LEAVES if not s.get("type") or s.get("type") == "object"]
    assert not untyped, f"resources fields open in the schema: {untyped}"


@pytest.mark.parametrize(("path", "leaf"), LEAVES, ids=[pointer(p) for p, _ in LEAVES])
def test_a_wrong_type_or_range_is_refused_with_its_pointer(path: list[Any], leaf: dict[str, Any]) -> None:
    where = "/linux/resources" + pointer(path)
    good = _place(path, _sample(leaf))
    assert not schema_problems(copy.deepcopy(good))[0], where  # the control: a valid value passes
    bad_values: list[Any] = [[1] if leaf["type"] != "array" else "s"]
    if leaf["type"] == "integer":
        bad_values += ["s", 2**64, -2, 1.5, True]
    elif leaf["type"] == "string":
        bad_values += [1]
    for bad in bad_values:
        found = {p.pointer for p in schema_problems(_place(path, bad))[0]}
        hit = any(f == where or f.startswith(where + "/") for f in found)
        assert hit, (bad, found)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("weight", "s"),
        ("weight", 2**64),
        ("weight", 5),
        ("weight", 1001),
        ("leafWeight", 9),
        ("weightDevice", [{"major": 8, "minor": 0, "weight": "s"}]),
        ("throttleReadBpsDevice", [{"major": 8, "minor": 0, "rate": -1}]),
        ("throttleWriteIOPSDevice", [{"major": "8", "minor": 0, "rate": 1}]),
    ],
)
def test_block_io_types_and_ranges(field: str, value: Any) -> None:
    cfg = base_config(["true"])
    cfg["linux"]["resources"] = {"blockIO": {"weight": 500}}
    assert not schema_problems(copy.deepcopy(cfg))[0]  # the control
    cfg["linux"]["resources"]["blockIO"][field] = value
    assert any(p.pointer.startswith(f"/linux/resources/blockIO/{field}") for p in schema_problems(cfg)[0])


@pytest.mark.parametrize(
    "value",
    [
        ["s"],
        [{"pageSize": "2MB"}],
        [{"pageSize": 2, "limit": 1}],
        [{"pageSize": "2MB", "limit": 2**64}],
        [{"pageSize": "huge", "limit": 1}],
    ],
)
def test_hugepage_limits_items_are_objects_of_page_size_and_limit(value: Any) -> None:
    cfg = base_config(["true"])
    cfg["linux"]["resources"] = {"hugepageLimits": [{"pageSize": "2MB", "limit": 0}]}
    assert not schema_problems(copy.deepcopy(cfg))[0]  # the control
    cfg["linux"]["resources"]["hugepageLimits"] = value
    assert any(p.pointer.startswith("/linux/resources/hugepageLimits") for p in schema_problems(cfg)[0])


def test_a_sysctl_value_must_be_a_string() -> None:
    cfg = base_config(["true"])
    cfg["linux"]["sysctl"] = {"kernel.msgmax": "8192"}
    assert not schema_problems(copy.deepcopy(cfg))[0]  # the control
    cfg["linux"]["sysctl"] = {"kernel.msgmax": 8192}
    assert "/linux/sysctl/kernel.msgmax" in {p.pointer for p in schema_problems(cfg)[0]}


@pytest.mark.parametrize(
    ("kind", "refused"), [("bind", False), ("none", False), ("s", True), ("tmpfs", True)]
)
def test_a_bind_mounts_type_is_applied_or_refused(
    make_bundle: Any, tmp_path: Any, kind: str, refused: bool
) -> None:
    from sandbox_shim.bundle import load
    from sandbox_shim.errors import BundleInvalid

    cfg = base_config(["true"])
    data = tmp_path / "data"
    data.mkdir()
    cfg["mounts"].append({"destination": "/data", "type": kind, "source": str(data), "options": ["rbind"]})
    bundle = str(make_bundle(cfg))
    if not refused:
        load(bundle, launch=False)  # the control: a bind mount's own type names
        return
    with pytest.raises(BundleInvalid) as info:
        load(bundle, launch=False)
    assert f"/mounts/{len(cfg['mounts']) - 1}/type" in {p.pointer for p in info.value.problems}
