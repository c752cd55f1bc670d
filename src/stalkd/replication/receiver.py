"""The standby's side of replication: follow the primary's log, durably, and apply it.

``Receiver.run`` keeps one stream open to the primary (reconnecting with a backoff): each read
of records is appended to the local log at the primary's offsets (``Wal.append_replicated``),
applied to the engine (``replay``, the recovery rules: a reserved job shows as ready here), made
durable (under ``always``: a group commit, one fsync at a time on a thread while the stream is
still read and applied), and then acknowledged with the new durable end, which is what the
primary's ``--sync-standbys`` waits for.

Ensures:
- An acknowledged offset is durable here (fsynced under ``always``; written under the other
  policies, which is what they promise locally too).
- Records are appended in the primary's offset order with no gap; anything else ends the
  stream (and a reconnection resumes from the local log's end).
- A standby that needs a snapshot or must cut its log (``SNAPSHOT_NEEDED``/``DIVERGED``), or
  whose copy a record contradicts, does not guess: ``resync`` replaces its copy with the
  primary's (``standby.py``), and the stream resumes from the new log's end; a resync that
  could not copy is tried again after the backoff, the old copy still serving reads.
- ``stop()`` (promotion) ends the stream; records already received are applied first.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from stalkd.client._address import Address
from stalkd.client._tls import connection_kwargs
from stalkd.engine.compaction import WalError
from stalkd.engine.handover import Reservations
from stalkd.engine.model import decode
from stalkd.engine.replay import ReplayError, replay
from stalkd.log.errors import LogFullError
from stalkd.replication import wire
from stalkd.replication.catchup import CatchUpError
from stalkd.replication.role import Role

if TYPE_CHECKING:
    from stalkd.engine import Engine
    from stalkd.engine.wal import Wal

__all__ = ["Receiver", "ResyncNeeded"]

log = logging.getLogger("stalkd.replication")

READ_BYTES = 1 << 20
RETRY_MIN, RETRY_MAX = 0.05, 2.0


class ResyncNeeded(RuntimeError):
    """The primary cannot stream to this log as it is: a copy of its state is needed.
    ``since``: the offset past which this log was never the primary's (None: it is only behind)."""

    def __init__(self, why: str, since: int | None = None) -> None:
        super().__init__(why)
        self.since = since


