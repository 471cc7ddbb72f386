"""The pytest plugin (entry point ``pytest11``: ``sandbox_shim_conformance``).

Inert unless asked: it adds the ``--sandbox-mechanism`` option and nothing else — no fixtures, no
collection, no imports of the suite — so any pytest run that loads it (this project's own included) pays
only for the option.  With ``pytest --sandbox-mechanism module:Class`` it appends the whole suite
(``suite.TestSandboxConformance``) to the collected items, run against that target.
"""

from __future__ import annotations

from typing import Any

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("sandbox-shim conformance")
    group.addoption(
        "--sandbox-mechanism",
        dest="sandbox_mechanism",
        default=None,
        metavar="MODULE:CLASS",
        help="run the sandbox conformance suite against this ConformanceTarget "
        "(e.g. sandbox_shim.conformance.api_target:ApiTarget)",
    )


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[Any]) -> None:
    if not config.getoption("sandbox_mechanism", None):
        return
    import importlib
    from pathlib import Path

    suite = importlib.import_module("sandbox_shim.conformance.suite")

    class _SuiteModule(pytest.Module):
        def _getobj(self) -> Any:
            return suite

    mod = _SuiteModule.from_parent(session, path=Path(suite.__file__ or "suite.py"))
    items.extend(session.genitems(mod))
