"""The workload: producers and workers on threads, over the real client (``stalkd.client``) and
the real worker framework (``stalkd.worker``), each recording its operations in a ``History``.

- a **producer** puts unique bodies (``p3-17``) into its tube, mostly at once and some with a
  delay, at one of a few priorities;
- a **worker** watches one tube and reserves; it deletes most jobs, releases some (now or after
  a delay) and buries a few (they stay to the final read);
- an **app worker** is ``stalkd.worker``'s thread worker on its own tube, its deliveries
  recorded by a middleware: the reserve (sent, at the latest, when the slot's previous handler
  returned) and the delete or release the framework had acknowledged;
- the **final read** after the run, once the faults are healed: every job by id (``peek`` and
  ``stats-job``), from 1 up to past every id any put could have taken.

A reply the server gave is ``ok`` or ``fail``; anything else (a broken connection, a reply
that did not come in time, an ``INTERNAL_ERROR``) is ``info``: it may have happened.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from campaign.history import Event, History
from stalkd.client import Client, errors
from stalkd.tubes import is_internal
from stalkd.worker import App, Middleware, make_worker
from stalkd.worker.context import JobContext

__all__ = ["Workload", "WorkloadSpec", "outcome", "final_read"]

# Server replies that say the command changed nothing.
REFUSALS = (errors.NotFound, errors.TimedOut, errors.DeadlineSoon, errors.Draining,
            errors.JobTooBig, errors.OutOfMemory, errors.NotPrimary, errors.BadFormat,
            errors.PermissionDenied, errors.UnknownCommand, errors.ExpectedCrlf, errors.NotIgnored)
PRIORITIES = (0, 10, 100, 1000)
APP_TUBE = "app"


def outcome(exc: BaseException) -> tuple[str, dict[str, Any]]:
    """How an exception from the client is recorded: ``fail`` for a refusal, else ``info``."""
    return ("fail" if isinstance(exc, REFUSALS) else "info"), {"error": type(exc).__name__}


@dataclass(frozen=True)
class WorkloadSpec:
    producers: int = 3  # one a tube, the last into the app worker's tube when there is one
    workers: int = 2
    app_workers: int = 1  # stalkd.worker threads (0: none)
    tubes: int = 2
    ttr: int = 2  # seconds: short, so pauses longer than it are cheap
    delayed: float = 0.1  # share of puts with a delay
    timeout: float = 2.0  # the clients' reply timeout
    rate: float = 50.0  # puts per second per producer at most


class _Recorder:
    """One process's client and how its calls are written down."""

    def __init__(self, history: History, name: str, addresses: list[str],
                 nodes: dict[str, str], spec: WorkloadSpec, backoff: threading.Event,
                 setup: Callable[[Client], object]) -> None:
        self.history, self.name, self.addresses, self.nodes, self.spec = history, name, addresses, nodes, spec
        self.backoff = backoff  # set when the run stops: no more waiting
        self.setup = setup  # the tubes a fresh client uses or watches
        self.client: Client | None = None

    def _client(self) -> Client:
        if self.client is None:
            self.client = Client(",".join(self.addresses), timeout=self.spec.timeout,
                                 failover_timeout=self.spec.timeout * 2 if len(self.addresses) > 1 else None)
            self.setup(self.client)
        return self.client

    def node(self) -> str:
        if self.client is None:
            return ""
        return self.nodes.get(str(self.client.address), "")

    def call(self, f: str, value: dict[str, Any], fn: Callable[[Client], dict[str, Any]]) -> dict[str, Any] | None:
        """Invoke ``fn`` on the client, recording ``f`` with ``value``; its result on ``ok``."""
        ev: Event | None = None
        try:
            c = self._client()
            ev = self.history.invoke(self.name, f, value, self.node())
            result = fn(c)
        except errors.Buried as e:  # put: created, buried for lack of memory
            if ev is None:
                raise
            self.history.complete(ev, "ok", {"id": e.id, "buried": True}, self.node())
            return {"id": e.id}
        except Exception as e:  # noqa: BLE001 - every failure is recorded, then the loop goes on
            kind, info = outcome(e)
            if ev is None:  # not even connected: nothing was sent
                ev = self.history.invoke(self.name, f, value)
                kind = "fail"
            self.history.complete(ev, kind, info, self.node())
            if isinstance(e, errors.ClientConnectionError):
                self.drop()
                self.backoff.wait(0.05)  # the server is away: no tight loop of refused connects
            return None
        self.history.complete(ev, "ok", result, self.node())
        return result

    def drop(self) -> None:
        if self.client is not None:
            with contextlib.suppress(Exception):
                self.client.close()
            self.client = None


