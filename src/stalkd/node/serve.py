"""Start-up after the socket is bound: logging, recovery, the event loop, signals, shutdown.

Imported by ``stalkd.node.cli`` only once the listener exists, because importing asyncio,
uvloop, the engine and the WAL takes longer than some clients wait before connecting.

Ensures: commands are read only after recovery has finished (connections wait in the
listener's backlog meanwhile); SIGTERM/SIGINT stop accepting, let replies already produced go
out, sync the WAL and exit 0 within about a second; UNIX socket files we created are removed;
SIGHUP reloads the TLS certificates and the ACL; SIGUSR1 turns drain mode on; SIGUSR2 promotes
a standby (``--standby-of``; caught up with its primary before recovery); SIGPIPE is
ignored (a client hanging up is a connection error, not a server death); the cyclic garbage
collector runs under ``GcPolicy`` (no loop stall that grows with the number of queued jobs);
memory freed after a flood goes back to the operating system (``memtrim``: a fixed mmap
threshold from the first trim tick on, and a trim about every second once enough of the heap
is free).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import ssl
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

from stalkd.engine import Engine
from stalkd.engine.results import ResultLimits
from stalkd.server.app import Server
from stalkd.server.config import Config
from stalkd.server.gcpolicy import GcPolicy
from stalkd.server.listen import Listener
from stalkd.server.listeners import Endpoints
from stalkd.server.memtrim import Trimmer, tune
from stalkd.server.storage import MemoryStorage, Storage
from stalkd.server.turns import Turns

if TYPE_CHECKING:
    from stalkd.server.acl import Acl

__all__ = ["run", "preload", "setup_logging", "turn_yields", "EXIT_LOCKED", "EXIT_FATAL"]

log = logging.getLogger("stalkd.server")

EXIT_LOCKED = 10  # beanstalkd's status when another server holds the binlog lock
EXIT_FATAL = 1
EXIT_RESYNC = 3  # a standby whose copy was lost (its fsync or a resync failed): restart it (docs/standby.md)
EXIT_REJOIN = 75  # serve again from the start (exec, same listener): never seen outside
EXIT_REJOIN_FAILED = 71  # sysexits' EX_OSERR: the exec of a rejoin failed (logged); restart the server
STOP_GRACE = 0.8  # seconds for in-flight replies and the last sync before exit
TASKS_END_WITHIN = 1.0  # seconds for the loop's other tasks to end once cancelled, at stop
TRIM_EVERY = 1.0  # seconds between two looks at the allocator's free memory (memtrim)


def setup_logging(level: str) -> None:
    """One line per event on stderr: time, pid, level, message (greppable)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(
        "%(asctime)s.%(msecs)03d stalkd[%(process)d] %(levelname)s %(message)s", "%Y-%m-%dT%H:%M:%S"))
    root = logging.getLogger("stalkd")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False


def preload(cfg: Config) -> None:
    """Import now every module the start of serving ``cfg`` imports; with ``-u`` (the user is
    switched after this, and may be unable to read the Python installation) also those that
    serving imports later, on first use."""
    import resource  # noqa: F401  (stats)

    _loop_factory()
    if cfg.tls_listen:  # (a TLS listener's handshakes and certificate checks: Endpoints)
        import stalkd.server.handshake
        import stalkd.server.handshakelog
        import stalkd.server.recheck  # noqa: F401
    if cfg.data_dir is not None:
        import stalkd.engine.space
        import stalkd.persist.wal
        import stalkd.replication.authority
        import stalkd.replication.role
        import stalkd.replication.sender
        import stalkd.replication.status  # every data directory ships its WAL
        import stalkd.replication.swap  # (and settles a resync a stop cut short)
        import stalkd.server.waladmission  # noqa: F401  (the app's admission over the WAL)

        if cfg.standby_of is not None or cfg.ha is not None:
            import shutil  # noqa: F401  (a standby's resync directory)

            import stalkd.client._address
            import stalkd.replication.catchup
            import stalkd.replication.standby  # noqa: F401
        if cfg.ha is not None:
            import stalkd.ha
            import stalkd.server.hanode  # noqa: F401
        if cfg.archive_url is not None:
            import stalkd.archive.note
            import stalkd.archive.shipper
            import stalkd.archive.store  # noqa: F401
    if cfg.admin is not None:
        import aiohttp.web  # noqa: F401

        import stalkd.admin.endpoint
        import stalkd.admin.http
        import stalkd.admin.ops  # noqa: F401
    if cfg.user is not None:
        _preload_first_uses(cfg)


