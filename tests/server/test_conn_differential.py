"""Differential test: the connection with the compiled core (server/_conn.c, picked by
server/fastconn.py) against the reference (server/connection.py, server/readbuf.py).

The same seeded scripts run against two servers that differ only in the connection class:
clients send pipelines of valid and malformed commands (split at random points by the fake
socket), read their replies late or not at all (a small ``--max-output`` puts the output limit,
pause/resume writing and reading to work), block in reserve, quit and half-close; some over a
TLS transport (replies joined into one buffer), some under an ACL that refuses deletes, some
with an observer or an engine that fails (Server.execute's other paths, the compiled core
having its own twin of the common one). Every
transport call (each write with its buffers, pause/resume reading, close), every reply byte and
the engine's state at the end must be the same. The socket is the boundary: a fake transport
stands in for it, with asyncio's flow-control rules (high-water mark, a quarter of it as the
low one) and its delivery rules (nothing delivered while reading is paused, the half-close
after the last byte).
"""

from __future__ import annotations

import asyncio
import errno
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from stalkd.engine import Engine, Outcome
from stalkd.engine.stats import stats
from stalkd.log.fs import Faults
from stalkd.persist.wal import Wal
from stalkd.protocol.commands import Command, Delete, PeekBuried, Put
from stalkd.server import fastconn
from stalkd.server.admission import Admission
from stalkd.server.app import Server
from stalkd.server.config import Config
from stalkd.server.connection import Connection
from stalkd.server.readbuf import BufferedConnection
from stalkd.server.storage import MemoryStorage, Storage
from stalkd.server.syncpolicy import SyncPolicy

pytestmark = pytest.mark.skipif(fastconn.IMPLEMENTATION != "c",
                                reason="the compiled connection is not built (or STALKD_NO_EXTENSIONS=1)")

T0 = 1_700_000_000.0
MAX_JOB = 3000
SEEDS = 40
Factory = Callable[[Server, int, int, int], Connection]


def _reference(server: Server, conn_id: int, max_job_size: int, max_output: int) -> Connection:
    small = BufferedConnection if max_output < 2**20 else Connection
    return small(server, conn_id, max_job_size, max_output)


class NoCertificate:
    """A TLS transport's ssl_object, for a client that showed no certificate."""

    def getpeercert(self) -> None:
        return None


class FakeTransport:
    """A socket's transport as asyncio's behaves, recording every call the connection makes."""

    def __init__(self, proto: Connection, chunk_rng: random.Random, tls: bool,
                 disk: Callable[[], object] = lambda: None) -> None:
        self.proto = proto
        self.disk = disk  # the WAL writes and fsyncs so far, noted with every write
        self.ssl_object = NoCertificate() if tls else None
        self.rng = chunk_rng
        self.log: list[tuple[Any, ...]] = []
        self.inbound = bytearray()  # sent by the client, not yet delivered
        self.outbound = bytearray()  # written by the server, not yet read by the client
        self.received = bytearray()  # what the client has read
        self.high = 64 * 1024
        self.closed = self.lost = self.reading_paused = self.write_paused = False
        self.eof_pending = self.eof_sent = False

    # --- what the connection calls ---
    def write(self, data: bytes) -> None:
        self.log.append(("write", bytes(data), self.disk()))
        self._buffer(data)

    def writelines(self, parts: list[bytes]) -> None:
        self.log.append(("writelines", tuple(bytes(p) for p in parts), self.disk()))
        self._buffer(b"".join(parts))

    def _buffer(self, data: bytes) -> None:
        if self.closed and self.lost:
            return
        self.outbound += data
        if not self.write_paused and len(self.outbound) > self.high:
            self.write_paused = True
            self.proto.pause_writing()

    def get_write_buffer_size(self) -> int:
        return len(self.outbound)

    def set_write_buffer_limits(self, high: int) -> None:
        self.high = high

    def get_extra_info(self, key: str) -> object:
        return {"peername": ("127.0.0.1", 1), "ssl_object": self.ssl_object}.get(key)

    def pause_reading(self) -> None:
        self.log.append(("pause_reading",))
        self.reading_paused = True

    def resume_reading(self) -> None:
        self.log.append(("resume_reading",))
        self.reading_paused = False

    def close(self) -> None:
        self.log.append(("close",))
        self.closed = True

    def abort(self) -> None:
        self.log.append(("abort",))
        self.closed = True
        self.outbound.clear()

    def is_closing(self) -> bool:
        return self.closed

    # --- what the client and the loop do ---
    def client_reads(self, n: int) -> None:
        got = bytes(self.outbound[:n])
        del self.outbound[:n]
        self.received += got
        if self.write_paused and len(self.outbound) <= self.high // 4 and not self.lost:
            self.write_paused = False
            self.proto.resume_writing()

    def pump(self) -> None:
        """Deliver what the client sent while reading is on, in random pieces; then the
        half-close, once everything before it is delivered; then the end, once closed and read."""
        proto = self.proto
        while self.inbound and not self.reading_paused and not self.lost and not self.closed:
            n = min(len(self.inbound), self.rng.randint(1, 700))
            if isinstance(proto, BufferedConnection):
                buf = proto.get_buffer(-1)
                n = min(n, len(buf))
                buf[:n] = self.inbound[:n]
                del self.inbound[:n]
                proto.buffer_updated(n)
            else:
                data = bytes(self.inbound[:n])
                del self.inbound[:n]
                proto.data_received(data)
        if (self.eof_pending and not self.eof_sent and not self.inbound and not self.reading_paused
                and not self.lost and not self.closed):
            self.eof_sent = True
            self.log.append(("eof",))
            proto.eof_received()
        if self.closed and not self.outbound and not self.lost:
            self.lost = True
            self.log.append(("lost",))
            proto.connection_lost(None)


