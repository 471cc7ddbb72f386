"""Running one command confined: the library side of ``sandbox-shim confine``.

``launch(options, command)`` takes the options as the command line (or ``--settings`` file) gives them
(``OPTIONS``: camelCase keys, as in schemas/confine-settings.schema.json), builds the confinement
(``confinement.confine``) and execs the launch spec, so the caller waits on the confined command
directly; with ``dry_run`` it returns the launch spec's printable form (``confinement.describe``)
instead.  It never returns otherwise.

Around the exec: with an egress allow-list, placeholders for missing protected names, or a git
snapshot, a forked child (``serve_after``) outlives the exec: it serves the egress proxy until the
command ends (a pidfd of the exec'd process turns readable, pidfd_open(2); else PR_SET_PDEATHSIG), then
releases the launch spec (``LaunchSpec.release``: placeholders removed, repositories the command
created disarmed, each one warned about on stderr and in the report).

Errors are raised, never printed: ``UsageError`` (status 2) for options or a settings file that cannot
be used and for paths ``confine`` refuses; ``CannotEnforce`` (5) when the confinement cannot be built
here; ``CouldNotRun`` (127/126) when the command is not found or cannot be executed.

Start-up matters (confine runs once per confined command; scripts/bench): nothing heavy is imported
on the way to the exec — no json, enum, typing or jsonschema (the settings file's schema check loads
jsonschema, only when a settings file is given).
"""

from __future__ import annotations

import os
import sys

from ..errors import CouldNotRun, UsageError

TYPE_CHECKING = False  # start-up cost: no typing at run time
if TYPE_CHECKING:
    from typing import Any, NoReturn

    from .confinement import LaunchSpec