def _preload_first_uses(cfg: Config) -> None:
    """What serving ``cfg`` imports on first use, not at start (to keep it off the way to the
    first reply): for ``-u``, before the switch of user."""
    from stalkd.server.memtrim import libc

    libc()  # ctypes and the C library: at the first trim tick
    if cfg.data_dir is not None:
        # hashlib, hmac: a standby's proof of the replication secret (wire.proof); json: the
        # replication state file, once it exists (epochs); snap_v1: a version 1 snapshot;
        # snap_v2: a later one, read at start or written at the first snapshot
        import hashlib  # noqa: F401
        import hmac  # noqa: F401
        import json  # noqa: F401

        import stalkd.persist.snap_v1
        import stalkd.persist.snap_v2  # noqa: F401


def turn_yields(cfg: Config) -> bool:
    """Whether a loop turn that read small requests from several clients yields the CPU before
    the next (``Turns.yield_reads``): only where a turn's replies wait for a cost the batch
    shares, the fsync of ``always`` or the acknowledgement of ``--sync-standbys``. Elsewhere
    the replies go out at once, and yielding only delays the next turn's reads."""
    return cfg.data_dir is not None and (cfg.durability == "always" or cfg.sync_standbys > 0)


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a default dependency on POSIX
        return asyncio.new_event_loop
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def _open_storage(cfg: Config, now: float) -> tuple[Engine, Storage, str]:
    """Recover the engine from ``cfg.data_dir`` (or start empty in memory)."""
    if cfg.data_dir is None:
        # No WAL: the engine need not build records (same replies, less work per command).
        return Engine(max_job_size=cfg.max_job_size, records=False), MemoryStorage(), "in memory"
    from stalkd.persist.wal import Wal

    kwargs: dict[str, Any] = {"durability": cfg.durability, "archive": cfg.archive, "repair": cfg.repair}
    if cfg.wal_size is not None:
        kwargs["segment_size"] = cfg.wal_size
    wal = Wal.open(cfg.data_dir, **kwargs)
    try:
        engine, info = wal.recover(now, max_job_size=cfg.max_job_size)
    except BaseException:
        wal.close()
        raise
    for note in wal.repair_notes:
        log.warning("repair: %s", note)
    rep = wal.log.repair_report
    if rep is not None and rep.salvaged:
        from stalkd.persist.datadir import job_id_ranges

        log.warning("repair: %d records still readable in the bytes cut off (not restored), of jobs %s",
                    len(rep.salvaged), job_id_ranges(rep.salvaged))
    summary = (f"{info.jobs} jobs from {info.snapshot or 'no snapshot'} "
               f"+ {info.records_replayed} WAL records")
    storage: Storage = wal
    if cfg.archive_url is not None:
        summary += f"; shipping sealed segments to {cfg.archive_url}"
    return engine, storage, summary


def _start_shipper(cfg: Config, storage: Any) -> Any:
    """The archive shipper for ``--archive URL`` (None without it); retention waits for it."""
    if cfg.archive_url is None or cfg.data_dir is None:
        return None
    from stalkd.archive.note import write_note
    from stalkd.archive.shipper import Shipper
    from stalkd.archive.store import Store

    shipper = Shipper(cfg.data_dir, Store.open(cfg.archive_url))
    # Readers given the data dir find the shipped history through this note.
    write_note(cfg.data_dir, cfg.archive_url)
    storage.log.retention_hold = shipper.shipped_end
    shipper.start()
    return shipper


def _describe_wal_error(e: BaseException) -> int:
    name = type(e).__name__
    if name == "LogLockedError":
        log.error("%s (is another stalkd using this directory?)", e)
        return EXIT_LOCKED
    log.error("cannot open the data directory: %s: %s", name, e)
    return EXIT_FATAL


