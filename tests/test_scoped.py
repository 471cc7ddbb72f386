"""``scoped`` keeps ``contextlib.contextmanager``'s protocol: each case runs against both and must agree."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator
from typing import Any

import pytest
from sandbox_shim.scoped import scoped

BOTH = [scoped, contextlib.contextmanager]


def tracked(log: list[str]) -> Callable[[], Generator[str, None, None]]:
    def gen() -> Generator[str, None, None]:
        log.append("enter")
        try:
            yield "value"
        finally:
            log.append("exit")

    return gen


@pytest.mark.parametrize("deco", BOTH)
def test_yields_the_value_and_runs_the_finally(deco: Any) -> None:
    log: list[str] = []
    with deco(tracked(log))() as v:
        assert v == "value" and log == ["enter"]
    assert log == ["enter", "exit"]


@pytest.mark.parametrize("deco", BOTH)
def test_an_exception_of_the_block_propagates_as_itself(deco: Any) -> None:
    log: list[str] = []
    err = KeyError("x")
    with pytest.raises(KeyError) as caught, deco(tracked(log))():
        raise err
    assert caught.value is err and log == ["enter", "exit"]


@pytest.mark.parametrize("deco", BOTH)
def test_the_generator_may_suppress_or_translate(deco: Any) -> None:
    @deco
    def suppress() -> Generator[None, None, None]:
        try:
            yield
        except ValueError:
            pass

    @deco
    def translate() -> Generator[None, None, None]:
        try:
            yield
        except ValueError as e:
            raise LookupError("translated") from e

    with suppress():
        raise ValueError("gone")
    with pytest.raises(LookupError, match="translated") as caught, translate():
        raise ValueError("x")
    assert isinstance(caught.value.__cause__, ValueError)
    with pytest.raises(OSError), suppress():  # not caught by the generator: propagates
        raise OSError("kept")


@pytest.mark.parametrize("deco", BOTH)
def test_a_generator_that_yields_twice_or_never_is_an_error(deco: Any) -> None:
    @deco
    def twice() -> Generator[None, None, None]:
        yield
        yield

    @deco
    def never() -> Generator[None, None, None]:
        if False:
            yield

    with pytest.raises(RuntimeError), twice():
        pass
    with pytest.raises(RuntimeError), never():
        pass


def test_the_decorated_function_keeps_its_name_and_doc() -> None:
    @scoped
    def held() -> Generator[None, None, None]:
        """Doc."""
        yield

    assert (held.__name__, held.__doc__) == ("held", "Doc.")
