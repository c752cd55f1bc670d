"""A standby acknowledges every durable end at once unless its primary said it may wait (no reply
waits for it: no ``--sync-standbys``); then it sends one acknowledgement per delay, the first at
once, and the primary's view of it still reaches the log's end: by the delayed acknowledgement,
and at every heartbeat. A primary of a build before the delay (no field in ``STREAMING``) and one
whose replies wait get an acknowledgement per durable end. The real Receiver against a scripted
primary (every acknowledgement counted), then the real Replicas/Sender against it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from stalkd.engine import Engine
from stalkd.engine.model import Op, Record, encode
from stalkd.log import Log
from stalkd.persist.wal import Wal
from stalkd.replication import sender, wire
from stalkd.replication.receiver import Receiver
from stalkd.replication.role import Role
from stalkd.replication.sender import Replicas

from .streams import Listener, ScriptedPrimary, run_against, standby, until

MESSAGES = 30


def put(jid: int) -> bytes:
    return encode(Record(Op.PUT, jid, 5_000_000, jid, "t", 0, 0, 60, 0, b"job %d" % jid))


def message(first: int) -> bytes:
    return b"".join(wire.encode_records(first, [put(first + 1)]))


def test_a_standby_told_a_delay_acknowledges_once_per_delay_and_at_every_heartbeat(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    # Given a primary that lets acknowledgements wait an hour (the heartbeat's bound lifted:
    # within the test, no delayed acknowledgement comes due)
    monkeypatch.setattr(wire, "HEARTBEAT", 3600.0)

    async def script(primary: ScriptedPrimary, rc: Receiver, swal: Wal) -> None:
        assert primary.request.split(b" ")[2].startswith(b"000")  # it offered to pace
        assert rc.ack_delay == 3600.0
        # When the standby makes each of many messages durable in turn
        for i in range(MESSAGES):
            primary.send(message(i))
            await until(lambda i=i: rc.durable_end == i + 1, f"message {i} to be durable")
        # Then one acknowledgement went out, the first, at once; the rest wait
        assert primary.acks == [1]
        # and a heartbeat is answered with the durable end: the primary's view reaches the end
        primary.send(wire.encode_heartbeat(MESSAGES))
        await until(lambda: primary.acks[-1:] == [MESSAGES], "the heartbeat's answer")
        assert primary.acks == [1, MESSAGES]
        assert rc.lag == 0 and rc.lag_seconds == 0.0

    rc = run_against(tmp_path, ScriptedPrimary(" 3600000"), script)
    assert rc.acks == 2


def test_a_delayed_acknowledgement_reaches_the_durable_end_without_a_heartbeat(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setattr(wire, "HEARTBEAT", 3600.0)  # (no heartbeat: the scripted primary sends none)

    async def script(primary: ScriptedPrimary, rc: Receiver, swal: Wal) -> None:
        assert rc.ack_delay == 0.2
        # Given a first message acknowledged at once
        primary.send(message(0))
        await until(lambda: primary.acks == [1], "the first acknowledgement")
        # When more come right after it (within the delay, on any but a very slow machine)
        primary.send(b"".join(message(i) for i in range(1, MESSAGES)))
        await until(lambda: rc.durable_end == MESSAGES, "every message to be durable")
        # Then the acknowledgement that was held back, once due, says the whole log is held
        await until(lambda: primary.acks[-1:] == [MESSAGES], "the delayed acknowledgement")
        assert primary.acks == sorted(set(primary.acks))  # each says more than the one before

    run_against(tmp_path, ScriptedPrimary(" 200"), script)


@pytest.mark.parametrize("tail", ["", " 0"], ids=["primary-before-the-delay", "primary-that-waits"])
def test_a_standby_told_no_delay_acknowledges_every_durable_end(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tail: str) -> None:  # fmt: skip
    monkeypatch.setattr(wire, "HEARTBEAT", 3600.0)  # (no heartbeat, no delayed acknowledgement)

    async def script(primary: ScriptedPrimary, rc: Receiver, swal: Wal) -> None:
        assert rc.ack_delay == 0.0
        # When the primary sends a message only once the last is acknowledged (as replies that
        # wait for this standby make it)
        for i in range(MESSAGES):
            primary.send(message(i))
            await until(lambda i=i: primary.acks[-1:] == [i + 1], f"message {i}'s acknowledgement")
        # Then every durable end was acknowledged on its own
        assert primary.acks == list(range(1, MESSAGES + 1))

    run_against(tmp_path, ScriptedPrimary(tail), script)


@pytest.mark.parametrize("sync_standbys", [0, 1], ids=["async", "sync"])
def test_the_primary_tells_the_delay_and_sees_the_standby_reach_its_end(tmp_path: Path, sync_standbys: int) -> None:
    """Without --sync-standbys the primary lets acknowledgements wait ``ASYNC_ACK_DELAY_MS``
    (and still sees its standby reach the log's end: lag 0); with it, not at all (each group
    commit's batch is released by its own acknowledgement)."""
    plog = Log.open(tmp_path / "p")
    prole = Role(None)
    prole.attach(Engine())
    released: list[int] = []
    replicas = Replicas(plog, str(tmp_path / "p-snapshots"), prole, sync_standbys, lambda: released.append(1))
    batch = 0

    def commit(n: int) -> None:  # one group commit of the primary's, then the standbys are told
        nonlocal batch
        start = plog.next_offset
        plog.write_many([put(start + 1 + k) for k in range(n)])
        batch += 1
        if replicas.gate is not None:
            replicas.gate.note(batch, plog.next_offset)
        replicas.written()

    with Wal.open(tmp_path / "s", durability="always") as swal:
        async def main() -> None:
            server = await asyncio.get_running_loop().create_server(lambda: Listener(replicas, granted=True), "127.0.0.1", 0)
            port = server.sockets[0].getsockname()[1]
            replicas.start()
            rc = standby(swal, port)
            task = asyncio.create_task(rc.run())
            try:
                # (both ends: the primary's sender exists before the standby has read the
                # delay its STREAMING reply tells)
                await until(lambda: len(replicas.senders) == 1 and rc.connected, "the standby to stream")
                assert rc.ack_delay == (sender.ASYNC_ACK_DELAY_MS / 1000 if not sync_standbys else 0.0)
                for n in (1, 3, 1, 40, 7, 200, 2) * 4:
                    commit(n)
                    if replicas.gate is not None:  # a reply waits for this batch
                        await until(lambda: replicas.gate is not None and replicas.gate.replicated == batch,
                                    f"batch {batch} to be replicated")  # fmt: skip
                # Then the primary sees its standby hold the whole log, however it was acknowledged
                await until(lambda: [lag for _, lag, _ in replicas.lags()] == [0], "the standby's lag to reach 0")
                assert swal.log.next_offset == plog.next_offset == 1016
                assert rc.problem is None and rc.lag == 0
            finally:
                rc.stop()
                task.cancel()
                replicas.close()
                server.close()
                await server.wait_closed()

        asyncio.run(main())
    plog.close()


def test_the_pace_is_offered_and_told_only_where_both_sides_know_it() -> None:
    # a paced request is a frames request to a primary of an earlier build (one zero more)
    line = wire.encode_request(40, 2, [(1, 10), (2, 30)], "node-b", paced=True)
    assert line == b"replicate 40 002 1:10,2:30 node-b\r\n"
    epoch = line.split(b" ")[2]
    assert int(epoch) == 2 and len(epoch) > 1 and epoch.startswith(b"0")  # what such a primary reads
    req = wire.parse_request(line)
    assert req is not None and (req.epoch, req.frames, req.paced) == (2, True, True)
    for old in (b"replicate 40 02 1:10,2:30 node-b\r\n", b"replicate 40 2 1:10,2:30 node-b\r\n",
                b"replicate 0 00 -\r\n", b"replicate 0 0 -\r\n"):  # fmt: skip
        r = wire.parse_request(old)
        assert r is not None and not r.paced
    with pytest.raises(ValueError):
        wire.encode_request(1, 1, frames=False, paced=True)
    # a standby of an earlier build reads STREAMING with three fields: it gets no fourth
    assert len(wire.parse_reply(wire.encode_streaming(2, 40, [(2, 0)])).args) == 3
    assert wire.ack_delay(wire.parse_reply(wire.encode_streaming(2, 40, [(2, 0)]))) == 0.0
    assert wire.ack_delay(wire.parse_reply(wire.encode_streaming(2, 40, [(2, 0)], 10))) == 0.01
    with pytest.raises(wire.WireError):
        wire.ack_delay(wire.parse_reply(b"STREAMING 2 40 2:0 -1\r\n"))
