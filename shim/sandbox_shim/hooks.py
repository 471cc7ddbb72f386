"""OCI hooks (runtime-spec config.md "POSIX-platform Hooks", runtime.md "Lifecycle").

Each hook is ``{path, args?, env?, timeout?}``; it runs with the container's state JSON on stdin and
the bundle as its working directory.  When they run here:

* ``prestart``, ``createRuntime``: during ``create``, on the host (runtime namespaces), once bwrap has
  built the sandbox and before any user code ran.  bwrap pivots into the root before it blocks, so
  unlike runc these run *after* pivot_root; the sandbox's root is reachable as ``/proc/PID/root``.
* ``createContainer``: right after, in the sandbox's namespaces except the mount namespace, so
  ``path`` resolves on the host as the spec requires; cwd is the sandbox's root.
* ``startContainer``: during ``start``, before the user program is released, in all of the sandbox's
  namespaces including mount, with its root and cwd (``path`` resolves inside the sandbox).
* ``poststart``: after the program was released, before ``start`` returns; on the host.
* ``poststop``: after ``delete`` removed the sandbox; on the host.

How the two in-sandbox phases (``IN_SANDBOX``) enter the sandbox is the mechanism's
(``Mechanism.hook_entry``, handed to ``run`` as ``enter``): on Linux an nsenter(1) argv prefix and the
sandbox's root as cwd (``platforms/linux/hook_entry.py``).  macOS and Windows have no namespaces to
enter, so their planners refuse such hooks with the JSON pointer (``refuse_in_sandbox``) before
anything is made (their mechanisms run no hooks at all: the host phases' hooks are refused there too,
``refuse_on_host``), rather than run them in place: a hook the spec puts in the container's namespaces,
run on the host instead, would act on the host (its network, its mounts) while its author meant the
sandbox, so failing closed is the only safe reading.

A failing (non-zero, signalled, not runnable or timed out) prestart/createRuntime/createContainer/
startContainer hook raises ``HookFailed``: the caller destroys the sandbox and runs the poststop hooks
(runtime.md steps 3-5 and 7: "continue the lifecycle at step 12").  A failing poststart/poststop hook
prints a warning on stderr and the rest continue.  ``pid`` in the hooks' state is the sandbox's first
process inside its namespaces (bwrap's child), so ``/proc/PID/ns/*`` name the sandbox's namespaces.
Hooks run through an entry prefix lose a custom ``args[0]`` (nsenter passes ``path`` as argv[0]).
"""

from __future__ import annotations

import os
import sys

from . import fastjson as json  # the state JSON hooks read, without loading json and re
from . import posix
from .errors import BundleProblem, LaunchFailed, ShimError

TYPE_CHECKING = False  # start and delete import this module: typing and subprocess load only to run a hook
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any

    from .mechanism import HookEntry

    #: ``Mechanism.hook_entry``: (the sandbox's first pid, phase) -> how a hook enters the sandbox
    Enter = Callable[[int, str], HookEntry]

REQUIRED = ("prestart", "createRuntime", "createContainer", "startContainer")
WARN_ONLY = ("poststart", "poststop")
#: the phases that run in the sandbox's namespaces (runtime-spec config.md), entered per platform
IN_SANDBOX = ("createContainer", "startContainer")
#: the phases whose hooks run on the host (runtime-spec config.md, "POSIX-platform Hooks")
HOST_PHASES = ("prestart", "createRuntime", "poststart", "poststop")
OCI_VERSION = "1.0.2"


class HookFailed(LaunchFailed):
    """A prestart/createRuntime/createContainer/startContainer hook failed; the sandbox is destroyed."""

    kind = "hook_failed"


def state_doc(
    sandbox_id: str, status: str, pid: int, bundle: str, annotations: dict[str, str]
) -> dict[str, Any]:
    """The state JSON handed to hooks (runtime-spec runtime.md "State")."""
    doc: dict[str, Any] = {
        "ociVersion": OCI_VERSION,
        "id": sandbox_id,
        "status": status,
        "bundle": bundle,
        "annotations": annotations,
    }
    if pid:
        doc["pid"] = pid
    return doc


def refuse_in_sandbox(config: Mapping[str, Any], platform: str) -> list[BundleProblem]:
    """A problem, with its JSON pointer (``/hooks/createContainer/I``, ``/hooks/startContainer/I``),
    for every hook in ``config`` that runs in the sandbox's namespaces: what ``platform`` (``"macOS"``,
    ``"Windows"``), having no namespaces to enter, refuses rather than run on the host (module
    docstring).  Wrong types are the schema's to report: they give no problem here."""
    return _refuse(
        config,
        IN_SANDBOX,
        lambda phase: (
            f"a {phase} hook runs in the container's namespaces; {platform} has none to enter, "
            "and running it on the host instead would act on the host"
        ),
        "remove the hook",
    )


def refuse_on_host(config: Mapping[str, Any], platform: str) -> list[BundleProblem]:
    """A problem, with its JSON pointer (``/hooks/prestart/I`` ...), for every hook of the phases that
    run on the host (``prestart``, ``createRuntime``, ``poststart``, ``poststop``): ``platform``'s
    mechanism (``"macOS"``, ``"Windows"``) runs no hooks (its plan's ``hooks`` is empty), and a config
    field is applied or refused, never accepted and left unapplied.  Wrong types are the schema's."""
    return _refuse(
        config,
        HOST_PHASES,
        lambda phase: f"{phase} hooks are not run by the {platform} mechanism",
        "remove the hook, or run the bundle on Linux",
    )


