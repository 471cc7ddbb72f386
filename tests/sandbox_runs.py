"""Shared helpers of the breach tests: run a bundle to completion on real bwrap and read what its probe saw.

A probe is a shell script whose stdout and stderr go to ``/storage/out`` (the bundle's ``storage/``,
bound read-write); :func:`launch` runs the bundle through the CLI (``run``) or the library
(``provision``/``start``/``wait``/``destroy``) and returns the exit status and that file.  Imported like
``conftest`` (``tests/`` is on ``sys.path``): ``from sandbox_runs import launch, probe, Result``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest
from conftest import run_shim, wait_pid
from sandbox_shim.errors import BundleInvalid

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bwrap is not installed")
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="sandboxes need root here (cgroups, namespaces)")
# ``pytestmark`` of a file whose every test runs a sandbox
SANDBOX_MARKS = [needs_bwrap, needs_root]

RUNNERS = ["cli", "lib"]  # the ``how`` of :func:`launch`
TAG = f"t{os.getpid()}"  # suffix of sandbox ids: ids name cgroups host-wide

_T = TypeVar("_T", bound=Callable[..., object])


def needs_sandbox(test: _T) -> _T:
    """Mark one test as running a sandbox: skipped, with the reason, without bwrap or without root."""
    return needs_bwrap(needs_root(test))


@dataclass
class Result:
    code: int | None  # exit status of the sandbox; None when refused
    out: str  # what the probe wrote to /storage/out
    refused: str  # the refusal message ("" when it ran)
    err: str = ""  # the CLI's stdout and stderr (diagnostics; "" through the library)


@contextmanager
def _environ_with(extra: dict[str, str]) -> Iterator[None]:
    """``os.environ`` holding ``extra`` too for the block; restored exactly afterwards."""
    saved = dict(os.environ)
    os.environ.update(extra)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def launch(how: str, root: Path, bundle: Path, sid: str, caller_env: dict[str, str] | None = None) -> Result:
    """Run ``bundle`` to completion and collect its ``storage/out``.

    ``how``: ``"cli"`` (``sandbox-shim run`` in a child process) or ``"lib"`` (``api.provision``,
    ``start``, waitpid(2) of the monitor, ``destroy --force``).  ``root``: the state root.  ``sid``: the
    sandbox id, suffixed with ``TAG``.  ``caller_env``: extra variables in the caller's environment
    (the CLI's, or this process's for the library).  A bundle refused at validation (``BundleInvalid``;
    "invalid bundle" on the CLI's stderr) gives ``code=None`` and the message in ``refused``; any other
    error of the library propagates.
    """
    sid = f"{sid}-{TAG}"
    out = bundle / "storage" / "out"
    if out.exists():
        out.unlink()
    extra = caller_env or {}
    if how == "cli":
        r = run_shim(root, "run", "--bundle", str(bundle), sid, env=dict(os.environ, **extra))
        refused = r.stderr if "invalid bundle" in r.stderr else ""
        return Result(
            None if refused else r.returncode,
            out.read_text() if out.exists() else "",
            refused,
            r.stdout + r.stderr,
        )
    from sandbox_shim import api
    from sandbox_shim.mechanism import Sandbox

    mech = api.default_mechanism(str(root))
    with _environ_with(extra):
        try:
            st = api.provision(mech, Sandbox(sid, str(bundle)))
        except BundleInvalid as e:
            return Result(None, "", str(e))
        try:
            api.start(mech, sid)
            code = wait_pid(st.pid)
        finally:
            api.destroy(mech, sid, force=True)
    return Result(code, out.read_text() if out.exists() else "", "")


def probe(script: str, *, exit_zero: bool = False) -> list[str]:
    """argv running ``script`` with its stdout and stderr in /storage/out.

    ``exit_zero``: append ``; true``, so the probe exits 0 whatever its last command did (and busybox
    sh does not exec that command in place of itself).
    """
    return ["sh", "-c", f"exec >/storage/out 2>&1; {script}" + ("; true" if exit_zero else "")]


def tree_hash(top: Path, skip: tuple[str, ...] = ()) -> dict[str, str]:
    """Every entry under ``top``, itself included, by path relative to ``top``: type, mode (octal),
    uid, gid, and the SHA-256 of a file's content or a link's target.  Links are not followed.
    ``skip``: relative-path prefixes left out (e.g. ``("a/", "b/storage/out")``)."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(top, followlinks=False):
        for name in ["", *dirnames, *filenames]:
            p = os.path.join(dirpath, name) if name else dirpath
            rel = os.path.relpath(p, top)
            if skip and rel.startswith(skip):
                continue
            st = os.lstat(p)
            if os.path.islink(p):
                what = "l:" + os.readlink(p)
            elif os.path.isfile(p):
                what = "f:" + hashlib.sha256(Path(p).read_bytes()).hexdigest()
            else:
                what = "d"
            out[rel] = f"{what}:{st.st_mode:o}:{st.st_uid}:{st.st_gid}"
    return out
