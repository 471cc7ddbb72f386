"""Helpers of scripts/bench: the targets, the table (medians, ratios, met or missed), the README table.

Every lifecycle-like section holds, per runtime, ``{"cold", "warm", "cold_cpu", "warm_cpu"}`` lists
(ms): cold samples follow >= 100 ms of quiet, warm ones come right after the runtime's own cold one.
A target is met only when it holds cold and warm.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

TARGETS = {  # name -> the largest ratio allowed
    "cli_lifecycle_vs_runc": 1.0,
    "library_vs_crun_cli": 0.5,
    "execute_vs_bare_bwrap": 2.0,
    "burst_cli_vs_crun": 2.0,
    "teardown_vs_crun": 1.0,
    "burst_lib_vs_crun": 1.0,
    "teardown_lib_vs_crun": 1.0,
    "procs_per_sandbox": 1.0,
    "pss_vs_crun": 1.5,
    "state": 1.5,
    "start": 1.5,
    "kill": 1.5,
    "delete": 1.5,
    "create": 3.0,
    "confine_vs_2x_bwrap_plus_20ms": 1.0,
    "confine_vs_2x_bwrap_plus_20ms_cold": 1.0,
}
README_BEGIN = "<!-- bench-table:begin (scripts/bench --readme) -->"
README_END = "<!-- bench-table:end -->"


def med(xs: list[float]) -> float:
    """The median, or NaN for no samples."""
    return statistics.median(xs) if xs else float("nan")


def _m(d: dict[str, list[float]], key: str) -> float:
    return med(d.get(key, []))


def verdicts_of(results: dict[str, Any]) -> dict[str, Any]:
    """``{target: {"ratio", "limit", "met", "detail"}}`` for every target the results can judge."""
    out: dict[str, Any] = {}

    def judge(name: str, ratios: dict[str, float], detail: str = "") -> None:
        worst = max(ratios.values())
        out[name] = {
            "ratio": round(worst, 3),
            "limit": TARGETS[name],
            "met": worst <= TARGETS[name],
            "by_mode": {k: round(v, 3) for k, v in ratios.items()},
            "detail": detail,
        }

    lc = results.get("cli_lifecycle", {})
    if lc.get("shim") and lc.get("runc"):
        judge("cli_lifecycle_vs_runc", {m: _m(lc["shim"], m) / _m(lc["runc"], m) for m in ("cold", "warm")})
    lib = results.get("library", {})
    ll = lib.get("lifecycle", {})
    if ll.get("library") and ll.get("crun"):
        judge("library_vs_crun_cli", {m: _m(ll["library"], m) / _m(ll["crun"], m) for m in ("cold", "warm")})
    ex = lib.get("execute", {})
    if ex.get("execute") and ex.get("bwrap"):
        judge(
            "execute_vs_bare_bwrap", {m: _m(ex["execute"], m) / _m(ex["bwrap"], m) for m in ("cold", "warm")}
        )
    bu = results.get("burst", {})
    if "shim" in bu and "crun" in bu:
        judge("burst_cli_vs_crun", {"wall": bu["shim"]["all_running_ms"] / bu["crun"]["all_running_ms"]})
        judge("teardown_vs_crun", {"wall": bu["shim"]["teardown_ms"] / bu["crun"]["teardown_ms"]})
    if "library" in bu and "crun" in bu:
        judge("burst_lib_vs_crun", {"wall": bu["library"]["all_running_ms"] / bu["crun"]["all_running_ms"]})
        judge("teardown_lib_vs_crun", {"wall": bu["library"]["teardown_ms"] / bu["crun"]["teardown_ms"]})
    rs = results.get("resident", {})
    if "shim" in rs:
        judge("procs_per_sandbox", {"procs": rs["shim"]["procs_per_sandbox"]})
        if "crun" in rs and rs["crun"]["pss_kib_per_sandbox"]:
            judge(
                "pss_vs_crun", {"pss": rs["shim"]["pss_kib_per_sandbox"] / rs["crun"]["pss_kib_per_sandbox"]}
            )
    pc = results.get("per_command", {})
    if pc:
        base = med(pc["bare"])
        for verb in ("state", "start", "kill", "delete", "create"):
            judge(verb, {"wall": med(pc[verb]) / base})
    cf = results.get("confine", {})
    if "warm" not in cf and cf:  # an older results file: one list per command, warm only
        cf = {"warm": cf}
    for mode, suffix in (("warm", ""), ("cold", "_cold")):
        name = "confine_vs_2x_bwrap_plus_20ms" + suffix
        samples = cf.get(mode) or {}
        if samples.get("confine") and samples.get("bwrap"):
            judge(name, {"wall": med(samples["confine"]) / (2 * med(samples["bwrap"]) + 20)})
    return out


def _slot_rows(lines: list[str], section: dict[str, Any], base: str | None) -> None:
    lines.append(
        f"  {'':<34}{'cold ms':>9}{'cpu':>8}{'warm ms':>9}{'cpu':>8}"
        + (f"   ratio to {base} (cold / warm)" if base else "")
    )
    for k, d in section.items():
        r = ""
        if base and section.get(base):
            cold, warm = (_m(d, m) / _m(section[base], m) for m in ("cold", "warm"))
            r = f"   {cold:5.2f}x / {warm:5.2f}x"
        lines.append(
            f"  {k:<34}{_m(d, 'cold'):9.1f}{_m(d, 'cold_cpu'):8.1f}{_m(d, 'warm'):9.1f}"
            f"{_m(d, 'warm_cpu'):8.1f}{r}"
        )


def report(results: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The text table of a run and its verdicts."""
    lines: list[str] = []
    lc = results.get("cli_lifecycle", {})
    if lc:
        lines.append("1. CLI lifecycle (create+start+wait+delete, /bin/true), median wall and CPU ms")
        _slot_rows(lines, lc, "runc" if "runc" in lc else None)
        for rt, st in results.get("cli_lifecycle_steps", {}).items():
            lines.append(f"    {rt} steps: " + ", ".join(f"{k} {v:.1f}" for k, v in st.items()) + " ms")
    lib = results.get("library", {})
    if lib.get("lifecycle"):
        lines.append("2. library lifecycle in one process vs crun's CLI lifecycle")
        _slot_rows(lines, lib["lifecycle"], "crun" if "crun" in lib["lifecycle"] else None)
    if lib.get("execute"):
        lines.append("   execute /bin/true in a running sandbox vs bare bwrap ... true")
        _slot_rows(lines, lib["execute"], "bwrap")
    bu = results.get("burst", {})
    if bu:
        first = next(iter(bu.values()))
        lines.append(f"3. burst: {first['n']} x sleep 30, {first['jobs']} at a time (wall s, CPU s)")
        for rt, d in bu.items():
            lines.append(
                f"  {rt:<10} all running {d['all_running_ms'] / 1000:6.2f} s (cpu "
                f"{d.get('all_running_cpu_ms', float('nan')) / 1000:6.2f})   teardown "
                f"{d['teardown_ms'] / 1000:6.2f} s (cpu {d.get('teardown_cpu_ms', float('nan')) / 1000:6.2f})"
            )
    rs = results.get("resident", {})
    if rs:
        lines.append(f"4. resident cost per running sandbox ({next(iter(rs.values()))['n']} x sleep 600)")
        for rt, d in rs.items():
            lines.append(
                f"  {rt:<10} {d['procs_per_sandbox']:.1f} processes, {d['pss_kib_per_sandbox']:.0f} KiB PSS; "
                f"python: {d['python_procs']}; kinds: {', '.join(d['comms'])}"
            )
    pc = results.get("per_command", {})
    if pc:
        base = med(pc["bare"])
        lines.append(f"5. per command, median ms (python -I -S -c pass: {base:.1f} ms)")
        for verb in ("state", "start", "kill", "delete", "create"):
            lines.append(f"  {verb:<10}{med(pc[verb]):8.1f} ms  {med(pc[verb]) / base:5.2f}x")
    cf = results.get("confine", {})
    if cf:
        from bench_confine import rows

        def row(label: str, value: str, ratio: float | None, target: str | None) -> None:
            lines.append(f"    {label:<32}{value:>16}" + (f"  {ratio:5.2f}x of the target" if ratio else ""))

        rows(cf, row, med, lines)
    left = results.get("leftovers")
    if left is not None:
        counts = {k: len(v) for k, v in left.items()}
        lines.append(
            "leftovers found and removed after the run: "
            + ", ".join(f"{k} {n}" for k, n in counts.items())
            + "  (private_tmpfs: what crun wrote under the hidden "
            "cgroup2 mount point, inside this run's own tmpfs)"
        )
    verdicts = verdicts_of(results)
    lines.append("targets (worst of cold/warm):")
    for name, v in verdicts.items():
        lines.append(f"  {name:<34}{v['ratio']:7.2f}  <= {v['limit']}  {'met' if v['met'] else 'MISSED'}")
    return "\n".join(lines), verdicts


