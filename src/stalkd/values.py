"""``Value``: the base of small value classes on the way to a server's first reply.

A class decorated with ``dataclasses.dataclass`` compiles its ``__init__``, ``__repr__``,
``__eq__`` (and, frozen, ``__setattr__``, ``__delattr__``, ``__hash__``) from source text when its
module is imported: a frozen one costs about as much as importing a small module, and the
recovery of a data directory defined several before answering anything. A ``Value`` subclass
lists its fields in ``__slots__`` and writes its ``__init__``; equality, hashing and ``repr``
follow the fields in that order, as a dataclass's do. Fields are read-only by convention (a
frozen dataclass raised on assignment; nothing assigns them).

Example:
    >>> class Point(Value):
    ...     __slots__ = ("x", "y")
    ...     def __init__(self, x: int, y: int = 0) -> None:
    ...         self.x = x
    ...         self.y = y
    >>> Point(1, 2), Point(1, 2) == Point(1, 2), Point(1) == Point(1, 2), hash(Point(3)) == hash(Point(3))
    (Point(x=1, y=2), True, False, True)
    >>> Point(1, 2).replace(y=5)
    Point(x=1, y=5)
"""

from __future__ import annotations

from typing import Any, Self

__all__ = ["Value"]


class Value:
    __slots__: tuple[str, ...] = ()

    def _names(self) -> list[str]:  # a "__dict__" slot (for cached properties) is no field
        return [name for name in self.__slots__ if not name.startswith("__")]

    def _fields(self) -> tuple[object, ...]:
        return tuple([getattr(self, name) for name in self._names()])

    def __repr__(self) -> str:
        return f"{type(self).__qualname__}({', '.join(f'{n}={getattr(self, n)!r}' for n in self._names())})"

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def replace(self, **changes: Any) -> Self:
        """A copy with ``changes`` (``dataclasses.replace``): ``__init__`` takes every field by name."""
        return type(self)(**{n: changes.pop(n, getattr(self, n)) for n in self._names()}, **changes)