def _refuse(
    config: Mapping[str, Any], phases: tuple[str, ...], why: Callable[[str], str], fix: str
) -> list[BundleProblem]:
    """One problem per hook of ``phases`` in ``config`` (wrong types: none, the schema reports them)."""
    hooks = config.get("hooks")
    if not isinstance(hooks, dict):
        return []
    return [
        BundleProblem(f"/hooks/{phase}/{i}", why(phase), f"OCI runtime-spec config.md {phase} hooks", fix)
        for phase in phases
        if isinstance(hooks.get(phase), list)
        for i, _ in enumerate(hooks[phase])
    ]


def _command(
    phase: str, hook: Mapping[str, Any], ns_pid: int, enter: Enter | None
) -> tuple[list[str], str | None, str | None]:
    """(argv, executable, cwd or None: the caller's) for one hook in ``phase``.

    Raises:
        LaunchFailed: an ``IN_SANDBOX`` hook with a sandbox process but no way to enter it (``enter``
        None), or the mechanism could not give one (the hook counts as failed).
    """
    path = hook["path"]
    args = list(hook.get("args") or [path])
    if phase not in IN_SANDBOX or not ns_pid:
        return args, path, None
    if enter is None:  # fail closed: never run a hook meant for the sandbox on the host instead
        raise LaunchFailed("no way to enter the sandbox was given", "pass the mechanism's hook_entry")
    entry = enter(ns_pid, phase)
    return [*entry.prefix, path, *args[1:]], entry.prefix[0], entry.cwd


def _run_one(
    phase: str, hook: Mapping[str, Any], state: dict[str, Any], ns_pid: int, cwd: str, enter: Enter | None
) -> str | None:
    """Run one hook; return None on success or a one-line description of the failure."""
    import subprocess
    import tempfile

    path = hook.get("path", "")
    try:
        argv, exe, inside_cwd = _command(phase, hook, ns_pid, enter)
    except ShimError as e:
        return f"{phase} hook {path}: {e.line()}"
    env = {}
    for entry in hook.get("env") or []:
        k, _, v = entry.partition("=")
        env[k] = v
    timeout = hook.get("timeout")
    cwd = inside_cwd or cwd
    with tempfile.TemporaryFile() as stdin, tempfile.TemporaryFile() as out:
        stdin.write(json.dumps(state).encode())
        stdin.seek(0)
        try:
            proc = subprocess.Popen(
                argv,
                executable=exe,
                stdin=stdin,
                stdout=out,
                stderr=out,
                env=env,
                cwd=cwd if os.path.isdir(cwd) else "/",
                start_new_session=True,
                close_fds=True,
            )
        except OSError as e:
            return f"{phase} hook {path}: cannot run: {e.strerror}"
        try:
            rc = proc.wait(timeout=timeout if isinstance(timeout, int) and timeout > 0 else None)
        except subprocess.TimeoutExpired:
            try:
                posix.killpg(proc.pid, posix.SIGKILL)
            except OSError:
                pass
            proc.wait()
            return f"{phase} hook {path}: timed out after {timeout} s (killed)"
        if rc == 0:
            return None
        out.seek(0)
        tail = out.read()[-300:].decode(errors="replace").strip().replace("\n", " | ")
        how = f"killed by signal {-rc}" if rc < 0 else f"exit status {rc}"
        return f"{phase} hook {path}: {how}" + (f": {tail}" if tail else "")


def run(
    hooks: Mapping[str, Sequence[Mapping[str, Any]]] | None,
    phase: str,
    state: dict[str, Any],
    ns_pid: int = 0,
    cwd: str = "/",
    enter: Enter | None = None,
) -> list[str]:
    """Run every hook of ``phase`` in order.

    Args:
        hooks: the config's ``hooks`` object (``{phase: [hook, ...]}``), or None.
        phase: one of ``REQUIRED`` + ``WARN_ONLY``.
        state: the state JSON for stdin (``state_doc``).
        ns_pid: a process inside the sandbox's namespaces (for createContainer/startContainer).
        cwd: working directory for host-side hooks (the bundle).
        enter: how an ``IN_SANDBOX`` hook enters the sandbox (``Mechanism.hook_entry``); None: such
            a hook with an ``ns_pid`` fails (it never runs on the host instead).
    Returns:
        the warnings printed for failing ``WARN_ONLY`` hooks (empty on success).
    Raises:
        HookFailed: a ``REQUIRED`` hook failed; the remaining hooks of the phase are not run.
    """
    warnings: list[str] = []
    for hook in (hooks or {}).get(phase) or []:
        problem = _run_one(phase, hook, state, ns_pid, cwd, enter)
        if problem is None:
            continue
        if phase in REQUIRED:
            raise HookFailed(problem, "fix the hook (runtime-spec config.md hooks); sandbox destroyed")
        warnings.append(problem)
        try:
            sys.stderr.write(f"sandbox-shim: warning: {problem}\n")
            sys.stderr.flush()
        except OSError:
            pass
    return warnings
