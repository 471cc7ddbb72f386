"""Command-line entry point.  Lifecycle verbs take a fast path without click; the rest use click.

Orchestrators call create/start/state/kill/delete three or four times per container, so those verbs
are parsed by ``cli.lifecycle`` (runc grammar, no heavy imports).  Everything else goes to the click
group in ``cli.app``.
"""

from __future__ import annotations

import signal
import sys

FAST_VERBS = frozenset({"create", "start", "state", "kill", "delete"})
_GLOBAL_WITH_VALUE = frozenset({"--root", "--log", "--log-format", "--criu", "--rootless"})


def _verb(argv: list[str]) -> str | None:
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in _GLOBAL_WITH_VALUE:
            i += 2
            continue
        if a.startswith("-"):
            i += 1
            continue
        return a
    return None


def main(argv: list[str] | None = None) -> None:
    """Run the CLI with ``argv`` (default ``sys.argv[1:]``); exits the process."""
    args = list(sys.argv[1:] if argv is None else argv)
    # A parent that ignores SIGCHLD or blocks signals passes that on to us and to bwrap, whose monitor
    # would then lose the sandbox's exit status (auto-reaped children): start from the defaults.
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, ())
    if _verb(args) == "confine":  # once per confined command: no click either
        from . import confine_run

        sys.exit(confine_run.main(args))
    if _verb(args) in FAST_VERBS:
        from . import lifecycle

        if {"-h", "--help"} & set(args):
            sys.stdout.write((lifecycle.__doc__ or "").strip() + "\n")
            sys.exit(0)
        sys.exit(lifecycle.main(args))
    from .app import cli

    cli.main(args=args, prog_name="sandbox-shim")