class NoDeletes:
    """An ACL's decision (server/acl.py) as a connection sees it: here, no delete runs."""

    def admits(self, cmd: object) -> bool:
        return type(cmd) is not Delete

    def may_replicate(self) -> bool:
        return False

    def shows(self, tube: str) -> bool:
        return True


def _command(rng: random.Random) -> bytes:
    jid = rng.randint(1, 15)
    t = rng.choice([0, 0, 1000])
    k = rng.randrange(30)
    if k < 8:
        size = rng.choice([0, 3, 100, 2000, MAX_JOB, MAX_JOB + 5])
        tail = rng.choice([b"\r\n"] * 8 + [b"XY"])
        return b"put %d %d %d %d\r\n%s%s" % (rng.choice([0, 5, 1024]), t, rng.choice([0, 60]), size,
                                             bytes([97 + rng.randrange(26)]) * size, tail)
    if k < 11:
        return rng.choice([b"reserve-with-timeout 0\r\n", b"reserve-with-timeout 1000\r\n", b"reserve\r\n"])
    if k < 13:
        return b"peek %d\r\n" % jid  # job bodies: the output fills up
    if k == 13:
        return rng.choice([b"y" * rng.randrange(200, 600) + b"\r\n", b"use a\x00b\r\n", b"frob\r\n",
                           b"put 0 0 10 3 x\r\nabc\r\n", b"kick -1\r\n", b"\r\n",
                           b"put 0 0 10 %d\r\n" % (MAX_JOB + 50) + b"w" * rng.randrange(0, 300)])
    if k == 14:
        return b"quit\r\n" if rng.random() < 0.2 else b"list-tubes\r\n"
    tube = rng.choice([b"default", b"a", b"b"])
    return rng.choice([
        b"delete %d\r\n" % jid, b"release %d 1 %d\r\n" % (jid, t), b"bury %d 2\r\n" % jid,
        b"touch %d\r\n" % jid, b"kick %d\r\n" % rng.randint(0, 4), b"kick-job %d\r\n" % jid,
        b"peek-ready\r\n", b"peek-buried\r\n", b"use " + tube + b"\r\n", b"watch " + tube + b"\r\n",
        b"ignore " + tube + b"\r\n", b"stats-tube " + tube + b"\r\n", b"list-tube-used\r\n",
        b"list-tubes-watched\r\n", b"stats-job %d\r\n" % jid, b"reserve-job %d\r\n" % jid,
    ])  # fmt: skip


