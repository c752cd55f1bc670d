"""``stalkd top``: a live full-screen view of a server's tubes, rates and workers.

It speaks the beanstalkd protocol (``stats``, ``list-tubes``, ``stats-tube``), so it works
against Debian's beanstalkd as well as stalkd; given the admin endpoint (``--admin``) it adds
fsync latency and disk use. With ``--admin`` alone, the protocol address is the one the admin
endpoint reports for its server; given both, they must name one server (``stats`` id), or top
refuses rather than mix two servers' figures. ``q`` or Ctrl-C quits; ``i`` shows or hides stalkd's internal tubes
(``stalkd.failed``, ``stalkd.key.*``), hidden by default (``--internal`` starts with them shown).

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

__all__ = ["main", "Sample", "rows", "read_sample"]

_TUBE_KEYS = ("current-jobs-ready", "current-jobs-reserved", "current-jobs-delayed",
              "current-jobs-buried", "current-waiting", "total-jobs", "cmd-delete",
              "pause-time-left")  # fmt: skip


@dataclass
class Sample:
    """One reading of the server at ``at`` (monotonic seconds)."""

    at: float
    stats: dict[str, Any]
    tubes: dict[str, dict[str, Any]]
    admin: dict[str, Any] | None = None  # /api/v1/overview, when the endpoint is known
    errors: list[str] = field(default_factory=list)


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


def read_sample(client: Any, admin: Any | None) -> Sample:
    """One reading over the protocol (and the admin API when given)."""
    stats = dict(client.stats())
    tubes: dict[str, dict[str, Any]] = {}
    for name in client.list_tubes():
        with contextlib.suppress(Exception):  # a tube dropped between list and stats
            st = client.stats_tube(name)
            tubes[name] = {k: st.get(k, 0) for k in _TUBE_KEYS}
    sample = Sample(time.monotonic(), stats, tubes)
    if admin is not None:
        try:
            sample.admin = admin.overview()
        except Exception as e:
            sample.errors.append(f"admin endpoint: {e}")
    return sample


def _num(v: float) -> str:
    if v >= 100_000:
        return f"{v / 1000:.0f}k"
    if v >= 10_000:
        return f"{v / 1000:.1f}k"
    return f"{v:.0f}" if v >= 10 or v == int(v) else f"{v:.1f}"


def render(now: Sample, prev: Sample | None, address: str, fsync_prev: tuple[int, float] | None,
           internal: bool = False) -> Any:
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
    shown = rows(now, prev, internal)
    table = Table(expand=True, header_style="bold", box=None, pad_edge=False)
    # rich would otherwise squeeze the names to the width of the number columns
    table.add_column("TUBE", justify="left", no_wrap=True,
                     min_width=min(40, max((len(r["tube"]) for r in shown), default=4)))
    for col, just in (("READY", "right"), ("RESERVED", "right"),
                      ("DELAYED", "right"), ("BURIED", "right"), ("WAITING", "right"),
                      ("PUTS/S", "right"), ("DELETES/S", "right"), ("PAUSED", "right")):
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    for r in sorted(shown, key=lambda r: (-r["ready"] - r["buried"], r["tube"])):
        table.add_row(r["tube"], _num(r["ready"]), _num(r["reserved"]), _num(r["delayed"]),
                      Text(_num(r["buried"]), style="bold red" if r["buried"] else ""),
                      _num(r["waiting"]), _num(r["puts"]), _num(r["deletes"]),
                      f"{r['paused']}s" if r["paused"] else "")
    hidden = len(now.tubes) - len(shown)
    foot = Text("q quits  i " + ("hides internal tubes" if internal else
                                  f"shows internal tubes ({hidden} hidden)"), style="dim")
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
        now = read_sample(client, admin)
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
    fsync_prev: tuple[int, float] | None = None
    internal = bool(ns.internal)
    with _keys() as fd, Live(render(now, prev, address, None, internal), console=console, screen=True,
                             auto_refresh=False) as live:
        try:
            while True:
                deadline = time.monotonic() + ns.interval
                while (left := deadline - time.monotonic()) > 0:
                    if fd is None:
                        time.sleep(left)
                        break
                    ready, _, _ = select.select([fd], [], [], left)
                    key = os.read(fd, 16).lower() if ready else b""
                    if key.startswith(b"q"):
                        return 0
                    if key.startswith(b"i"):  # redraw at once, with the same two samples
                        internal = not internal
                        live.update(render(now, prev, address, fsync_prev, internal), refresh=True)
                if now.admin is not None and now.admin.get("fsync"):
                    fsync_prev = (int(now.admin["fsync"]["count"]), float(now.admin["fsync"]["seconds"]))
                prev = now
                try:
                    now = read_sample(client, admin)
                except errors.ClientConnectionError as e:
                    now = Sample(time.monotonic(), prev.stats, prev.tubes, prev.admin,
                                 [f"lost the server: {e}"])
                    client.close()
                live.update(render(now, prev, address, fsync_prev, internal), refresh=True)
        except KeyboardInterrupt:
            return 0
        finally:
            client.close()
