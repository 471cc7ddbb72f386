"""Library semantics a caller relies on: deadlines, bounded output, stdio, call shape, listing, telemetry."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, base_config, run_shim
from sandbox_shim import api, telemetry
from sandbox_shim.errors import LimitExceeded
from sandbox_shim.execution import execute
from sandbox_shim.mechanism import Sandbox

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.geteuid() != 0, reason="needs Linux, root, bwrap and cgroups"
)


@pytest.fixture
def running(make_bundle: Any, state_root: Path) -> Any:
    mech = api.default_mechanism(str(state_root))
    box = Sandbox("lib", str(make_bundle(base_config(["sleep", "600"]))))
    api.provision(mech, box)
    api.start(mech, box)  # a Sandbox, as provision takes
    yield mech, box
    api.destroy(mech, box, force=True)


def test_a_background_child_holding_stdout_does_not_extend_the_deadline(running: Any) -> None:
    mech, box = running
    t0 = time.monotonic()
    with pytest.raises(LimitExceeded) as info:  # the control: a program that runs on is stopped at T
        execute(mech, box, ("sleep", ["30"]), timeout=1)
    assert info.value.kind_of_limit == "wall_clock" and time.monotonic() - t0 < 8
    t0 = time.monotonic()
    done = execute(mech, box, ("sh", ["-c", "sleep 60 & echo started"]), timeout=2)
    assert time.monotonic() - t0 < 2, "the background child extended the wait"
    assert done.exit_status == 0 and done.stdout == b"started\n"  # exited 0: not a wall-clock limit


def test_captured_output_is_bounded_and_the_cut_is_reported(running: Any) -> None:
    mech, box = running
    whole = execute(mech, box, ("head", ["-c", "100000", "/dev/zero"]), timeout=30)
    assert len(whole.stdout) == 100000 and not whole.truncated  # the control: under the limit, whole
    big = 20 * 1024 * 1024
    cut = execute(mech, box, ("head", ["-c", str(big), "/dev/zero"]), timeout=60, max_output=1 << 20)
    assert len(cut.stdout) == 1 << 20 and cut.stdout_dropped == big - (1 << 20) and cut.truncated


def test_call_shape_is_sandbox_or_id_everywhere(running: Any) -> None:
    mech, box = running
    assert api.status(mech, box).status == "running" == api.status(mech, box.id).status
    assert api.usage(mech, box) is not None
    api.signal(mech, box, 0)


def test_list_running_lists_only_running_sandboxes(running: Any, make_bundle: Any) -> None:
    mech, box = running
    held = Sandbox("held", str(make_bundle(base_config(["sleep", "600"]), name="held")))
    done = Sandbox("done", str(make_bundle(base_config(["true"]), name="done")))
    api.provision(mech, held)
    api.provision(mech, done)
    try:
        api.start(mech, done)
        deadline = time.monotonic() + 10
        while api.status(mech, done).status != "stopped" and time.monotonic() < deadline:
            time.sleep(0.05)
        everyone = {s.id: s.status for s in api.list_sandboxes(mech)}
        assert everyone == {"lib": "running", "held": "created", "done": "stopped"}  # the control
        assert [s.id for s in api.list_running(mech)] == ["lib"]
    finally:
        api.destroy(mech, held, force=True)
        api.destroy(mech, done, force=True)


def test_execute_emits_telemetry_events(running: Any) -> None:
    mech, box = running
    seen: list[Any] = []
    telemetry.attach("t", lambda e, m, md: seen.append((e, md.get("sandbox_id"))))
    try:
        execute(mech, box, ("true", []), timeout=10)
    finally:
        telemetry.detach("t")
    assert (("sandbox_shim", "execute", "start"), "lib") in seen
    assert (("sandbox_shim", "execute", "stop"), "lib") in seen
    assert ("sandbox_shim", "execute", "stop") in telemetry.events()


def test_library_default_stdio_is_not_the_callers(make_bundle: Any, state_root: Path, tmp_path: Path) -> None:
    """A service whose stdout is its log file: the tenant neither reads, writes nor truncates it."""
    bundle = make_bundle(base_config(["sh", "-c", "echo TENANT; echo TENANT >&2; cat; : >/proc/self/fd/1"]))
    log = tmp_path / "service.log"
    log.write_text("service line\n")
    code = (
        "import sys, time; from sandbox_shim import api; from sandbox_shim.mechanism import Sandbox\n"
        "m = api.default_mechanism(sys.argv[1]); b = Sandbox('quiet', sys.argv[2])\n"
        "api.provision(m, b); api.start(m, b)\n"
        "t = time.monotonic() + 10\n"
        "while api.status(m, b).status != 'stopped' and time.monotonic() < t: time.sleep(0.05)\n"
        "api.destroy(m, b, force=True); print('service done')\n"
    )
    with open(log, "a") as out, open(log) as inp:
        p = subprocess.run(
            [sys.executable, "-c", code, str(state_root), str(bundle)],
            stdin=inp,
            stdout=out,
            stderr=out,
            timeout=60,
        )
    assert p.returncode == 0
    assert log.read_text() == "service line\nservice done\n"


def test_cli_run_honours_the_wall_clock_setting(make_bundle: Any, state_root: Path) -> None:
    quick = make_bundle(base_config(["sh", "-c", "exit 4"]), name="quick")
    assert run_shim(state_root, "run", "--bundle", str(quick), "q").returncode == 4  # the control
    cfg = base_config(["sleep", "30"])
    cfg["annotations"] = {"sandbox-shim.wall-clock-seconds": "1"}
    slow = make_bundle(cfg, name="slow")
    t0 = time.monotonic()
    r = run_shim(state_root, "run", "--bundle", str(slow), "w")
    assert r.returncode == 10 and "wall_clock" in r.stderr, r.stderr
    assert time.monotonic() - t0 < 15
    assert not (state_root / "w").exists()


def test_the_readme_execute_example_runs(tmp_path: Path, state_root: Path, rootfs_template: Path) -> None:
    text = (REPO / "README.md").read_text()
    block = next(b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "execute(mech, box" in b)
    import shutil

    bundles = tmp_path / "bundles"
    (bundles / "busybox").mkdir(parents=True)
    shutil.copy(REPO / "bundles" / "busybox" / "config.json", bundles / "busybox")
    shutil.copytree(rootfs_template, bundles / "busybox" / "rootfs", symlinks=True)
    (bundles / "busybox" / "storage").mkdir()
    code = block.replace("/run/sandbox-shim", str(state_root)).replace("/tmp/box1", str(tmp_path / "box1"))
    r = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("0 hello from") and lines[-1] == "3 b'hi\\n' False", r.stdout
    assert json.loads((bundles / "busybox" / "config.json").read_text())  # the shipped bundle, unchanged


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), -float("inf")])
def test_a_timeout_out_of_its_domain_is_a_usage_error_naming_it(running: Any, bad: float) -> None:
    from sandbox_shim.errors import InvalidArgument, UsageError

    mech, box = running
    assert execute(mech, box, ("true", []), timeout=0.001 + 5).exit_status == 0  # the control
    with pytest.raises(InvalidArgument) as info:
        execute(mech, box, ("true", []), timeout=bad)
    assert isinstance(info.value, ValueError) and isinstance(info.value, UsageError)
    assert info.value.parameter == "timeout" and "timeout" in info.value.line()
    with pytest.raises(InvalidArgument):
        api.stop(mech, box, grace=-1 if bad == 0 else bad)
    assert api.status(mech, box).status == "running"  # refused before anything was done


def _script_bundle(make_bundle: Any, name: str, first_line: str, mode: int = 0o755) -> Path:
    bundle = make_bundle(base_config(["/badsh"]), name=name)
    script = bundle / "rootfs" / "badsh"
    script.write_text(first_line + "\necho ran\n")
    script.chmod(0o755)
    (bundle / "rootfs" / "interp").write_text("#!/bin/sh\n")
    (bundle / "rootfs" / "interp").chmod(mode)
    return bundle


@pytest.mark.parametrize(
    ("first_line", "status"),
    [
        ("#!/nonexistent/interp", 127),
        ("#!/interp", 126),
        ("#! /bin/sh", 0),
        ("#!/bin/sh\r", 127),  # the kernel trims spaces and tabs only: "/bin/sh\r" does not exist
        ("#!/bin/sh\v", 127),
        ("#!/nonexist\0/bin/sh", 127),  # the name ends at NUL (fs/binfmt_script.c)
        ("#!/bin/sh\t-e ", 0),  # control: a tab ends the name, the rest is the argument
    ],
)
def test_a_script_whose_interpreter_cannot_run_is_could_not_run(
    make_bundle: Any, state_root: Path, first_line: str, status: int
) -> None:
    from sandbox_shim.errors import CouldNotRun
    from sandbox_shim.execution import run_bundle

    bundle = _script_bundle(make_bundle, f"s{status}-{abs(hash(first_line)) % 1000}", first_line, 0o644)
    mech = api.default_mechanism(str(state_root))
    for fmt in ([], ["--log-format", "json"]):
        r = run_shim(state_root, *fmt, "run", "--bundle", str(bundle), f"c{status}")
        assert r.returncode == status, (first_line, r.stderr)
        if status:
            assert len(r.stderr.strip().splitlines()) == 1, r.stderr
            if fmt:
                assert json.loads(r.stderr)["error"] == "could_not_run"
        else:
            assert r.stdout == "ran\n"  # the control: the same script with a good interpreter runs
        assert not (state_root / f"c{status}").exists()
    if status:
        with pytest.raises(CouldNotRun) as info:
            run_bundle(mech, "lib", bundle)
        assert info.value.exit_status == status
        c = run_shim(state_root, "create", "--bundle", str(bundle), "cr")
        assert c.returncode == status and len(c.stderr.strip().splitlines()) == 1, c.stderr
        assert not (state_root / "cr").exists()
