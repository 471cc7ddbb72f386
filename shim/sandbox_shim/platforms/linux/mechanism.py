"""The Linux mechanism: bwrap builds the sandbox, cgroups limit it; no process of ours stays outside.

create (``provision``): make the cgroup, a FIFO and an info file in the state dir, make this process a
child subreaper, spawn bwrap inside the cgroup (``launch.py``) with ``--block-fd`` (the FIFO, opened
read-write so it never reads EOF), ``--info-fd`` (bwrap's child's pid) and, with a new pid namespace,
``--as-pid-1``.  When bwrap's child sits in read(2) on the block fd, all mounts are done, it is in the
sandbox's namespaces and root, and no user code has run: the outer bwrap (host namespaces) is SIGKILLed
and reaped, so the kernel re-parents the child to this process and, once create exits, to the caller's
nearest subreaper (conmon, containerd-shim) or init — as with runc.  bwrap sets no parent-death signal
on its child without ``--die-with-parent``, so it lives on.  rlimits are set with prlimit(2),
``pids.max`` is written only now (the outer bwrap never counts against it), and create returns.  The
child is the pid reported, written to ``--pid-file`` and given to hooks: after start it execve's the
workload in place (pid 1 of the sandbox's pid namespace, no bwrap init).

start: write one byte to the FIFO.  state: the container process's identity (pid + start time; a
zombie is stopped) and its exit status when known (``process.py``).  kill: the container process.
delete: kill the cgroup, remove what was made.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # the C module: ``signal`` loads enum on every verb
import os

from ...errors import LaunchFailed
from ...mechanism import Identity, ProvisionOptions, Sandbox, Status, Usage
from ...state import proc_start_time
from . import process as procs
from .process import same_process as _same_process

TYPE_CHECKING = False  # typing is not loaded at run time: the lifecycle verbs stay cheap
if TYPE_CHECKING:  # only create needs these: state/start/kill/delete never load them
    from typing import Any

    from ...bundle import Spec
    from ...control import Facts
    from ...mechanism import ExecSpec, HookEntry, LaunchPlan
    from ...state import StateStore
    from .cgroups.base import CgroupManager
    from .cgroups.watch import EventsWatch
    from .enter_client import HelperStarted
    from .plan import Plan


class LinuxMechanism:
    """bubblewrap + cgroups.  ``state_dir`` of each sandbox is given in ``sandbox.private['dir']``."""

    name = "linux"
    root: str | None = None  # the state root (``platforms.select.mechanism`` sets it)

    def __init__(self, systemd_cgroup: bool = False) -> None:
        #: runc's ``--systemd-cgroup``: ``cgroupsPath`` is ``slice:prefix:name`` and systemd makes the
        #: scope (``create``; the other verbs read the choice back from the sandbox's record)
        self.systemd_cgroup = systemd_cgroup

    def make_plan(self, spec: Spec, sandbox_id: str) -> Plan:
        """The tenant Plan for ``spec``; raises ``CapabilityUnavailable`` if this host lacks what it needs."""
        from .plan import make_plan
        from .residue import root_tag

        root = getattr(self, "root", None) or ""
        tag = root_tag(root)  # ids are unique per state root only
        plan = make_plan(spec, sandbox_id, cgroup_parent=f"/sandbox-shim/{tag}", state_root=root)
        from .credentials import net_raw_problem, problems

        refused = problems(spec.config, plan.capabilities)  # what bwrap cannot do for process.user
        raw = net_raw_problem(plan.capabilities, plan.join)
        refused += [raw] if raw else []
        if refused:
            from ...errors import BundleInvalid

            raise BundleInvalid(refused)
        if self.systemd_cgroup:  # runc's grammar for the driver: "slice:prefix:name", checked before probing
            from .cgroups.systemd import parse_path

            # the default scope names the state root too (ids are unique per root only), as the
            # cgroupfs default /sandbox-shim/TAG/ID does
            root = getattr(self, "root", None) or ""
            plan.cgroups_path = spec.linux.get("cgroupsPath") or (
                f"system.slice:sandbox-shim:{claim_owner(root, sandbox_id)}"
            )
            parse_path(plan.cgroups_path, sandbox_id)
            plan.required.append("cgroup.systemd")
        self.require(plan.required)
        return plan

    def require(self, names: list[str]) -> None:
        """Raise ``CapabilityUnavailable`` for every capability in ``names`` this host lacks: probed once,
        then read from ``ROOT/.capabilities`` (probes.cache) until the host or our confinement changes."""
        from ...capability import require

        root = getattr(self, "root", None)
        require(names, cache_dir=os.path.join(root, ".capabilities") if root else None)

    def preflight(self, spec: Spec) -> None:
        """``CouldNotRun`` when ``args[0]`` is not an executable file in the rootfs as bwrap lays it out
        (``program.check``)."""
        from .program import check

        check(spec)

    # -- create ---------------------------------------------------------------------------------
    def provision(self, sandbox: Sandbox, plan: LaunchPlan, options: ProvisionOptions) -> Identity:
        """Launch bwrap held before user code; fill ``sandbox.private`` with pids, cgroup, files.
        Returns the container process (pid and start time; the init process is the same one).
        ``options.stdio`` None gives the process /dev/null on all three streams.

        Raises:
            LaunchFailed: bwrap or a cgroup write failed; everything made so far is undone; ``plan``
                is not a ``plan.Plan`` (another platform's).
            BundleInvalid: a path cannot be placed safely inside the rootfs.
        """
        from .plan import Plan

        if not isinstance(plan, Plan):
            raise LaunchFailed(f"{type(plan).__name__} is not a Linux plan", "plan with make_plan")
        from .bwrap import Fds, LinuxHost, bwrap_path, check, make_missing, render
        from .launch import (
            check_sysctl_plan,
            kill_quietly,
            memfd,
            preserved_fds,
            seccomp_programs,
            spawn_bwrap,
            wait_ready,
        )

        priv = sandbox.private
        d = priv["dir"]
        bwrap = bwrap_path()
        if not bwrap:
            raise LaunchFailed("bwrap not found", "install bubblewrap (apt-get install bubblewrap)")
        check_sysctl_plan(plan)
        from . import rlimits as _rlimits

        _rlimits.check(plan.rlimits, plan.oom_score_adj)
        console_socket = options.console_socket
        on_record = options.on_record
        preserved = preserved_fds(options.preserve_fds)
        if plan.terminal and not console_socket:
            raise LaunchFailed(
                "process.terminal is true but no --console-socket was given",
                "pass --console-socket, or set process.terminal to false",
            )
        if console_socket and not plan.terminal:
            raise LaunchFailed(
                "--console-socket was given but process.terminal is false",
                "set process.terminal to true, or drop --console-socket",
            )
        import contextlib  # create's own: the other verbs never load it (collections, functools)

        from .cgroups import Limits, manager  # the cgroup modules load when a verb uses a cgroup
        from .residue import make_fifo, write_state_file  # create's own too (residue is ~0.2 ms)

        with contextlib.ExitStack() as undo:
            stdio = options.stdio
            if stdio is None:  # /dev/null on all three: a library caller's stdio is never the tenant's
                null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
                undo.callback(os.close, null)
                stdio = (null, null, null)

            from .bwrap import walked_trees
            from .tree_claims import claim

            # no other live sandbox may write a tree this set-up makes mount points in (tree_claims)
            root = getattr(self, "root", None) or os.path.dirname(d)
            owner = claim_owner(root, sandbox.id)
            held = claim(root, owner, *walked_trees(plan))
            undo.callback(held.release)
            # the device rule list (linux.resources.devices plus the defaults) is the planner's
            limits = Limits.from_oci(plan.resources, devices=(plan.resources or {}).get("devices"))
            cg = manager(plan.cgroups_path, systemd=self.systemd_cgroup)
            recorded = None
            if on_record is not None:  # recorded before it is made: delete --force finds it after a crash
                from .residue import CreateRecord, parents_dir, planned

                recorded = CreateRecord(parents_dir(os.path.dirname(d)), on_record)
                undo.callback(recorded.release)  # the parents' lock, on any way out before confirmed
                recorded.planned(planned(cg, plan.cgroups_path))
            try:
                created = cg.create(limits.hierarchies())
            except BaseException:
                if recorded is not None:  # create removed what it made; what exists now is not ours
                    recorded.aborted()
                raise
            priv["cgroup"] = {
                "version": cg.version,
                "path": plan.cgroups_path,
                "created": created,
                "systemd": self.systemd_cgroup,
                **(
                    {"token": str(getattr(cg, "token", "")), "ino": int(getattr(cg, "ino", 0))}
                    if self.systemd_cgroup
                    else {}
                ),
            }
            undo.callback(cg.remove, created)
            if recorded is not None:  # the parents it made join the shared list; the lock goes
                recorded.confirmed(priv["cgroup"])
            pids_limit, limits.pids_limit = limits.pids_limit, None  # written once bwrap's outer is gone
            cg.apply(limits)

            fifo = os.path.join(d, "exec.fifo")
            make_fifo(fifo)  # a full or read-only state root is StateUnwritable here, before anything runs
            priv.update(fifo=fifo, pidns="pid" in plan.unshare)
            # bwrap inherits these with the same numbers; the block fd's number is unique in its
            # child, which makes the /proc/PID/syscall readiness check unambiguous.
            fds: dict[str, int] = {}
            fds["block"] = os.open(fifo, os.O_RDWR | os.O_CLOEXEC)
            undo.callback(os.close, fds["block"])
            # which fd of the held process is the FIFO, and which file it is: ``unreleased`` tells a
            # held process from a released one even after a killed ``start`` unlinked the FIFO
            fifo_st = os.fstat(fds["block"])
            priv.update(block_fd=fds["block"], fifo_id=[fifo_st.st_dev, fifo_st.st_ino])
            # --info-fd is a pipe: its read end wakes wait_ready when bwrap writes the child's pid
            info_r, fds["status"] = os.pipe2(os.O_CLOEXEC)
            undo.callback(os.close, info_r)
            undo.callback(_close_if_held, fds, "status")  # closed by this process once bwrap runs
            # The tenant filter is always loaded; a bundle's own linux.seccomp is stacked on top of it
            # (the kernel applies every filter, the most restrictive answer wins: seccomp(2)), so a
            # bundle can narrow the profile but never widen it.
            seccomp_files = []
            state_root = getattr(self, "root", None)
            cache = os.path.join(state_root, ".seccomp") if state_root else None
            for i, bpf in enumerate(seccomp_programs(plan, cache)):
                path = os.path.join(d, f"seccomp-{i}.bpf")  # exec'd processes load the same filters
                write_state_file(path, bpf)
                seccomp_files.append(path)
                fds[f"seccomp{i}"] = memfd("seccomp", bpf)
                undo.callback(os.close, fds[f"seccomp{i}"])
            # the plan's refusals that need no layout (bwrap.check), then the argv, a function of the
            # plan and of what ``host`` reports (bwrap.render): the same moment as the one walk before
            host = LinuxHost()
            check(plan, host)
            made = render(
                plan,
                Fds(fds["block"], fds["status"], [fds[f"seccomp{i}"] for i in range(len(seccomp_files))]),
                host,
            )
            argv = made.argv
            # the one step of set-up that writes into the rootfs / read-write binds: the mount points
            # and the cwd the argv names, made before bwrap runs (bwrap.make_missing)
            make_missing(made.steps, argv[argv.index("--chdir") + 1] if "--chdir" in argv else None)
            sep = argv.index("--")  # options go through --args; bwrap wants the command on its argv
            pty: tuple[int, int] | None = None
            if plan.terminal:
                from . import console

                # the helper lands in bwrap's /dev; the workload runs through it (console.py)
                argv = [*argv[:sep], *console.helper_bind_args(), "--", *console.wrap_argv(argv[sep + 1 :])]
                sep = argv.index("--")
                pty = console.open_pty()
                if plan.console_size:  # process.consoleSize: the pty's window size (tty_ioctl(4))
                    import fcntl
                    import struct
                    import termios

                    fcntl.ioctl(pty[1], termios.TIOCSWINSZ, struct.pack("HHHH", *plan.console_size, 0, 0))
                undo.callback(os.close, pty[0])
                undo.callback(os.close, pty[1])
            from . import namespaces

            joins = namespaces.open_joins(plan.join)  # setns(2) in the child, just before bwrap runs
            priv["joined"] = namespaces.identities(joins)
            pidns = [fd for t, fd in joins if t == "pid"]
            joins = [(t, fd) for t, fd in joins if t != "pid"]
            if pidns:
                # bwrap joins a pid namespace itself (--pidns): only then does it mount a procfs of
                # that namespace; without a pid flag it would bind the host's /proc (bwrap.c
                # SETUP_MOUNT_PROC).  The fd is closed with the others below.
                undo.callback(os.close, pidns[0])
                fds["pidns"] = pidns[0]
                argv = [*argv[:sep], "--pidns", str(pidns[0]), *argv[sep:]]
                sep = argv.index("--")
            fds["args"] = memfd("bwrap-args", b"".join(x.encode() + b"\0" for x in argv[:sep]))
            undo.callback(os.close, fds["args"])
            procs.become_subreaper()  # bwrap's child is re-parented here when its outer process goes
            try:
                # bwrap starts inside the sandbox's cgroup, so the cgroup namespace it makes is rooted
                # there and its child never runs outside it (one migration, paid before exec)
                procs_files = cg.join_files()
                proc = spawn_bwrap(
                    [bwrap, "--args", str(fds["args"]), *argv[sep:]],
                    [*fds.values(), *preserved],
                    (pty[1],) * 3 if pty else stdio,
                    joins,
                    procs_files,
                    umask=plan.umask,
                    # exactly the config's groups, never the caller's (config_rules
                    # refuses additionalGids where a user namespace is used)
                    groups=()
                    if "user" in plan.unshare or plan.uid or plan.gid
                    else tuple(plan.additional_gids),
                )
            finally:
                for _, jfd in joins:
                    os.close(jfd)
            undo.callback(kill_quietly, proc)
            os.close(fds.pop("status"))  # bwrap holds the write end now: EOF once it closes it
            cg.placed()
            child = wait_ready(proc, info_r, fds["block"])
            held.transfer(child)  # the claim lives as long as the sandbox's first process
            child_start = proc_start_time(child)
            undo.callback(_kill_child, child, child_start)
            kill_quietly(proc)  # the outer bwrap (host namespaces) goes: nothing of ours stays outside
            if pids_limit:
                cg.apply(Limits(pids_limit=pids_limit))
            _rlimits.apply(child, plan.rlimits, plan.oom_score_adj)
            from . import tmpfs_source

            tmpfs_source.apply(child, tmpfs_source.wanted(plan.mounts))  # /dev/shm from "shm"
            if plan.network == "isolated":
                # veth + address into the child's network namespace (rtnetlink, network.py)
                from . import network

                priv["network"] = network.setup(sandbox.id, child, plan, os.path.dirname(d))
                undo.callback(network.teardown, priv["network"])
            namespaces.apply_sysctl(child, plan.sysctl)
            namespaces.check_program(child, plan)
            if pty and console_socket:  # a terminal was refused above without a console socket
                from .console import send_master

                send_master(console_socket, pty[0], os.ttyname(pty[1]))
            priv.update(
                pid=child,
                pid_start=child_start,
                init_pid=child,
                init_start=child_start,
                # what an exec'd process must share with the sandbox's own (enter.py)
                process={
                    "uid": plan.uid,
                    "gid": plan.gid,
                    "additional_gids": plan.additional_gids,
                    "capabilities": plan.capabilities,
                    "rlimits": plan.rlimits,
                    "env": plan.env,
                    "cwd": plan.cwd,
                    "seccomp_files": seccomp_files,
                    "userns": "user" in plan.unshare,
                },
            )
            undo.pop_all()
            for fd in (*fds.values(), info_r):
                os.close(fd)
            if options.stdio is None:
                os.close(stdio[0])  # the /dev/null opened above: bwrap's child holds its own copies
        return Identity(child, child_start, child, child_start)

    def hook_entry(self, pid: int, phase: str) -> HookEntry:
        """nsenter(1) into ``pid``'s namespaces for a createContainer/startContainer hook
        (``hook_entry.py``).  Raises ``LaunchFailed`` (nsenter missing)."""
        from .hook_entry import hook_entry

        return hook_entry(pid, phase)

    # -- start ----------------------------------------------------------------------------------
    def start(self, sandbox: Sandbox) -> None:
        """Release the held process: one byte into the FIFO bwrap blocks on.

        The FIFO is opened, unlinked, then written: a start killed after the unlink is never seen as
        "created" while the process runs, and one killed before the write leaves a process still
        held on the (unlinked) FIFO, which ``unreleased`` finds through the process's own fd, so the
        status stays "created" and the next ``start`` releases it."""
        fifo = self.unreleased(sandbox) or sandbox.private["fifo"]
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as e:
            raise LaunchFailed(
                f"cannot open the start FIFO {fifo}: {e.strerror}",
                "the sandbox's process is gone; delete it and create it again",
            ) from e
        try:
            try:
                os.unlink(sandbox.private["fifo"])
            except OSError:
                pass
            os.write(fd, b"1")
        finally:
            os.close(fd)

    def unreleased(self, sandbox: Sandbox) -> str | None:
        """A path to the start FIFO while the container process is still held on it, else None: the
        FIFO itself while it exists, else the held process's own fd for it (``/proc/PID/fd/N``, the
        same file by device and inode as create recorded: nothing inside the sandbox can forge that).
        bwrap closes the block fd once it has read the byte (bwrap.c, ``--block-fd``)."""
        p = sandbox.private
        fifo = p.get("fifo", "")
        if fifo and os.path.exists(fifo):
            return str(fifo)
        if p.get("block_fd") is None or not p.get("fifo_id"):
            return None
        held = f"/proc/{p.get('pid', 0)}/fd/{p['block_fd']}"
        try:
            st = os.stat(held)
        except OSError:
            return None
        if [st.st_dev, st.st_ino] != list(p["fifo_id"]) or not self.alive(sandbox):
            return None
        return held

    # -- observe --------------------------------------------------------------------------------
    def exit_status(self, sandbox: Sandbox) -> int | None:
        """The container process's exit status (128+n for a signal), or None while running / unknown.

        Known when recorded, or while it is an unreaped zombie (/proc/PID/stat ``exit_code``; see
        ``process.py``); then recorded.  Never reaped here: a caller that is its parent (the library
        is a subreaper) may still waitpid(2) it; ``destroy`` reaps it if it is ours.
        """
        p = sandbox.private
        rec = os.path.join(p.get("dir", ""), "exit-status")
        try:
            with open(rec, encoding="ascii") as fh:
                return int(fh.read())
        except (OSError, ValueError):
            pass
        raw = procs.zombie_wait_status(p.get("pid", 0), p.get("pid_start"))
        if raw is None:
            return None
        if p.get("dir"):
            record_exit(p["dir"], procs.shell_status(raw), raw)
        return procs.shell_status(raw)

    def termination(self, sandbox: Sandbox) -> tuple[int | None, int | None] | None:
        """``(exit code, None)`` or ``(None, signal)`` once the container process ended and its wait(2)
        status was seen (recorded, or read from the zombie), else None.  Unlike ``exit_status`` this
        tells ``exit 137`` from death by SIGKILL."""
        self.exit_status(sandbox)  # records the wait status while the zombie is still there
        try:
            with open(os.path.join(sandbox.private.get("dir", ""), "wait-status"), encoding="ascii") as fh:
                raw = int(fh.read())
        except (OSError, ValueError):
            return None
        return (None, os.WTERMSIG(raw)) if os.WIFSIGNALED(raw) else (os.WEXITSTATUS(raw), None)

    def alive(self, sandbox: Sandbox) -> bool:
        """True while the container process (same pid and start time, not a zombie) runs."""
        p = sandbox.private
        return _same_process(p.get("pid", 0), p.get("pid_start"))

    def same_process(self, pid: int, start: float | None) -> bool:
        """``pid`` runs, not a zombie, and started at ``start`` (proc(5) field 22 ticks)."""
        return _same_process(pid, start)

    def cgroup(self, sandbox: Sandbox) -> CgroupManager | None:
        cg = sandbox.private.get("cgroup")
        if not cg:
            return None
        from .cgroups.detect import manager_of  # only here: ``kill`` of a running sandbox needs none

        return manager_of(cg)

    def watch(self, sandbox: Sandbox, first: Facts) -> EventsWatch | None:
        """``Mechanism.watch``: the cgroup's counters, re-read whenever ``memory.events`` changes
        (``cgroups/watch.py``); None without a cgroup."""
        cg = self.cgroup(sandbox)
        if cg is None:
            return None
        from .cgroups.watch import EventsWatch

        return EventsWatch(cg, first)

    def paused(self, sandbox: Sandbox) -> bool:
        cg = self.cgroup(sandbox)
        return bool(cg and hasattr(cg, "is_frozen") and cg.is_frozen())

    def status(self, sandbox: Sandbox) -> Status:
        """The OCI status as the kernel shows it: stopped (monitor gone or exit recorded), created (the
        process is still held on the start FIFO: ``unreleased``), paused (frozen cgroup) or running.
        ``annotations`` are left empty: they belong to the config, which the api's record holds."""
        if not self.alive(sandbox):
            now = "stopped"
        elif self.unreleased(sandbox):
            now = "created"
        elif self.paused(sandbox):
            now = "paused"
        else:
            now = "running"
        return Status(
            id=sandbox.id,
            status=now,
            pid=sandbox.private.get("pid", 0) if now != "stopped" else 0,
            bundle=sandbox.bundle,
            annotations={},
            exit_status=self.exit_status(sandbox) if now == "stopped" else None,
        )

    def workload_pid(self, sandbox: Sandbox) -> int:
        """The container process (``state.pid``): bwrap's child, which execve's the workload in place."""
        p = sandbox.private
        return p["pid"] if _same_process(p.get("pid", 0), p.get("pid_start")) else 0

    def usage(self, sandbox: Sandbox) -> Usage:
        cg = self.cgroup(sandbox)
        return cg.usage() if cg else Usage()

    # -- exec and what the library asks of a running sandbox ------------------------------------
    def exec(self, sandbox: Sandbox, spec: ExecSpec) -> HelperStarted:
        """Start ``spec`` in the running sandbox through the helper ``enter.py`` (``enter_client.py``):
        the workload's namespaces, root, credentials, rlimits and seccomp filters, and the cgroup
        joined through the manager's ``join_files``."""
        from .enter_client import exec_in

        return exec_in(sandbox, self.workload_pid(sandbox), self.cgroup(sandbox), spec)

    def cpu_limit(self, sandbox: Sandbox) -> int | None:
        """RLIMIT_CPU's soft value from ``process.rlimits`` as applied at create, or None."""
        rlimits = (sandbox.private.get("process") or {}).get("rlimits") or []
        return next((int(r[1]) for r in rlimits if r[0] == "RLIMIT_CPU"), None)

    def network_address(self, sandbox: Sandbox) -> str | None:
        """``"10.213.a.c:PORT"`` from the isolated network made at create (``network.setup``), else None."""
        net = sandbox.private.get("network")
        if not isinstance(net, dict) or net.get("mode") != "isolated":
            return None
        ip, port = net.get("address"), net.get("port")
        return f"{ip}:{int(port)}" if ip and port else None

    def joined_namespaces(self, sandbox: Sandbox) -> dict[str, str]:
        """The namespaces joined by path at create (``namespaces.identities``)."""
        return dict(sandbox.private.get("joined") or {})

    # -- signal / destroy -----------------------------------------------------------------------
    def signal(self, sandbox: Sandbox, signum: int, all_processes: bool = False) -> None:
        """Send ``signum`` to the workload (or every process in the cgroup with ``all_processes``)."""
        if all_processes:
            cg = self.cgroup(sandbox)
            if cg is not None:
                cg.kill_all(signum)
                return
        pid = self.workload_pid(sandbox)
        if pid:
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass

    def destroy(self, sandbox: Sandbox) -> None:
        """Kill everything of the sandbox and remove the cgroups made for it.  Never gated."""
        p = sandbox.private
        cg = self.cgroup(sandbox)
        if cg is not None:
            cg.kill_all(9)
        _kill_child(p.get("pid", 0), p.get("pid_start"))
        if cg is not None:
            cg.remove(p["cgroup"].get("created", []))
        if p.get("network"):
            from . import network

            network.teardown(p["network"])

    # -- what outlives the state dir ----------------------------------------------------------
    def remove_residue(self, store: StateStore, sandbox_id: str) -> list[str]:
        """Remove the cgroups, parents and network links recorded for ``sandbox_id`` (``residue.py``)
        and probe cgroups a killed prober left.  Returns problems, one line each."""
        from . import residue
        from .tree_claims import drop

        problems = residue.remove(store, sandbox_id)
        residue.sweep_probe_cgroups()  # a prober killed mid-probe (a first create on this root) left these
        try:  # the claim is stale once the sandbox is gone; this tidies it
            drop(store.root, claim_owner(store.root, sandbox_id))
        except OSError:
            pass
        return problems

    def observed_cgroups(self, root: str) -> dict[str, dict[str, Any]]:
        """Records (as ``ROOT/.cgroups/ID`` holds them) of the sandboxes the cgroup tree shows under
        this state root's own tagged parent (``residue.observed``), whatever the store still has."""
        from . import residue

        return residue.observed(root)

    def lost_pids(self, info: dict[str, Any]) -> list[int] | None:
        """Live pids (pid + start time readable) of the cgroup recorded in ``info`` (``ROOT/.cgroups/ID``),
        or None when none of its directories exists any more."""
        from .cgroups.detect import manager_of

        cg = manager_of(info)
        if not any(os.path.isdir(d) for d in cg.dirs()):
            return None
        return [p for p in cg.pids() if proc_start_time(p) is not None]


