"""Helpers of scripts/bench: the targets and the table (medians, ratios, met or missed)."""

from __future__ import annotations

import statistics
from typing import Any

TARGETS = {  # name -> the largest ratio allowed
    "cli_lifecycle_vs_runc": 1.0, "library_vs_crun_cli": 0.5, "burst_vs_crun": 1.0,
    "state": 1.5, "start": 1.5, "kill": 1.5, "delete": 1.5, "create": 3.0,
    "confine_vs_2x_bwrap_plus_20ms": 1.0, "confine_vs_2x_bwrap_plus_20ms_cold": 1.0,
}


def med(xs: list[float]) -> float:
    """The median, or NaN for no samples."""
    return statistics.median(xs) if xs else float("nan")


def report(results: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    lines, verdicts = [], {}

    def row(name: str, value: str, ratio: float | None = None, target: str | None = None) -> None:
        ok = "" if ratio is None or target is None else ("met" if ratio <= TARGETS[target] else "MISSED")
        if target:
            verdicts[target] = {"ratio": round(ratio, 3) if ratio is not None else None,
                                "limit": TARGETS[target], "met": ok == "met"}
        r = f"{ratio:5.2f}x" if ratio is not None else ""
        lim = f"<= {TARGETS[target]}x {ok}" if target else ""
        lines.append(f"  {name:<44}{value:>14}  {r:>7}  {lim}")

    lc = results.get("cli_lifecycle", {})
    if lc:
        lines.append("1. CLI lifecycle (create+start+wait+delete, /bin/true), median ms   ratio")
        base = med(lc["runc"]) if lc.get("runc") else None
        for rt, xs in lc.items():
            ratio = med(xs) / base if base else None
            row(rt if rt != "bwrap" else "bare bwrap run", f"{med(xs):.1f} ms", ratio,
                "cli_lifecycle_vs_runc" if rt == "shim" and base else None)
        if lc.get("crun"):
            lines.append(f"  {'(shim / crun)':<44}{'':>14}  {med(lc['shim']) / med(lc['crun']):5.2f}x")
        for rt, st in results.get("cli_lifecycle_steps", {}).items():
            lines.append(f"    {rt} steps: " + ", ".join(f"{k} {v:.1f}" for k, v in st.items()) + " ms")
    lib = results.get("library_lifecycle", {})
    if lib:
        lines.append("2. library lifecycle, one process, median ms (ratio to crun's CLI lifecycle)")
        base = med(lib["crun"]) if lib.get("crun") else None
        row("library (provision+start+wait+destroy)", f"{med(lib['library']):.1f} ms",
            med(lib["library"]) / base if base else None, "library_vs_crun_cli" if base else None)
        if base:
            row("crun CLI lifecycle", f"{base:.1f} ms", 1.0)
    bu = results.get("burst", {})
    if bu:
        n = next(iter(bu.values()))["n"]
        lines.append(f"3. burst: {n} x sleep 30, {next(iter(bu.values()))['jobs']} at a time (ratio to crun)")
        base = bu["crun"]["all_running_ms"] if "crun" in bu else None
        for rt, d in bu.items():
            row(f"{rt}: all running", f"{d['all_running_ms'] / 1000:.2f} s",
                d["all_running_ms"] / base if base else None,
                "burst_vs_crun" if rt == "shim" and base else None)
            row(f"{rt}: teardown", f"{d['teardown_ms'] / 1000:.2f} s",
                d["teardown_ms"] / bu["crun"]["teardown_ms"] if base else None)
    rs = results.get("resident", {})
    if rs:
        lines.append(f"4. resident cost per running sandbox ({next(iter(rs.values()))['n']} x sleep 600)")
        for rt, d in rs.items():
            row(f"{rt}: processes / PSS",
                f"{d['procs_per_sandbox']:.1f} / {d['pss_kib_per_sandbox']:.0f} KiB")
            lines.append(f"    {rt}: python processes: {d['python_procs']}; kinds: {', '.join(d['comms'])}")
    pc = results.get("per_command", {})
    if pc:
        base = med(pc["bare"])
        lines.append("5. per command (sandbox-shim console script), median ms "
                     "(ratio to python -I -S -c pass)")
        row("python -I -S -c pass", f"{base:.1f} ms", 1.0)
        for verb in ("state", "start", "kill", "delete", "create"):
            row(verb, f"{med(pc[verb]):.1f} ms", med(pc[verb]) / base, verb)
    cf = results.get("confine", {})
    if cf:
        from bench_confine import rows

        rows(cf, row, med, lines)
    return "\n".join(lines), verdicts
