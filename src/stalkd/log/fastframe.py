"""Which encoders the segment writer frames payloads with: the compiled twins or the references.

``stalkd.log._frames`` (built from ``_frames.c`` with the other accelerators, ``make ext``) is a
compiled twin of ``frame.encode_data_frames`` and ``frame.put_data_frame`` with its own CRC32C:
the same payloads give the same bytes (tests/log/test_frames_differential.py); it is given the
references and hands them every input off its fast path, so errors are the references'. ``STALKD_NO_EXTENSIONS=1`` (the
switch ``stalkd.extensions`` reads, below every layer)
or a missing build selects the references.

Example:
    >>> IMPLEMENTATION in ("c", "python"), encode_data_frames([b"a"], 0, 1, 1) == frame.encode_data_frames([b"a"], 0, 1, 1)
    (True, True)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

from stalkd.extensions import compiled_module

from . import frame

__all__ = ["IMPLEMENTATION", "encode_data_frames", "put_data_frame"]

Encoder = Callable[[Sequence[bytes | bytearray | memoryview], int, int, int], bytes]
Putter = Callable[[Any, int, int, bytes | bytearray | memoryview, int, int, int], int]


def _compiled() -> tuple[Encoder, Putter] | None:
    mod = compiled_module("stalkd.log._frames")
    if mod is None:
        return None
    mod.set_reference(frame.encode_data_frames, frame.put_data_frame)
    return mod.encode_data_frames, mod.put_data_frame


encode_data_frames: Encoder
put_data_frame: Putter
encode_data_frames, put_data_frame = _compiled() or (frame.encode_data_frames, frame.put_data_frame)
IMPLEMENTATION: Literal["c", "python"] = "python" if encode_data_frames is frame.encode_data_frames else "c"
