"""The ``Mechanism`` protocol and the result types every platform returns.

A mechanism turns a ``Plan`` into a running sandbox with one OS's primitives.  The library functions
in ``sandbox_shim.api`` drive a mechanism; the CLI drives the library.  Results are facts:
``Completion`` (it ran and ended, whatever the status) is a value, while "it never ran"
(``CouldNotRun``) and "a limit stopped it" (``LimitExceeded``) are exceptions (``errors.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from .capability import Capability
    from .plan import Plan


@dataclass
class Sandbox:
    """A sandbox as the library sees it.

    Attributes:
        id: the container id (OCI ``id``).
        bundle: absolute, canonical bundle directory.
        owner_ref: opaque reference of the caller's (e.g. a tenant id); stored, never interpreted.
        context: free-form caller data kept with the sandbox (JSON-serialisable).
        private: mechanism-private state (pids, cgroup paths, ...), JSON-serialisable.
    """

    id: str
    bundle: str
    owner_ref: str | None = None
    context: dict[str, Any] = field(default_factory=dict)
    private: dict[str, Any] = field(default_factory=dict)


@dataclass
class Usage:
    """Resource usage of a sandbox, from its cgroup (or psutil where no cgroup serves).

    Attributes:
        memory_bytes: current memory use, bytes.
        memory_peak_bytes: peak memory use, bytes.
        cpu_user_us / cpu_system_us: CPU time, microseconds.
        pids: number of processes now.
        io_read_bytes / io_write_bytes: block I/O, bytes, where the host gives it (else None).
    """

    memory_bytes: int | None = None
    memory_peak_bytes: int | None = None
    cpu_user_us: int | None = None
    cpu_system_us: int | None = None
    pids: int | None = None
    io_read_bytes: int | None = None
    io_write_bytes: int | None = None


@dataclass
class Completion:
    """A program that ran and ended.

    Attributes:
        exit_status: its exit status (0-255), or None if a signal ended it.
        signal: the signal number that ended it, or None.
        stdout / stderr: what it wrote, bytes.
        duration: wall-clock seconds from start to end.
        usage: resource usage at the end, where measured.
    """

    exit_status: int | None
    signal: int | None
    stdout: bytes
    stderr: bytes
    duration: float
    usage: Usage | None = None

    @property
    def shell_status(self) -> int:
        """The status a shell would show: the exit status, or 128 + signal."""
        return self.exit_status if self.exit_status is not None else 128 + (self.signal or 0)


@dataclass
class Status:
    """OCI state of a sandbox (runtime-spec "State").

    Attributes:
        id, status (creating|created|running|paused|stopped), pid (0 when none), bundle, annotations.
        exit_status: the process's exit status once stopped (128+n for a signal), else None.
    """

    id: str
    status: str
    pid: int
    bundle: str
    annotations: dict[str, str]
    oci_version: str = "1.0.2"
    exit_status: int | None = None
    created: str | None = None
    source: str = "state"  # "state": from the state store; "observed": found in the kernel only (reconcile)
    pids: list[int] = field(default_factory=list)

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


@runtime_checkable
class Mechanism(Protocol):
    """What a platform must provide.  ``address`` is optional (see ``sandbox_shim.addresses``).

    Every method raises ``ShimError`` subclasses only (``errors.py``).
    """

    name: str

    def capabilities(self) -> list[Capability]:
        """Probe reports for everything this mechanism could enforce on this host."""
        ...

    def provision(self, sandbox: Sandbox, plan: Plan) -> None:
        """OCI create: resources made, process prepared and held before user code runs."""
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

    def destroy(self, sandbox: Sandbox) -> None:
        """OCI delete: kill what is left and remove every resource made.  Never capability-gated."""
        ...
