"""The public boundary shipped as package data matches the installed package."""

from __future__ import annotations

import importlib
import pkgutil
import re
from importlib import resources

import sandbox_shim


def _lists() -> tuple[list[str], list[str]]:
    text = resources.files("sandbox_shim").joinpath("boundary.md").read_text(encoding="utf-8")
    public_part, _, internal_part = text.partition("## Internal")
    pat = re.compile(r"^- `(sandbox_shim[\w.]*)`", re.M)
    return pat.findall(public_part), pat.findall(internal_part)


def installed_modules() -> set[str]:
    names = {"sandbox_shim"}
    for info in pkgutil.walk_packages(sandbox_shim.__path__, "sandbox_shim."):
        names.add(info.name)
    return names


def test_every_module_is_listed_exactly_once() -> None:
    public, internal = _lists()
    assert len(public) == len(set(public)) and len(internal) == len(set(internal))
    assert not set(public) & set(internal)
    listed = set(public) | set(internal)
    found = installed_modules()
    assert found - listed == set(), "modules missing from boundary.md"
    assert listed - found == set(), "boundary.md lists modules that do not exist"


def test_public_modules_import_and_top_level_names_resolve() -> None:
    public, _ = _lists()
    for name in public:
        importlib.import_module(name)
    for name in sandbox_shim.__all__:
        obj = getattr(sandbox_shim, name)
        assert obj.__module__ in public or obj.__module__.rsplit(".", 1)[0] in public, (name, obj.__module__)
