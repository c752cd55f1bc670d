"""``stalkd put|peek|delete|kick|stats|stats-tube|list-tubes``: thin commands over the client.

Each function takes the argv after its command name and returns the exit code (see EXIT below).
They talk to any beanstalkd-compatible server: ``-a ADDR`` or ``$STALKD_ADDR`` (``host:port``,
``unix:/path`` or ``tls://host:port`` with ``--tls-ca/--tls-cert/--tls-key``; see
``stalkd.client.options``), default 127.0.0.1:11300. ``--json`` prints one JSON value.

Example::

    $ stalkd put --tube emails '{"to": "a@b"}'
    1
    $ stalkd stats-tube emails
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from collections.abc import Callable, Sequence
from typing import Any

from stalkd.client import errors
from stalkd.client._address import AddressList
from stalkd.client._format import body_json, body_text, key_values, show_value, table
from stalkd.client.options import ENV_ADDR, add_server_options, server_addresses
from stalkd.client.sync import Client

__all__ = ["put", "peek", "delete", "kick", "stats", "stats_tube", "list_tubes"]

OK, NOT_FOUND, USAGE, UNREACHABLE, REFUSED = 0, 1, 2, 3, 4
EXIT = f"""exit status:
  {OK}  success
  {NOT_FOUND}  a job or tube was not found (nothing else went wrong)
  {USAGE}  bad command line
  {UNREACHABLE}  the server could not be reached, or the connection broke
  {REFUSED}  the server refused the command (JOB_TOO_BIG, DRAINING, OUT_OF_MEMORY, ...)"""

ENV = ENV_ADDR


class _Fail(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def _parser(cmd: str, description: str, epilog: str = "") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=f"stalkd {cmd}", description=textwrap.fill(description, 79),
        epilog=(epilog + "\n\n" if epilog else "") + EXIT,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_server_options(p)
    p.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                   help="give up waiting for a reply after this long (default 10)")
    p.add_argument("--failover-timeout", type=float, default=None, metavar="SECONDS",
                   help="with several addresses, look for the primary this long before giving "
                        "up (default 30; see docs/standby.md)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    return p


def _address(ns: argparse.Namespace) -> AddressList:
    try:
        return server_addresses(ns)
    except ValueError as e:
        raise _Fail(USAGE, str(e)) from None


def _run(cmd: str, parser: argparse.ArgumentParser, argv: Sequence[str],
         body: Callable[[Client, argparse.Namespace], int],
         check: Callable[[argparse.Namespace], None] | None = None) -> int:
    """Parse, ``check`` (before connecting), connect, run ``body``; turn client errors into
    one clear line and an exit code."""
    ns = parser.parse_args(list(argv))
    try:
        if check is not None:
            check(ns)
        with Client(_address(ns), timeout=ns.timeout,
                    failover_timeout=ns.failover_timeout) as c:
            return body(c, ns)
    except _Fail as e:
        print(f"stalkd {cmd}: {e}", file=sys.stderr)
        return e.code
    except errors.ConnectionFailed as e:
        print(f"stalkd {cmd}: {e}\n  is the server running? (stalkd serve; set -a ADDR "
              f"or ${ENV})", file=sys.stderr)
        return UNREACHABLE
    except errors.ClientConnectionError as e:
        print(f"stalkd {cmd}: {e}", file=sys.stderr)
        return UNREACHABLE
    except errors.NotFound as e:
        print(f"stalkd {cmd}: {e}", file=sys.stderr)
        return NOT_FOUND
    except errors.BeanstalkError as e:
        print(f"stalkd {cmd}: the server refused: {e}", file=sys.stderr)
        return REFUSED
    except ValueError as e:  # a bad tube name or number, caught before anything was sent
        print(f"stalkd {cmd}: {e}", file=sys.stderr)
        return USAGE


def _emit(ns: argparse.Namespace, value: Any, text: str) -> None:
    if ns.json:
        print(json.dumps(value, indent=None if isinstance(value, list) else 2))
    elif text:
        print(text)


def _each_job(ns: argparse.Namespace, ids: Sequence[int], act: Callable[[int], None], cmd: str,
              done: str, why_missing: str) -> int:
    """``act`` on each job id; prints (or emits as JSON) the ids done and those not found."""
    acted, missing = [], []
    for jid in ids:
        try:
            act(jid)
            acted.append(jid)
        except errors.NotFound:
            missing.append(jid)
    _emit(ns, {done: acted, "not_found": missing}, "\n".join(f"{done} {j}" for j in acted))
    if missing:
        print(f"stalkd {cmd}: not found ({why_missing}): {' '.join(map(str, missing))}",
              file=sys.stderr)
        return NOT_FOUND
    return OK


def _add_tube(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("-t", "--tube", default="default", help=f"{what} (default: default)")


# --- put ------------------------------------------------------------------------------------


def put(argv: Sequence[str]) -> int:
    """``stalkd put [-t TUBE] [-p PRI] [-d DELAY] [-r TTR] [BODY ...|-] [--lines]``."""
    p = _parser("put", "Put jobs into a tube and print their ids, one per line.",
                "examples:\n  stalkd put hello\n  stalkd put -t emails -p 10 --delay 60 '{\"to\": 1}'\n"
                "  seq 1000 | stalkd put --lines -t numbers      # one job per line, pipelined")
    p.add_argument("bodies", nargs="*", metavar="BODY",
                   help="job bodies (UTF-8); '-' or none reads one body from stdin")
    _add_tube(p, "tube to put into")
    p.add_argument("-p", "--priority", type=int, default=2**31,
                   help="0 is most urgent, 4294967295 least (default 2147483648)")
    p.add_argument("-d", "--delay", type=float, default=0, metavar="SECONDS",
                   help="keep the job delayed this long before it is ready (default 0)")
    p.add_argument("-r", "--ttr", type=float, default=120, metavar="SECONDS",
                   help="time to run: a reserved job is released after this long (default 120)")
    p.add_argument("--lines", action="store_true",
                   help="read stdin and put each line as its own job (trailing newline removed)")

    def check(ns: argparse.Namespace) -> None:
        if ns.lines and ns.bodies:
            raise _Fail(USAGE, "--lines reads stdin; give no BODY arguments with it")

    def body(c: Client, ns: argparse.Namespace) -> int:
        if ns.lines:
            jobs: list[bytes | str] = [ln.rstrip(b"\r\n") for ln in sys.stdin.buffer]
        elif not ns.bodies or ns.bodies == ["-"]:
            if sys.stdin.isatty():
                print("stalkd put: reading one job body from stdin (end it with Ctrl-D)",
                      file=sys.stderr)
            jobs = [sys.stdin.buffer.read()]
        else:
            jobs = list(ns.bodies)
        c.use(ns.tube)
        kw = {"priority": ns.priority, "delay": ns.delay, "ttr": ns.ttr}
        ids = [c.put(jobs[0], **kw)] if len(jobs) == 1 else c.put_many(jobs, **kw)
        _emit(ns, {"tube": ns.tube, "ids": ids}, "\n".join(map(str, ids)))
        return OK

    return _run("put", p, argv, body, check)


# --- peek -----------------------------------------------------------------------------------


def peek(argv: Sequence[str]) -> int:
    """``stalkd peek ID`` or ``stalkd peek --ready|--delayed|--buried [-t TUBE]``."""
    p = _parser("peek", "Show a job: its stats and its body. By id (any tube), or the next "
                        "ready, delayed or buried job of a tube.",
                "examples:\n  stalkd peek 42\n  stalkd peek --buried -t emails\n"
                "  stalkd peek 42 --body > job.bin      # the body only, byte for byte")
    p.add_argument("id", nargs="?", type=int, help="job id")
    which = p.add_mutually_exclusive_group()
    for state in ("ready", "delayed", "buried"):
        which.add_argument(f"--{state}", dest="state", action="store_const", const=state,
                           help=f"the next {state} job of the tube")
    _add_tube(p, "tube for --ready/--delayed/--buried")
    p.add_argument("--body", action="store_true", help="print only the raw body bytes")

    def check(ns: argparse.Namespace) -> None:
        if (ns.id is None) == (ns.state is None):
            raise _Fail(USAGE, "give a job ID or one of --ready/--delayed/--buried")

    def body(c: Client, ns: argparse.Namespace) -> int:
        if ns.id is not None:
            job = c.peek(ns.id)
        else:
            c.use(ns.tube)
            job = {"ready": c.peek_ready, "delayed": c.peek_delayed, "buried": c.peek_buried}[ns.state]()
        if ns.body:
            sys.stdout.buffer.write(job.body)
            sys.stdout.buffer.flush()
            return OK
        try:
            st: dict[str, Any] = dict(c.stats_job(job.id))
        except errors.NotFound:  # deleted between peek and stats: still show what we have
            st = {"id": job.id}
        _emit(ns, {**st, **body_json(job.body)},
              f"{key_values(st)}\nbody ({len(job.body)} bytes):\n{body_text(job.body)}")
        return OK

    return _run("peek", p, argv, body, check)


# --- delete ---------------------------------------------------------------------------------


def delete(argv: Sequence[str]) -> int:
    """``stalkd delete ID [ID ...]``."""
    p = _parser("delete", "Delete jobs by id (ready, delayed or buried; a job reserved by a "
                          "worker cannot be deleted from here).",
                "example:\n  stalkd delete 41 42 43")
    p.add_argument("ids", nargs="+", type=int, metavar="ID", help="job ids")

    def body(c: Client, ns: argparse.Namespace) -> int:
        return _each_job(ns, ns.ids, c.delete, "delete", "deleted",
                         "no such job, or reserved by a worker")

    return _run("delete", p, argv, body)


# --- kick -----------------------------------------------------------------------------------


def kick(argv: Sequence[str]) -> int:
    """``stalkd kick [-t TUBE] [BOUND | --all]`` or ``stalkd kick --job ID [ID ...]``."""
    p = _parser("kick", "Move buried jobs of a tube back to ready (or, when the tube has no "
                        "buried jobs, delayed ones), oldest first; or kick specific jobs.",
                "examples:\n  stalkd kick -t emails 10\n  stalkd kick --all -t emails\n"
                "  stalkd kick --job 41 42")
    p.add_argument("bound", nargs="?", type=int, metavar="BOUND",
                   help="kick at most this many jobs (default 1)")
    p.add_argument("--all", action="store_true", help="kick every buried (or delayed) job")
    _add_tube(p, "tube to kick in")
    p.add_argument("--job", dest="jobs", type=int, nargs="+", metavar="ID",
                   help="kick these buried or delayed jobs, in any tube")

    def check(ns: argparse.Namespace) -> None:
        if ns.jobs and (ns.bound is not None or ns.all):
            raise _Fail(USAGE, "--job kicks the jobs named; give no BOUND or --all with it")
        if ns.all and ns.bound is not None:
            raise _Fail(USAGE, "give BOUND or --all, not both")

    def body(c: Client, ns: argparse.Namespace) -> int:
        if ns.jobs:
            return _each_job(ns, ns.jobs, c.kick_job, "kick", "kicked",
                             "no such job, or neither buried nor delayed")
        try:  # before `use`, which would create the tube
            c.stats_tube(ns.tube)
        except errors.NotFound:
            raise _Fail(NOT_FOUND, f"no tube {ns.tube!r} on the server (no jobs, and nobody "
                                   f"uses or watches it): nothing to kick") from None
        c.use(ns.tube)
        n = c.kick(2**32 - 1 if ns.all else 1 if ns.bound is None else ns.bound)
        _emit(ns, {"tube": ns.tube, "kicked": n},
              f"kicked {n} job{'s' if n != 1 else ''} in tube {ns.tube}")
        return OK

    return _run("kick", p, argv, body, check)


# --- stats, stats-tube, list-tubes ----------------------------------------------------------


def stats(argv: Sequence[str]) -> int:
    """``stalkd stats [PREFIX ...]``."""
    p = _parser("stats", "Server statistics as a two-column table.",
                "examples:\n  stalkd stats\n  stalkd stats current- cmd-put   # keys starting so")
    p.add_argument("prefixes", nargs="*", metavar="PREFIX", help="show only keys starting so")

    def body(c: Client, ns: argparse.Namespace) -> int:
        s = c.stats()
        if ns.prefixes:
            s = {k: v for k, v in s.items() if k.startswith(tuple(ns.prefixes))}
            if not s:
                raise _Fail(NOT_FOUND, f"no stats key starts with {' or '.join(ns.prefixes)}")
        _emit(ns, s, key_values(s))
        return OK

    return _run("stats", p, argv, body)


# short column names for the tube table, in server key order
_TUBE_COLUMNS = [
    ("current-jobs-ready", "ready"), ("current-jobs-urgent", "urgent"),
    ("current-jobs-reserved", "reserved"), ("current-jobs-delayed", "delayed"),
    ("current-jobs-buried", "buried"), ("total-jobs", "total"), ("current-using", "using"),
    ("current-watching", "watching"), ("current-waiting", "waiting"),
    ("cmd-delete", "deletes"), ("pause", "pause"), ("pause-time-left", "pause-left"),
]


def stats_tube(argv: Sequence[str]) -> int:
    """``stalkd stats-tube [TUBE ...]``."""
    p = _parser("stats-tube", "Statistics of tubes: one tube as a two-column table, several "
                              "(or, with no TUBE, all) as one row per tube. With --json: the "
                              "tube's object, or one object per tube name.",
                "examples:\n  stalkd stats-tube emails\n  stalkd stats-tube")
    p.add_argument("tubes", nargs="*", metavar="TUBE", help="tube names (default: every tube)")

    def body(c: Client, ns: argparse.Namespace) -> int:
        names = ns.tubes or c.list_tubes()
        found: dict[str, dict[str, Any]] = {}
        missing = []
        for name in names:
            try:
                found[name] = dict(c.stats_tube(name))
            except errors.NotFound:  # also a tube that vanished since list-tubes
                missing.append(name)
        if len(ns.tubes) == 1 and found:
            _emit(ns, found[ns.tubes[0]], key_values(found[ns.tubes[0]]))
        else:
            rows = [[n, *(show_value(st.get(k, "")) for k, _ in _TUBE_COLUMNS)]
                    for n, st in found.items()]
            _emit(ns, found, table(["tube", *(h for _, h in _TUBE_COLUMNS)], rows) if rows else "")
        if missing and ns.tubes:
            print(f"stalkd stats-tube: no such tube: {' '.join(missing)}", file=sys.stderr)
            return NOT_FOUND
        return OK

    return _run("stats-tube", p, argv, body)


def list_tubes(argv: Sequence[str]) -> int:
    """``stalkd list-tubes``."""
    p = _parser("list-tubes", "List the server's tubes, one per line, in creation order.")

    def body(c: Client, ns: argparse.Namespace) -> int:
        tubes = c.list_tubes()
        _emit(ns, tubes, "\n".join(tubes))
        return OK

    return _run("list-tubes", p, argv, body)
