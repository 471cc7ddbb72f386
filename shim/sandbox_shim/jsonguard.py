"""Parse-level limits for JSON documents we are handed (config.json, an exec ``process.json``).

Checked before schema validation, in one pass, so hostile shapes are refused fast with the JSON
pointer of the offending value instead of exhausting the interpreter later:

- the file: at most ``MAX_BYTES`` bytes of UTF-8 (RFC 8259 section 8.1); invalid UTF-8 names its
  byte offset;
- nesting: at most ``MAX_DEPTH`` levels of arrays/objects (Python's recursion limit is ~1000, and the
  schema validator recurses once per level);
- integers: at most ``MAX_INT_DIGITS`` digits (uint64 has 20; CPython refuses to convert more than
  4300 digits at all, ``sys.set_int_max_str_digits``);
- arrays and objects: at most ``MAX_ITEMS`` members each; strings (keys included) at most
  ``MAX_STRING`` characters;
- numbers: finite (no ``NaN``/``Infinity``, no float literal past the double range: RFC 8259
  section 6 has no such numbers);
- objects: no key twice (RFC 8259 section 4: names "SHOULD be unique"; a parser keeps one of them,
  so the other would be accepted and silently not applied);
- text: no lone UTF-16 surrogates (``"\\ud800"`` decodes to a str that cannot be encoded for a path
  or argv, RFC 8259 section 8.2) and no NUL (no path, argv, env entry or kernel string can hold one).

Every problem is a ``BundleProblem`` (rule ``json-limits``); the first ``MAX_PROBLEMS`` are reported.
NUL characters are reported apart (``loads`` returns them as ``text``): they do not stop the other
checks, so a config's every problem is still reported at once, but no path is resolved while one is
present.
"""

from __future__ import annotations

import errno
import math
import os

from . import posix
from .errors import BundleProblem

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

MAX_BYTES = 4 * 1024 * 1024
MAX_DEPTH = 64
MAX_INT_DIGITS = 20
MAX_ITEMS = 16384
MAX_STRING = 1024 * 1024  # characters: room for large orchestrator annotations
MAX_PROBLEMS = 20
RULE = "json-limits"


class _BigInt(str):
    """An integer literal too long to convert; replaced by a problem in ``_walk``."""


def _parse_int(text: str) -> int | _BigInt:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        return _BigInt(text)
    return int(text)


class _NonFinite(str):
    """``NaN``, ``Infinity`` or a float literal past the double range (``1e999999``); replaced by a
    problem in ``_walk`` (RFC 8259 section 6: such values are not JSON numbers)."""


def _parse_float(text: str) -> float | _NonFinite:
    value = float(text)
    return value if math.isfinite(value) else _NonFinite(text[:32])


class _DupDict(dict):  # type: ignore[type-arg]
    """An object that named a key more than once; ``dups`` lists those keys (``_walk`` reports them)."""

    dups: list[str]


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    d = dict(pairs)
    if len(d) == len(pairs):
        return d
    out = _DupDict(d)
    seen: set[str] = set()
    out.dups = [k for k, _ in pairs if k in seen or seen.add(k)]  # type: ignore[func-returns-value]
    return out


def _ptr(parts: list[Any]) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


_NUL = "a NUL character"


def _text_problem(s: str) -> str | None:
    if len(s) > MAX_STRING:
        return f"a string of {len(s)} characters (at most {MAX_STRING})"
    if "\0" in s:
        return _NUL + " (no path, argument or environment entry can hold one)"
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return "a lone UTF-16 surrogate (\\ud800-\\udfff without its pair): not Unicode text"
    return None


def _shown_key(k: str) -> str:
    """A key safe to put in a pointer/message (surrogates and NUL escaped, long keys cut)."""
    k = k if len(k) <= 64 else k[:64] + "..."
    return k.encode("utf-8", "backslashreplace").decode("utf-8").replace("\0", "\\u0000")


NUL_RULE = "json-limits: NUL"


def check_tree(doc: Any) -> list[BundleProblem]:
    """Problems of a parsed document against the limits above (iterative: no recursion).  NUL
    problems carry rule ``NUL_RULE``."""
    problems: list[BundleProblem] = []
    stack: list[tuple[Any, list[Any]]] = [(doc, [])]

    def add(parts: list[Any], what: str, hint: str) -> None:
        rule = NUL_RULE if what.startswith(_NUL) or what.startswith(f"a key with {_NUL}") else RULE
        problems.append(BundleProblem(_ptr(parts), f"holds {what}", rule, hint))

    while stack and len(problems) < MAX_PROBLEMS:
        value, parts = stack.pop()
        if isinstance(value, _BigInt):
            add(
                parts,
                f"an integer literal of {len(value.lstrip('-'))} digits (at most {MAX_INT_DIGITS})",
                "use a number in the field's range",
            )
        elif isinstance(value, _NonFinite):
            add(parts, f"a number that is not finite ({value})", "use a finite number in the field's range")
        elif isinstance(value, str):
            why = _text_problem(value)
            if why:
                add(parts, why, "use plain UTF-8 text without NUL")
        elif isinstance(value, (dict, list)):
            if len(parts) >= MAX_DEPTH:
                add(parts, f"values nested more than {MAX_DEPTH} levels deep", "flatten the document")
                continue
            if len(value) > MAX_ITEMS:
                add(parts, f"{len(value)} members (at most {MAX_ITEMS})", "remove members")
                continue
            if isinstance(value, dict):
                for k in getattr(value, "dups", ()):
                    add([*parts, _shown_key(k)], "a key given more than once", "keep one of them")
                for k, v in value.items():
                    why = _text_problem(k)
                    if why:
                        add([*parts, _shown_key(k)], f"a key with {why}", "rename the key")
                        continue
                    stack.append((v, [*parts, k]))
            else:
                stack.extend((v, [*parts, i]) for i, v in enumerate(value))
    return problems


