"""The sandbox-exec command line of a macOS plan: the tenant SBPL profile (``tenant_profile``), the launch
argv (``launch_argv``: ``env -i ENV... sandbox-exec -f PROFILE -D NAME=PATH... -- PROGRAM ARGS``) and
the compile check that runs ``/usr/bin/true`` under it first (``compile_check``).  Pure but for the
check, which runs sandbox-exec; the mechanism (``mechanism.py``) writes the profile and starts the
monitor.  sandbox-exec(1); SBPL rules in ``seatbelt.py``.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Sequence

from ...errors import CannotEnforce
from . import launcher
from .plan import DarwinPlan
from .seatbelt import RUNTIME_READ, SANDBOX_EXEC, Profile, build_profile

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
