"""The sandbox's terminal when ``process.terminal`` is true (runtime-spec config.md "terminal",
runtime.md "create": ``--console-socket``, runc's docs/terminals.md).

A pty pair is made in the runtime; the slave becomes bwrap's stdin, stdout and stderr (bwrap then
also binds it at ``/dev/console``), and the master is sent over the ``--console-socket`` unix socket
as one SCM_RIGHTS message (data: the slave's name, as runc sends it) before ``create`` returns.

The controlling terminal: bwrap has no "setsid + TIOCSCTTY" option.  So the workload is started
through the host's static busybox, bound read-only at ``CTTY_HELPER`` inside the sandbox's /dev:
``busybox setsid -c PROG ARGS`` calls setsid(2), then ioctl(0, TIOCSCTTY) on the slave, then execvp(3)s
PROG with the sandbox's PATH — the same lookup bwrap would have done.  It execs in place: it *is* the
container process (``state.pid``, pid 1 with ``--as-pid-1``), already under the sandbox's seccomp
filters, capabilities and no_new_privs (bwrap applies them before its execve), in the sandbox's
namespaces and root, and no tenant code runs before it has become the workload.  Its binary is reached
only through the read-only bind, so /proc/PID/exe of it cannot be opened for writing (EROFS).  The
workload keeps the pid and is the session leader with the pty as its controlling terminal in the
foreground group (tty(1) inside prints ``/dev/console``).
"""

from __future__ import annotations

import array
import os
import shutil
import socket

from ...errors import LaunchFailed

#: where the static busybox that sets the controlling terminal appears inside the sandbox
CTTY_HELPER = "/dev/.sandbox-shim/busybox"


def helper_source() -> str:
    """The host's statically linked busybox (``SANDBOX_SHIM_BUSYBOX`` overrides).

    Raises:
        LaunchFailed: none found, or it is dynamically linked (it runs inside the sandbox's rootfs).
    """
    path = os.environ.get("SANDBOX_SHIM_BUSYBOX") or shutil.which("busybox") or "/bin/busybox"
    if not os.path.isfile(path):
        raise LaunchFailed(
            "a terminal sandbox needs the host's static busybox to set its controlling tty",
            "apt-get install busybox-static",
        )
    with open(path, "rb") as fh:
        head = fh.read(1 << 16)
    if b"ld-linux" in head or b"/lib/ld-" in head:
        raise LaunchFailed(
            f"{path} is dynamically linked; it cannot run inside the sandbox",
            "apt-get install busybox-static",
        )
    return os.path.realpath(path)


def wrap_argv(args: list[str]) -> list[str]:
    """The command bwrap runs for a terminal sandbox: ``CTTY_HELPER setsid -c ARGS...``."""
    return [CTTY_HELPER, "setsid", "-c", *args]


def helper_bind_args() -> list[str]:
    """bwrap options binding the helper (after the /dev mount, so it lands in bwrap's /dev tmpfs)."""
    return ["--ro-bind", helper_source(), CTTY_HELPER]


def open_pty() -> tuple[int, int]:
    """A new pty pair ``(master, slave)``, both close-on-exec (pty(7), openpty(3))."""
    master, slave = os.openpty()
    os.set_inheritable(master, False)
    os.set_inheritable(slave, False)
    return master, slave


def send_master(socket_path: str, master: int, name: str) -> None:
    """Send ``master`` over the unix socket at ``socket_path`` in one SCM_RIGHTS message (unix(7)).

    The data part is ``name`` (the slave's path), as runc does; conmon and containerd read the fd.

    Raises:
        LaunchFailed: the socket cannot be reached or the message was not sent.
    """
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(socket_path)
            fds = array.array("i", [master])
            rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds.tobytes())]
            s.sendmsg([name.encode() or b"/dev/ptmx"], rights)
    except OSError as e:
        raise LaunchFailed(
            f"cannot send the terminal to --console-socket {socket_path}: {e.strerror}",
            "the console socket must be a listening unix stream socket",
        ) from e


def receive_master(sock: socket.socket) -> tuple[int, str]:
    """Accept one connection on the listening ``sock``; return ``(fd, name)`` sent (clients, tests)."""
    conn, _ = sock.accept()
    with conn:
        msg, anc, _flags, _addr = conn.recvmsg(4096, socket.CMSG_SPACE(array.array("i").itemsize))
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds = array.array("i")
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
            return fds[0], msg.decode(errors="replace")
    raise OSError("no file descriptor received")


def stdio_for(terminal_slave: int | None) -> dict[str, int | None]:
    """``subprocess.Popen`` keyword arguments for bwrap's stdio (the slave, or inherited)."""
    if terminal_slave is None:
        return {}
    return {"stdin": terminal_slave, "stdout": terminal_slave, "stderr": terminal_slave}
