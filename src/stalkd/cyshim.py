"""What ``import cython`` gives a module of the hot path when it runs uncompiled and Cython is not
installed: the few names those modules use, as no-ops, so the same ``.py`` file is both the
source Cython compiles at install time (setup.py) and the pure-Python fallback.

A compiled module (Cython in pure-Python mode) reads ``cython`` as the compiler's own namespace
and never imports this; an uncompiled one imports the real ``cython`` module when Cython is
installed (its own shadow of these names) and this otherwise. Each such module starts with
(mypy reads the signatures here, the real ``cython`` has none)::

    if TYPE_CHECKING:
        from stalkd import cyshim as cython
    else:
        try:
            import cython
        except ModuleNotFoundError:  # uncompiled, and Cython is not installed
            from stalkd import cyshim as cython

Example:
    >>> compiled, cast(int, "7"), locals(i=int)(len)("ab"), declare(object, visibility="public")
    (False, '7', 2, None)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["NULL", "Py_ssize_t", "address", "bint", "boundscheck", "cast", "ccall", "cclass", "cfunc", "char", "compiled", "declare", "double",
           "final", "freelist", "inline", "locals", "longlong", "no_gc", "p_char", "p_uchar", "p_uint", "returns", "uchar", "uint", "ulonglong", "wraparound"]  # fmt: skip

_F = TypeVar("_F")

compiled = False
"""False here; ``cython.compiled`` is True in a module Cython compiled."""

# C types in annotations and casts, the Python types they stand for uncompiled
bint = bool
double = float
Py_ssize_t = int
longlong = int
ulonglong = int
uint = int
uchar = int
char = int  # (``char[n]``, a C array on the stack, only in code that runs compiled)
# pointers, for casts in code that runs only compiled (under ``if cython.compiled``)
p_char = p_uchar = p_uint = bytes
NULL = None


def _same(f: _F) -> _F:
    return f


def cast(_t: object, value: _F) -> _F:
    """``cython.cast(T, v)``: ``v`` itself uncompiled."""
    return value


def address(value: object) -> Any:
    """``cython.address(x)``: a C pointer to ``x`` when compiled (code under ``if cython.compiled``
    only); ``x`` itself uncompiled."""
    return value


def declare(_t: object, value: Any = None, **_how: object) -> Any:
    """``x = cython.declare(T, ...)``: a C variable (in a ``cclass`` body, a C attribute) when
    compiled; ``value`` (None if not given) uncompiled."""
    return value


def locals(**_types: object) -> Callable[[_F], _F]:  # noqa: A001 - cython's name
    """``@cython.locals(i=cython.Py_ssize_t)``: the local variables' C types; nothing uncompiled."""
    return _same


def returns(_t: object) -> Callable[[_F], _F]:
    """``@cython.returns(T)``: a C function's return type when compiled; nothing uncompiled."""
    return _same


def boundscheck(_on: bool) -> Callable[[_F], _F]:
    """``@cython.boundscheck(False)``: compiled, list indices are not checked; nothing uncompiled."""
    return _same


def wraparound(_on: bool) -> Callable[[_F], _F]:
    """``@cython.wraparound(False)``: compiled, no negative indices; nothing uncompiled."""
    return _same


def freelist(_n: int) -> Callable[[_F], _F]:
    """``@cython.freelist(n)`` on an extension type: up to ``n`` freed instances are kept for
    reuse (compiled); nothing uncompiled."""
    return _same


cclass: Callable[[_F], _F] = _same
ccall: Callable[[_F], _F] = _same
cfunc: Callable[[_F], _F] = _same
final: Callable[[_F], _F] = _same
inline: Callable[[_F], _F] = _same
no_gc: Callable[[_F], _F] = _same
"""``@cython.no_gc`` on an extension type that can be in no reference cycle: compiled, the
cycle collector does not track it."""


def __getattr__(name: str) -> Any:
    raise AttributeError(f"stalkd.cyshim has no {name!r}: add it here (the module using it "
                         "would fail uncompiled without Cython installed)")
