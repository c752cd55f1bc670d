"""The connection registry: ``--max-connections`` refusals are logged as a summary at most once
a second (a flood of 3,000 refused connections used to write 3,000 WARNING lines)."""

from __future__ import annotations

import logging

import pytest

from stalkd.server.registry import Registry


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_refusals_are_summarised_once_a_second(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    r: Registry[str] = Registry(limit=2, clock=clock)
    assert r.admit(r.next_id(), "a", "p1") and r.admit(r.next_id(), "b", "p2")
    caplog.set_level(logging.WARNING, logger="stalkd.server")
    # When 3,000 connections are refused within 0.3 s
    for i in range(3000):
        clock.now = 100.0 + i * 0.0001
        assert not r.admit(r.next_id(), "x", f"peer{i}")
    # Then one line was logged (the first), naming the limit
    lines = [rec.getMessage() for rec in caplog.records]
    assert len(lines) == 1 and "--max-connections" in lines[0] and "limit" in lines[0]
    # When another is refused a second later, one line sums up those not yet reported
    clock.now = 101.0
    assert not r.admit(r.next_id(), "x", "late-peer")
    lines = [rec.getMessage() for rec in caplog.records]
    assert len(lines) == 2
    assert lines[1].startswith("refused 3000 connection(s) (last from late-peer)")
    assert r.refused_total == 3001 and len(r) == 2


def test_a_freed_slot_admits_again() -> None:
    r: Registry[str] = Registry(limit=1, clock=Clock())
    first = r.next_id()
    assert r.admit(first, "a", "p")
    assert not r.admit(r.next_id(), "b", "p")
    assert r.remove(first) == "a"
    assert r.admit(r.next_id(), "c", "p") and list(r) == ["c"]


def test_handshakes_in_progress_take_their_place_in_the_connection_limit() -> None:
    r: Registry[str] = Registry(limit=3, per_address=5, clock=Clock())
    # Given one connection open and two TLS handshakes in progress
    assert r.admit(r.next_id(), "a", "p")
    assert r.begin_handshake("10.0.0.1") and r.begin_handshake("10.0.0.2")
    # Then neither a plain connection nor a third handshake is let in
    assert not r.admit(r.next_id(), "b", "p") and not r.begin_handshake("10.0.0.3")
    # When a handshake ends, its connection takes the place it held
    r.end_handshake("10.0.0.1")
    assert r.admit(r.next_id(), "tls", "10.0.0.1")
    assert len(r) == 2 and r.handshakes == 1 and not r.admit(r.next_id(), "c", "p")
