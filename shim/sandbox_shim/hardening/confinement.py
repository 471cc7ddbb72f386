"""The control-plane confinement profile: a *trusted* process holding a credential, kept to one directory.

This is the mirror image of the tenant profile (``hardening/tenant.py``), not a smaller one, and it
shares nothing with it: the environment passes through unmodified (credential included), egress is
allowed, and the boundary is the file system.  ``permit_path`` (plus explicit extra subpaths, none
by default) is readable and writable; a runtime read set (system libraries, the interpreter, the
resolved executable and its prefix) is read-only; everything else — siblings, ``..``, the
platform's own files — is absent or denied.

Layers:

* Linux: bwrap (mount namespace holding only those paths, a read-only tmpfs root, own pid and IPC
  namespaces with their own ``/proc``, every capability dropped, network shared) and, where the
  kernel has it, Landlock over the same sets, applied inside the sandbox by
  ``platforms/linux/landlock.py`` run as a script (bound read-only as one file).
* macOS: a deny-default SBPL profile for ``sandbox-exec`` (``platforms/darwin/seatbelt.py``).

``confine`` returns a launch spec or raises ``CannotEnforce``; never a spec without the confinement.
Environment knob: ``SANDBOX_SHIM_BWRAP`` names the bwrap binary (default ``/usr/bin/bwrap``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from ..capability import Capability
from ..errors import CannotEnforce

DEFAULT_BWRAP = "/usr/bin/bwrap"
BWRAP_ENV = "SANDBOX_SHIM_BWRAP"
#: where the Landlock helper script is bound (read-only, one file) inside the sandbox
HELPER_PATH = "/run/sandbox-shim-confine/landlock.py"

#: Linux runtime read set: the system trees, and only the /etc entries that loaders, resolvers and
#: TLS need (ld.so(8), nsswitch.conf(5), resolv.conf(5), the CA store) — not /etc as a whole.
LINUX_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
LINUX_ETC = (
    "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime", "nsswitch.conf",
    "passwd", "group", "hosts", "host.conf", "resolv.conf", "gai.conf", "services", "protocols",
    "ssl", "ca-certificates", "ca-certificates.conf", "pki", "mime.types", "locale.alias",
    "os-release", "inputrc", "terminfo", "python3", f"python3.{sys.version_info[1]}",
)


class LaunchSpec(dict):  # type: ignore[type-arg]
    """``{"cmd": str, "args": list[str], "env": dict[str, str], "cd": str}``; launch ``[cmd, *args]``
    with ``env`` in ``cd``.  ``.layers`` names the confinement layers in force, e.g.
    ``("bwrap 0.8.0", "landlock ABI 7")``."""

    layers: tuple[str, ...] = ()


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
    return path == root or path.startswith(root.rstrip("/") + "/")


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
        cand = shutil.which(cmd, path=path if path is not None else os.environ.get("PATH", os.defpath))
    if cand is None:
        return cmd
    real = os.path.realpath(cand)
    return real if os.path.isfile(real) and os.access(real, os.X_OK) else cmd


def _shebang(exe: str) -> list[str]:
    try:
        with open(exe, "rb") as fh:
            head = fh.read(256)
    except OSError:
        return []
    if not head.startswith(b"#!"):
        return []
    return head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").split()


def executable_read_set(exe: str, path: str | None = None, depth: int = 4) -> list[str]:
    """What running ``exe`` needs read-only beyond the system trees (all real paths).

    * the file itself, and its prefix when it sits in ``PREFIX/bin`` or ``PREFIX/sbin`` (an
      interpreter's standard library and shared objects live under its prefix: python(1) "sys.prefix");
    * version-manager shims (``ROOT/shims/NAME`` exec'ing ``ROOT/libexec/...``, e.g. pyenv): ``ROOT``;
    * a script's ``#!`` interpreter, resolved the same way (``env NAME`` through ``path``), recursively.
    """
    if not os.path.isabs(exe) or depth <= 0:
        return []
    out = [exe]
    parent = os.path.dirname(exe)
    top = os.path.dirname(parent)
    if os.path.basename(parent) in ("bin", "sbin") and top != "/":
        out.append(top)
    if os.path.basename(parent) == "shims" and os.path.isdir(os.path.join(top, "libexec")):
        out.append(top)
    words = _shebang(exe)
    if words:
        interp = resolve_executable(words[0])
        if os.path.basename(interp) == "env":
            names = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
            if names:
                out += executable_read_set(resolve_executable(names[0], path), path, depth - 1)
        out += executable_read_set(interp, path, depth - 1)
    return out


def _dedupe(paths: Sequence[str]) -> list[str]:
    """Sorted, without duplicates or paths already under another entry."""
    out: list[str] = []
    for p in sorted(set(paths)):
        if not any(_within(p, q) for q in out):
            out.append(p)
    return out


def _resolve_dir(p: str, what: str) -> str:
    real = os.path.realpath(p)
    if not os.path.isdir(real):
        raise ValueError(f"{what} {p!r} is not an existing directory")
    if real == "/":
        raise ValueError(f"{what} must not be / (it would permit everything)")
    return real


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
        return [probe_bwrap(bwrap), probe_landlock()]
    if sys.platform == "darwin":
        from ..platforms.darwin import seatbelt

        ok = os.access(seatbelt.SANDBOX_EXEC, os.X_OK)
        return [Capability("confinement.seatbelt", ok, "sandbox-exec", "" if ok else "sandbox-exec missing",
                           f"access({seatbelt.SANDBOX_EXEC}, X_OK)")]
    return [Capability("confinement", False, "", f"no confinement mechanism on {sys.platform}", "platform")]


def _linux(exe: str, args: Sequence[str], read_only: list[str], rw: list[str], cd: str,
           bwrap: str | None, landlock: bool | None) -> tuple[list[str], tuple[str, ...]]:
    cap = probe_bwrap(bwrap)
    if not cap.available:
        raise CannotEnforce("bwrap", cap.detail)
    ll = probe_landlock()
    if landlock and not ll.available:
        raise CannotEnforce("landlock", ll.detail)
    use_ll = ll.available and landlock is not False
    layers = [cap.mechanism] + ([ll.mechanism] if use_ll else [])
    argv = [_bwrap_path(bwrap), "--die-with-parent", "--unshare-pid", "--unshare-ipc",
            "--unshare-cgroup-try", "--cap-drop", "ALL"]
    for p in read_only:
        if os.path.islink(p):
            argv += ["--symlink", os.readlink(p), p]
        else:
            argv += ["--ro-bind", p, p]
    argv += ["--dev", "/dev", "--proc", "/proc"]
    for p in rw:
        argv += ["--bind", p, p]
    program = [exe, *args]
    if use_ll:
        from ..platforms.linux import landlock as ll_mod

        python = os.path.realpath(sys.executable)
        argv += ["--ro-bind", os.path.realpath(ll_mod.__file__), HELPER_PATH]
        ro_inside = [p for p in read_only if not os.path.islink(p)]
        program = ll_mod.helper_argv(python, HELPER_PATH, ro_inside + ["/proc"], rw, ["/dev"], exe, args)
    argv += ["--remount-ro", "/", "--chdir", cd, "--", *program]
    return argv, tuple(layers)


def _darwin(exe: str, args: Sequence[str], read_only: list[str], rw: list[str], extras: list[str],
            permit: str) -> tuple[list[str], tuple[str, ...]]:
    from ..platforms.darwin import seatbelt

    ro = [p for p in (*seatbelt.RUNTIME_READ, *read_only) if os.path.exists(p)]
    profile = seatbelt.build_profile(ro, rw, network=True, deny=[os.path.dirname(permit)],
                                     extra_read_write=extras)
    seatbelt.compile_check(profile)
    return seatbelt.sandbox_exec_argv(profile, exe, args), ("seatbelt (sandbox-exec)",)


def confine(command: tuple[str, Sequence[str]], *, permit_path: str, env: Mapping[str, str] | None = None,
            cd: str | None = None, permit_extra_subpaths: Sequence[str] = (),
            bwrap: str | None = None, landlock: bool | None = None) -> LaunchSpec:
    """Build the launch spec that runs ``command`` confined to ``permit_path``.

    Args:
        command: ``(cmd, args)``; ``cmd`` is resolved once by ``resolve_executable`` (with
            ``env["PATH"]``) and that real path is both granted read-only and invoked (as argv[0]).
        permit_path: the one directory readable and writable (resolved with realpath; must exist).
        env: passed through unmodified, credentials included (default: a copy of ``os.environ``;
            a command-line front end passes ``caller_environ()``).
        cd: where the process starts (default: the resolved ``permit_path``); must be reachable
            inside (under a granted path).  A convenience, never a boundary.
        permit_extra_subpaths: extra read-write directories, each resolved like ``permit_path``,
            applied after the blanket deny; the library never adds any itself.
        bwrap: bwrap binary (default ``$SANDBOX_SHIM_BWRAP`` or ``/usr/bin/bwrap``), Linux only.
        landlock: True requires the Landlock layer, False leaves it out, None (default) uses it
            where the kernel has it.  Linux only.

    Returns:
        ``LaunchSpec`` ``{"cmd", "args", "env", "cd"}``: run ``[cmd, *args]`` (``cmd`` is the
        confinement wrapper) with ``env`` in ``cd``.  ``.layers`` lists the layers in force.

    Raises:
        CannotEnforce(capability, detail): the confinement cannot be built on this host (bwrap
            unusable, Landlock required but absent, sandbox-exec rejecting the profile, a runtime
            read-set entry covering the data boundary, or an unsupported platform).
        ValueError: ``permit_path``/an extra is not an existing directory or is ``/``; ``cd`` is not
            reachable inside.
    """
    cmd, args = command
    env = dict(os.environ if env is None else env)
    permit = _resolve_dir(permit_path, "permit_path")
    extras = [_resolve_dir(p, "permit_extra_subpath") for p in permit_extra_subpaths]
    start = os.path.realpath(cd) if cd is not None else permit
    exe = resolve_executable(cmd, env.get("PATH", os.defpath), start)
    needed = executable_read_set(exe, env.get("PATH", os.defpath))
    needed += executable_read_set(os.path.realpath(sys.executable))
    needed += [os.path.realpath(sys.base_prefix)]
    if sys.platform == "linux":
        system = [p for p in LINUX_SYSTEM if os.path.lexists(p)]
        system += [p for p in (os.path.join("/etc", n) for n in LINUX_ETC) if os.path.lexists(p)]
        needed += [os.path.realpath(p) for p in system if os.path.islink(p)]
        read_only = _dedupe([p for p in system + needed if os.path.lexists(p)])
    else:
        read_only = _dedupe([p for p in needed if os.path.exists(p)])
    for p in [permit, *extras]:
        boundary = os.path.dirname(p)
        cover = [q for q in read_only if not os.path.islink(q) and _within(boundary, q)]
        if cover:
            raise CannotEnforce("confinement.boundary", f"{p}: its parent {boundary} lies inside the "
                                f"runtime read set entry {cover[0]}, so siblings would be readable")
    reachable = [permit, *extras, *read_only]
    if not any(_within(start, q) for q in reachable) or not os.path.isdir(start):
        raise ValueError(f"cd {start!r} is not a directory reachable inside the confinement")
    if sys.platform == "linux":
        argv, layers = _linux(exe, list(args), read_only, [permit, *extras], start, bwrap, landlock)
    elif sys.platform == "darwin":
        argv, layers = _darwin(exe, list(args), read_only, [permit], extras, permit)
    else:
        raise CannotEnforce("confinement", f"no confinement mechanism on {sys.platform}")
    spec = LaunchSpec(cmd=argv[0], args=argv[1:], env=env, cd=start)
    spec.layers = layers
    return spec


def describe(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A printable form of a launch spec: environment *names* only (values may be credentials)."""
    return {"cmd": spec["cmd"], "args": list(spec["args"]), "cd": spec["cd"],
            "env_names": sorted(spec["env"]), "layers": list(getattr(spec, "layers", ()))}
