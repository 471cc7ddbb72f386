"""The library API: provision / start / stop / destroy / execute / status / usage / list_running.

Each call: load and validate (``bundle``), plan (``plan``), refuse on missing capabilities
(``capability.require``) *before* anything is made, then ask the mechanism.  Every step that makes
something registers its undo, so a failure leaves no state dir, cgroup or process behind.
The CLI (``sandbox_shim.cli``) is a thin layer over these functions.
"""

from __future__ import annotations

import os
import time

from . import posix
from . import state as st
from .errors import LaunchFailed, ShimError
from .mechanism import ProvisionOptions, Sandbox, Status, Usage
from .state import Record, StateStore

TYPE_CHECKING = False  # typing is not loaded at run time: the CLI's lifecycle verbs stay cheap
if TYPE_CHECKING:
    from typing import Any

    from .mechanism import Mechanism


def default_mechanism(root: str | None = None, systemd_cgroup: bool = False) -> Mechanism:
    """The mechanism for this platform, keeping its sandboxes' state under ``root`` (picked by the
    composition point, ``platforms.select.mechanism``); ``systemd_cgroup``: runc's
    ``--systemd-cgroup`` (Linux: systemd makes the sandbox's scope; ignored where there are no
    cgroups).  Raises ``LaunchFailed`` on an OS without one."""
    from .platforms.select import mechanism

    return mechanism(root, systemd_cgroup=systemd_cgroup)


def id_of(sandbox: Sandbox | str) -> str:
    """The id of ``sandbox``: every call takes a ``Sandbox`` or its id, the same everywhere."""
    return sandbox.id if isinstance(sandbox, Sandbox) else sandbox


def store_of(mechanism: Mechanism) -> StateStore:
    """The state store a mechanism keeps its sandboxes in (its ``root``)."""
    return StateStore(mechanism.root)


_IDENTITY = ("pid", "pid_start", "init_pid", "init_start")


def sandbox_of(rec: Record, store: StateStore) -> Sandbox:
    """The ``Sandbox`` a mechanism works on, rebuilt from a stored record (identity from the record)."""
    priv = dict(rec.private)
    priv["dir"] = store.dir(rec.id)
    priv.update({k: getattr(rec, k) for k in _IDENTITY})  # identity lives in the record, once
    return Sandbox(rec.id, rec.bundle, rec.owner_ref, rec.context, priv)


def rfc3339(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int((t % 1) * 1e9):09d}Z"


def provision(
    mechanism: Mechanism,
    sandbox: Sandbox,
    pid_file: str | None = None,
    console_socket: str | None = None,
    preserve_fds: int = 0,
    stdio: tuple[int, int, int] | None = None,
) -> Status:
    """OCI create: validate, plan, check capabilities, make resources, hold the process before user code.

    Then the prestart, createRuntime and createContainer hooks run (``hooks``); a failing one
    destroys everything made and runs the poststop hooks (runtime-spec runtime.md "Lifecycle").

    Args:
        sandbox: ``id`` and ``bundle`` (a path; relative to the cwd) are read; ``private`` is filled.
        pid_file: where to write the pid (digits only, atomically), or None.
        console_socket: unix socket path to send the pty master to (``process.terminal``), or None.
        preserve_fds: how many fds from 3 up the workload inherits (runc ``--preserve-fds``).
        stdio: (stdin, stdout, stderr) fds for the sandbox, or None for /dev/null on all three: a
            library caller's own stdio (a service's log file, its terminal) is never the tenant's.
            The CLI's ``create`` passes its own (0, 1, 2): OCI create hands the caller's stdio to
            the container.  These three and the record hook reach the mechanism as one
            ``ProvisionOptions``; a mechanism that cannot honour one refuses it
            (``CapabilityUnavailable``: Windows takes no stdio, macOS no console socket).
    Returns:
        the ``created`` status.
    Raises:
        BundleInvalid, CapabilityUnavailable, SandboxExists, LaunchFailed (``HookFailed``), CouldNotRun.
    """
    import contextlib

    from . import hooks
    from .bundle import load

    st.check_id(sandbox.id)
    spec = load(sandbox.bundle)
    plan = mechanism.make_plan(spec, sandbox.id)  # the platform's plan; refusal happens in there
    required = list(plan.required)
    plan_hooks = plan.hooks
    store = store_of(mechanism)
    with store.new(sandbox.id) as d:
        rec = Record(
            id=sandbox.id,
            bundle=spec.bundle,
            created=rfc3339(time.time()),
            annotations=spec.annotations,
            mechanism=mechanism.name,
            required=required,
            owner_ref=sandbox.owner_ref,
            context=sandbox.context,
        )
        sandbox.bundle = spec.bundle
        sandbox.private["dir"] = d
        # the mechanism's record of its host objects, written as handed over (each call replaces the
        # last): ``ROOT/.cgroups/ID``, so ``delete --force`` finds them after a crash
        options = ProvisionOptions(
            stdio, console_socket, preserve_fds, lambda info: store.write_cgroup_index(sandbox.id, info)
        )
        ident = None
        try:
            store.write(rec)
            ident = mechanism.provision(sandbox, plan, options)
            init = ident.init_pid
            doc = hooks.state_doc(sandbox.id, "creating", init, spec.bundle, spec.annotations)
            for phase in ("prestart", "createRuntime", "createContainer"):
                hooks.run(plan_hooks, phase, doc, init, spec.bundle, mechanism.hook_entry)
            rec.status = "created"
            rec.pid, rec.pid_start = ident.pid, ident.pid_start
            rec.init_pid, rec.init_start = ident.init_pid, ident.init_start
            rec.private = {k: v for k, v in sandbox.private.items() if k != "dir" and k not in _IDENTITY}
            rec.private["plan"] = {
                "hooks": plan_hooks,
                "wall_clock": plan.wall_clock,
                "network": plan.network,
            }
            store.write(rec)
            if pid_file:
                st.write_atomic(os.path.abspath(pid_file), str(rec.pid), 0o644)
        except BaseException as e:
            with contextlib.suppress(Exception):
                if ident is not None:  # a failed provision undid its own work
                    mechanism.destroy(sandbox)
            with contextlib.suppress(Exception):
                _drop_cgroups(mechanism, store, sandbox.id)
            store.remove(sandbox.id)
            if isinstance(e, hooks.HookFailed):
                hooks.run(
                    plan_hooks,
                    "poststop",
                    hooks.state_doc(sandbox.id, "stopped", 0, spec.bundle, spec.annotations),
                    cwd=spec.bundle,
                )
            raise
    return _status(mechanism, rec, store)


