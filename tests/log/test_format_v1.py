"""Segment format version 1, frozen as hex: this build must keep reading exactly these bytes.

(STYLE habit 4: one test file per format version; a new version adds a file, never edits this one.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from stalkd.log import LogReader
from stalkd.log.frame import encode_frame
from stalkd.log.segment import SegmentView, decode_header, encode_footer, encode_header

HEADER_V1 = bytes.fromhex(
    "5354414c4b4c4f470100010000000000640000000000000000401e18240a0600719b1462"
) + bytes(28)
FRAME_ABC = bytes.fromhex("b2ab4464a7800100030000000000000000401e18240a06006162630000000000")
FRAME_EMPTY = bytes.fromhex("fe1763aba7800100000000000100000001401e18240a0600")
FOOTER = bytes.fromhex(
    "66aec193a782010018000000020000000000000000000000660000000000000078000000000000000200000000000000"
)
TS = 1_700_000_000_000_000


def test_v1_encoders_still_produce_the_frozen_bytes() -> None:
    assert encode_header(100, 1, TS) == HEADER_V1
    assert encode_frame(b"abc", 0, TS, 1) == FRAME_ABC
    assert encode_frame(b"", 1, TS + 1, 1) == FRAME_EMPTY
    assert encode_footer(100, 102, 64 + 32 + 24, 1) == FOOTER
    assert decode_header(HEADER_V1, "x") == (100, 1)


@pytest.mark.parametrize("sealed", [False, True])
def test_v1_segment_reads_back(tmp_path: Path, sealed: bool) -> None:
    body = HEADER_V1 + FRAME_ABC + FRAME_EMPTY
    data = body + bytes(256 - len(body) - len(FOOTER)) + (FOOTER if sealed else bytes(len(FOOTER)))
    seg = tmp_path / "seg-00000000000000000100.log"
    seg.write_bytes(data)
    view = SegmentView(str(seg))
    assert view.footer == ((102, 120) if sealed else None)
    frames = [(f.offset, f.timestamp_us, f.bytes()) for f in LogReader(tmp_path).read(0)]
    assert frames == [(100, TS, b"abc"), (101, TS + 1, b"")]
    view.close()
