"""stalkd.outbox: transactional enqueue (yoltq's core idea) with SQLAlchemy Core.

Write the job in the same transaction as the business data, and a relay moves committed rows
to the queue. Works with PostgreSQL (several relays, ``SKIP LOCKED``) and SQLite (one relay).

>>> import sqlalchemy as sa
>>> from stalkd.outbox import Outbox, Relay
>>> engine = sa.create_engine("sqlite://")
>>> outbox = Outbox(); outbox.create(engine)
>>> with engine.begin() as conn:
...     _ = outbox.put(conn, "emails", b"hello")
>>> relay = Relay(engine, outbox, address="127.0.0.1:11300")   # relay.run_once() / run(stop)

Guarantee: no committed row is lost; a row is sent twice only if the relay dies between the
put and the commit marking it sent (see ``stalkd.outbox.relay``).
"""

from __future__ import annotations

from stalkd.outbox.relay import Relay, Sender
from stalkd.outbox.table import Outbox

__all__ = ["Outbox", "Relay", "Sender"]
