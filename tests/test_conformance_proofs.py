"""Proof that the conformance suite can fail: it is run against two broken mechanisms.

(a) ``LeakyTarget`` runs each probe on the host as root with no isolation at all (a temp dir plays the
    rootfs; only a private mount namespace keeps its mount/umount probes off the real host's mount
    table).  Every isolation check must FAIL (none may pass); the few whose control cannot succeed on a
    plain host are ERROR, never pass.
(b) ``DyingTarget`` is the real Linux mechanism with a ``start`` that kills the sandbox instead of
    releasing it.  Every probe, control included, "prints nothing and is stopped": a naive suite would
    call that a pass.  Every verdict must be ERROR (a dead process is never "denied").
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest
from sandbox_shim.conformance import run_suite
from sandbox_shim.conformance.api_target import ApiTarget
from sandbox_shim.conformance.helpers import ERROR, FAIL, PASS, SKIP, CheckResult
from sandbox_shim.conformance.target import (
    COMPLETED,
    LIMIT_EXCEEDED,
    BundleHandle,
    ConformanceTarget,
    ProbeResult,
    ToolMissing,
)

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux")
    or os.geteuid() != 0
    or shutil.which("busybox") is None
    or shutil.which("unshare") is None,
    reason="needs Linux, root, busybox and unshare(1)",
)


class LeakyTarget(ConformanceTarget):
    """A deliberately broken 'mechanism': ``sh -c`` on the host, in the bundle's rootfs dir, caller's env."""

    name = "leaky (host shell)"

    def bundle(self, name: str | None = None, overrides: Mapping[str, Any] | None = None) -> BundleHandle:
        name = name or self.new_id("b")
        path = os.path.join(self.bundles_root, name)
        os.makedirs(os.path.join(path, "rootfs"))
        os.makedirs(os.path.join(path, "storage"))
        storage = os.path.join(path, "storage")
        return BundleHandle(name, path, storage, storage, dict(overrides or {}))

    def run_probe(
        self,
        overrides: Mapping[str, Any] | None,
        script: str,
        *,
        bundle: BundleHandle | None = None,
        argv: Sequence[str] | None = None,
        timeout: float = 30.0,
    ) -> ProbeResult:
        b = bundle or self.bundle(overrides=overrides)
        env = dict(os.environ)
        for entry in ((overrides or {}).get("process") or {}).get("env") or []:  # config env, passed as is
            k, _, v = entry.partition("=")
            env[k] = v
        cmd = list(argv) if argv is not None else ["busybox", "sh", "-c", script]
        p = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", *cmd],
            cwd=os.path.join(b.path, "rootfs"),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        t0 = time.monotonic()
        try:
            out, err = p.communicate(timeout=timeout)
            outcome = COMPLETED
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
            outcome = LIMIT_EXCEEDED
        finally:
            try:
                os.killpg(p.pid, signal.SIGKILL)  # what it left behind (sleeps)
            except ProcessLookupError:
                pass
        code = p.returncode
        return ProbeResult(
            code if code >= 0 else None,
            out.decode(errors="replace"),
            err.decode(errors="replace"),
            outcome,
            signal=-code if code < 0 else None,
            limit_kind="wall_clock" if outcome == LIMIT_EXCEEDED else None,
            duration=time.monotonic() - t0,
        )


class DyingTarget(ApiTarget):
    """The Linux mechanism, except that ``start`` kills the held process instead of releasing it."""

    name = "linux, dies at start"

    def make_mechanism(self, root: str) -> Any:
        from sandbox_shim.platforms.linux.mechanism import LinuxMechanism

        class Dying(LinuxMechanism):
            def start(self, sandbox: Any) -> None:
                self.signal(sandbox, signal.SIGKILL, all_processes=True)

        mech = Dying()
        mech.root = root  # type: ignore[attr-defined]
        return mech

    def confine_probe(self, script: str, permit_path: str, timeout: float = 30.0) -> ProbeResult:
        raise ToolMissing("confinement is not part of this mechanism")


@pytest.fixture
def leaky() -> Iterator[LeakyTarget]:
    pivot = "/tmp/old"
    existed = os.path.exists(pivot)
    t = LeakyTarget()
    try:
        yield t
    finally:
        t.close()
        if not existed and os.path.isdir(pivot):
            os.rmdir(pivot)  # made on the host by the leaky pivot_root probe


def by_name(rows: list[CheckResult]) -> dict[str, CheckResult]:
    return {r.check: r for r in rows}


#: isolation checks whose control cannot succeed on a plain host shell: their verdict is ERROR, never pass
CONTROL_NEEDS_A_SANDBOX = {
    "fs: umount",  # /tmp is not a mount point on the host
    "fs: pivot_root",  # nor is it a new root
    "fs: /proc/1/root",  # the host's pid 1 may hold capabilities the test process lacks (ptrace access check)
}


#: checks whose control needs what the tenant profile refuses, so it runs outside the mechanism under test
#: (``ConformanceTarget.run_control``: bare bwrap with --cap-add); a mechanism that dies still has a working
#: control there, and its breach is ERROR "not run"
CONTROL_OUTSIDE_THE_MECHANISM = {
    "fs: mount",
    "fs: umount",
    "fs: pivot_root",
    "net: raw socket",
    "proc: ptrace a host process",
    "caps: self-granted CAP_DAC_READ_SEARCH opens host files (open_by_handle_at)",
    "mounts: CAP_SYS_ADMIN in its own user namespace makes the read-only root writable (new mount API)",
    "kernel files: uid 0 writes /proc/sys when readonlyPaths leaves it out",
    "fs: masked paths are unreadable",
}


def test_leaky_mechanism_fails_the_isolation_checks(leaky: LeakyTarget) -> None:
    rows = run_suite(leaky, groups=["Isolation"])
    got = by_name(rows)
    assert len(rows) >= 20
    assert not [r for r in rows if r.verdict == PASS], [r for r in rows if r.verdict == PASS]
    for r in rows:
        if r.check.startswith("confinement:"):
            assert r.verdict == SKIP and "no control-plane confinement" in r.detail
        elif r.check in CONTROL_NEEDS_A_SANDBOX and r.verdict == ERROR:
            assert r.control == "failed"
        else:
            assert r.verdict == FAIL, r
            assert r.control == "ok" and r.breach == "succeeded"
    for name in (
        "fs: read a sibling's storage by its host path",
        "fs: '..' out of storage to a sibling",
        "fs: /proc/self/cwd",
        "env: credential-named host variable absent inside",
        "net: connect to a host loopback server",
        "proc: signal a host process",
        "proc: ptrace a host process",
        "fs: mount",
    ):
        assert got[name].verdict == FAIL, got[name]


def test_leaky_mechanism_fails_limits_it_does_not_enforce(leaky: LeakyTarget) -> None:
    rows = run_suite(leaky, groups=["ResourceLimits"], name_contains="memory")
    assert [(r.check, r.verdict, r.breach) for r in rows] == [("memory", FAIL, "succeeded")]


def test_mechanism_that_dies_at_start_is_error_not_pass(tmp_path: Any) -> None:
    t = DyingTarget(workdir=str(tmp_path / "dying"))
    try:
        rows = run_suite(t)
    finally:
        t.close()
    assert len(rows) >= 30
    for r in rows:
        if r.check.startswith("confinement:"):
            assert r.verdict == SKIP
            continue
        assert r.verdict == ERROR, r
        assert r.breach == "not run", r
        if r.check in CONTROL_OUTSIDE_THE_MECHANISM:
            assert r.control == "ok", r
        else:
            assert r.control == "failed", r  # and the breach was never attempted after a failed control
