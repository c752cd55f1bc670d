"""Every transcript against every registered server (tests/compat/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import ServerKind
from .runner import run_transcript
from .transcripts import TRANSCRIPTS, Transcript


@pytest.mark.parametrize(
    "transcript",
    [pytest.param(t, id=t.name, marks=(pytest.mark.slow,) if t.slow else ()) for t in TRANSCRIPTS],
)
def test_transcript(server_kind: ServerKind, transcript: Transcript, tmp_path: Path) -> None:
    # "{dir}" in a transcript's options is a fresh data directory, kept across its restarts.
    flags = [f.replace("{dir}", str(tmp_path / "data")) for f in transcript.options]
    if any("{dir}" in f for f in transcript.options):
        (tmp_path / "data").mkdir()
    servers = [server_kind.start(*flags)]

    def restart(kill: bool) -> tuple[str, int, int]:
        old = servers[-1]
        if kill:
            old.proc.kill()
            old.proc.wait()
        else:
            old.stop()
        servers.append(server_kind.start(*flags))
        return servers[-1].host, servers[-1].port, servers[-1].proc.pid

    try:
        first = servers[0]
        run_transcript(transcript, first.host, first.port, server_kind.dialect, pid=first.proc.pid,
                       restart=restart)  # fmt: skip
    finally:
        for server in servers:
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
