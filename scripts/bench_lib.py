"""Helper of scripts/bench: the library lifecycle, in one Python process that stays up.

Reads one sandbox id per line on stdin; for each: ``api.provision`` -> ``api.start`` -> wait for the
monitor (bwrap's outer process, a child of this process) -> ``api.destroy``, and prints the elapsed
milliseconds (or ``error <text>``).  Usage: python bench_lib.py STATE_ROOT BUNDLE
"""

from __future__ import annotations

import os
import sys
import time


def main() -> int:
    root, bundle = sys.argv[1], sys.argv[2]
    from sandbox_shim import api
    from sandbox_shim.mechanism import Sandbox

    mech = api.default_mechanism(root)
    print("ready", flush=True)
    for line in sys.stdin:
        sid = line.strip()
        if not sid:
            continue
        try:
            t0 = time.perf_counter()
            sb = Sandbox(sid, bundle)
            api.provision(mech, sb)
            api.start(mech, sid)
            os.waitpid(sb.private["pid"], 0)
            api.destroy(mech, sid)
            print(f"{(time.perf_counter() - t0) * 1000:.3f}", flush=True)
        except Exception as e:  # reported to the driver, which stops
            print(f"error {type(e).__name__}: {e}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
