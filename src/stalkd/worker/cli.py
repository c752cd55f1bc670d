"""``stalkd worker``, ``stalkd failed`` and ``stalkd retry``.

    stalkd worker myapp.tasks:app --concurrency 8 --mode threads
    stalkd failed -a 127.0.0.1:11300                 # dead letters with their errors
    stalkd retry 42 43                                # kick those jobs back (or --all)
    stalkd worker myapp.tasks:app -a tls://q.example:11400 --tls-ca ca.pem

The server address and TLS options are the ones every stalkd command takes
(``stalkd.client.options``): ``-a``, else ``$STALKD_ADDR``, else (worker) the app's address.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import importlib
import json
import logging
import os
import sys
from collections.abc import Sequence

from stalkd.client.options import add_server_options, server_addresses
from stalkd.worker.app import FAILED_TUBE, App

__all__ = ["worker", "failed", "retry", "scheduler_main", "load_app"]


def load_app(spec: str) -> App:
    """``module:attr`` -> the App object (the current directory is importable, as with
    ``python -m``)."""
    module_name, _, attr = spec.partition(":")
    if not module_name:
        raise SystemExit(f"stalkd worker: expected module:app, got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise SystemExit(f"stalkd worker: cannot import {module_name!r}: {exc}") from None
    obj = getattr(module, attr or "app", None)
    if obj is None:
        raise SystemExit(f"stalkd worker: module {module_name!r} has no attribute {attr or 'app'!r}")
    if not isinstance(obj, App):
        raise SystemExit(f"stalkd worker: {spec} is a {type(obj).__name__}, not a stalkd App")
    return obj


def _positive(text: str) -> int:
    """An argparse type: an integer >= 1 (a usage error otherwise, not a traceback)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _log_level(text: str) -> str:
    if text.upper() not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(f"{text!r} is not one of {', '.join(LOG_LEVELS)}")
    return text.upper()


