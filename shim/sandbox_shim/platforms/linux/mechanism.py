"""The Linux mechanism: bwrap builds the sandbox, cgroups limit it, bwrap's monitor waits on it.

create (``provision``): make the cgroup, a FIFO and a status file in the state dir, spawn bwrap with
``--block-fd`` (the FIFO, opened read-write so it never reads EOF) and ``--json-status-fd`` (the status
file).  When bwrap's child sits in read(2) on the block fd, all mounts are done and no user code has
run: the child is moved into its cgroup, rlimits are set with prlimit(2), and create returns.  bwrap's
outer process (the monitor) is the pid reported and written to ``--pid-file``: it stays a child of
the caller and exits with the sandbox's status (128+n for a signal).  No Python process stays.

start: write one byte to the FIFO.  state: the monitor's identity (pid + start time) and the
``exit-code`` bwrap writes to the status file.  kill: the sandbox's first process (inside a pid
namespace: the child of bwrap's pid 1).  delete: kill the cgroup, remove what was made.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal as _signal
import subprocess
import time
from typing import Any

from ...capability import Capability
from ...errors import LaunchFailed
from ...mechanism import Sandbox, Status, Usage
from ...plan import Plan
from ...state import proc_start_time, same_process
from . import process as procs
from .bwrap import Fds, build_args, bwrap_path
from .cgroups import Limits, manager

READY_TIMEOUT = 30.0  # seconds bwrap may take to set up mounts


class LinuxMechanism:
    """bubblewrap + cgroups.  ``state_dir`` of each sandbox is given in ``sandbox.private['dir']``."""

    name = "linux"

    def capabilities(self) -> list[Capability]:
        from ...capability import report

        return report()

    # -- create ---------------------------------------------------------------------------------
    def provision(self, sandbox: Sandbox, plan: Plan) -> None:
        """Launch bwrap held before user code; fill ``sandbox.private`` with pids, cgroup, files.

        Raises:
            LaunchFailed: bwrap or a cgroup write failed; everything made so far is undone.
            BundleInvalid: a path cannot be placed safely inside the rootfs.
        """
        priv = sandbox.private
        d = priv["dir"]
        bwrap = bwrap_path()
        if not bwrap:
            raise LaunchFailed("bwrap not found", "install bubblewrap (apt-get install bubblewrap)")
        with contextlib.ExitStack() as undo:
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
            from .seccomp import compile_bpf

            section = plan.seccomp if plan.seccomp is not None or not plan.allow_nested_userns \
                else _tenant_section_with_userns()
            bpf = compile_bpf(section)
            with open(os.path.join(d, "seccomp.bpf"), "wb") as fh:  # exec'd processes load the same filter
                fh.write(bpf)
            fds["seccomp"] = _memfd("seccomp", bpf)
            undo.callback(os.close, fds["seccomp"])
            argv = build_args(plan, Fds(fds["block"], fds["status"], fds["seccomp"]))
            sep = argv.index("--")  # options go through --args; bwrap wants the command on its argv
            fds["args"] = _memfd("bwrap-args", b"".join(x.encode() + b"\0" for x in argv[:sep]))
            undo.callback(os.close, fds["args"])

            proc = _spawn([bwrap, "--args", str(fds["args"]), *argv[sep:]], list(fds.values()))
            undo.callback(_kill_quietly, proc)
            child = _wait_ready(proc, status_file, fds["block"])
            cg.add(child)
            for name, soft, hard in plan.rlimits:
                resource.prlimit(child, getattr(resource, name), (soft, hard))
            if plan.network == "isolated":
                # veth + address into the child's network namespace (pyroute2, imported only here)
                from . import network

                priv["network"] = network.setup(sandbox.id, child, plan, os.path.dirname(d))
                undo.callback(network.teardown, priv["network"])
            priv.update(
                pid=proc.pid, pid_start=proc_start_time(proc.pid),
                init_pid=child, init_start=proc_start_time(child),
                # what an exec'd process must share with the sandbox's own (enter.py)
                process={"uid": plan.uid, "gid": plan.gid, "additional_gids": plan.additional_gids,
                         "capabilities": plan.capabilities, "rlimits": plan.rlimits, "env": plan.env,
                         "cwd": plan.cwd, "seccomp_file": os.path.join(d, "seccomp.bpf"),
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
                cg.kill_all(signum)
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


def remove_cgroups(info: dict[str, Any]) -> None:
    """Kill and remove the cgroups recorded in ``info`` (``{"version", "path", "created"}``)."""
    cg = manager(info["path"], info["version"])
    cg.remove([d for d in info.get("created", []) if os.path.isdir(d)])


def _tenant_section_with_userns() -> dict[str, Any]:
    """The default tenant filter without its namespace-creation rules (``sandbox-shim.allow-nested-userns``)."""
    from .seccomp import default_tenant_section

    sec = default_tenant_section()
    ns_calls = {"unshare", "clone", "clone3", "setns"}
    rules = []
    for rule in sec["syscalls"]:
        names = [n for n in rule["names"] if n not in ns_calls]
        if names:
            rules.append({**rule, "names": names})
    return {**sec, "syscalls": rules}


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _spawn(argv: list[str], fds: list[int]) -> subprocess.Popen[bytes]:
    """Start bwrap with ``fds`` (kept at their numbers) and our stdio, in a minimal environment."""
    try:
        return subprocess.Popen(argv, pass_fds=tuple(fds), env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
                                close_fds=True)
    except OSError as e:
        raise LaunchFailed(f"cannot run {argv[0]}: {e.strerror}", "install bubblewrap") from e


def _wait_ready(proc: subprocess.Popen[bytes], status_file: str, block_fd: int) -> int:
    """Wait until bwrap's child blocks on the FIFO; return its pid.

    Raises:
        LaunchFailed: bwrap exited first (its own message went to the sandbox's stderr).
    """
    child: list[int] = []

    def ready() -> bool:
        if proc.poll() is not None:
            return True
        if not child:
            pid = procs.status_field(status_file, "child-pid")
            if pid is None:
                return False
            child.append(int(pid))
        return procs.blocked_on_fd(child[0], block_fd)

    ok = procs.wait_for(ready, READY_TIMEOUT)
    if proc.poll() is not None or not ok or not child:
        rc = proc.poll()
        raise LaunchFailed(
            f"bwrap failed to set up the sandbox (exit status {rc})" if rc is not None
            else f"bwrap did not finish setting up within {READY_TIMEOUT:.0f} s",
            "see bwrap's message above; check mounts, rootfs and namespaces in config.json")
    return child[0]


def _kill_quietly(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(OSError):
        proc.kill()
    with contextlib.suppress(Exception):
        proc.wait(timeout=5)
    time.sleep(0)