def _stays_primary(cfg: Config) -> bool:
    """A directory promoted to the epoch its log follows (and not fenced since) stays primary
    whatever its command line says: its ``--standby-of`` names the former primary."""
    from stalkd.replication.epochs import load_state, of_history, scan

    assert cfg.data_dir is not None
    if cfg.ha is not None:  # the lease in etcd decides, not what this directory was before
        return False
    saved = load_state(cfg.data_dir)
    if cfg.standby_of is None or not saved.promoted:
        return False
    st = of_history(scan(cfg.data_dir), saved.fenced)
    if st.epoch != saved.promoted or not st.may_lead:
        return False
    log.warning("this data directory was promoted to primary of epoch %d: it stays primary; "
                "--standby-of %s is overridden (it names the former primary, which is told of the "
                "new epoch)", st.epoch, cfg.standby_of)  # fmt: skip
    return True


def _settle_resync(data_dir: str) -> None:
    """A resync that a stop cut short is finished or cleared before anything reads the directory
    (``replication.swap``), whatever role the server starts in."""
    from stalkd.replication.swap import settle

    done = settle(data_dir)
    if done:
        log.warning("%s", done)


def _role(cfg: Config, secret: str | None, standby: bool) -> Any:
    """The data directory's replication role; a standby first catches up with its primary."""
    from stalkd.replication.role import Role

    assert cfg.data_dir is not None
    if standby:
        assert cfg.standby_of is not None
        from stalkd.client._address import parse_address
        from stalkd.replication.catchup import CatchUpError, catch_up

        try:
            log.info("standby of %s: %s", cfg.standby_of,
                     catch_up(parse_address(cfg.standby_of), cfg.data_dir,
                              segment_size=cfg.wal_size or 4 * 2**20, secret=secret))  # fmt: skip
        except CatchUpError as e:
            log.warning("standby of %s: %s; serving the local copy, retrying in the background",
                        cfg.standby_of, e)  # fmt: skip
    return Role(cfg.data_dir, standby=standby)


def _check_fenced(role: Any) -> None:
    if not role.standby and not role.state.may_lead:
        log.error("this server saw epoch %d, newer than its own %d: it refuses to act as primary "
                  "(NOT_PRIMARY); restart it with --standby-of THE-NEW-PRIMARY", role.state.fenced,
                  role.state.epoch)  # fmt: skip


def _replication(cfg: Config, srv: Server, wal: Any, role: Any, on_resync: Callable[[str], None],
                 secret: str | None, standby_mode: bool) -> Any:  # fmt: skip
    """Ship this server's WAL to standbys; for a standby, follow the primary. Returns the
    running standby (None for a primary)."""
    from stalkd.protocol.grammar import NOT_PRIMARY
    from stalkd.replication.authority import CHECK_WAIT, Authority
    from stalkd.replication.sender import Replicas
    from stalkd.replication.status import Status

    barriers = srv.barriers
    authority: Authority | None = None

    def follower(epoch: int) -> None:  # a standby of ours streams: no newer epoch it knows of
        if authority is not None:
            authority.allow(f"a standby follows epoch {epoch}, no newer than ours")

    replicas = Replicas(wal.log, wal.snap_dir, role, cfg.sync_standbys, barriers.replicated,
                        secret=secret, on_follower=follower)  # fmt: skip
    srv.role = role
    srv.replicas = replicas
    barriers.after_write = replicas.written
    barriers.after_write_while = replicas.senders  # Replicas.written streams to these alone
    barriers.end_offset = replicas.end_offset  # (compiled: no Python frame per batch)
    if replicas.gate is not None:
        barriers.after_batch = replicas.poll_acks
    authority = Authority(barriers, replicas.gate, NOT_PRIMARY.encode() + b"\r\n")
    role.on_fenced = lambda epoch: authority.fence(f"epoch {epoch} began elsewhere")
    if not role.standby and not role.state.may_lead:
        authority.fence(f"epoch {role.fenced} began elsewhere")
    elif not standby_mode and role.saved.had_standbys:
        authority.withhold(f"this directory had standbys: checking that no newer epoch exists "
                           f"(until one of them streams, or {CHECK_WAIT:.0f} s pass)")
        asyncio.get_running_loop().call_later(
            CHECK_WAIT, authority.allow, f"no peer claimed a newer epoch within {CHECK_WAIT:.0f} s")
    replicas.start()
    held = wal.log.retention_hold

    def hold() -> int:  # keep what connected standbys still need (and what archiving holds)
        need = replicas.hold()
        floors = [f for f in (need, held() if held is not None else None) if f is not None]
        return min(floors) if floors else 2**63

    wal.log.retention_hold = hold
    srv.replication = Status(role, replicas, None, authority)
    if cfg.standby_of is None:
        return None
    from stalkd.client._address import parse_address
    from stalkd.replication.standby import Standby

    def reopened() -> None:  # a resync opened the WAL's log again
        replicas.log = wal.log
        wal.log.retention_hold = hold

    standby = Standby(parse_address(cfg.standby_of), wal, srv.engine, role, max_job_size=cfg.max_job_size,
                      applied=srv.applied, on_resync=on_resync, reopened=reopened, secret=secret,
                      name=cfg.name or "", clock=srv.clock)  # fmt: skip
    if not standby_mode:  # promoted before this start: keep telling the former primary
        standby.start_fencing()
        return standby
    srv.standby_lag = standby.lag
    srv.promote = standby.promote
    srv.replication = Status(role, replicas, standby.receiver, authority)
    standby.start()
    return standby


