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


# Under pytest-xdist (`make test` runs each build's pass on two workers), the tests that share a
# session fixture expensive to start run on one worker: one Spark session and standalone cluster,
# one PostgreSQL cluster, not one per worker.
_SHARED = {"spark": "spark", "spark_cluster": "spark", "cluster_driver": "spark", "s3_server": "spark",
           "spark_home": "spark", "postgres_url": "postgres"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.pluginmanager.hasplugin("xdist"):
        return
    needs = [(item, {_SHARED[f] for f in getattr(item, "fixturenames", ()) if f in _SHARED}) for item in items]
    # A test that needs two shared fixtures joins their groups into one, so that neither fixture
    # starts twice.
    merged: list[set[str]] = []
    for _, groups in needs:
        if groups:
            touching = [m for m in merged if m & groups]
            merged = [m for m in merged if not m & groups] + [groups.union(*touching)]
    for item, groups in needs:
        if groups:
            item.add_marker(pytest.mark.xdist_group("+".join(sorted(next(m for m in merged if m & groups)))))
