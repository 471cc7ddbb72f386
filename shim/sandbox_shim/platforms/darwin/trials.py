"""What this Mac enforces, each tried under sandbox-exec: a control that must pass, then the breach
(``darwin_capabilities``; ``probes.py`` registers the names).  Every report is a trial, never a
version check; off macOS every report is unavailable.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Sequence

from ...capability import Capability
from ...errors import CannotEnforce
from . import launcher
from .command import COMPILE_TIMEOUT, MECHANISM, TRUE, compile_check
from .plan import NOT_ON_MACOS, PROBED
from .seatbelt import RUNTIME_READ, SANDBOX_EXEC, Profile, build_profile

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
