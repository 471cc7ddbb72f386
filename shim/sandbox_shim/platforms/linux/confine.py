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
    from collections.abc import Mapping, Sequence

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
    """``prctl(PR_SET_PDEATHSIG, sig)`` for this process (prctl(2)) through the ``_ctypes`` the
    Landlock layer loads anyway (no ``ctypes`` import); True when set."""
    return ll._libc().prctl(1, sig, 0, 0, 0) == 0


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
    """argv of the C helper: ``--ruleset HANDLED SCOPED`` (rights ``landlock.handled_fs(abi)``, the
    ``SCOPES`` bits), one ``--rule ACCESS PATH`` per path (``READ_ONLY``, ``READ_WRITE``, ``DEVICES``,
    each masked by HANDLED), ``--seccomp HEX`` (``landlock.tty_filter``), then ``-- program args``.
    ``landlock=False``: the filter only."""
    out = [helper]
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
    ``/etc`` come from one bind of an ``etc_view`` when one can be made, else one bind each, and the
    Landlock ABI is the one kept for this boot (``landlock_abi``).

    Raises: CannotEnforce("bwrap" | "landlock", detail): bwrap unusable; Landlock required but absent.
    """
    from ...errors import CannotEnforce
    from ...hardening.confine_launch import read_ahead

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
    abi = landlock_abi(env, sets.read_write)
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
    view = etc_view(sets.read_only, sets.read_write, env) if env is not None else None
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
        )
    argv += ["--remount-ro", "/", "--chdir", cd, "--", *program]
    return argv, tuple(layers), not_enforced


def state_dir(env: Mapping[str, str], read_write: Sequence[str]) -> str | None:
    """The user's sandbox-shim state directory (the placeholder journal's parent,
    ``confine_journal.journal_dir``), or None when there is none or it lies in (or around) a
    read-write path: what is kept there (the /etc view, the Landlock ABI) the confined program must
    not be able to write."""
    from ...hardening.confine_journal import journal_dir
    from ...hardening.readset import within

    journal = journal_dir(env)
    if journal is None:
        return None
    state = os.path.dirname(journal)
    if any(within(state, w) or within(w, state) for w in read_write):
        return None
    return state


def landlock_abi(env: Mapping[str, str] | None = None, read_write: Sequence[str] = ()) -> int:
    """``landlock.abi_version()``, kept for the boot in ``STATE/landlock-abi`` (``state_dir``) as
    ``BOOT_ID ABI``: the ABI is the running kernel's (Landlock is built in, not a module) and
    ``/proc/sys/kernel/random/boot_id`` changes with every boot (proc(5)).  Asking the kernel takes
    ``_ctypes`` (a shared library to load) and a libc call; reading the file does not.  Without a
    usable state directory, or a boot id, the kernel is asked.  Never raises."""
    state = state_dir(env, read_write) if env is not None else None
    try:
        with open("/proc/sys/kernel/random/boot_id", "rb") as fh:
            boot = fh.read(64).strip()
    except OSError:
        boot = b""
    if state is None or not boot:
        return ll.abi_version()
    path = os.path.join(state, "landlock-abi")
    try:
        with open(path, "rb") as fh:
            seen, _, value = fh.read(128).partition(b" ")
        if seen == boot and value.strip().isdigit():
            return int(value)
    except OSError:
        pass
    abi = ll.abi_version()
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(state, 0o700, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, boot + b" %d\n" % abi)
        finally:
            os.close(fd)
        os.rename(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
    return abi


#: the largest /etc file copied into the view (bigger: no view, every entry bound)
ETC_VIEW_MAX_BYTES = 4 << 20
#: a directory in /etc with at most this many entries beneath it is copied into the view too
#: (listing and stat-ing a few entries costs less than a bind); a bigger one keeps its bind
ETC_VIEW_MAX_TREE = 16
#: a view not used for this long is removed when a new one is made (one used meanwhile may be about
#: to be bound)
ETC_VIEW_STALE_S = 60
_DIR, _REG, _LNK = 0o040000, 0o100000, 0o120000
if TYPE_CHECKING:
    #: (path relative to its /etc entry, "" for the entry itself; file type; lstat; link target)
    _Entry = tuple[str, int, os.stat_result, str]


def _small_tree(path: str, st: os.stat_result) -> list[_Entry] | None:
    """Everything beneath the directory ``path`` (``st`` its lstat), links not followed, when it is
    small enough to copy (``ETC_VIEW_MAX_TREE`` entries; directories of one block) and holds only
    directories, links and regular files this process can read; else None."""
    out: list[_Entry] = [("", _DIR, st, "")]
    todo = [("", st)]
    while todo:
        rel, dst = todo.pop()
        if dst.st_size > 4096:  # a directory of more than one block: too many names, not listed
            return None
        try:
            names = sorted(os.listdir(os.path.join(path, rel)))
        except OSError:
            return None
        for n in names:
            r = os.path.join(rel, n)
            q = os.path.join(path, r)
            try:
                est = os.lstat(q)
                kind = est.st_mode & 0o170000
                target = os.readlink(q) if kind == _LNK else ""
            except OSError:
                return None
            if kind == _DIR:
                todo.append((r, est))
            elif kind != _LNK and (
                kind != _REG or est.st_size > ETC_VIEW_MAX_BYTES or not os.access(q, os.R_OK)
            ):
                return None
            out.append((r, kind, est, target))
            if len(out) > ETC_VIEW_MAX_TREE:
                return None
    return out


def _copy_file(src: str, dest: str, st: os.stat_result) -> None:
    """Copy the regular file ``src`` (whose lstat was ``st``) to the new file ``dest`` with its
    permission bits (no setuid/setgid/sticky) and times.  Raises OSError when ``src`` is not as
    ``st`` said."""
    fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        now = os.fstat(fd)
        data = os.read(fd, ETC_VIEW_MAX_BYTES + 1)
    finally:
        os.close(fd)
    seen = (now.st_ino, now.st_dev, now.st_size, now.st_mtime_ns, now.st_ctime_ns)
    if seen != (st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns, st.st_ctime_ns):
        raise OSError("changed while the view was made")
    if len(data) != st.st_size:
        raise OSError("short read")
    out = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(out, data)
        os.fchmod(out, st.st_mode & 0o777)
        os.utime(out, ns=(st.st_atime_ns, st.st_mtime_ns))
    finally:
        os.close(out)


def etc_view(
    read_only: Sequence[str], read_write: Sequence[str], env: Mapping[str, str], etc: str = "/etc"
) -> tuple[str, frozenset[str]] | None:
    """One directory to bind read-only at ``/etc`` instead of one bind per ``/etc`` entry, and the
    entries it holds whole (not to be bound), or None (then each entry is bound as before).

    bwrap makes two mount(2) calls and reads ``/proc/self/mountinfo`` for every bind (about 0.13 ms
    each here; ``LINUX_ETC`` alone is some 20 entries).  The view holds, for each read-only entry
    directly in ``etc``: a copy of a regular file (same permission bits, no setuid/setgid), the same
    symbolic link, a copy of a small directory tree (``_small_tree``; times and permission bits
    kept), or an empty directory as the mount point of a bigger directory, which stays bound on its
    own.  Nothing else is in it, so nothing more is readable than with the binds, and only what this
    user can read is copied; Landlock's rules are the same paths either way.  A bound file, too, is
    the inode found when the sandbox was made.

    The view lives in ``confine-etc/KEY`` in the user's state directory (``state_dir``: beside
    the placeholder journal, never in or around a read-write path), ``KEY`` a hash of the
    ``lstat`` (device, inode, size, mode, mtime, ctime) and link target of every copied entry: one
    replaced, written or touched gives another key, hence a new view, made under a temporary name,
    each copy checked against the ``lstat`` it was keyed by, then renamed into place (rename(2):
    whole or absent).  A view's mtime is set at each use; views not used for ``ETC_VIEW_STALE_S``
    seconds are removed when a new one is made.

    None when: an entry lies deeper in ``etc`` (it would need its mount point made in the view),
    ``etc`` is a link, the state directory is missing or inside (or around) a read-write path, a
    file is unreadable or over ``ETC_VIEW_MAX_BYTES``, or anything changes while the view is made.
    Never raises."""
    from ...hardening.readset import within

    top = [p for p in read_only if p != etc and within(p, etc)]
    if not top or any(os.path.dirname(p) != etc for p in top) or os.path.islink(etc):
        return None
    state = state_dir(env, read_write)
    if state is None:
        return None
    base = os.path.join(state, "confine-etc")
    entries: list[tuple[str, list[_Entry] | None]] = []  # (path, what is copied; None: a mount point)
    try:
        for p in top:
            st = os.lstat(p)
            kind = st.st_mode & 0o170000
            if kind == _DIR:
                entries.append((p, _small_tree(p, st)))
            elif kind == _LNK:
                entries.append((p, [("", kind, st, os.readlink(p))]))
            elif kind == _REG and st.st_size <= ETC_VIEW_MAX_BYTES:
                entries.append((p, [("", kind, st, "")]))
            else:
                return None  # a device, socket or fifo (bound as before), or too big a file
    except OSError:
        return None
    key = hash(  # ints and tuples of ints hash alike in every process (only str/bytes are salted)
        tuple(
            (int.from_bytes(os.fsencode(p), "little"), -1)
            if tree is None
            else tuple(
                (
                    int.from_bytes(os.fsencode(f"{p}/{rel}\0{target}"), "little"),
                    kind,
                    *(() if kind == _LNK else (st.st_dev, st.st_ino, st.st_size, st.st_mode)),
                    *(() if kind == _LNK else (st.st_mtime_ns, st.st_ctime_ns)),
                )
                for rel, kind, st, target in tree
            )
            for p, tree in entries
        )
    )
    name = f"{key & 0xFFFFFFFFFFFFFFFF:016x}"
    view = os.path.join(base, name)
    folded = frozenset(p for p, tree in entries if tree is not None)
    if os.path.isdir(view):
        try:
            os.utime(view)  # in use: not stale for another ETC_VIEW_STALE_S (_remove_stale_views)
        except OSError:
            pass
        return view, folded
    try:
        os.makedirs(base, 0o700, exist_ok=True)
        tmp = os.path.join(base, f".{name}.{os.getpid()}.tmp")
        os.mkdir(tmp, 0o755)
    except OSError:
        return None
    try:
        dirs: list[tuple[str, os.stat_result]] = []  # directories copied: bits and times once filled
        for p, tree in entries:
            top_dest = os.path.join(tmp, os.path.basename(p))
            if tree is None:
                os.mkdir(top_dest, 0o755)  # the mount point of a directory bound on its own
            for rel, kind, st, target in tree or ():
                dest = os.path.join(top_dest, rel) if rel else top_dest
                src = os.path.join(p, rel) if rel else p
                if kind == _DIR:
                    os.mkdir(dest, 0o700)
                    dirs.append((dest, st))
                elif kind == _LNK:
                    os.symlink(target, dest)
                    os.utime(dest, ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=False)
                else:
                    _copy_file(src, dest, st)
        for dest, st in reversed(dirs):
            os.chmod(dest, st.st_mode & 0o777)
            os.utime(dest, ns=(st.st_atime_ns, st.st_mtime_ns))
        os.rename(tmp, view)
    except OSError:
        _remove_view(tmp)
        return (view, folded) if os.path.isdir(view) else None  # another confinement made it
    _remove_stale_views(base, name)
    return view, folded


def _remove_view(path: str) -> None:
    """Remove a view directory and everything in it (its copied directories made writable first:
    they carry the original's bits).  Never raises."""
    try:
        st = os.lstat(path)
    except OSError:
        return
    if (st.st_mode & 0o170000) != _DIR:
        try:
            os.unlink(path)
        except OSError:
            pass
        return
    try:
        os.chmod(path, 0o700)
        names = os.listdir(path)
    except OSError:
        names = []
    for n in names:
        _remove_view(os.path.join(path, n))
    try:
        os.rmdir(path)
    except OSError:
        pass


def _remove_stale_views(base: str, current: str) -> None:
    """Remove the views in ``base`` other than ``current`` not used for ``ETC_VIEW_STALE_S`` seconds
    (and temporary ones left that long)."""
    import time

    try:
        names = os.listdir(base)
    except OSError:
        return
    old = time.time() - ETC_VIEW_STALE_S
    for n in names:
        q = os.path.join(base, n)
        try:
            if n != current and os.lstat(q).st_mtime < old:
                _remove_view(q)
        except OSError:
            pass


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
