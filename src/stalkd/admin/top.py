"""``stalkd top``: a live full-screen view of a server's tubes, rates and workers.

It speaks the beanstalkd protocol (``stats``, ``list-tubes``, ``stats-tube``), so it works
against Debian's beanstalkd as well as stalkd; given the admin endpoint (``--admin``) it adds
fsync latency and disk use. With ``--admin`` alone, the protocol address is the one the admin
endpoint reports for its server; given both, they must name one server (``stats`` id), or top
refuses rather than mix two servers' figures. ``q`` or Ctrl-C quits; ``i`` shows or hides stalkd's internal tubes
(``stalkd.failed``, ``stalkd.key.*``), hidden by default (``--internal`` starts with them shown).

Top shows a page of tubes that fits the terminal (``View``): ``n``/``p`` page, ``s`` changes the
order (most jobs, name, creation, most ready, most buried) and ``/`` types a search in the
names (Enter ends it, Esc clears it). With the admin endpoint the server chooses the page
(one request, whatever the number of tubes); over the protocol alone every tube's
``stats-tube`` is read and the page chosen here.

``Sample`` holds one reading, ``rows`` turns two readings into rates (a pure function, tested
without a terminal), and ``render`` draws them with rich.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import sys
import time
import urllib.parse
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from stalkd.tubes import is_internal

__all__ = ["main", "Sample", "View", "ORDERS", "choose", "press", "rows", "read_sample"]

_TUBE_KEYS = ("current-jobs-ready", "current-jobs-reserved", "current-jobs-delayed",
              "current-jobs-buried", "current-waiting", "total-jobs", "cmd-delete",
              "pause-time-left")  # fmt: skip


ORDERS = ("jobs", "name", "created", "ready", "buried")
"""The orders ``s`` cycles through (the overview's ``sort`` names)."""


@dataclass
class View:
    """Which tubes top shows: ``limit`` from ``offset`` of those whose name holds ``q``, in
    the order ``sort``; stalkd's own only when ``internal``."""

    offset: int = 0
    limit: int = 20
    sort: str = "jobs"
    q: str = ""
    internal: bool = False
    typing: bool = False  # a search is being typed after "/"


def _jobs(st: dict[str, Any]) -> int:
    return sum(int(st.get(f"current-jobs-{s}", 0)) for s in ("ready", "reserved", "delayed", "buried"))


def choose(tubes: dict[str, dict[str, Any]], view: View) -> tuple[dict[str, dict[str, Any]], int, int]:
    """The page ``view`` asks of ``tubes`` (name -> stats-tube figures, in creation order),
    how many tubes match, and how many internal tubes are hidden.

    >>> t = {"b": {"current-jobs-ready": 1}, "a": {"current-jobs-ready": 5}, "stalkd.failed": {}}
    >>> choose(t, View(sort="name")), choose(t, View(q="a", internal=True))[0]
    (({'a': {'current-jobs-ready': 5}, 'b': {'current-jobs-ready': 1}}, 2, 1), {'a': {'current-jobs-ready': 5}, 'stalkd.failed': {}})
    """
    hidden = 0 if view.internal else sum(1 for name in tubes if is_internal(name))
    names = [n for n in tubes if (view.internal or not is_internal(n)) and view.q in n]
    if view.sort == "name":
        names.sort()
    elif view.sort in ("ready", "buried"):
        names.sort(key=lambda n: -int(tubes[n].get(f"current-jobs-{view.sort}", 0)))
    elif view.sort == "jobs":
        names.sort(key=lambda n: -_jobs(tubes[n]))
    page = names[view.offset:view.offset + view.limit]
    return {n: tubes[n] for n in page}, len(names), hidden


def _figures(row: dict[str, Any]) -> dict[str, Any]:
    """An overview row as the stats-tube figures top reads."""
    return {"current-jobs-ready": row["ready"], "current-jobs-reserved": row["reserved"],
            "current-jobs-delayed": row["delayed"], "current-jobs-buried": row["buried"],
            "current-waiting": row["waiting"], "total-jobs": row["total_jobs"],
            "cmd-delete": row["deletes"], "pause-time-left": row["pause_left"]}


@dataclass
class Sample:
    """One reading of the server at ``at`` (monotonic seconds)."""

    at: float
    stats: dict[str, Any]
    tubes: dict[str, dict[str, Any]]
    admin: dict[str, Any] | None = None  # /api/v1/overview, when the endpoint is known
    errors: list[str] = field(default_factory=list)
    matched: int = 0  # tubes the view's search matches (``tubes`` is the page of them shown)
    hidden: int = 0  # internal tubes left out


def _rate(now: Sample, prev: Sample | None, get: Any) -> float:
    if prev is None or now.at <= prev.at:
        return 0.0
    return max(0.0, float(get(now) - get(prev)) / (now.at - prev.at))


def rows(now: Sample, prev: Sample | None, internal: bool = False) -> list[dict[str, Any]]:
    """Per-tube counts and rates (puts/s, deletes/s) between two samples; stalkd's internal
    tubes only when ``internal``.

    >>> a = Sample(0.0, {}, {"t": {"total-jobs": 10, "cmd-delete": 0}, "stalkd.failed": {}})
    >>> b = Sample(2.0, {}, {"t": {"total-jobs": 30, "cmd-delete": 4}, "stalkd.failed": {}})
    >>> [(r["tube"], r["puts"], r["deletes"]) for r in rows(b, a)]
    [('t', 10.0, 2.0)]
    >>> [r["tube"] for r in rows(b, a, internal=True)]
    ['t', 'stalkd.failed']
    """
    out = []
    for name, st in now.tubes.items():
        if not internal and is_internal(name):
            continue
        old = prev.tubes.get(name) if prev is not None else None
        dt = now.at - prev.at if prev is not None else 0.0
        puts = deletes = 0.0
        if old is not None and dt > 0:
            puts = max(0.0, (st.get("total-jobs", 0) - old.get("total-jobs", 0)) / dt)
            deletes = max(0.0, (st.get("cmd-delete", 0) - old.get("cmd-delete", 0)) / dt)
        out.append({
            "tube": name, "ready": st.get("current-jobs-ready", 0),
            "reserved": st.get("current-jobs-reserved", 0),
            "delayed": st.get("current-jobs-delayed", 0), "buried": st.get("current-jobs-buried", 0),
            "waiting": st.get("current-waiting", 0), "paused": st.get("pause-time-left", 0),
            "puts": puts, "deletes": deletes,
        })  # fmt: skip
    return out


def read_sample(client: Any, admin: Any | None, view: View | None = None) -> Sample:
    """One reading of the page ``view`` asks: from the admin API's overview when given (the
    server chooses the page), else over the protocol (every tube read, the page chosen here)."""
    view = view or View()
    stats = dict(client.stats())
    errors: list[str] = []
    if admin is not None:
        try:
            ov = admin.overview(offset=view.offset, limit=view.limit, sort=view.sort, q=view.q,
                                internal=view.internal)
        except Exception as e:
            errors.append(f"admin endpoint: {e}")
        else:
            if "totals" in ov:  # an older stalkd answers its first tubes whatever was asked
                tubes = {row["name"]: _figures(row) for row in ov["tubes"]}
                hidden = 0 if view.internal else int(ov["totals"]["internal"]["tubes"])
                return Sample(time.monotonic(), stats, tubes, ov, errors,
                              int(ov["tubes_total"]), hidden)
    every: dict[str, dict[str, Any]] = {}
    for name in client.list_tubes():
        with contextlib.suppress(Exception):  # a tube dropped between list and stats
            st = client.stats_tube(name)
            every[name] = {k: st.get(k, 0) for k in _TUBE_KEYS}
    page, matched, hidden = choose(every, view)
    return Sample(time.monotonic(), stats, page, None, errors, matched, hidden)


def press(view: View, keys: bytes, matched: int) -> bool:
    r"""Apply the keys read at once to ``view``; True when it now asks another page (read it
    at once).

    >>> v = View(limit=10)
    >>> press(v, b"n", 25), v.offset, press(v, b"n", 25), press(v, b"n", 25), v.offset
    (True, 10, True, False, 20)
    >>> press(v, b"/ab\x7f", 25), v.typing, press(v, b"c\r", 25), v.q, v.offset, v.typing
    (True, True, True, 'ac', 0, False)
    >>> press(v, b"s", 0), v.sort, press(v, b"i", 0), v.internal
    (True, 'name', True, True)
    """
    asked = False
    for ch in keys.decode("utf-8", "replace"):
        if view.typing:
            if ch in "\r\n":
                view.typing = False
                continue
            if ch == "\x1b":  # Esc: no search (and the rest of an escape sequence ignored)
                view.typing, view.q, view.offset = False, "", 0
                return True
            if ch in "\x7f\x08":
                view.q = view.q[:-1]
            elif ch.isprintable():
                view.q += ch
            else:
                continue
            view.offset, asked = 0, True
            continue
        k = ch.lower()
        if k == "/":
            view.typing = True
        elif k == "n" and view.offset + view.limit < matched:
            view.offset, asked = view.offset + view.limit, True
        elif k == "p" and view.offset > 0:
            view.offset, asked = max(0, view.offset - view.limit), True
        elif k == "s":
            view.sort = ORDERS[(ORDERS.index(view.sort) + 1) % len(ORDERS)] if view.sort in ORDERS else ORDERS[0]
            view.offset, asked = 0, True
        elif k == "i":
            view.internal, view.offset, asked = not view.internal, 0, True
    return asked


def _num(v: float) -> str:
    if v >= 100_000:
        return f"{v / 1000:.0f}k"
    if v >= 10_000:
        return f"{v / 1000:.1f}k"
    return f"{v:.0f}" if v >= 10 or v == int(v) else f"{v:.1f}"


def render(now: Sample, prev: Sample | None, address: str, fsync_prev: tuple[int, float] | None,
           view: View | None = None) -> Any:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    s = now.stats
    total_puts = _rate(now, prev, lambda x: x.stats.get("cmd-put", 0))
    total_reserves = _rate(now, prev, lambda x: x.stats.get("cmd-reserve", 0)
                           + x.stats.get("cmd-reserve-with-timeout", 0))
    total_deletes = _rate(now, prev, lambda x: x.stats.get("cmd-delete", 0))
    head = Text()
    head.append("stalkd top ", style="bold cyan")
    head.append(f"{address}  ")
    head.append(f"{s.get('version', '?')}  up {s.get('uptime', 0)}s  ", style="dim")
    head.append(f"jobs {s.get('current-jobs-ready', 0)} ready / {s.get('current-jobs-reserved', 0)} reserved"
                f" / {s.get('current-jobs-buried', 0)} buried\n")
    head.append(f"puts/s {_num(total_puts)}  reserves/s {_num(total_reserves)}  deletes/s "
                f"{_num(total_deletes)}  ", style="bold")
    head.append(f"connections {s.get('current-connections', 0)}  workers {s.get('current-workers', 0)}"
                f"  waiting {s.get('current-waiting', 0)}  producers {s.get('current-producers', 0)}")
    adm = now.admin
    if adm is not None and adm.get("fsync") is not None:
        f = adm["fsync"]
        count, secs = int(f["count"]), float(f["seconds"])
        if fsync_prev is not None and count > fsync_prev[0]:
            avg = (secs - fsync_prev[1]) / (count - fsync_prev[0])
        else:
            avg = secs / count if count else 0.0
        disk = adm.get("disk", {})
        head.append(f"\nfsync {avg * 1000:.2f} ms avg  WAL {disk.get('wal', 0) / 2**20:.1f} MiB  "
                    f"snapshots {disk.get('snapshot', 0) / 2**20:.1f} MiB  "
                    f"{'ready' if adm.get('ready') else 'NOT READY'}", style="green" if adm.get("ready") else "red")
    view = view or View()
    shown = rows(now, prev, view.internal)
    table = Table(expand=True, header_style="bold", box=None, pad_edge=False)
    # rich would otherwise squeeze the names to the width of the number columns
    table.add_column("TUBE", justify="left", no_wrap=True,
                     min_width=min(40, max((len(r["tube"]) for r in shown), default=4)))
    for col, just in (("READY", "right"), ("RESERVED", "right"),
                      ("DELAYED", "right"), ("BURIED", "right"), ("WAITING", "right"),
                      ("PUTS/S", "right"), ("DELETES/S", "right"), ("PAUSED", "right")):
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    for r in shown:  # in the view's order
        table.add_row(r["tube"], _num(r["ready"]), _num(r["reserved"]), _num(r["delayed"]),
                      Text(_num(r["buried"]), style="bold red" if r["buried"] else ""),
                      _num(r["waiting"]), _num(r["puts"]), _num(r["deletes"]),
                      f"{r['paused']}s" if r["paused"] else "")
    where = (f"tubes {view.offset + 1}-{view.offset + len(shown)} of {now.matched}" if shown
             else ("no tube matches" if view.q else "no tubes"))
    search = f"/{view.q}" + ("_" if view.typing else "") if view.q or view.typing else "/ search"
    foot = Text(f"{where}  n/p page  s order: {view.sort}  {search}\nq quits  i "
                + ("hides internal tubes" if view.internal else
                   f"shows internal tubes ({now.hidden} hidden)"), style="dim")
    for e in now.errors:
        foot.append(f"   {e}", style="red")
    return Group(head, Text(""), table, Text(""), foot)


class _TwoServers(ValueError):
    pass


def _address(ns: argparse.Namespace, admin: Any | None) -> str:
    """The protocol address: -a (or $STALKD_ADDR) when given, else, with --admin, the one
    the admin endpoint reports for its own server (so the two cannot be two servers)."""
    from stalkd.client.options import server_addresses

    if admin is None or ns.address or os.environ.get("STALKD_ADDR") or ns.host or ns.port:
        return str(server_addresses(ns))
    try:
        addresses = admin.overview()["server"].get("addresses") or []
    except Exception as e:
        raise _TwoServers(f"{e}; give -a ADDR for the protocol address") from None
    if not addresses:
        raise _TwoServers(f"the admin endpoint {admin.url} does not say where its server "
                          "listens (an older stalkd?): give -a ADDR too")
    first = str(addresses[0])
    host, _, port = first.rpartition(":")
    if host in ("0.0.0.0", "[::]"):  # a wildcard listener: reach it where the admin endpoint is
        host = urllib.parse.urlsplit(admin.url).hostname or "127.0.0.1"
        first = f"{host}:{port}"
    return first


@contextlib.contextmanager
def _keys() -> Iterator[int | None]:
    """stdin in cbreak mode (keys arrive without Enter), restored on exit; None if not a tty."""
    if not sys.stdin.isatty():
        yield None
        return
    import termios
    import tty

    fd = sys.stdin.fileno()
    old = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        yield fd
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, old)


