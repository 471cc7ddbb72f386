"""Helper of scripts/bench: the library's lifecycle and execute, in one Python process that stays up.

Reads one command per line on stdin and answers each with ``WALL_MS CPU_MS`` (or ``error <text>``):

* ``life ID``: ``api.provision`` -> ``api.start`` -> wait for the container process (re-parented to
  this process, a subreaper) -> ``api.destroy``.
* ``up ID``: provision and start a sandbox of the second bundle (a long ``sleep``) and keep it;
  ``exec ID``: ``execute`` ``/bin/true`` in it; ``down ID``: destroy it (``--force``: the workload is
  killed and reaped here, so its CPU counts).
* ``burst ID``: provision and start a sandbox of the third bundle (the burst's ``sleep 30``) and keep
  it (scripts/bench section 3 runs J of these helpers side by side, one state root).

CPU is this process's own (time.process_time) plus what its reaped children used (RUSAGE_CHILDREN),
so bwrap and the container process count.
Usage: python bench_lib.py STATE_ROOT BUNDLE [LONG_BUNDLE [BURST_BUNDLE]]
"""

from __future__ import annotations

import os
import resource
import sys
import time


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (time.process_time() + ru.ru_utime + ru.ru_stime) * 1000


def main() -> int:
    root, bundle = sys.argv[1], sys.argv[2]
    long_bundle = sys.argv[3] if len(sys.argv) > 3 else bundle
    burst_bundle = sys.argv[4] if len(sys.argv) > 4 else long_bundle
    from sandbox_shim import api
    from sandbox_shim.execution import execute
    from sandbox_shim.mechanism import Sandbox

    mech = api.default_mechanism(root)
    print("ready", flush=True)
    for line in sys.stdin:
        verb, _, sid = line.strip().partition(" ")
        if not sid:
            continue
        try:
            t0, c0 = time.perf_counter(), _cpu()
            if verb == "life":
                sb = Sandbox(sid, bundle)
                api.provision(mech, sb)
                api.start(mech, sid)
                os.waitpid(sb.private["pid"], 0)
                api.destroy(mech, sid)
            elif verb == "up":
                api.provision(mech, Sandbox(sid, long_bundle))
                api.start(mech, sid)
            elif verb == "burst":
                api.provision(mech, Sandbox(sid, burst_bundle))
                api.start(mech, sid)
            elif verb == "exec":
                done = execute(mech, sid, ("/bin/true", []))
                if done.exit_status != 0:
                    raise RuntimeError(f"/bin/true exited {done.exit_status}")
            elif verb == "down":
                api.destroy(mech, sid, force=True)
            else:
                raise ValueError(f"unknown verb {verb!r}")
            print(f"{(time.perf_counter() - t0) * 1000:.3f} {_cpu() - c0:.3f}", flush=True)
        except Exception as e:  # reported to the driver, which stops
            print(f"error {type(e).__name__}: {e}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
