"""The control-plane confinement profile: a *trusted* process holding a credential, kept to one directory.

This is the mirror image of the tenant profile (``hardening/tenant.py``), not a smaller one, and it
shares nothing with it: the environment passes through unmodified (credential included), egress is
allowed unless an allow-list is given, and the boundary is the file system.  ``permit_path`` (plus
explicit extra subpaths, none by default) is readable and writable; a runtime read set (system trees,
and what the resolved executable needs to run: ``readset.py``) is read-only; ``/tmp`` is private and
writable; protected names inside the read-write paths stay read-only (``confine_sets.py``);
everything else — siblings, ``..``, home directories, the platform's own files — is absent or denied.

Layers:

* Linux: bwrap (mount namespace holding only those paths, a read-only tmpfs root, own pid and IPC
  namespaces with their own ``/proc``, every capability dropped, network shared — or, with an
  allow-list, a network namespace of its own whose only way out is the egress proxy's socket) and,
  where the kernel has it, Landlock over the same sets plus, from ABI 6, the abstract-unix-socket
  and signal scopes, applied inside the sandbox just before the exec (``platforms/linux/confine.py``).
* macOS: a deny-default SBPL profile for ``sandbox-exec`` (``platforms/darwin/confine.py``).

This module is platform-neutral: it reaches the renderer for this OS through
``platforms/select.py`` (``confine_backend``) only.

``confine`` returns a launch spec or raises ``CannotEnforce``; never a spec without the confinement.
Linux runs the bwrap the sandboxes run (``platforms/linux/locate.py``: ``$SANDBOX_SHIM_BWRAP``, else
``bwrap`` on ``PATH``, else ``/usr/bin/bwrap``) unless ``confine(bwrap=...)`` names one.
"""

from __future__ import annotations

import os
import sys

from ..errors import CannotEnforce
from . import readset
from .confine_sets import LINUX_ETC, LINUX_SYSTEM, PROTECTED, Sets, build_sets

TYPE_CHECKING = False  # start-up cost (confine runs per command): no typing at run time
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

    from ..capability import Capability
    from .confine_backend import ConfineBackend
    from .egress import EgressProxy

__all__ = [
    "LINUX_ETC",
    "LINUX_SYSTEM",
    "PROTECTED",
    "LaunchSpec",
    "confine",
    "describe",
    "report",
    "resolve_executable",
    "caller_environ",
]

PROXY_ENV = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


class LaunchSpec(dict):  # type: ignore[type-arg]
    """``{"cmd": str, "args": list[str], "env": dict[str, str], "cd": str}``; launch ``[cmd, *args]``
    with ``env`` in ``cd``.  ``.layers`` names the confinement layers in force, e.g.
    ``("bwrap 0.8.0", "landlock ABI 7")``; ``.not_enforced`` what this host leaves open;
    ``.egress`` the proxy to serve (or None); ``.report`` the report file (or None);
    ``.relinked`` the protected files that had other hard links and were given an inode of their
    own before the launch (``confine_sets.unshare_links``)."""

    layers: tuple[str, ...] = ()
    not_enforced: tuple[str, ...] = ()
    egress: EgressProxy | None = None
    report: str | None = None
    placeholders: tuple[str, ...] = ()
    journal: str | None = None
    snapshot: str | None = None
    relinked: tuple[str, ...] = ()
    claim: str | None = None

    def release(self) -> list[str]:
        """After the command: close the egress proxy (if any), remove the empty placeholders made
        for missing protected names (``confine_sets.make_placeholders``) and disarm the git
        repositories the command created (``confine_git.check_snapshot``: their config reduced to
        safe keys, their hooks moved aside).  Returns the disarmed paths (warn the user about
        them).  Idempotent."""
        from .confine_journal import forget
        from .confine_sets import remove_placeholders

        if self.egress is not None:
            self.egress.close()
        remove_placeholders(self.placeholders)
        forget(self.journal)
        changed: list[str] = []
        if self.snapshot is not None:
            from .confine_git import check_snapshot

            changed = check_snapshot(self.snapshot)
        forget(self.claim)  # last: no other run takes these paths before this one's release is done
        self.placeholders, self.journal, self.snapshot, self.claim = (), None, None, None
        return changed


