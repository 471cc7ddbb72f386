"""The ``Mechanism`` protocol and the result types every platform returns.

A mechanism turns a ``Plan`` into a running sandbox with one OS's primitives.  The library functions
in ``sandbox_shim.api`` drive a mechanism; the CLI drives the library.  Results are facts:
``Completion`` (it ran and ended, whatever the status) is a value, while "it never ran"
(``CouldNotRun``) and "a limit stopped it" (``LimitExceeded``) are exceptions (``errors.py``).
"""

from __future__ import annotations

from .values import Value

TYPE_CHECKING = False  # typing is not imported at run time: every lifecycle verb imports this module
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any, Protocol, runtime_checkable

    from .bundle import Spec
    from .capability import Capability
    from .control import Facts
    from .resources import Limits
    from .state import StateStore
else:
    # ``Mechanism`` below becomes a typing.Protocol on first use (``__getattr__`` at the end)
    Protocol = object

    def runtime_checkable(cls: type) -> type:
        return cls


# The result types are ``values.Value`` classes: a dataclass's shape without importing dataclasses.
_NEW: Any = object()  # a mutable default: a fresh dict or list per instance


class Sandbox(Value):
    """A sandbox as the library sees it.

    Attributes:
        id: the container id (OCI ``id``).
        bundle: absolute, canonical bundle directory.
        owner_ref: opaque reference of the caller's (e.g. a tenant id); stored, never interpreted.
        context: free-form caller data kept with the sandbox (JSON-serialisable).
        private: mechanism-private state (pids, cgroup paths, ...), JSON-serialisable.
    """

    __match_args__ = ("id", "bundle", "owner_ref", "context", "private")

    def __init__(
        self,
        id: str,
        bundle: str,
        owner_ref: str | None = None,
        context: dict[str, Any] = _NEW,
        private: dict[str, Any] = _NEW,
    ) -> None:
        self.id = id
        self.bundle = bundle
        self.owner_ref = owner_ref
        self.context = {} if context is _NEW else context
        self.private = {} if private is _NEW else private


class Usage(Value):
    """Resource usage of a sandbox, from its cgroup (or psutil where no cgroup serves).

    Attributes:
        memory_bytes: current memory use, bytes.
        memory_peak_bytes: peak memory use, bytes.
        cpu_user_us / cpu_system_us: CPU time, microseconds.
        pids: number of processes now.
        io_read_bytes / io_write_bytes: block I/O, bytes, where the host gives it (else None).
    """

    __match_args__ = (
        "memory_bytes",
        "memory_peak_bytes",
        "cpu_user_us",
        "cpu_system_us",
        "pids",
        "io_read_bytes",
        "io_write_bytes",
    )

    def __init__(
        self,
        memory_bytes: int | None = None,
        memory_peak_bytes: int | None = None,
        cpu_user_us: int | None = None,
        cpu_system_us: int | None = None,
        pids: int | None = None,
        io_read_bytes: int | None = None,
        io_write_bytes: int | None = None,
    ) -> None:
        self.memory_bytes = memory_bytes
        self.memory_peak_bytes = memory_peak_bytes
        self.cpu_user_us = cpu_user_us
        self.cpu_system_us = cpu_system_us
        self.pids = pids
        self.io_read_bytes = io_read_bytes
        self.io_write_bytes = io_write_bytes


class Completion(Value):
    """A program that ran and ended.

    Attributes:
        exit_status: its exit status (0-255), or None if a signal ended it.
        signal: the signal number that ended it, or None.
        stdout / stderr: what it wrote, bytes.
        duration: wall-clock seconds from start to end.
        usage: resource usage at the end, where measured.
        stdout_dropped / stderr_dropped: bytes written past the capture limit and not kept (0: the
            stream is whole; see ``capture.MAX_OUTPUT``).
    """

    __match_args__ = (
        "exit_status",
        "signal",
        "stdout",
        "stderr",
        "duration",
        "usage",
        "stdout_dropped",
        "stderr_dropped",
    )

    def __init__(
        self,
        exit_status: int | None,
        signal: int | None,
        stdout: bytes,
        stderr: bytes,
        duration: float,
        usage: Usage | None = None,
        stdout_dropped: int = 0,
        stderr_dropped: int = 0,
    ) -> None:
        self.exit_status = exit_status
        self.signal = signal
        self.stdout = stdout
        self.stderr = stderr
        self.duration = duration
        self.usage = usage
        self.stdout_dropped = stdout_dropped
        self.stderr_dropped = stderr_dropped

    @property
    def truncated(self) -> bool:
        """True when either stream was cut at the capture limit."""
        return bool(self.stdout_dropped or self.stderr_dropped)

    @property
    def shell_status(self) -> int:
        """The status a shell would show: the exit status, or 128 + signal."""
        return self.exit_status if self.exit_status is not None else 128 + (self.signal or 0)


