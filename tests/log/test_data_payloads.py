"""``frame.data_payloads``: the payloads of a region filled by data frames (a standby's frames
message), each frame checked as a reader of the segment would; anything else refuses the region."""

from __future__ import annotations

import random

import pytest

from stalkd.log import frame


def _region(rng: random.Random, count: int, first: int) -> tuple[bytes, list[bytes]]:
    """Frames of ``count`` random payloads at deltas ``first``..., their writer epochs rising."""
    payloads = [rng.randbytes(rng.choice([0, 1, 7, 8, 9, 100, rng.randrange(3000)])) for _ in range(count)]
    out, i, epoch = [], 0, rng.randrange(5)
    while i < count:
        n = rng.randrange(1, count - i + 1)
        out.append(frame.encode_data_frames(payloads[i : i + n], first + i, rng.randrange(2**40), epoch))
        i, epoch = i + n, epoch + rng.randrange(2)
    return b"".join(out), payloads


@pytest.mark.parametrize("seed", range(30))
def test_good_regions_give_their_payloads(seed: int) -> None:
    rng = random.Random(seed)
    count = rng.choice([0, 1, 2, 50])
    base = rng.randrange(2**40)
    first = rng.choice([0, 5, 2**32 - 60])
    region, payloads = _region(rng, count, first)
    head = rng.randbytes(16)  # a message's own head before its frames
    buf = head + region
    assert frame.data_payloads(buf, 16, len(buf), base, base + first, 0xFFFF) == payloads


@pytest.mark.parametrize("seed", range(60))
def test_damaged_or_misplaced_regions_are_refused(seed: int) -> None:
    rng = random.Random(1000 + seed)
    region, payloads = _region(rng, rng.choice([1, 3, 40]), 7)
    buf = bytearray(region)
    how = seed % 6
    offset, limit, end = 7, 0xFFFF, len(buf)
    if how == 0:
        buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)  # a flipped bit anywhere
    elif how == 1:
        end = rng.randrange(len(buf))  # torn
    elif how == 2:
        offset = 8  # the deltas are not the offsets asked for
    elif how == 3:
        limit = -1  # writer epochs above the limit
    elif how == 4:
        buf += bytes(frame.FRAME_HEADER_SIZE)  # zeros after the last frame
        end = len(buf)
    else:  # an older writer epoch after a newer one
        buf = bytearray(frame.encode_data_frames([b"a"], 7, 0, 3) + frame.encode_data_frames([b"b"], 8, 0, 2))
        end = len(buf)
    assert frame.data_payloads(bytes(buf), 0, end, 0, offset, limit) is None


def test_a_padding_frame_between_data_frames_is_skipped() -> None:
    pad = frame.encode_frame(b"\0" * 5, 0, 0, 1, frame.KIND_PADDING)
    buf = frame.encode_data_frames([b"a"], 0, 0, 1) + pad + frame.encode_data_frames([b"b"], 1, 0, 1)
    assert frame.data_payloads(buf, 0, len(buf), 0, 0, 1) == [b"a", b"b"]



@pytest.mark.parametrize("base", [0, 2**40, 2**63 + 5, 2**64 - 3])
def test_the_scan_lists_the_same_frames_at_any_base_and_row_limit(base: int) -> None:
    """The compiled scan counts deltas in C integers: offsets near the top of the u64 range and
    row limits far past it must list what the checks say, as the uncompiled scan does."""
    buf = memoryview(frame.encode_data_frames([b"a", b"bc", b""], 0, 9, 1) + bytes(24))
    for max_rows, want in ((2, [0, 32]), (2**70, [0, 32, 64])):
        st = frame.ScanState(0, base)
        assert frame.scan_positions(buf, base, 1, st, len(buf), None, 0, max_rows) == want
        assert st.offset == base + len(want)
    st = frame.ScanState(0, base)
    assert frame.scan_positions(buf, base, 1, st, len(buf), None, base + 1, 10) == [32, 64]  # the first skipped
    assert st.status == "end"
