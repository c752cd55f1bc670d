"""A PUT record a standby checks (``frames.check_records``) is the record ``model.decode`` gives,
field for field, whatever its values; a PUT damaged in any way is refused with decode's own
reason. (Compiled, check_records reads a version-1 PUT's fields itself, by C loads; this holds
it to the decoder, the one reader of the format.)"""

from __future__ import annotations

import random

import pytest

from stalkd.engine.model import Op, Record, RecordFormatError, decode, encode
from stalkd.replication.frames import check_records
from stalkd.replication.wire import WireError

U32, U64, I64 = 2**32 - 1, 2**64 - 1, 2**63 - 1


def put(seq: int, time_us: int, jid: int, tube: str, pri: int, delay: int, ttr: int, deadline: int,
        body: bytes) -> bytes:  # fmt: skip
    return encode(Record(Op.PUT, seq, time_us, jid, tube, pri, delay, ttr, deadline, body, created_us=time_us))


def test_extreme_values_come_back_as_decode_gives_them() -> None:
    payloads = [
        put(0, 0, 0, "", 0, 0, 0, 0, b""),
        put(U64, I64, U64, "t" * 200, U32, U32, U32, I64, b"x" * 70_000),
        put(1, -I64 - 1, 2**53 + 1, "a-b_c+d;e$f(g)h/i.j", 2**31, 7, 1, -1, b"\0\r\n"),
    ]
    records = check_records(3, payloads, 3, 0)
    assert records == [decode(p) for p in payloads]
    assert [r.created_us for r in records] == [0, I64, -I64 - 1]


def test_random_puts_in_many_tubes_come_back_as_decode_gives_them() -> None:
    rng = random.Random(34)
    tubes = [f"tube-{i}" for i in range(100)]  # more than the decoder's 64 name slots
    payloads = [put(rng.randrange(U64), rng.randrange(-I64, I64), rng.randrange(U64), rng.choice(tubes),
                    rng.randrange(U32), rng.randrange(U32), rng.randrange(U32), rng.randrange(-I64, I64),
                    rng.randbytes(rng.randrange(300)))
                for _ in range(2000)]  # fmt: skip
    records = check_records(0, payloads, 0, 0)
    assert records == [decode(p) for p in payloads]
    assert all(type(r.tube) is str and type(r.body) is bytes for r in records)


def _decode_error(p: bytes) -> str:
    with pytest.raises(RecordFormatError) as e:
        decode(p)
    return str(e.value)


def damaged() -> list[bytes]:
    good = put(5, 6, 7, "tube", 1, 2, 3, 4, b"body")
    out = [good[:n] for n in range(len(good))]  # cut short anywhere
    out.append(good + b"!")  # longer than its body says
    bad_tube = bytearray(good)
    bad_tube[48] = 0xE9  # not ASCII
    out.append(bytes(bad_tube))
    long_tube = bytearray(good)
    long_tube[46:48] = (4000).to_bytes(2, "little")  # the name runs past the end
    out.append(bytes(long_tube))
    long_body = bytearray(good)
    long_body[52:56] = (5).to_bytes(4, "little")  # one more byte than there is
    out.append(bytes(long_body))
    return out


@pytest.mark.parametrize("payload", damaged())
def test_a_damaged_put_is_refused_with_decodes_reason(payload: bytes) -> None:
    why = _decode_error(payload)
    with pytest.raises(WireError) as e:
        check_records(9, [put(1, 1, 1, "t", 0, 0, 1, 0, b"ok"), payload], 9, 0)
    assert str(e.value) == f"record at offset 10: {why}"
