"""The pytest face of the suite: ``ConformanceSuite``, a base class whose subclasses get every check.

    # test_my_runtime.py
    from sandbox_shim.conformance import ConformanceSuite

    class TestMyRuntime(ConformanceSuite):
        mechanism = "my_runtime.conformance:MyTarget"   # or the class itself, or an instance
        known_holes = {}   # check name -> reason: xfail (strict) instead of fail

One test per check (``test_check[<Group>-<check>]``); a ``skip`` verdict is a pytest skip with its reason,
``fail`` and ``error`` fail the test with the verdict and the evidence.  ``TestSandboxConformance`` is the
class the plugin collects for ``pytest --sandbox-mechanism module:Class``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest

from .helpers import ERROR, FAIL, SKIP, Check, all_checks
from .target import ConformanceTarget

_CHECKS: dict[str, Check] = {re.sub(r"[^A-Za-z0-9_.]+", "-", c.id).strip("-"): c for c in all_checks()}


class ConformanceSuite:
    """Subclass and set ``mechanism``: a ``ConformanceTarget`` subclass, instance or ``"module:Class"``.

    Attributes:
        mechanism: the target (None: take ``--sandbox-mechanism``, else this host's ``ApiTarget``).
        known_holes: check name → reason; those checks are expected to fail (strict xfail), so a
            known hole is named in the report instead of silently passing CI.
    """

    mechanism: ClassVar[Any] = None
    known_holes: ClassVar[dict[str, str]] = {}

    @pytest.fixture(scope="class")
    @classmethod
    def conformance_target(cls, request: pytest.FixtureRequest) -> Iterator[ConformanceTarget]:
        from .runner import load_target

        m = cls.mechanism
        if m is None:
            m = request.config.getoption("sandbox_mechanism", None)
        if isinstance(m, ConformanceTarget):
            target = m
        elif isinstance(m, type):
            target = m()
        else:
            target = load_target(m)
        try:
            yield target
        finally:
            target.close()

    @pytest.mark.parametrize("check_id", list(_CHECKS))
    def test_check(self, conformance_target: ConformanceTarget, check_id: str) -> None:
        c = _CHECKS[check_id]
        hole = type(self).known_holes.get(c.name)
        r = c.run(conformance_target)
        if r.verdict == SKIP:
            pytest.skip(r.detail)
        if hole and r.verdict in (FAIL, ERROR):
            pytest.xfail(f"known hole: {hole} ({r.detail})")
        if r.verdict in (FAIL, ERROR):
            pytest.fail(
                f"{r.verdict.upper()}: {r.group} / {r.check}: control {r.control}, "
                f"breach {r.breach}: {r.detail}",
                pytrace=False,
            )
        if hole:
            pytest.fail(f"{c.name} passes now: remove it from known_holes ({hole})", pytrace=False)


class TestSandboxConformance(ConformanceSuite):
    """Collected by the plugin only when ``--sandbox-mechanism`` is given."""