def main(argv: Sequence[str] | None = None) -> int:
    from stalkd.admin.cli import add_admin_options, backend_for

    p = argparse.ArgumentParser(prog="stalkd top", description=(
        "Live view of a server's tubes: counts, puts and deletes per second, waiting workers; "
        "with --admin also fsync latency and disk use. Works against beanstalkd too. q quits."))
    p.add_argument("-n", "--interval", type=float, default=1.0, metavar="SECONDS",
                   help="refresh every SECONDS (default 1)")
    p.add_argument("--internal", action="store_true", help="start with stalkd's internal tubes "
                   "(stalkd.failed, stalkd.key.*) shown; i toggles them")
    p.add_argument("--sort", choices=ORDERS, default="jobs",
                   help="order of the tubes (default jobs: the most first); s changes it")
    p.add_argument("--search", default="", metavar="TEXT",
                   help="show only tubes whose name holds TEXT; / types another")
    add_admin_options(p)
    ns = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    from rich.console import Console
    from rich.live import Live

    from stalkd.admin.backends import ApiBackend
    from stalkd.client import errors
    from stalkd.client.sync import Client

    admin: ApiBackend | None = None
    if ns.admin or os.environ.get("STALKD_ADMIN"):
        given = backend_for(ns)
        assert isinstance(given, ApiBackend)
        admin = given
    try:
        address = _address(ns, admin)
        client = Client(address, timeout=ns.timeout)
        prev = None
        view = View(sort=ns.sort, q=ns.search, internal=bool(ns.internal))
        now = read_sample(client, admin, view)
    except _TwoServers as e:
        print(f"stalkd top: {e}", file=sys.stderr)
        return 2
    except (errors.ClientConnectionError, ValueError) as e:
        print(f"stalkd top: {e}\n  is the server running? (set -a or $STALKD_ADDR)", file=sys.stderr)
        return 3
    if admin is not None and now.admin is not None:
        theirs, ours = now.admin.get("server", {}).get("id"), now.stats.get("id")
        if theirs is not None and theirs != ours:
            client.close()
            print(f"stalkd top: {address} and the admin endpoint {admin.url} are two different "
                  f"servers (stats id {ours} vs {theirs}); give --admin alone (it knows its "
                  "server's address), or the -a of the same server", file=sys.stderr)
            return 2
    console = Console()
    view.limit = max(5, console.size.height - 11)  # the rows the screen has for the table
    fsync_prev: tuple[int, float] | None = None
    with _keys() as fd, Live(render(now, prev, address, None, view), console=console, screen=True,
                             auto_refresh=False) as live:
        try:
            while True:
                deadline = time.monotonic() + ns.interval
                while (left := deadline - time.monotonic()) > 0:
                    if fd is None:
                        time.sleep(left)
                        break
                    ready, _, _ = select.select([fd], [], [], left)
                    key = os.read(fd, 16) if ready else b""
                    if not key:
                        continue
                    if not view.typing and key.lower().startswith(b"q"):
                        return 0
                    if press(view, key, now.matched):  # read the page asked at once
                        with contextlib.suppress(errors.ClientConnectionError):
                            now = read_sample(client, admin, view)
                    live.update(render(now, prev, address, fsync_prev, view), refresh=True)
                if now.admin is not None and now.admin.get("fsync"):
                    fsync_prev = (int(now.admin["fsync"]["count"]), float(now.admin["fsync"]["seconds"]))
                prev = now
                try:
                    now = read_sample(client, admin, view)
                except errors.ClientConnectionError as e:
                    now = Sample(time.monotonic(), prev.stats, prev.tubes, prev.admin,
                                 [f"lost the server: {e}"], prev.matched, prev.hidden)
                    client.close()
                live.update(render(now, prev, address, fsync_prev, view), refresh=True)
        except KeyboardInterrupt:
            return 0
        finally:
            client.close()
