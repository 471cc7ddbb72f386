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
  and signal scopes, applied inside the sandbox by ``platforms/linux/landlock.py`` run as a script.
* macOS: a deny-default SBPL profile for ``sandbox-exec`` (``platforms/darwin/confine_profile.py``).

``confine`` returns a launch spec or raises ``CannotEnforce``; never a spec without the confinement.
Environment knob: ``SANDBOX_SHIM_BWRAP`` names the bwrap binary (default ``/usr/bin/bwrap``).
"""

from __future__ import annotations

import os
import sys

from ..capability import Capability
from ..errors import CannotEnforce
from . import readset
from .confine_sets import LINUX_ETC, LINUX_SYSTEM, PROTECTED, Sets, build_sets

TYPE_CHECKING = False  # start-up cost (confine runs per command): no typing at run time
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

    from .egress import EgressProxy

__all__ = ["LINUX_ETC", "LINUX_SYSTEM", "PROTECTED", "LaunchSpec", "confine", "describe", "report",
           "resolve_executable", "caller_environ"]

DEFAULT_BWRAP = "/usr/bin/bwrap"
BWRAP_ENV = "SANDBOX_SHIM_BWRAP"
#: where the Landlock helper script is bound (read-only, one file) inside the sandbox
HELPER_PATH = "/run/sandbox-shim-confine/landlock.py"
#: where the egress proxy's socket is bound inside, and the loopback port the forwarder serves
PROXY_SOCKET = "/run/sandbox-shim-confine/proxy.sock"
PROXY_PORT = 3128
PROXY_ENV = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


class LaunchSpec(dict):  # type: ignore[type-arg]
    """``{"cmd": str, "args": list[str], "env": dict[str, str], "cd": str}``; launch ``[cmd, *args]``
    with ``env`` in ``cd``.  ``.layers`` names the confinement layers in force, e.g.
    ``("bwrap 0.8.0", "landlock ABI 7")``; ``.not_enforced`` what this host leaves open;
    ``.egress`` the proxy to serve (or None); ``.report`` the report file (or None)."""

    layers: tuple[str, ...] = ()
    not_enforced: tuple[str, ...] = ()
    egress: EgressProxy | None = None
    report: str | None = None
    placeholders: tuple[str, ...] = ()

    def release(self) -> None:
        """After the command: close the egress proxy (if any) and remove the empty placeholders
        made for missing protected names (``confine_sets.make_placeholders``).  Idempotent."""
        from .confine_sets import remove_placeholders

        if self.egress is not None:
            self.egress.close()
        remove_placeholders(self.placeholders)
        self.placeholders = ()


def caller_environ() -> dict[str, str]:
    """This process's environment as it was exec'd, unmodified.

    On Linux it is read from ``/proc/self/environ`` (proc(5)): the interpreter's startup may have
    added variables to ``os.environ`` (PEP 538 sets ``LC_CTYPE`` under the C locale), and the
    confined process must see exactly what the caller had.  Elsewhere: a copy of ``os.environ``.
    """
    try:
        with open("/proc/self/environ", "rb") as fh:
            raw = fh.read()
    except OSError:
        return dict(os.environ)
    env: dict[str, str] = {}
    for item in raw.split(b"\0"):
        if b"=" in item:
            k, _, v = item.partition(b"=")
            env.setdefault(os.fsdecode(k), os.fsdecode(v))
    return env


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
        raise CannotEnforce("confinement.extra_subpath", f"{what} {p!r} is not inside the permit path "
                            f"{permit}; name a directory under it")
    cur = permit
    for comp in os.path.relpath(norm, permit).split(os.sep):
        if comp in ("", "."):
            continue
        cur = os.path.join(cur, comp)
        if os.path.islink(cur):
            raise CannotEnforce("confinement.extra_subpath", f"{what} {p!r} passes through the symlink "
                                f"{cur}; links inside the permit path are not followed")
    if not os.path.isdir(norm):
        raise ValueError(f"{what} {p!r} is not an existing directory")
    return norm


def _bwrap_path(bwrap: str | None) -> str:
    return bwrap or os.environ.get(BWRAP_ENV) or DEFAULT_BWRAP


_bwrap_cache: dict[str, Capability] = {}


def probe_bwrap(bwrap: str | None = None) -> Capability:
    """Try the bwrap features this profile uses: ``bwrap --unshare-pid --unshare-ipc --cap-drop ALL
    --ro-bind / / --proc /proc --dev /dev --remount-ro / true``.  Cached per binary path.

    When no path override is given and ``sandbox_shim.probes`` registers ``bwrap``, its report must
    say available too.  Returns a ``Capability`` named ``confinement.bwrap``; never raises.
    """
    path = _bwrap_path(bwrap)
    if path in _bwrap_cache:
        return _bwrap_cache[path]
    import shutil
    import subprocess

    measured = f"{path} --unshare-pid --unshare-ipc --cap-drop ALL --ro-bind / / --proc /proc true"
    cap: Capability | None = None
    if bwrap is None and BWRAP_ENV not in os.environ:
        try:
            from .. import capability

            capability.report([])  # loads the registered probes
            shared = capability.probe("bwrap") if "bwrap" in capability.PROBES else None
            if shared is not None and not shared.available:
                cap = Capability("confinement.bwrap", False, shared.mechanism, shared.detail,
                                 shared.measured_by)
        except ImportError:
            pass  # no shared probes module (yet): our own trial below decides
    if cap is None:
        true = shutil.which("true") or "/bin/true"
        try:
            r = subprocess.run([path, "--unshare-pid", "--unshare-ipc", "--cap-drop", "ALL", "--ro-bind",
                                "/", "/", "--proc", "/proc", "--dev", "/dev", "--remount-ro", "/", true],
                               capture_output=True, text=True, timeout=20)
            ok, detail = r.returncode == 0, r.stderr.strip()[:300] or f"exit {r.returncode}"
            ver = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10).stdout
        except (OSError, subprocess.TimeoutExpired) as e:
            ok, detail, ver = False, f"{path}: {e.strerror if isinstance(e, OSError) else e}", ""
        cap = Capability("confinement.bwrap", ok, ver.strip() or path, "" if ok else detail, measured)
    _bwrap_cache[path] = cap
    return cap


def probe_landlock() -> Capability:
    """Report the Landlock layer: ``landlock_create_ruleset(..., VERSION)`` (kernel doc, landlock.rst)."""
    from ..platforms.linux import landlock

    abi = landlock.abi_version()
    return Capability("confinement.landlock", abi > 0, f"landlock ABI {abi}" if abi else "landlock",
                      "" if abi else "kernel has no Landlock (or it is not enabled at boot)",
                      "landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)")


def report(bwrap: str | None = None) -> list[Capability]:
    """The confinement layers this host offers, as ``Capability`` reports (platform-specific)."""
    if sys.platform == "linux":
        from ..platforms.linux import landlock

        abi = landlock.abi_version()
        gap = (f"Landlock ABI {abi} < 6: host abstract unix sockets stay reachable (unless --allow-host "
               "gives the command its own network namespace)")
        scope = Capability("confinement.landlock.scope", abi >= 6,
                           "landlock scopes: abstract-unix-socket, signal", "" if abi >= 6 else gap,
                           "landlock_create_ruleset(NULL, 0, VERSION) >= 6")
        return [probe_bwrap(bwrap), probe_landlock(), scope]
    if sys.platform == "darwin":
        from ..platforms.darwin import seatbelt

        ok = os.access(seatbelt.SANDBOX_EXEC, os.X_OK)
        return [Capability("confinement.seatbelt", ok, "sandbox-exec", "" if ok else "sandbox-exec missing",
                           f"access({seatbelt.SANDBOX_EXEC}, X_OK)")]
    return [Capability("confinement", False, "", f"no confinement mechanism on {sys.platform}", "platform")]


def _linux(exe: str, args: Sequence[str], sets: Sets, cd: str, bwrap: str | None, landlock: bool | None,
           trial: bool, egress: EgressProxy | None) -> tuple[list[str], tuple[str, ...], list[str]]:
    """bwrap argv (mount order: private /tmp, runtime read set, /dev, /proc, read-write paths, then the
    read-only islands over them) and the Landlock helper; returns (argv, layers, not_enforced)."""
    path = _bwrap_path(bwrap)
    cap = probe_bwrap(bwrap) if trial else Capability(
        "confinement.bwrap", os.access(path, os.X_OK), "bubblewrap", f"{path} is missing or not executable",
        f"access({path}, X_OK); the launch itself is the trial")
    if not cap.available:
        raise CannotEnforce("bwrap", cap.detail)
    from ..platforms.linux import landlock as ll_mod

    abi = ll_mod.abi_version()
    if landlock and abi < 1:
        raise CannotEnforce("landlock", "kernel has no Landlock (or it is not enabled at boot)")
    use_ll = abi > 0 and landlock is not False
    layers = [cap.mechanism if trial else "bubblewrap"] + ([f"landlock ABI {abi}"] if use_ll else [])
    scopes = list(ll_mod.SCOPES) if use_ll and abi >= 6 else []
    not_enforced = [] if scopes else ["abstract unix sockets of the host (Landlock ABI 6 scoping absent)"
                                      + ("" if egress else "; a private network namespace would hide them")]
    if scopes:
        layers.append("landlock scopes: " + ", ".join(scopes))
    argv = [path, "--die-with-parent", "--unshare-pid", "--unshare-ipc", "--unshare-cgroup-try"]
    if egress is not None:
        argv.append("--unshare-net")
        not_enforced = []  # abstract sockets are per network namespace
    argv += ["--cap-drop", "ALL", "--tmpfs", "/tmp"]
    for p in sets.read_only:
        argv += ["--symlink", os.readlink(p), p] if os.path.islink(p) else ["--ro-bind", p, p]
    argv += ["--dev", "/dev", "--proc", "/proc"]
    for p in sets.read_write:
        argv += ["--bind", p, p]
    for p in sets.anchors:  # mount points: rename(2)/rmdir(2) of them fail with EBUSY
        argv += ["--bind", p, p]
    for p in sets.islands:
        argv += ["--ro-bind", p, p]
    program = [exe, *args]
    forward = None
    if egress is not None:
        argv += ["--ro-bind", egress.socket_path, PROXY_SOCKET]
        forward = f"{PROXY_PORT}={PROXY_SOCKET}"
    layers.append("seccomp: no TIOCSTI/TIOCLINUX")
    if True:  # the helper always runs: the terminal filter and, where there is Landlock, its rules
        python = os.path.realpath(sys.executable)
        helper, inside = helper_file(os.path.realpath(ll_mod.__file__))
        argv += ["--ro-bind", helper, inside]
        ro_inside = [p for p in (*sets.read_only, *sets.islands) if not os.path.islink(p)]
        program = ll_mod.helper_argv(python, inside, ro_inside + ["/proc"], [*sets.read_write, "/tmp"],
                                     ["/dev"], exe, args, scopes=scopes, forward=forward, landlock=use_ll)
    argv += ["--remount-ro", "/", "--chdir", cd, "--", *program]
    return argv, tuple(layers), not_enforced


def helper_file(source: str) -> tuple[str, str]:
    """The Landlock helper to bind and where: its bytecode (``__pycache__``, PEP 3147) when that is
    fresh for this interpreter (magic number, and the source's mtime and size in the header, PEP 552
    timestamp form), so the second interpreter need not compile it; else the source."""
    import importlib._bootstrap_external as bx  # loaded at interpreter start-up: free

    pyc = bx.cache_from_source(source)
    try:
        with open(pyc, "rb") as fh:
            head = fh.read(16)
        st = os.stat(source)
    except (OSError, NotImplementedError):
        return source, HELPER_PATH
    fresh = (len(head) == 16 and head[:4] == bx.MAGIC_NUMBER and head[4:8] == b"\0\0\0\0"
             and int.from_bytes(head[8:12], "little") == int(st.st_mtime) & 0xFFFFFFFF
             and int.from_bytes(head[12:16], "little") == st.st_size & 0xFFFFFFFF)
    return (pyc, HELPER_PATH + "c") if fresh else (source, HELPER_PATH)


def _darwin(exe: str, args: Sequence[str], sets: Sets, permit: str, egress: EgressProxy | None,
            env: dict[str, str]) -> tuple[list[str], tuple[str, ...], list[str]]:
    import tempfile

    from ..platforms.darwin import confine_profile, seatbelt

    tmp = tempfile.mkdtemp(prefix="sandbox-shim-tmp-")  # macOS cannot make /tmp private: TMPDIR is
    env["TMPDIR"] = tmp
    ro = [p for p in (*seatbelt.RUNTIME_READ, *sets.read_only) if os.path.exists(p)]
    profile = confine_profile.build(ro, [*sets.read_write, tmp], deny=[os.path.dirname(permit)],
                                    islands=sets.islands, anchors=sets.anchors,
                                    proxy_port=egress.port if egress else None)
    seatbelt.compile_check(profile)
    return (seatbelt.sandbox_exec_argv(profile, exe, args), ("seatbelt (sandbox-exec)",),
            ["abstract unix sockets (macOS has none; unix-domain sockets follow the file rules)"])


def confine(command: tuple[str, Sequence[str]], *, permit_path: str, env: Mapping[str, str] | None = None,
            cd: str | None = None, permit_extra_subpaths: Sequence[str] = (), permit_read: Sequence[str] = (),
            allow_hosts: Sequence[str] | None = None, report: str | None = None,
            protect: bool = True, settings_file: str | None = None, bwrap: str | None = None,
            landlock: bool | None = None, trial: bool = True,
            host_map: Mapping[str, tuple[str, int]] | None = None) -> LaunchSpec:
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
        bwrap: bwrap binary (default ``$SANDBOX_SHIM_BWRAP`` or ``/usr/bin/bwrap``), Linux only.
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
            read-set entry covering the data boundary or a home directory, an unsupported platform).
        ValueError: a path is not an existing directory (file, for ``permit_read``) or is ``/``;
            ``cd`` is not reachable inside; an ``allow_hosts`` entry is not a host pattern; the
            report file lies inside a read-write path.
    """
    cmd, args = command
    env = dict(os.environ if env is None else env)
    permit = _resolve_dir(permit_path, "permit_path")
    extras = [resolve_subpath(p, permit, permit_path) for p in permit_extra_subpaths]
    rw = [permit, *extras]
    start = os.path.realpath(cd) if cd is not None else permit
    exe = resolve_executable(cmd, env.get("PATH", os.defpath), start)
    patterns = None
    if allow_hosts is not None:
        from .egress import check_pattern

        patterns = [check_pattern(h) for h in allow_hosts]
    if report is not None:
        report = os.path.realpath(report)
        if any(_within(report, p) for p in rw):
            raise ValueError(f"report {report!r} lies inside a read-write path: the command could write it")
    sets = build_sets(exe, env, rw, permit_read, protect, settings_file)
    try:
        return _launch_spec(exe, args, env, sets, rw, permit, start, patterns, report, bwrap, landlock,
                            trial, host_map)
    except BaseException:
        from .confine_sets import remove_placeholders

        remove_placeholders(sets.placeholders)
        raise


