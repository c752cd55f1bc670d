"""Watch and operate a running server: the admin HTTP endpoint, its CLI and terminal view.

* ``endpoint`` — ``stalkd serve --admin HOST:PORT``: starts the HTTP app beside the server.
* ``http`` — routes: /metrics, /healthz, /readyz, the JSON API, the dashboard's files.
* ``ops`` — the one interface to the server: read views and bulk mutations (through the
  engine and the WAL like protocol commands, in chunks); ``session`` runs their commands.
* ``views`` — pure read-only views of the engine; ``metrics`` and ``histogram`` — Prometheus.
* ``cli`` — ``stalkd jobs|tubes|pause|dashboard``; ``top`` — ``stalkd top``.

Example::

    stalkd serve --dir ./data --admin 127.0.0.1:11301
    curl -s 127.0.0.1:11301/metrics | grep stalkd_tube_jobs
"""

__all__: list[str] = []
