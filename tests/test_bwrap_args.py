"""``bwrap.build_args`` as a pure function of the Plan: golden argument vectors, and nothing created.

Each representative plan (the default tenant bundle; a user namespace with ids, hostname, a sized
tmpfs and a read-only root; a storage bind with missing mount points, a missing cwd and extra
masked/read-only paths; a uid switch without a user namespace and added capabilities) renders to the
argv in ``tests/golden/bwrap/NAME.json``, with the bundle's paths as ``{bundle}`` and the host's
helper binary as ``{helper}``.  The kernel-file
floor is pinned (every /proc and /sys entry "present") so the vectors do not depend on this kernel.
Building the argv makes no file or directory; ``make_missing`` makes exactly the recorded steps.
Regenerate after an intended change with ``SANDBOX_SHIM_REGEN_GOLDEN=1``.
"""

from __future__ import annotations

import copy
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import base_config

if not sys.platform.startswith("linux"):
    pytest.skip("bwrap is Linux only", allow_module_level=True)

from sandbox_shim.bundle import load  # noqa: E402
from sandbox_shim.errors import BundleInvalid  # noqa: E402
from sandbox_shim.platforms.linux import bwrap  # noqa: E402
from sandbox_shim.platforms.linux.plan import make_plan  # noqa: E402

GOLDEN = Path(__file__).parent / "golden" / "bwrap"


def _ns(cfg: dict[str, Any], *types: str) -> None:
    have = {n["type"] for n in cfg["linux"]["namespaces"]}
    cfg["linux"]["namespaces"] += [{"type": t} for t in types if t not in have]


def default() -> dict[str, Any]:
    return base_config(["sh", "-c", "echo hi"])


def userns() -> dict[str, Any]:
    cfg = base_config(["id"])
    _ns(cfg, "user")
    cfg["linux"]["uidMappings"] = [{"containerID": 1000, "hostID": 0, "size": 1}]
    cfg["linux"]["gidMappings"] = [{"containerID": 1000, "hostID": 0, "size": 1}]
    cfg["process"]["user"] = {"uid": 1000, "gid": 1000}
    cfg["hostname"] = "golden"
    cfg["root"]["readonly"] = True
    cfg["mounts"].append(
        {
            "destination": "/scratch",
            "type": "tmpfs",
            "source": "tmpfs",
            "options": ["nosuid", "size=8m", "mode=0700"],
        }
    )
    return cfg


def storage_bind() -> dict[str, Any]:
    cfg = base_config(["ls"])
    cfg["mounts"].append(
        {"destination": "/data/new/deep", "type": "bind", "source": "storage", "options": ["rbind", "rw"]}
    )
    cfg["process"]["cwd"] = "/work/here"
    cfg["linux"]["maskedPaths"] = [*cfg["linux"].get("maskedPaths", []), "/etc/shadow"]
    cfg["linux"]["readonlyPaths"] = [*cfg["linux"].get("readonlyPaths", []), "/data/new/deep"]
    return cfg


def uid_switch_caps() -> dict[str, Any]:
    cfg = base_config(["sleep", "1"])
    cfg["process"]["user"] = {"uid": 1000, "gid": 1000}
    caps = cfg["process"].setdefault("capabilities", {})
    for k in ("bounding", "effective", "permitted"):
        caps[k] = sorted({*caps.get(k, []), "CAP_NET_BIND_SERVICE"})
    return cfg


PLANS = {
    "default": default,
    "userns": userns,
    "storage_bind": storage_bind,
    "uid_switch_caps": uid_switch_caps,
}


def tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.fixture
def pinned_floor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bwrap, "_host_has", lambda _path: True)


@pytest.mark.parametrize("name", sorted(PLANS))
def test_the_argv_is_the_golden_one_and_nothing_is_made(
    name: str, make_bundle: Any, pinned_floor: None
) -> None:
    b = make_bundle(PLANS[name](), name=name)
    before = tree(b)
    plan = make_plan(load(str(b)), "golden")
    got = bwrap.layout(plan, bwrap.Fds(5, 6, [7, 8]))
    assert tree(b) == before, "building the argv changed the bundle"
    from sandbox_shim.platforms.linux.console import helper_source

    helper = helper_source()  # the host's busybox: its path differs per host
    argv = ["{helper}" if a == helper else a.replace(str(b), "{bundle}") for a in got.argv]
    assert got.argv == bwrap.build_args(plan, bwrap.Fds(5, 6, [7, 8]))  # same answer twice: no state
    path = GOLDEN / f"{name}.json"
    if os.environ.get("SANDBOX_SHIM_REGEN_GOLDEN"):
        path.write_text(json.dumps(argv, indent=1) + "\n")
    assert argv == json.loads(path.read_text())


