"""Protocol transcripts: what a beanstalkd server must answer, byte for byte.

Each transcript runs on a fresh server (so job ids start at 1). They cover every command and
the cases of beanstalkd's own test suite (testserv.c) that an external server can run
(docs/protocol.md summarises the protocol). Dialects: "1.12" is Debian's beanstalkd; "1.13" is stalkd (and beanstalkd 1.13).
Where they differ, both expectations are written down with the reason:
- YAML quoting: 1.13 quotes stats-job ``tube``, stats-tube ``name`` and stats
  ``hostname``/``os``/``platform``; 1.12 quoted only ``version``.
- ``reserve-with-timeout`` with a value above 2147483647, negative or not a number: 1.13 says
  BAD_FORMAT; 1.12 read it with strtol (negative = wait forever, text = 0).
The binlog cases run with ``-b`` on a fresh directory and restart the server, mostly with
SIGKILL (a reply means the change reached the kernel, so kill -9 loses nothing). Not runnable
here: the binlog file-size cases (``-s 4096``, 601-byte files: beanstalkd's own file format), the
disk-full case, the v5 upgrade, and peek over a UNIX socket (server tests cover it).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace

from .runner import (
    Close,
    Closed,
    Expect,
    Poll,
    Quiet,
    Restart,
    Send,
    SendRepeat,
    ShutdownWrite,
    Signal,
    Step,
    Transcript,
    steps,
)

T200 = b"t" * 200
U64 = b"18446744073709551615"


def x(conn: str, send: bytes, reply: bytes | re.Pattern[bytes] | Callable[[str], object], timeout: float = 5.0) -> list[Step]:
    """Send one or more commands, expect one reply."""
    return [Send(conn, send), Expect(conn, reply, timeout)]  # type: ignore[arg-type]


def only(dialect: str, *items: Step | list[Step]) -> list[Step]:
    """Steps that run only against servers of ``dialect``."""
    return [replace(s, dialects=frozenset({dialect})) for s in steps(*items)]


def _q(dialect: str, value: bytes) -> bytes:
    """A string value as the dialect prints it in stats-job / stats-tube."""
    return b'"' + value + b'"' if dialect == "1.13" else value


def _yaml(pairs: list[tuple[bytes, bytes]], tail: bytes = b"") -> re.Pattern[bytes]:
    body = b"".join(re.escape(k) + b": " + v + b"\n" for k, v in pairs)
    return re.compile(rb"OK \d+\r\n---\n" + body + tail + rb"\r\n")


def job_yaml(id: int, *, tube: bytes = b"default", state: bytes = b"ready", pri: int = 0,
             delay: int = 0, ttr: int = 10, time_left: bytes = rb"\d+", reserves: int | bytes = 0,
             timeouts: int | bytes = 0, releases: int | bytes = 0, buries: int | bytes = 0,
             kicks: int | bytes = 0) -> Callable[[str], re.Pattern[bytes]]:  # fmt: skip
    """stats-job reply pattern (14 keys, exact order); age and file are any number.
    Counts are ints, or regexes (bytes) where servers may differ after a restart."""

    def pattern(dialect: str) -> re.Pattern[bytes]:
        d = lambda n: n if isinstance(n, bytes) else str(n).encode()  # noqa: E731
        return _yaml([
            (b"id", d(id)), (b"tube", re.escape(_q(dialect, tube))), (b"state", state),
            (b"pri", d(pri)), (b"age", rb"\d+"), (b"delay", d(delay)), (b"ttr", d(ttr)),
            (b"time-left", time_left), (b"file", rb"\d+"), (b"reserves", d(reserves)),
            (b"timeouts", d(timeouts)), (b"releases", d(releases)), (b"buries", d(buries)),
            (b"kicks", d(kicks)),
        ])  # fmt: skip

    return pattern


TUBE_KEYS = (
    b"current-jobs-urgent", b"current-jobs-ready", b"current-jobs-reserved",
    b"current-jobs-delayed", b"current-jobs-buried", b"total-jobs", b"current-using",
    b"current-watching", b"current-waiting", b"cmd-delete", b"cmd-pause-tube", b"pause",
    b"pause-time-left",
)  # fmt: skip


def tube_yaml(name: bytes, **values: int | bytes) -> Callable[[str], re.Pattern[bytes]]:
    """stats-tube reply pattern; keys given (with _ for -) must have that value, others any."""
    want = {k.replace("_", "-").encode(): v for k, v in values.items()}

    def pattern(dialect: str) -> re.Pattern[bytes]:
        pairs = [(b"name", re.escape(_q(dialect, name)))]
        for k in TUBE_KEYS:
            v = want.get(k, rb"-?\d+")
            pairs.append((k, str(v).encode() if isinstance(v, int) else v))
        return _yaml(pairs)

    return pattern


STATS_KEYS = (
    b"current-jobs-urgent", b"current-jobs-ready", b"current-jobs-reserved",
    b"current-jobs-delayed", b"current-jobs-buried", b"cmd-put", b"cmd-peek", b"cmd-peek-ready",
    b"cmd-peek-delayed", b"cmd-peek-buried", b"cmd-reserve", b"cmd-reserve-with-timeout",
    b"cmd-delete", b"cmd-release", b"cmd-use", b"cmd-watch", b"cmd-ignore", b"cmd-bury",
    b"cmd-kick", b"cmd-touch", b"cmd-stats", b"cmd-stats-job", b"cmd-stats-tube",
    b"cmd-list-tubes", b"cmd-list-tube-used", b"cmd-list-tubes-watched", b"cmd-pause-tube",
    b"job-timeouts", b"total-jobs", b"max-job-size", b"current-tubes", b"current-connections",
    b"current-producers", b"current-workers", b"current-waiting", b"total-connections", b"pid",
    b"version", b"rusage-utime", b"rusage-stime", b"uptime", b"binlog-oldest-index",
    b"binlog-current-index", b"binlog-records-migrated", b"binlog-records-written",
    b"binlog-max-size", b"draining", b"id", b"hostname", b"os", b"platform",
)  # fmt: skip
# stalkd's keys after beanstalkd's (beanstalkd has none): role and epoch (docs/standby.md), then
# the optional ones of protocol.stats.OPTIONAL_KEYS (results, the memory budget, replication...).
STALKD_STATS_EXTRA = rb"(?:role: (?:primary|standby|fenced)\nepoch: \d+\n(?:[a-z][a-z-]*: [^\n]*\n)*)?"


def stats_yaml(**values: int | bytes) -> Callable[[str], re.Pattern[bytes]]:
    """stats reply pattern: every key in order, given keys with exact values."""
    want = {k.replace("_", "-").encode(): v for k, v in values.items()}

    def pattern(dialect: str) -> re.Pattern[bytes]:
        quoted = rb'"[^"\n]*"' if dialect == "1.13" else rb"[^\n]*"
        default = {
            b"version": rb'"[0-9.]+"', b"rusage-utime": rb"\d+\.\d{6}", b"rusage-stime": rb"\d+\.\d{6}",
            b"draining": rb"(true|false)", b"id": rb"[0-9a-f]{16}", b"hostname": quoted,
            b"os": quoted, b"platform": quoted,
        }  # fmt: skip
        pairs = []
        for k in STATS_KEYS:
            v = want.get(k, default.get(k, rb"\d+"))
            pairs.append((k, str(v).encode() if isinstance(v, int) else v))
        return _yaml(pairs, STALKD_STATS_EXTRA)

    return pattern


def put(conn: str, body: bytes, id: int, pri: int = 0, delay: int = 0, ttr: int = 10) -> list[Step]:
    return x(conn, b"put %d %d %d %d\r\n%s\r\n" % (pri, delay, ttr, len(body), body), b"INSERTED %d\r\n" % id)


BF = b"BAD_FORMAT\r\n"
UC = b"UNKNOWN_COMMAND\r\n"
NF = b"NOT_FOUND\r\n"


TTR_WHY = (
    "Debian's beanstalkd 1.12 does not reliably expire a TTR while other connections are busy "
    "(probed here: polling stats-job every 20 ms from another connection, the job stayed "
    "reserved with time-left -3 in 4 runs of 5); the expiry steps run against 1.13 only"
)

T = Transcript
TRANSCRIPTS: list[Transcript] = [
    # --- framing and parsing -------------------------------------------------------------
    T("unknown-command", steps(
        x("a", b"foo\r\n", UC), x("a", b"PUT 0 0 0 0\r\n", UC), x("a", b"\r\n", UC),
        x("a", b"use\r\n", UC), x("a", b"delete\r\n", UC), x("a", b"kick\r\n", UC),
        x("a", b"peek\r\n", UC), x("a", b"kick-jobs 1\r\n", UC),
    )),
    T("too-long-command-line", steps(
        x("a", b"x" * 500 + b"\r\n", BF), put("a", b"a", 1),
    )),
    T("line-window-quirks", steps(
        # 222 chars + CRLF = 224 bytes: a whole line, parsed (unknown)
        x("a", b"x" * 222 + b"\r\n", UC),
        # 223 chars: the CR falls outside the 224-byte window and is discarded with it; the
        # next line end is use a's, so one BAD_FORMAT covers both lines
        Send("a", b"x" * 223 + b"\r\nuse a\r\nuse b\r\n"), Expect("a", BF), Expect("a", b"USING b\r\n"),
        x("a", b"list-tube-used\r\n", b"USING b\r\n"),
    ), why="beanstalkd scans a fixed 224-byte command buffer; stalkd reproduces its windows"),
    T("bare-cr-in-line", steps(
        Send("a", b"use a\rb\r\n"), Quiet("a"),
        x("a", b"y" * 215 + b"\r\nuse c\r\n", BF), Expect("a", b"USING c\r\n"),
    ), why="the line end is the first CR of the window; a bare CR defers it to the window's end"),
    T("two-commands-one-packet", steps(
        Send("a", b"use a\r\nuse b\r\n"), Expect("a", b"USING a\r\n"), Expect("a", b"USING b\r\n"),
    )),
    T("pipelined-puts-and-reserve", steps(
        Send("a", b"put 0 0 10 1\r\na\r\nput 0 0 10 1\r\nb\r\nreserve\r\ndelete 1\r\n"),
        Expect("a", b"INSERTED 1\r\n"), Expect("a", b"INSERTED 2\r\n"),
        Expect("a", b"RESERVED 1 1\r\na\r\n"), Expect("a", b"DELETED\r\n"),
    )),
    T("tube-names", steps(
        x("a", b"use x_y\r\n", b"USING x_y\r\n"),
        x("a", b"use ABCabc019-+/;.$_()\r\n", b"USING ABCabc019-+/;.$_()\r\n"),
        x("a", b"use " + T200 + b"\r\n", b"USING " + T200 + b"\r\n"),
        x("a", b"use " + T200 + b"t\r\n", BF),
        x("a", b"use -a\r\n", BF), x("a", b"use a-\r\n", b"USING a-\r\n"),
        x("a", b"use \r\n", BF), x("a", b"use  x\r\n", BF), x("a", b"use foo bar\r\n", BF),
        x("a", b"use a*b\r\n", BF), x("a", b"watch a b\r\n", BF), x("a", b"ignore a*\r\n", BF),
        x("a", b"stats-tube \r\n", BF), x("a", b"use a\x00b\r\n", BF),
    )),
    T("longest-command", steps(
        x("a", b"use " + T200 + b"\r\n", b"USING " + T200 + b"\r\n"),
        x("a", b"pause-tube " + T200 + b" 4294967295\r\n", b"PAUSED\r\n"),
        x("a", b"pause-tube " + T200 + b"t 1\r\n", BF),
    )),
    T("trailing-text-and-exact-commands", steps(
        x("a", b"reservex\r\n", BF), x("a", b"reserve \r\n", BF), x("a", b"statsx\r\n", BF),
        x("a", b"stats \r\n", BF), x("a", b"peek-ready \r\n", BF), x("a", b"peek-delayedx\r\n", BF),
        x("a", b"peek-buried 1\r\n", BF), x("a", b"list-tubes \r\n", BF),
        x("a", b"list-tube-usedx\r\n", BF), x("a", b"list-tubes-watched x\r\n", BF),
        x("a", b"reserve-with-timeout\r\n", BF), x("a", b"reserve-job\r\n", BF),
        x("a", b"stats-job\r\n", BF), x("a", b"delete 1 \r\n", BF),
        x("a", b"pause-tube\r\n", BF), x("a", b"pause-tube default\r\n", BF),
        x("a", b"pause-tubedefault 0\r\n", b"PAUSED\r\n"),
    )),
    T("quit-is-a-prefix", steps(Send("a", b"quitx\r\n"), Closed("a"))),
    T("quit", steps(Send("a", b"quit\r\nuse a\r\n"), Closed("a"))),
    # --- put ------------------------------------------------------------------------------
    T("put-reserve-delete", steps(
        put("a", b"hello", 1, pri=5, ttr=60),
        x("a", b"reserve\r\n", b"RESERVED 1 5\r\nhello\r\n"),
        x("a", b"delete 1\r\n", b"DELETED\r\n"), x("a", b"delete 1\r\n", NF),
    )),
    T("zero-byte-job", steps(
        x("a", b"put 0 0 0 0\r\n\r\n", b"INSERTED 1\r\n"),
        x("a", b"reserve\r\n", b"RESERVED 1 0\r\n\r\n"),
        x("a", b"release 1 0 0\r\n", b"RELEASED\r\n"),
        x("a", b"peek 1\r\n", b"FOUND 1 0\r\n\r\n"),
        x("a", b"delete 1\r\n", b"DELETED\r\n"),
    )),
    T("binary-body", steps(
        put("a", b"\r\n\x00\xff\r\n", 1),
        x("a", b"peek 1\r\n", b"FOUND 1 6\r\n\r\n\x00\xff\r\n\r\n"),
    )),
    T("job-too-big", steps(
        x("a", b"put 0 0 0 11\r\ndelete 9999\r\n", b"JOB_TOO_BIG\r\n"),
        put("a", b"a", 1),
        x("a", b"put 0 0 0 11x\r\nhello world\r\n", b"JOB_TOO_BIG\r\n"),  # size checked first
        put("a", b"0123456789", 2),
    ), options=("-z", "10")),
    T("job-too-big-default-limit", steps(
        x("a", b"put 0 0 10 65536\r\n" + b"a" * 65536 + b"\r\n", b"JOB_TOO_BIG\r\n"),
        put("a", b"b" * 65535, 1),
    )),
    T("job-too-big-above-1gib", steps(
        # -z above 1 GiB is clamped to 1 GiB; a 1 GiB + 1 body is read and thrown away
        Send("a", b"put 0 0 10 1073741825\r\n"),
        SendRepeat("a", b"z" * (1 << 20), 1024), Send("a", b"z\r\nuse after\r\n"),
        Expect("a", b"JOB_TOO_BIG\r\n", timeout=60), Expect("a", b"USING after\r\n"),
    ), options=("-z", "2000000000"), why="the skipped body is never buffered by the server",
       slow=True),  # beanstalkd discards it 1 KiB per read: ~8 s here
    T("put-bad-format-no-body-skip", steps(
        x("a", b"put 0 0 0 4294967296\r\n", BF),
        x("a", b"put 0 0 0 10b\r\nuse t\r\n", BF), Expect("a", b"USING t\r\n"),
        x("a", b"put 0 0 0 --!@#$%^&&**()\r\n", BF),
        x("a", b"put 512 -1 100 0\r\n", BF),
        x("a", b"put -1 0 0 0\r\n", BF), x("a", b"put -1kkdj9djjkd9 0 0 0\r\n", BF),
        x("a", b"put 4294967296 0 0 0\r\n", BF),
        x("a", b"put 0 0 1 2 \r\nhi\r\n", BF), Expect("a", UC),
        x("a", b"put 4294967295 0 1 0\r\n\r\n", b"INSERTED 1\r\n"),
        x("a", b"put 0 0 0\r\n", BF), x("a", b"put\r\n", UC),
        # cmd-put counts a line whose four numbers parse, before the text-after-size check:
        # "10b", "2 " and the INSERTED one; producer only for the INSERTED one
        x("a", b"stats\r\n", stats_yaml(cmd_put=3, current_producers=1)),
    )),
    T("expected-crlf", steps(
        x("a", b"put 0 0 0 3\r\nabcd\r\n", b"EXPECTED_CRLF\r\n"),
        # the leftover "\n" is glued to the next line
        x("a", b"use a\r\n", UC),
        # the failed put used up id 1, so the next job is 2
        put("a", b"x", 2),
    ), why="an id is allocated before the body is read, so EXPECTED_CRLF consumes one"),
    T("ttr-values", steps(
        *(step for i, ttr in enumerate((120, 4294, 4295, 4296, 4297, 5000, 21600), start=1)
          for step in put("a", b"a", i, ttr=ttr) + x("a", b"stats-job %d\r\n" % i, job_yaml(i, ttr=ttr, time_left=b"0"))),
        put("a", b"a", 8, ttr=0), x("a", b"stats-job 8\r\n", job_yaml(8, ttr=1, time_left=b"0")),
        put("a", b"a", 9, pri=4294967295, delay=0, ttr=4294967295),
        x("a", b"stats-job 9\r\n", job_yaml(9, pri=4294967295, ttr=4294967295, time_left=b"0")),
    )),
    T("delayed-job-becomes-ready", steps(
        put("a", b"d", 1, delay=1),
        x("a", b"stats-tube default\r\n", tube_yaml(b"default", current_jobs_ready=0, current_jobs_delayed=1, total_jobs=1)),
        x("a", b"stats-job 1\r\n", job_yaml(1, state=b"delayed", delay=1, time_left=rb"[01]")),
        Poll("a", b"stats-tube default\r\n", tube_yaml(b"default", current_jobs_ready=1, current_jobs_delayed=0, total_jobs=1)),
        x("a", b"reserve-with-timeout 0\r\n", b"RESERVED 1 1\r\nd\r\n"),
    )),
    T("draining", steps(
        put("a", b"a", 1),
        Signal("a"),
        Poll("b", b"stats\r\n", stats_yaml(draining=b"true")),
        x("a", b"put 0 0 10 1\r\nb\r\n", b"DRAINING\r\n"),
        x("a", b"reserve\r\n", b"RESERVED 1 1\r\na\r\n"),
    ), why="SIGUSR1 turns on drain mode; puts then get DRAINING, the body is still read"),
    # --- peek -----------------------------------------------------------------------------
    T("peek", steps(
        put("a", b"a", 1),
        x("a", b"peek 1\r\n", b"FOUND 1 1\r\na\r\n"), x("a", b"peek  1\r\n", b"FOUND 1 1\r\na\r\n"),
        x("a", b"peek 2\r\n", NF), x("a", b"peek 0\r\n", NF), x("a", b"peek " + U64 + b"\r\n", NF),
        x("a", b"peek 18446744073709551616\r\n", BF), x("a", b"peek " + b"1" * 50 + b"\r\n", BF),
        x("a", b"peek foo111\r\n", BF), x("a", b"peek 111foo\r\n", BF), x("a", b"peek -1\r\n", BF),
        x("a", b"peek +1\r\n", BF),
    )),
    T("peek-ready-delayed-buried", steps(
        x("a", b"peek-ready\r\n", NF), x("a", b"peek-delayed\r\n", NF), x("a", b"peek-buried\r\n", NF),
        put("a", b"late", 1, delay=99), put("a", b"soon", 2, delay=1),
        x("a", b"peek-delayed\r\n", b"FOUND 2 4\r\nsoon\r\n"),
        put("a", b"low", 3, pri=10), put("a", b"high", 4, pri=1), put("a", b"high2", 5, pri=1),
        x("a", b"peek-ready\r\n", b"FOUND 4 4\r\nhigh\r\n"),
        x("a", b"reserve\r\n", b"RESERVED 4 4\r\nhigh\r\n"), x("a", b"reserve\r\n", b"RESERVED 5 5\r\nhigh2\r\n"),
        x("a", b"bury 5 0\r\n", b"BURIED\r\n"), x("a", b"bury 4 0\r\n", b"BURIED\r\n"),
        x("a", b"peek-buried\r\n", b"FOUND 5 5\r\nhigh2\r\n"),
        x("a", b"use other\r\n", b"USING other\r\n"),
        x("a", b"peek-ready\r\n", NF), x("a", b"peek-buried\r\n", NF),
        x("a", b"peek 4\r\n", b"FOUND 4 4\r\nhigh\r\n"),  # peek <id> looks in every tube
    )),
    # --- bury and kick --------------------------------------------------------------------
    T("bury-and-kick", steps(
        put("a", b"a", 1),
        x("a", b"bury 1 0\r\n", NF),
        x("a", b"reserve\r\n", b"RESERVED 1 1\r\na\r\n"),
        x("a", b"bury 1 0\r\n", b"BURIED\r\n"),
        x("a", b"peek-buried\r\n", b"FOUND 1 1\r\na\r\n"),
        x("a", b"kick 1\r\n", b"KICKED 1\r\n"),
        x("a", b"peek-ready\r\n", b"FOUND 1 1\r\na\r\n"),
        x("a", b"kick 1\r\n", b"KICKED 0\r\n"),
        x("a", b"stats-job 1\r\n", job_yaml(1, reserves=1, buries=1, kicks=1, time_left=b"0")),
    )),
    T("kick-buried-before-delayed", steps(
        put("a", b"a", 1), put("a", b"b", 2, delay=100), put("a", b"c", 3, delay=100),
        x("a", b"reserve\r\n", b"RESERVED 1 1\r\na\r\n"), x("a", b"bury 1 0\r\n", b"BURIED\r\n"),
        x("a", b"kick 10\r\n", b"KICKED 1\r\n"), x("a", b"kick 10\r\n", b"KICKED 2\r\n"),
        x("a", b"kick 10\r\n", b"KICKED 0\r\n"),
    )),
    T("kick-integer-quirks", steps(
        put("a", b"a", 1, delay=100), put("a", b"b", 2, delay=100), put("a", b"c", 3, delay=100),
        x("a", b"kick 1abc\r\n", b"KICKED 1\r\n"),
        x("a", b"kick -1\r\n", b"KICKED 2\r\n"),
        x("a", b"kick x\r\n", BF), x("a", b"kick \r\n", BF),
    ), why="kick reads its bound with strtoul: trailing text ignored, -1 wraps to the maximum"),
    T("kick-job", steps(
        x("a", b"kick-job a111\r\n", BF), x("a", b"kick-job 111a\r\n", BF), x("a", b"kick-job !@#\r\n", BF),
        put("a", b"a", 1), x("a", b"kick-job 1\r\n", NF),  # ready: NOT_FOUND
        x("a", b"reserve\r\n", b"RESERVED 1 1\r\na\r\n"), x("a", b"kick-job 1\r\n", NF),  # reserved
        x("a", b"bury 1 0\r\n", b"BURIED\r\n"),
        x("a", b"kick-job 1\r\n", b"KICKED\r\n"), x("a", b"kick-job 1\r\n", NF),
        put("a", b"d", 2, delay=100),
        x("a", b"kick-job 2\r\n", b"KICKED\r\n"), x("a", b"kick-job 2\r\n", NF),
        x("a", b"kick-job 99\r\n", NF),
    )),
    # --- touch, bury, release formats -----------------------------------------------------
    T("touch", steps(
        x("a", b"touch a111\r\n", BF), x("a", b"touch 111a\r\n", BF), x("a", b"touch !@#\r\n", BF),
        x("a", b"touch 1\r\n", NF), x("a", b"touch 100000000000000\r\n", NF),
        put("a", b"a", 1, ttr=10),
        x("a", b"touch 1\r\n", NF),  # not reserved
        x("a", b"reserve\r\n", b"RESERVED 1 1\r\na\r\n"),
        x("a", b"stats-job 1\r\n", job_yaml(1, state=b"reserved", reserves=1, time_left=rb"(9|10)")),
        x("a", b"touch 1\r\n", b"TOUCHED\r\n"),
        x("b", b"touch 1\r\n", NF),  # reserved by someone else
    )),
    T("bury-formats", steps(
        x("a", b"bury 111abc 2\r\n", BF), x("a", b"bury 111\r\n", BF), x("a", b"bury 111 222abc\r\n", BF),
        x("a", b"bury 111 2\r\n", NF),
    )),
    T("release-formats", steps(
        x("a", b"release 1x 2 3\r\n", BF), x("a", b"release 1 2x 3\r\n", BF),
        x("a", b"release 1 2 3x\r\n", BF), x("a", b"release 1 2\r\n", BF),
        x("a", b"release 1 4294967296 0\r\n", BF), x("a", b"release 1 2 3\r\n", NF),
        put("a", b"a", 1), x("a", b"release 1 2 0\r\n", NF),  # not reserved
        x("a", b"reserve\r\n", b"RESERVED 1 1\r\na\r\n"),
        x("b", b"release 1 2 0\r\n", NF),  # reserved by someone else
        x("a", b"release 1 7 0\r\n", b"RELEASED\r\n"),
        x("a", b"stats-job 1\r\n", job_yaml(1, pri=7, reserves=1, releases=1, time_left=b"0")),
    )),
    T("release-with-delay", steps(
        put("a", b"a", 1),
        x("a", b"reserve\r\n", b"RESERVED 1 1\r\na\r\n"),
        x("a", b"release 1 0 1\r\n", b"RELEASED\r\n"),
        x("a", b"stats-job 1\r\n", job_yaml(1, state=b"delayed", delay=1, reserves=1, releases=1, time_left=rb"[01]")),
        x("a", b"reserve-with-timeout 5\r\n", b"RESERVED 1 1\r\na\r\n"),
    )),
    # --- delete ---------------------------------------------------------------------------
    T("delete", steps(
        put("a", b"a", 1), x("a", b"delete 1\r\n", b"DELETED\r\n"),
        put("a", b"b", 2), x("a", b"reserve\r\n", b"RESERVED 2 1\r\nb\r\n"),
        x("b", b"delete 2\r\n", NF),  # reserved by another connection
        x("a", b"delete 2\r\n", b"DELETED\r\n"),
        put("a", b"c", 3, delay=100), x("b", b"delete 3\r\n", b"DELETED\r\n"),
        put("a", b"d", 4), x("a", b"reserve\r\n", b"RESERVED 4 1\r\nd\r\n"), x("a", b"bury 4 0\r\n", b"BURIED\r\n"),
        x("b", b"delete 4\r\n", b"DELETED\r\n"),
        x("a", b"delete 18446744073709551616\r\n", BF), x("a", b"delete foo111\r\n", BF),
        x("a", b"delete 111foo\r\n", BF), x("a", b"delete " + U64 + b"\r\n", NF),
    )),
    # --- pause ----------------------------------------------------------------------------
    T("pause-tube-delays-reserve", steps(
        put("a", b"a", 1),
        x("a", b"pause-tube default 1\r\n", b"PAUSED\r\n"),
        x("a", b"stats-tube default\r\n", tube_yaml(b"default", pause=1, cmd_pause_tube=1, pause_time_left=rb"[01]")),
        Send("a", b"reserve-with-timeout 5\r\n"), Quiet("a", 0.3),
        Expect("a", b"RESERVED 1 1\r\na\r\n"),
        x("a", b"pause-tube nosuch 1\r\n", NF),
    )),
    T("unpause-wakes-reserver", steps(
        x("a", b"pause-tube default 86400\r\n", b"PAUSED\r\n"),
        put("a", b"a", 1),
        Send("b", b"reserve\r\n"), Quiet("b", 0.3),
        x("a", b"pause-tube default 0\r\n", b"PAUSED\r\n"),
        Expect("b", b"RESERVED 1 1\r\na\r\n", timeout=2),
    )),
    # --- tubes and stats ------------------------------------------------------------------
    T("reserve-across-watched-tubes", steps(
        x("a", b"use abc\r\n", b"USING abc\r\n"), put("a", b"abc", 1, pri=999999),
        x("a", b"use def\r\n", b"USING def\r\n"), put("a", b"def", 2, pri=99),
        x("b", b"watch abc\r\n", b"WATCHING 2\r\n"), x("b", b"watch def\r\n", b"WATCHING 3\r\n"),
        x("b", b"reserve\r\n", b"RESERVED 2 3\r\ndef\r\n"),
        x("b", b"reserve\r\n", b"RESERVED 1 3\r\nabc\r\n"),
    )),
    T("stats-job", steps(
        put("a", b"a", 1, pri=3, ttr=10),
        x("a", b"stats-job 1\r\n", job_yaml(1, pri=3, time_left=b"0")),
        x("a", b"stats-job 111ABC\r\n", BF), x("a", b"stats-job 111 222\r\n", BF),
        x("a", b"stats-job 2\r\n", NF),
        x("a", b"use t\r\n", b"USING t\r\n"), put("a", b"b", 2),
        x("a", b"stats-job 2\r\n", job_yaml(2, tube=b"t", time_left=b"0")),
    )),
    T("stats-tube", steps(
        x("a", b"use tubea\r\n", b"USING tubea\r\n"), put("a", b"a", 1),
        x("a", b"delete 1\r\n", b"DELETED\r\n"),
        x("a", b"stats-tube tubea\r\n", tube_yaml(b"tubea", total_jobs=1, current_using=1, current_watching=0, cmd_delete=1, current_jobs_ready=0)),
        x("a", b"stats-tube default\r\n", tube_yaml(b"default", total_jobs=0, current_using=0, current_watching=1, cmd_delete=0, pause=0, pause_time_left=0)),
        x("a", b"stats-tube nosuch\r\n", NF),
        x("a", b"stats-tube a*\r\n", BF),
    )),
    # total-connections is not checked: the fixture's readiness probe is a connection too
    T("stats-fresh-server", steps(
        x("a", b"stats\r\n", stats_yaml(cmd_stats=1, current_tubes=1, current_connections=1,
                                       current_jobs_ready=0, cmd_put=0,
                                       draining=b"false", uptime=rb"[01]", max_job_size=65535)),
    )),
    T("stats-counts", steps(
        put("a", b"a", 1), put("a", b"b", 2, pri=2000), put("a", b"c", 3, delay=100),
        x("a", b"reserve\r\n", b"RESERVED 1 1\r\na\r\n"), x("a", b"peek 2\r\n", b"FOUND 2 1\r\nb\r\n"),
        x("a", b"stats\r\n", stats_yaml(current_jobs_urgent=0, current_jobs_ready=1, current_jobs_reserved=1,
                                       current_jobs_delayed=1, current_jobs_buried=0, cmd_put=3, cmd_peek=1,
                                       cmd_reserve=1, cmd_stats=1, total_jobs=3, current_producers=1,
                                       current_workers=1, current_connections=1)),
    )),
    T("list-tubes", steps(
        x("a", b"watch w\r\n", b"WATCHING 2\r\n"), x("a", b"use u\r\n", b"USING u\r\n"),
        x("a", b"list-tubes\r\n", b"OK 22\r\n---\n- default\n- w\n- u\n\r\n"),
        x("a", b"list-tube-used\r\n", b"USING u\r\n"),
        x("a", b"list-tubes-watched\r\n", b"OK 18\r\n---\n- default\n- w\n\r\n"),
        x("a", b"ignore default\r\n", b"WATCHING 1\r\n"),
        x("a", b"ignore w\r\n", b"NOT_IGNORED\r\n"),
        x("a", b"list-tubes-watched\r\n", b"OK 8\r\n---\n- w\n\r\n"),
    )),
    T("watch-and-ignore", steps(
        x("a", b"ignore nosuch\r\n", b"WATCHING 1\r\n"),
        x("a", b"watch t1\r\n", b"WATCHING 2\r\n"), x("a", b"watch t1\r\n", b"WATCHING 2\r\n"),
        x("a", b"ignore t1\r\n", b"WATCHING 1\r\n"), x("a", b"ignore default\r\n", b"NOT_IGNORED\r\n"),
    )),
    # --- reserve and deadlines ------------------------------------------------------------
    T("reserve-with-timeout-zero", steps(
        x("a", b"reserve-with-timeout 0\r\n", b"TIMED_OUT\r\n"),
        x("a", b"reserve-with-timeout 0abc\r\n", b"TIMED_OUT\r\n"),
        put("a", b"a", 1), x("a", b"reserve-with-timeout 0\r\n", b"RESERVED 1 1\r\na\r\n"),
    )),
    T("reserve-with-timeout-dialects", steps(
        only("1.13", x("a", b"reserve-with-timeout 2147483648\r\n", BF),
             x("a", b"reserve-with-timeout -1\r\n", BF),
             x("a", b"reserve-with-timeout x\r\n", BF)),
        only("1.12", x("a", b"reserve-with-timeout x\r\n", b"TIMED_OUT\r\n"),
             Send("b", b"reserve-with-timeout 2147483648\r\n"), Quiet("b", 0.3),
             Send("c", b"reserve-with-timeout -1\r\n"), Quiet("c", 0.3),
             # strtol's long is truncated to int: 2**32 becomes 0
             x("a", b"reserve-with-timeout 4294967296\r\n", b"TIMED_OUT\r\n")),
        only("1.13", x("a", b"reserve-with-timeout 4294967296\r\n", BF)),
    ), why="1.13 reads the timeout as a u32 <= INT_MAX; 1.12 used strtol and blocked"),
    T("reserve-timeout-while-other-conn-watches", steps(
        Send("a", b"reserve-with-timeout 1\r\n"),
        x("b", b"watch foo\r\n", b"WATCHING 2\r\n"),
        Expect("a", b"TIMED_OUT\r\n", timeout=5),
    )),
    T("blocked-reserve-gets-new-job", steps(
        Send("b", b"reserve\r\n"), Quiet("b", 0.2),
        put("a", b"new", 1),
        Expect("b", b"RESERVED 1 3\r\nnew\r\n", timeout=2),
    )),
    T("deadline-soon", steps(
        put("a", b"a", 1, ttr=1),
        x("a", b"reserve\r\n", b"RESERVED 1 1\r\na\r\n"),
        x("a", b"reserve-with-timeout 1\r\n", b"DEADLINE_SOON\r\n"),
        x("a", b"stats-job 1\r\n", job_yaml(1, state=b"reserved", ttr=1, reserves=1, time_left=rb"[01]")),
        x("a", b"release 1 0 0\r\n", b"RELEASED\r\n"),
        x("a", b"stats-job 1\r\n", job_yaml(1, ttr=1, reserves=1, releases=1, time_left=b"0")),
    )),
    T("ttr-expiry-releases-job", steps(
        put("a", b"a", 1, ttr=1),
        x("a", b"reserve\r\n", b"RESERVED 1 1\r\na\r\n"),
        only("1.13",
             Poll("b", b"stats-job 1\r\n", job_yaml(1, state=b"ready", ttr=1, reserves=1, timeouts=1, time_left=b"0")),
             x("b", b"stats\r\n", stats_yaml(job_timeouts=1, current_jobs_ready=1, current_jobs_reserved=0)),
             x("b", b"reserve-with-timeout 0\r\n", b"RESERVED 1 1\r\na\r\n"),
             x("a", b"delete 1\r\n", NF)),  # no longer a's job
    ), why=TTR_WHY),
    T("ttr-expiry-wakes-waiting-reserver", steps(
        put("a", b"a", 1, ttr=1),
        x("a", b"reserve\r\n", b"RESERVED 1 1\r\na\r\n"),
        only("1.13",
             x("b", b"reserve-with-timeout 5\r\n", b"RESERVED 1 1\r\na\r\n"),
             x("b", b"stats-job 1\r\n", job_yaml(1, state=b"reserved", ttr=1, reserves=2, timeouts=1))),
    ), why=TTR_WHY),
    T("reserve-job", steps(
        put("a", b"a", 1, delay=100, ttr=1),
        x("a", b"reserve-job 1\r\n", b"RESERVED 1 1\r\na\r\n"),
        x("a", b"reserve-job 1\r\n", NF), x("a", b"reserve-job 99\r\n", NF),
        x("a", b"reserve-with-timeout 0\r\n", b"DEADLINE_SOON\r\n"),
        Poll("a", b"stats-job 1\r\n", job_yaml(1, state=b"ready", delay=100, ttr=1, reserves=1, timeouts=1, time_left=b"0")),
    )),
    T("reserve-job-delayed-and-buried", steps(
        put("a", b"a", 1, delay=100), put("a", b"b", 2, delay=100),
        x("a", b"reserve-job 1\r\n", b"RESERVED 1 1\r\na\r\n"),
        x("a", b"release 1 0 0\r\n", b"RELEASED\r\n"),
        x("a", b"stats-job 1\r\n", job_yaml(1, state=b"ready", delay=0, reserves=1, releases=1, time_left=b"0")),
        x("a", b"reserve-job 1\r\n", b"RESERVED 1 1\r\na\r\n"), x("a", b"bury 1 0\r\n", b"BURIED\r\n"),
        x("a", b"reserve-job 2\r\n", b"RESERVED 2 1\r\nb\r\n"), x("a", b"bury 2 0\r\n", b"BURIED\r\n"),
        x("a", b"reserve-job 2\r\n", b"RESERVED 2 1\r\nb\r\n"), x("a", b"reserve-job 1\r\n", b"RESERVED 1 1\r\na\r\n"),
        x("a", b"release 1 0 0\r\n", b"RELEASED\r\n"), x("a", b"release 2 0 0\r\n", b"RELEASED\r\n"),
        x("a", b"peek-ready\r\n", b"FOUND 1 1\r\na\r\n"),
        x("a", b"reserve-job 1x\r\n", BF),
    )),
    T("half-close-times-out-waiting-reserve", steps(
        Send("a", b"reserve\r\n"), Quiet("a", 0.2),
        ShutdownWrite("a"),
        Expect("a", b"TIMED_OUT\r\n", timeout=5),
    )),
    T("deadline-soon-wakes-waiting-reserver", steps(
        put("a", b"a", 1, ttr=3),
        x("a", b"reserve\r\n", b"RESERVED 1 1\r\na\r\n"),
        # no other job: the blocked reserve ends with DEADLINE_SOON 1 s before the TTR ends
        Send("a", b"reserve\r\n"), Quiet("a", 0.3),
        Expect("a", b"DEADLINE_SOON\r\n", timeout=5),
        x("a", b"stats-job 1\r\n", job_yaml(1, state=b"reserved", ttr=3, reserves=1, time_left=rb"[01]")),
    )),
    T("waiter-gets-jobs-of-its-watched-tubes-only", steps(
        x("b", b"watch x\r\n", b"WATCHING 2\r\n"), x("b", b"ignore default\r\n", b"WATCHING 1\r\n"),
        Send("b", b"reserve\r\n"), Send("c", b"reserve\r\n"), Quiet("c", 0.2),
        put("a", b"d", 1),
        Expect("c", b"RESERVED 1 1\r\nd\r\n"), Quiet("b", 0.2),
        x("a", b"use x\r\n", b"USING x\r\n"), put("a", b"x", 2),
        Expect("b", b"RESERVED 2 1\r\nx\r\n"),
    )),
    T("paused-tube-still-serves-peek-kick-delete-reserve-job", steps(
        put("a", b"a", 1), put("a", b"b", 2), put("a", b"c", 3, delay=100),
        x("a", b"pause-tube default 100\r\n", b"PAUSED\r\n"),
        x("a", b"reserve-with-timeout 0\r\n", b"TIMED_OUT\r\n"),
        x("a", b"peek-ready\r\n", b"FOUND 1 1\r\na\r\n"),
        x("a", b"reserve-job 1\r\n", b"RESERVED 1 1\r\na\r\n"),
        x("a", b"delete 2\r\n", b"DELETED\r\n"),
        x("a", b"kick 1\r\n", b"KICKED 1\r\n"),
        x("a", b"stats-tube default\r\n", tube_yaml(b"default", current_jobs_ready=1, current_jobs_reserved=1,
                                                     current_jobs_delayed=0, pause=100, cmd_pause_tube=1,
                                                     pause_time_left=rb"(99|100)")),
    )),
    T("tubes-come-and-go", steps(
        x("a", b"use t\r\n", b"USING t\r\n"),
        x("a", b"list-tubes\r\n", b"OK 18\r\n---\n- default\n- t\n\r\n"),
        x("a", b"use default\r\n", b"USING default\r\n"),
        x("a", b"list-tubes\r\n", b"OK 14\r\n---\n- default\n\r\n"),
        x("a", b"stats-tube t\r\n", NF),
        # a job keeps its tube alive
        x("a", b"use j\r\n", b"USING j\r\n"), put("a", b"a", 1),
        x("a", b"use default\r\n", b"USING default\r\n"),
        x("a", b"list-tubes\r\n", b"OK 18\r\n---\n- default\n- j\n\r\n"),
        x("a", b"delete 1\r\n", b"DELETED\r\n"),
        x("a", b"list-tubes\r\n", b"OK 14\r\n---\n- default\n\r\n"),
        # removing a tube moves the last one into its slot
        x("a", b"watch a\r\n", b"WATCHING 2\r\n"), x("a", b"watch b\r\n", b"WATCHING 3\r\n"),
        x("a", b"watch c\r\n", b"WATCHING 4\r\n"), x("a", b"ignore a\r\n", b"WATCHING 3\r\n"),
        x("a", b"list-tubes\r\n", b"OK 22\r\n---\n- default\n- c\n- b\n\r\n"),
        # ignore, stats-tube and pause-tube never create a tube
        x("a", b"ignore z\r\n", b"WATCHING 3\r\n"), x("a", b"pause-tube z 1\r\n", NF),
        x("a", b"stats-tube z\r\n", NF),
        x("a", b"list-tubes\r\n", b"OK 22\r\n---\n- default\n- c\n- b\n\r\n"),
    )),
    # --- binlog: restarts on the same data directory ------------------------------------
    T("binlog-empty-restart", steps(
        Restart("a", kill=False), put("a", b"a", 1), x("a", b"peek 1\r\n", b"FOUND 1 1\r\na\r\n"),
    ), options=("-b", "{dir}")),
    T("binlog-put-kill-delete", steps(
        put("a", b"hello", 1, pri=7, ttr=60),
        Restart("a"),
        x("a", b"stats-job 1\r\n", job_yaml(1, pri=7, ttr=60, time_left=b"0")),
        x("a", b"delete 1\r\n", b"DELETED\r\n"),
        Restart("a"),
        x("a", b"peek 1\r\n", NF),
        # Once every job is deleted beanstalkd may drop the binlog file and start ids again at 1;
        # stalkd never reuses an id. Both are allowed here.
        x("a", b"put 0 0 10 1\r\nx\r\n", re.compile(rb"INSERTED [12]\r\n")),
    ), options=("-b", "{dir}")),
    T("binlog-ids-continue", steps(
        put("a", b"a", 1), put("a", b"b", 2), x("a", b"delete 1\r\n", b"DELETED\r\n"),
        Restart("a"),
        put("a", b"c", 3),
        x("a", b"peek-ready\r\n", b"FOUND 2 1\r\nb\r\n"),
    ), options=("-b", "{dir}")),
    T("binlog-bury-survives", steps(
        x("a", b"use t\r\n", b"USING t\r\n"), put("a", b"a", 1), put("a", b"b", 2),
        x("a", b"watch t\r\n", b"WATCHING 2\r\n"),
        x("a", b"reserve\r\n", b"RESERVED 1 1\r\na\r\n"), x("a", b"bury 1 5\r\n", b"BURIED\r\n"),
        x("a", b"reserve\r\n", b"RESERVED 2 1\r\nb\r\n"),  # reserved: comes back ready
        Restart("a"),
        x("a", b"use t\r\n", b"USING t\r\n"),
        x("a", b"peek-buried\r\n", b"FOUND 1 1\r\na\r\n"),
        x("a", b"peek-ready\r\n", b"FOUND 2 1\r\nb\r\n"),
        x("a", b"stats-job 1\r\n", job_yaml(1, tube=b"t", state=b"buried", pri=5, time_left=b"0",
                                           reserves=rb"\d+", buries=rb"\d+")),  # fmt: skip
        x("a", b"kick 1\r\n", b"KICKED 1\r\n"),
        Restart("a"),
        x("a", b"use t\r\n", b"USING t\r\n"),
        x("a", b"peek-buried\r\n", NF),
    ), options=("-b", "{dir}")),
    T("binlog-read", steps(
        put("a", b"a", 1), put("a", b"b", 2),
        x("a", b"reserve\r\n", b"RESERVED 1 1\r\na\r\n"),
        x("a", b"release 1 0 1\r\n", b"RELEASED\r\n"),
        x("a", b"delete 2\r\n", b"DELETED\r\n"),
        Restart("a"),
        x("a", b"delete 2\r\n", NF),
        x("a", b"reserve-with-timeout 5\r\n", b"RESERVED 1 1\r\na\r\n"),
        x("a", b"delete 1\r\n", b"DELETED\r\n"),
    ), options=("-b", "{dir}"), why="cttest_binlog_read"),
    # --- connections ----------------------------------------------------------------------
    T("close-releases-reserved-job", steps(
        put("a", b"a", 1, ttr=100),
        x("a", b"reserve\r\n", b"RESERVED 1 1\r\na\r\n"),
        Close("a"),
        x("b", b"reserve-with-timeout 1\r\n", b"RESERVED 1 1\r\na\r\n"),
        x("b", b"stats-job 1\r\n", job_yaml(1, state=b"reserved", ttr=100, reserves=2)),
    )),
    T("quit-releases-reserved-job", steps(
        put("a", b"a", 1, ttr=100),
        x("a", b"reserve\r\n", b"RESERVED 1 1\r\na\r\n"),
        Send("a", b"quit\r\n"), Closed("a"),
        x("b", b"reserve-with-timeout 1\r\n", b"RESERVED 1 1\r\na\r\n"),
    )),
]

BY_NAME = {t.name: t for t in TRANSCRIPTS}
assert len(BY_NAME) == len(TRANSCRIPTS), "transcript names must be unique"
