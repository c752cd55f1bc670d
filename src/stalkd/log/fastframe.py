"""Which encoder the segment writer frames payloads with: the compiled twin or the reference.

``stalkd.log._frames`` (built from ``_frames.c`` with the other accelerators, ``make ext``) is a
compiled twin of ``frame.encode_data_frames`` with its own CRC32C: the same payloads give the
same bytes (tests/log/test_frames_differential.py); it is given the reference and hands it
every input off its fast path, so errors are the reference's. ``STALKD_NO_EXTENSIONS=1`` (the
switch ``stalkd.extensions`` reads, below every layer)
or a missing build selects ``frame.encode_data_frames``, the reference.

Example:
    >>> IMPLEMENTATION in ("c", "python"), encode_data_frames([b"a"], 0, 1, 1) == frame.encode_data_frames([b"a"], 0, 1, 1)
    (True, True)
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Literal

from stalkd.extensions import extensions_disabled

from . import frame

__all__ = ["IMPLEMENTATION", "encode_data_frames"]

Encoder = Callable[[Sequence[bytes | bytearray | memoryview], int, int, int], bytes]


def _compiled() -> Encoder | None:
    if extensions_disabled():
        return None
    try:
        mod = importlib.import_module("stalkd.log._frames")
    except ImportError:
        return None
    mod.set_reference(frame.encode_data_frames)
    return mod.encode_data_frames  # type: ignore[no-any-return]


encode_data_frames: Encoder = _compiled() or frame.encode_data_frames
IMPLEMENTATION: Literal["c", "python"] = "python" if encode_data_frames is frame.encode_data_frames else "c"
