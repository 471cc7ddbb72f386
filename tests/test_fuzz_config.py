"""Property-based fuzzing of config.json through ``bundle.load`` and the CLI (hypothesis), bounded in time.

Property: whatever config.json holds, ``load`` either returns a ``Spec`` or raises ``BundleInvalid`` (no
other exception), quickly; through the CLI, ``validate`` ends with 0 or 3 and ``create`` with a
documented status, never with a traceback.  The crash classes found by measuring earlier versions are
seeds: nesting deeper than the interpreter's recursion limit, integer literals past CPython's 4300-digit
conversion limit, NUL and lone surrogates in paths, and a 700,000-item array (refused fast).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import base_config, run_shim
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from sandbox_shim import bundle
from sandbox_shim.errors import BundleInvalid

DOCUMENTED = {0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 70, 126, 127}

SEEDS: dict[str, str] = {
    "deep object": '{"annotations":' * 995 + "{}" + "}" * 995,
    "deeper array": '{"process": {"args": ' + "[" * 100_000 + "]" * 100_000 + "}}",
    "depth just past the limit": '{"a":' * 70 + "1" + "}" * 70,
    "huge integer": '{"process": {"user": {"uid": ' + "9" * 5000 + "}}}",
    "big negative integer": '{"linux": {"resources": {"memory": {"limit": -' + "1" * 4400 + "}}}}",
    "NUL in root.path": '{"ociVersion": "1.0.2", "root": {"path": "root\\u0000fs"}, '
    '"process": {"args": ["x"]}}',
    "lone surrogate in root.path": '{"ociVersion": "1.0.2", "root": {"path": "\\ud800"}, '
    '"process": {"args": ["x"]}}',
    "lone surrogate in a key": '{"annotations": {"\\udc00": "x"}}',
    "NUL in a mount destination": json.dumps(
        {**base_config(), "mounts": [{"destination": "/a\u0000b", "type": "tmpfs", "source": "tmpfs"}]}
    ),
    "surrogate in cwd": json.dumps(base_config())[:-1] + ', "x-cwd": "\\udfff"}',
    "700,000-item array": '{"process": {"args": [' + ",".join(['"a"'] * 700_000) + "]}}",
    "NaN": '{"linux": {"resources": {"cpu": {"period": NaN}}}}',
    "float past the double range": '{"linux": {"resources": {"cpu": {"period": 1e999999}}}}',
    "minus Infinity": '{"process": {"user": {"uid": -Infinity}}}',
    "huge string": '{"hostname": "' + "h" * 2_000_000 + '"}',
    "not UTF-8": '{"hostname": "\xff"}',
}


def _write(bundle_dir: Path, text: str | bytes) -> None:
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    if isinstance(text, str) and "\xff" in text:
        data = text.encode("latin-1")
    (bundle_dir / "config.json").write_bytes(data)


def _load_ok_or_invalid(bundle_dir: Path) -> None:
    t0 = time.monotonic()
    try:
        bundle.load(str(bundle_dir), launch=False)
    except BundleInvalid as e:
        assert e.problems and all(isinstance(p.pointer, str) for p in e.problems)
        e.line().encode("utf-8")  # the message is printable text (no lone surrogate echoed back)
    assert time.monotonic() - t0 < 2.0


@pytest.fixture(scope="module")
def fuzz_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("fuzz") / "b"
    (d / "rootfs" / "bin").mkdir(parents=True)
    (d / "storage").mkdir()
    _write(d, json.dumps(base_config()))
    bundle.load(str(d), launch=False)  # the control: the base config is valid (and the validator loaded)
    return d


@pytest.mark.parametrize("name", sorted(SEEDS))
def test_crash_seeds_are_refused_fast_with_a_pointer(name: str, fuzz_bundle: Path) -> None:
    _write(fuzz_bundle, SEEDS[name])
    t0 = time.monotonic()
    with pytest.raises(BundleInvalid) as info:
        bundle.load(str(fuzz_bundle), launch=False)
    assert time.monotonic() - t0 < 1.0, "refused, but not fast"
    assert info.value.problems[0].line()


@pytest.mark.parametrize(
    "name",
    ["deep object", "huge integer", "lone surrogate in root.path", "NUL in root.path", "700,000-item array"],
)
def test_crash_seeds_through_the_cli(name: str, fuzz_bundle: Path, tmp_path: Path) -> None:
    _write(fuzz_bundle, SEEDS[name])
    for args in (["validate", "--bundle", str(fuzz_bundle)], ["create", "--bundle", str(fuzz_bundle), "fz"]):
        r = run_shim(tmp_path / "state", *args)
        assert r.returncode == 3, (args, r.returncode, r.stderr)
        assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) >= 1
        assert not (tmp_path / "state" / "fz").exists()
    j = run_shim(tmp_path / "state", "--log-format", "json", "create", "--bundle", str(fuzz_bundle), "fz")
    assert j.returncode == 3 and len(j.stderr.strip().splitlines()) == 1
    assert json.loads(j.stderr)["error"] == "bundle_invalid"


# -- generated configs -------------------------------------------------------------------------------

_text = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs",))
    | st.sampled_from(["\x00", "/", ".", "~", "\ud800", "\udfff"]),
    max_size=12,
) | st.sampled_from(["..", "../..", "/etc/shadow", "/proc/self/root", "", "a" * 300])
_scalar = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=True) | _text
_json = st.recursive(
    _scalar, lambda kids: st.lists(kids, max_size=4) | st.dictionaries(_text, kids, max_size=4), max_leaves=20
)
_FIELDS = ["ociVersion", "process", "root", "hostname", "mounts", "linux", "annotations", "hooks"]
_SUB = {
    "process": ["args", "env", "cwd", "user", "rlimits", "capabilities", "terminal", "noNewPrivileges"],
    "root": ["path", "readonly"],
    "linux": [
        "namespaces",
        "resources",
        "cgroupsPath",
        "maskedPaths",
        "readonlyPaths",
        "sysctl",
        "seccomp",
        "uidMappings",
        "devices",
    ],
}


@st.composite
def configs(draw: Any) -> Any:
    """The base config with some fields replaced by arbitrary JSON (or the whole document, sometimes)."""
    if draw(st.integers(0, 9)) == 0:
        return draw(_json)
    cfg = base_config()
    for _ in range(draw(st.integers(1, 4))):
        key = draw(st.sampled_from(_FIELDS))
        if key in _SUB and isinstance(cfg.get(key), dict) and draw(st.booleans()):
            cfg[key][draw(st.sampled_from(_SUB[key]))] = draw(_json)
        else:
            cfg[key] = draw(_json)
    return cfg


def _dump(doc: Any) -> str:
    return json.dumps(doc, ensure_ascii=True)  # lone surrogates become \\udXXX escapes, as attackers write


@seed(17)
@settings(
    max_examples=300,
    deadline=None,
    derandomize=True,  # the same inputs in every CI run
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(configs())
def test_load_only_returns_a_spec_or_raises_bundle_invalid(fuzz_bundle: Path, doc: Any) -> None:
    _write(fuzz_bundle, _dump(doc))
    _load_ok_or_invalid(fuzz_bundle)


@pytest.mark.skipif(os.environ.get("SANDBOX_SHIM_FUZZ_CLI", "1") == "0", reason="SANDBOX_SHIM_FUZZ_CLI=0")
@seed(1717)
@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,  # the same inputs in every CI run
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(configs())
def test_cli_validate_ends_in_a_documented_status_and_one_line(
    fuzz_bundle: Path, tmp_path: Path, doc: Any
) -> None:
    _write(fuzz_bundle, _dump(doc))
    r = run_shim(tmp_path / "state", "--log-format", "json", "validate", "--bundle", str(fuzz_bundle))
    assert r.returncode in (0, 3), (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e999999", "-1e400"])
def test_non_finite_numbers_are_refused_with_their_pointer(literal: str, fuzz_bundle: Path) -> None:
    cfg = base_config()
    cfg.setdefault("linux", {})["resources"] = {"cpu": {"period": 100000}}
    _write(fuzz_bundle, json.dumps(cfg).replace("100000", literal))
    with pytest.raises(BundleInvalid) as info:
        bundle.load(str(fuzz_bundle), launch=False)
    assert [p.pointer for p in info.value.problems] == ["/linux/resources/cpu/period"]
    assert "not finite" in info.value.problems[0].message
    _write(fuzz_bundle, json.dumps(cfg))  # the control: the same config with a finite period is valid
    bundle.load(str(fuzz_bundle), launch=False)
