"""``fastjson`` reads and writes exactly the standard library's JSON text, without importing ``json``."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sandbox_shim import fastjson

scalars = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
)
documents = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, derandomize=True, deadline=None)
@given(documents)
def test_text_is_the_standard_librarys(doc: object) -> None:
    for indent in (None, 2, 4):
        assert fastjson.dumps(doc, indent=indent) == json.dumps(doc, indent=indent)
    text = json.dumps(doc)
    assert fastjson.loads(text) == json.loads(text)
    assert fastjson.loads(f" \n{json.dumps(doc, indent=2)}\t\r\n") == doc


def test_keys_tuples_and_raw_decode_as_json() -> None:
    doc = {1: "a", 2.5: [], False: {}, None: (1, 2), "é\u2028": '"\n'}
    assert fastjson.dumps(doc) == json.dumps(doc) and fastjson.dumps(doc, 2) == json.dumps(doc, indent=2)
    stream = ' {"a": 1}\n{"b": [2]} '
    assert fastjson.raw_decode(stream, 1) == json.JSONDecoder().raw_decode(stream, 1)
    assert fastjson.loads(b'{"x": "\\u00e9"}') == {"x": "é"}


@pytest.mark.parametrize(
    "text",
    ["", "  ", "{", "[1,]", "1 2", '{"a": 1}x', "NaN", "-Infinity", '"\x01"', "{'a': 1}", '"\\ud800"x'],
)
def test_malformed_text_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        fastjson.loads(text)


@pytest.mark.parametrize("value", [float("nan"), {"a": float("inf")}, object(), {(1,): 2}, {1, 2}])
def test_values_json_cannot_hold_are_refused(value: object) -> None:
    with pytest.raises((TypeError, ValueError)):
        fastjson.dumps(value)
    with pytest.raises((TypeError, ValueError)):
        fastjson.dumps(value, indent=2)


def test_importing_it_loads_neither_json_nor_re() -> None:
    code = (
        "import sys; from sandbox_shim import fastjson; fastjson.loads(fastjson.dumps({'a': [1]}, 2)); "
        "print(sorted(m for m in ('json', 're', 'enum') if m in sys.modules))\n"
        "for bad in ('{not json', '[1,', '\"\\x01\"', 'NaN', ''):\n"
        "    try:\n        fastjson.loads(bad)\n    except ValueError:\n        pass\n"
        "    else:\n        raise SystemExit('accepted ' + bad)"
    )
    out = subprocess.run(
        [sys.executable, "-S", "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": fastjson.__file__.rsplit("/sandbox_shim/", 1)[0]},
    )
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr
