"""Command-line entry point and its one error boundary.

The global flags are parsed once (``cli.flags``).  Lifecycle verbs (create/start/state/kill/delete)
then take a fast path without click (``cli.lifecycle``, runc grammar, no heavy imports); everything
else goes to the click group in ``cli.app``.

Every path ends here in a documented exit status (README "Exit statuses") and at most one line on
stderr (a JSON record with ``--log-format json``): a ``ShimError`` gives its own status; an
unexpected exception gives ``INTERNAL_ERROR`` (70, EX_SOFTWARE in sysexits.h) with a hint to rerun
with ``--debug``, which adds the traceback.
"""

from __future__ import annotations

import _signal as signal  # type: ignore[import-not-found]  # C module: no enum (signal.py) at start-up
import sys

FAST_VERBS = frozenset({"create", "start", "state", "kill", "delete"})
INTERNAL_ERROR = 70
INTERRUPTED = 130


def main(argv: list[str] | None = None) -> None:
    """Run the CLI with ``argv`` (default ``sys.argv[1:]``); exits the process."""
    import os

    if os.environ.get("SANDBOX_SHIM_CRASH_AT"):  # tests only: kill -9 at a chosen side effect
        from .. import crashpoints

        crashpoints.install()
    args = list(sys.argv[1:] if argv is None else argv)
    # A parent that ignores SIGCHLD or blocks signals passes that on to us and to bwrap, whose monitor
    # would then lose the sandbox's exit status (auto-reaped children): start from the defaults.
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, ())
    from .output import Globals, fail

    g = Globals()
    try:
        from .flags import parse_globals

        g, rest = parse_globals(args)
        sys.exit(_dispatch(g, rest))
    except SystemExit:
        raise
    except KeyboardInterrupt:
        sys.exit(INTERRUPTED)
    except BaseException as e:  # the boundary: nothing escapes as a bare traceback
        from ..errors import ShimError

        if isinstance(e, ShimError):
            fail(g, e)
        fail(g, internal_error(e, g.debug))


def internal_error(e: BaseException, debug: bool) -> Exception:
    """A ``ShimError`` standing for an unexpected exception (with ``debug``: traceback on stderr first)."""
    from ..errors import ShimError

    if debug:
        import traceback

        traceback.print_exception(e)
    err = ShimError(f"internal error: {type(e).__name__}: {str(e)[:200]}",
                    "" if debug else "rerun with --debug for the traceback, and report it")
    err.exit_status = INTERNAL_ERROR
    err.kind = "internal"
    return err


def _dispatch(g: object, rest: list[str]) -> int:
    from .output import Globals

    assert isinstance(g, Globals)
    verb = rest[0] if rest else None
    if verb == "confine":  # once per confined command: no click either
        from . import confine_run

        return confine_run.run(rest[1:], g)
    if verb in FAST_VERBS:
        from . import lifecycle

        if {"-h", "--help"} & set(rest):
            sys.stdout.write((lifecycle.__doc__ or "").strip() + "\n")
            return 0
        return lifecycle.main(rest, g)
    from .app import run_click

    return run_click(g, rest)
