"""``DarwinSeatbeltMechanism``: the ``Mechanism`` protocol on macOS ``sandbox-exec`` (tenant bundles).

create (``provision``): plan (``plan.py``), refuse on missing capabilities, write the tenant SBPL
profile (``tenant_profile``) into the state dir, **compile-check** it by running ``/usr/bin/true``
under the very launch command (a rule this macOS rejects is a ``CannotEnforce`` with sandbox-exec's
message, never the workload's exit status), then start the held monitor (``launcher.py``) whose
command is ``/usr/bin/env -i ENV... sandbox-exec -f PROFILE -D NAME=PATH... -- PROGRAM ARGS``.
start: release the FIFO.  kill: the workload (the monitor's child), or with ``all_processes`` every
member of the process group but the monitor (so it still records the status).  delete: SIGKILL to
the process group.  usage: psutil over the monitor's descendants.  The wall clock is enforced by
``wait`` (a shim process waiting), with ``LimitExceeded("wall_clock")``.

Limits of this design, stated: rlimits are per process (``plan.py``); a workload that calls
setsid(2) leaves the process group and survives ``delete`` (Seatbelt does not stop it); there is no
pause/resume and no exec here.  ``Sandbox.private`` needs ``dir`` (the state dir) and receives
``pid``, ``pid_start``, ``fifo``, ``status_file``, ``profile``, ``started``, ``started_at``, ``wall_clock``.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence

from ...capability import Capability
from ...errors import CannotEnforce, CapabilityUnavailable, LaunchFailed, LimitExceeded
from ...mechanism import Identity, ProvisionOptions, Sandbox, Status, Usage
from . import launcher
from .plan import NOT_ON_MACOS, PROBED, DarwinPlan, check_requirements, plan_from_spec
from .seatbelt import RUNTIME_READ, SANDBOX_EXEC, Profile, build_profile

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ...bundle import Spec
    from ...mechanism import CgroupControl, ExecSpec, HostRecord, LaunchPlan, Started
    from ...state import StateStore

ENV = "/usr/bin/env"
TRUE = "/usr/bin/true"
COMPILE_TIMEOUT = 20.0  # seconds
MECHANISM = "sandbox-exec"
#: the runtime read set plus ``/private/var/select``: macOS ``/bin/sh`` is a trampoline that execs the
#: shell named by the symlink ``/private/var/select/sh`` (so ``#!/bin/sh`` scripts need to read it).
TENANT_READ = (*RUNTIME_READ, "/private/var/select")


def _ancestors(paths: Sequence[str]) -> list[str]:
    """Every proper ancestor directory of ``paths`` except ``/``, sorted."""
    out: set[str] = set()
    for p in paths:
        d = os.path.dirname(p)
        while d not in ("/", ""):
            out.add(d)
            d = os.path.dirname(d)
    return sorted(out)


def tenant_profile(
    plan: DarwinPlan,
    *,
    resolve: Callable[[str], str] = os.path.realpath,
    runtime_read: Sequence[str] = TENANT_READ,
) -> Profile:
    """The deny-default SBPL profile of a tenant bundle.

    Order (a later matching rule wins): the builder's header, the runtime read set, the blanket deny
    of the bundles root (the bundle's parent: sibling tenants and this bundle's own config.json),
    unless that parent contains a runtime path or is ``/``; ``(allow network*)`` only for
    ``network == "host"``, else a deny of the DNS services' mach-lookup (mDNSResponder); then,
    after the deny, the rootfs read-only (``ROOTFS``), storage read-write or read-only
    (``STORAGE``) and metadata of their ancestors (``TMETA_i``).  Every path goes through
    ``resolve`` (macOS: ``/tmp`` -> ``/private/tmp``) and is a ``-D`` parameter.

    Returns: the ``Profile`` (text + params).  Raises: ValueError for a relative path.
    """
    runtime = [resolve(p) for p in runtime_read]
    parent = resolve(os.path.dirname(plan.bundle))
    covers_runtime = any(r == parent or r.startswith(parent.rstrip("/") + "/") for r in runtime)
    deny = [] if parent == "/" or covers_runtime else [parent]
    base = build_profile(runtime, [], network=plan.network == "host", deny=deny, resolve=resolve)
    params = dict(base.params)
    rootfs = resolve(plan.rootfs)
    params["ROOTFS"] = rootfs
    lines = []
    if plan.network != "host":  # the header allows mach-lookup; name resolution by proxy would leak
        lines.append(
            '(deny mach-lookup (global-name "com.apple.dnssd.service") '
            '(global-name "com.apple.mDNSResponder"))'
        )
    lines += [
        "; the bundle, after the deny: rootfs read-only, storage as mounted",
        '(allow file-read* (subpath (param "ROOTFS")))',
    ]
    granted = [rootfs]
    if plan.storage:
        params["STORAGE"] = resolve(plan.storage)
        granted.append(params["STORAGE"])
        access = "file-read*" if plan.storage_readonly else "file-read* file-write*"
        lines.append(f'(allow {access} (subpath (param "STORAGE")))')
    meta = _ancestors(granted)
    if meta:
        refs = []
        for i, p in enumerate(meta):
            params[f"TMETA_{i}"] = p
            refs.append(f'(literal (param "TMETA_{i}"))')
        lines.append("(allow file-read-metadata\n  " + "\n  ".join(refs) + ")")
    return Profile(base.text + "\n".join(lines) + "\n", params)


def launch_argv(
    plan: DarwinPlan,
    profile: Profile,
    profile_file: str,
    *,
    program: Sequence[str] | None = None,
    sandbox_exec: str = SANDBOX_EXEC,
) -> list[str]:
    """``env -i NAME=VALUE... sandbox-exec -f FILE -D NAME=PATH... -- PROGRAM ARGS``.

    ``program`` replaces ``plan.args`` (the compile check passes ``["/usr/bin/true"]``).
    """
    env = [f"{k}={v}" for k, v in plan.env.items()]
    return [
        ENV,
        "-i",
        *env,
        sandbox_exec,
        "-f",
        profile_file,
        *profile.define_args(),
        "--",
        *(program if program is not None else plan.args),
    ]


def compile_check(argv: Sequence[str], timeout: float = COMPILE_TIMEOUT) -> None:
    """Run ``argv`` (a launch argv whose program is ``/usr/bin/true``); exit 0 or ``CannotEnforce``.

    Raises:
        CannotEnforce("seatbelt", sandbox-exec's message): the profile was rejected or did not apply.
    """
    try:
        r = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, env=launcher.MONITOR_ENV
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise CannotEnforce("seatbelt", f"sandbox-exec did not run: {e}") from e
    if r.returncode != 0:
        msg = (r.stderr.strip() or r.stdout.strip())[:400]
        raise CannotEnforce("seatbelt", f"sandbox-exec rejected the profile (exit {r.returncode}): {msg}")


#: the report ``exec`` refuses with (exit status 4, "not available")
EXEC_UNAVAILABLE = Capability(
    "exec", False, "sandbox-exec", "macOS cannot enter a running Seatbelt sandbox", "not offered"
)


def _refuse_options(options: ProvisionOptions) -> None:
    """``CapabilityUnavailable`` for what the launcher cannot give the workload: a terminal through a
    console socket, fds beyond stdio.  Never dropped silently."""
    missing = []
    if options.console_socket:
        missing.append(
            Capability(
                "console-socket", False, "sandbox-exec", "no terminal is passed on macOS", "not offered"
            )
        )
    if options.preserve_fds:
        missing.append(
            Capability(
                "preserve-fds",
                False,
                "sandbox-exec",
                "no fds beyond stdio are passed on macOS",
                "not offered",
            )
        )
    if missing:
        raise CapabilityUnavailable(missing)


class DarwinSeatbeltMechanism:
    """sandbox-exec with a generated deny-default profile (ARCHITECTURE.md section 6, macOS).

    Args:
        probe: returns this host's reports (default ``darwin_capabilities``).
        sandbox_exec: the ``sandbox-exec`` binary.
    """

    name = "darwin-seatbelt"
    root: str | None = None  # the state root (``platforms.select.mechanism`` sets it)
    systemd_cgroup = False  # runc's --systemd-cgroup: no meaning on macOS

    def __init__(
        self, probe: Callable[[], list[Capability]] | None = None, sandbox_exec: str = SANDBOX_EXEC
    ) -> None:
        self._probe = probe or darwin_capabilities
        self._reports: list[Capability] | None = None
        self.sandbox_exec = sandbox_exec
        self._procs: dict[str, subprocess.Popen[bytes]] = {}

    def capabilities(self) -> list[Capability]:
        """This host's reports (probed on first call, then cached for this instance)."""
        if self._reports is None:
            self._reports = list(self._probe())
        return self._reports

    def make_plan(self, spec: Spec, sandbox_id: str) -> DarwinPlan:
        """The macOS plan for a loaded bundle (``bundle.Spec``); refuses what this host lacks.

        Raises:
            BundleInvalid: the bundle cannot be expressed on macOS; CapabilityUnavailable: see ``require``.
        """
        plan = plan_from_spec(spec)
        check_requirements(plan, self.capabilities())
        return plan

    def require(self, names: Sequence[str]) -> None:  # list[str] in the protocol
        """Raise ``CapabilityUnavailable`` for each of ``names`` this host does not provide."""
        by_name = {r.name: r for r in self.capabilities()}
        missing = [
            by_name.get(n) or Capability(n, False, "sandbox-exec", "not provided on macOS", "not reported")
            for n in names
        ]
        missing = [r for r in missing if not r.available]
        if missing:
            raise CapabilityUnavailable(missing)

    def provision(self, sandbox: Sandbox, plan: LaunchPlan, options: ProvisionOptions) -> Identity:
        """OCI create: profile written and compile-checked, monitor held on the FIFO.

        Args:
            sandbox: ``private["dir"]`` must be an existing private directory (the state dir).
            plan: the ``DarwinPlan`` ``make_plan`` made from the bundle's ``Spec``.
            options: ``stdio`` is the workload's stdin/stdout/stderr (None: /dev/null on all three);
                a ``console_socket`` or ``preserve_fds`` is refused (no terminal or fd passing here);
                ``on_record`` is not called (nothing outlives the state dir).
        Returns:
            the monitor's pid and start time, as both ``pid`` and ``init_pid`` (the workload exists
            only after start; see ``workload_pid``).
        Raises:
            CapabilityUnavailable: before anything is made (also for a console socket or preserved
            fds).  CannotEnforce: sandbox-exec rejected the profile.  LaunchFailed: the monitor did
            not start; ``plan`` is not a ``DarwinPlan``.
        """
        if not isinstance(plan, DarwinPlan):
            raise LaunchFailed(
                f"{type(plan).__name__} is not a macOS plan", "plan with this mechanism's make_plan"
            )
        check_requirements(plan, self.capabilities())
        _refuse_options(options)
        stdio: tuple[int, int, int] = options.stdio or (subprocess.DEVNULL,) * 3
        d = sandbox.private["dir"]
        profile = tenant_profile(plan)
        with contextlib.ExitStack() as undo:
            profile_file = os.path.join(d, "profile.sb")
            fd = os.open(profile_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            undo.callback(_unlink, profile_file)
            with os.fdopen(fd, "w") as fh:
                fh.write(profile.text)
            compile_check(
                launch_argv(plan, profile, profile_file, program=[TRUE], sandbox_exec=self.sandbox_exec)
            )
            fifo, status_file = os.path.join(d, "start.fifo"), os.path.join(d, "exit-status")
            os.mkfifo(fifo, 0o600)
            undo.callback(_unlink, fifo)
            argv = launch_argv(plan, profile, profile_file, sandbox_exec=self.sandbox_exec)
            proc = launcher.spawn_held(
                argv, fifo=fifo, status_file=status_file, rlimits=plan.rlimits, cwd=plan.cwd, stdio=stdio
            )
            undo.callback(launcher.kill_group, proc.pid)
            start = launcher.identity(proc.pid)
            # init_* = the monitor too: the workload exists only after start (see ``workload_pid``)
            sandbox.private.update(
                pid=proc.pid,
                pid_start=start,
                init_pid=proc.pid,
                init_start=start,
                fifo=fifo,
                status_file=status_file,
                profile=profile_file,
                started=False,
                wall_clock=plan.wall_clock,
                cpu_limit=next((soft for name, soft, _ in plan.rlimits if name == "RLIMIT_CPU"), None),
            )
            self._procs[sandbox.id] = proc
            undo.pop_all()
        return Identity(proc.pid, start, proc.pid, start)

    def start(self, sandbox: Sandbox) -> None:
        """OCI start: release the gate.  Raises LaunchFailed when the held process is gone."""
        launcher.release(sandbox.private["fifo"])
        sandbox.private.update(started=True, started_at=time.time())

    def exit_status(self, sandbox: Sandbox) -> int | None:
        """The status the monitor recorded (128+n for a signal), or None while running / unknown."""
        return launcher.read_status(sandbox.private.get("status_file", ""))

    def alive(self, sandbox: Sandbox) -> bool:
        """True while the monitor (same pid and start time) runs and has recorded no status."""
        p = sandbox.private
        proc = self._procs.get(sandbox.id)
        if proc is not None:
            proc.poll()  # reap our own child so it is not a zombie
        return self.exit_status(sandbox) is None and launcher.running(p.get("pid", 0), p.get("pid_start"))

    def paused(self, sandbox: Sandbox) -> bool:
        """Always False: this mechanism has no pause (no freezer on macOS; SIGSTOP is not offered)."""
        return False

    def cgroup(self, sandbox: Sandbox) -> CgroupControl | None:
        """None: macOS has no control groups (pause, update and stats refuse)."""
        return None

    def exec(self, sandbox: Sandbox, spec: ExecSpec) -> Started:
        """Refused: a Seatbelt sandbox cannot be entered by another process (no namespaces to join;
        a profile applies only to the process sandbox-exec starts and its descendants)."""
        raise CapabilityUnavailable([EXEC_UNAVAILABLE])

    def cpu_limit(self, sandbox: Sandbox) -> int | None:
        """RLIMIT_CPU's soft value as set on the workload at create, or None."""
        limit = sandbox.private.get("cpu_limit")
        return int(limit) if limit is not None else None

    def network_address(self, sandbox: Sandbox) -> str | None:
        """None: a Seatbelt sandbox has no network address of its own."""
        return None

    def joined_namespaces(self, sandbox: Sandbox) -> dict[str, str]:
        """``{}``: macOS has no namespaces."""
        return {}

    def termination(self, sandbox: Sandbox) -> tuple[int | None, int | None] | None:
        """None: the monitor records a shell status only (``exit_status``)."""
        return None

    def remove_residue(self, store: StateStore, sandbox_id: str) -> list[str]:
        """Nothing lives outside the state dir here: drops the (empty) cgroup record.  Returns []."""
        store.drop_cgroup_index(sandbox_id)
        return []

    def observed_cgroups(self, root: str) -> dict[str, HostRecord]:
        """``{}``: no host object outlives a macOS sandbox's state."""
        return {}

    def lost_pids(self, info: HostRecord) -> list[int] | None:
        """None: no host object outlives a macOS sandbox's state."""
        return None

    def status(self, sandbox: Sandbox) -> Status:
        """created (held), running, or stopped with the recorded exit status."""
        if not self.alive(sandbox):
            return Status(sandbox.id, "stopped", 0, sandbox.bundle, {}, exit_status=self.exit_status(sandbox))
        state = "running" if sandbox.private.get("started") else "created"
        return Status(sandbox.id, state, int(sandbox.private["pid"]), sandbox.bundle, {})

    def workload_pid(self, sandbox: Sandbox) -> int:
        """The workload: the monitor's child once started; the monitor itself while held; 0 if gone."""
        import psutil

        p = sandbox.private
        if not launcher.running(p.get("pid", 0), p.get("pid_start")):
            return 0
        with contextlib.suppress(psutil.Error):
            kids = psutil.Process(p["pid"]).children()
            if kids:
                return int(kids[0].pid)
        return int(p["pid"])

    def signal(self, sandbox: Sandbox, signum: int, all_processes: bool = False) -> None:
        """Deliver ``signum`` to the workload, or to every group member but the monitor."""
        p = sandbox.private
        if not launcher.running(p.get("pid", 0), p.get("pid_start")):
            return
        if all_processes and p.get("started"):
            for m in launcher.members(p["pid"]):
                if m.pid != p["pid"]:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(m.pid, signum)
            return
        pid = self.workload_pid(sandbox)
        if pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    def usage(self, sandbox: Sandbox) -> Usage:
        """psutil over the monitor's descendants: RSS (bytes), CPU (microseconds), process count.

        The peak is not available from psutil on macOS (None); I/O counters are not either (None).
        """
        import psutil

        p = sandbox.private
        if not launcher.running(p.get("pid", 0), p.get("pid_start")):
            return Usage(pids=0)
        rss = user = system = n = 0
        with contextlib.suppress(psutil.Error):
            for c in psutil.Process(p["pid"]).children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    rss += c.memory_info().rss
                    t = c.cpu_times()
                    user += int(t.user * 1e6)
                    system += int(t.system * 1e6)
                    n += 1
        return Usage(memory_bytes=rss, cpu_user_us=user, cpu_system_us=system, pids=n)

    def wait(self, sandbox: Sandbox, timeout_s: float | None = None, poll_s: float = 0.05) -> int | None:
        """Wait for the sandbox to stop, enforcing its wall clock from ``start``.

        Returns: the exit status, or None when ``timeout_s`` (seconds) passed first.
        Raises: LimitExceeded("wall_clock"): the wall clock ran out; the process group was killed.
        """
        p = sandbox.private
        now = time.time()
        end = now + timeout_s if timeout_s is not None else None
        wall = p.get("wall_clock")
        limit = (p.get("started_at") or now) + wall if wall and p.get("started") else None
        while self.alive(sandbox):
            t = time.time()
            if limit is not None and t >= limit:
                self.destroy(sandbox)
                raise LimitExceeded("wall_clock", f"{wall:g} s")
            if end is not None and t >= end:
                return None
            time.sleep(poll_s)
        return self.exit_status(sandbox)

    def destroy(self, sandbox: Sandbox) -> None:
        """OCI delete: SIGKILL to the process group (only while the monitor is ours), files removed."""
        p = sandbox.private
        if launcher.running(p.get("pid", 0), p.get("pid_start")):
            launcher.kill_group(p["pid"])
        proc = self._procs.pop(sandbox.id, None)
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        for key in ("fifo", "profile", "status_file"):
            _unlink(p.get(key))


def _unlink(path: str | None) -> None:
    if path:
        with contextlib.suppress(OSError):
            os.unlink(path)


# ---- capability probes: each one tried on this host (a control that must pass, then the breach) ----

_MARK = "sandbox-shim-probe-ok"


def _run(argv: Sequence[str], preexec: Callable[[], None] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(argv),
        capture_output=True,
        text=True,
        timeout=COMPILE_TIMEOUT,
        preexec_fn=preexec,
        env=launcher.MONITOR_ENV,
    )


def _sbpl(read: Sequence[str], network: bool) -> Profile:
    return build_profile([*RUNTIME_READ, *read], [], network=network)


def _under(profile: Profile, argv: Sequence[str], sandbox_exec: str) -> subprocess.CompletedProcess[str]:
    return _run([sandbox_exec, "-p", profile.text, *profile.define_args(), "--", *argv])


def _trial(
    name: str,
    measured: str,
    control: Callable[[], subprocess.CompletedProcess[str]],
    breach: Callable[[], subprocess.CompletedProcess[str]],
) -> Capability:
    try:
        c = control()
        if c.returncode != 0 or _MARK not in c.stdout:
            return Capability(
                name, False, MECHANISM, f"control failed ({c.returncode}): {c.stderr[:200]}", measured
            )
        b = breach()
    except (OSError, subprocess.SubprocessError) as e:
        return Capability(name, False, MECHANISM, f"cannot run the trial: {e}", measured)
    if _MARK in b.stdout:
        return Capability(name, False, MECHANISM, "the breach succeeded: not enforced here", measured)
    return Capability(name, True, MECHANISM, "", measured)


def _rlimit(*limits: tuple[str, int]) -> Callable[[], None]:
    import resource

    def apply() -> None:  # in the forked child
        for kind, value in limits:
            resource.setrlimit(getattr(resource, kind), (value, value))

    return apply


def darwin_capabilities(sandbox_exec: str = SANDBOX_EXEC) -> list[Capability]:
    """Probe what this mechanism can enforce here; every report is a trial, never a version check.

    * ``seatbelt``: the tenant-shaped deny-default profile runs ``/usr/bin/true`` under sandbox-exec.
    * ``filesystem.confinement``: ``/bin/cat`` of a temp file prints it when granted (control) and
      is refused without the grant (breach).
    * ``network.deny``: ``/usr/bin/nc -z`` to a listener on 127.0.0.1 connects with
      ``(allow network*)`` and fails without it.
    * ``rlimit.memory``: a Python child allocates 1 GiB; refused under RLIMIT_AS+RLIMIT_DATA 256 MiB.
    * ``rlimit.cpu``: a Python child spinning is stopped within RLIMIT_CPU 1 s.
    * ``rlimit.nproc``: fork(2) in a Python child fails under RLIMIT_NPROC 1.
    Names in ``NOT_ON_MACOS`` are always unavailable.  Off macOS every report is unavailable.

    Returns: one ``Capability`` per name; never raises.
    """
    fixed = [Capability(n, False, MECHANISM, why, "not provided by macOS") for n, why in NOT_ON_MACOS.items()]
    if sys.platform != "darwin":
        return [Capability(n, False, MECHANISM, "not macOS", "sys.platform") for n in PROBED] + fixed
    import socket
    import tempfile

    out: list[Capability] = []
    base, measured = _sbpl([], False), "sandbox-exec -p <deny default> -D ... -- /usr/bin/true"
    try:
        compile_check([sandbox_exec, "-p", base.text, *base.define_args(), "--", TRUE])
        out.append(Capability("seatbelt", True, MECHANISM, "", measured))
    except CannotEnforce as e:
        out.append(Capability("seatbelt", False, MECHANISM, e.detail, measured))
    with tempfile.TemporaryDirectory() as tmp:
        f = os.path.join(os.path.realpath(tmp), "probe")
        with open(f, "w") as fh:
            fh.write(_MARK)
        out.append(
            _trial(
                "filesystem.confinement",
                "/bin/cat of a file granted vs not granted",
                lambda: _under(_sbpl([f], False), ["/bin/cat", f], sandbox_exec),
                lambda: _under(_sbpl([], False), ["/bin/cat", f], sandbox_exec),
            )
        )
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(4)
        port = str(srv.getsockname()[1])
        nc = ["/bin/sh", "-c", f"/usr/bin/nc -z -w 3 127.0.0.1 {port} && echo {_MARK}"]
        out.append(
            _trial(
                "network.deny",
                "nc -z 127.0.0.1 with and without (allow network*)",
                lambda: _under(_sbpl([], True), nc, sandbox_exec),
                lambda: _under(_sbpl([], False), nc, sandbox_exec),
            )
        )
    py = sys.executable
    alloc = [py, "-c", f"b = bytearray(1 << 30); b[::4096] = b'x' * len(b[::4096]); print('{_MARK}')"]
    out.append(
        _trial(
            "rlimit.memory",
            "1 GiB allocation with/without RLIMIT_AS+RLIMIT_DATA 256 MiB",
            lambda: _run(alloc),
            lambda: _run(alloc, _rlimit(("RLIMIT_AS", 1 << 28), ("RLIMIT_DATA", 1 << 28))),
        )
    )
    spin = [
        py,
        "-c",
        f"import time\nt = time.process_time()\nwhile time.process_time() - t < 3: pass\nprint('{_MARK}')",
    ]
    out.append(
        _trial(
            "rlimit.cpu",
            "3 s CPU loop with/without RLIMIT_CPU 1 s",
            lambda: _run(spin),
            lambda: _run(spin, _rlimit(("RLIMIT_CPU", 1))),
        )
    )
    fork = [
        py,
        "-c",
        f"import os\npid = os.fork()\nif pid == 0: os._exit(0)\nos.waitpid(pid, 0)\nprint('{_MARK}')",
    ]
    out.append(
        _trial(
            "rlimit.nproc",
            "fork(2) with/without RLIMIT_NPROC 1",
            lambda: _run(fork),
            lambda: _run(fork, _rlimit(("RLIMIT_NPROC", 1))),
        )
    )
    return out + fixed
