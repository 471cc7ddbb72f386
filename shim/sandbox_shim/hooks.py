"""OCI hooks (runtime-spec config.md "POSIX-platform Hooks", runtime.md "Lifecycle").

Each hook is ``{path, args?, env?, timeout?}``; it runs with the container's state JSON on stdin and
the bundle as its working directory.  When they run here:

* ``prestart``, ``createRuntime``: during ``create``, on the host (runtime namespaces), once bwrap has
  built the sandbox and before any user code ran.  bwrap pivots into the root before it blocks, so
  unlike runc these run *after* pivot_root; the sandbox's root is reachable as ``/proc/PID/root``.
* ``createContainer``: right after, in the sandbox's namespaces except the mount namespace (entered
  with nsenter(1)), so ``path`` resolves on the host as the spec requires; cwd is ``/proc/PID/root``.
* ``startContainer``: during ``start``, before the user program is released, in all of the sandbox's
  namespaces including mount, with its root and cwd (``path`` resolves inside the sandbox).
* ``poststart``: after the program was released, before ``start`` returns; on the host.
* ``poststop``: after ``delete`` removed the sandbox; on the host.

A failing (non-zero, signalled, not runnable or timed out) prestart/createRuntime/createContainer/
startContainer hook raises ``HookFailed``: the caller destroys the sandbox and runs the poststop hooks
(runtime.md steps 3-5 and 7: "continue the lifecycle at step 12").  A failing poststart/poststop hook
prints a warning on stderr and the rest continue.  ``pid`` in the hooks' state is the sandbox's first
process inside its namespaces (bwrap's child), so ``/proc/PID/ns/*`` name the sandbox's namespaces.
Hooks run through nsenter lose a custom ``args[0]`` (nsenter passes ``path`` as argv[0]).
"""

from __future__ import annotations

import os
import sys

from . import fastjson as json  # the state JSON hooks read, without loading json and re
from . import posix
from .errors import LaunchFailed

TYPE_CHECKING = False  # start and delete import this module: typing and subprocess load only to run a hook
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

REQUIRED = ("prestart", "createRuntime", "createContainer", "startContainer")
WARN_ONLY = ("poststart", "poststop")
OCI_VERSION = "1.0.2"

#: nsenter(1) option for each entry of /proc/PID/ns
_NSENTER = {"user": "-U", "mnt": "-m", "uts": "-u", "ipc": "-i", "net": "-n", "pid": "-p", "cgroup": "-C"}


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


def _ns_options(pid: int, with_mount: bool) -> list[str]:
    """nsenter options for the namespaces of ``pid`` that differ from ours."""
    opts: list[str] = []
    for name, flag in _NSENTER.items():
        if name == "mnt" and not with_mount:
            continue
        try:
            if os.stat(f"/proc/{pid}/ns/{name}").st_ino != os.stat(f"/proc/self/ns/{name}").st_ino:
                opts.append(flag)
        except FileNotFoundError:
            continue
    return opts


def _command(phase: str, hook: Mapping[str, Any], ns_pid: int) -> tuple[list[str], str | None]:
    """(argv, executable) for one hook in ``phase``."""
    path = hook["path"]
    args = list(hook.get("args") or [path])
    if phase not in ("createContainer", "startContainer") or not ns_pid:
        return args, path
    import shutil

    nsenter = shutil.which("nsenter", path="/usr/bin:/bin:/usr/sbin:/sbin")
    if not nsenter:
        raise HookFailed(
            f"{phase} hook {path}: nsenter(1) is needed to run it in the sandbox's namespaces",
            "apt-get install util-linux",
        )
    inside = phase == "startContainer"
    argv = [nsenter, "-t", str(ns_pid), *_ns_options(ns_pid, inside)]
    if inside:
        argv += ["--root", "--wd"]
    return [*argv, "--", path, *args[1:]], nsenter


def _run_one(phase: str, hook: Mapping[str, Any], state: dict[str, Any], ns_pid: int, cwd: str) -> str | None:
    """Run one hook; return None on success or a one-line description of the failure."""
    import subprocess
    import tempfile

    path = hook.get("path", "")
    try:
        argv, exe = _command(phase, hook, ns_pid)
    except HookFailed as e:
        return e.message
    env = {}
    for entry in hook.get("env") or []:
        k, _, v = entry.partition("=")
        env[k] = v
    timeout = hook.get("timeout")
    if phase == "createContainer" and ns_pid:
        cwd = f"/proc/{ns_pid}/root"
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
) -> list[str]:
    """Run every hook of ``phase`` in order.

    Args:
        hooks: the config's ``hooks`` object (``{phase: [hook, ...]}``), or None.
        phase: one of ``REQUIRED`` + ``WARN_ONLY``.
        state: the state JSON for stdin (``state_doc``).
        ns_pid: a process inside the sandbox's namespaces (for createContainer/startContainer).
        cwd: working directory for host-side hooks (the bundle).
    Returns:
        the warnings printed for failing ``WARN_ONLY`` hooks (empty on success).
    Raises:
        HookFailed: a ``REQUIRED`` hook failed; the remaining hooks of the phase are not run.
    """
    warnings: list[str] = []
    for hook in (hooks or {}).get(phase) or []:
        problem = _run_one(phase, hook, state, ns_pid, cwd)
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
