"""The confinement profile on Linux: bwrap argv, then Landlock and the terminal filter applied inside.

``hardening/confinement.py`` computes the path sets (``Sets``); this renders them:

* bwrap: a read-only tmpfs root holding only those paths (mount order: private ``/tmp``, runtime read
  set, ``/dev``, ``/proc``, read-write paths, anchors, then the read-only islands over them), own pid
  and IPC namespaces, every capability dropped, network shared — or, with an egress allow-list, a
  network namespace of its own whose only way out is the proxy's socket.
* inside, just before the program's exec: Landlock over the same sets (plus, from ABI 6, the
  abstract-unix-socket and signal scopes) and the seccomp filter against ``TIOCSTI``/``TIOCLINUX``.
  Landlock cannot be applied earlier: a Landlock-restricted thread may not mount(2) or pivot_root(2)
  (kernel ``Documentation/userspace-api/landlock.rst``, "Current limitations"), so bwrap could not
  build the mount namespace.

The inside step is the C helper ``sandbox-shim-confine-exec`` (``confine_exec.c``, built by
``pip install``; it does no path work: every rule and right comes precomputed on its command line)
where it is built; else, and always with an egress allow-list (whose loopback forwarder it serves),
``landlock.py`` run as a script by this interpreter (``python -I -S``), which then needs its own tree
in the read set.  Both fail closed: the program is not run when a layer cannot be applied.

bwrap is the one the sandboxes run (``locate.bwrap_path``: ``$SANDBOX_SHIM_BWRAP``, else ``bwrap`` on
``PATH``, else ``/usr/bin/bwrap``) unless the caller names one.
"""

from __future__ import annotations

import os
import sys

from . import landlock as ll

TYPE_CHECKING = False  # start-up cost (confine runs per command): no typing at run time
if TYPE_CHECKING:
    from collections.abc import Sequence

    from ...capability import Capability
    from ...hardening.confine_sets import Sets
    from ...hardening.egress import EgressProxy

#: where the helpers are bound (read-only, one file each) inside the sandbox
HELPER_DIR = "/run/sandbox-shim-confine"
HELPER_PATH = HELPER_DIR + "/landlock.py"
NATIVE_INSIDE = HELPER_DIR + "/confine-exec"
#: the C helper, built beside this file by ``pip install`` (setup.py)
NATIVE_HELPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sandbox-shim-confine-exec")
#: where the egress proxy's socket is bound inside, and the loopback port the forwarder serves
PROXY_SOCKET = HELPER_DIR + "/proxy.sock"
PROXY_PORT = 3128
#: the egress proxy listens on a unix socket (bound inside), not on a TCP port
EGRESS_TCP = False


def bwrap_path(bwrap: str | None) -> str:
    """``bwrap``, else the one the sandboxes use (``locate.bwrap_path``: ``$SANDBOX_SHIM_BWRAP``, PATH,
    ``/usr/bin/bwrap``), else ``/usr/bin/bwrap`` (whose absence the capability report then names)."""
    from .locate import DEFAULT_BWRAP
    from .locate import bwrap_path as found

    return bwrap or found() or DEFAULT_BWRAP


def native_helper() -> str | None:
    """The built C helper (an executable regular file), or None when it was not built here."""
    return NATIVE_HELPER if os.access(NATIVE_HELPER, os.X_OK) and os.path.isfile(NATIVE_HELPER) else None


def helper_interpreters(egress: bool) -> list[str]:
    """Executables the inside step runs that the read set must hold: this interpreter when the Python
    helper runs (no C helper, or an egress forwarder to serve), else none (the C helper is static or
    needs only the system trees)."""
    return [] if native_helper() is not None and not egress else [os.path.realpath(sys.executable)]


_bwrap_cache: dict[str, Capability] = {}


