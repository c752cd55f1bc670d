"""Which encoder turns WAL records into payload bytes: the compiled twin or the reference.

``stalkd.engine._records`` (built from ``_records.c`` with the other accelerators, ``make ext``)
is a compiled twin of ``model.encode``: the same record gives the same bytes
(tests/engine/test_records_differential.py); it is given the reference and hands it every
record off its fast path, so errors are the reference's. The WAL encodes every record it
writes, where the reference packs and joins three to five structs. ``STALKD_NO_EXTENSIONS=1``
or a missing build selects ``model.encode``, the reference and the format's one definition.

Example:
    >>> from stalkd.engine.model import Op, Record
    >>> IMPLEMENTATION in ("c", "python"), encode(Record(Op.DELETE, 1, 2, 3)) == model.encode(Record(Op.DELETE, 1, 2, 3))
    (True, True)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from stalkd.engine import model
from stalkd.extensions import compiled_module

__all__ = ["IMPLEMENTATION", "encode"]


def _compiled() -> Callable[[model.Record], bytes] | None:
    mod = compiled_module("stalkd.engine._records")
    if mod is None:
        return None
    mod.set_reference(model.encode, model.Op)
    return mod.encode  # type: ignore[no-any-return]


encode: Callable[[model.Record], bytes] = _compiled() or model.encode
IMPLEMENTATION: Literal["c", "python"] = "python" if encode is model.encode else "c"