def read_regular(path: str) -> bytes:
    """At most ``MAX_BYTES`` + 1 bytes of the regular file at ``path`` (symbolic links followed).  Opened
    with O_NONBLOCK and checked with fstat(2) before reading, so a FIFO or a device planted as the file
    never blocks the caller.

    Raises:
        OSError: as open(2) raises it, or EINVAL ("not a regular file") for a FIFO, device or directory.
    """
    fd = os.open(path, os.O_RDONLY | posix.O_NONBLOCK | posix.O_CLOEXEC)
    try:
        if os.fstat(fd).st_mode & 0o170000 != 0o100000:  # S_ISREG (stat.h)
            raise OSError(errno.EINVAL, "not a regular file", path)
        return posix.read_at_most(fd, MAX_BYTES + 1)
    finally:
        os.close(fd)


class _Context:
    """What ``_json.make_scanner`` reads from a decoder: ``loads``' hooks below, as ``json.loads`` is
    given them, with ``json.JSONDecoder``'s other defaults (strict: no control characters in strings)."""

    strict = True
    object_hook = None
    object_pairs_hook = staticmethod(_pairs)
    parse_float = staticmethod(_parse_float)
    parse_int = staticmethod(_parse_int)
    parse_constant = _NonFinite
    memo: dict[str, str] = {}


_FAILED = object()
_WS = " \t\n\r"  # JSON's whitespace (RFC 8259 section 2)


def _fast_loads(text: str) -> Any:
    """``json.loads(text, ...)`` with ``loads``' hooks through CPython's C scanner (``_json``), without
    importing ``json`` (and ``re`` and ``enum`` under it) on create's path; ``_FAILED`` for anything
    but a clean parse (malformed text, too deep, no ``_json``): ``loads`` then parses with ``json``
    for its error message."""
    try:
        import _json
    except ImportError:  # pragma: no cover - CPython always has it
        return _FAILED
    start = len(text) - len(text.lstrip(_WS))
    try:
        value, end = _json.make_scanner(_Context())(text, start)  # type: ignore[arg-type]
    except (StopIteration, ValueError, RecursionError, SystemError):
        return _FAILED
    if text[end:].strip(_WS):
        return _FAILED
    return value


def loads(data: bytes | str, what: str = "config.json") -> tuple[Any, list[BundleProblem]]:
    """Parse ``data`` under the limits.  Returns ``(document, problems)``; the document is None when
    it could not be parsed, and problems is empty only for a document within every limit.  Only
    NUL problems (rule ``NUL_RULE``) leave a document safe to look at further."""
    if len(data) > MAX_BYTES:
        return None, [
            BundleProblem("", f"{what} is {len(data)} bytes (at most {MAX_BYTES})", RULE, "shorten it")
        ]
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            bad = data[e.start : e.start + 1]
            return None, [
                BundleProblem(
                    "",
                    f"{what} is not UTF-8: byte {e.start} ({bad!r})",
                    "RFC 8259 section 8.1",
                    "save the file as UTF-8",
                )
            ]
    else:
        text = data
    doc = _fast_loads(text)
    if doc is not _FAILED:
        return doc, check_tree(doc)
    import json  # only to say why the text is not JSON (its error names line and column)

    try:
        doc = json.loads(
            text,
            parse_int=_parse_int,
            parse_float=_parse_float,
            parse_constant=_NonFinite,
            object_pairs_hook=_pairs,
        )
    except json.JSONDecodeError as e:
        return None, [
            BundleProblem(
                "",
                f"{what} is not valid JSON at line {e.lineno} column {e.colno}: {e.msg}",
                "RFC 8259",
                "fix the JSON syntax there",
            )
        ]
    except RecursionError:
        return None, [
            BundleProblem(
                "", f"{what} nests values more than {MAX_DEPTH} levels deep", RULE, "flatten the document"
            )
        ]
    except ValueError as e:  # e.g. a float literal the parser refuses
        return None, [BundleProblem("", f"{what} cannot be parsed: {e}", "RFC 8259", "fix the value")]
    return doc, check_tree(doc)


def read_file(source: str, what: str = "") -> Any:
    """The JSON document in file ``source`` (``-``: stdin), read and parsed under these limits; for a
    command-line argument such as ``exec --process FILE`` or ``update --resources FILE``.

    Raises:
        UsageError: unreadable, or not JSON within the limits (one line naming where).
    """
    import sys

    from .errors import UsageError

    try:
        if source == "-":
            data = sys.stdin.buffer.read(MAX_BYTES + 1)
        else:
            data = read_regular(source)
    except OSError as e:
        raise UsageError(f"cannot read JSON from {source}: {e.strerror}") from e
    doc, problems = loads(data, what or source)
    if problems:
        raise UsageError(f"{what or source}: {problems[0].line()}")
    return doc
