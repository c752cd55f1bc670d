"""A worker of the three-node cluster (``three-nodes.sh``): it takes every node's address and
follows whichever is the primary, through a failover or a switchover.

    stalkd worker tasks:app
"""

from __future__ import annotations

import os

from stalkd.worker import App

NODES = "127.0.0.1:11300,127.0.0.1:11301,127.0.0.1:11302"
app = App(os.environ.get("STALKD_ADDR", NODES))


@app.task(tube="greetings", ttr=30)
def greet(payload: dict[str, str]) -> None:
    print(f"hello, {payload['name']}")
