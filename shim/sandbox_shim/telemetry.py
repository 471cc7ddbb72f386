"""Lifecycle events: each library call emits ``start``, then ``stop`` or ``exception``.

Event names are tuples ``("sandbox_shim", CALL, PHASE)`` with CALL one of ``CALLS`` and PHASE one of
``start | stop | exception``.  Handlers receive ``(event, measurements, metadata)``:

* measurements: ``system_time`` (ns since the epoch, on start), ``duration`` (ns, on stop/exception).
* metadata: ``sandbox_id``, ``mechanism``, and on stop ``outcome`` ("ok"), on exception ``kind`` (the
  error's kind, e.g. ``capability_unavailable``) and ``reason`` (its one-line message).

Handlers run synchronously in the calling thread; one that raises is detached (it must not break a
lifecycle call).  The CLI attaches a handler that writes these events to ``--log`` as JSON records
when ``--log-format json`` is given.
"""

from __future__ import annotations

import time

TYPE_CHECKING = False  # typing, collections and functools stay unloaded: every lifecycle verb imports this
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TypeVar

    from .mechanism import Mechanism

    F = TypeVar("F", bound=Callable[..., Any])

CALLS = (
    "provision",
    "start",
    "stop",
    "destroy",
    "signal",
    "status",
    "usage",
    "execute",
    "list_running",
    "list_sandboxes",
)
PHASES = ("start", "stop", "exception")

Event = tuple[str, str, str]
if TYPE_CHECKING:
    Handler = Callable[[Event, dict[str, int], dict[str, Any]], None]

_handlers: dict[str, Handler] = {}


def events() -> list[Event]:
    """Every event name a handler can receive: ``("sandbox_shim", CALL, PHASE)`` for each of ``CALLS``
    and ``PHASES``, in that order."""
    return [("sandbox_shim", c, p) for c in CALLS for p in PHASES]


def attach(handler_id: str, handler: Handler) -> None:
    """Register ``handler`` under ``handler_id`` (replacing one with the same id)."""
    _handlers[handler_id] = handler


def detach(handler_id: str) -> None:
    """Remove the handler registered under ``handler_id`` (no error if absent)."""
    _handlers.pop(handler_id, None)


def emit(event: Event, measurements: dict[str, int], metadata: dict[str, Any]) -> None:
    """Deliver one event to every handler."""
    for hid, handler in list(_handlers.items()):
        try:
            handler(event, measurements, metadata)
        except Exception:  # noqa: BLE001 - a faulty handler is detached, the call goes on
            _handlers.pop(hid, None)


def instrument(call: str) -> Callable[[F], F]:
    """Decorator for a library function ``f(mechanism, sandbox_or_id, ...)`` emitting its events."""

    def deco(fn: F) -> F:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return run(call, fn, args, kwargs)

        return wraps(wrapper, fn)

    return deco


def run(call: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``fn(*args, **kwargs)``, emitting ``call``'s events when a handler is attached (``instrument``;
    the library API calls this only once this module is loaded: no handler exists before)."""
    if not _handlers:
        return fn(*args, **kwargs)
    mech: Mechanism | None = args[0] if args else kwargs.get("mechanism")
    target = args[1] if len(args) > 1 else kwargs.get("sandbox")
    meta: dict[str, Any] = {
        "sandbox_id": getattr(target, "id", target),
        "mechanism": mech.name if mech is not None else None,
    }
    t0 = time.monotonic_ns()
    emit(("sandbox_shim", call, "start"), {"system_time": time.time_ns()}, meta)
    try:
        result = fn(*args, **kwargs)
    except Exception as e:
        emit(
            ("sandbox_shim", call, "exception"),
            {"duration": time.monotonic_ns() - t0},
            {**meta, "kind": getattr(e, "kind", type(e).__name__), "reason": str(e)},
        )
        raise
    emit(
        ("sandbox_shim", call, "stop"),
        {"duration": time.monotonic_ns() - t0},
        {**meta, "outcome": "ok"},
    )
    return result


def wraps(wrapper: Callable[..., Any], fn: F) -> F:
    """What ``functools.wraps`` copies (name, qualified name, module, doc, ``__dict__``, ``__wrapped__``),
    without loading functools; returns ``wrapper`` typed as ``fn``."""
    for attr in ("__module__", "__name__", "__qualname__", "__doc__"):
        setattr(wrapper, attr, getattr(fn, attr))
    wrapper.__dict__.update(fn.__dict__)
    wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]
