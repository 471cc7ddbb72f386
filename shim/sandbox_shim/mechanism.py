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
    from collections.abc import Callable, Mapping, Sequence
    from typing import IO, Any, Protocol, runtime_checkable

    from .bundle import Spec
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
        context: free-form caller data kept with the sandbox (JSON-serialisable; stored, never read).
        private: JSON-serialisable state.  The library's own keys are ``dir`` (the state dir), the
            identity (``pid``, ``pid_start``, ``init_pid``, ``init_start``: ``Identity``) and
            ``plan``; every other key belongs to the mechanism that wrote it and is read only by it
            (what the library needs of a sandbox it asks through the protocol: ``cpu_limit``,
            ``network_address``, ``joined_namespaces``, ``workload_pid``, ...).  Typed
            ``dict[str, Any]``, the one ``Any`` left in these types: each platform reads back nested
            values of its own record (cgroup paths, job names), and ``dict[str, object]`` would make
            each of those ~60 reads a cast without checking anything more.
    """

    __match_args__ = ("id", "bundle", "owner_ref", "context", "private")

    def __init__(
        self,
        id: str,
        bundle: str,
        owner_ref: str | None = None,
        context: dict[str, object] = _NEW,
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

    def to_oci(self, with_exit_status: bool = False) -> dict[str, object]:
        """The OCI state JSON (``ociVersion, id, status, pid, bundle, annotations``, ``created`` when
        known); ``with_exit_status``: ``exitStatus`` too once it is known (``state`` shows it; ``list``
        keeps runc's shape without it)."""
        d: dict[str, object] = {
            "ociVersion": self.oci_version,
            "id": self.id,
            "status": self.status,
            "pid": self.pid,
            "bundle": self.bundle,
            "annotations": self.annotations,
        }
        if self.created:
            d["created"] = self.created
        if with_exit_status and self.exit_status is not None:
            d["exitStatus"] = self.exit_status
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
#: through ``ProvisionOptions.on_record``, read back by the same mechanism (``lost_pids``)
HostRecord = dict[str, object]


class ProvisionOptions(Value):
    """What OCI create is given besides the plan: the caller's side of ``Mechanism.provision``.

    Attributes:
        stdio: (stdin, stdout, stderr) fds the sandbox's process gets, or None: /dev/null on all three
            (a library caller's own stdio is never the tenant's).  A mechanism that cannot hand fds to
            its process refuses a tuple (``CapabilityUnavailable``); it never drops it.
        console_socket: unix socket path the pty master is sent to (``process.terminal``), or None.
        preserve_fds: how many fds from 3 up the workload inherits (runc ``--preserve-fds``).
        on_record: called with the sandbox's ``HostRecord`` before each host object outside the state
            dir is made and again once it is (the library writes ``ROOT/.cgroups/ID``, so ``delete
            --force`` finds it after a crash); each call hands the whole record, which replaces the
            last, and the library gives its keys no meaning (what they name, and any bookkeeping
            shared between sandboxes, such as Linux's parent cgroups, is the mechanism's); None:
            nothing is recorded (a mechanism driven directly).
    """

    __match_args__ = ("stdio", "console_socket", "preserve_fds", "on_record")

    def __init__(
        self,
        stdio: tuple[int, int, int] | None = None,
        console_socket: str | None = None,
        preserve_fds: int = 0,
        on_record: Callable[[HostRecord], None] | None = None,
    ) -> None:
        self.stdio = stdio
        self.console_socket = console_socket
        self.preserve_fds = preserve_fds
        self.on_record = on_record


class ExecSpec(Value):
    """A program to start inside a running sandbox (``Mechanism.exec``), as the library checked it.

    Attributes:
        argv: the program and its arguments (non-empty; ``argv[0]`` non-empty).
        env: variables set over the sandbox process's environment (``replace_env``: the whole
            environment, as an OCI ``process.env``); names already checked by the tenant profile.
        cwd: working directory inside the sandbox, or None (the sandbox process's).
        stdin / stdout / stderr: as for ``subprocess.Popen`` (None: inherit this process's).
        detach: return once the program runs and leave it to this process's nearest child
            subreaper (``runc exec -d``).
        user: ``uid`` / ``gid`` / ``additional_gids`` / ``umask`` asked (absent keys: the sandbox's).
        capabilities: names asked, at most the sandbox's (None: the sandbox's).
        console_socket: listening unix socket that receives the master of a new pty, or None.
    """

    __match_args__ = (
        "argv",
        "env",
        "replace_env",
        "cwd",
        "stdin",
        "stdout",
        "stderr",
        "detach",
        "user",
        "capabilities",
        "console_socket",
    )

    def __init__(
        self,
        argv: list[str],
        env: dict[str, str] | None = None,
        replace_env: bool = False,
        cwd: str | None = None,
        stdin: int | IO[bytes] | None = None,
        stdout: int | IO[bytes] | None = None,
        stderr: int | IO[bytes] | None = None,
        detach: bool = False,
        user: Mapping[str, object] | None = None,
        capabilities: list[str] | None = None,
        console_socket: str | None = None,
    ) -> None:
        self.argv = argv
        self.env = {} if env is None else env
        self.replace_env = replace_env
        self.cwd = cwd
        self.stdin = stdin
        self.stdout = stdout
        self.stderr = stderr
        self.detach = detach
        self.user = user
        self.capabilities = capabilities
        self.console_socket = console_socket


class HookEntry(Value):
    """How an OCI hook that runs in the sandbox (``createContainer``, ``startContainer``) enters it:
    what ``Mechanism.hook_entry`` returns and ``hooks.run`` applies.

    Attributes:
        prefix: argv put before the hook's ``path`` and ``args[1:]`` (non-empty; ``prefix[0]`` is the
            program run, an absolute host path).  Linux: ``nsenter -t PID`` with one option per
            namespace of the sandbox that differs from the runtime's, ending in ``--``.
        cwd: the working directory the hook starts in on the host, or None: the bundle's.
    """

    __match_args__ = ("prefix", "cwd")

    def __init__(self, prefix: list[str], cwd: str | None = None) -> None:
        self.prefix = prefix
        self.cwd = cwd


class Ended(Value):
    """How a program started by ``Mechanism.exec`` ended (``Started.result``).

    Attributes:
        exit_status: its exit status, or None if a signal ended it; signal: that signal, or None.
        cpu_user_us / cpu_system_us: its CPU time (getrusage(2)), microseconds, where reported.
        maxrss_bytes: its peak resident set, bytes, where reported.
    """

    __match_args__ = ("exit_status", "signal", "cpu_user_us", "cpu_system_us", "maxrss_bytes")

    def __init__(
        self,
        exit_status: int | None,
        signal: int | None,
        cpu_user_us: int | None = None,
        cpu_system_us: int | None = None,
        maxrss_bytes: int | None = None,
    ) -> None:
        self.exit_status = exit_status
        self.signal = signal
        self.cpu_user_us = cpu_user_us
        self.cpu_system_us = cpu_system_us
        self.maxrss_bytes = maxrss_bytes


class HelperProcess(Protocol):
    """The process a ``Started`` program's library side waits on (``subprocess.Popen`` has this
    shape; Linux forks its own, ``enter_client.ForkedHelper``).  ``returncode``: None while it runs,
    -N after death by signal N; ``wait(timeout)`` raises ``subprocess.TimeoutExpired``."""

    pid: int
    returncode: int | None
    stdin: IO[bytes] | None
    stdout: IO[bytes] | None
    stderr: IO[bytes] | None

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def kill(self) -> None: ...


class Started(Protocol):
    """A program ``Mechanism.exec`` started inside a sandbox: the handle the library drives.

    Attributes:
        pid: its host pid.  sandbox_id, argv: what was run.  started: ``time.monotonic()`` when it
        was released.  helper: the process this one waits on (its stdio pipes are the program's,
        as asked in ``ExecSpec``; it exits when the program does).
    """

    pid: int
    sandbox_id: str
    argv: list[str]
    started: float

    @property
    def helper(self) -> HelperProcess: ...

    def signal(self, signum: int) -> None:
        """Deliver ``signum`` to the program."""
        ...

    def kill(self) -> None:
        """SIGKILL the program and what it started."""
        ...

    def result(self) -> Ended | None:
        """How it ended (once ``helper`` has exited), or None when nothing was reported."""
        ...


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
    def hooks(self) -> Mapping[str, Sequence[Mapping[str, object]]]: ...

    @property
    def wall_clock(self) -> float | None: ...

    @property
    def network(self) -> str | None: ...


class CgroupControl(Protocol):
    """A sandbox's control group as the library drives it (pause, update, ps, stats), where the
    platform has one (``Mechanism.cgroup`` returns None otherwise).  Linux: ``platforms/linux/cgroups``
    managers.  Errors: ``LaunchFailed`` naming the file the kernel refused."""

    def apply(self, limits: Limits) -> None: ...

    def pids(self) -> list[int]: ...

    def freeze(self, frozen: bool) -> None: ...

    def usage(self) -> Usage: ...

    def facts(self) -> Facts: ...


class CounterWatch(Protocol):
    """A running sandbox's limit counters kept current while its program runs (``Mechanism.watch``):
    where the counters may vanish with the program (Linux: a systemd scope removed once empty), a limit
    that killed it is still reported.  Linux: ``platforms/linux/cgroups/watch.py``.

    Attributes:
        fd: an fd select(2) reports as an exceptional condition whenever the counters change (Linux
            v2: ``memory.events``), or None where nothing signals; owned by the watch (``close``).
    """

    fd: int | None

    def changed(self) -> None:
        """Read the counters again if they changed; called on every wake of the library's wait, the
        program's exit included.  Never raises (a counter source that is gone keeps the last reading)."""
        ...

    def final(self) -> Facts:
        """The counters now if they can still be read, else the last ones read while they could."""
        ...

    def close(self) -> None:
        """Close ``fd`` (idempotent)."""
        ...


@runtime_checkable
class Mechanism(Protocol):
    """What a platform must provide: every member the library (``api``, ``control``, ``execution``,
    ``spawn``, ``reconcile``, ``addresses``) calls, and nothing it does not: each platform's
    ``mechanism.py`` assigns its class to it for mypy (``_CONTRACT``), so a mechanism missing a member
    does not type-check (``tests/test_mechanism_contract.py`` checks both directions).

    Every method raises ``ShimError`` subclasses only (``errors.py``).
    """

    name: str
    #: the state root its sandboxes' records live under (``state.resolve_root``); set by ``select``
    root: str | None

    def make_plan(self, spec: Spec, sandbox_id: str) -> LaunchPlan:
        """The platform's plan from the loaded bundle; refusal happens here (``BundleInvalid``,
        ``CapabilityUnavailable``), before anything is made."""
        ...

    def require(self, names: list[str]) -> None:
        """Raise ``CapabilityUnavailable`` for each of ``names`` this host does not provide."""
        ...

    def preflight(self, spec: Spec) -> None:
        """``run``'s check before anything is made (``execution.run_bundle``/``run_detached``): raise
        ``CouldNotRun`` (``not_found`` | ``permission_denied``) when ``spec``'s ``args[0]`` cannot be
        executed where this platform looks it up; a platform whose ``make_plan`` already resolves it
        does nothing here."""
        ...

    def provision(self, sandbox: Sandbox, plan: LaunchPlan, options: ProvisionOptions) -> Identity:
        """OCI create: resources made, process prepared and held before user code runs.  ``plan`` is
        what this mechanism's ``make_plan`` returned (another platform's plan: ``LaunchFailed``);
        ``options`` the caller's side (stdio, console socket, preserved fds, the host-object record
        hook): an option the mechanism cannot honour is refused, never dropped.  Returns the
        processes the sandbox is known by from now on (recorded by the library, and given back in
        ``sandbox.private`` under their names on every later call)."""
        ...

    def exec(self, sandbox: Sandbox, spec: ExecSpec) -> Started:
        """Start ``spec`` inside the running sandbox (the library holds its lock and has checked it is
        running); return once the program has exec'd.

        Raises:
            CapabilityUnavailable: the platform cannot enter a running sandbox (macOS, Windows).
            CouldNotRun (never ran: ``not_found`` | ``permission_denied`` | ``exec_failed``);
            BundleInvalid (ids or capabilities beyond the sandbox's); InvalidState (its process is
            gone); LaunchFailed (could not join, or the console socket cannot be reached).
        """
        ...

    def cpu_limit(self, sandbox: Sandbox) -> int | None:
        """The sandbox process's CPU-time limit in seconds (RLIMIT_CPU's soft value), which also holds
        for exec'd programs, or None: how ``execution`` tells a ``cpu`` limit from a plain kill."""
        ...

    def network_address(self, sandbox: Sandbox) -> str | None:
        """``"ip:port"`` where the host reaches the sandbox's server (network mode ``isolated`` with a
        ``sandbox-shim.port``), else None, whatever its status (``addresses`` checks that)."""
        ...

    def joined_namespaces(self, sandbox: Sandbox) -> dict[str, str]:
        """The namespaces the sandbox joined by path, ``{type: "name:[inode]"}`` (``{}``: none, or a
        platform without namespaces); the library shows them as a state annotation."""
        ...

    def hook_entry(self, pid: int, phase: str) -> HookEntry:
        """How a ``phase`` hook (``createContainer``: the sandbox's namespaces but its mount
        namespace; ``startContainer``: all of them, with its root and cwd; runtime-spec config.md
        "createContainer Hooks", "startContainer Hooks") enters the sandbox whose first process is
        ``pid`` (the hooks' ``state.pid``).  Called for each such hook just before it runs.

        Raises:
            LaunchFailed: the sandbox cannot be entered (Linux: nsenter(1) missing); the hook counts as
            failed (``hooks.HookFailed``).  macOS and Windows have no namespaces to enter: their
            planners refuse such hooks with the JSON pointer before anything is made, and this
            raises if reached.
        """
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

    def same_process(self, pid: int, start: float | None) -> bool:
        """True while ``pid`` runs (not a zombie) and started at ``start`` on the clock this
        mechanism's ``Identity`` records (Linux: proc(5) field 22 ticks; macOS: psutil's create_time,
        seconds); False for ``pid`` 0 or no ``start``.  What the library checks before it signals a
        recorded process itself (``api.destroy``), since a pid alone is reused."""
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

    def watch(self, sandbox: Sandbox, first: Facts) -> CounterWatch | None:
        """A watch of the sandbox's limit counters while its program runs (``execution.run_bundle``),
        starting from ``first`` (read before start), or None where there is nothing to watch (no
        cgroup; macOS and Windows, whose limits are not read from counters that can vanish)."""
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