def _drop_cgroups(mechanism: Mechanism, store: StateStore, sandbox_id: str) -> list[str]:
    """Remove what an id left outside its state dir (each recorded before it was made: on Linux the
    cgroups and their parents and the network links) and what a crashed create/delete left in the
    root.  The mechanism removes its own residue (``Mechanism.remove_residue``).  Returns problems,
    one line each (the record is kept for another try then)."""
    store.sweep(sandbox_id)
    return mechanism.remove_residue(store, sandbox_id)


def observed_status(mechanism: Mechanism, rec: Record, store: StateStore) -> str:
    """The OCI status as observed now: the stored one corrected by what the host shows.  A ``start``
    killed after releasing the process but before recording it leaves "created" in the file: the
    mechanism's own view (``status``: the start FIFO gone) says "running"."""
    if rec.status in ("created", "running"):
        sb = sandbox_of(rec, store)
        if not mechanism.alive(sb):
            return "stopped"
        if rec.status == "created":
            return str(mechanism.status(sb).status)
        if rec.status == "running" and mechanism.paused(sb):
            return "paused"
    return rec.status


#: state annotation naming the namespaces joined by path (``type=name:[inode]``, comma-separated); it
#: replaces any config annotation of that name, so a config cannot forge it
JOINED_ANNOTATION = "sandbox-shim.joined-namespaces"


def _status(mechanism: Mechanism, rec: Record, store: StateStore, now: str | None = None) -> Status:
    """The ``Status`` of ``rec``; ``now``: its status when the caller already knows it (``start``),
    else observed (``observed_status``)."""
    now = now or observed_status(mechanism, rec, store)
    exit_status = mechanism.exit_status(sandbox_of(rec, store)) if now == "stopped" else None
    annotations = dict(rec.annotations or {})
    annotations.pop(JOINED_ANNOTATION, None)
    joined = mechanism.joined_namespaces(sandbox_of(rec, store))
    if joined:
        annotations[JOINED_ANNOTATION] = ",".join(f"{t}={v}" for t, v in sorted(joined.items()))
    return Status(
        id=rec.id,
        status=now,
        pid=rec.pid if now != "stopped" else 0,
        bundle=rec.bundle,
        annotations=annotations,
        exit_status=exit_status,
        created=rec.created or None,
    )


def status(mechanism: Mechanism, sandbox: Sandbox | str) -> Status:
    """OCI state of ``sandbox_id``.  Raises ``SandboxNotFound``."""
    sandbox_id = id_of(sandbox)
    store = store_of(mechanism)
    return _status(mechanism, store.read(sandbox_id), store)


