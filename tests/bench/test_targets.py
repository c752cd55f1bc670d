"""bench/targets.py: issue 12's verdicts over made-up rows (no servers, no sockets): met exactly
at the target, the reason a miss gets from the row's own figures, and cells the run left out."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2] / "bench"))  # after the rest: no shadowing
import targets as tg  # noqa: E402  (bench/targets.py)
from targets import Cell, Measure, Row  # noqa: E402

GEN_PROCS, CPUS = 2, 2


def _row(klass: str, work: str, conns: int, depth: int, stalkd: Measure, peer: Measure,
         floor: Measure | None = None) -> Row:
    return Row(Cell(klass, work, 100, conns, depth), stalkd, peer, floor)


def _section(rows: list[Row]) -> dict[str, list[str]]:
    """The section's lines by cell name: a cell's own line, then its reason's clauses joined
    into one "why:" line if it has one."""
    out: dict[str, list[str]] = {}
    name = ""
    for line in tg.judge(rows, GEN_PROCS, CPUS)[1:]:
        if line.startswith("      why: "):
            out[name].append(line.strip())
            continue
        if line.startswith("           "):  # the reason's next clause
            out[name][-1] += "; " + line.strip()
            continue
        name = next(n for n in _names(rows) if line.startswith(f"  {n} "))
        out[name] = [line]
    return out


def _names(rows: list[Row]) -> list[str]:
    cells = [t.cell for t in tg.TARGETS + tg.TABLE_ONLY] + [r.cell for r in rows]
    return sorted({c.name() for c in cells}, key=len, reverse=True)  # "16 x 1" before "1 x 1"


def test_a_ratio_exactly_at_the_target_is_met_and_just_below_is_not() -> None:
    bs = Measure(rate=10_000, srv=40, gen=60)
    at = _row("memory", "put", 1, 1, Measure(9_000, 40, 60), bs)  # 0.9x: part 2's target
    below = _row("memory", "rd", 1, 1, Measure(8_999, 40, 60), bs)
    lines = _section([at, below])
    assert lines["memory put 1 x 1"][0].endswith("0.900x  target >= 0.9x  met")
    assert len(lines["memory put 1 x 1"]) == 1  # no reason for a target met
    assert "0.900x  target >= 0.9x  NOT met" in lines["memory reserve+delete 1 x 1"][0]
    assert lines["memory reserve+delete 1 x 1"][1].startswith("why: ")


def test_always_at_depth_1_needs_parity_with_beanstalkd() -> None:
    bs = Measure(rate=5_000, srv=30, gen=40)
    lines = _section([_row("always", "put", 1, 1, Measure(4_950, 70, 40), bs),
                      _row("always", "rd", 1, 1, Measure(5_000, 30, 40), bs)])
    assert "target >= 1.0x  NOT met" in lines["always put 1 x 1"][0]  # 0.99x misses part 1
    assert "target >= 1.0x  met" in lines["always reserve+delete 1 x 1"][0]


def test_a_cpu_bound_miss_names_the_cpu_per_job_of_all_three_servers() -> None:
    # stalkd saturated at 100 us/job (10,000/s at 100 %), beanstalkd 50 us/job, the floor 40
    row = _row("memory", "put", 16, 1, Measure(10_000, 100, 80), Measure(20_000, 100, 150),
               Measure(25_000, 100, 160))
    why = _section([row])["memory put 16 x 1"][1]
    assert "stalkd CPU-bound (srv 100%)" in why
    assert "beanstalkd CPU-bound (srv 100%)" in why
    assert "server CPU 100.0 us/job vs beanstalkd 50.0 vs floor 40.0" in why
    assert "CPU alone allows 0.50x" in why
    assert "stalkd/floor 0.40x, floor/beanstalkd 1.25x" in why
    assert "the floor reaches the target" in why
    assert "(stalkd/floor 0.40x)" in _section([row])["memory put 16 x 1"][0]


def test_an_unsaturated_server_at_depth_1_is_set_by_the_round_trip_and_the_floor_can_miss_too() -> None:
    # stalkd busy 40 % of the time: the rate is one request per round trip, not its CPU
    row = _row("never", "put", 1, 1, Measure(5_000, 40, 60), Measure(8_000, 36, 70), Measure(6_400, 30, 65))
    why = _section([row])["never put 1 x 1"][1]
    assert "stalkd not CPU-bound (srv 40%)" in why
    assert "beanstalkd not CPU-bound (srv 36%)" in why
    assert "one request in flight" in why
    assert "+35.0 us vs beanstalkd" in why  # 80 us/job against 45
    # one job at a time: 1 / 8,000 s per job plus 35 us is 0.78x of beanstalkd's rate
    assert "that CPU alone would give 0.78x, the rest is time stalkd waits (wake-ups" in why
    assert "floor/beanstalkd 0.80x (the floor misses it too" in why


def test_an_unsaturated_durable_server_waits_on_the_disk() -> None:
    row = _row("always", "put", 1, 1, Measure(1_000, 20, 10), Measure(2_000, 10, 15), Measure(1_900, 8, 14))
    why = _section([row])["always put 1 x 1"][1]
    assert "stalkd not CPU-bound (srv 20%): it waits on fdatasync" in why
    assert "+150.0 us vs beanstalkd" in why  # 200 us/job against 50
    assert "that CPU alone would give 0.77x, the rest is time stalkd waits (on the disk)" in why


def test_a_saturated_generator_or_machine_is_named_instead_of_the_server() -> None:
    gen = _row("memory", "rd", 16, 1, Measure(20_000, 60, 190), Measure(30_000, 50, 195))
    why = _section([gen])["memory reserve+delete 16 x 1"][1]
    assert "stalkd generator-bound (gen 190% of 2 processes, srv 60%)" in why
    assert "beanstalkd generator-bound (gen 195% of 2 processes, srv 50%)" in why
    assert "floor" not in why  # no floor ran in this row: no floor clause
    assert "would give" not in why  # 16 connections: jobs overlap, no serial model
    # one connection: one generator process, 90 % of it is saturated
    one = _row("memory", "rd", 1, 1, Measure(8_000, 50, 90), Measure(10_000, 45, 92))
    assert "generator-bound (gen 90% of 1 processes" in _section([one])["memory reserve+delete 1 x 1"][1]
    full = _row("never", "rd", 16, 1, Measure(20_000, 80, 100), Measure(30_000, 70, 110))
    assert "machine-bound (srv 80% + gen 100% of 2 CPUs)" in _section([full])["never reserve+delete 16 x 1"][1]


def test_cells_not_in_the_run_say_how_to_measure_them() -> None:
    lines = _section([])
    assert set(lines) == {t.cell.name() for t in tg.TARGETS + tg.TABLE_ONLY}
    assert len(lines) == 11  # 2 of part 1, 8 of part 2, and the table's pipelined cell
    assert "not measured (run with --class always --work rd --size 100 --conns 1 --depth 1)" in (
        lines["always reserve+delete 1 x 1"][0])
    assert "not measured (run with --class memory --work put --size 100 --conns 16 --depth 64)" in (
        lines["memory put 16 x 64"][0])


def test_pipelined_and_concurrent_cells_are_listed_without_a_target() -> None:
    bs = Measure(10_000, 90, 100)
    rows = [_row("memory", "put", 16, 64, Measure(16_000, 90, 100), bs, Measure(20_000, 90, 100)),
            _row("always", "put", 16, 1, Measure(30_000, 90, 100), bs),
            Row(Cell("memory", "put", 4096, 1, 1), Measure(1, 1, 1), bs)]  # not the size
    lines = _section(rows)
    assert lines["memory put 16 x 64"] == [lines["memory put 16 x 64"][0]]
    assert "1.600x  no target: pipelined: not lower than before  (stalkd/floor 0.80x)" in lines["memory put 16 x 64"][0]
    assert "3.000x  no target: concurrent/pipelined: the server issue's >= 5x" in lines["always put 16 x 1"][0]
    assert "not measured" in lines["memory put 1 x 1"][0]  # the 4 KiB cell is not the target's
    assert not any("NOT met" in line or " met" in line for ls in lines.values() for line in ls)


def test_a_miss_with_less_cpu_than_beanstalkd_blames_the_waiting() -> None:
    # stalkd spends less CPU per job (30 us against 40) and still misses: it waits longer
    row = _row("memory", "rd", 1, 1, Measure(5_000, 15, 60), Measure(7_000, 28, 60))
    why = _section([row])["memory reserve+delete 1 x 1"][1]
    assert "(-10.0 us vs beanstalkd)" in why
    assert "that CPU alone would give 1.08x" in why


def test_a_reserve_delete_miss_is_weighed_against_the_floor_too() -> None:
    # stalkd 60 us/job saturated, beanstalkd 25, the floor 50: the floor misses 0.9x as well
    row = _row("memory", "rd", 16, 1, Measure(15_000, 90, 120), Measure(36_000, 90, 150),
               Measure(18_000, 90, 130))
    lines = _section([row])["memory reserve+delete 16 x 1"]
    assert "0.417x  target >= 0.9x  NOT met  (stalkd/floor 0.83x)" in lines[0]
    assert "server CPU 60.0 us/job vs beanstalkd 25.0 vs floor 50.0" in lines[1]
    assert "stalkd/floor 0.83x, floor/beanstalkd 0.50x (the floor misses it too" in lines[1]


def test_stalkd_against_the_floor_is_also_judged_round_by_round() -> None:
    # Rounds run back to back: a slow minute moves both servers of a round. Medians of 15k and
    # 18k make 0.83x; each round's own ratio says 1.0x or more in 3 of 4.
    row = Row(Cell("memory", "rd", 100, 16, 1), Measure(15_000, 90, 120), Measure(36_000, 90, 150),
              Measure(18_000, 90, 130), (1.05, 0.96, 1.10, 1.00))
    assert row.floor_paired() == "1.02x (0.99-1.06)"
    lines = _section([row])["memory reserve+delete 16 x 1"]
    assert "(stalkd/floor 0.83x; per round 1.02x (0.99-1.06))" in lines[0]
    assert _row("memory", "rd", 16, 1, Measure(1, 1, 1), Measure(1, 1, 1)).floor_paired() == ""
