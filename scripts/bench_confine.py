"""Helper of scripts/bench: section 6, ``sandbox-shim confine`` start-up against bwrap by hand.

Each command runs ``/bin/true``; all are interleaved (the order rotates every round), warm and cold:

* warm: run after run, the page cache holding everything (round 0 is discarded);
* cold: before every sample the page cache drops the files the commands start from
  (posix_fadvise(POSIX_FADV_DONTNEED): the interpreter and its shared library, the stdlib bytecode
  and extension modules, the package's bytecode, bwrap, the C helper, the C library, ``/bin/true``);
  the same set for every command, and nothing else on the host is touched.

Wall time and CPU time are kept for each sample.  CPU time is the whole child tree's: this process
is made a child subreaper (prctl(2) ``PR_SET_CHILD_SUBREAPER``), so what a command leaves running
(confine's forked child, which releases the placeholders and checks for created repositories when
the command ends) is reparented here and reaped with wait4(2) before the sample is taken; user +
system of all of them come from getrusage(2) ``RUSAGE_CHILDREN``.  The target (issue: confine
<= 2 x bwrap by hand + 20 ms) is computed against
the minimal bwrap by hand (a read-only /usr with the merged-usr links, own pid namespace, /proc,
/dev); the same ratio against bwrap by hand with the very binds confine makes is shown beside it.
Beside the installed entry point, the same CLI run by ``python -I -S`` with the package put on
``sys.path`` (``confine_no_site``): what is left once the interpreter starts without ``site`` (the
console script's ``site`` and ``.pth`` files are the launcher's concern); its ratio is shown, not
judged.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import time
from pathlib import Path
from typing import Any

BY_HAND = [
    "bwrap",
    "--ro-bind",
    "/usr",
    "/usr",
    "--symlink",
    "usr/lib",
    "/lib",
    "--symlink",
    "usr/lib64",
    "/lib64",
    "--symlink",
    "usr/bin",
    "/bin",
    "--proc",
    "/proc",
    "--dev",
    "/dev",
    "--unshare-pid",
    "--die-with-parent",
    "--",
    "/bin/true",
]
#: argv of the library's launch spec: ``python -c SPEC_CODE PERMIT LANDLOCK(0|1) KEEP(0|1)``; with KEEP
#: the placeholders for missing protected names stay (so bwrap by hand can bind them too), their
#: journal dropped so no later run removes them as left by a dead owner
SPEC_CODE = (
    "import json, sys; from sandbox_shim.hardening.confinement import confine; "
    "s = confine(('/bin/true', []), permit_path=sys.argv[1], landlock=sys.argv[2] == '1', "
    "trial=False); from sandbox_shim.hardening.confine_journal import forget; "
    "(forget(s.journal), forget(s.snapshot)) if sys.argv[3] == '1' else s.release(); "
    "print(json.dumps([s['cmd'], *s['args']]))"
)
#: ``python -I -S -c NO_SITE SHIM_DIR confine ...``: the same CLI without ``site`` (what an installed
#: launcher starting the interpreter with -I -S pays; the console script's ``site`` is not confine's)
NO_SITE = "import sys; sys.path.insert(0, sys.argv.pop(1)); from sandbox_shim.cli import main; main()"
LABELS = {
    "bwrap": "bwrap by hand (minimal: /usr, /proc, /dev, pid ns)",
    "bwrap_same": "bwrap by hand, confine's binds (no helper)",
    "python": "python -I -S -c pass",
    "confine": "sandbox-shim confine (bwrap + Landlock)",
    "confine_no_site": "confine, python -I -S (no site)",
    "confine_bwrap_only": "confine, Landlock off (library; helper runs)",
}


def _cold_files(py: str) -> list[str]:
    """The files whose pages are dropped before a cold sample."""
    import sysconfig

    out = [os.path.realpath(py), "/usr/bin/bwrap", os.path.realpath("/bin/true")]
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    ldlib = sysconfig.get_config_var("LDLIBRARY") or ""
    out.append(os.path.join(libdir, ldlib))
    stdlib = sysconfig.get_paths()["stdlib"]
    trees = [
        os.path.join(stdlib, "__pycache__"),
        os.path.join(stdlib, "encodings", "__pycache__"),
        os.path.join(stdlib, "collections", "__pycache__"),
        os.path.join(stdlib, "importlib", "__pycache__"),
        os.path.join(stdlib, "lib-dynload"),
        str(Path(__file__).resolve().parent.parent / "shim"),
    ]
    for top in trees:
        for root, _, files in os.walk(top):
            out += [os.path.join(root, f) for f in files]
    out += [p for p in ("/lib/x86_64-linux-gnu/libc.so.6", "/lib/aarch64-linux-gnu/libc.so.6")]
    return [p for p in out if os.path.isfile(p)]


def _drop(files: list[str]) -> None:
    for p in files:
        try:
            fd = os.open(p, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _subreaper() -> bool:
    """Make this process the child subreaper of what it starts (Linux); True when it is."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def _reap_tree(timeout: float = 10.0) -> None:
    """wait4(2) every remaining descendant (reparented here), so RUSAGE_CHILDREN counts them."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            pid, _, _ = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.001)


def confine_startup(work: Path, rounds: int, py: str, shim: list[str]) -> dict[str, Any]:
    """``{"warm": {name: [ms...]}, "cold": {...}, "warm_cpu": {...}, "cold_cpu": {...}}``."""
    permit = work / "confine-permit"
    permit.mkdir(exist_ok=True)

    held = work / "confine-permit-held"
    held.mkdir(exist_ok=True)

    def spec(where: Path, landlock: bool, keep: bool = False) -> list[str]:
        argv = [py, "-c", SPEC_CODE, str(where), "1" if landlock else "0", "1" if keep else "0"]
        return json.loads(subprocess.run(argv, check=True, capture_output=True, text=True).stdout)

    # bwrap by hand with confine's binds: its argv up to the helper (whose bind is left out), in a
    # permit dir where the placeholders confine makes for missing protected names stay
    full = spec(held, True, keep=True)
    same, i, end = [], 0, full.index("--", 1)
    while i < end:
        if full[i] == "--ro-bind" and full[i + 2].startswith("/run/sandbox-shim-confine/"):
            i += 3
            continue
        same.append(full[i])
        i += 1
    cmds = {
        "bwrap": BY_HAND,
        "bwrap_same": [*same, "--", "/bin/true"],
        "python": [py, "-I", "-S", "-c", "pass"],
        "confine": [*shim, "confine", "--permit-path", str(permit), "--", "/bin/true"],
        "confine_no_site": [
            *(py, "-I", "-S", "-c", NO_SITE, str(Path(__file__).resolve().parent.parent / "shim")),
            *("confine", "--permit-path", str(permit), "--", "/bin/true"),
        ],
        "confine_bwrap_only": spec(held, False, keep=True),
    }
    cold_files = _cold_files(py)
    _subreaper()
    res: dict[str, Any] = {mode: {k: [] for k in cmds} for mode in ("warm", "cold", "warm_cpu", "cold_cpu")}
    order = list(cmds)
    for r in range(rounds + 1):
        for mode in ("warm", "cold"):
            for k in order[r % len(order) :] + order[: r % len(order)]:
                if mode == "cold":
                    _drop(cold_files)
                c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                t0 = time.perf_counter()
                subprocess.run(cmds[k], check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
                wall = (time.perf_counter() - t0) * 1000
                _reap_tree()
                c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                if r:  # round 0 warms the page cache
                    res[mode][k].append(wall)
                    res[mode + "_cpu"][k].append(
                        (c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime) * 1000
                    )
    res["bwrap_same_binds"] = sum(a in ("--ro-bind", "--bind", "--symlink") for a in same)
    return res


def rows(cf: dict[str, Any], row: Any, med: Any, lines: list[str]) -> None:
    """Append section 6 to the table; ``row(name, value, ratio, target)`` records the verdict."""
    if "warm" not in cf:  # an older results file: one list per command, warm only
        cf = {"warm": cf, "warm_cpu": {}}
    lines.append(
        "6. confine start-up, /bin/true, median ms: wall (CPU) (target: confine <= 2 x bwrap by hand + 20 ms)"
    )
    for mode in ("warm", "cold"):
        samples, cpu = cf.get(mode) or {}, cf.get(mode + "_cpu") or {}
        if not samples.get("confine"):
            continue
        lines.append(f"  {mode}:")
        for k, label in LABELS.items():
            if samples.get(k):
                value = (
                    f"{med(samples[k]):.1f} ({med(cpu[k]):.1f})" if cpu.get(k) else f"{med(samples[k]):.1f}"
                )
                is_target = k == "confine"
                limit = 2 * med(samples["bwrap"]) + 20
                row(
                    label,
                    value,
                    med(samples[k]) / limit if k in ("confine", "confine_no_site") else None,
                    ("confine_vs_2x_bwrap_plus_20ms" + ("" if mode == "warm" else "_cold"))
                    if is_target
                    else None,
                )
        if samples.get("bwrap_same"):
            same = 2 * med(samples["bwrap_same"]) + 20
            lines.append(
                f"    confine / (2 x bwrap with confine's binds + 20 ms): "
                f"{med(samples['confine']) / same:.2f}x"
            )
