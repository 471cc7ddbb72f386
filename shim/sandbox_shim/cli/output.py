"""Rendering shared by every command: the ``--log`` file, one-line errors, exit statuses.

Kept free of click and of anything heavy (not even ``json``: ``fastjson`` writes the same text):
the lifecycle verbs import this on every call.
Log records follow runc's shape (``level``, ``msg``, ``time`` in RFC 3339), which podman and
containerd read from ``--log`` when ``--log-format json`` is given.
"""

from __future__ import annotations

import sys
import time

from .. import fastjson as json
from ..errors import ShimError
from ..values import Value

TYPE_CHECKING = False  # no typing (nor dataclasses) at run time: every lifecycle verb loads this module
if TYPE_CHECKING:
    from typing import Any

DEFAULT_ROOT = "/run/sandbox-shim"


class Globals(Value):
    """Global flags (runc grammar): ``--root``, ``--log``, ``--log-format``, ``--debug``,
    ``--systemd-cgroup``."""

    __match_args__ = ("root", "log", "log_format", "debug", "systemd_cgroup")

    def __init__(
        self,
        root: str = DEFAULT_ROOT,
        log: str | None = None,
        log_format: str = "text",
        debug: bool = False,
        systemd_cgroup: bool = False,
    ) -> None:
        self.root = root
        self.log = log
        self.log_format = log_format
        self.debug = debug
        self.systemd_cgroup = systemd_cgroup


def rfc3339_now() -> str:
    """Current time as RFC 3339 with microseconds and a UTC offset, e.g. 2026-11-29T09:00:00.123456Z."""
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int((t % 1) * 1e6):06d}Z"


def log(g: Globals, level: str, msg: str, **fields: Any) -> None:
    """Append one record to ``--log`` (if given); JSON with ``--log-format json``, else a text line."""
    if not g.log:
        return
    try:
        with open(g.log, "a", encoding="utf-8") as fh:
            if g.log_format == "json":
                rec = {"level": level, "msg": msg, "time": rfc3339_now(), **fields}
                fh.write(json.dumps(rec) + "\n")
            else:
                extra = " ".join(f"{k}={v}" for k, v in fields.items())
                fh.write(f"{rfc3339_now()} {level}: {msg}{(' ' + extra) if extra else ''}\n")
    except OSError:
        pass  # a log we cannot write must not turn success into failure


def report(g: Globals, err: ShimError) -> int:
    """Write ``err`` as one line on stderr (a JSON record with ``--log-format json`` and no ``--log``)
    and as a log record; return its exit status.  ``ShimError.line`` escapes control characters, so
    nothing quoted from input breaks the line.  A closed stderr is not an error of its own."""
    log(g, "error", err.line(), **{k: v for k, v in err.to_dict().items() if k != "msg"})
    try:
        if g.log_format == "json" and not g.log:
            sys.stderr.write(
                json.dumps({"level": "error", "msg": err.line(), "time": rfc3339_now(), **err.to_dict()})
                + "\n"
            )
        else:
            # one line: the other problems are in the --log record and in ``sandbox-shim validate``
            sys.stderr.write(f"sandbox-shim: {err.line()}\n")
        sys.stderr.flush()
    except (BrokenPipeError, OSError, ValueError):
        pass
    return err.exit_status


def emit_json(obj: Any) -> None:
    """Print ``obj`` as indented JSON on stdout."""
    sys.stdout.write(json.dumps(obj, indent=2) + "\n")
    sys.stdout.flush()


def attach_telemetry(g: Globals) -> None:
    """With ``--debug --log FILE --log-format json``, write every library event (``telemetry.py``) to
    the log as a ``debug`` record.  Only with ``--debug``: podman reads the whole ``--log`` file as one
    JSON object when a command fails, so it must hold nothing but the error unless asked."""
    if not (g.debug and g.log and g.log_format == "json"):
        return
    from .. import telemetry

    def handler(event: tuple[str, str, str], measurements: dict[str, int], metadata: dict[str, Any]) -> None:
        meta = {k: v for k, v in metadata.items() if v is not None}
        log(g, "debug", ".".join(event), **measurements, **meta)

    telemetry.attach("cli-log", handler)
