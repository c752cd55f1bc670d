"""``python -m campaign``: run every nemesis against a single server, a primary with a sync
standby and three automatic-failover nodes on etcd (faults against the current primary), print
the table, and write it (``table.md``) with a plot and a history per run under ``--out`` (rows
of runs not repeated are kept from the table already there). Exit status 1 if any run found an
anomaly or could not finish (the others still run)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from campaign import report
from campaign.history import pair, read_events
from campaign.nemesis import NEMESES
from campaign.run import RunSpec, run

TOPOLOGIES = ("single", "standby", "ha")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m campaign", description=__doc__)
    ap.add_argument("--nemesis", action="append", choices=sorted(NEMESES),
                    help="a fault to inject (repeat; default: every one)")
    ap.add_argument("--topology", action="append", choices=TOPOLOGIES,
                    help="servers under test (repeat; default: all): one server, a primary and its sync "
                         "standby, or three --ha nodes on an etcd the run starts (--sync-standbys 1)")
    ap.add_argument("--cycles", type=int, default=20, help="faults per run (default 20)")
    ap.add_argument("--fault", type=float, default=4.0, help="seconds each fault lasts (default 4)")
    ap.add_argument("--quiet", type=float, default=2.0, help="seconds between faults (default 2)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--net", choices=("netns", "proxy"), default="netns",
                    help="how partitions are made (default: network namespaces, as root)")
    ap.add_argument("--no-progress", action="store_true", help="no line after each fault")
    ap.add_argument("--out", type=Path, default=Path("build/campaign"), help="output directory")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)  # the worker's reconnect lines: expected, many
    rows, bad, failed = [], 0, []
    for topology in args.topology or TOPOLOGIES:
        for name in args.nemesis or sorted(NEMESES):
            if topology not in getattr(NEMESES[name], "topologies", (topology,)):
                continue
            spec = RunSpec(name, topology, cycles=args.cycles, fault=args.fault,
                           quiet=args.quiet, seed=args.seed, net=args.net)
            d = args.out / spec.label
            print(f"== {spec.label}: {args.cycles} cycles", flush=True)
            try:
                result = run(spec, d, progress=None if args.no_progress else _say)
            except Exception as e:  # noqa: BLE001 - one run that could not finish; the others go on
                failed.append(f"{spec.label}: {type(e).__name__}: {e} (history and logs in {d})")
                print(f"   did not finish: {failed[-1]}", flush=True)
                continue
            ops = pair(read_events(d / "history.jsonl"))
            report.plot(ops, d / "plot.png", f"{spec.label} ({args.cycles} cycles)")
            rows.append(result.row)
            bad += len(result.anomalies)
            if result.net_note:
                print(f"   partitions through: {result.net_note}")
            for a in result.anomalies[:20]:
                print(f"   {a.kind} {a.job}: {a.detail}")
    print(report.table(rows))
    # a table already there keeps its other runs' rows: one nemesis can be run again alone
    previous = args.out / "table.json"
    ran = {r["run"] for r in rows}
    kept = [r for r in json.loads(previous.read_text()) if r["run"] not in ran] if previous.exists() else []
    rows = sorted(kept + rows, key=lambda r: (r["run"].rsplit("-", 1)[1], r["run"]))
    notes = "".join(f"\nDid not finish: {f}\n" for f in failed)
    (args.out / "table.md").write_text(report.markdown(rows) + notes)
    previous.write_text(json.dumps(rows, indent=1))
    print(notes, end="")
    return 1 if bad or failed else 0


def _say(line: str) -> None:
    print(line, flush=True)


if __name__ == "__main__":
    sys.exit(main())
