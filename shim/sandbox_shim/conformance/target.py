"""The conformance target: the small interface the suite drives, and its implementation over the library
API (``sandbox_shim.api``).

A third party makes its runtime testable by subclassing ``ConformanceTarget`` and implementing:

* ``bundle(name, overrides)`` → ``BundleHandle``: a fresh sandbox bundle whose storage directory the suite
  can read and write from the host (``storage``) and whose probe sees it at ``storage_inside``.
* ``run_probe(overrides, script, bundle=None, argv=None, timeout=30)`` → ``ProbeResult``: run ``sh -c
  script`` (or ``argv``) inside a new sandbox to its end and report what happened.  "Never ran",
  "a limit stopped it" and "it ran and ended" are the ``outcome`` field, never guessed from a status.
* ``run_control(overrides, script, ...)``: a control that needs a permission the profile under test
  refuses (capabilities, no seccomp filter), run with the same rootfs and tools outside that profile;
  its default goes through ``run_probe`` (see the method for what a control must mean).
* the lifecycle hooks ``create``, ``start``, ``state``, ``kill``, ``wait``, ``delete``, ``list_running`` and
  ``reopen`` (a fresh instance on the same state, as after a host restart).  They raise
  ``sandbox_shim.errors`` classes: ``InvalidState`` (verb not allowed now), ``SandboxExists``,
  ``SandboxNotFound``.

``overrides`` are OCI runtime-spec config.json fragments (config.md, config-linux.md) deep-merged into the
target's default tenant config (dicts merge, lists are replaced).  The suite uses only: ``process.args``,
``process.env``, ``process.capabilities``, ``process.rlimits``, ``root.readonly``, ``linux.seccomp``,
``linux.resources``, ``linux.namespaces``, ``linux.maskedPaths`` and the annotations ``sandbox-shim.network``,
``sandbox-shim.allow-nested-userns``, ``sandbox-shim.cpu-time-seconds``, ``sandbox-shim.wall-clock-seconds``.
A mechanism with another configuration language translates these few keys.

``api_target.ApiTarget`` implements it for any mechanism the library API drives (default:
``api.default_mechanism``, on Linux bwrap + cgroups), with bundles filled from
the host's busybox (``conformance.rootfs``).
"""

from __future__ import annotations

import copy
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: ``ProbeResult.outcome`` values
COMPLETED, COULD_NOT_RUN, LIMIT_EXCEEDED = "completed", "could_not_run", "limit_exceeded"


class ToolMissing(Exception):
    """A tool a check needs is absent on this host; the check is skipped with this reason."""


@dataclass
class ProbeResult:
    """What one probe run inside a sandbox did.

    Attributes:
        exit_status: 0-255, or None when a signal ended it or it never ran.
        stdout / stderr: what it wrote, decoded (UTF-8, errors replaced).
        outcome: ``completed`` | ``could_not_run`` | ``limit_exceeded`` (ARCHITECTURE §5).
        signal: the signal that ended it, or None.
        limit_kind: for ``limit_exceeded``: ``memory`` | ``pids`` | ``cpu`` | ``wall_clock`` | ``output``.
        reason: for ``could_not_run``: ``not_found`` | ``permission_denied`` | ``exec_failed``; or the
            refusal's error class name when the sandbox was refused before it ran (e.g. ``BundleInvalid``).
        duration: wall-clock seconds.
    """

    exit_status: int | None
    stdout: str
    stderr: str
    outcome: str = COMPLETED
    signal: int | None = None
    limit_kind: str | None = None
    reason: str | None = None
    duration: float = 0.0

    @property
    def ok(self) -> bool:
        """It ran and exited 0."""
        return self.outcome == COMPLETED and self.exit_status == 0

    def brief(self, limit: int = 160) -> str:
        """One line for reports: outcome, status and the end of stderr."""
        what = {
            COMPLETED: f"exit {self.exit_status}" if self.signal is None else f"signal {self.signal}",
            COULD_NOT_RUN: f"could not run ({self.reason})",
            LIMIT_EXCEEDED: f"limit exceeded ({self.limit_kind})",
        }.get(self.outcome, self.outcome)
        err = " ".join(self.stderr.split())[-limit:]
        return f"{what}" + (f": {err}" if err else "")


@dataclass
class BundleHandle:
    """A sandbox bundle made by a target.

    Attributes:
        name: unique name (also used as the sandbox id).
        path: the bundle directory on the host.
        storage: its storage directory on the host (the suite plants files here).
        storage_inside: where the probe sees that storage (``/storage`` for tenant bundles).
        overrides: the config overrides it was made with.
    """

    name: str
    path: str
    storage: str
    storage_inside: str
    overrides: dict[str, Any]


def merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """Deep-merge ``over`` into a copy of ``base``: dicts merge, everything else (lists too) replaces."""
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), dict):
            out[k] = merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


