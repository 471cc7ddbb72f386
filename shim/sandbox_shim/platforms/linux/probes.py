"""Linux probes that use the host's programs and hierarchies: bwrap (runs it) and cgroups (writes a
throwaway cgroup), and the systemd cgroup driver.  Importing this module registers them
(``capability.register``); the composition point (``platforms.select.register_probes``) imports it on
every OS, so the names are known everywhere and report "not Linux" elsewhere.
Rules: the kernel's cgroup v1/v2 docs for the limit files; bwrap(1).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from functools import partial
from typing import TYPE_CHECKING

from ...capability import Capability, register
from ...probes.proc import linux_only as _linux_only
from ...probes.proc import read as _read
from ...probes.proc import seccomp_note as _seccomp_note
from .locate import bwrap_path

if TYPE_CHECKING:
    from .cgroups.detect import Layout


# ---- bwrap ------------------------------------------------------------------------------------------


def bwrap_identity() -> tuple[str, str, int] | None:
    """``(path, version, mtime_ns)`` of the bwrap ``locate.bwrap_path`` finds (the one create runs),
    or None when absent or it will not run.

    ``version`` is the text after "bubblewrap " in ``bwrap --version`` (e.g. ``"0.8.0"``).
    """
    path = bwrap_path()
    if path is None:
        return None
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10)
        mtime = os.stat(path).st_mtime_ns
    except (OSError, subprocess.SubprocessError):
        return None
    return path, out.stdout.strip().removeprefix("bubblewrap ").strip() or "unknown", mtime


@register("bwrap")
def probe_bwrap() -> Capability:
    """Find bwrap, read its version, and run ``bwrap --ro-bind / / --unshare-pid ... -- true``.

    Returns: ``Capability("bwrap", ...)``, mechanism ``"bwrap <version>"``, ``detail`` carrying bwrap's
    own stderr when the run fails.  Never raises.
    """
    argv = [
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--unshare-pid",
        "--die-with-parent",
        "--",
        shutil.which("true") or "/bin/true",
    ]
    measured = "bwrap --version; bwrap " + " ".join(argv)
    if (off := _linux_only("bwrap", measured)) is not None:
        return off
    ident = bwrap_identity()
    if ident is None:
        return Capability(
            "bwrap",
            False,
            "bwrap",
            "bwrap is not on PATH nor at $SANDBOX_SHIM_BWRAP (or will "
            "not run): install bubblewrap (apt-get install bubblewrap)",
            measured,
        )
    path, version, _ = ident
    try:
        run = subprocess.run([path, *argv], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError) as e:
        return Capability("bwrap", False, f"bwrap {version}", f"cannot run {path}: {e}", measured)
    if run.returncode != 0:
        err = run.stderr.strip().splitlines()[-1:] or [f"exit status {run.returncode}"]
        return Capability(
            "bwrap",
            False,
            f"bwrap {version}",
            f"{path} failed: {err[0]}: run as root, enable "
            f"user namespaces, or install bwrap setuid{_seccomp_note()}",
            measured,
        )
    return Capability("bwrap", True, f"bwrap {version}", "", measured)


# ---- cgroups ----------------------------------------------------------------------------------------

#: controller -> (Limits field values, {cgroup version: (file, value written and expected back)})
_CGROUP_TRIALS: dict[str, tuple[dict[str, object], dict[int, tuple[str, str]]]] = {
    "memory": (
        {"memory_limit": 64 << 20},
        {1: ("memory.limit_in_bytes", "67108864"), 2: ("memory.max", "67108864")},
    ),
    "pids": ({"pids_limit": 64}, {1: ("pids.max", "64"), 2: ("pids.max", "64")}),
    "cpu": (
        {"cpu_quota": 50000, "cpu_period": 100000},
        {1: ("cpu.cfs_quota_us", "50000"), 2: ("cpu.max", "50000 100000")},
    ),
    "cpuset": ({}, {1: ("cpuset.cpus", ""), 2: ("cpuset.cpus", "")}),
    "freezer": ({}, {1: ("freezer.state", "THAWED"), 2: ("cgroup.freeze", "0")}),
    # deny-all, then one allow rule: the list must then hold exactly that rule (devices.rst)
    "devices": (
        {
            "devices": [
                {"allow": False, "type": "a", "major": None, "minor": None, "access": "rwm"},
                {"allow": True, "type": "c", "major": 1, "minor": 3, "access": "rwm"},
            ]
        },
        {1: ("devices.list", "c 1:3 rwm")},
    ),
}


_swept = False


def probe_cgroup(controller: str, layout: Layout | None = None) -> Capability:
    """Create a throwaway cgroup ``/sandbox-shim/.probe-<pid>-<controller>``, write one limit file of
    ``controller`` through the cgroup manager, read it back, and remove the cgroup.

    The limit file must already exist in the new directory (the kernel makes it), so a directory that
    is not a cgroup hierarchy is reported, not written into.  ``freezer`` is tried as freeze then thaw.

    Args:
        controller: ``memory`` | ``pids`` | ``cpu`` | ``cpuset`` | ``freezer`` | ``devices``.
        layout: a ``cgroups.Layout`` to probe instead of this host's (tests point it elsewhere).
    Returns: ``Capability("cgroup.<controller>", ...)``, mechanism ``"cgroup v1"`` / ``"cgroup v2"``.
    Raises: KeyError for an unknown controller.
    """
    from ...errors import LaunchFailed
    from .cgroups import Limits, detect, manager

    limits_kw, files = _CGROUP_TRIALS[controller]
    name, path = f"cgroup.{controller}", f"/sandbox-shim/.probe-{os.getpid()}-{controller}"
    if (off := _linux_only(name, f"mkdir {path}")) is not None:
        return off
    lay = layout if layout is not None else detect()
    version = lay.version
    mech = f"cgroup v{version}" if version else "cgroup"
    if version == 0:
        return Capability(
            name,
            False,
            mech,
            "no usable cgroup hierarchy (need memory and pids): mount "
            "cgroup2 with them enabled, or the v1 memory and pids hierarchies",
            "read /proc/self/mountinfo",
        )
    if version == 2 and controller == "devices":
        return _probe_v2_devices(name, mech, path, version, lay, limits_kw)
    if version not in files:
        return Capability(
            name,
            False,
            mech,
            f"the cgroup v{version} {controller} controller is not built in this version",
            "none",
        )
    fname, want = files[version]
    root = lay.v2_mount if version == 2 else lay.v1_mounts.get(controller)
    if root is None:
        return Capability(
            name,
            False,
            mech,
            f"the v1 {controller} controller is not mounted: mount its hierarchy",
            "read /proc/self/mountinfo",
        )
    if version == 2 and controller not in ("freezer", *lay.v2_controllers):
        return Capability(
            name,
            False,
            mech,
            f"{controller} is not in {root}/cgroup.controllers: enable it",
            f"read {root}/cgroup.controllers",
        )
    global _swept
    if not _swept and layout is None:
        _swept = True
        from .residue import sweep_probe_cgroups

        sweep_probe_cgroups(lay)
    cdir = os.path.join(root, path.lstrip("/"))
    measured = f"mkdir {cdir}; write {fname}; read back; rmdir"
    mgr = manager(path, version, lay)
    created: list[str] = []
    try:
        created = mgr.create([] if controller == "freezer" else [controller])
        if not os.path.exists(os.path.join(cdir, fname)):
            return Capability(
                name,
                False,
                mech,
                f"{root} is not a cgroup v{version} hierarchy: the kernel "
                f"made no {fname} in a new directory there",
                measured,
            )
        if controller == "freezer":
            mgr.freeze(True)
            mgr.freeze(False)
        elif controller == "cpuset":
            parent = os.path.dirname(cdir)
            cpus = _read(f"{parent}/cpuset.cpus.effective") or _read(f"{parent}/cpuset.cpus")
            want = (cpus or "0").split(",")[0].split("-")[0]  # the parent's first cpu (cpuset(7) list format)
            mgr.apply(Limits(cpu_cpus=want))
        else:
            mgr.apply(Limits(**limits_kw))  # type: ignore[arg-type]
        got = _read(os.path.join(cdir, fname))
        if got != want:
            return Capability(name, False, mech, f"{fname} reads {got!r} after writing {want!r}", measured)
        return Capability(name, True, mech, "", measured)
    except LaunchFailed as e:
        return Capability(
            name,
            False,
            mech,
            f"{e.line()}: run as root with a writable cgroup hierarchy{_seccomp_note()}",
            measured,
        )
    except OSError as e:
        return Capability(name, False, mech, f"{e}: run as root with a writable cgroup hierarchy", measured)
    finally:
        try:
            mgr.remove(created)
        except (LaunchFailed, OSError):
            pass


def _probe_v2_devices(
    name: str, mech: str, path: str, version: int, lay: Layout, limits_kw: dict[str, object]
) -> Capability:
    """v2 has no devices files: load and attach the trial rules as a BPF_CGROUP_DEVICE program
    (cgroup-v2.rst "Device controller") to a throwaway cgroup; the attach succeeding is the proof."""
    from ...errors import LaunchFailed
    from .cgroups import Limits, manager

    measured = f"mkdir {path}; BPF_PROG_LOAD + BPF_PROG_ATTACH (BPF_CGROUP_DEVICE); rmdir"
    mgr = manager(path, version, lay)
    created: list[str] = []
    try:
        created = mgr.create([])
        mgr.apply(Limits(**limits_kw))  # type: ignore[arg-type]
        return Capability(name, True, mech, "", measured)
    except (LaunchFailed, OSError) as e:
        return Capability(
            name,
            False,
            mech,
            f"{e}: the kernel refused the device program (needs root and CONFIG_CGROUP_BPF){_seccomp_note()}",
            measured,
        )
    finally:
        try:
            mgr.remove(created)
        except (LaunchFailed, OSError):
            pass


for _ctl in _CGROUP_TRIALS:
    register(f"cgroup.{_ctl}")(partial(probe_cgroup, _ctl))


@register("cgroup.systemd")
def probe_systemd_cgroup() -> Capability:
    """The systemd cgroup driver (``--systemd-cgroup``): systemd is PID 1, its D-Bus API answers, and the
    host is cgroup v2 (``platforms.linux.cgroups.systemd.probe``).  Never raises."""
    measured = "read /proc/1/comm and /run/systemd/system; D-Bus Get org.freedesktop.systemd1.Manager Version"
    if (off := _linux_only("cgroup.systemd", measured)) is not None:
        return off
    from .cgroups.systemd import probe

    try:
        ok, why = probe()
    except Exception as e:  # noqa: BLE001 - a probe reports, it does not raise
        ok, why = False, f"{type(e).__name__}: {e}"
    detail = "" if ok else f"{why}: drop --systemd-cgroup"
    return Capability("cgroup.systemd", ok, "systemd", detail, measured)
