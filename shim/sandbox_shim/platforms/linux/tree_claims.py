"""Claims on tenant-writable host trees, so no two live sandboxes set up mounts inside the same one.

The race (README "Security"): a mount point, masked or read-only path inside a tree a tenant can write
(a writable rootfs, a read-write bind such as ``storage/``) is resolved and created by the runtime and
then by bwrap, by path.  A tenant already running on the *same* tree could swap a directory for a
symbolic link in between, and the set-up would follow it onto the host.  A tree no running tenant can
write cannot change under the set-up, so the rule is: a sandbox whose set-up walks into a
tenant-writable tree claims it for its lifetime, and a create whose claims overlap a live sandbox's
claim (one tree at or inside the other, by inode identity: ``paths.contains``) is refused.

Claims are one JSON file per sandbox under ``claims_dir()`` (host-wide, so two state roots see each
other), taken under an exclusive flock(2) of ``.lock`` there.  A claim is live while its owner — the
creating process, then the sandbox's first process — runs with the recorded start time (proc(5) field
22); a claim left by a process killed with -9, or a zombie, is stale: ignored, and removed by the next claim.
"""

from __future__ import annotations

import fcntl
import os

from ...errors import BundleInvalid, BundleProblem
from ...scoped import scoped
from ...state import proc_start_time, proc_state

TYPE_CHECKING = False  # ``drop`` is on delete's path: no typing, collections or contextlib at run time
if TYPE_CHECKING:
    from collections.abc import Generator
    from typing import Any

HOST_DIR = "/run/sandbox-shim/tree-claims"


def claims_dir(state_root: str) -> str:
    """Where claims live: ``HOST_DIR`` for root (host-wide), else ``STATE_ROOT/.tree-claims``."""
    return HOST_DIR if os.geteuid() == 0 else os.path.join(state_root, ".tree-claims")


@scoped
def _locked(d: str) -> Generator[None, None, None]:
    os.makedirs(d, mode=0o700, exist_ok=True)
    fd = os.open(os.path.join(d, ".lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _live(entry: dict[str, object]) -> bool:
    pid, start = entry.get("pid"), entry.get("start")
    return (
        isinstance(pid, int)
        and start is not None
        and proc_start_time(pid) == start
        and proc_state(pid) not in ("Z", "X", None)
    )  # a zombie writes nothing


def _write(path: str, entry: dict[str, object]) -> None:
    from ... import fastjson as json  # the claims are ours: no json (re, enum) import on create's path

    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(entry, fh)
    os.replace(tmp, path)


class Claim:
    """A held claim: ``transfer`` hands it to the sandbox's first process; ``release`` drops it."""

    def __init__(self, path: str | None) -> None:
        self.path = path

    def transfer(self, pid: int) -> None:
        """Make ``pid`` (the sandbox's first process) the owner, so the claim lives as long as it does."""
        if self.path is None:
            return
        from ... import fastjson as json

        with open(self.path) as fh:
            entry = json.load(fh)
        entry.update(pid=pid, start=proc_start_time(pid))
        _write(self.path, entry)

    def release(self) -> None:
        if self.path is not None:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass


def _overlap(a: list[str], b: list[str]) -> tuple[str, str] | None:
    from ...paths import contains  # not on delete's path (``drop``): paths loads what the verbs avoid

    for x in a:
        for y in b:
            if contains(x, y) or contains(y, x):
                return x, y
    return None


def _file_name(owner: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in owner)[:200] + ".json"


def drop(state_root: str, owner: str) -> None:
    """Remove ``owner``'s claim (its sandbox is deleted), whoever holds it now; nothing if there is none."""
    d = claims_dir(state_root)
    if not os.path.isdir(d):
        return
    name = _file_name(owner)
    with _locked(d):
        for left in (name, name + ".tmp"):  # the claim, and what a write killed midway left (``_write``)
            try:
                os.unlink(os.path.join(d, left))
            except FileNotFoundError:
                pass


def _others(d: str, own: str) -> list[str]:
    """The claim files in ``d`` other than ``own`` (none when ``d`` does not exist yet)."""
    try:
        return [n for n in os.listdir(d) if n.endswith(".json") and n != own]
    except FileNotFoundError:
        return []


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:
        return None


def _judge(
    raw: bytes, walked: list[str], writable: list[str], json: Any
) -> tuple[dict[str, Any] | None, bool, tuple[str, str] | None]:
    """``(entry, live, overlap)`` of one claim file's bytes: entry None when it is not a claim."""
    try:
        entry = json.loads(raw)
    except ValueError:
        return None, False, None
    if not isinstance(entry, dict):
        return None, False, None
    if not _live(entry):
        return entry, False, None
    hit = _overlap(walked, list(entry.get("writable") or [])) or _overlap(
        writable, list(entry.get("walked") or [])
    )
    return entry, True, hit


def claim(state_root: str, owner: str, walked: list[str], writable: list[str]) -> Claim:
    """Record, for ``owner``, the host trees its set-up walks into and those its tenant can write.

    Raises:
        BundleInvalid: a walked tree overlaps a live sandbox's writable one, or a writable tree a live
        sandbox's walked one (pointer ``/mounts``).
    """
    from ... import fastjson as json

    if not walked and not writable:
        return Claim(None)
    d = claims_dir(state_root)
    name = _file_name(owner)
    # Outside the lock, every other claim is read and judged (a file and a /proc read each, inode walks
    # for the overlap: ~0.1 ms a claim, so ~20 ms with 200 sandboxes running); under it, each file is
    # read again and a claim whose bytes are unchanged keeps that verdict (a dead owner never comes back:
    # pid and start time), so a burst of creates does not queue behind that work.  A live overlapping
    # claim is checked again under the lock (its owner may have died since).
    judged = {}
    for other in _others(d, name):
        raw = _read(os.path.join(d, other))
        if raw is not None:
            judged[other] = (raw, *_judge(raw, walked, writable, json))
    with _locked(d):
        for other in _others(d, name):
            raw = _read(os.path.join(d, other))
            if raw is None:
                continue
            known = judged.get(other)
            entry, live, hit = (
                known[1:] if known is not None and known[0] == raw else _judge(raw, walked, writable, json)
            )
            if entry is None:
                continue
            if live and hit and known is not None and known[0] == raw:
                live = _live(entry)
            if not live:
                try:
                    os.unlink(os.path.join(d, other))  # stale: its owner is gone (the directory stays small)
                except FileNotFoundError:
                    pass
                continue
            if hit:
                raise BundleInvalid(
                    [
                        BundleProblem(
                            "/mounts",
                            f"{hit[0]} and {hit[1]}: one is writable by a sandbox, the other's set-up "
                            f"makes mount points inside it (pid {entry['pid']} is running); "
                            "the tenant could race the set-up onto the host",
                            "tenant profile: set-up never walks a tree another tenant writes",
                            "give each running sandbox its own writable storage and rootfs",
                        )
                    ]
                )
        path = os.path.join(d, name)
        _write(
            path,
            {
                "owner": owner,
                "pid": os.getpid(),
                "start": proc_start_time(os.getpid()),
                "walked": walked,
                "writable": writable,
            },
        )
    return Claim(path)
