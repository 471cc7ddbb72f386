"""The library API drives the Linux mechanism through every call, with telemetry events."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import sandbox_shim
from conftest import base_config, cgroup_dirs, wait_pid
from sandbox_shim import telemetry
from sandbox_shim.errors import CapabilityUnavailable, InvalidState, SandboxNotFound
from sandbox_shim.mechanism import Mechanism


def test_mechanism_satisfies_the_protocol(state_root: Path) -> None:
    mech = sandbox_shim.default_mechanism(str(state_root))
    assert isinstance(mech, Mechanism)


def test_provision_start_status_usage_stop_destroy(make_bundle, state_root: Path) -> None:
    cfg = base_config(
        [
            "sh",
            "-c",
            "trap '' TERM; awk 'BEGIN{s=\"x\"; while (length(s) < 33554432) s = s s; "
            "print length(s)}' >/dev/null; while :; do sleep 0.05; done",
        ]
    )
    b = make_bundle(cfg)
    mech = sandbox_shim.default_mechanism(str(state_root))
    events: list[tuple] = []
    telemetry.attach("test", lambda e, m, md: events.append((e, m, md)))
    try:
        st = sandbox_shim.provision(mech, sandbox_shim.Sandbox("lib1", str(b), owner_ref="tenant-7"))
        assert st.status == "created" and st.pid > 0
        assert mech.status(mech_sandbox(mech, "lib1")).status == "created"
        sandbox_shim.start(mech, "lib1")
        assert sandbox_shim.status(mech, "lib1").status == "running"
        assert mech.status(mech_sandbox(mech, "lib1")).status == "running"
        deadline = time.time() + 10
        u = sandbox_shim.usage(mech, "lib1")
        while (u.memory_peak_bytes or 0) < (16 << 20) and time.time() < deadline:
            time.sleep(0.1)
            u = sandbox_shim.usage(mech, "lib1")
        assert u.pids and u.pids >= 2 and (u.memory_peak_bytes or 0) >= 16 << 20
        assert [s.id for s in sandbox_shim.list_running(mech)] == ["lib1"]
        t0 = time.monotonic()
        st = sandbox_shim.stop(mech, "lib1", grace=0.5)  # PID 1 ignores TERM: KILL follows the grace
        assert st.status == "stopped" and time.monotonic() - t0 < 8
        assert st.exit_status == 128 + 9
        assert cgroup_dirs("lib1"), "stop keeps resources until destroy"
        with pytest.raises(InvalidState):
            sandbox_shim.start(mech, "lib1")
        sandbox_shim.destroy(mech, "lib1")
        assert cgroup_dirs("lib1") == [] and not (state_root / "lib1").exists()
        with pytest.raises(SandboxNotFound):
            sandbox_shim.status(mech, "lib1")
        wait_pid(st.pid) if st.pid else None
    finally:
        telemetry.detach("test")
    calls = [(e[1], e[2]) for e, _, _ in events]
    assert ("provision", "start") in calls and ("provision", "stop") in calls
    assert ("start", "exception") in calls and ("status", "exception") in calls
    stop = next(m for e, m, md in events if e[1] == "provision" and e[2] == "stop")
    assert stop["duration"] > 0
    exc = next(md for e, m, md in events if e[1] == "start" and e[2] == "exception")
    assert exc["kind"] == "invalid_state" and exc["sandbox_id"] == "lib1" and exc["mechanism"] == "linux"


def mech_sandbox(mech, sid: str):
    from sandbox_shim import api

    store = api.store_of(mech)
    return api.sandbox_of(store.read(sid), store)


def test_capabilities_report_is_probed(state_root: Path) -> None:
    reports = {c.name: c for c in sandbox_shim.capabilities()}
    assert reports["bwrap"].available and reports["bwrap"].measured_by
    assert reports["namespace.network"].available
    assert not reports["job-object"].available and reports["job-object"].detail


def test_refusal_raises_before_anything_is_made(make_bundle, state_root: Path) -> None:
    cfg = base_config()
    cfg["annotations"]["sandbox-shim.requires"] = "job-object"  # a capability Linux does not have
    b = make_bundle(cfg)
    mech = sandbox_shim.default_mechanism(str(state_root))
    with pytest.raises(CapabilityUnavailable) as ei:
        sandbox_shim.provision(mech, sandbox_shim.Sandbox("ref", str(b)))
    assert [r.name for r in ei.value.reports] == ["job-object"]
    assert not (state_root / "ref").exists() and cgroup_dirs("ref") == []


def test_cli_json_log_carries_telemetry_only_with_debug(
    make_bundle, state_root: Path, tmp_path: Path
) -> None:
    import json

    from conftest import run_shim

    b = make_bundle()
    quiet, loud = tmp_path / "quiet.log", tmp_path / "loud.log"
    assert (
        run_shim(
            state_root, "--log", str(quiet), "--log-format", "json", "create", "--bundle", str(b), "t1"
        ).returncode
        == 0
    )
    assert not quiet.exists() or quiet.read_text() == ""  # podman parses this file whole on error
    assert (
        run_shim(
            state_root, "--debug", "--log", str(loud), "--log-format", "json", "delete", "--force", "t1"
        ).returncode
        == 0
    )
    recs = [json.loads(line) for line in loud.read_text().splitlines()]
    names = [r["msg"] for r in recs if r["level"] == "debug"]
    assert "sandbox_shim.destroy.start" in names and "sandbox_shim.destroy.stop" in names
    stop = next(r for r in recs if r["msg"] == "sandbox_shim.destroy.stop")
    assert stop["duration"] > 0 and stop["sandbox_id"] == "t1" and stop["time"].endswith("Z")


def test_library_calls_take_named_typed_options() -> None:
    """No ``**opts: Any`` in the library's calls: every option is a named, typed keyword, so mypy checks
    a caller's options and ``help()`` lists them (``execute`` once passed ``**opts`` on to ``spawn``)."""
    import importlib
    import inspect

    found = []
    for name in ("api", "execution", "exec_request", "spawn", "control", "process_list", "addresses"):
        mod = importlib.import_module(f"sandbox_shim.{name}")
        for fname, f in vars(mod).items():
            if fname.startswith("_") or not inspect.isfunction(f) or f.__module__ != mod.__name__:
                continue
            for p in inspect.signature(f).parameters.values():
                if p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL) or str(p.annotation) == "Any":
                    found.append(f"{name}.{fname}({p})")
    assert not found, found
    params = inspect.signature(importlib.import_module("sandbox_shim.execution").execute).parameters
    assert {"replace_env", "user", "capabilities", "console_socket"} <= set(params)
