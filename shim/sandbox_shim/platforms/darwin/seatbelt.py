"""SBPL (Seatbelt profile language) profiles for ``sandbox-exec(1)``, built from path sets.

A profile is deny-default.  The caller gives read-only paths, read-write paths, optional paths to
deny (the data boundary) and extra read-write paths, and whether the network is allowed.  Rules
are emitted in this order, because in SBPL a later matching rule wins over an earlier one:

1. ``(deny default)`` and process basics (exec, fork, signals to the same sandbox, sysctl reads);
2. read-only grants (the runtime read set) and metadata of the ancestors of granted paths;
3. the blanket deny of the ``deny`` paths (e.g. the parent of the permitted directory);
4. read-write grants, then the extra read-write subpaths (after the deny, so they win);
5. ``(allow network*)`` when the network is allowed.

Every path is resolved (realpath) first: Seatbelt matches the kernel's resolved path, so a rule on
``/tmp/x`` never matches (macOS ``/tmp`` is ``/private/tmp``).  Paths never appear in the profile
text: each is passed as a ``-D NAME=PATH`` parameter and referenced as ``(param "NAME")``, so no path
can inject SBPL.  Sources: ``sandbox-exec(1)``, Apple's ``/System/Library/Sandbox/Profiles/*.sb``
(SBPL syntax, ``param``, ``subpath``, ``literal``), and Chromium's ``sandbox/policy/mac/*.sb``.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from ...errors import CannotEnforce

SANDBOX_EXEC = "/usr/bin/sandbox-exec"

#: macOS runtime read set: dyld and its shared cache, system libraries and frameworks, the base
#: tools, locale/zoneinfo/TLS data.  Paths that do not exist on a host are dropped by the caller.
RUNTIME_READ = (
    "/usr/lib",
    "/usr/libexec",
    "/usr/bin",
    "/usr/sbin",
    "/usr/share",
    "/bin",
    "/sbin",
    "/System/Library",
    "/System/Volumes/Preboot/Cryptexes",
    "/Library/Apple",
    "/private/var/db/dyld",
    "/private/var/db/timezone",
    "/private/etc/ssl",
    "/private/etc/hosts",
    "/private/etc/resolv.conf",
    "/private/etc/passwd",
    "/private/etc/group",
    "/private/etc/localtime",
    "/private/etc/services",
    "/private/etc/protocols",
)

_HEADER = """\
(version 1)
(deny default)
(allow process-exec)
(allow process-fork)
(allow signal (target same-sandbox))
(allow process-info* (target same-sandbox))
(allow sysctl-read)
(allow mach-lookup)
(allow user-preference-read)
(allow ipc-posix-shm-read-data ipc-posix-shm-read-metadata)
(allow file-read-metadata (literal "/") (literal "/tmp") (literal "/var") (literal "/etc"))
(allow file-read* file-write-data file-ioctl
  (literal "/dev/null") (literal "/dev/zero") (literal "/dev/tty") (literal "/dev/dtracehelper"))