def _script(rng: random.Random, conns: int) -> list[tuple[Any, ...]]:
    """Client actions: send a pipeline (one client, or every client in the same loop iteration:
    their records share a batch; or one client alone, step after step, until its batches are
    written inline), read some or all replies, half-close, let the loop run."""
    acts: list[tuple[Any, ...]] = []
    for _ in range(rng.randint(20, 60)):
        k = rng.randrange(conns)
        r = rng.random()
        if r < 0.45:
            acts.append(("send", k, b"".join(_command(rng) for _ in range(rng.choice([1, 1, 3, 20, 80])))))
        elif r < 0.55:
            # Sometimes the first puts and the others reserve: a job put in the batch not yet
            # written is shown only once the batch is durable.
            handoff = rng.random() < 0.5
            for j in range(conns):
                head = (b"put 1 0 60 2\r\nhi\r\n" if j == 0 else b"reserve-with-timeout 0\r\n") if handoff else b""
                acts.append(("queue", j, head + b"".join(_command(rng) for _ in range(rng.choice([1, 2, 5])))))
            acts.append(("run",))
        elif r < 0.57:
            # Job bodies held behind their batch past the output limit: the client stops being
            # read until the batch is durable, then runs the rest (the barriers resume it).
            big = b"put 0 0 60 %d\r\n%s\r\n" % (MAX_JOB, b"z" * MAX_JOB)
            acts.append(("send", k, big * 8 + b"reserve-with-timeout 0\r\n" * 8 + b"stats-tube default\r\n"))
        elif r < 0.6:
            for _ in range(12):
                acts.append(("send", k, b"put 0 0 60 3\r\nabc\r\n" + rng.choice([b"", b"reserve\r\n"])))
        elif r < 0.85:
            acts.append(("read", k, rng.choice([100, 5000, 1 << 30])))
        elif r < 0.9:
            acts.append(("eof", k))
        else:
            acts.append(("run",))
    return acts


def _engine_state(engine: Engine) -> tuple[object, ...]:
    jobs = sorted((j.id, j.tube.name, j.pri, j.delay, j.ttr, j.body, j.state.name, j.reserves, j.timeouts,
                   j.releases, j.buries, j.kicks, getattr(j.owner, "id", j.owner))
                  for j in engine.iter_jobs())  # fmt: skip
    return tuple(jobs), stats(engine).values


async def _settle(turns: list[int]) -> None:
    for _ in range(3):  # wakes and timers due now run on the loop's next iterations
        turns[0] += 1
        await asyncio.sleep(0)


class InlineSyncs(SyncPolicy):
    """``always``'s fsyncs on the loop thread, each at once: the sync thread would finish them
    at moments of its own, and both runs must see the same replies leave at the same step."""

    def inline(self) -> bool:
        return True


def _run(factory: Factory, script: list[tuple[Any, ...]], conns: int, max_output: int, seed: int,
         storage: Callable[[], tuple[Engine, Storage, str | None]], tls: bool = False,
         policy: bool = False, observe: bool = False, durability: str = "never",
         faults: Faults | None = None, fail_at: int = -1) -> tuple[object, ...]:  # fmt: skip
    async def main() -> tuple[object, ...]:
        engine, store, data_dir = storage()
        cfg = Config(max_output=max_output, max_job_size=MAX_JOB, data_dir=data_dir, durability=durability)
        # The reference's barriers with the reference connection, the compiled with the compiled.
        srv = Server(cfg, engine, store, clock=lambda: T0, reference=factory is not fastconn.new_connection)
        srv.barriers.sync_policy = InlineSyncs()
        srv.loop()
        seen: list[tuple[str, str]] = []  # what an observer (the admin endpoint's) is shown
        if observe:
            srv.observer = lambda cmd, out: seen.append((repr(cmd), repr(out.reply)))
        ts: list[FakeTransport] = []
        disk = faults if faults is not None else getattr(getattr(store, "log", None), "fs", None)

        turns = [0]  # loop iterations the test let run

        def disk_calls() -> object:
            # When a reply left: the loop iteration, and how many WAL writes and fsyncs came
            # before it (one that leaves before its records are written, or fsynced, or a step
            # later than the reference's, shows here). Not the order across connections: the
            # barriers release held replies in a set's order.
            calls = disk.calls if isinstance(disk, Faults) else {}
            return turns[0], calls.get("pwrite"), calls.get("fdatasync")

        for k in range(conns):
            c = factory(srv, srv.conns.next_id(), MAX_JOB, max_output)
            t = FakeTransport(c, random.Random(seed * 100 + k), tls and k == 0, disk_calls)
            if policy and k == conns - 1:
                c.admit = lambda _c: NoDeletes()
            c.connection_made(t)  # type: ignore[arg-type]
            ts.append(t)

        def pump() -> None:
            for t in ts:
                t.pump()

        for i, act in enumerate(script):
            if i == fail_at and faults is not None:
                faults.fail("pwrite", errno.EIO, match="wal")  # the next WAL write fails
            if act[0] == "queue":
                ts[act[1]].inbound += act[2]
                continue  # delivered with the next action's, in the same loop iteration
            if act[0] == "send":
                ts[act[1]].inbound += act[2]
            elif act[0] == "read":
                ts[act[1]].client_reads(act[2])
            elif act[0] == "eof":
                ts[act[1]].eof_pending = True
            pump()
            await _settle(turns)
            pump()
            seen.append(("timer", repr(srv._timer_at)))  # the engine's next deadline, scheduled
        for _ in range(50):  # the clients read everything and hang up
            for t in ts:
                t.client_reads(1 << 30)
                t.eof_pending = True
            pump()
            await _settle(turns)
        srv.begin_stop()
        if store.persistent:
            assert await srv.wait_durable(10.0) == (srv.failed is None)
        srv.finish_stop()
        for t in ts:
            t.client_reads(1 << 30)
        state = _engine_state(engine)
        b = srv.barriers  # what the barriers still keep: pruned job barriers, no released connection
        seen.append(("batches", repr((srv.written, srv.durable, srv.syncs, srv.inline_syncs,
                                      b.sync_policy._inline_run, type(srv.failed).__name__,
                                      len(b._job_batch), len(b._job_batches), len(b._held)))))
        if isinstance(store, Wal):
            space = store.space
            seen.append(("wal", repr((store.records_written, store.last_seq,
                                      space and (space.promised, space.refused)))))
            store.close()
        return tuple((t.log, bytes(t.received)) for t in ts) + (seen, state)

    return asyncio.run(main())


