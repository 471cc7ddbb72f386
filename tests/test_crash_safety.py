"""kill -9 at every side-effecting step of create, start and delete; then ``delete --force`` leaves nothing.

The CLI is run with ``SANDBOX_SHIM_CRASH_AT=K`` (``sandbox_shim.crashpoints``: an audit hook that
SIGKILLs the process before its K-th host side effect).  First a run with the hook counting only
gives the number of steps; then each step is killed in turn.  After every kill: ``state`` answers
with a documented status, ``delete --force`` exits 0, and nothing is left — no state dir (nor a
half-made ``.new-*`` / half-removed ``.dead-*`` one), no cgroup directory under any controller (nor
the state root's parent cgroups, nor probe cgroups of a dead prober), no process, no cgroup record —
and the id is reusable (``create`` + ``delete`` of the same id succeed).
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import base_config, run_shim

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.geteuid() != 0, reason="needs Linux, root, bwrap and cgroups"
)

# The workload's argument: finds its processes (bwrap's and the program's) in /proc.  Per test run (a
# sleep of 8-11 hours), so two runs on one host never count each other's workloads as their own leftovers.
TOKEN = str(30000 + os.getpid() % 10000)
DOCUMENTED = {0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 70}


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(extra)
    return env


def _steps(root: Path, *args: str, stdin: Any = None) -> int:
    count = root.parent / f"count-{os.getpid()}-{len(list(root.parent.glob('count-*')))}"
    r = run_shim(
        root,
        *args,
        env=_env(SANDBOX_SHIM_CRASH_AT="1000000", SANDBOX_SHIM_CRASH_COUNT=str(count)),
        stdin=stdin,
    )
    assert r.returncode == 0, r.stderr
    return len(count.read_text().splitlines())


def _reap() -> None:
    """Collect killed CLI processes' children re-parented to this (subreaper) test process."""
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass


