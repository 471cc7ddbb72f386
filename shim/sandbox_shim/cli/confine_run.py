"""``sandbox-shim confine`` without click: parse the command line, make one library call, render.

Usage::

    sandbox-shim confine [--settings FILE] [--permit-path DIR] [--permit-extra-subpath DIR]...
        [--permit-read PATH]... [--allow-host HOST]... [--report FILE] [--allow-protected-writes]
        [--cd DIR] [--print-launch-spec] -- CMD [ARGS]...

Parsed here without click (``cli/__init__.py`` sends ``confine`` straight to ``run``: it runs once per
confined command, so its start-up is measured, in scripts/bench).  The work — the settings file, the
executable resolved once, the confinement, the child that outlives the exec, the exec itself — is
``sandbox_shim.hardening.confine_launch.launch``; what it raises goes to the boundary in
``cli/__init__.py``.

``--settings FILE`` holds the same options as JSON (schemas/confine-settings.schema.json); options on
the command line override its scalars and add to its lists; relative paths in it are taken against
the file's directory.  Exit status: the command's own; 2 for a usage or settings error; 5 when the
confinement cannot be built here (nothing is run); 127/126 when the command cannot be found or run.
"""

from __future__ import annotations

import sys

from ..errors import UsageError

USAGE = """\
Usage: sandbox-shim confine [OPTIONS] -- CMD [ARGS]...

  Run CMD with only the permit path (and extra subpaths) readable and writable, a private /tmp, the
  runtime CMD needs read-only, and everything else (siblings, .., home directories) out of reach.
  The environment passes through unmodified; egress is open unless --allow-host is given.

Options:
  --permit-path DIR           the one directory readable and writable (required here or in --settings)
  --permit-extra-subpath DIR  an extra read-write directory inside the permit path, no links (repeatable)
  --permit-read PATH          an extra read-only file or directory (repeatable)
  --allow-host HOST[:PORT]    egress only to HOST (name, *.domain, IP; ports 80/443 unless :PORT or :*)
                              through a proxy (repeatable)
  --report FILE               append JSON lines of what was denied and observed
  --allow-protected-writes    let .git/hooks, .git/config, shell rc files, ... be written
  --settings FILE             the same options as JSON (schemas/confine-settings.schema.json)
  --cd DIR                    where CMD starts (default: the permit path); not a boundary
  --print-launch-spec         print the launch spec as JSON (variable names only) instead of running

Exit status: CMD's own; 2 for a usage or settings error (a read-write path in sandbox-shim's state
directory included); 5 when the confinement cannot be built; 127 / 126 when CMD cannot be found / run.
"""
_LISTS = {
    "--permit-extra-subpath": "permitExtraSubpaths",
    "--permit-read": "permitRead",
    "--allow-host": "allowHosts",
}
_SCALARS = {"--permit-path": "permitPath", "--report": "report", "--cd": "cd", "--settings": "settings"}
_FLAGS = {"--allow-protected-writes": "allowProtectedWrites", "--print-launch-spec": "printLaunchSpec"}


def parse(argv: list[str]) -> tuple[dict[str, object], list[str]]:
    """``(options, command)`` from the arguments after ``confine``; raises UsageError."""
    opts: dict[str, object] = {}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            i += 1
            break
        if not a.startswith("-"):
            break
        name, eq, value = a.partition("=")
        if name in _FLAGS and not eq:
            opts[_FLAGS[name]] = True
            i += 1
            continue
        if name not in _LISTS and name not in _SCALARS:
            raise UsageError(f"confine: unknown option {name!r} (see sandbox-shim confine --help)")
        if not eq:
            if i + 1 >= len(argv):
                raise UsageError(f"confine: {name} needs a value")
            value = argv[i + 1]
            i += 1
        i += 1
        if name in _LISTS:
            listed = opts.setdefault(_LISTS[name], [])
            assert isinstance(listed, list)  # only this loop sets a list option
            listed.append(value)
        else:
            opts[_SCALARS[name]] = value
    command = argv[i:]
    if not command:
        raise UsageError("confine: no command given (sandbox-shim confine --permit-path DIR -- CMD ...)")
    return opts, command


def run(argv: list[str]) -> int:
    """Parse ``argv`` (after ``confine``) and launch (``confine_launch.launch``): returns the command's
    exit status (or execs it), 0 after ``--print-launch-spec`` and help."""
    if argv[:1] in (["-h"], ["--help"]):
        sys.stdout.write(USAGE + "\n")
        return 0
    from ..hardening.confine_launch import launch
    from .output import emit_json

    opts, command = parse(argv)
    result = launch(opts, command)
    if isinstance(result, int):
        return result
    emit_json(result)
    return 0