def start(mechanism: Mechanism, sandbox: Sandbox | str) -> Status:
    """OCI start: release the process.  Checks capabilities again (it may run on another host).

    Raises:
        SandboxNotFound, InvalidState (not ``created``), CapabilityUnavailable, LaunchFailed.
    """
    sandbox_id = id_of(sandbox)
    store = store_of(mechanism)
    with store.locked(sandbox_id) as rec:
        now = observed_status(mechanism, rec, store)
        st.require(sandbox_id, now, "start")
        mechanism.require(rec.required)
        hk = (rec.private.get("plan") or {}).get("hooks")
        sb = sandbox_of(rec, store)
        if hk:  # ``hooks`` is loaded only for a plan that has some (a module less on each start)
            _start_container_hooks(mechanism, store, rec, sb, hk)
        rec.status = "running"
        with store.staged(rec):  # space taken before the release: a refused write releases nothing
            mechanism.start(sb)
        if hk:
            from . import hooks

            hooks.run(
                hk,
                "poststart",
                hooks.state_doc(rec.id, "running", rec.init_pid, rec.bundle, rec.annotations),
                cwd=rec.bundle,
            )
        # observed, the freezer included: a pause through this library needs the id's lock, held here,
        # but the cgroup can be frozen behind its back (an orchestrator, a frozen parent cgroup)
        return _status(mechanism, rec, store)


def _start_container_hooks(
    mechanism: Mechanism, store: StateStore, rec: Record, sb: Sandbox, hk: dict[str, Any]
) -> None:
    """``start``'s startContainer hooks; a failing one destroys the sandbox, then runs poststop
    (runtime.md Lifecycle step 7: stop, destroy, then poststop) and raises ``HookFailed``."""
    from . import hooks

    try:
        hooks.run(
            hk,
            "startContainer",
            hooks.state_doc(rec.id, "created", rec.init_pid, rec.bundle, rec.annotations),
            rec.init_pid,
            rec.bundle,
            mechanism.hook_entry,
        )
    except hooks.HookFailed:
        mechanism.destroy(sb)
        _drop_cgroups(mechanism, store, rec.id)
        store.remove(rec.id)
        hooks.run(
            hk,
            "poststop",
            hooks.state_doc(rec.id, "stopped", 0, rec.bundle, rec.annotations),
            cwd=rec.bundle,
        )
        raise


def signal(mechanism: Mechanism, sandbox: Sandbox | str, signum: int, all_processes: bool = False) -> None:
    """Deliver ``signum`` (runtime-spec "kill").  Raises ``InvalidState`` unless created/running/paused."""
    sandbox_id = id_of(sandbox)
    store = store_of(mechanism)
    with store.locked(sandbox_id) as rec:
        # created, running and paused may all be signalled: whether a live one is paused (the cgroup's
        # freezer, the cgroup modules and the mount table to find it) is not asked
        now = rec.status
        if now in ("created", "running") and not mechanism.alive(sandbox_of(rec, store)):
            now = "stopped"
        st.require(sandbox_id, now, "kill")
        mechanism.signal(sandbox_of(rec, store), signum, all_processes)


def stop(mechanism: Mechanism, sandbox: Sandbox | str, grace: float = 10.0) -> Status:
    """SIGTERM, wait up to ``grace`` seconds, then SIGKILL every process of the cgroup; resources stay.

    Raises:
        InvalidArgument (``grace`` negative, NaN or infinite), SandboxNotFound.
    """
    from .errors import check_seconds

    check_seconds("grace", grace, zero_ok=True)
    sandbox_id = id_of(sandbox)
    import signal as _signal

    store = store_of(mechanism)
    rec = store.read(sandbox_id)
    sb = sandbox_of(rec, store)
    if observed_status(mechanism, rec, store) in st.ACTIVE:
        cg = mechanism.cgroup(sb)
        if cg is not None and mechanism.paused(sb):
            cg.freeze(False)
        mechanism.signal(sb, _signal.SIGTERM)
        deadline = time.monotonic() + grace
        while mechanism.alive(sb) and time.monotonic() < deadline:
            time.sleep(0.02)
        if mechanism.alive(sb):
            mechanism.signal(sb, posix.SIGKILL, all_processes=True)
            mechanism.signal(sb, posix.SIGKILL)
            deadline = time.monotonic() + 5
            while mechanism.alive(sb) and time.monotonic() < deadline:
                time.sleep(0.01)
    return _status(mechanism, store.read(sandbox_id), store)


