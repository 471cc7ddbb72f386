"""Tree claims (``tree_claims.claim``): every other claim is judged before the host-wide lock is taken
and again, by its bytes, under it.  These cases change the claims between the two looks (another
create writing one, an owner dying) and check the verdict is the one the lock-time state gives."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Generator
from pathlib import Path

import pytest
from sandbox_shim.errors import BundleInvalid
from sandbox_shim.platforms.linux import tree_claims
from sandbox_shim.scoped import scoped


@pytest.fixture
def claims(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "claims"
    monkeypatch.setattr(tree_claims, "HOST_DIR", str(d))  # root's host-wide dir, made private
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    return d


def write_claim(d: Path, owner: str, pid: int, walked: list[str], writable: list[str]) -> Path:
    d.mkdir(exist_ok=True)
    path = d / f"{owner}.json"
    start = tree_claims.proc_start_time(pid)
    path.write_text(
        json.dumps({"owner": owner, "pid": pid, "start": start, "walked": walked, "writable": writable})
    )
    return path


def at_lock(monkeypatch: pytest.MonkeyPatch, action: Callable[[], None]) -> None:
    """Run ``action`` after the unlocked look, just as the lock is taken."""
    real = tree_claims._locked

    @scoped
    def locked(d: str) -> Generator[None, None, None]:
        action()
        with real(d):
            yield

    monkeypatch.setattr(tree_claims, "_locked", locked)


def trees(tmp_path: Path) -> tuple[str, str]:
    shared, other = tmp_path / "shared", tmp_path / "other"
    (shared / "sub").mkdir(parents=True)
    other.mkdir()
    return str(shared), str(other)


def test_a_live_overlapping_claim_refuses_and_a_separate_one_does_not(claims: Path, tmp_path: Path) -> None:
    shared, other = trees(tmp_path)
    write_claim(claims, "a", os.getpid(), [], [shared])
    with pytest.raises(BundleInvalid, match="race"):
        tree_claims.claim(str(tmp_path), "b", [shared + "/sub"], [])
    held = tree_claims.claim(str(tmp_path), "c", [other], [])  # no overlap: allowed, a's claim kept
    assert (claims / "a.json").exists() and held.path is not None and Path(held.path).exists()


def test_a_claim_written_between_the_two_looks_is_judged_under_the_lock(
    claims: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared, _ = trees(tmp_path)
    claims.mkdir()
    at_lock(monkeypatch, lambda: write_claim(claims, "a", os.getpid(), [], [shared]))
    with pytest.raises(BundleInvalid, match="race"):
        tree_claims.claim(str(tmp_path), "b", [shared + "/sub"], [])


def test_a_claim_changed_between_the_two_looks_is_judged_again(
    claims: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared, other = trees(tmp_path)
    write_claim(claims, "a", os.getpid(), [], [other])  # no overlap at the first look
    at_lock(monkeypatch, lambda: write_claim(claims, "a", os.getpid(), [], [shared]))
    with pytest.raises(BundleInvalid, match="race"):
        tree_claims.claim(str(tmp_path), "b", [shared + "/sub"], [])


def test_an_owner_that_dies_between_the_two_looks_no_longer_refuses(
    claims: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared, _ = trees(tmp_path)
    owner = subprocess.Popen(["sleep", "30"])
    try:
        write_claim(claims, "a", owner.pid, [], [shared])

        def die() -> None:
            owner.kill()
            owner.wait()

        at_lock(monkeypatch, die)
        held = tree_claims.claim(str(tmp_path), "b", [shared + "/sub"], [])
    finally:
        owner.kill()
        owner.wait()
    assert held.path is not None and Path(held.path).exists()
    assert not (claims / "a.json").exists()  # stale: removed under the lock


def test_stale_claims_are_removed(claims: Path, tmp_path: Path) -> None:
    shared, other = trees(tmp_path)
    gone = subprocess.Popen(["true"])
    gone.wait()
    write_claim(claims, "dead", os.getpid(), [], [shared])
    (claims / "dead.json").write_text(
        json.dumps({"owner": "dead", "pid": gone.pid, "start": 1, "walked": [], "writable": [shared]})
    )
    tree_claims.claim(str(tmp_path), "b", [other], [])
    assert not (claims / "dead.json").exists()
