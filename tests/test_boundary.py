"""The public boundary shipped as package data matches the installed package.

``boundary.md`` lists the public modules only; every other module is internal by default, so a new
module (a platform file, a CLI verb, a conformance check) is added without editing it."""

from __future__ import annotations

import importlib
import pkgutil
import re
from importlib import resources

import sandbox_shim

PUBLIC = re.compile(r"^- `(sandbox_shim[\w.]*)`", re.M)


def _public(text: str | None = None) -> list[str]:
    if text is None:
        text = resources.files("sandbox_shim").joinpath("boundary.md").read_text(encoding="utf-8")
    public_part = text.partition("## Public")[2].partition("\n## ")[0]
    return PUBLIC.findall(public_part)


def installed_modules() -> set[str]:
    names = {"sandbox_shim"}
    for info in pkgutil.walk_packages(sandbox_shim.__path__, "sandbox_shim."):
        names.add(info.name)
    return names


def test_every_public_module_exists_once() -> None:
    public = _public()
    assert {"sandbox_shim", "sandbox_shim.api", "sandbox_shim.errors"} <= set(public)  # the control
    assert len(public) == len(set(public)), "a module listed twice"
    assert set(public) - installed_modules() == set(), "boundary.md lists modules that do not exist"


def test_a_listed_module_that_does_not_exist_is_found() -> None:
    """The control for the check above: a stale line naming a removed module."""
    text = (
        "## Public\n\n- `sandbox_shim.api` — x\n- `sandbox_shim.gone` — y\n\n## Notes\n- `sandbox_shim.x`\n"
    )
    assert _public(text) == ["sandbox_shim.api", "sandbox_shim.gone"]
    assert set(_public(text)) - installed_modules() == {"sandbox_shim.gone"}


def test_public_modules_import_and_top_level_names_resolve() -> None:
    public = _public()
    for name in public:
        importlib.import_module(name)
    for name in sandbox_shim.__all__:
        obj = getattr(sandbox_shim, name)
        assert obj.__module__ in public or obj.__module__.rsplit(".", 1)[0] in public, (name, obj.__module__)