def probe_bwrap(bwrap: str | None = None) -> Capability:
    """Try the bwrap features this profile uses: ``bwrap --unshare-pid --unshare-ipc --cap-drop ALL
    --ro-bind / / --proc /proc --dev /dev --remount-ro / true``.  Cached per binary path.

    When no path override is given and ``sandbox_shim.probes`` registers ``bwrap``, its report must
    say available too.  Returns a ``Capability`` named ``confinement.bwrap``; never raises.
    """
    from ...capability import Capability

    path = bwrap_path(bwrap)
    if path in _bwrap_cache:
        return _bwrap_cache[path]
    import shutil
    import subprocess

    measured = f"{path} --unshare-pid --unshare-ipc --cap-drop ALL --ro-bind / / --proc /proc true"
    cap: Capability | None = None
    if bwrap is None:  # the bwrap the shared probe measured (locate.bwrap_path): its verdict holds
        try:
            from ... import capability

            capability.report([])  # loads the registered probes
            shared = capability.probe("bwrap") if "bwrap" in capability.PROBES else None
            if shared is not None and not shared.available:
                cap = Capability(
                    "confinement.bwrap", False, shared.mechanism, shared.detail, shared.measured_by
                )
        except ImportError:
            pass  # no shared probes module (yet): our own trial below decides
    if cap is None:
        true = shutil.which("true") or "/bin/true"
        try:
            r = subprocess.run(
                [
                    path,
                    "--unshare-pid",
                    "--unshare-ipc",
                    "--cap-drop",
                    "ALL",
                    "--ro-bind",
                    "/",
                    "/",
                    "--proc",
                    "/proc",
                    "--dev",
                    "/dev",
                    "--remount-ro",
                    "/",
                    true,
                ],
                capture_output=True,
                text=True,
                timeout=20,
            )
            ok, detail = r.returncode == 0, r.stderr.strip()[:300] or f"exit {r.returncode}"
            ver = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10).stdout
        except (OSError, subprocess.TimeoutExpired) as e:
            ok, detail, ver = False, f"{path}: {e.strerror if isinstance(e, OSError) else e}", ""
        cap = Capability("confinement.bwrap", ok, ver.strip() or path, "" if ok else detail, measured)
    _bwrap_cache[path] = cap
    return cap


def parent_death_signal(sig: int) -> bool:
    """``prctl(PR_SET_PDEATHSIG, sig)`` for this process (prctl(2)) through ``ll.pdeathsig_setter``,
    the package's one setter of it; True when set."""
    return ll.pdeathsig_setter(sig)()


def initial_environ() -> dict[str, str] | None:
    """This process's exec'd environment, decoded (``os.fsdecode``), from ``ll.initial_environ``, the
    one parser of ``/proc/self/environ``; None when it cannot be read."""
    env = ll.initial_environ()
    return None if env is None else {os.fsdecode(k): os.fsdecode(v) for k, v in env.items()}


def probe_landlock() -> Capability:
    """Report the Landlock layer: ``landlock_create_ruleset(..., VERSION)`` (kernel doc, landlock.rst)."""
    from ...capability import Capability

    abi = ll.abi_version()
    return Capability(
        "confinement.landlock",
        abi > 0,
        f"landlock ABI {abi}" if abi else "landlock",
        "" if abi else "kernel has no Landlock (or it is not enabled at boot)",
        "landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)",
    )


def report(bwrap: str | None = None) -> list[Capability]:
    """bwrap, Landlock and Landlock's IPC scopes, as ``Capability`` reports."""
    from ...capability import Capability

    abi = ll.abi_version()
    gap = (
        f"Landlock ABI {abi} < 6: host abstract unix sockets stay reachable (unless --allow-host "
        "gives the command its own network namespace)"
    )
    scope = Capability(
        "confinement.landlock.scope",
        abi >= 6,
        "landlock scopes: abstract-unix-socket, signal",
        "" if abi >= 6 else gap,
        "landlock_create_ruleset(NULL, 0, VERSION) >= 6",
    )
    return [probe_bwrap(bwrap), probe_landlock(), scope]


def native_argv(
    helper: str,
    read_only: Sequence[str],
    read_write: Sequence[str],
    devices: Sequence[str],
    program: str,
    args: Sequence[str],
    *,
    abi: int,
    scopes: Sequence[str] = (),
    landlock: bool = True,
) -> list[str]:
    """argv of the C helper: ``--abi ABI`` (the ABI these rights were computed for: the helper
    asks the kernel and runs nothing when they differ), ``--ruleset HANDLED SCOPED`` (rights
    ``landlock.handled_fs(abi)``, the ``SCOPES`` bits), one ``--rule ACCESS PATH`` per path
    (``READ_ONLY``, ``READ_WRITE``, ``DEVICES``, each masked by HANDLED), ``--seccomp HEX``
    (``landlock.tty_filter``), then ``-- program args``.  ``landlock=False``: the filter only (the
    ABI is still checked: a kept ABI of 0 must not drop Landlock on a kernel that has it)."""
    out = [helper, "--abi", str(abi)]
    if landlock:
        handled = ll.handled_fs(abi)
        scoped = 0
        for name in scopes:
            scoped |= ll.SCOPES[name]
        out += ["--ruleset", str(handled), str(scoped)]
        for access, paths in ((ll.READ_ONLY, read_only), (ll.READ_WRITE, read_write), (ll.DEVICES, devices)):
            for p in paths:
                out += ["--rule", str(access & handled), p]
    return [*out, "--seccomp", ll.tty_filter().hex(), "--", program, *args]


