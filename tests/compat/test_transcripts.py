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


@pytest.mark.parametrize("kind", ["stalkd", "stalkd+tls"])
def test_a_stalkd_that_exits_after_listening_is_an_error_with_its_log(kind: str,
                                                                     tmp_path: Path) -> None:
    # Given a data directory that is a file: stalkd listens, then cannot open it and exits
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    # Then starting it for a transcript fails there, saying why, not at the first connection
    from .conftest import SERVERS

    with pytest.raises(RuntimeError, match="exited with") as raised:
        SERVERS[kind].start("-b", str(not_a_dir))
    assert str(not_a_dir) in str(raised.value)


def test_a_step_that_fails_because_the_server_died_says_so() -> None:
    import signal

    from .conftest import SERVERS
    from .runner import Expect, Send, Signal, TranscriptError, run_transcript

    # Given a transcript whose server is killed while a reply is awaited
    dies = Transcript("dies", (Send("a", b"list-tube-used\r\n"), Signal("a", signal.SIGKILL),
                               Expect("a", b"USING default\r\n"), Expect("a", b"never\r\n")))
    server = SERVERS["stalkd"].start()
    try:
        with pytest.raises(TranscriptError) as raised:
            run_transcript(dies, server.host, server.port, "1.13", pid=server.proc.pid)
    finally:
        server.stop()
    # Then the error says the server is gone, beside what the connection saw
    assert f"the server (pid {server.proc.pid}) has exited" in str(raised.value)
