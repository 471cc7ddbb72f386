"""Running one command confined: the library side of ``sandbox-shim confine``.

``launch(options, command)`` takes the options as the command line (or ``--settings`` file) gives them
(``OPTIONS``: camelCase keys, as in schemas/confine-settings.schema.json), builds the confinement
(``confinement.confine``) and runs the launch spec (``run_spec``), returning the command's exit
status; with ``dry_run`` it returns the launch spec's printable form (``confinement.describe``)
instead.

``run_spec``: when nothing must happen after the command (no egress allow-list, no placeholders for
missing protected names, no git snapshot) this process execs the command, so the caller waits on it
directly.  Otherwise the command runs as this process's child and this process waits: it serves the
egress proxy meanwhile (a thread), and when the command has ended releases the launch spec
(``LaunchSpec.release``: placeholders removed, repositories the command created disarmed, each one
warned about on stderr and in the report) *before* it exits with the command's status — the caller
gets control back only once the release is done, so its next ``git`` command never sees a repository
the command armed.  Signals: SIGINT and SIGQUIT, which a terminal sends to its whole foreground
process group, are left to the command (ignored here); SIGTERM and SIGHUP are passed on to it (the
release still follows its end); a command killed by a signal is reported by this process being
killed by the same signal (as a shell sees it).  kill -9 of this process ends the sandbox too
(bwrap ``--die-with-parent``); its placeholders and snapshot are released by the next run
(``confine_journal.sweep``).

Errors are raised, never printed: ``UsageError`` (status 2) for options or a settings file that cannot
be used and for paths ``confine`` refuses; ``CannotEnforce`` (5) when the confinement cannot be built
here; ``CouldNotRun`` (127/126) when the command is not found or cannot be executed.

Start-up matters (confine runs once per confined command; scripts/bench): nothing heavy is imported
on the way to the command — no json, enum, typing or jsonschema (the settings file's schema check loads
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


def launch(opts: dict[str, Any], command: list[str], dry_run: bool = False) -> dict[str, Any] | int:
    """Confine ``command`` under ``opts`` and run it (``run_spec``): returns its exit status (or
    execs it); with ``dry_run`` (or the ``printLaunchSpec`` option) release the spec and return its
    printable form instead."""
    from . import confinement

    spec = prepare(opts, command)
    if dry_run or opts.get("printLaunchSpec"):
        spec.release()  # nothing ran: nothing to disarm
        return confinement.describe(spec)
    return run_spec(spec)


#: signals passed on to the command while this process waits for it (SIGTERM, SIGHUP)
FORWARDED = (15, 1)
#: signals a terminal sends to the whole foreground group: the command's to handle (SIGINT, SIGQUIT)
LEFT_TO_THE_COMMAND = (2, 3)
#: Linux: bwrap runs the command through the confinement's helper, which sets SIGINT and SIGQUIT to
#: their defaults right before it execs the command (``confine_exec.c``, ``landlock.main``), so
#: bwrap itself is started with them ignored: a terminal's ^C reaches the whole foreground group,
#: and bwrap dying of it would tear the sandbox (and the command's handling of ^C) down
KEEPS_TERMINAL_SIGNALS_IGNORED = sys.platform.startswith("linux")


def run_spec(spec: LaunchSpec) -> int:
    """Run the launch spec's command and return its exit status once the spec is released (module
    docstring); exec it instead when nothing must follow it.  A command killed by a signal: this
    process kills itself with the same signal after the release (128 + the signal if it survives).

    Raises: CouldNotRun when the command cannot be executed (nothing ran; the spec is released)."""
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()
    if spec.egress is None and not spec.placeholders and not spec.snapshot:
        _exec(spec)
    if sys.platform == "win32":  # no fork(2); confine has no Windows backend (platforms.select)
        raise UsageError("confine is not supported on Windows")
    import _signal as signal  # type: ignore[import-not-found]  # C module: no enum (signal.py)
    import gc

    gc.enable()  # the CLI turned it off for a short life; this process lives as long as the command
    saved = {s: signal.getsignal(s) for s in (*FORWARDED, *LEFT_TO_THE_COMMAND)}
    for s in LEFT_TO_THE_COMMAND:  # before the fork: no ^C may end this process before the release
        signal.signal(s, signal.SIG_IGN)
    pending: list[int] = []
    for s in FORWARDED:  # until the child exists, a signal is kept for it
        signal.signal(s, lambda sig, _frame: pending.append(sig))
    try:
        pid = _spawn(spec, saved)
    except BaseException:
        spec.release()
        raise
    try:
        for s in FORWARDED:
            signal.signal(s, lambda sig, _frame: _forward(pid, sig))
        for sig in pending:
            _forward(pid, sig)
        if spec.egress is not None:
            spec.egress.start()  # a thread of this process, serving while the command runs
        status = _wait(pid)
    finally:
        changed = spec.release()
    if changed:
        warn_disarmed(changed, spec.report)
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        return 128 + sig
    return os.waitstatus_to_exitcode(status)


def _forward(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except OSError:
        pass  # ended already: its status is on its way


def _wait(pid: int) -> int:
    """waitpid(2) for ``pid``, through signals (PEP 475 retries; a handler that raised is ignored)."""
    while True:
        try:
            return os.waitpid(pid, 0)[1]
        except ChildProcessError:
            return 0
        except InterruptedError:
            continue


def _spawn(spec: LaunchSpec, saved: dict[int, Any]) -> int:
    """fork(2) and exec the command in the child (signal dispositions as the caller left them, and
    SIGPIPE/SIGXFSZ to their defaults, which the interpreter ignores); returns its pid.  An exec that
    fails is told through a close-on-exec pipe.  Raises CouldNotRun."""
    if sys.platform == "win32":  # no fork(2)
        raise UsageError("confine is not supported on Windows")
    import _signal as signal

    rd, wr = os.pipe()  # close-on-exec both (PEP 446)
    pid = os.fork()
    if pid == 0:
        try:
            os.close(rd)
            for s, how in saved.items():
                if s in LEFT_TO_THE_COMMAND and KEEPS_TERMINAL_SIGNALS_IGNORED:
                    continue  # ignored by bwrap; the confinement's helper restores them for the command
                signal.signal(s, how if how is not None else signal.SIG_DFL)
            for name in ("SIGPIPE", "SIGXFSZ"):
                if hasattr(signal, name):
                    signal.signal(getattr(signal, name), signal.SIG_DFL)
            _close_inherited(keep=wr)
            os.chdir(spec["cd"])
            os.execve(spec["cmd"], [spec["cmd"], *spec["args"]], spec["env"])
        except OSError as e:
            os.write(wr, b"%d" % (e.errno or 0))
        except BaseException:
            pass
        os._exit(127)
    os.close(wr)
    try:
        failed = os.read(rd, 16)
    finally:
        os.close(rd)
    if failed:
        _wait(pid)
        import errno

        code = int(failed) if failed.isdigit() else 0
        why = "not_found" if code == errno.ENOENT else "exec_failed"
        raise CouldNotRun(why, spec["cmd"], os.strerror(code) if code else "")
    return pid


def _exec(spec: LaunchSpec) -> NoReturn:
    """Replace this process by the launch spec's command.  Raises CouldNotRun when the exec fails."""
    import _signal as signal

    for name in ("SIGPIPE", "SIGXFSZ"):  # the interpreter ignores them; the command gets the defaults
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_DFL)
    if KEEPS_TERMINAL_SIGNALS_IGNORED:  # bwrap must not die of ^C; the helper restores them
        for s in LEFT_TO_THE_COMMAND:
            signal.signal(s, signal.SIG_IGN)
    try:
        _close_inherited()
        os.chdir(spec["cd"])
        os.execve(spec["cmd"], [spec["cmd"], *spec["args"]], spec["env"])
    except OSError as e:
        import errno

        why = "not_found" if e.errno == errno.ENOENT else "exec_failed"
        raise CouldNotRun(why, spec["cmd"], e.strerror or "") from e


def _close_inherited(keep: int = -1) -> None:
    """Close every fd above 2 but ``keep`` (close_range(2) where the kernel has it): an fd the caller
    opened on a file outside the permit path would otherwise reach the command, past the
    confinement (bwrap passes fds through).  Only stdin, stdout and stderr go to the command."""
    top = os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 65536
    if keep >= 3:
        os.closerange(3, keep)
        os.closerange(keep + 1, max(top, keep + 1))
    else:
        os.closerange(3, top)


def warn_disarmed(changed: list[str], report: str | None) -> None:
    """One stderr line (and a report record) per repository the command created and that was
    disarmed (``confine_git.disarm``).  Never raises (the command has ended; nobody else is told)."""
    for path in changed:
        line = (
            f"sandbox-shim confine: warning: {path!r} was made or changed inside the confinement and "
            "could run code at your next git command; moved aside as *.sandbox-shim-disarmed (inspect it)\n"
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
