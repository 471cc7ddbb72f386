"""``sandbox-shim confine`` without click: run one trusted command confined to a directory.

Usage::

    sandbox-shim confine [--settings FILE] [--permit-path DIR] [--permit-extra-subpath DIR]...
        [--permit-read PATH]... [--allow-host HOST]... [--report FILE] [--allow-protected-writes]
        [--cd DIR] [--print-launch-spec] -- CMD [ARGS]...

Parsed here without click (``cli/__init__.py`` sends ``confine`` straight to ``main``: it runs once per
confined command, so its start-up is measured, in scripts/bench).  Calls
``sandbox_shim.hardening.confinement.confine``, then execs the launch spec so the caller waits on the
confined command directly.  With ``--allow-host`` a forked child serves the egress proxy until the
command ends (it gets SIGTERM when the exec'd process exits: PR_SET_PDEATHSIG, prctl(2)); the same
child removes the placeholders made for missing protected names.

``--settings FILE`` holds the same options as JSON (schemas/confine-settings.schema.json); options on
the command line override its scalars and add to its lists; relative paths in it are taken against
the file's directory.  Exit status: the command's own; 2 for a usage or settings error; 5 when the
confinement cannot be built here (nothing is run).
"""

from __future__ import annotations

import os
import sys

from ..errors import CannotEnforce, UsageError
from .output import Globals, fail

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

Exit status: CMD's own; 2 for a usage or settings error; 5 when the confinement cannot be built.
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


def load_settings(path: str) -> dict[str, object]:
    """Read and validate a settings file; relative paths resolved against its directory.

    Raises: UsageError naming the JSON pointer of the first problem and how to fix it.
    """
    from importlib import resources

    import jsonschema

    from .. import jsonguard

    try:
        with open(path, "rb") as fh:
            data = fh.read(jsonguard.MAX_BYTES + 1)
    except OSError as e:
        raise UsageError(f"settings {path}: {e.strerror}") from e
    doc, problems = jsonguard.loads(data, "the settings file")  # depth, size, NUL: before the schema
    if problems:
        raise UsageError(f"settings {path}: {problems[0].line()}")
    import json

    schema = json.loads(
        resources.files("sandbox_shim.schemas")
        .joinpath("confine-settings.schema.json")
        .read_text(encoding="utf-8")
    )
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(doc), key=lambda e: list(e.path))
    if errors:
        first = errors[0]
        pointer = "".join(f"/{p}" for p in first.absolute_path)
        if first.validator == "additionalProperties" and isinstance(first.instance, dict):
            known = set(first.schema.get("properties", {}))
            extra = sorted(set(first.instance) - known)
            pointer += f"/{extra[0]}" if extra else ""
            raise UsageError(
                f"settings {path}: {pointer or '/'}: unknown key; known keys: {', '.join(sorted(known))}"
            )
        raise UsageError(f"settings {path}: {pointer or '/'}: {first.message}")
    assert isinstance(doc, dict)  # the schema's top level is an object
    base = os.path.dirname(os.path.abspath(path))

    def absolute(p: str) -> str:
        return p if os.path.isabs(p) else os.path.join(base, p)

    for key in ("permitPath", "report", "cd"):
        if key in doc:
            doc[key] = absolute(doc[key])
    for key in ("permitExtraSubpaths", "permitRead"):
        if key in doc:
            doc[key] = [absolute(p) for p in doc[key]]
    return doc


def merged(opts: dict[str, object]) -> dict[str, object]:
    """Settings file (if any) overlaid with the command line: scalars replaced, lists extended."""
    if "settings" not in opts:
        return opts
    out = load_settings(str(opts["settings"]))
    for k, v in opts.items():
        if isinstance(v, list):
            out[k] = [*out.get(k, []), *v]  # type: ignore[misc]
        else:
            out[k] = v
    return out


def _warn_disarmed(changed: list[str], report: str | None) -> None:
    """One stderr line (and a report record) per repository the command created and that was
    disarmed (``confine_git.disarm``)."""
    for path in changed:
        line = (
            f"sandbox-shim confine: warning: {path!r} was created inside the confinement and could run "
            "code at your next git command; moved aside as *.sandbox-shim-disarmed (inspect it)\n"
        )
        if path.startswith("!"):  # confine_git.TOO_LARGE: nothing could be checked
            line = (
                f"sandbox-shim confine: warning: repositories created inside were not checked: "
                f"{path[1:]!r}; do not run git there before inspecting it\n"
            )
        try:
            os.write(2, line.encode("utf-8", "backslashreplace"))
        except OSError:
            pass
        if report:
            import json
            import time

            rec = {
                "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "event": "disarmed",
                "path": path,
                "operation": "git-config-or-hooks",
            }
            try:
                with open(report, "a", encoding="utf-8") as fh:
                    fh.write(json.dumps(rec) + "\n")
            except OSError:
                pass


