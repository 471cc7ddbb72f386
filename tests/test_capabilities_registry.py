"""One list of capability names: the probe registry.  Each platform registers the names its planner
requires where it is the platform in use, and ``sandbox-shim.requires`` is checked against that
registry (``bundle._requires_problems``).  ``sys.platform`` is simulated as the Windows and macOS
tests do, and the platform's probe module re-imported under it."""

from __future__ import annotations

import importlib
import sys

import pytest
from sandbox_shim import capability
from sandbox_shim.bundle import Settings, _requires_problems


def _registry_on(monkeypatch: pytest.MonkeyPatch, platform: str, module: str) -> set[str]:
    capability._load_probes()
    monkeypatch.setattr(capability, "PROBES", dict(capability.PROBES))  # restored after the test
    monkeypatch.setattr(sys, "platform", platform)
    importlib.reload(importlib.import_module(module))
    return set(capability.PROBES)


def _problems(names: tuple[str, ...]) -> list[str]:
    return [p.message for p in _requires_problems(Settings(requires=names))]


def test_macos_registers_every_name_its_planner_requires(monkeypatch: pytest.MonkeyPatch) -> None:
    from sandbox_shim.platforms.darwin.plan import NOT_ON_MACOS, PROBED

    assert _problems(("seatbelt",)) != []  # control: on Linux a macOS name is unknown
    names = _registry_on(monkeypatch, "darwin", "sandbox_shim.platforms.darwin.probes")
    assert {*PROBED, *NOT_ON_MACOS} <= names
    assert _problems(("seatbelt", "filesystem.confinement", "network.deny", "rlimit.cpu")) == []
    assert _problems(("seatbelt", "job-object.memory")) != []  # a Windows-only name stays unknown
    assert (
        capability.PROBES["seccomp"].__module__ == "sandbox_shim.platforms.linux.kernel_probes"
    )  # kept its probe


def test_windows_registers_every_name_its_planner_accepts(monkeypatch: pytest.MonkeyPatch) -> None:
    from sandbox_shim.platforms.windows.plan import KNOWN_CAPABILITIES

    assert _problems(("job-object.memory",)) != []  # control: on Linux the limit names are unknown
    names = _registry_on(monkeypatch, "win32", "sandbox_shim.platforms.windows.probes")
    assert set(KNOWN_CAPABILITIES) <= names
    assert _problems(("job-object", "job-object.memory", "filesystem.confinement")) == []
    assert _problems(("job-object", "no-such-thing")) != []


def test_the_windows_planner_keeps_no_list_of_its_own() -> None:
    from sandbox_shim.platforms.windows import plan

    assert plan._requires.__code__.co_names.count("KNOWN_CAPABILITIES") == 0