def worker(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(prog="stalkd worker", description="Run the tasks of an app.")
    p.add_argument("app", help="module:attribute of the stalkd.App")
    p.add_argument("-c", "--concurrency", type=_positive, default=1, help="slots (threads, "
                   "processes or asyncio tasks; default 1)")
    p.add_argument("-m", "--mode", choices=("threads", "processes", "asyncio"), default="threads")
    p.add_argument("--threads-per-process", type=_positive, default=1,
                   help="with --mode processes (default 1)")
    add_server_options(p, default="the app's address")
    p.add_argument("-t", "--tubes", help="comma-separated tubes to watch (default: all tasks')")
    p.add_argument("--grace", type=float, default=30.0, help="seconds in-flight jobs get to "
                   "finish after SIGTERM before they are released (default 30)")
    p.add_argument("--log-level", type=_log_level, default="INFO", metavar="LEVEL",
                   help="DEBUG (a line per completed job), INFO (default: failures and a "
                   "summary every 10 s), WARNING, ERROR")
    p.add_argument("--schedules", action="store_true", help="also put the jobs of the app's "
                   "periodic schedules (as 'stalkd scheduler' does; any number of workers "
                   "may: each slot fires once)")
    args = p.parse_args(list(argv))
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(process)d %(levelname).1s %(message)s")
    app = load_app(args.app)
    try:
        app.address = str(server_addresses(args, default=app.address))
    except ValueError as e:
        p.error(str(e))
    from stalkd.worker import make_worker

    why = app.results_unsupported()
    if why is not None:
        print(f"stalkd worker: {why}", file=sys.stderr)
        return 2
    kw: dict[str, object] = {"grace": args.grace}
    if args.tubes:
        kw["tubes"] = [t for t in args.tubes.split(",") if t]
    if args.mode == "processes":
        kw["threads"] = args.threads_per_process
    w = make_worker(app, mode=args.mode, concurrency=args.concurrency, **kw)
    logging.getLogger("stalkd.worker").info(
        "worker pid=%d mode=%s concurrency=%d server=%s tubes=%s", os.getpid(), args.mode,
        args.concurrency, app.address, ",".join(w.tubes))
    if args.schedules:
        if not app.schedules:
            p.error(f"--schedules: {args.app} has no schedules (add one with "
                    "app.schedule(cron, task))")
        from stalkd.worker.scheduler import RunSchedules

        app.add_middleware(RunSchedules(app))
    # What is loaded now (modules, the app) lives as long as the worker: out of the collector's
    # sight, a full collection walks only what jobs leave behind (a shorter pause in the middle
    # of a job), and forked children share those pages instead of copying them.
    gc.freeze()
    return w.run()


def _common(p: argparse.ArgumentParser) -> None:
    add_server_options(p)
    p.add_argument("--failed-tube", default=FAILED_TUBE, help=f"default {FAILED_TUBE}")


def _address(p: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    try:
        return str(server_addresses(args))
    except ValueError as e:
        p.error(str(e))


def failed(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(prog="stalkd failed",
                                description="List dead-lettered jobs with their errors.")
    _common(p)
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.add_argument("--traceback", action="store_true", help="print full tracebacks")
    args = p.parse_args(list(argv))
    address = _address(p, args)
    from stalkd.worker.deadletter import list_failed

    try:
        jobs = list_failed(address, args.failed_tube)
    except ConnectionError as exc:  # stalkd.client's connection errors derive from it
        print(f"stalkd failed: {exc}", file=sys.stderr)
        return 1
    for f in jobs:
        r = f.record
        if args.json:
            print(json.dumps({"job_id": r.job_id, "tube": r.tube, "task": r.task,
                              "attempts": r.attempts, "error": r.error,
                              "failed_at": r.failed_at, "traceback": r.traceback}))
            continue
        when = dt.datetime.fromtimestamp(r.failed_at, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
        print(f"job {r.job_id}  tube={r.tube} task={r.task} attempts={r.attempts} "
              f"failed={when}Z  {r.error}")
        if args.traceback:
            print("    " + r.traceback.rstrip().replace("\n", "\n    "))
    if not args.json:
        print(f"{len(jobs)} dead-lettered job(s) in {args.failed_tube} on {address}",
              file=sys.stderr)
    return 0


def retry(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(
        prog="stalkd retry",
        description="Kick dead-lettered jobs back to ready. A kicked job keeps its attempt "
        "count, so it gets exactly one more attempt (numbered as such): if that "
        "fails it is dead-lettered again at once. --fresh gives it its task's full budget.")
    _common(p)
    p.add_argument("ids", nargs="*", type=int, help="original job ids (see stalkd failed)")
    p.add_argument("--all", action="store_true", help="retry every dead-lettered job")
    p.add_argument("--fresh", action="store_true", help="re-put a copy with fresh attempts "
                   "instead of kicking (the buried original is deleted)")
    args = p.parse_args(list(argv))
    if not args.ids and not args.all:
        p.error("give job ids or --all")
    address = _address(p, args)
    from stalkd.worker.deadletter import retry_failed

    try:
        results = retry_failed(address, args.failed_tube,
                               job_ids=None if args.all else set(args.ids), fresh=args.fresh)
    except ConnectionError as exc:
        print(f"stalkd retry: {exc}", file=sys.stderr)
        return 1
    for r in results:
        print(f"job {r.job_id}: {r.outcome}")
    missing = set() if args.all else set(args.ids) - {r.job_id for r in results}
    for jid in sorted(missing):
        print(f"job {jid}: no dead-letter record in {args.failed_tube}", file=sys.stderr)
    return 1 if missing else 0


def scheduler_main(argv: Sequence[str]) -> int:
    """``stalkd scheduler``: run an app's periodic schedules on their own."""
    from stalkd.client.options import add_server_options, server_address
    from stalkd.worker.scheduler import Scheduler

    p = argparse.ArgumentParser(
        prog="stalkd scheduler",
        description="Put the jobs of an app's periodic schedules (app.schedule(...)) at their "
        "cron times. Run as many as you like for availability: each slot fires once, and "
        "where each schedule stands is kept on the server (stalkd.schedule.* tubes), so a "
        "restart resumes where it stopped. 'stalkd worker --schedules' runs one inside a "
        "worker.")
    p.add_argument("app", help="module:attribute of the stalkd.App")
    add_server_options(p, default="the app's address")
    p.add_argument("--log-level", default="INFO", choices=LOG_LEVELS, type=str.upper,
                   metavar="LEVEL", help=f"one of {', '.join(LOG_LEVELS)} (default INFO)")
    args = p.parse_args(list(argv))
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(process)d %(levelname).1s %(message)s")
    app = load_app(args.app)
    try:
        app.address = str(server_address(args, default=app.address))
    except ValueError as e:
        p.error(str(e))
    if not app.schedules:
        p.error(f"{args.app} has no schedules: add one with app.schedule(cron, task)")
    sched = Scheduler(app)
    import signal

    signal.signal(signal.SIGTERM, lambda *_: sched.stop())
    signal.signal(signal.SIGINT, lambda *_: sched.stop())
    return sched.run()


def workers(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(
        prog="stalkd workers",
        description="List the live worker processes (host, pid, mode, slots) and the jobs each "
        "runs now, with how long they have run. Workers announce themselves every few seconds "
        "(stalkd.worker.presence); a worker that died is not listed.")
    add_server_options(p)
    p.add_argument("--json", action="store_true", help="print the list as one JSON value")
    args = p.parse_args(list(argv))
    address = _address(p, args)
    from stalkd.worker.presence import list_workers

    try:
        found = list_workers(address)
    except ConnectionError as exc:  # stalkd.client's connection errors derive from it
        print(f"stalkd workers: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(found))
        return 0
    for w in found:
        busy = len(w.get("jobs", []))
        print(f"{w.get('host')} pid={w.get('pid')} {w.get('mode')} slots={w.get('slots')} "
              f"busy={busy} tubes={','.join(w.get('tubes', []))} seen={w.get('age_s')}s ago")
        for j in w.get("jobs", []):
            print(f"    job {j['id']}  task={j['task']} tube={j['tube']} running {j['running_s']}s")
    print(f"{len(found)} worker process(es) on {address}", file=sys.stderr)
    return 0
