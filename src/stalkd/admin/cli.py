"""``stalkd tubes``, ``stalkd jobs list|delete|kick|move``, ``stalkd pause``, ``stalkd dashboard``.

With ``--admin URL`` (or ``$STALKD_ADMIN``) they use the admin API of ``stalkd serve --admin``
(bulk operations run on the server, in chunks, durable before the reply); otherwise the
beanstalkd protocol at ``-a ADDR`` (``$STALKD_ADDR``), which also works against beanstalkd.
``--json`` prints the result as one JSON value.

Example::

    stalkd jobs list emails --state buried
    stalkd jobs kick emails --state buried --admin 127.0.0.1:11301
    stalkd jobs delete emails --state buried --json
    stalkd pause emails 300
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap
from collections.abc import Callable, Sequence
from typing import Any

from stalkd.admin.backends import ApiBackend, ApiError, Backend, ProtocolBackend
from stalkd.client import errors
from stalkd.client.options import add_server_options, server_addresses
from stalkd.tubes import is_internal

__all__ = ["tubes", "jobs", "pause", "promote", "dashboard", "add_admin_options", "backend_for"]

OK, NOT_FOUND, USAGE, UNREACHABLE, REFUSED = 0, 1, 2, 3, 4
ENV_ADMIN, ENV_TOKEN, ENV_ADDR = "STALKD_ADMIN", "STALKD_ADMIN_TOKEN_FILE", "STALKD_ADDR"
STATES = ("ready", "reserved", "delayed", "buried", "all")


class _Usage(Exception):
    pass


def add_admin_options(p: argparse.ArgumentParser) -> None:
    """The server options every admin command shares: the address scheme of every stalkd
    command (-a/$STALKD_ADDR, TLS options), plus the admin endpoint."""
    add_server_options(p)
    g = p.add_argument_group("admin endpoint")
    g.add_argument("--admin", metavar="URL",
                   help=f"admin endpoint of stalkd serve --admin, e.g. 127.0.0.1:11301 "
                        f"(default: ${ENV_ADMIN}); without it the protocol is used")
    g.add_argument("--admin-token-file", metavar="FILE",
                   help=f"bearer token for the admin endpoint (default: ${ENV_TOKEN})")
    g.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                   help="protocol reply timeout (default 10)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def backend_for(ns: argparse.Namespace, env: dict[str, str] | None = None) -> Backend:
    env = dict(os.environ) if env is None else env
    admin = ns.admin or env.get(ENV_ADMIN)
    if admin:
        token_file = ns.admin_token_file or env.get(ENV_TOKEN)
        token = None
        if token_file:
            with open(token_file, encoding="utf-8") as f:
                token = f.read().strip()
        ctx = None
        if admin.startswith("https://"):
            # the same TLS options as the protocol address: --tls-ca/--tls-cert/--tls-key or $STALKD_TLS_*
            from stalkd.client._address import TlsParams
            from stalkd.client._tls import client_context

            try:
                ctx = client_context(TlsParams(ca=ns.tls_ca or env.get("STALKD_TLS_CA"),
                                               cert=ns.tls_cert or env.get("STALKD_TLS_CERT"),
                                               key=ns.tls_key or env.get("STALKD_TLS_KEY")))
            except ValueError as e:
                raise _Usage(str(e)) from None
        return ApiBackend(admin, token, ssl_context=ctx)
    try:
        addr = server_addresses(ns, env=env)
    except ValueError as e:
        raise _Usage(str(e)) from None
    return ProtocolBackend(str(addr), timeout=ns.timeout)


def _parser(cmd: str, description: str, epilog: str = "") -> argparse.ArgumentParser:
    return argparse.ArgumentParser(
        prog=f"stalkd {cmd}", description=textwrap.fill(description, 79), epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter)


def _run(cmd: str, p: argparse.ArgumentParser, argv: Sequence[str],
         body: Callable[[Backend, argparse.Namespace], tuple[Any, str, int]]) -> int:
    ns = p.parse_args(list(argv))
    try:
        b = backend_for(ns)
        value, text, code = body(b, ns)
    except _Usage as e:
        print(f"stalkd {cmd}: {e}", file=sys.stderr)
        return USAGE
    except ApiError as e:
        print(f"stalkd {cmd}: {e}", file=sys.stderr)
        return UNREACHABLE if e.status == 0 else NOT_FOUND if e.status == 404 else REFUSED
    except errors.ClientConnectionError as e:
        print(f"stalkd {cmd}: {e}\n  is the server running? (set -a or ${ENV_ADDR})", file=sys.stderr)
        return UNREACHABLE
    except errors.BeanstalkError as e:
        print(f"stalkd {cmd}: the server refused: {e}", file=sys.stderr)
        return REFUSED
    except OSError as e:
        print(f"stalkd {cmd}: {e}", file=sys.stderr)
        return USAGE
    if ns.json:
        print(json.dumps(value))
    elif text:
        print(text)
    return code


def _table(rows: list[dict[str, Any]], cols: Sequence[str]) -> str:
    if not rows:
        return "(none)"
    cells = [[str(r.get(c, "")) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(cols, widths, strict=True)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    return "\n".join(lines)


def _outcomes(out: dict[str, Any]) -> str:
    parts = ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in sorted(out["outcomes"].items()))
    return f"{out['requested']} jobs: {parts or 'nothing to do'}"


# --- commands --------------------------------------------------------------------------------


def tubes(argv: Sequence[str]) -> int:
    """``stalkd tubes``: every tube with its job counts."""
    p = _parser("tubes", "List the server's tubes with their job counts, waiting workers and "
                         "pause state. stalkd's own tubes (stalkd.failed, stalkd.key.*: every "
                         "name starting stalkd.) are hidden unless --internal is given.")
    p.add_argument("--internal", action="store_true",
                   help="also list stalkd's internal tubes (stalkd.failed, stalkd.key.*)")
    add_admin_options(p)

    def body(b: Backend, ns: argparse.Namespace) -> tuple[Any, str, int]:
        every = b.tubes()
        rows = every if ns.internal else [r for r in every if not is_internal(r["name"])]
        for r in rows:
            r["paused"] = f"{r['pause_left']}s" if r.get("paused") else ""
        cols = ("name", "ready", "reserved", "delayed", "buried", "waiting", "total_jobs", "paused")
        text = _table(rows, cols)
        if len(rows) < len(every):
            text += f"\n({len(every) - len(rows)} internal stalkd.* tube(s) hidden: --internal shows them)"
        return rows, text, OK

    return _run("tubes", p, argv, body)


def jobs(argv: Sequence[str]) -> int:
    """``stalkd jobs list|delete|kick|move TUBE [--state S] [--id N ...]``."""
    p = _parser("jobs", "List, delete, kick or move the jobs of a tube.", textwrap.dedent("""\
        examples:
          stalkd jobs list emails --state buried
          stalkd jobs delete emails --state buried        # every buried job of emails
          stalkd jobs kick emails --id 17 --id 18
          stalkd jobs move emails --state buried --to emails-retry

        Reserved jobs are never deleted, kicked or moved (a worker holds them). A move puts
        the job into the other tube (a NEW ID, same state and priority; a dead-lettered job
        keeps its error and traceback) and deletes the old one.
        """))
    p.add_argument("action", choices=("list", "delete", "kick", "move"))
    p.add_argument("tube")
    p.add_argument("--state", choices=STATES,
                   help="jobs in this state (list: default all; delete/move need it or --id; "
                        "kick: default buried)")
    p.add_argument("--id", dest="ids", type=int, action="append", metavar="ID",
                   help="act on this job id (repeatable) instead of a whole state")
    p.add_argument("--to", metavar="TUBE", help="destination tube (move)")
    p.add_argument("--limit", type=int, default=100, help="list: jobs per page (default 100)")
    p.add_argument("--after", type=int, default=0, metavar="ID", help="list: start after this id")
    add_admin_options(p)

    def body(b: Backend, ns: argparse.Namespace) -> tuple[Any, str, int]:
        if ns.action == "list":
            page = b.jobs(ns.tube, ns.state or "all", ns.limit, ns.after)
            cols = ("id", "state", "pri", "age", "delay", "ttr", "reserves", "buries", "size", "body")
            rows = [{**r, "body": json.dumps(r.get("body", ""))[:40]} for r in page["jobs"]]
            text = _table(rows, cols)
            if page.get("next"):
                text += f"\n(more: --after {page['next']})"
            if page.get("partial"):
                text += f"\n({page['partial']})"
            return page, text, OK
        state = ns.state or ("buried" if ns.action == "kick" else None)
        if state is None and not ns.ids:
            raise _Usage(f"{ns.action} needs --state STATE (all for every job) or --id ID")
        if ns.action == "move":
            if not ns.to:
                raise _Usage("move needs --to TUBE")
            out = b.move(ns.tube, state or "all", ns.ids, ns.to)
            if out.get("new_ids"):
                pairs = ", ".join(f"{k} -> {v}" for k, v in list(out["new_ids"].items())[:20])
                more = len(out["new_ids"]) - 20
                text = (f"{_outcomes(out)}\nmoved jobs get new ids: {pairs}"
                        + (f" (and {more} more: --json lists all)" if more > 0 else ""))
                return out, text, OK
        elif ns.action == "delete":
            out = b.delete(ns.tube, state or "all", ns.ids)
        else:
            out = b.kick(ns.tube, state or "buried", ns.ids)
        return out, _outcomes(out), OK

    return _run("jobs", p, argv, body)


def pause(argv: Sequence[str]) -> int:
    """``stalkd pause TUBE SECONDS``."""
    p = _parser("pause", "Pause a tube: no job is reserved from it for SECONDS (0 resumes it).")
    p.add_argument("tube")
    p.add_argument("seconds", type=int)
    add_admin_options(p)

    def body(b: Backend, ns: argparse.Namespace) -> tuple[Any, str, int]:
        if ns.seconds < 0:
            raise _Usage("SECONDS must be 0 or more")
        out = b.pause(ns.tube, ns.seconds)
        if out.get("error"):
            return out, f"{ns.tube}: {out['error']}", NOT_FOUND
        text = f"{ns.tube} paused for {ns.seconds}s" if ns.seconds else f"{ns.tube} resumed"
        return out, text, OK

    return _run("pause", p, argv, body)


def promote(argv: Sequence[str]) -> int:
    """``stalkd promote --admin URL``: turn a standby into the primary (docs/standby.md)."""
    p = _parser("promote", "Turn a standby (stalkd serve --standby-of) into the primary: it starts a "
                "new epoch, accepts changes, and fences the former primary. Needs the standby's "
                "admin endpoint (or send the standby SIGUSR2).",
                epilog="example: stalkd promote --admin 127.0.0.1:11311")  # fmt: skip
    add_admin_options(p)

    def body(b: Backend, ns: argparse.Namespace) -> tuple[Any, str, int]:
        if not isinstance(b, ApiBackend):
            raise _Usage("promotion goes through the standby's admin endpoint: give --admin HOST:PORT "
                         "(stalkd serve --admin), or send the standby SIGUSR2")
        out = b.promote()
        return out, str(out.get("result", out)), OK

    return _run("promote", p, argv, body)


def dashboard(argv: Sequence[str]) -> int:
    """``stalkd dashboard``: print (or open) the dashboard's URL."""
    p = _parser("dashboard", "The web dashboard is served by stalkd serve --admin ADDR:PORT. "
                             "This prints its URL, checks that it answers, and with --open "
                             "opens it in a browser.")
    p.add_argument("--open", action="store_true", help="open it in the default browser")
    add_admin_options(p)
    ns = p.parse_args(list(argv))
    try:
        b = backend_for(ns)
    except _Usage as e:
        print(f"stalkd dashboard: {e}", file=sys.stderr)
        return USAGE
    if not isinstance(b, ApiBackend):
        print(f"stalkd dashboard: give the admin endpoint: --admin HOST:PORT or ${ENV_ADMIN} "
              "(start the server with stalkd serve --admin 127.0.0.1:11301)", file=sys.stderr)
        return USAGE
    try:
        b.overview()
    except ApiError as e:
        print(f"stalkd dashboard: {e}", file=sys.stderr)
        return UNREACHABLE
    url = b.url + "/" + (f"#token={b.token}" if b.token else "")
    print(json.dumps({"url": url}) if ns.json else url)
    if ns.open:
        import webbrowser

        webbrowser.open(url)
    return OK
