"""Every transcript against every registered server (tests/compat/conftest.py)."""

from __future__ import annotations

import pytest

from .conftest import ServerKind
from .runner import run_transcript
from .transcripts import TRANSCRIPTS, Transcript


@pytest.mark.parametrize("transcript", TRANSCRIPTS, ids=[t.name for t in TRANSCRIPTS])
def test_transcript(server_kind: ServerKind, transcript: Transcript) -> None:
    server = server_kind.start(*transcript.options)
    try:
        run_transcript(transcript, server.host, server.port, server_kind.dialect, pid=server.proc.pid)
    finally:
        server.stop()


def _framed(reply: bytes) -> bool:
    """True when a reply's announced <bytes> matches its body (and it ends with CRLF)."""
    head, sep, rest = reply.partition(b"\r\n")
    words = head.split(b" ")
    if not sep or not rest and words[0] not in (b"OK", b"RESERVED", b"FOUND"):
        return reply.endswith(b"\r\n") and reply.count(b"\r\n") == 1
    size = int(words[1] if words[0] == b"OK" else words[2])
    return len(rest) == size + 2 and rest.endswith(b"\r\n")


def test_transcripts_are_well_formed() -> None:
    # Literal expectations must themselves be valid replies, or a transcript could only fail.
    from .runner import Expect, Poll

    checked = 0
    for t in TRANSCRIPTS:
        for step in t.steps:
            reply = step.reply if isinstance(step, Expect) else step.until if isinstance(step, Poll) else None
            if isinstance(reply, bytes):
                assert _framed(reply), (t.name, reply)
                checked += 1
    assert checked > 100