def _serve_after(spec: object) -> None:
    """Fork the child that outlives the exec: it serves the egress proxy (if any) and, when the
    exec'd command's process ends, removes the placeholders (``LaunchSpec.release``)."""
    import _signal as signal  # type: ignore[import-not-found]  # C module: no enum (signal.py)

    egress = spec.egress  # type: ignore[attr-defined]
    parent = os.getpid()
    pid = os.fork()
    if pid != 0:
        return
    try:
        from ..hardening.confinement import die_with_parent

        def done(*_: object) -> None:
            changed = spec.release()  # type: ignore[attr-defined]
            if changed:
                _warn_disarmed(changed, spec.report)  # type: ignore[attr-defined]
            os._exit(0)

        signal.signal(signal.SIGTERM, done)
        die_with_parent(signal.SIGTERM)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's ^C is the command's to handle
        if os.getppid() != parent:
            done()
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1):
            os.dup2(devnull, fd)
        if egress is not None:
            egress.serve_forever()
        while True:
            signal.pause()
    finally:
        os._exit(0)


def run(argv: list[str], g: Globals | None = None) -> int:
    """Parse ``argv`` (after ``confine``), build the confinement, exec it (or print it); returns only
    for ``--print-launch-spec`` and help."""
    g = g or Globals()
    if argv[:1] in (["-h"], ["--help"]):
        sys.stdout.write(USAGE + "\n")
        return 0
    try:
        opts = merged(parse(argv)[0])
        command = parse(argv)[1]
        if "permitPath" not in opts:
            raise UsageError("confine: --permit-path DIR is required (or permitPath in --settings)")
    except UsageError as e:
        fail(g, e)
    from ..hardening import confinement

    env = confinement.caller_environ()
    name = command[0]
    start = str(opts.get("cd") or opts["permitPath"])
    found = confinement.resolve_executable(name, env.get("PATH", os.defpath), os.path.abspath(start))
    if found == name and not (os.path.isfile(os.path.join(start, name)) and "/" in name):
        from ..errors import CouldNotRun

        # not found (or not executable) here: inside it cannot be either; one line, the name escaped
        fail(g, CouldNotRun("not_found", repr(name), "not on PATH or not an executable file"))
    try:
        spec = confinement.confine(
            (command[0], command[1:]),
            permit_path=str(opts["permitPath"]),
            cd=opts.get("cd"),  # type: ignore[arg-type]
            env=env,
            permit_extra_subpaths=list(opts.get("permitExtraSubpaths", [])),  # type: ignore[call-overload]
            permit_read=list(opts.get("permitRead", [])),  # type: ignore[call-overload]
            allow_hosts=opts.get("allowHosts"),  # type: ignore[arg-type]
            report=opts.get("report"),  # type: ignore[arg-type]
            protect=not opts.get("allowProtectedWrites", False),
            settings_file=opts.get("settings"),  # type: ignore[arg-type]
            trial=False,
        )
    except CannotEnforce as e:
        fail(g, e)
    except (ValueError, OSError) as e:
        fail(g, UsageError(str(e)))
    if opts.get("printLaunchSpec"):
        import json

        spec.release()  # nothing ran: nothing to disarm
        sys.stdout.write(json.dumps(confinement.describe(spec), indent=2) + "\n")
        sys.stdout.flush()
        return 0
    sys.stdout.flush()
    sys.stderr.flush()
    if spec.egress is not None or spec.placeholders or spec.snapshot:
        _serve_after(spec)
    try:
        os.chdir(spec["cd"])
        os.execve(spec["cmd"], [spec["cmd"], *spec["args"]], spec["env"])
    except OSError as e:
        import errno

        from ..errors import CouldNotRun

        why = "not_found" if e.errno == errno.ENOENT else "exec_failed"
        fail(g, CouldNotRun(why, spec["cmd"], e.strerror or ""))
    return 126  # not reached
