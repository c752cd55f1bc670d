"""A standby whose read's fsync runs on the log's committer thread acknowledges it from that
thread, right after the fsync, on the stream's socket (the loop may be busy applying records):
never beyond the durable end, never going back (heartbeat answers from the loop included), and
not at all once the receiver is stopped. Where the thread cannot write safely (a TLS stream, a
transport with bytes still buffered) the loop acknowledges, as before."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest

from stalkd.log.fs import FileSystem
from stalkd.persist.wal import Wal
from stalkd.replication import wire
from stalkd.replication.receiver import FsyncPlace, Receiver, _Feed

from .streams import Acks, put_payload, standby, until


class _GatedDisk(FileSystem):
    """A disk whose fdatasyncs wait, while ``held``, for the test to ``release`` them."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.gate.set()

    def hold(self) -> None:
        self.gate.clear()

    def release(self) -> None:
        self.gate.set()

    def fdatasync(self, fd: int) -> None:
        self.gate.wait()
        super().fdatasync(fd)


class _Primary(asyncio.Protocol):
    """Answers a stream request with ``STREAMING 0 0 -`` (its replies wait for this standby: no
    delay), then sends what the test writes; keeps every acknowledgement, and what the
    standby's log had made durable when it was read."""

    def __init__(self, wal: Wal) -> None:
        self.wal = wal
        self.request = b""
        self.transport: asyncio.Transport | None = None
        self.acks: list[int] = []
        self.durable_at: list[int] = []
        self.lost = False
        self._buf = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        if not self.request:
            self.request = data
            self.transport.write(b"STREAMING 0 0 -\r\n")
            return
        buf = self._buf + data
        whole = len(buf) - len(buf) % 8
        self._buf = buf[whole:]
        for at in range(0, whole, 8):
            self.acks.append(int.from_bytes(buf[at:at + 8], "little"))
            self.durable_at.append(self.wal.log.durable_offset)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True

    def send(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)


def _message(first: int, n: int = 1) -> bytes:
    return b"".join(wire.encode_records(first, [put_payload(first + 1 + k) for k in range(n)]))


def _run(tmp_path: Path, disk: FileSystem, script: Callable[[_Primary, Receiver], Any]) -> Receiver:
    """``script(primary, receiver)`` with a standby streaming over TCP whose every read's fsync
    goes to the committer thread (``FsyncPlace.big`` 1)."""
    with Wal.open(tmp_path / "s", durability="always", fs=disk) as swal:
        primary = _Primary(swal)

        async def main() -> Receiver:
            loop = asyncio.get_running_loop()
            server = await loop.create_server(lambda: primary, "127.0.0.1", 0)
            rc = standby(swal, server.sockets[0].getsockname()[1])
            rc.fsync_place = FsyncPlace(big=1)
            task = asyncio.create_task(rc.run())
            try:
                await until(lambda: rc.connected, "the standby to stream")
                await script(primary, rc)
                return rc
            finally:
                rc.stop()
                with contextlib.suppress(asyncio.CancelledError):
                    task.cancel()
                    await task
                server.close()

        return asyncio.run(main())


def test_the_committer_thread_acknowledges_once_durable_and_never_beyond(tmp_path: Path) -> None:
    disk = _GatedDisk()

    async def script(primary: _Primary, rc: Receiver) -> None:
        # Given a read whose fsync waits
        disk.hold()
        primary.send(_message(0, 3))
        # When its records are appended and applied (the loop is done with the read)
        await until(lambda: sorted(rc.engine.jobs) == [1, 2, 3], "the read applied")
        # Then nothing is acknowledged while its fsync has not returned
        assert primary.acks == [] and rc.wal.log.durable_offset == 0
        # and once it has, the committer thread acknowledges it (not the loop)
        disk.release()
        await until(lambda: primary.acks == [3], "the acknowledgement")
        assert rc.thread_acks == 1
        await until(lambda: rc.durable_end == 3, "the loop's bookkeeping")

    _run(tmp_path, disk, script)