def load_settings(path: str) -> dict[str, Any]:
    """Read and validate a settings file (a regular file: ``jsonguard.read_regular``; a FIFO or
    device is refused, not waited on); relative paths resolved against its directory.

    Raises: UsageError naming the JSON pointer of the first problem and how to fix it.
    """
    from importlib import resources

    import jsonschema

    from .. import fastjson, jsonguard

    try:  # a FIFO or device planted as the file must not block: the rule config.json follows
        data = jsonguard.read_regular(path)
    except OSError as e:
        raise UsageError(f"--settings {path}: {e.strerror}; name a regular JSON file") from e
    doc, problems = jsonguard.loads(data, "the settings file")  # depth, size, NUL: before the schema
    if problems:
        raise UsageError(f"settings {path}: {problems[0].line()}")
    schema = fastjson.loads(
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


def merged(opts: dict[str, Any]) -> dict[str, Any]:
    """Settings file (``opts["settings"]``, if any) overlaid with ``opts``: scalars replaced, lists
    extended."""
    if "settings" not in opts:
        return opts
    out = load_settings(str(opts["settings"]))
    for k, v in opts.items():
        out[k] = [*out.get(k, []), *v] if isinstance(v, list) else v
    return out


def prepare(opts: dict[str, Any], command: list[str]) -> LaunchSpec:
    """The launch spec for ``command`` under ``opts`` (merged with its settings file).

    The executable is resolved once, here, with the caller's PATH from the start directory: one
    that cannot be found (or executed) here cannot be inside either, and is refused before any
    confinement is built.
    """
    from . import confinement

    opts = merged(opts)
    if "permitPath" not in opts:
        raise UsageError("confine: --permit-path DIR is required (or permitPath in --settings)")
    if not command:
        raise UsageError("confine: no command given (sandbox-shim confine --permit-path DIR -- CMD ...)")
    env = confinement.caller_environ()
    name = command[0]
    start = str(opts.get("cd") or opts["permitPath"])
    found = confinement.resolve_executable(name, env.get("PATH", os.defpath), os.path.abspath(start))
    if found == name and not (os.path.isfile(os.path.join(start, name)) and "/" in name):
        raise CouldNotRun("not_found", repr(name), "not on PATH or not an executable file")
    try:
        return confinement.confine(
            (command[0], command[1:]),
            permit_path=str(opts["permitPath"]),
            cd=opts.get("cd"),
            env=env,
            permit_extra_subpaths=list(opts.get("permitExtraSubpaths", [])),
            permit_read=list(opts.get("permitRead", [])),
            allow_hosts=opts.get("allowHosts"),
            report=opts.get("report"),
            protect=not opts.get("allowProtectedWrites", False),
            settings_file=opts.get("settings"),
            trial=False,
        )
    except (ValueError, OSError) as e:  # a path confine refuses: the caller's to fix
        raise UsageError(str(e)) from e


def launch(opts: dict[str, Any], command: list[str], dry_run: bool = False) -> dict[str, Any]:
    """Confine ``command`` under ``opts`` and exec it (never returns); with ``dry_run`` (or the
    ``printLaunchSpec`` option) release the spec and return its printable form instead."""
    from . import confinement

    spec = prepare(opts, command)
    if dry_run or opts.get("printLaunchSpec"):
        spec.release()  # nothing ran: nothing to disarm
        return confinement.describe(spec)
    exec_spec(spec)


def exec_spec(spec: LaunchSpec) -> NoReturn:
    """Replace this process by the launch spec's command (``serve_after`` first, when something must
    outlive the exec).  Raises CouldNotRun when the exec fails."""
    import sys

    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()
    if spec.egress is not None or spec.placeholders or spec.snapshot:
        serve_after(spec)
    try:
        os.chdir(spec["cd"])
        os.execve(spec["cmd"], [spec["cmd"], *spec["args"]], spec["env"])
    except OSError as e:
        import errno

        why = "not_found" if e.errno == errno.ENOENT else "exec_failed"
        raise CouldNotRun(why, spec["cmd"], e.strerror or "") from e


def serve_after(spec: LaunchSpec) -> None:
    """Fork the child that outlives the exec: it serves the egress proxy (if any) and, when the
    exec'd command's process ends, releases the spec (``LaunchSpec.release``).  Returns in the parent.

    The child learns of the end from a pidfd of this process (pidfd_open(2), Linux 5.3: it turns
    readable when the process exits, whatever it exec'd), opened before the fork so it cannot name a
    later process with a reused pid; without pidfds, from ``PR_SET_PDEATHSIG`` (SIGTERM when the
    parent ends; ``confinement.die_with_parent``).  A SIGTERM sent to it releases the spec too."""
    if sys.platform == "win32":  # no fork(2); confine has no Windows backend (platforms.select)
        raise UsageError("confine is not supported on Windows")
    import _signal as signal  # type: ignore[import-not-found]  # C module: no enum (signal.py)

    egress = spec.egress
    parent = os.getpid()
    try:
        watch: int | None = os.pidfd_open(parent)  # type: ignore[attr-defined,unused-ignore]  # Linux only
    except (AttributeError, OSError):  # macOS; a kernel before 5.3
        watch = None
    pid = os.fork()
    if pid != 0:
        if watch is not None:
            os.close(watch)
        return
    try:
        import gc

        gc.enable()  # the CLI turned it off for its short life; this child lives as long as the command

        def done(*_: object) -> None:
            changed = spec.release()
            if changed:
                warn_disarmed(changed, spec.report)
            os._exit(0)

        signal.signal(signal.SIGTERM, done)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's ^C is the command's to handle
        if watch is None:
            from .confinement import die_with_parent

            die_with_parent(signal.SIGTERM)
        if os.getppid() != parent:  # the parent ended before the watch was set: release now
            done()
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1):
            os.dup2(devnull, fd)
        if watch is not None:
            import select

            if egress is not None:
                egress.start()  # a thread of this child; the main thread waits for the command's end
            waiter = select.poll()  # poll(2): no FD_SETSIZE limit on the pidfd's number
            waiter.register(watch, select.POLLIN)
            while not waiter.poll():
                pass
            done()
        if egress is not None:
            egress.serve_forever()
        while True:
            signal.pause()
    finally:
        os._exit(0)


def warn_disarmed(changed: list[str], report: str | None) -> None:
    """One stderr line (and a report record) per repository the command created and that was
    disarmed (``confine_git.disarm``).  Never raises (the command has ended; nobody else is told)."""
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
            import time

            from .. import fastjson

            rec = {
                "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "event": "disarmed",
                "path": path,
                "operation": "git-config-or-hooks",
            }
            try:
                with open(report, "a", encoding="utf-8") as fh:
                    fh.write(fastjson.dumps(rec) + "\n")
            except OSError:
                pass
