"""The server's clock measures delays and TTRs in elapsed time: a step of the machine's wall
clock while it runs moves nothing (the campaign's clock-jump run is the end-to-end check)."""

from __future__ import annotations

from stalkd.server.clock import steady_wall_clock


def test_a_wall_clock_step_does_not_move_the_servers_clock() -> None:
    # Given a wall clock that will jump an hour forward, then two hours back
    wall = iter([1000.0, 4600.0, -2600.0])  # read once, at start: the later values never count
    mono = iter([10.0, 11.0, 12.5])
    clock = steady_wall_clock(wall=lambda: next(wall), monotonic=lambda: next(mono))
    # Then the clock starts at the wall time and advances only as the monotonic clock does
    assert clock() == 1001.0
    assert clock() == 1002.5