def test_acknowledgements_never_go_back_with_heartbeats_answered_between(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wire, "HEARTBEAT", 3600.0)  # (the test sends the heartbeats)
    n = 40

    async def script(primary: _Primary, rc: Receiver) -> None:
        for i in range(n):
            primary.send(_message(i))
            primary.send(wire.encode_heartbeat(i + 1))  # answered by the loop, maybe before the thread's
        await until(lambda: primary.acks[-1:] == [n] and rc.durable_end == n, "the last acknowledgement")
        before = len(primary.acks)
        primary.send(wire.encode_heartbeat(n))
        await until(lambda: len(primary.acks) > before, "the last heartbeat's answer")
        assert primary.acks[-1] == n
        assert primary.acks == sorted(primary.acks)  # never back
        assert all(a <= d for a, d in zip(primary.acks, primary.durable_at, strict=True))
        assert rc.thread_acks > 0

    _run(tmp_path, FileSystem(), script)


def test_a_receiver_stopped_while_the_thread_fsyncs_sends_nothing_after(tmp_path: Path) -> None:
    disk = _GatedDisk()

    async def script(primary: _Primary, rc: Receiver) -> None:
        disk.hold()
        primary.send(_message(0, 2))
        await until(lambda: sorted(rc.engine.jobs) == [1, 2], "the read applied")
        # When the standby is promoted while the fsync of the read runs
        rc.stop()
        disk.release()
        await until(lambda: not rc.syncing, "the fsync done")
        await until(lambda: primary.lost, "the stream closed")
        # Then it was never acknowledged on the stream
        assert primary.acks == []
        assert rc.thread_acks == 0

    _run(tmp_path, disk, script)


class _SocketAcks(Acks):
    """``Acks`` over a transport with a socket (one end of a pair, ``peer`` the other): the
    committer thread could write there, unless the transport is TLS or has bytes buffered."""

    def __init__(self, wal: Wal, tls: bool, buffered: int) -> None:
        super().__init__(wal)
        self.sock, self.peer = socket.socketpair()
        self.sock.setblocking(False)
        self.tls = tls
        self.buffered = buffered

    def get_extra_info(self, name: str, default: object = None) -> object:
        if name == "socket":
            return self.sock
        if name == "sslcontext":
            return object() if self.tls else None
        return default

    def get_write_buffer_size(self) -> int:
        return self.buffered


@pytest.mark.parametrize(("tls", "buffered"), [(True, 0), (False, 1)], ids=["tls", "buffered"])
def test_a_tls_or_buffered_transport_is_acknowledged_by_the_loop(tmp_path: Path, tls: bool, buffered: int) -> None:
    with Wal.open(tmp_path, durability="always") as wal:
        rc = standby(wal, 1)  # (never connects: its reads are fed to it below)
        rc.fsync_place = FsyncPlace(big=1)
        acks = _SocketAcks(wal, tls, buffered)

        async def main() -> None:
            feed = _Feed(cast(asyncio.BaseTransport, None), 1 << 20, b"")
            stream = asyncio.ensure_future(
                rc._stream(feed, cast(asyncio.StreamWriter, acks), wire.RecordDecoder(), [0.0]))
            for i in range(3):
                feed.data_received(_message(i))
                await until(lambda i=i: rc.durable_end == i + 1, f"read {i} acknowledged")  # type: ignore[misc]
            rc.stop()
            feed.connection_lost(None)
            with contextlib.suppress(EOFError):
                await stream

        try:
            asyncio.run(main())
            assert acks.sent == [1, 2, 3]  # through the transport, each once durable
            assert all(end <= durable for end, durable in zip(acks.sent, acks.durable_at, strict=True))
            assert rc.thread_acks == 0
            acks.peer.setblocking(False)
            with pytest.raises(BlockingIOError):  # nothing written to the socket behind its back
                acks.peer.recv(64)
        finally:
            acks.sock.close()
            acks.peer.close()