def _memory() -> tuple[Engine, Storage, str | None]:
    return Engine(max_job_size=MAX_JOB, records=False), MemoryStorage(), None


class FaultyEngine(Engine):
    """An engine with a bug: ``peek-buried`` raises (the server answers INTERNAL_ERROR)."""

    def apply(self, conn_id: int, cmd: Command, now: float) -> Outcome:
        if type(cmd) is PeekBuried:
            raise RuntimeError("a bug in the engine")
        return super().apply(conn_id, cmd, now)


def _faulty() -> tuple[Engine, Storage, str | None]:
    return FaultyEngine(max_job_size=MAX_JOB, records=False), MemoryStorage(), None


def _compare(seed: int, storage_of: Callable[[str], Callable[[], tuple[Engine, Storage, str | None]]],
             durability: str = "never", faults: Callable[[str], Faults | None] = lambda name: None,
             fail_at: int = -1) -> None:  # fmt: skip
    rng = random.Random(seed)
    conns = rng.choice([1, 2, 3])
    max_output = rng.choice([16 * 1024, 40 * 1024, 4 * 2**20])
    script = _script(rng, conns)
    tls, policy = rng.random() < 0.3, rng.random() < 0.3  # joined writes; an ACL
    observe = rng.random() < 0.2  # then Server.execute runs in Python for both
    ref = _run(_reference, script, conns, max_output, seed, storage_of("ref"), tls, policy, observe,
               durability, faults("ref"), fail_at)  # fmt: skip
    fast = _run(fastconn.new_connection, script, conns, max_output, seed, storage_of("c"), tls, policy,
                observe, durability, faults("c"), fail_at)  # fmt: skip
    for k in range(conns):
        (rlog, rbytes), (flog, fbytes) = ref[k], fast[k]
        assert fbytes == rbytes, f"seed {seed}: conn {k} got other reply bytes"
        assert flog == rlog, f"seed {seed}: conn {k}: other transport calls"
    assert fast[-2] == ref[-2], f"seed {seed}: other timers, batches or WAL, or the observer saw other steps"
    assert fast[-1] == ref[-1], f"seed {seed}: other engine state"


@pytest.mark.parametrize("seed", range(SEEDS))
def test_the_compiled_connection_behaves_as_the_reference_in_memory(seed: int) -> None:
    _compare(seed, lambda name: _memory)


@pytest.mark.parametrize("seed", range(SEEDS, SEEDS + 6))
def test_the_compiled_connection_behaves_as_the_reference_when_the_engine_fails(seed: int) -> None:
    _compare(seed, lambda name: _faulty)


