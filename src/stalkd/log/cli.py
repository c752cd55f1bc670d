"""``stalkd log inspect DIR [--verify] [--json]``: segments, offsets, frame counts, groups and
their lag, and (with ``--verify``) a CRC check of every frame. Exit code 1 on corruption.

Read-only: it never takes the writer lock, so it is safe beside a running server.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from .cursor import read_cursor
from .errors import LogCorruptError, LogError
from .group import GROUPS_DIR
from .log import LOCK_NAME
from .reader import LogReader

__all__ = ["main", "inspect"]


def _writer(path: str) -> str:
    try:
        with open(os.path.join(path, LOCK_NAME)) as f:
            pid = int(f.read().strip() or 0)
    except (OSError, ValueError):
        return "none"
    if pid <= 0:
        return "none"
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return f"none (last: pid {pid})"
    except PermissionError:
        pass
    return f"pid {pid}"


def inspect(path: str, verify: bool = False) -> dict[str, Any]:
    """A report of the log in ``path`` as plain data; ``report["corrupt"]`` lists problems found.

    >>> # inspect("/data/wal", verify=True)["segments"][0]["frames"]
    """
    report: dict[str, Any] = {"path": path, "writer": _writer(path), "segments": [], "groups": [], "corrupt": []}
    end = 0
    with LogReader(path, archive=True) as reader:
        try:
            segs = reader.segments()
        except LogCorruptError as e:
            report["corrupt"].append({"path": e.path, "position": e.position, "offset": e.offset, "error": str(e)})
            return report
        for prev, seg in zip([None, *segs], segs, strict=False):
            row: dict[str, Any] = {
                "file": os.path.relpath(seg.path, path), "base": seg.base_offset, "end": seg.end_offset,
                "sealed": seg.sealed, "archived": seg.archived, "size": seg.size,
            }
            if prev is not None and prev.end_offset is not None and prev.end_offset != seg.base_offset:
                report["corrupt"].append({"path": seg.path, "position": 0, "offset": seg.base_offset,
                                          "error": f"gap: previous segment ends at {prev.end_offset}"})
            if verify or not seg.sealed:
                frames = 0
                last = seg.base_offset
                try:
                    for f in reader.read_segment(seg.path):
                        frames += 1
                        last = f.offset + 1
                except LogCorruptError as e:
                    report["corrupt"].append({"path": e.path, "position": e.position, "offset": e.offset, "error": str(e)})
                row["frames"] = frames
                if row["end"] is None:
                    row["end"] = last
            else:
                row["frames"] = seg.end_offset - seg.base_offset if seg.end_offset is not None else None
            end = max(end, row["end"] or 0)
            report["segments"].append(row)
    report["next_offset"] = end
    gdir = os.path.join(path, GROUPS_DIR)
    if os.path.isdir(gdir):
        for name in sorted(os.listdir(gdir)):
            if not name.endswith(".cur"):
                continue
            state = read_cursor(os.path.join(gdir, name))
            if state is None:
                report["corrupt"].append({"path": os.path.join(gdir, name), "position": 0, "offset": None,
                                          "error": "no intact cursor slot"})
                continue
            acked = sum(b - a for a, b in state.acked)
            report["groups"].append({
                "name": name[:-4], "committed": state.committed, "lag": max(0, end - state.committed - acked),
                "acked_ahead": acked, "expired": state.expired, "dropped": state.dropped,
            })
    return report


def _print(report: dict[str, Any], verify: bool) -> None:
    segs = report["segments"]
    first = segs[0]["base"] if segs else 0
    print(f"log {report['path']}  writer: {report['writer']}")
    print(f"offsets {first}..{report.get('next_offset', 0)} (next {report.get('next_offset', 0)}), {len(segs)} segments")
    for s in segs:
        state = "archived" if s["archived"] else ("sealed" if s["sealed"] else "active")
        print(f"  {s['file']:<44} base {s['base']:>12}  end {s['end'] if s['end'] is not None else '?':>12}"
              f"  frames {s['frames'] if s['frames'] is not None else '?':>9}  {state:<8}  {s['size']:>11} B")
    if report["groups"]:
        print("groups:")
        for g in report["groups"]:
            print(f"  {g['name']:<24} committed {g['committed']:>12}  lag {g['lag']:>10}"
                  f"  expired {g['expired']}  dropped {g['dropped']}")
    for c in report["corrupt"]:
        print(f"CORRUPT {c['path']} byte {c['position']} offset {c['offset']}: {c['error']}")
    if not report["corrupt"]:
        print("verify: OK, every frame's CRC checked" if verify else "ok (sealed segments not verified; use --verify)")


def main(argv: Sequence[str]) -> int:
    """Entry point of ``stalkd log``; returns the exit code (1 on corruption, 2 on usage errors)."""
    parser = argparse.ArgumentParser(prog="stalkd log", description="Inspect a stalkd log directory.")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("inspect", help="segments, offsets, frame counts, groups and lag")
    p.add_argument("dir")
    p.add_argument("--verify", action="store_true", help="check the CRC of every frame")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(list(argv))
    if not os.path.isdir(args.dir):
        print(f"stalkd log: {args.dir}: not a directory", file=sys.stderr)
        return 2
    try:
        report = inspect(args.dir, verify=args.verify)
    except LogError as e:
        print(f"stalkd log: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print(report, args.verify)
    return 1 if report["corrupt"] else 0