class Receiver:
    def __init__(self, address: Address, wal: Wal, engine: Engine, role: Role, *, applied: Callable[[], None],
                 on_resync: Callable[[str], None],
                 resync: Callable[[str, int | None], Awaitable[None]]) -> None:  # fmt: skip
        self.address = address
        self.wal = wal
        self.engine = engine
        self.role = role
        self.applied = applied
        self.on_resync = on_resync  # fatal: the local copy can no longer be trusted
        self.resync = resync
        self.fsync = wal.durability == "always"
        self.primary_end = 0  # the primary's log end, as last known
        self.connected = False
        self.records = 0  # received since start
        self.reservations = Reservations()  # held on the primary: kept held at promotion
        self._stopped = False
        self._writer: asyncio.StreamWriter | None = None
        self._syncing = False  # a group-commit fsync is running (see _sync)

    @property
    def lag(self) -> int:
        """Records the primary had written that this standby has not (as last known)."""
        return max(0, self.primary_end - self.wal.log.next_offset)

    def stop(self) -> None:
        self._stopped = True
        if self._writer is not None:
            self._writer.close()

    @property
    def syncing(self) -> bool:
        """A group-commit fsync of the local log is running on a thread."""
        return self._syncing

    async def run(self) -> None:
        delay = RETRY_MIN
        while not self._stopped:
            try:
                try:
                    await self._session()
                finally:
                    self.connected = False
                    if self._writer is not None:
                        self._writer.close()
                        self._writer = None
                delay = RETRY_MIN
            except (ResyncNeeded, ReplayError) as e:
                # ReplayError: a record contradicts this copy; carrying on would serve a lie.
                if self._stopped:
                    return
                try:
                    await self.resync(str(e), e.since if isinstance(e, ResyncNeeded) else None)
                    self.reservations = Reservations()  # the new copy's records say the rest
                    delay = RETRY_MIN
                    continue
                except (OSError, ValueError, CatchUpError) as err:  # the old copy is intact
                    if not self._stopped:
                        log.warning("replication from %s: resync failed: %s; retrying in %.2f s",
                                    self.address, err, delay)  # fmt: skip
            except (OSError, EOFError, ValueError, WalError, LogFullError, asyncio.IncompleteReadError) as e:
                # (a reconnection resumes from the local log's end, whatever was cut short)
                if not self._stopped:
                    log.warning("replication from %s: %s; retrying in %.2f s", self.address, e, delay)
            if self._stopped:
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_MAX)

    async def _open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        a = self.address
        if a.path is not None:
            return await asyncio.open_unix_connection(a.path, limit=wire.MAX_LINE * 4)
        return await asyncio.open_connection(a.host, a.port, **connection_kwargs(a))

    async def _session(self) -> None:
        reader, writer = await self._open()
        self._writer = writer
        lg = self.wal.log
        writer.write(wire.encode_request(lg.next_offset, self.role.state.epoch))
        r = wire.parse_reply(await reader.readuntil(b"\r\n"))
        if r.word in ("SNAPSHOT_NEEDED", "DIVERGED"):
            raise ResyncNeeded(f"the primary {self.address} answered {r.word} {' '.join(r.args)}".rstrip(),
                               int(r.args[0]) if r.word == "DIVERGED" else None)
        if r.word != "STREAMING":
            raise EOFError(f"the primary answered {r.word}")
        epoch = int(r.args[0])  # the EPOCH records themselves come with the stream
        self.primary_end = int(r.args[1])
        self.connected = True
        log.info("streaming from %s (epoch %d) at offset %d, %d records behind",
                 self.address, epoch, lg.next_offset, self.lag)  # fmt: skip
        dec = wire.RecordDecoder()
        self._syncing = False
        while not self._stopped:
            data = await reader.read(READ_BYTES)
            if not data:
                raise EOFError("the primary closed the stream")
            msgs = dec.feed(data)
            if not msgs:
                continue
            for i, (first, payloads) in enumerate(msgs):
                try:
                    self.wal.append_replicated(first, payloads)
                except LogFullError:
                    # a full disk: what was written is applied, the rest comes again after a
                    # reconnection (from the log's end), once there is room
                    self._apply(msgs[:i])
                    raise
            if not self.fsync:
                writer.write(wire.encode_ack(lg.next_offset))
            elif not self._syncing:
                self._sync(writer)
            self._apply(msgs)  # while the fsync runs on its thread

    def _sync(self, writer: asyncio.StreamWriter) -> None:
        """Group commit, as on a primary: one fsync at a time on a thread, covering everything
        written when it starts; its end is acknowledged when it returns, and records received
        meanwhile wait for the next one (the stream keeps being read)."""
        lg = self.wal.log
        end = lg.next_offset
        self._syncing = True

        def done(f: asyncio.Future[int]) -> None:
            self._syncing = False
            exc = f.exception()
            if exc is not None:
                self.on_resync(f"the standby's WAL fsync failed: {exc}")
                self.stop()
                return
            if writer.is_closing():
                return
            writer.write(wire.encode_ack(end))
            if lg.next_offset > end:
                self._sync(writer)

        asyncio.get_running_loop().run_in_executor(None, lg.sync).add_done_callback(done)

    def _apply(self, msgs: list[tuple[int, list[bytes]]]) -> None:
        """Apply appended records to the engine, on the loop thread, between client commands."""
        e = self.engine
        wal = self.wal
        for first, payloads in msgs:
            seen = self.reservations.see
            for p in payloads:
                r = decode(p)
                replay(e, r)
                seen(r, e)
            self.records += len(payloads)
            end = first + len(payloads)
            if end > self.primary_end:
                self.primary_end = end
        wal.last_seq = e.seq
        self.applied()
