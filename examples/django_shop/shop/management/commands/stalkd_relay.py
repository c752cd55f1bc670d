"""``manage.py stalkd_relay``: move committed outbox rows of the shop's database to the queue,
until SIGTERM (``--once``: one pass, then exit, e.g. from cron)."""

import signal
from typing import Any

import sqlalchemy as sa
from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import connections

from shop.tasks import outbox
from stalkd.outbox import Relay
from stalkd.worker.stopflag import StopFlag


def sqlalchemy_url(db: dict[str, Any]) -> sa.URL:
    """The SQLAlchemy URL of a Django ``DATABASES`` entry (SQLite or PostgreSQL)."""
    if db["ENGINE"].endswith("sqlite3"):
        return sa.URL.create("sqlite", database=str(db["NAME"]))
    host = db.get("HOST") or None
    query = {"host": host} if host and host.startswith("/") else {}  # a UNIX socket directory
    return sa.URL.create("postgresql+psycopg", username=db.get("USER") or None,
                         password=db.get("PASSWORD") or None, port=db.get("PORT") or None,
                         host=None if query else host, database=db["NAME"], query=query)


class Command(BaseCommand):
    help = "Move committed outbox rows to the stalkd server (STALKD_ADDR) until SIGTERM."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--once", action="store_true", help="one pass, then exit")
        parser.add_argument("--database", default="default", help="the DATABASES entry")
        parser.add_argument("--idle-wait", type=float, default=0.5,
                            help="seconds between polls when idle")

    def handle(self, *args: Any, **options: Any) -> None:
        engine = sa.create_engine(sqlalchemy_url(connections[options["database"]].settings_dict))
        relay = Relay(engine, outbox, address=settings.STALKD_ADDR)
        try:
            if options["once"]:
                while relay.run_once():  # until nothing is left to send
                    pass
            else:
                stop = StopFlag()  # a signal handler may set it (threading.Event's set() can deadlock there)
                signal.signal(signal.SIGTERM, lambda *_: stop.set())
                signal.signal(signal.SIGINT, lambda *_: stop.set())
                relay.run(stop, idle_wait=options["idle_wait"])
        finally:
            relay.close()
            engine.dispose()
        self.stdout.write(f"relayed {relay.sent_total} job(s) to {settings.STALKD_ADDR}")
