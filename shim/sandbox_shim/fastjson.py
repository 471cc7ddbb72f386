"""JSON for the state root's own files and the lifecycle verbs' output, without importing ``json``.

``import json`` loads ``re`` (and with it ``enum``) and compiles its regular expressions: about as
much as the interpreter's own start on the verbs that orchestrators call three or four times per
container (state, start, kill, delete).  This module drives the same C accelerator the standard
library uses (CPython's ``_json``: ``make_scanner``, ``make_encoder``, ``encode_basestring_ascii``)
with the standard library's defaults, so the text read and written is what ``json`` reads and writes:

  loads(text) / load(fh)        == json.loads / json.load (strict: no control characters in strings;
                                   ``NaN`` and ``Infinity`` refused, ValueError)
  raw_decode(text, idx)         == json.JSONDecoder().raw_decode(text, idx) -> (value, end)
  dumps(obj, indent=None)       == json.dumps(obj, indent=indent) (ensure_ascii, ", " and ": ";
                                   non-finite floats refused, ValueError)
  dump(obj, fh, indent=None)    == json.dump(obj, fh, indent=indent)

Only for documents this program wrote or a trusted peer wrote (state files, bwrap's status records);
untrusted input (config.json, --process files) goes through ``jsonguard``, which also bounds size and
depth.  On a Python without ``_json`` (not CPython) the standard library is used instead.
"""

from __future__ import annotations

TYPE_CHECKING = False  # no typing at run time: the lifecycle verbs import this module
if TYPE_CHECKING:
    from typing import IO, Any

try:
    import _json
except ImportError:  # pragma: no cover - CPython always has it
    _json = None  # type: ignore[assignment]

_WS = " \t\n\r"  # JSON's whitespace (RFC 8259 section 2)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


class _Context:
    """The attributes ``_json.make_scanner`` reads from a decoder (``json.JSONDecoder``'s defaults)."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = staticmethod(_no_constant)
    memo: dict[str, str] = {}


def _no_default(obj: object) -> Any:
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


if _json is not None:
    _scan = _json.make_scanner(_Context())  # type: ignore[arg-type]
    _encode_str = _json.encode_basestring_ascii
    _encode = _json.make_encoder({}, _no_default, _encode_str, None, ": ", ", ", False, False, False)


def raw_decode(text: str, idx: int = 0) -> tuple[Any, int]:
    """The JSON value starting at ``text[idx]`` and the index just past it.  Raises ValueError."""
    if _json is None:  # pragma: no cover
        import json

        return json.JSONDecoder().raw_decode(text, idx)
    try:
        try:
            return _scan(text, idx)
        except SystemError:
            # CPython's scanner reports malformed text as json.decoder.JSONDecodeError, which it only
            # finds if json.decoder is loaded (3.11: a SystemError otherwise): load it, scan again
            import json.decoder  # noqa: F401

            return _scan(text, idx)
    except StopIteration as e:
        raise ValueError(f"expecting a JSON value at offset {e.value}") from None


def loads(text: str | bytes) -> Any:
    """The one JSON value in ``text`` (whitespace around it allowed).  Raises ValueError."""
    if isinstance(text, (bytes, bytearray)):
        text = text.decode("utf-8")
    start = len(text) - len(text.lstrip(_WS))
    value, end = raw_decode(text, start)
    if text[end:].strip(_WS):
        raise ValueError(f"extra data at offset {end}")
    return value


def load(fh: IO[str]) -> Any:
    """``loads(fh.read())``."""
    return loads(fh.read())


def _key(k: object) -> str:
    if isinstance(k, str):
        return k
    if k is True or k is False or k is None:
        return {True: "true", False: "false", None: "null"}[k]
    if isinstance(k, (int, float)):
        return _scalar(k)
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(k).__name__}")


def _scalar(obj: object) -> str:
    return "".join(_encode(obj, 0))


def _pretty(obj: object, step: str, pad: str) -> str:
    if isinstance(obj, dict) and obj:
        inner = pad + step
        items = [f"{_encode_str(_key(k))}: {_pretty(v, step, inner)}" for k, v in obj.items()]
        return "{\n" + inner + (",\n" + inner).join(items) + "\n" + pad + "}"
    if isinstance(obj, (list, tuple)) and obj:
        inner = pad + step
        return "[\n" + inner + (",\n" + inner).join(_pretty(v, step, inner) for v in obj) + "\n" + pad + "]"
    return _scalar(obj)


def dumps(obj: object, indent: int | None = None) -> str:
    """``obj`` (dict, list, tuple, str, int, float, bool, None) as JSON text, as ``json.dumps``.

    Raises:
        TypeError: a value of another type; ValueError: a NaN or infinite float.
    """
    if _json is None:  # pragma: no cover
        import json

        return json.dumps(obj, indent=indent)
    if indent is None:
        return _scalar(obj)
    return _pretty(obj, " " * indent, "")


def dump(obj: object, fh: IO[str], indent: int | None = None) -> None:
    """``fh.write(dumps(obj, indent))``."""
    fh.write(dumps(obj, indent))