def destroy(mechanism: Mechanism, sandbox: Sandbox | str, force: bool = False) -> None:
    """OCI delete: kill what is left, remove cgroups and state.  Never capability-gated.

    Without ``force`` a created, running or paused sandbox is refused (``InvalidState``).  With it,
    an unknown id is not an error, and whatever was recorded for the id (cgroups and their parents,
    network links, a half-made or half-removed state dir) is removed even when its state is gone.

    Raises:
        SandboxNotFound (without ``force``), InvalidState, LaunchFailed: the processes were killed but
        a recorded host object could not be removed (e.g. a read-only cgroup hierarchy); the record
        is kept, so ``destroy(force=True)`` again finishes the job.
    """
    sandbox_id = id_of(sandbox)
    store = store_of(mechanism)
    try:
        cm = store.locked(sandbox_id)
        rec = cm.__enter__()
    except ShimError:
        if not force:
            raise
        left = _drop_cgroups(mechanism, store, sandbox_id)
        store.remove(sandbox_id)  # a corrupt state file: only a directory the store made is removed
        _raise_leftovers(sandbox_id, left)
        return
    problems: list[str] = []
    try:
        now = observed_status(mechanism, rec, store)
        if not st.can_delete(now, force):
            st.require(sandbox_id, now, "delete")
        if rec.private:
            sb = sandbox_of(rec, store)
            try:
                mechanism.destroy(sb)
            except (ShimError, OSError) as e:
                problems.append(str(e))
                _kill_by_identity(
                    mechanism, rec
                )  # a read-only cgroup hierarchy must not keep the processes alive
        problems += _drop_cgroups(mechanism, store, sandbox_id)
        store.remove(sandbox_id)
    finally:
        cm.__exit__(None, None, None)
    hk = (rec.private.get("plan") or {}).get("hooks")
    if hk:  # ``hooks`` is loaded only for a plan that has some
        from . import hooks

        hooks.run(
            hk, "poststop", hooks.state_doc(rec.id, "stopped", 0, rec.bundle, rec.annotations), cwd=rec.bundle
        )
    _raise_leftovers(sandbox_id, problems)


def _kill_by_identity(mechanism: Mechanism, rec: Record) -> None:
    """SIGKILL the sandbox's recorded processes, each only if pid *and* start time still match (the
    mechanism's clock: ``Mechanism.same_process``)."""
    for pid, start in ((rec.init_pid, rec.init_start), (rec.pid, rec.pid_start)):
        if mechanism.same_process(pid, start):
            try:
                os.kill(pid, posix.SIGKILL)
            except ProcessLookupError:
                pass


def _raise_leftovers(sandbox_id: str, problems: list[str]) -> None:
    if problems:
        raise LaunchFailed(
            f"deleted {sandbox_id!r} and killed its processes, but could not remove: "
            + "; ".join(problems)[:300],
            "the record is kept: run `delete --force` again once that is fixed",
        )


def usage(mechanism: Mechanism, sandbox: Sandbox | str) -> Usage:
    """Resource usage from the sandbox's cgroup."""
    sandbox_id = id_of(sandbox)
    store = store_of(mechanism)
    return mechanism.usage(sandbox_of(store.read(sandbox_id), store))


def list_sandboxes(mechanism: Mechanism) -> list[Status]:
    """Every sandbox under the state root with its observed status (created, running, paused, stopped),
    plus sandboxes the store has lost but the kernel still shows (``source="observed"``, see
    ``reconcile``), sorted by id.  The CLI's ``list``."""
    import contextlib

    from .reconcile import lost_sandboxes

    store = store_of(mechanism)
    out = []
    for sid in store.ids():
        with contextlib.suppress(ShimError):
            out.append(_status(mechanism, store.read(sid), store))
    out += lost_sandboxes(mechanism, store, {s.id for s in out})
    return sorted(out, key=lambda s: s.id)


def list_running(mechanism: Mechanism) -> list[Status]:
    """The sandboxes whose status is ``running`` now (observed, not as stored), sorted by id;
    ``list_sandboxes`` gives every one."""
    return [s for s in list_sandboxes(mechanism) if s.status == "running"]


# Telemetry: every call above emits start/stop/exception events (telemetry.py).  The module is looked up
# when a call is made, not imported here: a handler can only be attached once it is loaded (``attach``),
# and the CLI's lifecycle verbs, which attach none without --debug, load one module less.
def _instrument() -> None:
    g = globals()
    for name in (
        "provision",
        "start",
        "stop",
        "destroy",
        "signal",
        "status",
        "usage",
        "list_running",
        "list_sandboxes",
    ):
        g[name] = _instrumented(name, g[name])


def _instrumented(call: str, fn: Any) -> Any:
    import sys

    telemetry = f"{__package__}.telemetry"

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        tel = sys.modules.get(telemetry)
        return fn(*args, **kwargs) if tel is None else tel.run(call, fn, args, kwargs)

    for attr in ("__module__", "__name__", "__qualname__", "__doc__"):  # what functools.wraps copies
        setattr(wrapper, attr, getattr(fn, attr))
    wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
    return wrapper


_instrument()
