"""The lifecycle verbs in runc's grammar, parsed by hand to keep each call cheap.

  [global flags] create [-b|--bundle DIR] [--pid-file F] [--console-socket S] [--preserve-fds N] ID
  [global flags] start ID
  [global flags] state ID
  [global flags] kill [-a|--all] ID [SIGNAL]        SIGNAL: TERM, SIGTERM or 15 (default TERM)
  [global flags] delete [-f|--force] ID
Global flags (before the verb): see ``cli.flags``.

Flags may come before or after the id.  A missing id fails (the OCI validation suite checks this).
"""

from __future__ import annotations

import sys

from ..errors import UsageError
from .output import Globals, attach_telemetry, log

TYPE_CHECKING = False
if TYPE_CHECKING:
    import signal as _signal
else:
    import _signal  # the C module: ``signal`` would load enum (Signals is an IntEnum) on every verb

_VALUE_FLAGS = {
    "create": {
        "-b": "bundle",
        "--bundle": "bundle",
        "--pid-file": "pid_file",
        "--console-socket": "console_socket",
        "--preserve-fds": "preserve_fds",
    },
    "start": {},
    "state": {},
    "kill": {},
    "delete": {},
}
_BOOL_FLAGS = {
    "create": {"--no-pivot": "no_pivot", "--no-new-keyring": "no_new_keyring"},
    "start": {},
    "state": {},
    "kill": {"-a": "all", "--all": "all"},
    "delete": {"-f": "force", "--force": "force"},
}


def parse_signal(text: str) -> int:
    """``TERM``, ``SIGTERM``, ``term`` or ``15`` → 15 (signal(7) names).  Raises ``UsageError``."""
    t = text.strip().upper()
    if t.isdigit():
        n = int(t)
        if 0 < n < 65:
            return n
    else:
        name = t if t.startswith("SIG") else "SIG" + t
        sig = getattr(_signal, name, None) if "_" not in name else None  # not SIG_DFL, SIG_BLOCK, ...
        if isinstance(sig, int) and 0 < sig < 65:
            return sig
    raise UsageError(f"unknown signal {text!r}", "use a name such as TERM or KILL, or a number")


def _preserve_fds(text: object) -> int:
    """``--preserve-fds N``: a count >= 0 of fds from 3 up (runc grammar).  Whether those fds are open
    is checked once, by the mechanism that passes them on (``InvalidArgument``, status 2)."""
    if text is None:
        return 0
    t = str(text)
    if not t.isdigit():
        raise UsageError(f"--preserve-fds needs a number, not {t!r}")
    return int(t)


def parse(argv: list[str]) -> tuple[str, dict[str, object], list[str]]:
    """Split ``argv`` (the command and what follows; global flags are already taken off by
    ``cli.flags``) into (verb, options, positionals).  Raises ``UsageError``."""
    i = 0
    if not argv:
        raise UsageError("no command given")
    verb = argv[i]
    i += 1
    opts: dict[str, object] = {}
    pos: list[str] = []
    while i < len(argv):
        a = argv[i]
        if a == "--":
            pos += argv[i + 1 :]
            break
        if a.startswith("-") and len(a) > 1 and not (verb == "kill" and pos and a[1:].isdigit()):
            key, _, inline = a.partition("=")
            if key in _VALUE_FLAGS[verb]:
                if inline:
                    opts[_VALUE_FLAGS[verb][key]] = inline
                else:
                    i += 1
                    if i >= len(argv):
                        raise UsageError(f"{key} needs a value")
                    opts[_VALUE_FLAGS[verb][key]] = argv[i]
            elif key in _BOOL_FLAGS[verb]:
                opts[_BOOL_FLAGS[verb][key]] = inline.lower() not in ("false", "0") if inline else True
            else:
                raise UsageError(f"unknown flag {key} for {verb}")
        else:
            pos.append(a)
        i += 1
    return verb, opts, pos


def main(argv: list[str], g: Globals | None = None) -> int:
    """Run one lifecycle verb; return the exit status.  ``argv`` starts with the verb when ``g`` (the
    parsed global flags) is given, else with the global flags.  Errors propagate (to the boundary in
    ``cli.main``)."""
    if g is None:
        from .flags import parse_globals

        g, argv = parse_globals(argv)
    verb, opts, pos = parse(argv)
    attach_telemetry(g)
    if not pos:
        raise UsageError(f"{verb} needs a container id", f"usage: sandbox-shim {verb} [flags] ID")
    max_pos = 2 if verb == "kill" else 1
    if len(pos) > max_pos:
        raise UsageError(f"too many arguments for {verb}: {' '.join(pos[max_pos:])}")
    from .. import api

    # create makes a systemd scope with --systemd-cgroup; the other verbs read the record
    mech = api.default_mechanism(g.root, systemd_cgroup=g.systemd_cgroup)
    sid = pos[0]
    if verb == "create":
        from ..mechanism import Sandbox

        api.provision(
            mech,
            Sandbox(sid, str(opts.get("bundle") or ".")),
            pid_file=opts.get("pid_file"),  # type: ignore[arg-type]
            console_socket=opts.get("console_socket"),  # type: ignore[arg-type]
            preserve_fds=_preserve_fds(opts.get("preserve_fds")),
            stdio=(0, 1, 2),
        )  # OCI create: the caller's stdio is the container's
    elif verb == "start":
        api.start(mech, sid)
    elif verb == "state":
        doc = api.status(mech, sid).to_oci(with_exit_status=True)
        from .. import fastjson

        sys.stdout.write(fastjson.dumps(doc, indent=2) + "\n")
    elif verb == "kill":
        signum = parse_signal(pos[1]) if len(pos) > 1 else int(_signal.SIGTERM)
        api.signal(mech, sid, signum, bool(opts.get("all")))
    elif verb == "delete":
        api.destroy(mech, sid, force=bool(opts.get("force")))
    log(g, "info", f"{verb} {sid}: ok") if g.debug else None
    return 0
