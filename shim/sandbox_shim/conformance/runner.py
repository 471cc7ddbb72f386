"""Running the suite outside pytest (``sandbox-shim conformance``): load a target, run every check, render.

``load_target("module:Class")`` imports a ``ConformanceTarget`` subclass (or a factory returning one);
``run_target(spec)`` loads one, runs the suite on it and closes it (the CLI's one call);
``run_suite(target)`` runs the checks in group order and returns ``CheckResult`` rows; ``render_table`` and
``to_json`` format them; ``exit_status`` is non-zero when any row is ``fail`` or ``error``,
or (unless skips are accepted) ``skip``.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Iterable
from typing import Any

from .helpers import ERROR, FAIL, SKIP, CheckResult, all_checks
from .helpers import groups as known_groups
from .target import ConformanceTarget

DEFAULT_TARGET = "sandbox_shim.conformance.api_target:ApiTarget"


def load_target(spec: str | None = None) -> ConformanceTarget:
    """Instantiate the target named ``module:attr`` (default: ``ApiTarget``, this host's mechanism).

    Raises:
        UsageError (status 2): ``spec`` is not ``module:attr``, importing it fails, the attribute is
        missing, or it does not make a ``ConformanceTarget``; the cause is chained.
    """
    from ..errors import UsageError

    try:
        mod, sep, attr = (spec or DEFAULT_TARGET).partition(":")
        if not sep or not mod or not attr:
            raise ValueError(f"--sandbox-mechanism wants module:Class, got {spec!r}")
        obj: Any = getattr(importlib.import_module(mod), attr)
        target = obj() if callable(obj) else obj
        if not isinstance(target, ConformanceTarget):
            raise TypeError(f"{spec} made {type(target).__name__}, not a conformance.ConformanceTarget")
    except (ValueError, ImportError, AttributeError, TypeError) as e:
        raise UsageError(
            f"cannot load the conformance target: {e}",
            "give --mechanism MODULE:CLASS naming a ConformanceTarget",
        ) from e
    return target


def run_suite(
    target: ConformanceTarget,
    groups: Iterable[str] | None = None,
    name_contains: str | None = None,
    on_result: Callable[[CheckResult], None] | None = None,
) -> list[CheckResult]:
    """Run the checks (all, or those of ``groups`` / whose name contains ``name_contains``) on ``target``.

    Raises: UsageError (status 2): a group in ``groups`` has no check (``helpers.groups`` lists them).
    """
    wanted = set(groups or [])
    checks = all_checks()
    unknown = sorted(wanted - set(known_groups()))
    if unknown:
        from ..errors import UsageError

        raise UsageError(f"no conformance group {unknown[0]!r}", f"choose from: {', '.join(known_groups())}")
    out = []
    for c in checks:
        if (wanted and c.group not in wanted) or (name_contains and name_contains not in c.name):
            continue
        r = c.run(target)
        out.append(r)
        if on_result:
            on_result(r)
    return out


def run_target(
    spec: str | None = None,
    groups: Iterable[str] | None = None,
    name_contains: str | None = None,
    on_result: Callable[[CheckResult], None] | None = None,
) -> tuple[str, list[CheckResult]]:
    """Load the target ``spec`` names (``load_target``), run the checks on it (``run_suite``) and close
    it whatever happens: ``(the target's name, the rows)``.

    Raises: UsageError (status 2): the target cannot be loaded, or a group has no check.
    """
    target = load_target(spec)
    try:
        return target.name, run_suite(target, groups, name_contains, on_result)
    finally:
        target.close()


COLUMNS = ("group", "check", "control", "breach", "verdict", "detail")


def render_table(rows: list[CheckResult], detail_width: int = 90) -> str:
    """A plain-text table, one row per check, and a summary line."""

    def cut(s: str) -> str:
        return s if len(s) <= detail_width else s[: detail_width - 3] + "..."

    cells = [[r.group, r.check, r.control, r.breach, r.verdict.upper(), cut(r.detail)] for r in rows]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, h in enumerate(COLUMNS)]
    line = "  ".join(h.upper().ljust(w) for h, w in zip(COLUMNS, widths, strict=True)).rstrip()
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    counts = {v: sum(r.verdict == v for r in rows) for v in ("pass", "fail", "error", "skip")}
    out.append(f"{len(rows)} checks: " + ", ".join(f"{n} {v}" for v, n in counts.items()))
    return "\n".join(out)


def to_json(rows: list[CheckResult], target: ConformanceTarget | str) -> str:
    """``{"target": its name, "results": [row, ...]}`` as indented JSON (``target``: one, or its name)."""
    name = target if isinstance(target, str) else target.name
    return json.dumps({"target": name, "results": [r.to_dict() for r in rows]}, indent=2)


#: exit status of a run in which some checks could not run (skips), unless skips are accepted
SKIPPED_STATUS = 3


def exit_status(rows: list[CheckResult], accept_skips: bool = False) -> int:
    """1 if any check failed or errored; else ``SKIPPED_STATUS`` (3) if any was skipped (or none ran)
    and ``accept_skips`` is false; else 0.  A run that proved nothing never looks like a pass."""
    if any(r.verdict in (FAIL, ERROR) for r in rows):
        return 1
    if not accept_skips and (not rows or any(r.verdict == SKIP for r in rows)):
        return SKIPPED_STATUS
    return 0