class _Ending:
    """What ``_main`` leaves to ``run`` for after the loop."""

    __slots__ = ("listener_fd", "stuck")

    def __init__(self) -> None:
        self.listener_fd: int | None = None  # a rejoin's: the socket the next start takes as fd 3
        self.stuck: list[str] = []  # tasks still running after their cancellations


async def _end_tasks(within: float) -> list[asyncio.Task[Any]]:
    """Cancel every other task of the loop and wait for them to end, ``within`` seconds at most;
    returns those still running then. A task that goes on is cancelled again: on Python 3.11,
    ``asyncio.wait_for`` drops a cancellation that arrives in the turn its awaited read
    completes, and returns the read (the replication fence's handshake met this at every stop
    with a reply in flight, and the runner's close waited on it for ever)."""
    loop = asyncio.get_running_loop()
    me = asyncio.current_task()
    deadline = loop.time() + within
    while True:
        rest = [t for t in asyncio.all_tasks() if t is not me and not t.done()]
        left = deadline - loop.time()
        if not rest or left <= 0:
            return rest
        for t in rest:
            t.cancel()
        await asyncio.wait(rest, timeout=min(0.05, left))


def _handed_on(endpoints: Endpoints) -> int | None:
    """A copy of the listener the next start takes as systemd's (fd 3), so clients find the
    same address: the plain one, or a UNIX socket systemd passed. A UNIX socket file this server
    made is removed at stop, and the next start makes it again (None)."""
    first = endpoints.listeners[0] if endpoints.listeners else None
    if first is None or first.kind == "tls" or first.unix_ino:
        return None
    return os.dup(first.sock.fileno())