def caller_environ() -> dict[str, str]:
    """This process's environment as it was exec'd, unmodified.

    On Linux it is read from ``/proc/self/environ`` (proc(5)): the interpreter's startup may have
    added variables to ``os.environ`` (PEP 538 sets ``LC_CTYPE`` under the C locale), and the
    confined process must see exactly what the caller had.  Elsewhere (or when it cannot be read):
    a copy of ``os.environ``.  Read through the platform's confinement backend
    (``ConfineBackend.initial_environ``), which owns the parser.
    """
    from ..platforms.select import confine_backend

    backend = confine_backend()
    env = backend.initial_environ() if backend is not None else None
    return dict(os.environ) if env is None else env


def _within(path: str, root: str) -> bool:
    return readset.within(path, root)


def resolve_executable(cmd: str, path: str | None = None, cwd: str | None = None) -> str:
    """Resolve ``cmd`` once: a bare name through ``path`` (PATH syntax), then the symlink chain.

    Args:
        cmd: a bare name (``python3``), or a path (relative ones are taken against ``cwd``).
        path: the search path; default ``os.environ["PATH"]``.
        cwd: base for relative paths; default the current directory.

    Returns:
        The real path (``os.path.realpath``) of an executable regular file, or ``cmd`` unchanged
        when it cannot be resolved (not found, not executable), so the OS gives its own error.
    """
    if "/" in cmd:
        cand: str | None = os.path.join(cwd or os.getcwd(), cmd)
    else:
        cand = readset.resolve_name(cmd, path if path is not None else os.environ.get("PATH", os.defpath))
    if cand is None:
        return cmd
    real = os.path.realpath(cand)
    return real if os.path.isfile(real) and os.access(real, os.X_OK) else cmd


def executable_read_set(exe: str, path: str | None = None, env: Mapping[str, str] | None = None) -> list[str]:
    """What running ``exe`` needs read-only beyond the system trees (``readset.runtime_read_set``)."""
    e = dict(os.environ if env is None else env)
    if path is not None:
        e["PATH"] = path
    return readset.runtime_read_set(exe, e)


def _resolve_dir(p: str, what: str) -> str:
    real = os.path.realpath(p)
    if not os.path.isdir(real):
        raise ValueError(f"{what} {p!r} is not an existing directory")
    if real == "/":
        raise ValueError(f"{what} must not be / (it would permit everything)")
    return real


def resolve_subpath(p: str, permit: str, given: str | None = None, what: str = "permit_extra_subpath") -> str:
    """``p`` as a directory inside ``permit`` (a resolved permit path), walked one component at a
    time without following links (as ``paths.bind_source`` walks a bundle).

    A symlink on the way — one a confined program planted in an earlier run, say
    ``out/cache -> ../../.ssh`` — is refused, not followed; so is a path outside ``permit``
    (``$HOME/.ssh``).  Relative paths are taken against the current directory; a path under
    ``given`` (the permit path as the caller spelled it, before realpath) is taken under ``permit``.

    Raises: CannotEnforce("confinement.extra_subpath", detail) (exit 5).
    """
    norm = os.path.abspath(p)
    spelled = os.path.abspath(given) if given else permit
    if not _within(norm, permit) and _within(norm, spelled):
        norm = os.path.normpath(os.path.join(permit, os.path.relpath(norm, spelled)))
    if not _within(norm, permit):
        raise CannotEnforce(
            "confinement.extra_subpath",
            f"{what} {p!r} is not inside the permit path {permit}; name a directory under it",
        )
    cur = permit
    for comp in os.path.relpath(norm, permit).split(os.sep):
        if comp in ("", "."):
            continue
        cur = os.path.join(cur, comp)
        if os.path.islink(cur):
            raise CannotEnforce(
                "confinement.extra_subpath",
                f"{what} {p!r} passes through the symlink "
                f"{cur}; links inside the permit path are not followed",
            )
    if not os.path.isdir(norm):
        raise ValueError(f"{what} {p!r} is not an existing directory")
    return norm


def _backend() -> ConfineBackend:
    from ..platforms.select import confine_backend

    backend = confine_backend()
    if backend is None:
        raise CannotEnforce("confinement", f"no confinement mechanism on {sys.platform}")
    return backend


def die_with_parent(sig: int) -> bool:
    """Have this process get ``sig`` when its parent ends (the platform's mechanism: Linux
    ``PR_SET_PDEATHSIG``); False where there is none."""
    return _backend().parent_death_signal(sig)


def report(bwrap: str | None = None) -> list[Capability]:
    """The confinement layers this host offers, as ``Capability`` reports (platform-specific)."""
    try:
        return list(_backend().report(bwrap))
    except CannotEnforce:
        from ..capability import Capability

        return [
            Capability("confinement", False, "", f"no confinement mechanism on {sys.platform}", "platform")
        ]