def _our_processes() -> list[int]:
    found = []
    for d in glob.glob("/proc/[0-9]*"):
        try:
            with open(f"{d}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
            with open(f"{d}/stat", "rb") as fh:
                state = fh.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if TOKEN.encode() in argv and state != b"Z":
            found.append(int(d.rsplit("/", 1)[1]))
    return found


def _leftovers(root: Path, sid: str) -> list[str]:
    _reap()
    left = [f"process {p}" for p in _our_processes()]
    from sandbox_shim.platforms.linux.network import link_name

    link = link_name(str(root), sid)
    if os.path.exists(f"/sys/class/net/{link}"):
        left.append(f"veth {link}")
    tag = hashlib.sha256(str(root).encode()).hexdigest()[:10]

    def cg(name: str) -> list[str]:
        return [
            *glob.glob(f"/sys/fs/cgroup/*/sandbox-shim/{name}"),
            *glob.glob(f"/sys/fs/cgroup/sandbox-shim/{name}"),
        ]

    left += cg(tag)
    for probe in cg(".probe-*"):
        pid = probe.rsplit(".probe-", 1)[1].split("-")[0]
        if not os.path.exists(f"/proc/{pid}"):
            left.append(probe)
    if root.is_dir():
        left += [
            str(p)
            for p in root.iterdir()
            if p.name == sid or p.name.startswith((f".new-{sid}.", f".dead-{sid}."))
        ]
    left += (
        [str(p) for p in (root / ".cgroups").glob("*") if p.name != ".parents"]
        if (root / ".cgroups").is_dir()
        else []
    )
    left += [str(p) for p in (root / ".network").glob("*")] if (root / ".network").is_dir() else []
    return left


def _clean_and_reuse(root: Path, bundle: Path, sid: str, where: str, reuse: bool = True) -> None:
    r = run_shim(root, "state", sid)
    assert r.returncode in (0, 6), f"{where}: state gave {r.returncode}: {r.stderr}"
    assert len(r.stderr.strip().splitlines()) <= 1, f"{where}: {r.stderr}"
    d = run_shim(root, "delete", "--force", sid)
    assert d.returncode == 0, f"{where}: delete --force gave {d.returncode}: {d.stderr}"
    assert _leftovers(root, sid) == [], where  # the id is free: nothing of it is left
    if not reuse:
        return
    again = run_shim(root, "create", "--bundle", str(bundle), sid, stdin=_devnull())
    assert again.returncode == 0, f"{where}: the id is not reusable: {again.stderr}"
    assert run_shim(root, "delete", "--force", sid).returncode == 0
    assert _leftovers(root, sid) == [], where


def _devnull() -> Any:
    return open(os.devnull, "rb")  # noqa: SIM115 - closed with the process


@pytest.fixture
def sleeper(make_bundle: Any) -> Path:
    return make_bundle(base_config(["sleep", TOKEN]))


def _kill_create_at_every_step(tmp_path: Path, bundle: Path, cold: bool) -> int:
    """Each step of ``create`` killed; on a fresh root per step (``cold``: probing included)."""

    def fresh(k: int) -> Path:
        root = tmp_path / (f"cold-{k}" if cold else "warm")
        root.mkdir(exist_ok=True)
        return root

    warm = fresh(0)
    if not cold:  # probe once, so only create's own steps are counted
        assert run_shim(warm, "create", "--bundle", str(bundle), "w", stdin=_devnull()).returncode == 0
        assert run_shim(warm, "delete", "--force", "w").returncode == 0
    n = _steps(fresh(0), "create", "--bundle", str(bundle), "c", stdin=_devnull())
    assert run_shim(fresh(0), "delete", "--force", "c").returncode == 0
    assert n > 10  # the control: the hook does see create's side effects
    last = n
    if cold:  # probing comes first: past its steps a cold create is a warm one (the other test)
        n_warm = _steps(fresh(0), "create", "--bundle", str(bundle), "c", stdin=_devnull())  # probed now
        assert run_shim(fresh(0), "delete", "--force", "c").returncode == 0
        assert n > n_warm  # the control: a cold root does probe
        last = n - n_warm + 2
    for k in range(1, last + 1):
        root = fresh(k)
        r = run_shim(
            root,
            "create",
            "--bundle",
            str(bundle),
            "c",
            stdin=_devnull(),
            env=_env(SANDBOX_SHIM_CRASH_AT=str(k)),
        )
        assert r.returncode == -9 or (r.returncode == 0 and k > n - 5), (
            f"create step {k}/{n}: not killed ({r.returncode}: {r.stderr})"
        )
        _clean_and_reuse(root, bundle, "c", f"create killed at step {k}/{n}", reuse=k % 8 == 0 or k == last)
    return n


def test_create_killed_at_every_step_leaves_nothing(tmp_path: Path, sleeper: Path) -> None:
    _kill_create_at_every_step(tmp_path, sleeper, cold=False)


def test_create_with_a_network_killed_at_every_step(tmp_path: Path, make_bundle: Any) -> None:
    cfg = base_config(["sleep", TOKEN])
    cfg["annotations"] = {"sandbox-shim.network": "isolated"}
    _kill_create_at_every_step(tmp_path, make_bundle(cfg, name="net"), cold=False)


def test_first_create_on_a_new_root_killed_while_probing(tmp_path: Path, sleeper: Path) -> None:
    _kill_create_at_every_step(tmp_path, sleeper, cold=True)


@pytest.mark.parametrize("verb", ["start", "delete"])
def test_start_and_delete_killed_at_every_step(tmp_path: Path, sleeper: Path, verb: str) -> None:
    root = tmp_path / "root"
    root.mkdir()

    def made() -> None:
        assert run_shim(root, "create", "--bundle", str(sleeper), "v", stdin=_devnull()).returncode == 0
        if verb == "delete":
            assert run_shim(root, "start", "v").returncode == 0

    made()
    n = _steps(root, verb, *(["--force"] if verb == "delete" else []), "v")
    assert run_shim(root, "delete", "--force", "v").returncode == 0
    assert n >= 1
    for k in range(1, n + 1):
        made()
        args = [verb, *(["--force"] if verb == "delete" else []), "v"]
        r = run_shim(root, *args, env=_env(SANDBOX_SHIM_CRASH_AT=str(k)))
        # the last steps vary in number (rmdir(2) retried while the kernel says EBUSY): a verb that
        # finished before step k is fine there, and only there
        assert r.returncode == -9 or (r.returncode == 0 and k > n - 5), (
            f"{verb} step {k}/{n}: not killed ({r.returncode}: {r.stderr})"
        )
        if verb == "start":
            # the state the next verb reads is the kernel's: released or not, never a lost sandbox
            s = run_shim(root, "state", "v")
            assert s.returncode == 0, s.stderr
            assert json.loads(s.stdout)["status"] in ("created", "running"), s.stdout
        _clean_and_reuse(root, sleeper, "v", f"{verb} killed at step {k}/{n}", reuse=False)
    made()  # the id is reusable after the last kill too
    assert run_shim(root, "delete", "--force", "v").returncode == 0


def test_start_killed_after_release_reads_running(tmp_path: Path, sleeper: Path) -> None:
    """The last side effect of start is the release: killed right after it, state says running."""
    root = tmp_path / "root"
    root.mkdir()
    assert run_shim(root, "create", "--bundle", str(sleeper), "r", stdin=_devnull()).returncode == 0
    n = _steps(root, "start", "r")  # counts and runs start fully: the control
    assert json.loads(run_shim(root, "state", "r").stdout)["status"] == "running"
    assert run_shim(root, "delete", "--force", "r").returncode == 0
    assert run_shim(root, "create", "--bundle", str(sleeper), "r", stdin=_devnull()).returncode == 0
    r = run_shim(root, "start", "r", env=_env(SANDBOX_SHIM_CRASH_AT=str(n)))  # before the state write
    assert r.returncode == -9
    assert json.loads(run_shim(root, "state", "r").stdout)["status"] == "running"
    assert run_shim(root, "delete", "--force", "r").returncode == 0
    assert _leftovers(root, "r") == []


def test_an_empty_or_half_made_directory_never_blocks_an_id(tmp_path: Path, sleeper: Path) -> None:
    root = tmp_path / "root"
    (root / "e").mkdir(parents=True)  # what an interrupted mkdir-then-mark left in older versions
    (root / ".new-e.999999999").mkdir()
    assert run_shim(root, "create", "--bundle", str(sleeper), "e", stdin=_devnull()).returncode == 0
    assert run_shim(root, "delete", "--force", "e").returncode == 0
    (root / "e").mkdir()
    assert run_shim(root, "delete", "--force", "e").returncode == 0
    assert not (root / "e").exists() and _leftovers(root, "e") == []
    foreign = root / "f"
    foreign.mkdir()
    (foreign / "data").write_text("not ours")
    r = run_shim(root, "create", "--bundle", str(sleeper), "f", stdin=_devnull())
    assert r.returncode == 7 and (foreign / "data").read_text() == "not ours"  # never removed


def test_nested_cgroups_path_parents_go_with_their_last_sandbox(tmp_path: Path, make_bundle: Any) -> None:
    root = tmp_path / "root"
    root.mkdir()
    top = f"i17nest{os.getpid()}"
    bundles = []
    for n in ("n1", "n2"):
        cfg = base_config(["sleep", TOKEN])
        cfg.setdefault("linux", {})["cgroupsPath"] = f"/{top}/mid/{n}"
        bundles.append(make_bundle(cfg, name=n))
    for n, b in zip(("n1", "n2"), bundles, strict=True):
        assert run_shim(root, "create", "--bundle", str(b), n, stdin=_devnull()).returncode == 0
    made = glob.glob(f"/sys/fs/cgroup/*/{top}") + glob.glob(f"/sys/fs/cgroup/{top}")
    assert made  # the control: the parents exist while sandboxes use them
    assert run_shim(root, "delete", "--force", "n1").returncode == 0
    assert all(os.path.isdir(m) for m in made)  # n2 still uses them
    assert run_shim(root, "delete", "--force", "n2").returncode == 0
    assert [m for m in made if os.path.exists(m)] == []


def test_nested_parents_shared_by_two_state_roots_go_with_the_last_sandbox(
    tmp_path: Path, make_bundle: Any
) -> None:
    """A parent made for root A's sandbox and used by root B's: whichever goes last removes it (the list
    of parents the runtime made is host-wide).  Control: it exists while either sandbox runs."""
    top = f"i17roots{os.getpid()}"
    roots = [tmp_path / "ra", tmp_path / "rb"]
    for i, root in enumerate(roots):
        root.mkdir()
        cfg = base_config(["sleep", TOKEN])
        cfg.setdefault("linux", {})["cgroupsPath"] = f"/{top}/x{i}"
        b = make_bundle(cfg, name=f"r{i}")
        assert run_shim(root, "create", "--bundle", str(b), "s", stdin=_devnull()).returncode == 0
    made = glob.glob(f"/sys/fs/cgroup/*/{top}") + glob.glob(f"/sys/fs/cgroup/{top}")
    assert made
    assert run_shim(roots[0], "delete", "--force", "s").returncode == 0
    assert all(os.path.isdir(m) for m in made)  # root B's sandbox still uses them
    assert run_shim(roots[1], "delete", "--force", "s").returncode == 0
    assert [m for m in made if os.path.exists(m)] == []


def test_a_create_killed_before_making_parents_never_owns_them(tmp_path: Path, make_bundle: Any) -> None:
    """create killed at each step up to its cgroups: delete --force of that id leaves nothing, and a
    directory someone else makes later at a parent's path is never removed by a later delete (a parent
    is the runtime's only once create confirmed it made it).  Control: an unrelated delete in the same
    root removes its own cgroups."""
    root = tmp_path / "root"
    root.mkdir()
    top = f"i17own{os.getpid()}"
    cfg = base_config(["sleep", TOKEN])
    cfg.setdefault("linux", {})["cgroupsPath"] = f"/{top}/b/c"
    nested = make_bundle(cfg, name="nested")
    plain = make_bundle(base_config(["sleep", TOKEN]), name="plain")
    assert run_shim(root, "create", "--bundle", str(plain), "q", stdin=_devnull()).returncode == 0
    assert run_shim(root, "delete", "--force", "q").returncode == 0  # probed and cached: n is exact
    n = _steps(root, "create", "--bundle", str(nested), "p", stdin=_devnull())
    assert run_shim(root, "delete", "--force", "p").returncode == 0
    mounts = sorted({os.path.dirname(m) for m in glob.glob("/sys/fs/cgroup/*/cgroup.procs")})
    for k in range(1, n + 1, max(1, n // 12)):
        r = run_shim(
            root,
            "create",
            "--bundle",
            str(nested),
            "p",
            env=_env(SANDBOX_SHIM_CRASH_AT=str(k)),
            stdin=_devnull(),
        )
        assert r.returncode == -9, (k, n, r.stderr)
        _reap()
        assert run_shim(root, "delete", "--force", "p").returncode == 0, k
        assert glob.glob(f"/sys/fs/cgroup/*/{top}") + glob.glob(f"/sys/fs/cgroup/{top}") == [], k
        foreign = [os.path.join(m, top) for m in mounts[:2]]
        for f in foreign:  # someone else's cgroup at a path this create had planned
            os.mkdir(f)
        try:
            assert run_shim(root, "create", "--bundle", str(plain), "q", stdin=_devnull()).returncode == 0
            assert run_shim(root, "delete", "--force", "q").returncode == 0
            assert all(os.path.isdir(f) for f in foreign), k  # never ours
        finally:
            for f in foreign:
                os.rmdir(f)


@pytest.mark.parametrize("closed", [0, 1, 2])
def test_create_with_a_closed_stdio_fd_hands_the_sandbox_no_lock(
    tmp_path: Path, sleeper: Path, closed: int
) -> None:
    """create started with fd 0, 1 or 2 closed: the sandbox gets /dev/null there, never one of the
    runtime's own files (a state lock it would hold forever), so start, kill and delete still work.
    Control: state works right after create."""
    root = tmp_path / "root"
    root.mkdir()
    import subprocess

    from conftest import shim_cmd

    r = subprocess.run(
        shim_cmd(root, "create", "--bundle", str(sleeper), "c"),
        preexec_fn=lambda: os.close(closed),
        stdin=_devnull() if closed else None,
        stdout=subprocess.DEVNULL if closed != 1 else None,
        stderr=subprocess.DEVNULL if closed != 2 else None,
        timeout=60,
    )
    assert r.returncode == 0
    st = json.loads(run_shim(root, "state", "c").stdout)
    assert st["status"] == "created"
    assert os.readlink(f"/proc/{st['pid']}/fd/{closed}") == "/dev/null"
    assert run_shim(root, "start", "c", timeout=20).returncode == 0
    assert run_shim(root, "kill", "c", "KILL", timeout=20).returncode == 0
    assert run_shim(root, "delete", "--force", "c", timeout=20).returncode == 0
    assert _leftovers(root, "c") == []


def test_a_start_killed_between_unlink_and_release_still_reads_created(tmp_path: Path, sleeper: Path) -> None:
    """start unlinks the FIFO, then writes the release byte; killed in between (what is left is exactly
    an unlinked FIFO with the process still held on it), the sandbox reads created — not running — and
    the next start releases it.  Control: the workload runs after that start."""
    root = tmp_path / "root"
    root.mkdir()
    assert run_shim(root, "create", "--bundle", str(sleeper), "u", stdin=_devnull()).returncode == 0
    (root / "u" / "exec.fifo").unlink()  # start's unlink done, its write never came
    st = json.loads(run_shim(root, "state", "u").stdout)
    assert st["status"] == "created"
    assert run_shim(root, "start", "u").returncode == 0
    time.sleep(0.3)
    st = json.loads(run_shim(root, "state", "u").stdout)
    assert st["status"] == "running"
    with open(f"/proc/{st['pid']}/cmdline", "rb") as fh:
        assert TOKEN.encode() in fh.read().split(b"\0")  # the workload itself, no longer bwrap held
    assert run_shim(root, "delete", "--force", "u").returncode == 0