async def _main(cfg: Config, endpoints: Endpoints, t_exec: float, ending: _Ending) -> int:
    loop = asyncio.get_running_loop()
    keeper = None
    if cfg.ha is not None:  # the lease in etcd says whom to follow, before anything is read
        from stalkd.server.hanode import learn_role, start_keeper

        plain = next((lst.address for lst in endpoints.listeners if lst.kind == "plain"), None)
        advertise = cfg.advertise or plain
        if advertise is None:
            log.error("--ha: no plain listener to publish; give --advertise ADDR")
            return EXIT_FATAL
        if cfg.advertise is None and advertise.rpartition(":")[0] in ("0.0.0.0", "[::]"):
            log.error("--ha: the plain listener %s is no address another node can reach; give "
                      "--advertise HOST:PORT", advertise)  # fmt: skip
            return EXIT_FATAL
        from stalkd.replication.epochs import scan

        assert cfg.data_dir is not None
        on_disk = scan(cfg.data_dir)  # before recovery: the epochs the log holds
        disk_epoch = on_disk[-1][0] if on_disk else 0
        epoch_of: list[Callable[[], int]] = [lambda: disk_epoch]
        try:
            keeper = start_keeper(cfg, advertise, lambda: epoch_of[0]())
        except ValueError as e:  # a TLS file for etcd that cannot be used
            log.error("--ha: %s", e)
            return EXIT_FATAL
        cfg = await loop.run_in_executor(None, learn_role, cfg, keeper)
    t0 = time.monotonic()
    secret = None
    if cfg.replication_secret is not None:
        from stalkd.secretfile import read_secret

        try:
            secret = read_secret(cfg.replication_secret, "replication secret")
        except ValueError as e:
            log.error("--replication-secret: %s", e)
            return EXIT_FATAL
    try:
        if cfg.data_dir is not None:
            _settle_resync(cfg.data_dir)
        standby_mode = cfg.standby_of is not None and not _stays_primary(cfg) if cfg.data_dir is not None else False
        role = _role(cfg, secret, standby_mode) if cfg.data_dir is not None else None
        engine, storage, info = _open_storage(cfg, time.time())
    except Exception as e:
        return _describe_wal_error(e)
    engine.result_limits = ResultLimits(**{k: v for k, v in zip(("count", "bytes", "ttl"), cfg.result_limits,
                                                                 strict=True) if v is not None})
    if role is not None:
        role.attach(engine)  # the epochs are the recovered log's
        _check_fenced(role)
    wal = storage
    try:
        shipper = _start_shipper(cfg, storage)
    except (OSError, ValueError) as e:
        log.error("--archive %s: %s", cfg.archive_url, e)
        storage.close()
        return EXIT_FATAL
    recovery_s = time.monotonic() - t0
    admin = None
    if cfg.admin is not None:
        from stalkd.admin.endpoint import AdminEndpoint  # only when asked: aiohttp is heavy

        try:
            admin = AdminEndpoint(cfg)
        except (OSError, ValueError) as e:
            log.error("admin endpoint: %s", e)
            storage.close()
            return EXIT_FATAL
        if storage.persistent:  # the memory storage has nothing to time
            storage = admin.wrap_storage(storage) or storage
    stop = asyncio.Event()
    code = 0

    def fatal(_e: BaseException) -> None:
        nonlocal code
        code = EXIT_FATAL
        stop.set()

    srv = Server(cfg, engine, storage, on_fatal=fatal)
    # the loop's time per turn, shared
    srv.turns = turns = Turns(asyncio.get_running_loop().call_soon, yield_reads=turn_yields(cfg))

    def resync(why: str) -> None:
        nonlocal code
        log.error("%s: restart this standby (same command) to copy a snapshot and catch up", why)
        code = EXIT_RESYNC
        stop.set()

    def start_again(why: str) -> None:
        """End this start for a new one (``run`` execs it); not while stopping already: a
        server asked to stop stays stopped."""
        nonlocal code
        if stop.is_set():
            return
        log.warning("%s", why)
        code = EXIT_REJOIN
        stop.set()

    standby = _replication(cfg, srv, wal, role, resync, secret, standby_mode) if role is not None else None
    if role is not None and cfg.standby_of is not None and not standby_mode and cfg.ha is None:
        # Promoted before this start, it overrode --standby-of; once a newer epoch is proven
        # (fenced), that flag is right again: follow it from a new start, as the log says.
        fenced = role.on_fenced

        def then_follow(epoch: int) -> None:
            fenced(epoch)
            start_again(f"fenced by epoch {epoch}: serving again as the standby of "
                        f"{cfg.standby_of} (--standby-of)")

        role.on_fenced = then_follow
    ha_node = None
    if keeper is not None:
        from stalkd.ha import parse_cluster
        from stalkd.server.hanode import HaNode

        def rejoin(why: str) -> None:
            start_again(f"{why}: serving again from the start")

        assert role is not None  # --ha needs --dir

        def standbys_caught_up() -> bool:
            lags = srv.replicas.lags() if srv.replicas is not None else []
            return bool(lags) and all(records == 0 for _, records, _ in lags)

        ha_node = HaNode(keeper, parse_cluster(str(cfg.ha)), role, standby, wal, engine, rejoin,
                         following=cfg.standby_of, caught_up=standbys_caught_up)
        ha_node.install(srv.replication.authority, srv.replicas)
        srv.cluster = ha_node.status
        # from now on the epoch is the running log's (replicated EPOCH records move it)
        epoch_of[0] = lambda: role.state.epoch
        if not role.standby:
            ha_node.lead()
    for w in (*cfg.warnings, *endpoints.warnings()):
        log.warning("%s", w)
    where = endpoints.describe()
    if not storage.persistent:
        log.warning("no data directory (-b/--dir): jobs live in memory only and are lost when "
                    "the server stops; use --dir DIR for durable jobs")
        log.info("stalkd listening on %s, in memory, max job size %d", where, cfg.max_job_size)
    else:
        log.info("stalkd listening on %s, data dir %s, durability %s, max job size %d",
                 where, cfg.data_dir, cfg.durability, cfg.max_job_size)
        log.info("recovered %s in %.3fs", info, recovery_s)

    def tube_of(job_id: int) -> str | None:
        """The job's tube, else its kept result's (what the ACL decides on)."""
        job = engine.jobs.get(job_id)
        return engine.result_tube(job_id) if job is None else job.tube.name

    await endpoints.start(srv.new_connection, tube_of, srv.conns, turns.start)
    srv.addresses = tuple(endpoints.addresses())
    if admin is not None:
        try:
            await admin.start(srv)
        except OSError as e:
            log.error("admin endpoint: cannot listen on %s:%d: %s", admin.host, admin.port, e)
            stop.set()
            code = EXIT_FATAL

    # The handlers go in before the ready line: whoever waits for that line may signal at once,
    # and SIGTERM's default action would kill the server instead of stopping it.
    def on_term(signame: str) -> None:
        nonlocal code
        if not stop.is_set():
            log.info("%s: stopping (no new connections, finishing replies)", signame)
            stop.set()
        elif code == EXIT_REJOIN:  # while stopping to start again: it stays stopped
            log.info("%s: stopping, not starting again", signame)
            code = 0

    loop.add_signal_handler(signal.SIGTERM, on_term, "SIGTERM")
    loop.add_signal_handler(signal.SIGINT, on_term, "SIGINT")
    loop.add_signal_handler(signal.SIGUSR1, srv.drain)
    if srv.promote is not None:
        loop.add_signal_handler(signal.SIGUSR2, srv.promote)
    reloads: set[asyncio.Task[bool]] = set()

    def on_hup() -> None:
        task = loop.create_task(endpoints.reload())
        reloads.add(task)
        task.add_done_callback(reloads.discard)

    loop.add_signal_handler(signal.SIGHUP, on_hup)
    log.info("serving %.0f ms after start", (time.monotonic() - t_exec) * 1000)
    if ha_node is not None:
        ha_node.start()
    srv.start_maintenance()
    gc_policy = GcPolicy(now=loop.time(), young_only=(lambda: role.standby) if role is not None else None)
    gc_policy.start()
    gc_timer: asyncio.TimerHandle | None = None

    def gc_tick() -> None:
        nonlocal gc_timer
        gc_timer = loop.call_at(gc_policy.tick(loop.time()), gc_tick)

    gc_timer = loop.call_at(gc_policy.tick(loop.time()), gc_tick)
    trimmer = Trimmer()
    trim_timer: asyncio.TimerHandle | None = None
    tuned = False

    def trim_tick() -> None:
        nonlocal trim_timer, tuned
        if not tuned:  # at the first tick, not at start: it loads ctypes (memtrim)
            tune()
            tuned = True
        trimmer.tick()
        trim_timer = loop.call_later(TRIM_EVERY, trim_tick)

    trim_timer = loop.call_later(TRIM_EVERY, trim_tick)
    await stop.wait()
    gc_timer.cancel()
    trim_timer.cancel()
    trimmer.join()
    gc_policy.stop()

    if code == EXIT_REJOIN:
        ending.listener_fd = _handed_on(endpoints)
    endpoints.close()
    if standby is not None:
        standby.close()
    if srv.replicas is not None:
        srv.replicas.close()
    srv.begin_stop()
    if admin is not None:
        await admin.stop()
    deadline = time.monotonic() + STOP_GRACE
    if (storage.persistent and srv.failed is None
            and not await srv.wait_durable(STOP_GRACE * 0.75)):
        log.error("last WAL sync did not finish in time; unsent replies are dropped")
    srv.finish_stop()
    # Let the transports write what they hold, bounded by the grace period.
    while srv.unsent() and time.monotonic() < deadline:
        await asyncio.sleep(0.005)
    if ha_node is not None:  # replies are out: hand the lease over without waiting out its TTL
        await loop.run_in_executor(None, ha_node.stop)
    if srv.group_commit:
        # How well group commit grouped: the first figure to look at when `always` is slow.
        written = storage.stats().get("binlog-records-written", 0)
        log.info("%d WAL records written, %d fsyncs (%.1f records per fsync, %d on the loop thread)",
                 written, srv.syncs, written / max(srv.syncs, 1), srv.inline_syncs)
    if shipper is not None:
        shipper.stop()
    if storage.persistent:
        try:
            storage.sync()
            if srv.failed is None:  # so the next start loads live jobs, not all the dead WAL
                t_snap = time.monotonic()
                why = storage.final_snapshot(engine)
                if why is not None:
                    log.warning("no snapshot at stop, the next start replays the WAL: %s", why)
                else:
                    log.info("snapshot at stop: %d jobs in %.3fs", len(engine.jobs), time.monotonic() - t_snap)
            storage.close()
        except Exception as e:
            log.error("closing the WAL failed: %s", e)
            code = EXIT_FATAL
    stuck = await _end_tasks(TASKS_END_WITHIN)
    if stuck:
        ending.stuck = sorted(getattr(t.get_coro(), "__qualname__", t.get_name()) for t in stuck)
        log.error("%d tasks did not end when cancelled (%s): exiting without waiting for them",
                  len(stuck), ", ".join(ending.stuck))  # fmt: skip
    if code == EXIT_REJOIN:
        log.info("stopped: starting again (exec) to rejoin")
    else:
        log.info("stopped (exit %d)", code)
    return code


