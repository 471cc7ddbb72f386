"""Start a program inside a running sandbox: the library's checks, then ``Mechanism.exec``.

``spawn`` refuses what no platform may run (an empty command, an environment name that looks like a
credential), takes the sandbox's lock, checks it is running and asks the mechanism to start the
program there (Linux: ``platforms/linux/enter_client.py`` and its helper ``enter.py``; macOS and
Windows refuse with ``CapabilityUnavailable``).  It returns the mechanism's ``Started`` handle once
the program has exec'd.  ``execution.execute`` builds on it; the CLI's ``exec`` uses both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import IO, TYPE_CHECKING

from . import api
from . import state as st
from .errors import UsageError
from .mechanism import ExecSpec

if TYPE_CHECKING:
    from .mechanism import Mechanism, Started

__all__ = ["spawn"]


def spawn(
    mechanism: Mechanism,
    sandbox_id: str,
    argv: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    stdin: int | IO[bytes] | None = None,
    stdout: int | IO[bytes] | None = None,
    stderr: int | IO[bytes] | None = None,
    detach: bool = False,
    replace_env: bool = False,
    user: Mapping[str, object] | None = None,
    capabilities: list[str] | None = None,
    console_socket: str | None = None,
) -> Started:
    """Start ``argv`` inside the running sandbox ``sandbox_id``; return once it has exec'd.

    Args:
        env: variables set over the sandbox process's environment (``replace_env``: the whole
            environment, as an OCI ``process.env``).
        cwd: working directory inside the sandbox (default: the sandbox process's).
        stdin/stdout/stderr: as for ``subprocess.Popen`` (None: inherit).
        detach: the helper exits once the program runs; ``pid`` is the program, a child of the helper
            until then, afterwards of this process's nearest child subreaper (prctl(2)
            PR_SET_CHILD_SUBREAPER), which gets its exit status — ``runc exec -d``'s contract.
        user: ``uid``/``gid``/``additional_gids``/``umask`` (``process_spec.resolve_credentials`` rules).
        capabilities: names, at most the sandbox's (None: the sandbox's).
        console_socket: path of a listening unix socket: the program gets a new pty of the sandbox's
            devpts as stdio and controlling terminal, and the master is sent there (SCM_RIGHTS)
            before this returns (runtime-spec runtime.md, runc docs/terminals.md).
    Raises:
        UsageError (empty argv); BundleInvalid (an ``env`` name that looks like a credential, see
        ``hardening.tenant``; ids or capabilities beyond the sandbox's); SandboxNotFound;
        InvalidState (not running); CapabilityUnavailable (the platform cannot enter a running
        sandbox: macOS, Windows); CouldNotRun (never ran: ``not_found`` | ``permission_denied`` |
        ``exec_failed``); LaunchFailed (could not join, or the console socket cannot be reached).
    """
    args = [str(a) for a in argv]
    if not args or not args[0]:
        raise UsageError("exec needs a program to run")
    if env:
        # the tenant profile's environment rules hold for exec'd processes too: no credential names
        from .errors import BundleInvalid
        from .hardening.tenant import check_env

        errors, _ = check_env([f"{k}={v}" for k, v in env.items()])
        if errors:
            raise BundleInvalid(errors, what="exec environment")
    request = ExecSpec(
        args,
        env=dict(env or {}),
        replace_env=replace_env,
        cwd=cwd,
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        detach=detach,
        user=user,
        capabilities=capabilities,
        console_socket=console_socket,
    )
    store = api.store_of(mechanism)
    with store.locked(sandbox_id) as rec:
        st.require(sandbox_id, api.observed_status(mechanism, rec, store), "exec")
        return mechanism.exec(api.sandbox_of(rec, store), request)
