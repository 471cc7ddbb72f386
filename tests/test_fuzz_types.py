"""Every config field given a value of each wrong JSON type is refused with its pointer, never a crash.

The fields are the schema's own ``properties`` (walked through ``$ref``, ``allOf`` and array ``items``);
each is set in turn to 5, "x", [], {}, null, true and 1.5 on the minimal valid config.  In process, the
property is: ``bundle.load`` (validate and launch modes) and the platform plan either succeed or raise a
``ShimError`` (a documented exit status), never another exception.  Through the CLI, a fixed sample of
those configs makes ``validate`` end with 0 or 3 (one line per problem) and ``create`` with 0, 3, or
126/127 (a valid config whose program the empty rootfs lacks) and one line, never 70.
"""

from __future__ import annotations

import json
import random
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from conftest import base_config, run_shim
from sandbox_shim import bundle
from sandbox_shim.api import default_mechanism
from sandbox_shim.errors import ShimError
from sandbox_shim.validation import _resolve, load_schema

#: a valid config in an empty rootfs: created (0) or its program not found (127); never 70
CREATE_OK = (0, 3, 126, 127)
WRONG: tuple[Any, ...] = (5, "x", [], {}, None, True, 1.5)


def schema_paths() -> list[list[Any]]:
    """Every property path the schema describes (array items as index 0), at most 6 levels deep."""
    root = load_schema()
    out: list[list[Any]] = []

    def walk(node: Any, path: list[Any]) -> None:
        node = _resolve(root, node)
        if not isinstance(node, dict) or len(path) > 6:
            return
        for sub in node.get("allOf") or []:
            walk(sub, path)
        for key, sub in (node.get("properties") or {}).items():
            out.append([*path, key])
            walk(sub, [*path, key])
        if isinstance(node.get("items"), dict):
            walk(node["items"], [*path, 0])

    walk(root, [])
    return out


def with_value(path: list[Any], value: Any) -> dict[str, Any]:
    """The base config with ``path`` set to ``value`` (missing parents made as {} or [])."""
    cfg = base_config()
    cur: Any = cfg
    for here, nxt in zip(path, path[1:], strict=False):
        empty: Any = [] if isinstance(nxt, int) else {}
        if isinstance(cur, list):
            while len(cur) <= here:
                cur.append(empty)
            if not isinstance(cur[here], type(empty)):
                cur[here] = empty
        elif not isinstance(cur.get(here), type(empty)):
            cur[here] = empty
        cur = cur[here]
    if isinstance(cur, list):
        cur.extend([None] * (path[-1] + 1 - len(cur)))
    cur[path[-1]] = value
    return cfg


@pytest.fixture()
def fuzz_dir(tmp_path: Path) -> Path:
    d = tmp_path / "b"
    (d / "rootfs" / "bin").mkdir(parents=True)
    (d / "storage").mkdir()
    (d / "config.json").write_text(json.dumps(base_config()))
    bundle.load(str(d), launch=False)  # the control: the base config is valid
    return d


def test_schema_walk_reaches_the_nested_fields() -> None:
    paths = {"/".join(map(str, p)) for p in schema_paths()}
    assert {"process/env", "process/cwd", "linux/resources/cpu/period", "mounts/0/options"} <= paths


def test_every_field_with_a_wrong_type_is_refused_not_crashed(fuzz_dir: Path, tmp_path: Path) -> None:
    mech = default_mechanism(str(tmp_path / "root"))
    t0 = time.monotonic()
    crashes: list[str] = []
    for path in schema_paths():
        for value in WRONG:
            (fuzz_dir / "config.json").write_text(json.dumps(with_value(path, value)))
            try:
                bundle.load(str(fuzz_dir), launch=False)
                spec = bundle.load(str(fuzz_dir), launch=True)
                mech.make_plan(spec, "fuzz")
            except ShimError:
                pass
            except Exception as e:  # noqa: BLE001 - the property under test
                crashes.append(f"/{'/'.join(map(str, path))} = {value!r}: {type(e).__name__}: {e}")
    assert not crashes, "\n".join(crashes)
    assert time.monotonic() - t0 < 120


def test_wrong_types_through_the_cli_end_in_3_with_one_line(fuzz_dir: Path, tmp_path: Path) -> None:
    rng = random.Random(17)
    cases = [(["process", "env"], v) for v in WRONG]
    cases += rng.sample([(p, v) for p in schema_paths() for v in WRONG], 5)
    t0 = time.monotonic()

    def one(i: int, path: list[Any], value: Any) -> str | None:
        d = tmp_path / f"c{i}"
        (d / "rootfs" / "bin").mkdir(parents=True)
        (d / "storage").mkdir()
        (d / "config.json").write_text(json.dumps(with_value(path, value)))
        where = f"/{'/'.join(map(str, path))} = {value!r}"
        v = run_shim(tmp_path / "root", "validate", "--bundle", str(d))
        c = run_shim(tmp_path / "root", "create", "--bundle", str(d), f"fz{i}")
        if c.returncode == 0:
            run_shim(tmp_path / "root", "delete", "--force", f"fz{i}")
        lines = v.stderr.strip().splitlines()
        if v.returncode not in (0, 3) or not all(ln.startswith(("error: ", "warning: ")) for ln in lines):
            return f"validate {where}: exit {v.returncode}: {v.stderr.strip()[:300]}"  # one line per problem
        extra = c.stderr.strip().splitlines()[1:]  # a one-line summary, then each problem indented
        if (
            c.returncode not in CREATE_OK
            or "Traceback" in c.stderr
            or not all(ln.startswith("  ") for ln in extra)
        ):
            return f"create {where}: exit {c.returncode}: {c.stderr.strip()[:300]}"
        if v.returncode == 3 and c.returncode != 3:
            return f"create {where}: exit {c.returncode} for a config validate refused"
        return None

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda a: one(*a), [(i, p, v) for i, (p, v) in enumerate(cases)]))
    assert not [r for r in results if r], "\n".join(r for r in results if r)
    assert time.monotonic() - t0 < 180


@pytest.mark.parametrize(
    "field,value,pointer",
    [
        ("args", ["/bin/true"] + ["a"] * 16000, "/process/args"),
        ("env", [f"V{i}=x" for i in range(16000)], "/process/env"),
        ("period", 1, "/linux/resources/cpu/period"),
        ("period", 2_000_000, "/linux/resources/cpu/period"),
        ("quota", 999, "/linux/resources/cpu/quota"),
    ],
)
def test_configs_create_would_refuse_are_refused_at_validation(
    fuzz_dir: Path, field: str, value: Any, pointer: str
) -> None:
    cfg = base_config()
    if field in ("period", "quota"):
        cfg.setdefault("linux", {})["resources"] = {"cpu": {field: 100000}}
        (fuzz_dir / "config.json").write_text(json.dumps(cfg))
        bundle.load(str(fuzz_dir), launch=False)  # the control: an in-range value is valid
        cfg["linux"]["resources"]["cpu"][field] = value
    else:
        cfg["process"][field] = value
    (fuzz_dir / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(Exception) as info:  # noqa: PT011 - BundleInvalid, checked below
        bundle.load(str(fuzz_dir), launch=False)
    assert [p.pointer for p in info.value.problems] == [pointer]  # type: ignore[attr-defined]
