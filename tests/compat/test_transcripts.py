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
