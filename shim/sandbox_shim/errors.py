"""The exception hierarchy: errors are facts, each with its own CLI exit status.

Every error carries a one-line ``message``, an optional ``hint`` (how to fix it) and, where there is
one, the JSON pointer into config.json (``pointer``) or the OS ``errno``.  The CLI maps each class to
its ``exit_status`` once, at the top (see ``sandbox_shim.cli``).  Values of ``process.env`` are never
put into any message.
"""

from __future__ import annotations

from .values import FrozenValue

TYPE_CHECKING = False  # typing and dataclasses stay unloaded: every lifecycle verb imports this module
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any


def printable(text: str) -> str:
    """``text`` with every character that is not printable escaped as Python would write it
    (``\\n``, ``\\x00``, ``\\u2028``, a lone surrogate ``\\udc80``): a message quotes keys, values and
    paths from config.json, and none of them may break the one line or forge a second one.
    A backslash is doubled only where text was escaped, so the common case is unchanged."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] if c not in "'\"" else c for c in text)


class ShimError(Exception):
    """Base of every error sandbox-shim raises on purpose.

    Attributes:
        message: what went wrong, one line.
        hint: how to fix it, one line, or "".
        exit_status: the CLI exit status for this class of error.
    """

    exit_status = 1
    kind = "error"

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def line(self) -> str:
        """One line for people: the message, then the fix (control characters escaped, ``printable``)."""
        return printable(f"{self.message}; {self.hint}" if self.hint else self.message)

    def to_dict(self) -> dict[str, Any]:
        """The structured form used by ``--log-format json``."""
        d: dict[str, Any] = {"error": self.kind, "msg": printable(self.message)}
        if self.hint:
            d["hint"] = printable(self.hint)
        return d


class UsageError(ShimError):
    """The command line itself is wrong (missing id, unknown flag, bad signal name)."""

    exit_status = 2
    kind = "usage"


class InvalidArgument(UsageError, ValueError):
    """A library call got an argument out of its domain (a timeout that is not a positive finite
    number of seconds, ...).  ``parameter`` names it."""

    def __init__(self, parameter: str, message: str, hint: str = "") -> None:
        self.parameter = parameter
        super().__init__(f"{parameter}: {message}", hint)


def check_seconds(parameter: str, value: float | None, zero_ok: bool = False) -> None:
    """Refuse a duration that is not a finite number of seconds > 0 (>= 0 with ``zero_ok``); None passes.

    Raises:
        InvalidArgument naming ``parameter``.
    """
    if value is None:
        return
    ok = (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and value == value
        and value not in (float("inf"), float("-inf"))
        and (value >= 0 if zero_ok else value > 0)
        and value < 2**53  # a float deadline: an int past that (10**400) cannot be one (OverflowError)
    )
    if not ok:
        want = "a finite number of seconds " + (">= 0" if zero_ok else "> 0") + " (below 2**53)"
        bits = value.bit_length() if isinstance(value, int) else 0  # str() of a huge int may itself fail
        shown = f"an integer of {bits} bits" if bits > 64 else repr(value)[:40]
        raise InvalidArgument(parameter, f"{shown} is not {want}", "pass None for no deadline")


class BundleProblem(FrozenValue):
    """One problem found in a bundle (immutable, hashable, compared by value).

    Attributes:
        pointer: RFC 6901 JSON pointer into config.json ("" for the document, or a bundle path).
        message: what is wrong, never quoting a ``process.env`` value.
        rule: the rule broken (schema keyword, OCI runtime-spec section, or our policy).
        hint: how to fix it.
    """

    __match_args__ = ("pointer", "message", "rule", "hint")
    pointer: str
    message: str
    rule: str
    hint: str

    def __init__(self, pointer: str, message: str, rule: str, hint: str = "") -> None:
        self._set(pointer=pointer, message=message, rule=rule, hint=hint)

    def line(self) -> str:
        where = self.pointer or "/"
        fix = f" (fix: {self.hint})" if self.hint else ""
        return printable(f"{where}: {self.message} [{self.rule}]{fix}")


class BundleInvalid(ShimError):
    """The bundle cannot be used: missing, unreadable, invalid JSON, or against the schema/policy."""

    exit_status = 3
    kind = "bundle_invalid"

    def __init__(self, problems: Sequence[BundleProblem], what: str = "bundle") -> None:
        self.problems = list(problems)
        first = self.problems[0]
        more = (
            f" (and {len(self.problems) - 1} more: sandbox-shim validate lists them)"
            if len(self.problems) > 1
            else ""
        )
        super().__init__(f"invalid {what}: {first.pointer or '/'}: {first.message}{more}", first.hint)

    def to_dict(self) -> dict[str, Any]:
        d = super().to_dict()
        d["problems"] = [p.__dict__ for p in self.problems]
        return d


class CapabilityUnavailable(ShimError):
    """Refused before any mechanism was asked: a capability the Plan needs is missing on this host.

    Attributes:
        reports: the failing capability reports (``sandbox_shim.capability.Capability``).
    """

    exit_status = 4
    kind = "capability_unavailable"

    def __init__(self, reports: Sequence[Any]) -> None:
        self.reports = list(reports)
        names = ", ".join(f"{r.name} ({r.detail})" for r in self.reports)
        super().__init__(
            f"refused: this host lacks {names}",
            "run on a host that has it, or remove the setting from config.json that needs it",
        )

    def to_dict(self) -> dict[str, Any]:
        d = super().to_dict()
        d["capabilities"] = [r.to_dict() for r in self.reports]
        return d


class CannotEnforce(ShimError):
    """The confinement could not be built here; nothing was launched."""

    exit_status = 5
    kind = "cannot_enforce"

    def __init__(self, capability: str, detail: str) -> None:
        self.capability = capability
        self.detail = detail
        super().__init__(f"cannot enforce confinement: {capability}: {detail}")


class SandboxNotFound(ShimError):
    """No sandbox with this id under the state root."""

    exit_status = 6
    kind = "not_found"

    def __init__(self, sandbox_id: str, root: str) -> None:
        super().__init__(
            f"container {sandbox_id!r} does not exist (state root {root})",
            "check the id with `sandbox-shim list` and use the same --root",
        )


class StateCorrupt(SandboxNotFound):
    """The sandbox's state file cannot be read; ``delete --force`` removes it."""

    kind = "state_corrupt"

    def __init__(self, sandbox_id: str, path: str) -> None:
        ShimError.__init__(
            self,
            f"container {sandbox_id!r} has an unreadable state file {path}",
            f"`sandbox-shim delete --force {sandbox_id}` removes it and what it recorded",
        )


