"""A primary sends frames messages (kind F) only to a standby that asked for them in its request;
one that did not, as a standby of a build before frames messages, gets records messages (R)
alone: a complete stream, after which it holds the primary's log record for record. The real
Replicas/Sender and Receiver, over loopback, the request authenticated by the secret's challenge.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from stalkd.engine import Engine
from stalkd.engine.model import Op, Record, encode
from stalkd.log import Log
from stalkd.persist.wal import Wal
from stalkd.replication import wire
from stalkd.replication.receiver import Receiver
from stalkd.replication.role import Role
from stalkd.replication.sender import Replicas, Sender

from .streams import Listener, standby, until

SECRET = "negotiated-secret-1234"
SEGMENT = 64 * 1024  # small segments: the stream crosses sealed ones as well as the active one


def put(jid: int) -> bytes:
    return encode(Record(Op.PUT, jid, 5_000_000, jid, "t", 0, 0, 60, 0, b"job %d " % jid + b"x" * (jid % 300)))


def payloads(lg: Log) -> list[tuple[int, bytes]]:
    return [(f.offset, bytes(f.payload)) for f in lg.read(0)]


@pytest.mark.parametrize("frames", [False, True], ids=["standby-without-frames", "standby-asking-frames"])
def test_a_standby_gets_frames_only_when_it_asks_and_the_whole_log_either_way(tmp_path: Path, frames: bool) -> None:
    plog = Log.open(tmp_path / "p", segment_size=SEGMENT)
    pengine = Engine()
    prole = Role(None)
    prole.attach(pengine)
    replicas = Replicas(plog, str(tmp_path / "p-snapshots"), prole, 0, lambda: None, secret=SECRET)
    jid = 0

    def commit(n: int) -> None:  # one group commit of the primary's, then the standbys are told
        nonlocal jid
        plog.write_many([put(jid + 1 + k) for k in range(n)])
        jid += n
        replicas.written()

    with Wal.open(tmp_path / "s", durability="always", segment_size=SEGMENT) as swal:
        async def main() -> tuple[Sender, Receiver]:
            server = await asyncio.get_running_loop().create_server(lambda: Listener(replicas), "127.0.0.1", 0)
            port = server.sockets[0].getsockname()[1]
            replicas.start()
            # Given a primary whose log spans several segments before the standby comes
            for _ in range(20):
                commit(50)
            rc = standby(swal, port, secret=SECRET, frames=frames)
            task = asyncio.create_task(rc.run())
            try:
                # When it catches up, and then follows group commits at the log's end
                await until(lambda: swal.log.next_offset == plog.next_offset and rc.durable_end == plog.next_offset,
                            "the standby to catch up")  # fmt: skip
                for n in (1, 3, 1, 40, 7, 200, 2):
                    commit(n)
                    await until(lambda: rc.durable_end == plog.next_offset, "the standby to follow a commit")
                assert rc.problem is None
                (sender,) = replicas.senders
                return sender, rc
            finally:
                rc.stop()
                task.cancel()
                replicas.close()
                server.close()
                await server.wait_closed()

        sender, rc = asyncio.run(main())
        # Then: frames only if it asked, and its log is the primary's, record for record
        assert sender.frames is frames
        if frames:
            assert sender.sent["F"] > 0
        else:
            assert sender.sent == {"F": 0, "R": sender.sent["R"]} and sender.sent["R"] > 0
        assert swal.log.next_offset == plog.next_offset == jid == 1254
        assert payloads(swal.log) == payloads(plog)
        assert sorted(rc.engine.jobs) == list(range(1, jid + 1))
    plog.close()


def test_a_request_of_a_build_before_frames_asks_for_records_alone() -> None:
    before = wire.parse_request(b"replicate 40 2 1:10,2:30 node-b\r\n")
    assert before is not None and not before.frames and (before.epoch, before.name) == (2, "node-b")
    now = wire.parse_request(wire.encode_request(40, 2, [(1, 10), (2, 30)], "node-b"))
    assert now is not None and now.frames
    assert (now.offset, now.epoch, now.history, now.name) == (before.offset, before.epoch, before.history, before.name)
    assert wire.encode_request(40, 2, [(1, 10), (2, 30)], "node-b", frames=False) == b"replicate 40 2 1:10,2:30 node-b\r\n"


@pytest.mark.parametrize("frames", [False, True])
def test_the_token_is_inside_what_the_secret_proves(frames: bool) -> None:
    """A proof made for a request does not pass for the same request with the token added or
    taken away: nobody between standby and primary can change it unnoticed."""
    nonce = wire.new_nonce()
    sent = wire.encode_request(12, 3, [(1, 4), (3, 9)], frames=frames)
    altered = wire.encode_request(12, 3, [(1, 4), (3, 9)], frames=not frames)
    answer = wire.encode_auth(SECRET, nonce, sent)
    assert wire.check_auth(SECRET, nonce, sent, answer)
    assert not wire.check_auth(SECRET, nonce, altered, answer)
