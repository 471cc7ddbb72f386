"""Value classes with a dataclass's shape, without importing ``dataclasses``.

``dataclasses`` (and ``inspect`` under it) cost each CLI lifecycle verb ~5 ms, and those verbs build a
few small records per call.  A subclass lists its fields in ``__match_args__`` (in order) and sets them
in ``__init__``; it gets ``repr`` and ``==`` as ``@dataclass`` makes them.  ``FrozenValue`` is the
``frozen=True`` form: hashable, and assigning raises ``dataclasses.FrozenInstanceError``.
"""

from __future__ import annotations


class Value:
    """``repr`` and ``==`` over ``__match_args__``; mutable, so unhashable (as a dataclass)."""

    __match_args__: tuple[str, ...] = ()
    __hash__ = None  # type: ignore[assignment]

    def _key(self) -> tuple[object, ...]:
        return tuple(getattr(self, k) for k in self.__match_args__)

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={getattr(self, k)!r}" for k in self.__match_args__)
        return f"{type(self).__qualname__}({fields})"

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._key() == other._key()


class FrozenValue(Value):
    """An immutable ``Value``: set fields with ``_set`` in ``__init__``; hashable by its fields."""

    def _set(self, **fields: object) -> None:
        self.__dict__.update(fields)

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(self._key())

    def __setattr__(self, name: str, value: object) -> None:
        from dataclasses import FrozenInstanceError  # what a frozen dataclass raises

        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        from dataclasses import FrozenInstanceError

        raise FrozenInstanceError(f"cannot delete field {name!r}")