class ConformanceTarget:
    """The interface the suite drives.  Subclass it for a mechanism; see the module docstring.

    Attributes:
        name: shown in reports.
        workdir: a private host directory for bundles and host-side fixtures (made by ``__init__``).
    """

    name = "target"

    def __init__(self, workdir: str | None = None) -> None:
        # /var/tmp, not /tmp: a sandbox's own /tmp is a tmpfs, which would hide host paths under /tmp for a
        # reason other than the isolation under test.
        base = "/var/tmp" if os.path.isdir("/var/tmp") else None
        self.workdir = workdir or tempfile.mkdtemp(prefix="sandbox-shim-conformance-", dir=base)
        self.bundles_root = os.path.join(self.workdir, "bundles")
        os.makedirs(self.bundles_root, exist_ok=True)

    def new_id(self, prefix: str = "cf") -> str:
        """A fresh sandbox id (letters, digits, ``-``)."""
        return f"{prefix}-{uuid.uuid4().hex[:10]}"

    # -- probes -------------------------------------------------------------------------------------
    def bundle(self, name: str | None = None, overrides: Mapping[str, Any] | None = None) -> BundleHandle:
        """Make a fresh bundle under ``bundles_root`` (siblings share that parent)."""
        raise NotImplementedError

    def run_probe(
        self,
        overrides: Mapping[str, Any] | None,
        script: str,
        *,
        bundle: BundleHandle | None = None,
        argv: Sequence[str] | None = None,
        timeout: float = 30.0,
    ) -> ProbeResult:
        """Run ``sh -c script`` (or ``argv``) in a new sandbox made from ``bundle`` (or a fresh one with
        ``overrides``) to its end; remove the sandbox (not the bundle).  Never raises for what the
        probe did; raises ``ToolMissing`` when the host cannot run sandboxes at all."""
        raise NotImplementedError

    def run_control(
        self,
        overrides: Mapping[str, Any] | None,
        script: str,
        *,
        bundle: BundleHandle | None = None,
        argv: Sequence[str] | None = None,
        timeout: float = 30.0,
    ) -> ProbeResult:
        """Run a CONTROL that needs a permission the profile under test refuses (mount, raw sockets,
        ptrace, a capability such as ``CAP_SYS_ADMIN``): the same probe — same ``script``/``argv``, same
        tools, the same rootfs and storage as ``bundle`` (or a fresh bundle made with ``overrides``) —
        where that permission IS granted, so that a stopped breach is shown to be the profile's doing and
        not a broken probe.

        ``overrides`` (an OCI fragment, as for ``run_probe``) names the permission: the capabilities in
        ``process.capabilities`` must be held, a permissive ``linux.seccomp`` means no syscall filter, and
        ``linux.namespaces`` without ``network`` means the host's network.  What the control does must
        stay off the host: it runs in a private mount namespace at least (e.g. bare ``bwrap`` with
        ``--cap-add``, or ``unshare -m``), never through the profile under test.

        This default runs ``run_probe(overrides, ...)``: right for a target whose profile grants these
        permissions when a bundle asks.  A target whose profile refuses them (as a tenant profile should)
        overrides this method; otherwise the control fails and the check is ERROR, never pass.  Same
        result contract as ``run_probe``; raises ``ToolMissing`` when the control cannot be run here.
        """
        return self.run_probe(overrides, script, bundle=bundle, argv=argv, timeout=timeout)

    def confine_probe(self, script: str, permit_path: str, timeout: float = 30.0) -> ProbeResult:
        """Run ``sh -c script`` under the control-plane confinement profile (optional).

        Raises:
            ToolMissing: the target has no confinement profile.
        """
        raise ToolMissing(f"{self.name} has no control-plane confinement profile")

    # -- lifecycle ----------------------------------------------------------------------------------
    def create(self, sandbox_id: str, bundle: BundleHandle) -> None:
        """OCI create; the process is held before user code."""
        raise NotImplementedError

    def start(self, sandbox_id: str) -> None:
        raise NotImplementedError

    def state(self, sandbox_id: str) -> str:
        """The OCI status: ``created`` | ``running`` | ``paused`` | ``stopped``."""
        raise NotImplementedError

    def exit_status(self, sandbox_id: str) -> int | None:
        """The stopped sandbox's exit status (128+n for a signal), or None."""
        raise NotImplementedError

    def kill(self, sandbox_id: str, signum: int) -> None:
        raise NotImplementedError

    def wait(self, sandbox_id: str, timeout: float = 30.0) -> int | None:
        """Wait until stopped; its exit status, or None on timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.state(sandbox_id) == "stopped":
                return self.exit_status(sandbox_id)
            time.sleep(0.02)
        return None

    def output(self, sandbox_id: str) -> str:
        """What the sandbox's process wrote to stdout so far."""
        raise NotImplementedError

    def delete(self, sandbox_id: str, force: bool = False) -> None:
        raise NotImplementedError

    def list_running(self) -> dict[str, str]:
        """id → observed status, for every sandbox the mechanism knows (reconcile after a restart)."""
        raise NotImplementedError

    def reopen(self) -> ConformanceTarget:
        """A new instance on the same state, as a host process that restarted would have."""
        raise NotImplementedError

    def host_pid(self, sandbox_id: str) -> int:
        """Host pid of the sandbox's first user process (0 if none)."""
        raise NotImplementedError

    def close(self) -> None:
        """Remove everything the target made."""
        shutil.rmtree(self.workdir, ignore_errors=True)
