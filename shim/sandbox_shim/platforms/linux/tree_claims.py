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

import contextlib
import fcntl
import os
from collections.abc import Iterator

from ...errors import BundleInvalid, BundleProblem
from ...state import proc_start_time, proc_state

HOST_DIR = "/run/sandbox-shim/tree-claims"


def claims_dir(state_root: str) -> str:
    """Where claims live: ``HOST_DIR`` for root (host-wide), else ``STATE_ROOT/.tree-claims``."""
    return HOST_DIR if os.geteuid() == 0 else os.path.join(state_root, ".tree-claims")


@contextlib.contextmanager
def _locked(d: str) -> Iterator[None]:
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
    import json

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
        import json

        with open(self.path) as fh:
            entry = json.load(fh)
        entry.update(pid=pid, start=proc_start_time(pid))
        _write(self.path, entry)

    def release(self) -> None:
        if self.path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)


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
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(d, left))


def claim(state_root: str, owner: str, walked: list[str], writable: list[str]) -> Claim:
    """Record, for ``owner``, the host trees its set-up walks into and those its tenant can write.

    Raises:
        BundleInvalid: a walked tree overlaps a live sandbox's writable one, or a writable tree a live
        sandbox's walked one (pointer ``/mounts``).
    """
    import json

    if not walked and not writable:
        return Claim(None)
    d = claims_dir(state_root)
    name = _file_name(owner)
    with _locked(d):
        for other in os.listdir(d):
            if not other.endswith(".json") or other == name:
                continue
            try:
                with open(os.path.join(d, other)) as fh:
                    entry = json.load(fh)
            except (OSError, ValueError):
                continue
            if not _live(entry):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(d, other))  # stale: its owner is gone (the directory stays small)
                continue
            hit = _overlap(walked, list(entry.get("writable") or [])) or _overlap(
                writable, list(entry.get("walked") or [])
            )
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
