"""JSON Schema validation of config.json with messages a person can act on.

The success path runs a validator generated ahead of time from ``schemas/config.schema.json``
(``_validator_generated``, written by ``scripts/gen-validator``; plain Python, no jsonschema import:
on this VM jsonschema costs ~140 ms per process).  Only when that validator rejects the config is
``jsonschema`` imported to list *every* error; each becomes a ``BundleProblem`` whose message is built
from the schema keyword, never from the instance value (so ``process.env`` values are never echoed).
tests/test_fast_validation.py keeps the two in agreement and the generated module up to date.

Unknown keys (JSON Schema 2020-12 "properties" without "additionalProperties") are found by walking
the schema alongside the config (``unknown_keys``) and are returned as warnings.
"""

from __future__ import annotations

import os
from functools import cache

from . import fastjson
from .errors import BundleProblem

TYPE_CHECKING = False  # no typing at run time: create loads this module
if TYPE_CHECKING:
    from typing import Any


@cache
def load_schema(name: str = "config.schema.json") -> dict[str, Any]:
    """A schema shipped in the package (``sandbox_shim/schemas/NAME``), parsed.

    Read next to this module when the package is on disk (importlib.resources costs ~6 ms to import
    on this VM); through importlib.resources when it is not (a zip import).  Parsed by ``fastjson``
    (the package's own file: no ``json``, ``re`` or ``enum`` import on create's path).
    """
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "schemas", name)
    try:
        with open(path, encoding="utf-8") as fh:
            doc: dict[str, Any] = fastjson.loads(fh.read())
    except FileNotFoundError:
        from importlib import resources

        doc = fastjson.loads(
            resources.files("sandbox_shim.schemas").joinpath(name).read_text(encoding="utf-8")
        )
    return doc


def _ptr(parts: Any) -> str:
    from .bundle import pointer

    return pointer(parts)


def _describe(err: Any) -> tuple[str, str]:
    """(message, hint) for a jsonschema error, without quoting the instance."""
    kw, val = err.validator, err.validator_value
    if kw == "required":
        missing = [r for r in val if not (isinstance(err.instance, dict) and r in err.instance)]
        return f"required field {missing[0]!r} is missing", f"add {missing[0]!r}"
    if kw == "type":
        return f"expected {val if isinstance(val, str) else ' or '.join(val)}", f"give a value of type {val}"
    if kw == "enum":
        import json

        shown = ", ".join(json.dumps(v) for v in val[:12]) + (", ..." if len(val) > 12 else "")
        return "value is not one of the allowed values", f"use one of {shown}"
    if kw == "pattern":
        return f"value does not match the pattern {val}", "fix the value's form"
    if kw in ("minimum", "maximum"):
        return f"value must be {'>=' if kw == 'minimum' else '<='} {val}", "use a value in range"
    if kw == "minItems":
        return f"needs at least {val} item(s)", "add the missing items"
    if kw == "minLength":
        return "must not be empty", "give a non-empty value"
    if kw == "additionalProperties":
        return "unexpected key", "remove it"
    if kw == "anyOf" and err.schema.get("description"):  # the schema says what the alternatives mean
        return f"value must be {err.schema['description']}", "use a value in range"
    return f"fails schema rule {kw!r}", "see schemas/config.schema.json"


def schema_problems(cfg: dict[str, Any]) -> tuple[list[BundleProblem], list[BundleProblem]]:
    """Validate ``cfg`` against the config schema.

    Returns:
        (errors, warnings): errors with JSON pointer, message, rule and hint (empty when valid);
        warnings name each unknown key (only computed for a valid config).
    """
    from . import _validator_generated as fast

    try:
        fast.validate(cfg)  # type: ignore[no-untyped-call]  # generated code (scripts/gen-validator)
    except fast.JsonSchemaValueException:
        errors = _detailed_errors(cfg)
        if errors:
            return errors, []
        # the generated code and jsonschema disagree (a generator bug): trust jsonschema, which accepted
    return [], unknown_keys(cfg)


def _detailed_errors(cfg: dict[str, Any]) -> list[BundleProblem]:
    """Every schema error of ``cfg``, from jsonschema (imported here only: the slow, failing path)."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(load_schema())
    errors: list[BundleProblem] = []
    for err in sorted(validator.iter_errors(cfg), key=lambda e: list(map(str, e.absolute_path))):
        if "propertyNames" in err.absolute_schema_path:
            # an unknown sandbox-shim.* annotation: name it (names are not secret, values may be)
            bad = err.instance if isinstance(err.instance, str) else "?"
            errors.append(
                BundleProblem(
                    _ptr([*err.absolute_path, bad]),
                    f"unknown sandbox setting {bad!r}",
                    "schemas/config.schema.json annotations",
                    "see README 'Sandbox settings' for the known names",
                )
            )
            continue
        msg, hint = _describe(err)
        errors.append(BundleProblem(_ptr(err.absolute_path), msg, f"schema: {err.validator}", hint))
    return errors


def _resolve(schema: dict[str, Any], node: Any) -> Any:
    """Follow local ``$ref`` (``#/$defs/NAME`` and other ``#/...`` pointers) to the schema they name."""
    while isinstance(node, dict) and isinstance(node.get("$ref"), str) and node["$ref"].startswith("#/"):
        target: Any = schema
        for part in node["$ref"][2:].split("/"):
            target = target[part.replace("~1", "/").replace("~0", "~")]
        node = target
    return node


def unknown_keys(cfg: Any, schema: dict[str, Any] | None = None) -> list[BundleProblem]:
    """A warning for each key of ``cfg`` that no ``properties`` of the schema describes.

    An object schema listing ``properties`` with neither ``additionalProperties`` nor
    ``patternProperties`` closes its keys (what a strict copy of the schema would reject); the walk
    follows ``properties``, ``additionalProperties`` (as a schema), ``items``, ``allOf`` and local
    ``$ref``.  Meant for a config that already validated.

    Returns: warnings sorted by JSON pointer.
    """
    root = schema if schema is not None else load_schema()
    out: list[BundleProblem] = []

    def walk(node: Any, inst: Any, path: list[Any]) -> None:
        node = _resolve(root, node)
        if not isinstance(node, dict):
            return
        for sub in node.get("allOf") or []:
            walk(sub, inst, path)
        if isinstance(inst, dict):
            props = node.get("properties")
            extra = node.get("additionalProperties")
            for key, value in inst.items():
                if isinstance(props, dict) and key in props:
                    walk(props[key], value, [*path, key])
                elif isinstance(extra, dict):
                    walk(extra, value, [*path, key])
                elif isinstance(props, dict) and extra is None and "patternProperties" not in node:
                    out.append(
                        BundleProblem(
                            _ptr([*path, key]),
                            "unknown key, ignored",
                            "schemas/config.schema.json",
                            "remove it if it is a typo",
                        )
                    )
        elif isinstance(inst, list) and isinstance(node.get("items"), dict):
            for i, value in enumerate(inst):
                walk(node["items"], value, [*path, i])

    walk(root, cfg, [])
    return sorted(out, key=lambda p: p.pointer)