def readme_table(results: dict[str, Any]) -> str:
    """The README's benchmark table (markdown) for one run."""
    v = verdicts_of(results)
    host = results.get("host", {})
    bare = med(results.get("per_command", {}).get("bare", []))
    out = [
        f"One run (`scripts/bench --readme`, {results.get('rounds')} rounds, kernel {host.get('kernel')}, "
        f"{host.get('cpus')} CPUs, `python -I -S -c pass` {bare:.1f} ms); "
        "ratios are the worse of cold and warm:",
        "",
        "| measure | cold | warm | target | |",
        "|---|---|---|---|---|",
    ]
    labels = {
        "cli_lifecycle_vs_runc": "CLI lifecycle vs runc",
        "library_vs_crun_cli": "library lifecycle vs crun CLI",
        "execute_vs_bare_bwrap": "execute /bin/true vs bare bwrap",
        "burst_cli_vs_crun": "burst to all-running vs crun (CLI)",
        "teardown_vs_crun": "burst teardown vs crun",
        "burst_lib_vs_crun": "burst to all-running vs crun (library)",
        "teardown_lib_vs_crun": "burst teardown vs crun (library)",
        "procs_per_sandbox": "processes per running sandbox",
        "pss_vs_crun": "PSS per sandbox vs crun",
        "confine_vs_2x_bwrap_plus_20ms": "confine vs 2 x bwrap by hand + 20 ms (warm)",
        "confine_vs_2x_bwrap_plus_20ms_cold": "confine vs 2 x bwrap by hand + 20 ms (cold)",
    }
    for section, key, label in (
        ("cli_lifecycle", None, "CLI lifecycle"),
        ("library", "lifecycle", "library lifecycle"),
    ):
        sec = results.get(section, {})
        sec = sec.get(key, {}) if key else sec
        pre = "library-" if key else ""
        if sec.get(f"{pre}before") and sec.get(f"{pre}after"):
            a, b = sec[f"{pre}after"], sec[f"{pre}before"]
            out.append(
                f"| {label}, this change vs before it (wall; CPU) | "
                f"{_m(a, 'cold') / _m(b, 'cold'):.2f}×; {_m(a, 'cold_cpu') / _m(b, 'cold_cpu'):.2f}× | "
                f"{_m(a, 'warm') / _m(b, 'warm'):.2f}×; {_m(a, 'warm_cpu') / _m(b, 'warm_cpu'):.2f}× | | |"
            )
    bu = results.get("burst", {})
    cpu_rows = []  # CPU beside the burst's wall-time rows (informational: the targets are wall time)
    if "crun" in bu and bu["crun"].get("all_running_cpu_ms") and bu["crun"].get("teardown_cpu_ms"):
        for who in ("shim", "library"):
            if bu.get(who, {}).get("all_running_cpu_ms") is not None:
                d, c = bu[who], bu["crun"]
                cpu_rows.append(
                    f"| burst CPU vs crun ({'CLI' if who == 'shim' else 'library'}; to all-running, teardown)"
                    f" | {d['all_running_cpu_ms'] / c['all_running_cpu_ms']:.2f}×; "
                    f"{d['teardown_cpu_ms'] / c['teardown_cpu_ms']:.2f}× | | | |"
                )
    last_burst = [n for n in v if n in ("teardown_vs_crun", "teardown_lib_vs_crun")][-1:] or [None]
    if last_burst[0] is None:
        out += cpu_rows
    for name, d in v.items():
        modes = d["by_mode"]
        cold = modes.get("cold", next(iter(modes.values())))
        warm = modes.get("warm", "")
        label = labels.get(name, f"`{name}` vs `python -I -S -c pass`")
        out.append(
            f"| {label} | {cold:.2f}{'' if name == 'procs_per_sandbox' else '×'} | "
            f"{f'{warm:.2f}×' if warm != '' else ''} | ≤ {d['limit']} | {'met' if d['met'] else 'missed'} |"
        )
        if name == last_burst[0]:
            out += cpu_rows
    return "\n".join(out)


def write_readme(path: Path, results: dict[str, Any]) -> None:
    """Replace the text between the bench markers in ``path`` with ``readme_table(results)``."""
    text = path.read_text()
    if README_BEGIN not in text or README_END not in text:
        raise SystemExit(f"{path}: no bench markers ({README_BEGIN} ... {README_END})")
    head, rest = text.split(README_BEGIN, 1)
    _, tail = rest.split(README_END, 1)
    path.write_text(f"{head}{README_BEGIN}\n{readme_table(results)}\n{README_END}{tail}")


if __name__ == "__main__":  # python scripts/bench_report.py RESULTS.json [--readme]: re-render a saved run
    import json
    import sys

    res = json.loads(Path(sys.argv[1]).read_text())
    if "--readme" in sys.argv:
        write_readme(Path(__file__).resolve().parent.parent / "README.md", res)
    print(report(res)[0])
