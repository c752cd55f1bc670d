"""Root fixtures. Helpers live in ``tests/support.py`` (import them with ``from support import``)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

from support import ServerProcess, reserved_port, start_beanstalkd

# The session's one PostgreSQL cluster (`postgres_url`), for every directory that uses it. A
# test module importing the fixture got a session fixture of its own: one cluster per module,
# each started and stopped.
pytest_plugins = ["outbox.pg_cluster"]

# No per-example deadline: these machines are shared and noisy, and a slow example is not a bug.
# Under CI the examples are also derandomized, so a landing is judged on the same examples every
# time; local runs stay random, which is where new counterexamples are found.
settings.register_profile("dev", deadline=None)
settings.register_profile("ci", deadline=None, derandomize=True, database=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci" if os.environ.get("CI") else "dev")


@pytest.fixture
def beanstalkd() -> Iterator[ServerProcess]:
    """A fresh in-memory Debian beanstalkd for one test."""
    server = start_beanstalkd()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def held_port() -> Iterator[int]:
    """A loopback port that refuses connections and is held for this test's servers only (see
    ``support.reserved_port``): for "nothing listens yet" and "restart on the same port"."""
    with reserved_port() as port:
        yield port
