"""Command-line entry point and its one error boundary.

The global flags are parsed once (``cli.flags``, the only definition).  Lifecycle verbs
(create/start/state/kill/delete) then take a fast path without click (``cli.lifecycle``, runc
grammar, no heavy imports); everything else goes to the click group in ``cli.app``.  Commands hold
no error handling of their own: they raise, and ``run`` below turns what they raise into a status.

Every path ends in ``run`` with a documented exit status (README "Exit statuses") and at most one
line on stderr (a JSON record with ``--log-format json``): a ``ShimError`` gives its own status; an
unexpected exception gives ``INTERNAL_ERROR`` (70, EX_SOFTWARE in sysexits.h) with a hint to rerun
with ``--debug``, which adds the traceback.

The lifecycle verbs and ``confine`` end with ``os._exit`` once stdout and stderr are flushed:
interpreter teardown (module and object finalisation) costs them about as much as their work, and
nothing of theirs is left to finalise (``confine`` has released its spec, closed its claim and
report before it returns) — state files are written, fsync'd and closed before a verb returns
(``durable``), ``--log`` records are closed as they are written, and locks go with the process.
"""

from __future__ import annotations

import io
import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    import signal as _signal

    from ..errors import ShimError
    from .output import Globals
else:
    import _signal  # the C module: ``signal`` would load enum (its Signals is an IntEnum)

FAST_VERBS = frozenset({"create", "start", "state", "kill", "delete"})
#: what ``confine`` imports after this module, in this package (bytecode) and among the standard
#: library's extension modules: read ahead in one batch when the command is ``confine`` (it runs once
#: per confined command; on a cold page cache the imports would otherwise read them one at a time,
#: ~0.1-0.3 ms each).  The composition point and the platform's own modules are not named here
#: (the CLI names no platform code): they are read ahead in a batch of their own where
#: ``platforms.select.confine_backend`` picks the platform.  tests/test_confine_startup.py checks the
#: two lists against what a confine run imports.
CONFINE_PATH = (
    "cli/output",
    "errors",
    "fastjson",
    "values",
    "cli/flags",
    "cli/confine_run",
    "hardening/__init__",
    "hardening/confine_launch",
    "hardening/readset",
    "posix",
    "hardening/confine_git",
    "hardening/confine_sets",
    "hardening/confinement",
    "hardening/confine_journal",
    "procstat",
    "paths",
)
#: the extension modules (``lib-dynload``) ``CONFINE_PATH`` imports, where they are not built in
CONFINE_EXTENSIONS = ("_json", "fcntl")
INTERNAL_ERROR = 70
OUTPUT_UNWRITABLE = 74  # sysexits.h EX_IOERR
INTERRUPTED = 130


def main(argv: list[str] | None = None) -> None:
    """Run the CLI with ``argv`` (default ``sys.argv[1:]``); exits the process with the status."""
    _occupy_closed_stdio()
    args = list(sys.argv[1:] if argv is None else argv)
    if "confine" in args[: args.index("--") if "--" in args else len(args)]:
        from .._lazy import module_bytecode, read_ahead

        read_ahead(module_bytecode(CONFINE_PATH, CONFINE_EXTENSIONS))
    if os.environ.get("SANDBOX_SHIM_CRASH_AT"):  # tests only: kill -9 at a chosen side effect
        from .. import crashpoints

        crashpoints.install()
    status, fast = _run(args, reset_signals=True)
    if status == OUTPUT_UNWRITABLE:
        _drop_stdout()
    if fast:
        _flush()
        os._exit(status)
    sys.exit(status)


def _drop_stdout() -> None:
    """After standard output could not be written (reported, status 74): what is left in its buffer
    goes to /dev/null, so the interpreter's last flush at exit cannot fail again (which would print
    "Exception ignored" and turn the status into 120).  Never raises."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.close(null)
    except OSError:
        pass


def _no_cycle_collection() -> None:
    """Turn the cyclic garbage collector off for the rest of this process: a lifecycle verb's process
    lives some milliseconds, and ``create`` paid ~3 ms CPU (of ~55) for ~20 collections triggered by
    the allocations of its imports, finding almost nothing (``state``/``kill``: ~0.2 ms).  Reference
    counting still frees everything that is not in a cycle; what is (an exception's traceback and its
    frames) is freed when the process exits, which it does right after the verb.  No verb relies on a
    collection: every fd and lock is closed explicitly (``try``/``finally``, ``scoped``), and the
    processes create forks exec or exit at once.  ``confine`` likewise until its command starts: when
    it waits for the command it turns the collector back on (``confine_launch.run_spec``).
    Only the process's own CLI (``main``): the library and an in-process ``run`` keep their collector."""
    import gc

    gc.disable()


def _default_signals() -> None:
    """A parent that ignores SIGCHLD or blocks signals passes that on to us and to bwrap, whose monitor
    would then lose the sandbox's exit status (auto-reaped children): start from the defaults.  Windows
    has neither SIGCHLD nor signal masks (nothing is inherited there to undo); a refusal of the OS is
    not ours to report, so this never raises."""
    if sys.platform == "win32":
        return
    sigchld = getattr(_signal, "SIGCHLD", None)
    mask = getattr(_signal, "pthread_sigmask", None)
    try:
        if sigchld is not None:
            _signal.signal(sigchld, _signal.SIG_DFL)
        if mask is not None:
            mask(_signal.SIG_SETMASK, ())
    except (OSError, ValueError):
        pass


