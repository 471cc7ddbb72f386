"""The conformance suite: isolation proven by breaches observed stopped.

Any mechanism can run it — ours or a third party's — through a ``ConformanceTarget`` (``target.py``):

* pytest: subclass ``ConformanceSuite`` and set ``mechanism``, or run ``pytest --sandbox-mechanism
  module:Class`` (the ``pytest11`` plugin in ``plugin.py``, inert unless that option is given);
* command line: ``sandbox-shim conformance [--format table|json] [--mechanism module:Class]``;
* library: ``run_suite(load_target("module:Class"))`` → ``CheckResult`` rows.

Checks live in ``checks/``, one module per group or part of one: ``Lifecycle`` (``lifecycle.py``),
``Isolation`` (``isolation.py``: file system, environment; ``isolation_host.py``: network, processes,
confinement; ``isolation_caps.py``: capabilities; ``isolation_kernel.py``: kernel interfaces),
``ResourceLimits`` (``resource_limits.py``), ``Execution`` (``execution.py``).  A new module there
registers its checks (``helpers.check``) and runs with the rest: ``helpers.all_checks`` imports every
module of ``checks/``.  Shared helpers (verdicts, the control/breach judge, host fixtures) are in
``helpers.py``.  A control that needs what the profile under test refuses (mount, raw sockets, ptrace,
a capability) runs through ``ConformanceTarget.run_control``, outside that profile.  Names are loaded on
first use: importing this package costs nothing.
"""

from __future__ import annotations

from .._lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "ConformanceTarget": "target",
    "ApiTarget": "api_target",
    "BundleHandle": "target",
    "ProbeResult": "target",
    "ToolMissing": "target",
    "merge": "target",
    "ConformanceSuite": "suite",
    "Check": "helpers",
    "CheckResult": "helpers",
    "Outcome": "helpers",
    "check": "helpers",
    "judge": "helpers",
    "all_checks": "helpers",
    "load_target": "runner",
    "run_suite": "runner",
    "render_table": "runner",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