def confine(
    command: tuple[str, Sequence[str]],
    *,
    permit_path: str,
    env: Mapping[str, str] | None = None,
    cd: str | None = None,
    permit_extra_subpaths: Sequence[str] = (),
    permit_read: Sequence[str] = (),
    allow_hosts: Sequence[str] | None = None,
    report: str | None = None,
    protect: bool = True,
    settings_file: str | None = None,
    bwrap: str | None = None,
    landlock: bool | None = None,
    trial: bool = True,
    host_map: Mapping[str, tuple[str, int]] | None = None,
) -> LaunchSpec:
    """Build the launch spec that runs ``command`` confined to ``permit_path``.

    Args:
        command: ``(cmd, args)``; ``cmd`` is resolved once by ``resolve_executable`` (with
            ``env["PATH"]``) and that real path is both granted read-only and invoked (as argv[0]).
        permit_path: the one directory readable and writable (resolved with realpath; must exist).
        env: passed through unmodified, credentials included (default: a copy of ``os.environ``;
            a command-line front end passes ``caller_environ()``).  With ``allow_hosts`` the proxy
            variables (``PROXY_ENV``) are set on top.
        cd: where the process starts (default: the resolved ``permit_path``); must be reachable
            inside (under a granted path).  A convenience, never a boundary.
        permit_extra_subpaths: extra read-write directories inside ``permit_path``
            (``resolve_subpath``: no link followed, never outside it).
        permit_read: extra read-only paths (files or directories; realpath'd; must exist, not ``/``).
        allow_hosts: None: egress open (the default).  A list: only these hosts, through the
            proxy (``hardening/egress.py``); an empty list denies all egress.
        report: a JSON-lines file (outside the read-write paths) for what was denied and observed.
        protect: hold ``PROTECTED`` names in each read-write path read-only (default True).
        settings_file: the settings file these options came from; held read-only when inside.
        bwrap: bwrap binary (default: ``$SANDBOX_SHIM_BWRAP``, else ``bwrap`` on ``PATH``, else
            ``/usr/bin/bwrap``: ``platforms/linux/locate.bwrap_path``), Linux only.
        landlock: True requires the Landlock layer, False leaves it out, None (default) uses it
            where the kernel has it.  Linux only.
        trial: run the bwrap trial first (default); False lets the launch itself be the trial
            (bwrap never runs the program without its namespaces) and saves its start-up cost.
        host_map: name -> ``(address, port)`` for the proxy instead of DNS (tests).

    Returns:
        ``LaunchSpec``; ``.egress`` (an ``EgressProxy``, bound, not serving) must be served while the
        command runs (``spec.egress.start()``): until then the command has no egress.  After the
        command call ``spec.release()``: it closes the proxy and removes the empty placeholders
        made for missing protected names (``.placeholders``).

    Raises:
        CannotEnforce(capability, detail): the confinement cannot be built on this host (bwrap
            unusable, Landlock required but absent, sandbox-exec rejecting the profile, a runtime
            read-set entry covering the data boundary or a home directory, an unsupported platform,
            a state directory that is not this user's own while the journal needs it).
        ValueError: a path is not an existing directory (file, for ``permit_read``) or is ``/``;
            ``cd`` is not reachable inside; an ``allow_hosts`` entry is not a host pattern; the
            report file lies inside a read-write path; a read-write path is (or lies inside)
            sandbox-shim's state directory (``confine_sets.check_state``); a protected file with
            other hard links could not be given its own inode (``confine_sets.unshare_links``).
    """
    cmd, args = command
    env = dict(os.environ if env is None else env)
    permit = _resolve_dir(permit_path, "permit_path")
    extras = [resolve_subpath(p, permit, permit_path) for p in permit_extra_subpaths]
    rw = [permit, *extras]
    start = os.path.realpath(cd) if cd is not None else permit
    exe = resolve_executable(cmd, env.get("PATH", os.defpath), start)
    spelled = (
        (os.path.join(start, cmd) if "/" in cmd else readset.resolve_name(cmd, env.get("PATH", os.defpath)))
        if exe != cmd
        else None
    )
    patterns = None
    if allow_hosts is not None:
        from .egress import check_pattern

        patterns = [check_pattern(h) for h in allow_hosts]
    if report is not None:
        report = os.path.realpath(report)
        from .readset import inside_by_identity

        if any(inside_by_identity(report, p) for p in rw):  # by name, or another name (a bind mount)
            raise ValueError(f"report {report!r} lies inside a read-write path: the command could write it")
        try:
            links = os.lstat(report).st_nlink
        except OSError:
            links = 1  # made at the first record
        if links > 1:  # another name for it may lie inside a read-write path
            raise ValueError(
                f"report {report!r} has {links} hard links: another name for it could lie inside a "
                "read-write path, where the command could write it; name a file of its own"
            )
    backend = _backend()
    sets = build_sets(
        exe,
        env,
        rw,
        permit_read,
        protect,
        settings_file,
        interpreters=backend.helper_interpreters(patterns is not None),
        spelled=spelled,
    )
    try:
        return _launch_spec(
            backend,
            exe,
            args,
            env,
            sets,
            rw,
            permit,
            start,
            patterns,
            report,
            bwrap,
            landlock,
            trial,
            host_map,
        )
    except BaseException:
        from .confine_journal import forget
        from .confine_sets import remove_placeholders

        remove_placeholders(sets.placeholders)
        forget(sets.journal)
        forget(sets.snapshot)
        forget(sets.claim)
        raise