def _wal_at(tmp_path: Path, fs: dict[str, Faults] | None = None,
            durability: str = "never") -> Callable[[str], Callable[[], tuple[Engine, Storage, str | None]]]:
    def storage_of(name: str) -> Callable[[], tuple[Engine, Storage, str | None]]:
        def open_wal() -> tuple[Engine, Storage, str | None]:
            d = str(tmp_path / name)
            # Small segments: each preallocates its size on disk, and the scripts write little.
            wal = Wal.open(d, durability=durability, segment_size=1 << 16,
                           fs=fs[name] if fs is not None else Faults())
            engine, _ = wal.recover(T0, max_job_size=MAX_JOB)
            return engine, wal, d
        return open_wal

    return storage_of


@pytest.mark.parametrize("durability", ["never", "always"])
@pytest.mark.parametrize("seed", range(SEEDS + 6, SEEDS + 20))
def test_the_compiled_connection_behaves_as_the_reference_with_a_wal(seed: int, durability: str,
                                                                       tmp_path: Path) -> None:
    # Replies wait for their records here: held replies, barriers, the step hooks, the lone
    # writer's inline write (and fsync), batches shared by several connections.
    _compare(seed, _wal_at(tmp_path, durability=durability), durability)


@pytest.mark.parametrize("seed", [s for s in range(SEEDS + 20, SEEDS + 29) if s != SEEDS + 27])
def test_the_compiled_connection_behaves_as_the_reference_when_the_wal_write_fails(seed: int,
                                                                                 tmp_path: Path) -> None:
    # A WAL write fails part way through the script: nothing held is sent, connections are cut.
    fs = {"ref": Faults(), "c": Faults()}
    durability = "always" if seed % 2 else "never"
    _compare(seed, _wal_at(tmp_path, fs, durability), durability, fs.get, fail_at=seed % 4 + 1)
    assert fs["ref"].failures.get("pwrite") and fs["c"].failures.get("pwrite")


def test_the_scripts_reach_the_paths_that_matter() -> None:
    # Without this the comparison could pass on scripts that never fill an output buffer.
    seen: set[str] = set()
    for seed in range(SEEDS):
        rng = random.Random(seed)
        conns = rng.choice([1, 2, 3])
        max_output = rng.choice([16 * 1024, 40 * 1024, 4 * 2**20])
        script = _script(rng, conns)
        tls, policy = rng.random() < 0.3, rng.random() < 0.3
        for conn_log, _ in _run(_reference, script, conns, max_output, seed, _memory, tls, policy)[:conns]:  # type: ignore[misc]
            seen.update(e[0] for e in conn_log)
    assert {"write", "writelines", "pause_reading", "resume_reading", "close", "eof"} <= seen
    ref = _run(_reference, _script(random.Random(SEEDS), 2), 2, 4 * 2**20, SEEDS, _faulty)
    assert b"INTERNAL_ERROR" in ref[0][1] + ref[1][1]  # type: ignore[index,operator]


def _fill(tmp_path: Path, admission: type[Admission]) -> list[tuple[object, ...]]:
    """Puts of growing bodies into a small WAL on a disk with no room for another segment,
    settled as the server does, until one is refused: what was promised at each step."""
    fs = Faults()
    fs.fail("allocate", errno.ENOSPC, match="spare")
    wal = Wal.open(str(tmp_path), durability="never", segment_size=8192, fs=fs)
    engine, _ = wal.recover(T0, max_job_size=MAX_JOB)
    room = engine.room = admission(wal, str(tmp_path))
    engine.connect(1, T0)
    steps: list[tuple[object, ...]] = []
    for n in range(0, 4000, 37):
        out = engine.apply(1, Put(0, 0, 60, b"q" * n), T0)
        promised = room.promised
        room.settle(out.records)
        wal.write(out.records)
        steps.append((n, repr(out.reply), promised, room.promised, room.refused, wal.space and wal.space.promised))
        if room.refused:
            break
    wal.close()
    return steps


def test_the_compiled_admission_promises_as_the_reference(tmp_path: Path) -> None:
    ref = _fill(tmp_path / "ref", Admission)
    assert ref[-1][4] == 1  # the disk filled up: a put was refused
    assert _fill(tmp_path / "c", fastconn.ADMISSION) == ref