def _occupy_closed_stdio() -> None:
    """Open /dev/null on each of fds 0, 1 and 2 that is closed, as daemons do before their work: the
    next file this process opens would otherwise get that number, and a verb hands fds 0-2 to the
    sandbox as its stdio (a state lock or the start FIFO would leak into it).  ``sys.stdout``/
    ``sys.stderr`` stay as the interpreter set them (None for a closed fd), so lost output is still
    told apart (``_stand_in_for_closed_stdio``)."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)  # the lowest free number: this one, lower ones are open
            os.set_inheritable(null, True)  # os.open's fds are close-on-exec (PEP 446): stdio is inherited


def run(args: list[str]) -> int:
    """The boundary: run one command line (global flags, command, its arguments); return the exit
    status.  Never raises: every exception becomes a status and one line (``output.report``)."""
    return _run(args)[0]


def _run(args: list[str], reset_signals: bool = False) -> tuple[int, bool]:
    """``(status, fast)``: fast when the command was a lifecycle verb or ``confine`` (or the global
    flags were wrong).
    ``reset_signals`` (the process's own CLI, ``main``): SIGCHLD and the signal mask to their defaults
    first, inside the boundary; for a lifecycle verb, no cyclic garbage collection
    (``_no_cycle_collection``)."""
    from .output import Globals, report

    closed_stdout = _stand_in_for_closed_stdio()
    g = Globals()
    fast = True
    try:
        if reset_signals:
            _default_signals()
        from .flags import parse_globals

        g, rest = parse_globals(args)
        fast = bool(rest) and (rest[0] in FAST_VERBS or rest[0] == "confine")  # ends with os._exit
        if fast and reset_signals:  # confine: until its command runs (run_spec turns it back on)
            _no_cycle_collection()
        status = _dispatch(g, rest)
    except SystemExit as e:  # a command that ends with a status of its own (run, exec, validate)
        status = _exit_code(e.code)
    except BaseException as e:  # the catch-all: nothing escapes as a bare traceback
        return status_of(g, e), fast
    try:  # the output is part of the answer: one that could not be written is not a success
        sys.stdout.flush()
        if closed_stdout is not None and closed_stdout.getvalue():
            return report(g, output_error("standard output is closed")), fast
    except (OSError, ValueError) as e:
        return report(g, output_error(str(getattr(e, "strerror", None) or e))), fast
    return status, fast


def status_of(g: Globals, e: BaseException) -> int:
    """The boundary's answer to what a command raised: its documented exit status, after one line
    on stderr (``output.report``).  Ctrl-C is 130 (no line); output that could not be written is 74;
    a ``ShimError`` its own status; anything else 70 (the traceback with ``--debug``)."""
    from ..errors import ShimError
    from .output import report

    if isinstance(e, KeyboardInterrupt):
        return INTERRUPTED
    if _is_output_failure(e):
        return report(g, output_error(str(getattr(e, "strerror", e))))
    return report(g, e if isinstance(e, ShimError) else internal_error(e, g.debug))


def _stand_in_for_closed_stdio() -> io.StringIO | None:
    """A closed fd 1 or 2 (the interpreter then sets ``sys.stdout``/``sys.stderr`` to None) gets an
    in-memory stand-in, so no write raises; returns the stdout stand-in, to tell if output was lost."""
    if sys.stderr is None:
        sys.stderr = io.StringIO()  # errors are lost, their exit status is not
    if sys.stdout is None:
        sys.stdout = out = io.StringIO()
        return out
    return None


def _is_output_failure(e: BaseException) -> bool:
    """A write to stdout that failed: a closed pipe, or a full disk behind a redirection (write(2):
    EPIPE, ENOSPC, EDQUOT; no file name, unlike a failed file operation)."""
    import errno

    return (
        isinstance(e, OSError) and e.filename is None and e.errno in (errno.EPIPE, errno.ENOSPC, errno.EDQUOT)
    )


def output_error(why: str) -> ShimError:
    """The error for output that could not be written: exit status 74 (sysexits.h EX_IOERR)."""
    from ..errors import OutputUnwritable

    return OutputUnwritable("", why)


def internal_error(e: BaseException, debug: bool) -> ShimError:
    """A ``ShimError`` standing for an unexpected exception (with ``debug``: traceback on stderr first)."""
    from ..errors import ShimError

    if debug:
        import traceback

        traceback.print_exception(e)
    err = ShimError(
        f"internal error: {type(e).__name__}: {str(e)[:200]}",
        "" if debug else "rerun with --debug for the traceback, and report it",
    )
    err.exit_status = INTERNAL_ERROR
    err.kind = "internal"
    return err


def _exit_code(code: object) -> int:
    """``SystemExit.code`` as a status, as the interpreter maps it (None: 0; text: printed, 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    try:
        sys.stderr.write(f"{code}\n")
    except (OSError, ValueError):
        pass
    return 1


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:  # None: the fd was closed when the interpreter started
                stream.flush()
        except (OSError, ValueError):  # a closed pipe (podman reads state's stderr never): nothing to do
            pass


def _dispatch(g: object, rest: list[str]) -> int:
    from .output import Globals

    assert isinstance(g, Globals)
    verb = rest[0] if rest else None
    if verb == "confine":  # once per confined command: no click either
        from . import confine_run

        return confine_run.run(rest[1:])
    if verb in FAST_VERBS:
        from . import lifecycle

        if {"-h", "--help"} & set(rest):
            sys.stdout.write((lifecycle.__doc__ or "").strip() + "\n")
            return 0
        return lifecycle.main(rest, g)
    from .app import run_click

    return run_click(g, rest)
