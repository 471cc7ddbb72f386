"""JSON Schema validation of config.json with messages a person can act on.

Errors come from ``jsonschema`` against ``schemas/config.schema.json``; each becomes a
``BundleProblem`` whose message is built from the schema keyword, never from the instance value
(so ``process.env`` values are never echoed).  Unknown keys are found by re-validating against a
strict copy of the schema (``additionalProperties: false`` wherever properties are listed) and are
returned as warnings.
"""

from __future__ import annotations

import copy
import json
from functools import cache, lru_cache
from importlib import resources
from typing import Any

from .errors import BundleProblem


@cache
def load_schema(name: str = "config.schema.json") -> dict[str, Any]:
    """A schema shipped in the package (``sandbox_shim/schemas/NAME``)."""
    return json.loads(resources.files("sandbox_shim.schemas").joinpath(name).read_text(encoding="utf-8"))


def _strict(schema: Any) -> Any:
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if "properties" in out and "additionalProperties" not in out and "patternProperties" not in out:
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


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
    return f"fails schema rule {kw!r}", "see schemas/config.schema.json"


def schema_problems(cfg: dict[str, Any]) -> tuple[list[BundleProblem], list[BundleProblem]]:
    """Validate ``cfg``; return (errors, warnings about unknown keys)."""
    import jsonschema

    schema = load_schema()
    validator = jsonschema.Draft202012Validator(schema)
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
    warnings: list[BundleProblem] = []
    if not errors:
        strict = jsonschema.Draft202012Validator(_strict_schema())
        for err in strict.iter_errors(cfg):
            if err.validator == "additionalProperties":
                known = set((err.schema.get("properties") or {}).keys())
                for key in sorted(set(err.instance) - known):
                    warnings.append(
                        BundleProblem(
                            _ptr([*err.absolute_path, key]),
                            "unknown key, ignored",
                            "schemas/config.schema.json",
                            "remove it if it is a typo",
                        )
                    )
    return errors, warnings


@lru_cache(maxsize=1)
def _strict_schema() -> dict[str, Any]:
    return _strict(copy.deepcopy(load_schema()))