class Status(Value):
    """OCI state of a sandbox (runtime-spec "State").

    Attributes:
        id, status (creating|created|running|paused|stopped), pid (0 when none), bundle, annotations.
        exit_status: the process's exit status once stopped (128+n for a signal), else None.
        source: "state" (from the state store) or "observed" (found in the kernel only, ``reconcile``).
    """

    __match_args__ = (
        "id",
        "status",
        "pid",
        "bundle",
        "annotations",
        "oci_version",
        "exit_status",
        "created",
        "source",
        "pids",
    )

    def __init__(
        self,
        id: str,
        status: str,
        pid: int,
        bundle: str,
        annotations: dict[str, str],
        oci_version: str = "1.0.2",
        exit_status: int | None = None,
        created: str | None = None,
        source: str = "state",
        pids: list[int] = _NEW,
    ) -> None:
        self.id = id
        self.status = status
        self.pid = pid
        self.bundle = bundle
        self.annotations = annotations
        self.oci_version = oci_version
        self.exit_status = exit_status
        self.created = created
        self.source = source
        self.pids = [] if pids is _NEW else pids

    def to_oci(self) -> dict[str, Any]:
        """The OCI state JSON (``ociVersion, id, status, pid, bundle, annotations``)."""
        d: dict[str, Any] = {
            "ociVersion": self.oci_version,
            "id": self.id,
            "status": self.status,
            "pid": self.pid,
            "bundle": self.bundle,
            "annotations": self.annotations,
        }
        if self.created:
            d["created"] = self.created
        return d


class Identity(Value):
    """The processes a provisioned sandbox is known by: what ``Mechanism.provision`` returns and the
    library records (``state.Record``), so no key of ``Sandbox.private`` is read outside the mechanism.

    Attributes:
        pid: the container process (``state.pid``).
        pid_start: its start time where the host has one (Linux: proc(5) field 22, in ticks; macOS:
            the monitor's, in seconds), else None.
        init_pid: the process the hooks' state names (the same as ``pid`` unless the platform holds
            the workload behind another process).
        init_start: its start time, or None.
    """

    __match_args__ = ("pid", "pid_start", "init_pid", "init_start")

    def __init__(
        self, pid: int, pid_start: float | None = None, init_pid: int = 0, init_start: float | None = None
    ) -> None:
        self.pid = pid
        self.pid_start = pid_start
        self.init_pid = init_pid
        self.init_start = init_start


#: a sandbox's record of its host objects (``ROOT/.cgroups/ID``, JSON): what the mechanism wrote
#: through the ``on_cgroup`` hook, read back by the same mechanism (``lost_pids``)
HostRecord = dict[str, object]


class LaunchPlan(Protocol):
    """What the library reads of any platform's plan (``plan.Plan``, ``DarwinPlan``, ``JobPlan``).

    ``required``: capability names the plan needs, checked before ``provision`` and again at
    ``start``.  ``hooks``: the OCI hooks by phase (empty where the platform runs none);
    ``wall_clock``: seconds, or None; ``network``: the sandbox's network mode (``none``, ``host``,
    ``isolated``), or None where the platform has no such setting.  The library records the last three
    with the sandbox.
    """

    @property
    def required(self) -> Sequence[str]: ...

    @property
    def hooks(self) -> dict[str, list[dict[str, Any]]]: ...

    @property
    def wall_clock(self) -> float | None: ...

    @property
    def network(self) -> str | None: ...


class CgroupControl(Protocol):
    """A sandbox's control group as the library drives it (pause, update, ps, stats), where the
    platform has one (``Mechanism.cgroup`` returns None otherwise).  Linux: ``platforms/linux/cgroups``
    managers.  Errors: ``LaunchFailed`` naming the file the kernel refused."""

    def dirs(self) -> list[str]: ...

    def apply(self, limits: Limits) -> None: ...

    def pids(self) -> list[int]: ...

    def freeze(self, frozen: bool) -> None: ...

    def usage(self) -> Usage: ...

    def facts(self) -> Facts: ...

    def events_fd(self) -> int | None:
        """A new fd that select(2) reports as an exceptional condition whenever the cgroup's event
        counters change (v2 ``memory.events``: "a value change in this file generates a file modified
        event", cgroup-v2.rst); the caller closes it.  None where the platform signals nothing."""
        ...