def test_missing_mount_points_and_cwd_are_steps_made_only_by_make_missing(
    make_bundle: Any, pinned_floor: None
) -> None:
    b = make_bundle(storage_bind(), name="steps")
    plan = make_plan(load(str(b)), "golden")
    got = bwrap.layout(plan, bwrap.Fds(5, 6))
    want = {("/data/new/deep", True), ("/work/here", True)}
    assert {(s.dest, s.is_dir) for s in got.steps} >= want
    assert not (b / "rootfs" / "data" / "new").exists() and not (b / "rootfs" / "work").exists()
    bwrap.make_missing(got.steps)
    assert (b / "rootfs" / "data" / "new" / "deep").is_dir() and (b / "rootfs" / "work" / "here").is_dir()
    again = bwrap.layout(make_plan(load(str(b)), "golden"), bwrap.Fds(5, 6))
    assert again.argv == got.argv and not again.steps  # made: the same argv, nothing left to make


def test_a_planted_link_is_refused_at_make_time_with_its_pointer(
    make_bundle: Any, pinned_floor: None, tmp_path: Path
) -> None:
    """A component turned into a link out of the tree between planning and making: refused at
    ``/process/cwd``, nothing made outside."""
    b = make_bundle(storage_bind(), name="race")
    got = bwrap.layout(make_plan(load(str(b)), "golden"), bwrap.Fds(5, 6))
    outside = tmp_path / "outside"
    outside.mkdir()
    (b / "rootfs" / "work").symlink_to(outside)  # absolute: leads out, ensure_in_root stays inside
    cwd = next(s.dest for s in got.steps if s.dest == "/work/here")
    try:
        bwrap.make_missing(got.steps, cwd)
    except BundleInvalid as e:
        assert e.problems[0].pointer in ("/process/cwd", "/mounts")
    assert list(outside.iterdir()) == []


def test_a_file_where_a_directory_is_planned_is_refused_before_anything_is_made(
    make_bundle: Any, pinned_floor: None
) -> None:
    cfg = storage_bind()
    cfg["mounts"].append(
        {"destination": "/data/new", "type": "bind", "source": "/etc/hostname", "options": ["rbind", "ro"]}
    )
    cfg["mounts"].append({"destination": "/data/new/x", "type": "tmpfs", "source": "tmpfs"})
    ok = copy.deepcopy(cfg)
    ok["mounts"] = ok["mounts"][:-1]
    b = make_bundle(cfg, name="wrongtype")
    before = tree(b)
    with pytest.raises(BundleInvalid):
        bwrap.layout(make_plan(load(str(b)), "golden"), bwrap.Fds(5, 6))
    assert tree(b) == before


def test_paths_under_a_planned_mount_point_are_protected_as_if_it_were_made(
    make_bundle: Any, pinned_floor: None
) -> None:
    """A masked or read-only path inside a directory the argv still has to make is treated as made:
    the same argv as when the directory already exists (a tmpfs mask over a directory, not a
    refusal).  Control: the run with the directory made first."""
    cfg = base_config(["true"])
    cfg["root"]["readonly"] = False
    cfg["mounts"].append({"destination": "/opt/app/data", "type": "tmpfs", "source": "tmpfs"})
    cfg["linux"]["maskedPaths"] = ["/opt/app"]
    cfg["linux"]["readonlyPaths"] = ["/opt"]
    planned = make_bundle(copy.deepcopy(cfg), name="planned")
    made = make_bundle(copy.deepcopy(cfg), name="made")
    (made / "rootfs" / "opt" / "app" / "data").mkdir(parents=True)
    a = bwrap.layout(make_plan(load(str(planned)), "golden"), bwrap.Fds(5, 6))
    b = bwrap.layout(make_plan(load(str(made)), "golden"), bwrap.Fds(5, 6))
    assert not b.steps and a.steps
    assert [x.replace(str(planned), "B") for x in a.argv] == [x.replace(str(made), "B") for x in b.argv]
    assert (
        "--tmpfs" in a.argv[a.argv.index("/opt/app") - 1 : a.argv.index("/opt/app")]
        or a.argv[a.argv.index("/opt/app") - 1] == "--tmpfs"
    )