def _close_if_held(fds: dict[str, int], name: str) -> None:
    """Close ``fds[name]`` unless it was closed (and popped) already: never a number reused since."""
    fd = fds.pop(name, None)
    if fd is not None:
        os.close(fd)


def _kill_child(pid: int, start: int | None) -> None:
    """SIGKILL the container process if it is still the one recorded and wait (up to 5 s) until it
    has exited, so ``delete`` reports it killed only once no code runs in it; reap it if it is our
    child (the library case), so a long-running caller collects no zombies.

    The process is held by a pidfd opened before its identity (pid + start time) is checked, so the
    signal and the wait reach that process even if the pid were reused (pidfd_send_signal(2)); the
    wait is poll(2) on the pidfd (readable once it exited, a child or not: pidfd_open(2)), not a sleep.
    """
    if not pid or start is None:
        return
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:  # gone already
        return
    try:
        if proc_start_time(pid) != start:
            return
        try:
            _signal.pidfd_send_signal(pidfd, _signal.SIGKILL)
        except ProcessLookupError:
            pass
        import select

        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        poller.poll(5000)
        if procs.parent_of(pid) == os.getpid():
            procs.reap(pid, start)
    finally:
        os.close(pidfd)


def record_exit(state_dir: str, code: int, raw: int | None = None) -> None:
    """Write ``code`` to ``STATE_DIR/exit-status`` and the wait(2) status word ``raw`` to
    ``STATE_DIR/wait-status`` (each atomically) unless already there."""
    if not os.path.isdir(state_dir):
        return
    for name, value in (("wait-status", raw), ("exit-status", code)):  # exit-status last: it means "done"
        path = os.path.join(state_dir, name)
        if value is None or os.path.exists(path):
            continue
        tmp = f"{path}.{os.getpid()}"
        try:
            with open(tmp, "w", encoding="ascii") as fh:
                fh.write(str(value))
            os.replace(tmp, path)
        except OSError:
            pass


def remove_cgroups(info: dict[str, Any]) -> None:
    """Kill and remove the cgroups recorded in ``info`` (``{"version", "path", "created"}``)."""
    from .cgroups.detect import manager_of

    cg = manager_of(info)
    cg.remove([d for d in info.get("created", []) if os.path.isdir(d)])


def claim_owner(root: str, sandbox_id: str) -> str:
    """The tree-claim owner of a sandbox (``tree_claims``): ids are unique per state root only."""
    from .residue import root_tag

    return root_tag(root) + "-" + sandbox_id


if TYPE_CHECKING:
    from ...mechanism import Mechanism

    #: never evaluated: mypy checks ``LinuxMechanism`` against the ``Mechanism`` protocol
    #: here, on any OS (``mypy shim``); a member missing or off its type fails.  The one line a
    #: platform's mechanism needs to be on the contract (``tests/test_mechanism_contract.py`` fails for
    #: a mechanism class of a platform folder without it).
    _CONTRACT: Mechanism = LinuxMechanism()
