"""``scoped``: ``contextlib.contextmanager`` for the lifecycle verbs' own context managers, without
``contextlib``.

Importing ``contextlib`` loads ``collections``, ``functools`` and their dependencies: ~2-3 ms of each
verb's ~10 ms on a 2-core VM (``-X importtime``), for the state store's locks and staged writes, which
need one generator-based context manager and nothing else.  The protocol is contextlib's
(``_GeneratorContextManager``): the generator yields once; an exception of the ``with`` block is thrown
into it at the ``yield``, and suppressed only if the generator returns instead of raising.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing stays unloaded at run time: every lifecycle verb imports this module
if TYPE_CHECKING:
    from collections.abc import Callable, Generator
    from contextlib import AbstractContextManager
    from types import TracebackType
    from typing import Any, ParamSpec, TypeVar

    P = ParamSpec("P")
    T = TypeVar("T")


class Scope:
    """The context manager ``scoped`` returns: enters by running the generator to its ``yield``."""

    __slots__ = ("_gen",)

    def __init__(self, gen: Generator[Any, None, None]) -> None:
        self._gen = gen

    def __enter__(self) -> Any:  # what the generator yields (``scoped`` types it for the caller)
        try:
            return next(self._gen)
        except StopIteration:
            raise RuntimeError("generator didn't yield") from None

    def __exit__(
        self, typ: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> bool:
        if typ is None:
            try:
                next(self._gen)
            except StopIteration:
                return False
            raise RuntimeError("generator didn't stop")
        if value is None:
            value = typ()
        try:
            self._gen.throw(value)
        except StopIteration as e:
            return e is not value  # the generator returned: the exception is suppressed
        except BaseException as e:
            if e is value:  # re-raised as it was: propagate the original, with its traceback
                value.__traceback__ = tb
                return False
            raise
        raise RuntimeError("generator didn't stop after throw()")


def scoped(fn: Callable[P, Generator[T, None, None]]) -> Callable[P, AbstractContextManager[T]]:
    """Decorator: ``fn`` (a generator function yielding once) becomes a function returning a context
    manager, as with ``contextlib.contextmanager``."""

    def call(*args: P.args, **kwargs: P.kwargs) -> AbstractContextManager[T]:
        return Scope(fn(*args, **kwargs))

    call.__name__, call.__qualname__, call.__doc__ = fn.__name__, fn.__qualname__, fn.__doc__
    call.__module__, call.__wrapped__ = fn.__module__, fn  # type: ignore[attr-defined]
    return call