class Workload:
    """The threads of one run; ``start`` them, ``stop`` and join them, then ``final_read``."""

    def __init__(self, history: History, addresses: list[str], nodes: dict[str, str],
                 spec: WorkloadSpec, seed: int = 0) -> None:
        self.history, self.addresses, self.nodes, self.spec = history, addresses, nodes, spec
        self.stopping = threading.Event()
        self.threads: list[threading.Thread] = []
        self.rng = random.Random(seed)
        self._app_worker: Any = None

    def tubes(self) -> list[str]:
        return [f"t{i}" for i in range(self.spec.tubes)]

    def start(self) -> None:
        tubes = self.tubes()
        for k in range(self.spec.producers):
            tube = [*tubes, APP_TUBE][k % (len(tubes) + (1 if self.spec.app_workers else 0))]
            self._thread(self._produce, f"producer-{k}", tube, random.Random(self.rng.random()))
        for k in range(self.spec.workers):
            self._thread(self._work, f"worker-{k}", tubes[k % len(tubes)], random.Random(self.rng.random()))
        if self.spec.app_workers:
            self._start_app()

    def _thread(self, fn: Callable[..., None], *args: Any) -> None:
        t = threading.Thread(target=fn, args=args, name=str(args[0]), daemon=True)
        t.start()
        self.threads.append(t)

    def _produce(self, name: str, tube: str, rng: random.Random) -> None:
        rec = _Recorder(self.history, name, self.addresses, self.nodes, self.spec, self.stopping,
                        lambda c: c.use(tube))
        i = 0
        while not self.stopping.is_set():
            # JSON text, so the app worker's serializer takes it as its payload
            body = f'"p{name.rsplit("-", 1)[1]}-{i}"'
            pri = rng.choice(PRIORITIES)
            delay = rng.choice((1, 2)) if rng.random() < self.spec.delayed else 0
            value = {"body": body, "tube": tube, "pri": pri, "delay": delay, "ttr": self.spec.ttr}
            t0 = time.monotonic()

            def put(c: Client, b: str = body, p: int = pri, d: int = delay) -> dict[str, Any]:
                return {"id": c.put(b, priority=p, delay=d, ttr=self.spec.ttr)}

            rec.call("put", value, put)
            i += 1
            self.stopping.wait(max(0.0, 1 / self.spec.rate - (time.monotonic() - t0)))
        rec.drop()

    def put_to(self, address: str, name: str, count: int) -> None:
        """``count`` puts into the first tube by process ``name`` through a client that knows
        ``address`` alone (a client left with an old primary's address, say)."""
        tube = self.tubes()[0]
        rec = _Recorder(self.history, name, [address], self.nodes, self.spec, self.stopping,
                        lambda c: c.use(tube))
        for i in range(count):
            body = f'"{name}-{i}"'

            def put(c: Client, b: str = body) -> dict[str, Any]:
                return {"id": c.put(b, priority=0, ttr=self.spec.ttr)}

            rec.call("put", {"body": body, "tube": tube, "pri": 0, "delay": 0, "ttr": self.spec.ttr}, put)
        rec.drop()

    def _work(self, name: str, tube: str, rng: random.Random) -> None:
        def setup(c: Client) -> None:
            c.watch(tube)
            if tube != "default":
                c.ignore("default")

        rec = _Recorder(self.history, name, self.addresses, self.nodes, self.spec, self.stopping, setup)
        while not self.stopping.is_set():
            got = rec.call("reserve", {"tube": tube}, lambda c: _reserved(c.reserve(timeout=1)))
            if got is None:
                continue
            jid: int = got["id"]
            roll, pri, delay = rng.random(), rng.choice(PRIORITIES), rng.choice((0, 1))
            how = "delete" if roll < 0.85 else "release" if roll < 0.95 else "bury"
            value = {"id": jid, "pri": pri, "delay": delay} if how == "release" else {"id": jid}
            rec.call(how, value, _finish(how, jid, pri, delay))
        rec.drop()

    def _start_app(self) -> None:
        app = App(",".join(self.addresses))
        app.middleware.append(_AppRecorder(self.history))

        @app.task(tube=APP_TUBE, ttr=self.spec.ttr, max_attempts=1000)
        def handle(payload: Any) -> None:
            """Does nothing: what is recorded is the delivery and its acknowledgement."""

        self._app_worker = make_worker(app, mode="threads", concurrency=self.spec.app_workers)
        self._thread(lambda _name: self._app_worker.run(), "app-worker")

    def stop(self, timeout: float = 30.0) -> None:
        self.stopping.set()
        if self._app_worker is not None:
            self._app_worker.stop(now=True)
        for t in self.threads:
            t.join(timeout)


def _reserved(job: Any) -> dict[str, Any]:
    return {"id": int(job.id), "body": bytes(job.body).decode("utf-8", "replace")}


def _finish(how: str, jid: int, pri: int, delay: int) -> Callable[[Client], dict[str, Any]]:
    """A worker's last word on job ``jid``: delete, release (``pri``, ``delay``) or bury."""

    def act(c: Client) -> dict[str, Any]:
        if how == "delete":
            c.delete(jid)
        elif how == "release":
            c.release(jid, priority=pri, delay=delay)
        else:
            c.bury(jid)
        return {}

    return act