def _launch_spec(exe: str, args: Sequence[str], env: dict[str, str], sets: Sets, rw: list[str], permit: str,
                 start: str, patterns: list[str] | None, report: str | None, bwrap: str | None,
                 landlock: bool | None, trial: bool,
                 host_map: Mapping[str, tuple[str, int]] | None) -> LaunchSpec:
    reachable = [*rw, *sets.read_only, *sets.islands]
    if not any(_within(start, q) for q in reachable) or not os.path.isdir(start):
        raise ValueError(f"cd {start!r} is not a directory reachable inside the confinement")
    egress: EgressProxy | None = None
    if patterns is not None:
        import tempfile

        from .egress import EgressProxy

        egress = EgressProxy(patterns, tempfile.mkdtemp(prefix="sandbox-shim-egress-"), report, host_map,
                             tcp_port=0 if sys.platform == "darwin" else None)
        port = egress.port or PROXY_PORT
        env.update({k: f"http://127.0.0.1:{port}" for k in PROXY_ENV})
        env.update({"NO_PROXY": "", "no_proxy": ""})
    try:
        if sys.platform == "linux":
            argv, layers, not_enforced = _linux(exe, list(args), sets, start, bwrap, landlock, trial, egress)
        elif sys.platform == "darwin":
            argv, layers, not_enforced = _darwin(exe, list(args), sets, permit, egress, env)
        else:
            raise CannotEnforce("confinement", f"no confinement mechanism on {sys.platform}")
    except BaseException:
        if egress is not None:
            egress.close()
        raise
    spec = LaunchSpec(cmd=argv[0], args=argv[1:], env=env, cd=start)
    spec.layers, spec.not_enforced, spec.egress, spec.report = layers, tuple(not_enforced), egress, report
    spec.placeholders = sets.placeholders
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
    import json
    import time

    observed = ["egress denials (proxy)"] if spec.egress is not None else []
    unobserved = ["file-system denials: bwrap leaves the path absent or read-only and Landlock returns "
                  "EACCES to the caller; neither writes a log this profile can read",
                  *([] if spec.egress else ["egress: not restricted (no allow-list)"])]
    rec = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "event": "start",
           "layers": list(spec.layers), "observed": observed, "not_observed": unobserved,
           "not_enforced": list(spec.not_enforced)}
    with open(report, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(rec) + "\n")


def describe(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A printable form of a launch spec: environment *names* only (values may be credentials)."""
    return {"cmd": spec["cmd"], "args": list(spec["args"]), "cd": spec["cd"],
            "env_names": sorted(spec["env"]), "layers": list(getattr(spec, "layers", ())),
            "not_enforced": list(getattr(spec, "not_enforced", ()))}