class SandboxExists(ShimError):
    """Create was asked for an id already in use."""

    exit_status = 7
    kind = "exists"

    def __init__(self, sandbox_id: str) -> None:
        super().__init__(
            f"container {sandbox_id!r} already exists",
            "pick another id, or `sandbox-shim delete --force` the old one",
        )


class InvalidState(ShimError):
    """The verb is not allowed in the sandbox's current OCI state (runtime-spec "Lifecycle")."""

    exit_status = 8
    kind = "invalid_state"

    def __init__(self, sandbox_id: str, status: str, verb: str, allowed: str) -> None:
        self.status = status
        msg = f"cannot {verb} container {sandbox_id!r}: it is {status}"
        if verb == "kill" and status == "stopped":
            msg += " (container not running)"
        super().__init__(msg, f"{verb} needs a container that is {allowed}")


class LaunchFailed(ShimError):
    """The platform could not set the sandbox up (bwrap or a cgroup write failed); nothing is left."""

    exit_status = 9
    kind = "launch_failed"


class CouldNotRun(ShimError):
    """The program never ran: not found, not executable, or exec denied.  Not an exit status.

    Attributes:
        reason: ``not_found`` | ``permission_denied`` | ``exec_failed``.
    """

    kind = "could_not_run"

    def __init__(self, reason: str, program: str, detail: str = "") -> None:
        self.reason = reason
        self.program = program
        # Wording that podman/containerd map to 127 and 126.
        words = {
            "not_found": "executable file not found",
            "permission_denied": "permission denied",
        }.get(reason, "exec failed")
        self.exit_status = 127 if reason == "not_found" else 126
        super().__init__(f"{program}: {words}" + (f": {detail}" if detail else ""))


class LimitExceeded(ShimError):
    """A limit stopped the sandbox.

    Attributes:
        kind_of_limit: ``memory`` | ``pids`` | ``cpu`` | ``wall_clock``.
        completion: the partial ``Completion`` (output so far, usage) where there is one.
    """

    exit_status = 10
    kind = "limit_exceeded"

    def __init__(self, kind_of_limit: str, detail: str = "", completion: Any = None) -> None:
        self.kind_of_limit = kind_of_limit
        self.completion = completion
        super().__init__(f"limit exceeded: {kind_of_limit}" + (f" ({detail})" if detail else ""))


class _StateIOError(ShimError):
    """The state root refused an I/O (``StateUnreadable``, ``StateUnwritable``): exit status 11.

    Attributes:
        path: the file or directory concerned; errno: the OS error number.
    """

    exit_status = 11
    verb, hint, kept = "", "", ""

    def __init__(self, path: str, errno: int, strerror: str) -> None:
        self.path = path
        self.errno = errno
        super().__init__(f"cannot {self.verb} state {path}: {strerror}{self.kept}", self.hint)


class StateUnreadable(_StateIOError):
    """The state root (or a directory in it) could not be read, e.g. another user's root (EACCES)."""

    kind = "state_unreadable"
    verb, hint = "read", "run as the state root's owner, or give --root"


class StateUnwritable(_StateIOError):
    """The state root refused a write (no space, read-only, quota): the previous state is kept."""

    kind = "state_unwritable"
    verb, kept = "write", "; the previous state is kept"
    hint = "free space on (or remount read-write) the state root, then retry"


class OutputUnwritable(ShimError):
    """Output the caller asked for could not be written (a closed pipe, a full disk behind a redirection,
    a file such as ``spec``'s config.json): exit status 74 (EX_IOERR, sysexits.h).  Nothing half-written
    is left where a file was asked for."""

    exit_status = 74
    kind = "output_unwritable"

    def __init__(self, what: str, why: str, hint: str = "give sandbox-shim a writable output") -> None:
        super().__init__(
            f"could not write the output: {what}: {why}" if what else f"could not write the output: {why}",
            hint,
        )
