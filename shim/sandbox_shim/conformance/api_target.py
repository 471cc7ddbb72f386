"""``ApiTarget``: the conformance target for a mechanism the library API drives (``sandbox_shim.api``).

The default mechanism is this platform's (``api.default_mechanism``: on Linux bwrap + cgroups).  Bundles
are made from a rootfs filled once from the host's static busybox (``conformance.rootfs``);
probes run as the bundle's
own process through ``sandbox_shim.execution.run_bundle`` (provision, start, wait, collect, destroy), whose
``Completion`` / ``CouldNotRun`` / ``LimitExceeded`` become ``ProbeResult.outcome``.  Controls that need
what the tenant profile refuses (``run_control``) run the same rootfs under bare bwrap instead.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal as _signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .. import posix
from .target import (
    COMPLETED,
    COULD_NOT_RUN,
    LIMIT_EXCEEDED,
    BundleHandle,
    ConformanceTarget,
    ProbeResult,
    ToolMissing,
    merge,
)

if TYPE_CHECKING:
    from ..mechanism import Mechanism


def _run_outside(argv: list[str], timeout: float, **kw: object) -> ProbeResult:
    """Run ``argv`` (a control or confinement probe, not through the mechanism) and classify it:
    completed (exit status or signal) or, past ``timeout`` seconds, LimitExceeded(wall_clock)."""
    t0 = time.monotonic()
    try:
        p = subprocess.run(argv, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL, **kw)  # type: ignore[call-overload]
    except subprocess.TimeoutExpired as e:
        return ProbeResult(
            None,
            _text(e.stdout or b""),
            _text(e.stderr or b""),
            LIMIT_EXCEEDED,
            limit_kind="wall_clock",
            duration=timeout,
        )
    code = p.returncode
    return ProbeResult(
        code if code >= 0 else None,
        _text(p.stdout),
        _text(p.stderr),
        COMPLETED,
        signal=-code if code < 0 else None,
        duration=time.monotonic() - t0,
    )


class ApiTarget(ConformanceTarget):
    """The target for a mechanism driven by ``sandbox_shim.api`` (default: this platform's).

    Override ``make_mechanism(root)`` to test another mechanism that follows the library's contract.
    """

    name = "sandbox-shim"

    def __init__(self, workdir: str | None = None, root: str | None = None) -> None:
        super().__init__(workdir)
        self.root = root or os.path.join(self.workdir, "state")
        self.template = os.path.join(self.workdir, "rootfs-template")
        self._mech: Mechanism | None = None
        self._out: dict[str, str] = {}
        self._pids: set[int] = set()

    def make_mechanism(self, root: str) -> Mechanism:
        """The mechanism under test, keeping state under ``root``."""
        from .. import api

        return api.default_mechanism(root)

    @property
    def mechanism(self) -> Mechanism:
        """The mechanism under test (made on first use)."""
        if self._mech is None:
            self._mech = self.make_mechanism(self.root)
        return self._mech

    def _rootfs(self) -> str:
        if not os.path.isdir(self.template):
            from .rootfs import NoBusybox, fill

            tmp = self.template + ".tmp"
            try:
                fill(tmp)  # from the host's static busybox: no source checkout needed
            except (NoBusybox, OSError, subprocess.SubprocessError) as e:
                raise ToolMissing(f"cannot build the probe rootfs: {e}") from e
            os.rename(tmp, self.template)
        return self.template

    def bundle(self, name: str | None = None, overrides: Mapping[str, Any] | None = None) -> BundleHandle:
        from ..template import default_config

        name = name or self.new_id("b")
        path = os.path.join(self.bundles_root, name)
        os.makedirs(path)
        shutil.copytree(self._rootfs(), os.path.join(path, "rootfs"), symlinks=True)
        os.mkdir(os.path.join(path, "storage"))
        cfg = merge(default_config(), overrides or {})
        with open(os.path.join(path, "config.json"), "w", encoding="utf-8") as fh:
            json.dump(cfg, fh, indent=2)
        return BundleHandle(name, path, os.path.join(path, "storage"), "/storage", dict(overrides or {}))

    def set_args(self, bundle: BundleHandle, argv: Sequence[str]) -> None:
        """Rewrite ``process.args`` of ``bundle``."""
        cfg_path = os.path.join(bundle.path, "config.json")
        with open(cfg_path, encoding="utf-8") as fh:
            cfg = json.load(fh)
        cfg["process"]["args"] = list(argv)
        with open(cfg_path, "w", encoding="utf-8") as fh:
            json.dump(cfg, fh, indent=2)

    def run_probe(
        self,
        overrides: Mapping[str, Any] | None,
        script: str,
        *,
        bundle: BundleHandle | None = None,
        argv: Sequence[str] | None = None,
        timeout: float = 30.0,
    ) -> ProbeResult:
        from ..errors import CouldNotRun, LimitExceeded, ShimError
        from ..execution import run_bundle

        b = bundle or self.bundle(overrides=overrides)
        self.set_args(b, list(argv) if argv is not None else ["sh", "-c", script])
        rlimits = _rlimits(os.path.join(b.path, "config.json"))
        t0 = time.monotonic()
        try:
            done = run_bundle(self.mechanism, self.new_id("p"), b.path, timeout=timeout)
        except CouldNotRun as e:
            return ProbeResult(
                None, "", e.line(), COULD_NOT_RUN, reason=e.reason, duration=time.monotonic() - t0
            )
        except LimitExceeded as e:
            c = e.completion
            return ProbeResult(
                None,
                _text(c.stdout if c else b""),
                _text(c.stderr if c else b""),
                LIMIT_EXCEEDED,
                signal=c.signal if c else None,
                limit_kind=e.kind_of_limit,
                duration=time.monotonic() - t0,
            )
        except ShimError as e:
            return ProbeResult(
                None, "", e.line(), COULD_NOT_RUN, reason=type(e).__name__, duration=time.monotonic() - t0
            )
        res = ProbeResult(
            done.exit_status,
            _text(done.stdout),
            _text(done.stderr),
            COMPLETED,
            signal=done.signal,
            duration=done.duration,
        )
        fsize = rlimits.get("RLIMIT_FSIZE")
        at_limit = fsize is not None and (len(done.stdout) >= fsize or len(done.stderr) >= fsize)
        xfsz = sys.platform != "win32" and done.signal == _signal.SIGXFSZ
        if fsize is not None and (xfsz or (at_limit and done.exit_status != 0)):
            # RLIMIT_FSIZE (setrlimit(2)) stopped a write past the output limit (stdout is a file here):
            # SIGXFSZ, or, for the sandbox's pid 1 (which the kernel does not kill with a signal it has
            # no handler for: pid_namespaces(7)), EFBIG once the file reached the limit.
            res.outcome, res.limit_kind = LIMIT_EXCEEDED, "output"
        return res

    def run_control(
        self,
        overrides: Mapping[str, Any] | None,
        script: str,
        *,
        bundle: BundleHandle | None = None,
        argv: Sequence[str] | None = None,
        timeout: float = 30.0,
    ) -> ProbeResult:
        """The control outside the tenant profile (which refuses these permissions at validation): the
        bundle's own rootfs (read-only) and storage under bare bwrap(1) — no seccomp filter, no cgroup, each
        capability of ``overrides`` ``process.capabilities`` kept with ``--cap-add`` (bwrap runs as root,
        so in the host's user namespace: what ``open_by_handle_at(2)`` needs) — in new mount, pid, ipc and
        uts namespaces and a new network namespace (loopback up) unless ``overrides`` lists
        ``linux.namespaces`` without ``network``.  A mount, a raw socket or a trace done there stays there.

        Raises:
            ToolMissing: bwrap is missing, or this process is not root (``--cap-add`` needs it: bwrap(1)).
        """
        from ..capability import bare_control_argv

        need = "the control runs the probe under bare bwrap with --cap-add: needs bwrap and root"
        if posix.geteuid() != 0:
            raise ToolMissing(need)
        b = bundle or self.bundle(overrides=overrides)
        over = dict(overrides or {})
        sets = ((over.get("process") or {}).get("capabilities") or {}).values()
        caps = sorted({c for v in sets for c in v})
        nss = (over.get("linux") or {}).get("namespaces")
        share_net = nss is not None and not any(n.get("type") == "network" for n in nss)
        cmd = list(argv) if argv is not None else ["sh", "-c", script]
        args = bare_control_argv(
            os.path.join(b.path, "rootfs"), b.storage, b.storage_inside, caps, share_net, cmd
        )
        if args is None:
            raise ToolMissing(need)
        return _run_outside(args, timeout, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})

    def confine_probe(self, script: str, permit_path: str, timeout: float = 30.0) -> ProbeResult:
        from ..errors import CannotEnforce
        from ..hardening import confinement

        if shutil.which("busybox") is None:
            raise ToolMissing("busybox is not installed on the host")
        try:
            spec = confinement.confine(
                ("busybox", ["sh", "-c", script]), permit_path=permit_path, env={"PATH": "/usr/bin:/bin"}
            )
        except CannotEnforce as e:
            raise ToolMissing(f"confinement cannot be built here: {e.line()}") from e
        return _run_outside([spec["cmd"], *spec["args"]], timeout, env=spec["env"], cwd=spec["cd"])

    # -- lifecycle ----------------------------------------------------------------------------------
    def create(self, sandbox_id: str, bundle: BundleHandle) -> None:
        from .. import api
        from ..mechanism import Sandbox

        out = os.path.join(self.workdir, f"{sandbox_id}.out")
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            with open(os.devnull, "rb") as null:
                api.provision(self.mechanism, Sandbox(sandbox_id, bundle.path), stdio=(null.fileno(), fd, fd))
            self._out[sandbox_id] = out
            self._pids.add(api.status(self.mechanism, sandbox_id).pid)
        finally:
            os.close(fd)

    def start(self, sandbox_id: str) -> None:
        from .. import api

        api.start(self.mechanism, sandbox_id)

    def state(self, sandbox_id: str) -> str:
        from .. import api

        # not reaped first: while the exited container process is an unreaped zombie the status
        # reads (and records) its exit status; delete reaps it
        return api.status(self.mechanism, sandbox_id).status

    def exit_status(self, sandbox_id: str) -> int | None:
        from .. import api

        return api.status(self.mechanism, sandbox_id).exit_status

    def kill(self, sandbox_id: str, signum: int) -> None:
        from .. import api

        api.signal(self.mechanism, sandbox_id, signum)

    def output(self, sandbox_id: str) -> str:
        path = self._out.get(sandbox_id) or os.path.join(self.workdir, f"{sandbox_id}.out")
        try:
            with open(path, "rb") as fh:
                return _text(fh.read())
        except OSError:
            return ""

    def delete(self, sandbox_id: str, force: bool = False) -> None:
        from .. import api

        api.destroy(self.mechanism, sandbox_id, force=force)
        self._reap()

    def list_running(self) -> dict[str, str]:
        from .. import api

        self._reap()
        return {s.id: s.status for s in api.list_sandboxes(self.mechanism)}

    def reopen(self) -> ApiTarget:
        other = type(self).__new__(type(self))
        other.__dict__.update({k: v for k, v in self.__dict__.items() if k not in ("_mech", "_out")})
        other._mech, other._out, other._pids = None, {}, self._pids
        return other

    def host_pid(self, sandbox_id: str) -> int:
        from .. import api

        store = api.store_of(self.mechanism)
        sb = api.sandbox_of(store.read(sandbox_id), store)
        return int(self.mechanism.workload_pid(sb))

    def close(self) -> None:
        from .. import api

        with contextlib.suppress(Exception):
            for sid in list(self.list_running()):
                with contextlib.suppress(Exception):
                    api.destroy(self.mechanism, sid, force=True)
        self._reap()
        super().close()

    def _reap(self) -> None:
        """Collect exited container processes of sandboxes made here (we are their subreaper)."""
        if sys.platform == "win32":  # no subreaper there
            return
        for pid in list(self._pids):
            try:
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    self._pids.discard(pid)
            except ChildProcessError:
                self._pids.discard(pid)


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def _rlimits(config_path: str) -> dict[str, int]:
    """``{type: soft}`` of the bundle's ``process.rlimits``."""
    try:
        with open(config_path, encoding="utf-8") as fh:
            cfg = json.load(fh)
        listed = (cfg.get("process") or {}).get("rlimits") or []
        return {r.get("type", ""): int(r.get("soft", 0)) for r in listed}
    except (OSError, ValueError, TypeError, AttributeError):
        return {}