def _launch_spec(
    backend: ConfineBackend,
    exe: str,
    args: Sequence[str],
    env: dict[str, str],
    sets: Sets,
    rw: list[str],
    permit: str,
    start: str,
    patterns: list[str] | None,
    report: str | None,
    bwrap: str | None,
    landlock: bool | None,
    trial: bool,
    host_map: Mapping[str, tuple[str, int]] | None,
) -> LaunchSpec:
    reachable = [*rw, *sets.read_only, *sets.islands]
    if not any(_within(start, q) for q in reachable) or not os.path.isdir(start):
        raise ValueError(f"cd {start!r} is not a directory reachable inside the confinement")
    egress: EgressProxy | None = None
    if patterns is not None:
        import tempfile

        from .egress import EgressProxy

        egress = EgressProxy(
            patterns,
            tempfile.mkdtemp(prefix="sandbox-shim-egress-"),
            report,
            host_map,
            tcp_port=0 if backend.EGRESS_TCP else None,
        )
        port = egress.port or backend.PROXY_PORT
        env.update({k: f"http://127.0.0.1:{port}" for k in PROXY_ENV})
        env.update({"NO_PROXY": "", "no_proxy": ""})
    try:
        argv, layers, not_enforced = backend.render(
            exe,
            list(args),
            sets,
            start,
            permit=permit,
            env=env,
            bwrap=bwrap,
            landlock=landlock,
            trial=trial,
            egress=egress,
        )
    except BaseException:
        if egress is not None:
            egress.close()
        raise
    spec = LaunchSpec(cmd=argv[0], args=argv[1:], env=env, cd=start)
    spec.layers, spec.not_enforced, spec.egress, spec.report = layers, tuple(not_enforced), egress, report
    spec.placeholders, spec.journal, spec.snapshot = sets.placeholders, sets.journal, sets.snapshot
    spec.relinked, spec.claim = sets.relinked, sets.claim
    if report is not None:
        try:
            write_start_record(report, spec)
        except OSError as e:
            if egress is not None:
                egress.close()
            raise ValueError(f"report {report!r} cannot be written: {e.strerror}") from e
    return spec


def write_start_record(report: str, spec: LaunchSpec) -> None:
    """Append the first record of a report: the layers, and what is and is not observed."""
    import time

    from .. import fastjson  # json.dumps's text without importing json (re, enum)

    observed = ["egress denials (proxy)"] if spec.egress is not None else []
    unobserved = [
        "file-system denials: bwrap leaves the path absent or read-only and Landlock returns "
        "EACCES to the caller; neither writes a log this profile can read",
        *([] if spec.egress else ["egress: not restricted (no allow-list)"]),
    ]
    rec = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "event": "start",
        "layers": list(spec.layers),
        "observed": observed,
        "not_observed": unobserved,
        "not_enforced": list(spec.not_enforced),
    }
    if spec.relinked:  # protected files that had other hard links: now an inode of their own
        rec["relinked"] = list(spec.relinked)
    with open(report, "a", encoding="utf-8") as fh:
        fh.write(fastjson.dumps(rec) + "\n")


def describe(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A printable form of a launch spec: environment *names* only (values may be credentials)."""
    return {
        "cmd": spec["cmd"],
        "args": list(spec["args"]),
        "cd": spec["cd"],
        "env_names": sorted(spec["env"]),
        "layers": list(getattr(spec, "layers", ())),
        "not_enforced": list(getattr(spec, "not_enforced", ())),
    }