def render(
    exe: str,
    args: Sequence[str],
    sets: Sets,
    cd: str,
    *,
    bwrap: str | None = None,
    landlock: bool | None = None,
    trial: bool = True,
    egress: EgressProxy | None = None,
    env: dict[str, str] | None = None,
    **_: object,
) -> tuple[list[str], tuple[str, ...], list[str]]:
    """bwrap argv and the inside step; returns ``(argv, layers, not_enforced)``.  With ``env`` (the
    command's environment: where the user's state directory is) the read-only entries directly in
    ``/etc`` come from one bind of a ``confine_state.etc_view`` when one can be made, else one bind
    each, and the Landlock ABI is the one kept for this boot (``confine_state.landlock_abi``).

    Raises: CannotEnforce("bwrap" | "landlock", detail): bwrap unusable; Landlock required but absent.
    """
    from ..._lazy import read_ahead
    from ...errors import CannotEnforce
    from .confine_state import etc_view, landlock_abi

    path = bwrap_path(bwrap)
    native = native_helper()
    read_ahead([path, native] if native is not None else [path])  # exec'd in a moment: from disk now
    if trial:
        cap = probe_bwrap(bwrap)
        if not cap.available:
            raise CannotEnforce("bwrap", cap.detail)
        layers = [cap.mechanism]
    else:  # the launch itself is the trial: bwrap never runs the program without its namespaces
        if not os.access(path, os.X_OK):
            raise CannotEnforce("bwrap", f"{path} is missing or not executable")
        layers = ["bubblewrap"]
    abi = landlock_abi(env, sets.read_write, sets.islands)
    if landlock and abi < 1:
        raise CannotEnforce("landlock", "kernel has no Landlock (or it is not enabled at boot)")
    use_ll = abi > 0 and landlock is not False
    layers += [f"landlock ABI {abi}"] if use_ll else []
    scopes = list(ll.SCOPES) if use_ll and abi >= 6 else []
    not_enforced = (
        []
        if scopes
        else [
            "abstract unix sockets of the host (Landlock ABI 6 scoping absent)"
            + ("" if egress else "; a private network namespace would hide them")
        ]
    )
    if scopes:
        layers.append("landlock scopes: " + ", ".join(scopes))
    argv = [path, "--die-with-parent", "--unshare-pid", "--unshare-ipc", "--unshare-cgroup-try"]
    if egress is not None:
        argv.append("--unshare-net")
        not_enforced = []  # abstract sockets are per network namespace
    argv += ["--cap-drop", "ALL", "--tmpfs", "/tmp"]
    view = etc_view(sets.read_only, sets.read_write, env, held=sets.islands) if env is not None else None
    folded: frozenset[str] = frozenset()
    if view is not None:
        argv += ["--ro-bind", view[0], "/etc"]
        folded = view[1]
    for p in sets.read_only:
        if p in folded:
            continue  # a copy (or the link) in the /etc view
        argv += ["--symlink", os.readlink(p), p] if os.path.islink(p) else ["--ro-bind", p, p]
    argv += ["--dev", "/dev", "--proc", "/proc"]
    for p in sets.read_write:
        argv += ["--bind", p, p]
    for p in sets.anchors:  # mount points: rename(2)/rmdir(2) of them fail with EBUSY
        argv += ["--bind", p, p]
    for p in sets.islands:
        argv += ["--ro-bind", p, p]
    layers.append("seccomp: no TIOCSTI/TIOCLINUX")
    ro_inside = [p for p in (*sets.read_only, *sets.islands) if not os.path.islink(p)] + ["/proc"]
    rw_inside = [*sets.read_write, "/tmp"]
    if native is not None and egress is None:
        argv += ["--ro-bind", native, NATIVE_INSIDE]
        program = native_argv(
            NATIVE_INSIDE, ro_inside, rw_inside, ["/dev"], exe, args, abi=abi, scopes=scopes, landlock=use_ll
        )
    else:
        forward = None
        if egress is not None:
            argv += ["--ro-bind", egress.socket_path, PROXY_SOCKET]
            forward = f"{PROXY_PORT}={PROXY_SOCKET}"
        helper, inside = helper_file(os.path.realpath(ll.__file__))
        argv += ["--ro-bind", helper, inside]
        program = ll.helper_argv(
            os.path.realpath(sys.executable),
            inside,
            ro_inside,
            rw_inside,
            ["/dev"],
            exe,
            args,
            scopes=scopes,
            forward=forward,
            landlock=use_ll,
            abi=abi,
        )
    argv += ["--remount-ro", "/", "--chdir", cd, "--", *program]
    return argv, tuple(layers), not_enforced


def helper_file(source: str) -> tuple[str, str]:
    """The Python helper to bind and where: its bytecode (``__pycache__``, PEP 3147) when that is
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
    fresh = (
        len(head) == 16
        and head[:4] == bx.MAGIC_NUMBER
        and head[4:8] == b"\0\0\0\0"
        and int.from_bytes(head[8:12], "little") == int(st.st_mtime) & 0xFFFFFFFF
        and int.from_bytes(head[12:16], "little") == st.st_size & 0xFFFFFFFF
    )
    return (pyc, HELPER_PATH + "c") if fresh else (source, HELPER_PATH)