class _AppRecorder(Middleware):
    """Writes the app worker's deliveries into the history, as process ``app-<job id>``: a
    reserve op per delivery, sent at the earliest when the worker started (the framework does
    not say when; the earliest time keeps the TTR and delay rules sound), and the delete or
    release the framework had acknowledged, sent at the earliest when the delivery began; a
    delete of unknown outcome (``info``) when the handler returned, since the framework's own
    delete may go unanswered without any hook being told."""

    def __init__(self, history: History) -> None:
        self.history = history
        self._start = history.now()

    def before_process(self, ctx: JobContext) -> None:
        ctx.extras["campaign.t"] = self.history.now()
        self.history.record(f"app-{ctx.job_id}", "reserve", self._start, "ok",
                            {"id": ctx.job_id, "tube": APP_TUBE,
                             "body": ctx.body.decode("utf-8", "replace")})

    def _acked(self, ctx: JobContext, f: str, value: dict[str, Any]) -> None:
        sent = float(ctx.extras.get("campaign.t", self._start))
        self.history.record(f"app-{ctx.job_id}", f, sent, "ok", {"id": ctx.job_id, **value})

    def after_process(self, ctx: JobContext) -> None:
        # the framework sends the delete next; if its reply is lost (the connection broke) no
        # hook says so, and the job may be gone: an unknown delete now, an ok one from on_done
        if ctx.exception is None:
            sent = float(ctx.extras.get("campaign.t", self._start))
            self.history.record(f"app-{ctx.job_id}", "delete", sent, "info", {"id": ctx.job_id})

    def on_done(self, ctx: JobContext) -> None:
        self._acked(ctx, "delete", {})

    def on_retry(self, ctx: JobContext, action: Any) -> None:
        self._acked(ctx, "release", {"pri": 0, "delay": int(getattr(action, "delay", 0))})


_JOIN = 100_000  # a smaller gap between seen ids is read whole; an id ceiling's jump is 2**20


def id_ranges(ids: list[int], slack: int) -> list[range]:
    """The ids a server could have handed out: around every run of ids seen, ``slack`` more on
    each side (puts whose reply never came took ids too), and the first ids of each epoch's band
    (a promotion starts a new one, ``engine.replay.ID_BAND``) up to the one after the highest.
    Runs split where ids jump: after an unclean stop under ``every``/``never`` ids go on from the
    durable id ceiling (``persist.idceiling``), up to a million past the last one.

    >>> [(r.start, r.stop) for r in id_ranges([3, 9], 2)]
    [(1, 12), (8796093022208, 8796093022211)]
    >>> [(r.start, r.stop) for r in id_ranges([3, 1048600], 2)]
    [(1, 6), (1048598, 1048603), (8796093022208, 8796093022211)]
    """
    from stalkd.engine.replay import ID_BAND

    seen = sorted({i for i in ids if i})
    top_band = max((i // ID_BAND for i in seen), default=0) + 1
    spans = [(max(1, band * ID_BAND), max(1, band * ID_BAND) + slack + 1) for band in range(top_band + 1)]
    for i in seen:
        lo = max(i - slack, max(1, (i // ID_BAND) * ID_BAND))
        spans.append((lo, i + slack + 1))
    out: list[range] = []
    for lo, hi in sorted(spans):
        if out and lo <= out[-1].stop + _JOIN:  # ids between two seen ones may all have been given
            out[-1] = range(out[-1].start, max(out[-1].stop, hi))
        else:
            out.append(range(lo, hi))
    return out


def final_read(history: History, address: str, slack: int, timeout: float = 60.0) -> None:
    """Record every job the server holds among the ids it could have given (``id_ranges``) as
    one ``final`` op of the ``final`` process. Raises if the server cannot be read: a run without
    its final read cannot say what was lost. ``timeout`` bounds each reply: generous, as a
    server just restarted on a loaded machine (the pure-Python build beside another suite in
    CI) may take seconds over one."""
    ranges = id_ranges([op.value.get("id", 0) for op in history.ops()], slack)
    ev = history.invoke("final", "final", {"ranges": [[r.start, r.stop] for r in ranges]})
    jobs = []
    with Client(address, timeout=timeout) as c:
        for jid in (j for r in ranges for j in r):
            try:
                job = c.peek(jid)
                st = c.stats_job(jid)
            except errors.NotFound:
                continue
            if is_internal(str(st["tube"])):
                continue  # stalkd's own bookkeeping (a worker's presence record), no client's job
            jobs.append({"id": jid, "body": bytes(job.body).decode("utf-8", "replace"),
                         "state": str(st["state"]), "tube": str(st["tube"]), "pri": int(str(st["pri"]))})
    history.complete(ev, "ok", {"jobs": jobs})
