"""The Linux mechanism: bwrap builds the sandbox, cgroups limit it, bwrap's monitor waits on it.

create (``provision``): make the cgroup, a FIFO and a status file in the state dir, spawn bwrap inside
the cgroup (``launch.py``) with ``--block-fd`` (the FIFO, opened read-write so it never reads EOF) and
``--json-status-fd`` (the status file).  When bwrap's child sits in read(2) on the block fd, all mounts
are done and no user code has run: rlimits are set with prlimit(2), and create returns.  bwrap's
outer process (the monitor) is the pid reported and written to ``--pid-file``: it stays a child of
the caller and exits with the sandbox's status (128+n for a signal).  No Python process stays.

start: write one byte to the FIFO.  state: the monitor's identity (pid + start time) and the
``exit-code`` bwrap writes to the status file.  kill: the sandbox's first process (inside a pid
namespace: the child of bwrap's pid 1).  delete: kill the cgroup, remove what was made.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal as _signal
import time

from ...errors import LaunchFailed
from ...mechanism import Sandbox, Status, Usage
from ...state import proc_start_time, same_process
from . import process as procs
from .cgroups import Limits, manager

TYPE_CHECKING = False  # typing is not loaded at run time: the lifecycle verbs stay cheap
if TYPE_CHECKING:  # only create needs these: state/start/kill/delete never load them
    from typing import Any

    from ...bundle import Spec
    from ...capability import Capability
    from ...plan import Plan

class LinuxMechanism:
    """bubblewrap + cgroups.  ``state_dir`` of each sandbox is given in ``sandbox.private['dir']``."""

    name = "linux"

    def capabilities(self) -> list[Capability]:
        from ...capability import report

        return report()

    def make_plan(self, spec: Spec, sandbox_id: str) -> Plan:
        """The tenant Plan for ``spec``; raises ``CapabilityUnavailable`` if this host lacks what it needs."""
        import hashlib

        from ...plan import make_plan

        root = getattr(self, "root", None) or ""
        tag = hashlib.sha256(root.encode()).hexdigest()[:10]  # ids are unique per state root only
        plan = make_plan(spec, sandbox_id, cgroup_parent=f"/sandbox-shim/{tag}", state_root=root)
        self.require(plan.required)
        return plan

    def require(self, names: list[str]) -> None:
        """Raise ``CapabilityUnavailable`` for every capability in ``names`` this host lacks: probed once,
        then read from ``ROOT/.capabilities`` (probes.cache) until the host or our confinement changes."""
        from ...capability import require

        root = getattr(self, "root", None)
        require(names, cache_dir=os.path.join(root, ".capabilities") if root else None)

    # -- create ---------------------------------------------------------------------------------
    def provision(self, sandbox: Sandbox, plan: Plan) -> None:
        """Launch bwrap held before user code; fill ``sandbox.private`` with pids, cgroup, files.

        Raises:
            LaunchFailed: bwrap or a cgroup write failed; everything made so far is undone.
            BundleInvalid: a path cannot be placed safely inside the rootfs.
        """
        from .bwrap import Fds, build_args, bwrap_path
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
        console_socket = priv.pop("console_socket", None)
        preserved = preserved_fds(int(priv.pop("preserve_fds", 0) or 0))
        if plan.terminal and not console_socket:
            raise LaunchFailed("process.terminal is true but no --console-socket was given",
                               "pass --console-socket, or set process.terminal to false")
        if console_socket and not plan.terminal:
            raise LaunchFailed("--console-socket was given but process.terminal is false",
                               "set process.terminal to true, or drop --console-socket")
        with contextlib.ExitStack() as undo:
            from ...tree_claims import claim
            from .bwrap import walked_trees

            # no other live sandbox may write a tree this set-up makes mount points in (tree_claims)
            root = getattr(self, "root", None) or os.path.dirname(d)
            owner = hashlib.sha256(root.encode()).hexdigest()[:10] + "-" + sandbox.id
            held = claim(root, owner, *walked_trees(plan))
            undo.callback(held.release)
            limits = Limits.from_oci(plan.resources)
            cg = manager(plan.cgroups_path)
            created = cg.create(limits.controllers())
            priv["cgroup"] = {"version": cg.version, "path": plan.cgroups_path, "created": created}
            undo.callback(cg.remove, created)
            if priv.get("on_cgroup"):
                priv["on_cgroup"](priv["cgroup"])
            cg.apply(limits)

            fifo = os.path.join(d, "exec.fifo")
            os.mkfifo(fifo, 0o600)
            status_file = os.path.join(d, "bwrap-status.json")
            priv.update(fifo=fifo, status_file=status_file, pidns="pid" in plan.unshare)
            # bwrap inherits these with the same numbers; the block fd's number is unique in its
            # child, which makes the /proc/PID/syscall readiness check unambiguous.
            fds: dict[str, int] = {}
            fds["block"] = os.open(fifo, os.O_RDWR | os.O_CLOEXEC)
            undo.callback(os.close, fds["block"])
            fds["status"] = os.open(status_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            undo.callback(os.close, fds["status"])
            # The tenant filter is always loaded; a bundle's own linux.seccomp is stacked on top of it
            # (the kernel applies every filter, the most restrictive answer wins: seccomp(2)), so a
            # bundle can narrow the profile but never widen it.
            seccomp_files = []
            for i, bpf in enumerate(seccomp_programs(plan)):
                path = os.path.join(d, f"seccomp-{i}.bpf")  # exec'd processes load the same filters
                with open(path, "wb") as fh:
                    fh.write(bpf)
                seccomp_files.append(path)
                fds[f"seccomp{i}"] = memfd("seccomp", bpf)
                undo.callback(os.close, fds[f"seccomp{i}"])
            argv = build_args(plan, Fds(fds["block"], fds["status"],
                                        [fds[f"seccomp{i}"] for i in range(len(seccomp_files))]))
            sep = argv.index("--")  # options go through --args; bwrap wants the command on its argv
            pty: tuple[int, int] | None = None
            if plan.terminal:
                from . import console

                # the helper lands in bwrap's /dev; the workload runs through it (console.py)
                argv = [*argv[:sep], *console.helper_bind_args(), "--", *console.wrap_argv(argv[sep + 1:])]
                sep = argv.index("--")
                pty = console.open_pty()
                if plan.console_size:  # process.consoleSize: the pty's window size (tty_ioctl(4))
                    import fcntl
                    import struct
                    import termios

                    fcntl.ioctl(pty[1], termios.TIOCSWINSZ, struct.pack("HHHH", *plan.console_size, 0, 0))
                undo.callback(os.close, pty[0])
                undo.callback(os.close, pty[1])
            fds["args"] = memfd("bwrap-args", b"".join(x.encode() + b"\0" for x in argv[:sep]))
            undo.callback(os.close, fds["args"])

            from . import namespaces

            joins = namespaces.open_joins(plan.join)  # setns(2) in the child, just before bwrap runs
            try:
                # bwrap starts inside the sandbox's cgroup, so the cgroup namespace it makes is rooted
                # there and its child never runs outside it (one migration, paid before exec)
                procs_files = [os.path.join(x, "cgroup.procs") for x in cg.dirs() if os.path.isdir(x)]
                proc = spawn_bwrap([bwrap, "--args", str(fds["args"]), *argv[sep:]],
                                   [*fds.values(), *preserved], (pty[1],) * 3 if pty else priv.get("stdio"),
                                   joins, procs_files, umask=plan.umask,
                                   # exactly the config's groups, never the caller's (config_rules
                                   # refuses additionalGids where a user namespace is used)
                                   groups=() if "user" in plan.unshare or plan.uid or plan.gid
                                   else tuple(plan.additional_gids))
            finally:
                for _, jfd in joins:
                    os.close(jfd)
            undo.callback(kill_quietly, proc)
            child = wait_ready(proc, status_file, fds["block"])
            held.transfer(child)  # the claim lives as long as the sandbox's first process
            import resource

            for name, soft, hard in plan.rlimits:
                resource.prlimit(child, getattr(resource, name), (soft, hard))
            if plan.network == "isolated":
                # veth + address into the child's network namespace (pyroute2, imported only here)
                from . import network

                priv["network"] = network.setup(sandbox.id, child, plan, os.path.dirname(d))
                undo.callback(network.teardown, priv["network"])
            namespaces.apply_sysctl(child, plan.sysctl)
            namespaces.check_program(child, plan)
            if pty:
                from .console import send_master

                send_master(console_socket, pty[0], os.ttyname(pty[1]))
            priv.update(
                pid=proc.pid, pid_start=proc_start_time(proc.pid),
                init_pid=child, init_start=proc_start_time(child),
                # what an exec'd process must share with the sandbox's own (enter.py)
                process={"uid": plan.uid, "gid": plan.gid, "additional_gids": plan.additional_gids,
                         "capabilities": plan.capabilities, "rlimits": plan.rlimits, "env": plan.env,
                         "cwd": plan.cwd, "seccomp_files": seccomp_files,
                         "userns": "user" in plan.unshare or plan.uid != 0 or plan.gid != 0},
            )
            proc.returncode = 0  # the caller (or its subreaper) waits on it, not this object
            undo.pop_all()
            for fd in fds.values():
                os.close(fd)

    # -- start ----------------------------------------------------------------------------------
    def start(self, sandbox: Sandbox) -> None:
        """Release the held process: one byte into the FIFO bwrap blocks on."""
        fifo = sandbox.private["fifo"]
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as e:
            raise LaunchFailed(f"cannot open the start FIFO {fifo}: {e.strerror}",
                               "the sandbox's process is gone; delete it and create it again") from e
        try:
            os.write(fd, b"1")
        finally:
            os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(fifo)

    # -- observe --------------------------------------------------------------------------------
    def exit_status(self, sandbox: Sandbox) -> int | None:
        """The exit status bwrap recorded (128+n for a signal), or None while running / unknown."""
        code = procs.status_field(sandbox.private.get("status_file", ""), "exit-code")
        return int(code) if code is not None else None

    def alive(self, sandbox: Sandbox) -> bool:
        """True while bwrap's monitor (same pid and start time) runs and has recorded no exit."""
        p = sandbox.private
        if self.exit_status(sandbox) is not None:
            return False
        return same_process(p.get("pid", 0), p.get("pid_start"))

    def cgroup(self, sandbox: Sandbox) -> Any:
        cg = sandbox.private.get("cgroup")
        return manager(cg["path"], cg["version"]) if cg else None

    def paused(self, sandbox: Sandbox) -> bool:
        cg = self.cgroup(sandbox)
        return bool(cg and hasattr(cg, "is_frozen") and cg.is_frozen())

    def status(self, sandbox: Sandbox) -> Status:
        """The OCI status as the kernel shows it: stopped (monitor gone or exit recorded), created (the
        start FIFO still exists), paused (frozen cgroup) or running.  ``annotations`` are left empty:
        they belong to the config, which the api's record holds."""
        if not self.alive(sandbox):
            now = "stopped"
        elif os.path.exists(sandbox.private.get("fifo", "")):
            now = "created"
        elif self.paused(sandbox):
            now = "paused"
        else:
            now = "running"
        return Status(id=sandbox.id, status=now, pid=sandbox.private.get("pid", 0) if now != "stopped" else 0,
                      bundle=sandbox.bundle, annotations={},
                      exit_status=self.exit_status(sandbox) if now == "stopped" else None)

    def workload_pid(self, sandbox: Sandbox) -> int:
        """The sandbox's first user process: bwrap's child, or inside a pid namespace its child."""
        p = sandbox.private
        init = p.get("init_pid", 0)
        if not same_process(init, p.get("init_start")):
            return 0
        if p.get("pidns"):
            kids = procs.children(init)
            return kids[0] if kids else init
        return init

    def usage(self, sandbox: Sandbox) -> Usage:
        cg = self.cgroup(sandbox)
        return cg.usage() if cg else Usage()

    # -- signal / destroy -----------------------------------------------------------------------
    def signal(self, sandbox: Sandbox, signum: int, all_processes: bool = False) -> None:
        """Send ``signum`` to the workload (or every process in the cgroup with ``all_processes``)."""
        if all_processes:
            cg = self.cgroup(sandbox)
            if cg is not None:
                # bwrap's monitor shares the cgroup; it must live on to record the exit status
                cg.kill_all(signum, exclude={sandbox.private.get("pid", 0)})
                return
        pid = self.workload_pid(sandbox)
        if pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    def destroy(self, sandbox: Sandbox) -> None:
        """Kill everything of the sandbox and remove the cgroups made for it.  Never gated."""
        p = sandbox.private
        cg = self.cgroup(sandbox)
        if cg is not None:
            cg.kill_all(9)
        for pid_key, start_key in (("init_pid", "init_start"), ("pid", "pid_start")):
            if same_process(p.get(pid_key, 0), p.get(start_key)):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p[pid_key], _signal.SIGKILL)
        if cg is not None:
            cg.remove(p["cgroup"].get("created", []))
        if p.get("network"):
            from . import network

            network.teardown(p["network"])
        _reap_if_child(p.get("pid", 0), p.get("pid_start"))


def _reap_if_child(pid: int, start: int | None) -> None:
    """waitpid(2) the monitor if it is this process's own child (the library case), so a long-running
    caller does not collect zombies; a CLI caller's monitor belongs to its subreaper instead."""
    deadline = time.monotonic() + 5
    while pid and start is not None and proc_start_time(pid) == start and time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                ppid = int(fh.read().rsplit(b")", 1)[1].split()[1])
            if ppid != os.getpid():
                return
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return
        except (OSError, ValueError, IndexError):
            return
        time.sleep(0.01)


def remove_cgroups(info: dict[str, Any]) -> None:
    """Kill and remove the cgroups recorded in ``info`` (``{"version", "path", "created"}``)."""
    cg = manager(info["path"], info["version"])
    cg.remove([d for d in info.get("created", []) if os.path.isdir(d)])