def run(cfg: Config, listeners: list[Listener], t_exec: float, *,
        tls: ssl.SSLContext | None = None, acl: Acl | None = None) -> int:
    """Serve on the already-listening sockets until SIGTERM/SIGINT; returns the exit status.
    ``tls`` is the context of the TLS listeners, ``acl`` their rules (checked by the caller)."""
    setup_logging(cfg.effective_log_level)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    # SIGUSR2 promotes a standby once it serves; before that it must not kill the process
    # (its default action), whoever sends it early.
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    endpoints = Endpoints(cfg, listeners, tls=tls, acl=acl)
    ending = _Ending()
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        try:
            code = runner.run(_main(cfg, endpoints, t_exec, ending))
        finally:
            endpoints.close()
        # Both leave from inside the runner: closing it waits, without a bound, for the loop's
        # tasks and executor threads, and one that never ends would keep a stopped server
        # running, out of its cluster (the fault campaign's failover stall). The WAL is closed.
        if code == EXIT_REJOIN:
            _rejoin(ending.listener_fd)
        if ending.stuck:
            _exit_now(code)
        return code


def _rejoin(listener_fd: int | None) -> NoReturn:
    """Start ``stalkd serve`` again in this process (exec); a failed exec is said, and ends the
    process with ``EXIT_REJOIN_FAILED``, never silently."""
    from stalkd.server.hanode import reexec

    try:
        reexec(listener_fd)
    except Exception as e:  # OSError mostly: the interpreter is gone (an upgrade), or no memory
        log.error("cannot start again to rejoin: exec %s: %s: %s; exiting with status %d (start the "
                  "server again)", sys.executable, type(e).__name__, e, EXIT_REJOIN_FAILED)  # fmt: skip
    _exit_now(EXIT_REJOIN_FAILED)


def _exit_now(code: int) -> NoReturn:
    """Exit at once, with what is logged written: no wait for tasks or threads."""
    for h in logging.getLogger("stalkd").handlers:
        h.flush()
    sys.stderr.flush()
    os._exit(code)
