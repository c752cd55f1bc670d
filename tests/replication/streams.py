"""What the stream tests share: a listener that hands a replication request to the real
``Replicas``, as the server's listeners do, a standby's receiver with its own engine, the
stream's writing half as the receiver uses it, a job's record as the primary streams it, a
standby streaming from a scripted primary, and waiting for a condition on the loop the standby
and the primary both run on."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from stalkd.client._address import parse_address
from stalkd.engine import Engine
from stalkd.engine.model import Op, Record, encode
from stalkd.persist.wal import Wal
from stalkd.replication import wire
from stalkd.replication.receiver import Receiver
from stalkd.replication.role import Role
from stalkd.replication.sender import Replicas


class Listener(asyncio.Protocol):
    """What the server's listeners do with a connection whose first bytes ask for the log
    (``granted``: its ACL lets the identity replicate without the secret)."""

    def __init__(self, replicas: Replicas, granted: bool = False) -> None:
        self.replicas = replicas
        self.granted = granted
        self.transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        self.replicas.take_over(self.transport, data, granted=self.granted)


class Acks:
    """The stream's writing half, as the receiver uses it (it writes its acknowledgements to the
    transport): the offsets it acknowledged, in order (``sent``); given the standby's ``wal``,
    also the log's durable end as each was sent (``durable_at``)."""

    def __init__(self, wal: Wal | None = None) -> None:
        self.wal = wal
        self.sent: list[int] = []
        self.durable_at: list[int] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.sent.append(int.from_bytes(data, "little"))
        if self.wal is not None:
            self.durable_at.append(self.wal.log.durable_offset)

    def is_closing(self) -> bool:
        return self.closed

    @property
    def transport(self) -> Acks:  # (the receiver writes acknowledgements to the transport)
        return self

    def close(self) -> None:
        self.closed = True


class ScriptedPrimary(asyncio.Protocol):
    """Answers a stream request with ``STREAMING 0 0 -`` and ``tail``, then sends what the test
    writes; keeps every acknowledgement the standby sends."""

    def __init__(self, tail: str) -> None:
        self.tail = tail
        self.request = b""
        self.transport: asyncio.Transport | None = None
        self.acks: list[int] = []
        self._decoder = wire.AckDecoder()
        self._buf = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        if not self.request:
            self.request = data
            self.transport.write(b"STREAMING 0 0 -%s\r\n" % self.tail.encode())
            return
        # one acknowledgement at a time: each is counted, however the reads cut them
        buf = self._buf + data
        whole = len(buf) - len(buf) % 8
        self._buf = buf[whole:]
        for at in range(0, whole, 8):
            ack = self._decoder.feed(buf[at:at + 8])
            assert ack is not None
            self.acks.append(ack)

    def send(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)


def put_payload(jid: int, deadline_us: int = 0) -> bytes:
    """Job ``jid``'s PUT record, encoded as the primary streams it (delayed until
    ``deadline_us``, if not 0)."""
    return encode(Record(Op.PUT, jid, 5_000_000, jid, "t", 0, 0, 60, deadline_us, b"job %d" % jid))


def standby(swal: Wal, port: int, **options: Any) -> Receiver:
    """A standby's receiver over ``swal``, with an engine and a standby role of its own, that
    streams from 127.0.0.1:``port`` once run (``options``: the receiver's, e.g. ``secret``); a
    resync fails the test."""
    engine = Engine()
    role = Role(None, standby=True)
    role.attach(engine)

    async def resync(why: str, since: int | None) -> None:
        raise AssertionError(f"no resync expected: {why}")

    return Receiver(parse_address(f"127.0.0.1:{port}"), swal, engine, role, applied=lambda: None,
                    on_resync=lambda why: None, resync=resync, **options)  # fmt: skip


async def until(cond: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """(tests/support.py's wait_until, on the loop: the standby and the primary run on it)"""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


P = TypeVar("P", bound=ScriptedPrimary)


def run_against(tmp_path: Path, primary: P, script: Callable[[P, Receiver, Wal], object], *,
                problem_ok: bool = False) -> Receiver:  # fmt: skip
    """``script(primary, receiver, wal)`` (a coroutine function) with a standby streaming from
    ``primary`` on one loop; the standby's log (``wal``) is durable under ``always`` (one fsync
    per read or fewer, each a durable end). The standby ends with no problem unless
    ``problem_ok``; it is stopped after the script either way."""
    with Wal.open(tmp_path / "s", durability="always") as swal:
        async def main() -> Receiver:
            loop = asyncio.get_running_loop()
            server = await loop.create_server(lambda: primary, "127.0.0.1", 0)
            rc = standby(swal, server.sockets[0].getsockname()[1])
            task = asyncio.create_task(rc.run())
            try:
                await until(lambda: rc.connected, "the standby to stream")
                await script(primary, rc, swal)  # type: ignore[misc]
                if not problem_ok:
                    assert rc.problem is None
                return rc
            finally:
                rc.stop()
                task.cancel()
                server.close()

        return asyncio.run(main())