(allow file-read* (literal "/dev/random") (literal "/dev/urandom"))
(allow pseudo-tty)
(allow file-read* file-write* file-ioctl (literal "/dev/ptmx") (regex #"^/dev/ttys[0-9]+$"))
"""


@dataclass(frozen=True)
class Profile:
    """A built profile.

    Attributes:
        text: the SBPL source; contains no host path, only ``(param "NAME")`` references.
        params: ``NAME -> resolved absolute path``, passed as ``-D NAME=PATH``, in emission order.
    """

    text: str
    params: dict[str, str] = field(default_factory=dict)

    def define_args(self) -> list[str]:
        """``["-D", "NAME=PATH", ...]`` for ``sandbox-exec``."""
        out: list[str] = []
        for k, v in self.params.items():
            out += ["-D", f"{k}={v}"]
        return out


def _resolved(paths: Iterable[str], resolve: Callable[[str], str]) -> list[str]:
    out: list[str] = []
    for p in paths:
        if not os.path.isabs(p) or "\0" in p or "\n" in p:
            raise ValueError(f"SBPL path must be absolute, without NUL or newline: {p!r}")
        r = resolve(p)
        if r not in out:
            out.append(r)
    return out


def _ancestors(paths: Iterable[str]) -> list[str]:
    out: list[str] = []
    for p in paths:
        d = os.path.dirname(p)
        while d not in ("/", "") and d not in out:
            out.append(d)
            d = os.path.dirname(d)
    return sorted(out)


def build_profile(
    read_only: Sequence[str],
    read_write: Sequence[str],
    *,
    network: bool,
    deny: Sequence[str] = (),
    extra_read_write: Sequence[str] = (),
    resolve: Callable[[str], str] = os.path.realpath,
) -> Profile:
    """Build a deny-default SBPL profile (rule order in the module docstring).

    Args:
        read_only: absolute paths readable (``file-read*``, subpath) — files or directories.
        read_write: absolute paths readable and writable (``file-read* file-write*``, subpath).
        network: True emits ``(allow network*)``; False leaves the network denied by default.
        deny: absolute paths denied for read and write, emitted after the read-only grants.
        extra_read_write: read-write paths emitted after ``deny`` and ``read_write`` (they win).
        resolve: path resolver (default ``os.path.realpath``; tests pass a macOS-like one).

    Returns:
        ``Profile``; parameter names are ``RO_i``, ``META_i``, ``DENY_i``, ``RW_i``, ``XRW_i``.

    Raises:
        ValueError: a path is relative or contains NUL/newline.
    """
    ro, rw = _resolved(read_only, resolve), _resolved(read_write, resolve)
    dn, xrw = _resolved(deny, resolve), _resolved(extra_read_write, resolve)
    params: dict[str, str] = {}
    lines = [_HEADER.rstrip("\n")]

    def rule(head: str, prefix: str, paths: Sequence[str], matcher: str) -> None:
        if not paths:
            return
        refs = []
        for i, p in enumerate(paths):
            params[f"{prefix}_{i}"] = p
            refs.append(f'({matcher} (param "{prefix}_{i}"))')
        lines.append(f"({head}\n  " + "\n  ".join(refs) + ")")

    lines.append("; runtime read set")
    rule("allow file-read*", "RO", ro, "subpath")
    rule("allow file-read-metadata", "META", _ancestors(ro + rw + xrw), "literal")
    lines.append("; data boundary: denied, then the permitted paths (later rules win)")
    rule("deny file-read* file-write*", "DENY", dn, "subpath")
    rule("allow file-read* file-write*", "RW", rw, "subpath")
    rule("allow file-read* file-write*", "XRW", xrw, "subpath")
    if network:
        lines.append("(allow network*)")
    return Profile("\n".join(lines) + "\n", params)


def sandbox_exec_argv(
    profile: Profile, program: str, args: Sequence[str], sandbox_exec: str = SANDBOX_EXEC
) -> list[str]:
    """argv (including argv[0]) running ``program args`` under ``profile`` with ``sandbox-exec``."""
    return [sandbox_exec, "-p", profile.text, *profile.define_args(), program, *args]


def compile_check(profile: Profile, sandbox_exec: str = SANDBOX_EXEC, timeout: float = 10.0) -> None:
    """Prove the profile compiles and applies by running ``/usr/bin/true`` under it.

    Raises:
        CannotEnforce("seatbelt", detail): ``sandbox-exec`` is missing, or rejected the profile.
    """
    if not os.access(sandbox_exec, os.X_OK):
        raise CannotEnforce("seatbelt", f"{sandbox_exec} is missing or not executable")
    probe = profile
    if "/usr/bin" not in profile.params.values():
        probe = Profile(
            profile.text + '(allow process-exec file-read* (literal "/usr/bin/true"))\n', profile.params
        )
    try:
        r = subprocess.run(
            sandbox_exec_argv(probe, "/usr/bin/true", []), capture_output=True, text=True, timeout=timeout
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise CannotEnforce("seatbelt", f"sandbox-exec did not run: {e}") from e
    if r.returncode != 0:
        raise CannotEnforce("seatbelt", f"profile rejected (exit {r.returncode}): {r.stderr.strip()[:300]}")
