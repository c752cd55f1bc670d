"""With --sync-standbys, the barriers ask the standbys' streams for what they sent after each
batch they write (``Replicas.poll_acks``): an acknowledgement already in the socket moves the
gate and releases the replies at once, not after the loop's next round of client commands. The
real Replicas and Sender over a real socket pair; the standby's side is the test's own socket,
so nothing but the poll can have read what it sends (the loop does not turn in between)."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

from stalkd.engine import Engine
from stalkd.log import Log
from stalkd.replication import wire
from stalkd.replication.role import Role
from stalkd.replication.sender import Replicas, Sender
from stalkd.replication.wire import plain_fd

from .streams import put_payload, until


def read_line(sock: socket.socket) -> bytes:
    buf = b""
    while not buf.endswith(b"\r\n"):
        chunk = sock.recv(4096)
        assert chunk, "the primary closed the stream"
        buf += chunk
    return buf


def test_an_acknowledgement_in_the_socket_releases_the_batch_at_the_poll(tmp_path: Path) -> None:
    plog = Log.open(tmp_path / "p")
    role = Role(None)
    role.attach(Engine())
    released: list[int] = []  # the gate's batch each time replies were released
    replicas = Replicas(plog, str(tmp_path / "p-snapshots"), role, 1, lambda: released.append(replicated()))
    gate = replicas.gate
    assert gate is not None

    def replicated() -> int:
        assert gate is not None
        return gate.replicated

    async def main() -> None:
        ours, theirs = socket.socketpair()
        theirs.settimeout(10)
        try:
            transport, _ = await asyncio.get_running_loop().connect_accepted_socket(
                asyncio.Protocol, ours
            )
            # Given a standby streaming from the start (its ACL grant: no secret), and a batch
            # written, noted by the gate and sent to it
            replicas.take_over(transport, wire.encode_request(0, 0, [], "s1"), granted=True)
            assert read_line(theirs).startswith(b"STREAMING")
            (sender,) = replicas.senders
            plog.write_many([put_payload(j) for j in range(1, 6)])
            end = plog.next_offset
            gate.note(1, end)
            replicas.written()
            assert theirs.recv(1 << 16)  # the batch's message
            replicas.poll_acks()  # (nothing sent back yet: nothing changes)
            assert (sender.acked, gate.replicated, released) == (0, 0, [])
            # When its acknowledgement arrives, and the barriers poll before the loop turns
            theirs.sendall(wire.encode_ack(end))
            replicas.poll_acks()
            # Then the batch is replicated and its replies released, already
            assert sender.acked == end
            assert gate.replicated == 1 and released == [1]
            # And a second poll, with nothing new, changes nothing; nor does one after the end
            replicas.poll_acks()
            assert released == [1]
            transport.close()
            await until(lambda: not replicas.senders, "the stream to end")
            assert sender._fd == -1 and not replicas.senders
            gate.note(2, end + 1)
            replicas.poll_acks()
            sender.poll()
            assert released == [1]
        finally:
            replicas.close()
            theirs.close()

    asyncio.run(main())
    plog.close()


def test_an_acknowledgement_is_not_read_ahead_of_a_tls_transport() -> None:
    """TLS bytes only the transport can decrypt: such a stream is left to it."""

    class Extra:
        def __init__(self, **info: object) -> None:
            self.info = info

        def get_extra_info(self, name: str) -> object:
            return self.info.get(name)

    a, b = socket.socketpair()
    try:
        assert plain_fd(Extra(socket=a)) == a.fileno()
        assert plain_fd(Extra(socket=a, sslcontext=object())) == -1
        assert plain_fd(Extra(socket=a, ssl_object=object())) == -1  # (a TLS layer over the socket)
        assert plain_fd(Extra()) == -1
        assert plain_fd(object()) == -1  # no extra info at all
    finally:
        a.close()
        b.close()


def test_a_sender_not_yet_connected_polls_nothing(tmp_path: Path) -> None:
    plog = Log.open(tmp_path / "p")
    role = Role(None)
    role.attach(Engine())
    replicas = Replicas(plog, str(tmp_path / "s"), role, 1, lambda: None)
    s = Sender(replicas, True, None)
    s.poll()  # (no descriptor: no read)
    assert s._fd == -1 and s.acked == 0
    plog.close()
