"""atheris harness for the protocol parser; runs for as long as you let it.

    make fuzz                                   # FUZZ_SECONDS=3600 by default
    .venv/bin/python fuzz/fuzz_parser.py -max_total_time=600 fuzz/corpus

Each input is split into a byte stream, a max job size and chunk boundaries. It checks:
- the parser never raises, whatever the bytes;
- feeding the stream in chunks gives the same items as feeding it at once;
- the items equal those of the literal model of beanstalkd's C input loop
  (tests/protocol/cmodel.py);
- memory stays bounded: waiting for a command line never holds 224 bytes or more, and a
  too-big body is never held;
- when the C accelerator is built, it gives the same items and holds the same bytes as the
  pure-Python parser, chunk by chunk.
``check`` is importable without atheris (tests/protocol/test_fuzz_harness.py runs it).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.protocol.cmodel import CModel  # noqa: E402

from stalkd.protocol import NEED_DATA, accel  # noqa: E402
from stalkd.protocol.grammar import LINE_MAX  # noqa: E402
from stalkd.protocol.parser import _STATE_ENDLINE, _STATE_LINE, _STATE_SKIP, Parser  # noqa: E402


def _drain(p: Parser, out: list[object]) -> None:
    while (item := p.next()) is not NEED_DATA:
        out.append(item)
    out.append(("held", p.buffered))
    state = p._state
    if state in (_STATE_LINE, _STATE_ENDLINE):
        assert p.buffered < LINE_MAX, f"holding {p.buffered} bytes while waiting for a line"
    elif state == _STATE_SKIP:
        assert p.buffered == 0, "a too-big body is being held"


def check(data: bytes, parser: type[Parser] = Parser, compiled: type[Parser] | None = accel.CParser) -> None:
    """One fuzz case. Layout: [limit byte][n cuts][cuts: 2 bytes each][stream].

    ``parser`` is the reference under test; ``compiled`` (the C parser when built, None to
    skip) must agree with it."""
    if len(data) < 2:
        return
    limit = data[0] * 4
    ncuts = data[1] % 16
    cut_bytes, stream = data[2 : 2 + 2 * ncuts], data[2 + 2 * ncuts :]
    cuts = sorted({int.from_bytes(cut_bytes[i : i + 2], "big") % (len(stream) + 1) for i in range(0, len(cut_bytes) - 1, 2)})
    edges = [0, *cuts, len(stream)]
    chunks = [stream[a:b] for a, b in zip(edges, edges[1:], strict=False)]

    whole: list[object] = []
    p = parser(max_job_size=limit)
    p.feed(stream)
    _drain(p, whole)

    split: list[object] = []
    q = parser(max_job_size=limit)
    for c in chunks:
        q.feed(c)
        _drain(q, split)
    items = [x for x in whole if type(x) is not tuple]
    assert [x for x in split if type(x) is not tuple] == items, f"chunking changed the items: {chunks!r}"

    model = CModel(limit).run(chunks)
    assert items == model, f"differs from the C model for {stream!r}: {items!r} vs {model!r}"

    if compiled is not None:
        other: list[object] = []
        r = compiled(max_job_size=limit)
        for c in chunks:
            r.feed(c)
            _drain(r, other)
        assert other == split, f"the C parser differs for {chunks!r}: {other!r} vs {split!r}"


def main() -> None:
    import atheris

    argv = list(sys.argv)
    if not any(a.startswith("-dict=") for a in argv):
        argv.append(f"-dict={Path(__file__).with_name('parser.dict')}")  # command words help
    atheris.instrument_all()
    atheris.Setup(argv, lambda data: check(bytes(data)))
    atheris.Fuzz()


if __name__ == "__main__":
    main()