@runtime_checkable
class Mechanism(Protocol):
    """What a platform must provide: every member the library (``api``, ``control``, ``execution``,
    ``spawn``, ``reconcile``, ``addresses``) calls.  ``platforms.select`` checks the three mechanisms
    against it for mypy; a mechanism missing a member does not type-check.

    Every method raises ``ShimError`` subclasses only (``errors.py``).
    """

    name: str
    #: the state root its sandboxes' records live under (``state.resolve_root``); set by ``select``
    root: str | None
    #: runc's ``--systemd-cgroup`` (Linux: systemd makes the scope); other platforms ignore it
    systemd_cgroup: bool

    def capabilities(self) -> list[Capability]:
        """Probe reports for everything this mechanism could enforce on this host."""
        ...

    def make_plan(self, spec: Spec, sandbox_id: str) -> LaunchPlan:
        """The platform's plan from the loaded bundle; refusal happens here (``BundleInvalid``,
        ``CapabilityUnavailable``), before anything is made."""
        ...

    def require(self, names: list[str]) -> None:
        """Raise ``CapabilityUnavailable`` for each of ``names`` this host does not provide."""
        ...

    def provision(self, sandbox: Sandbox, plan: LaunchPlan) -> Identity:
        """OCI create: resources made, process prepared and held before user code runs.  ``plan`` is
        what this mechanism's ``make_plan`` returned (another platform's plan: ``LaunchFailed``).
        Returns the processes the sandbox is known by from now on (recorded by the library, and given
        back in ``sandbox.private`` under their names on every later call)."""
        ...

    def start(self, sandbox: Sandbox) -> None:
        """OCI start: release the held process."""
        ...

    def signal(self, sandbox: Sandbox, signum: int, all_processes: bool = False) -> None:
        """Deliver ``signum`` to the sandbox's process (or every process with ``all_processes``)."""
        ...

    def status(self, sandbox: Sandbox) -> Status:
        """The observed OCI state."""
        ...

    def alive(self, sandbox: Sandbox) -> bool:
        """True while the container process (same pid and start time) runs."""
        ...

    def paused(self, sandbox: Sandbox) -> bool:
        """True while the sandbox is frozen."""
        ...

    def exit_status(self, sandbox: Sandbox) -> int | None:
        """The container process's exit status (128 + n for a signal) once known, else None."""
        ...

    def termination(self, sandbox: Sandbox) -> tuple[int | None, int | None] | None:
        """``(exit status, signal)`` from the wait(2) status where the mechanism keeps it, else None."""
        ...

    def workload_pid(self, sandbox: Sandbox) -> int:
        """The container process's pid (``state.pid``), 0 once it is gone."""
        ...

    def usage(self, sandbox: Sandbox) -> Usage:
        """Resource usage now."""
        ...

    def cgroup(self, sandbox: Sandbox) -> CgroupControl | None:
        """The sandbox's control group, or None where the platform has none."""
        ...

    def destroy(self, sandbox: Sandbox) -> None:
        """OCI delete: kill what is left and remove every resource made.  Never capability-gated."""
        ...

    def remove_residue(self, store: StateStore, sandbox_id: str) -> list[str]:
        """Remove what the sandbox left outside its state dir, each recorded before it was made (Linux:
        cgroups and their parents, network links), even with the state gone.  Returns problems, one
        line each; the record is then kept for another try."""
        ...

    def observed_cgroups(self, root: str) -> dict[str, HostRecord]:
        """The host-object records (as ``ROOT/.cgroups/ID`` holds them) of the sandboxes the host itself
        shows for the state root ``root``, by id, whatever the store still has (``reconcile``; Linux:
        the cgroup tree under the root's tagged parent); ``{}`` where the platform leaves none."""
        ...

    def lost_pids(self, info: HostRecord) -> list[int] | None:
        """Live pids of the host object recorded in ``info`` (``ROOT/.cgroups/ID``) for a sandbox whose
        state is gone, or None when that object no longer exists (``reconcile``)."""
        ...


if not TYPE_CHECKING:
    _MECHANISM_BODY = Mechanism  # the class statement above, as a plain class
    del Mechanism, Protocol, runtime_checkable

    def __getattr__(name: str) -> object:
        """``Mechanism``, made a ``runtime_checkable`` ``typing.Protocol`` on first use (PEP 562):
        importing ``typing`` costs each lifecycle verb ~2 ms, and none of them needs the protocol."""
        if name != "Mechanism":
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        import types
        import typing

        body = {k: v for k, v in vars(_MECHANISM_BODY).items() if k not in ("__dict__", "__weakref__")}
        proto = types.new_class("Mechanism", (typing.Protocol,), exec_body=lambda ns: ns.update(body))
        globals()["Mechanism"] = typing.runtime_checkable(proto)
        return globals()["Mechanism"]
