"""``python -m stalkd.outbox``: run a relay until SIGTERM/SIGINT.

    python -m stalkd.outbox --db postgresql+psycopg://app@db/app -a 127.0.0.1:11300

The server options are every stalkd command's (``stalkd.client.options``): ``-a`` (several
servers comma-separated or repeated), ``$STALKD_ADDR``, the TLS flags.

Exits 0 after the batch in progress (if any) has committed.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType

import sqlalchemy as sa

from stalkd.client.options import add_server_options, server_addresses
from stalkd.outbox.relay import Relay
from stalkd.outbox.table import Outbox


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m stalkd.outbox",
                                description="Move committed outbox rows to the queue.")
    p.add_argument("--db", required=True, help="SQLAlchemy database URL")
    add_server_options(p)
    p.add_argument("--table", default="stalkd_outbox", help="outbox table name")
    p.add_argument("--batch-size", type=int, default=100)
    p.add_argument("--idle-wait", type=float, default=0.5, help="seconds between polls when idle")
    p.add_argument("--create", action="store_true", help="create the table if missing")
    args = p.parse_args(sys.argv[1:] if argv is None else list(argv))
    try:
        address = str(server_addresses(args))
    except ValueError as e:
        p.error(str(e))
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname).1s %(message)s")
    engine = sa.create_engine(args.db)
    outbox = Outbox(table_name=args.table)
    if args.create:
        outbox.create(engine)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    relay = Relay(engine, outbox, address=address, batch_size=args.batch_size)
    logging.getLogger("stalkd.outbox").info("relay: %s -> %s (table %s)", engine.url, address,
                                            args.table)
    relay.run(stop, idle_wait=args.idle_wait)
    logging.getLogger("stalkd.outbox").info("relay stopped after sending %d rows", relay.sent_total)
    return 0


if __name__ == "__main__":
    sys.exit(main())
