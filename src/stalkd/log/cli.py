"""``stalkd log inspect DIR|URL [--verify] [--json]`` and ``stalkd log repair DIR``.

``inspect``: segments, offsets, frame counts, groups and their lag, and the checks recovery runs
(the same code: ``recovery.recover(mode="check")``); ``--verify`` also checks every frame of the
sealed segments, and for a server data directory every snapshot. Exit 1 on any damage, 2 for a
directory holding no log. Read-only: it never takes the writer lock, so it is safe beside a
running server.

``repair``: cut the log at its first damage (the writer lock is taken, so a running server is
never repaired under its feet), keeping the dropped bytes in ``DIR/dropped/``; prints what was
cut and the records (job ids, for a data directory) still readable in the dropped bytes.

DIR is a log directory or a server data directory (``stalkd serve -b DIR``), see ``layout``;
``inspect`` also takes an archive (``s3://...``, or a directory holding ``manifest.json``),
through ``hooks.inspect_archive`` (``stalkd.archive.inspect``), in the same report shape. Given a
server data directory whose server ships to an archive (``hooks.shipped_to``), it reports and
checks both: the local log and the archive holding what retention deleted locally.
The data-directory checks (snapshots) are the persistence layer's; ``stalkd.node.logcmd.log_main``
passes them in as ``hooks``, so this layer never imports the engine.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from stalkd.pids import pid_alive

from .cursor import read_cursor
from .errors import LogCorruptError, LogError, LogLockedError, NotALogError
from .fs import REAL
from .group import GROUPS_DIR
from .layout import resolve_log_dir
from .lock import LOCK_NAME
from .log import Log
from .reader import LogReader, list_segments
from .recovery import recover

__all__ = ["DataDirHooks", "main", "inspect"]


class DataDirHooks(Protocol):
    """What a server data directory adds to its log's checks, and how an archive URL is
    inspected (given by the layers above)."""

    def is_data_log(self, log_dir: str) -> bool: ...
    def check(self, log_dir: str, next_offset: int, oldest: int, verify: bool) -> list[dict[str, Any]]: ...
    def repair(self, log_dir: str, segment_size: int) -> tuple[list[str], list[tuple[int, bytes]]]: ...
    def describe_records(self, records: Iterable[tuple[int, bytes]]) -> list[str]: ...
    def is_archive(self, path: str) -> bool: ...
    def inspect_archive(self, url: str, verify: bool) -> dict[str, Any]: ...
    def shipped_to(self, log_dir: str) -> str | None: ...


def _writer(path: str) -> str:
    try:
        pid = int(REAL.read_file(os.path.join(path, LOCK_NAME)).strip() or 0)
    except (OSError, ValueError, LogError):  # LogError: a LOCK that is a symlink is not read
        return "none"
    if pid <= 0:
        return "none"
    return f"pid {pid}" if pid_alive(pid) else f"none (last: pid {pid})"


def inspect(path: str, verify: bool = False, hooks: DataDirHooks | None = None) -> dict[str, Any]:
    """A report of the log in ``path`` as plain data; ``report["corrupt"]`` lists problems found
    (the damage recovery would refuse, and with ``verify`` every bad frame and snapshot).

    >>> import tempfile
    >>> from stalkd.log import Log
    >>> with Log.open(tempfile.mkdtemp(), durability="never") as log:
    ...     _ = log.append_many([b"a", b"b"])
    >>> r = inspect(log.path, verify=True); r["segments"][0]["frames"], r["corrupt"]
    (2, [])
    """
    report: dict[str, Any] = {"path": path, "writer": _writer(path), "segments": [], "groups": [], "corrupt": []}
    checked = recover(path, mode="check", verify=verify)
    for d in checked.damage:
        report["corrupt"].append({"path": d.path, "position": d.position, "offset": d.offset,
                                  "following": d.following, "error": d.describe()})  # fmt: skip
    report["torn_tail_bytes"] = checked.torn
    report["mark"] = checked.mark
    seen = {(c["path"], c["position"]) for c in report["corrupt"]}
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
                    if (e.path, e.position) not in seen:
                        report["corrupt"].append({"path": e.path, "position": e.position, "offset": e.offset,
                                                  "error": str(e)})  # fmt: skip
                row["frames"] = frames
                if row["end"] is None:
                    row["end"] = last
            else:
                row["frames"] = seg.end_offset - seg.base_offset if seg.end_offset is not None else None
            end = max(end, row["end"] or 0)
            report["segments"].append(row)
    report["next_offset"] = end
    if hooks is not None and hooks.is_data_log(path):
        live = [s for s in report["segments"] if not s["archived"]]
        oldest = live[0]["base"] if live else checked.next_offset
        report["corrupt"].extend(hooks.check(path, checked.next_offset, oldest, verify))
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
    if report.get("mark") is not None:
        print(f"high-water mark: offset {report['mark']} (every record below it was durable when last written)")
    for s in segs:
        state = "archived" if s["archived"] else ("sealed" if s["sealed"] else "active")
        print(f"  {s['file']:<44} base {s['base']:>12}  end {s['end'] if s['end'] is not None else '?':>12}"
              f"  frames {s['frames'] if s['frames'] is not None else '?':>9}  {state:<8}  {s['size']:>11} B")
    if report["groups"]:
        print("groups:")
        for g in report["groups"]:
            print(f"  {g['name']:<24} committed {g['committed']:>12}  lag {g['lag']:>10}"
                  f"  expired {g['expired']}  dropped {g['dropped']}")
    if report.get("torn_tail_bytes") and not report["corrupt"]:  # past damage they are no torn write
        print(f"torn tail: {report['torn_tail_bytes']} bytes after the last whole frame (a write a crash "
              "interrupted; cut when the log is next opened, not damage)")  # fmt: skip
    for c in report["corrupt"]:
        print(f"CORRUPT {c['path']} byte {c['position']} offset {c['offset']}: {c['error']}")
    if "parts" in report:  # an archive
        print(f"manifest: {report['parts']} parts; snapshots: {', '.join(report['snapshots']) or 'none'}")
    if report["corrupt"] and "parts" in report:
        print("damaged: the archive objects named above do not match its manifest (the server ships "
              "only segments it still has; read around the damage or restore the objects)")
    elif report["corrupt"]:
        print(f"damaged: to cut the log at the damage, keeping the dropped bytes, run: stalkd log repair {report['path']}")
    else:
        print("verify: OK, every frame's CRC checked" if verify else "ok (sealed segments not verified; use --verify)")


_LIST_MAX = 1000  # lines of salvaged records printed by a repair


def _segment_size(root: str) -> int:
    """The size new segments get after a repair: the largest live segment's (64 MiB if none)."""
    sizes = [os.path.getsize(p) for _, p, _ in list_segments(root, archive=False)]
    return max(sizes) if sizes else 64 * 2**20


def repair(root: str, hooks: DataDirHooks | None = None, segment_size: int | None = None) -> int:
    """``stalkd log repair``: cut the log in ``root`` at its first damage; prints what was done."""
    size = segment_size or _segment_size(root)
    try:
        if hooks is not None and hooks.is_data_log(root):
            lines, salvaged = hooks.repair(root, size)
            described = hooks.describe_records(salvaged)
        else:
            with Log.open(root, segment_size=size, durability="always", repair=True) as log:
                rep = log.repair_report
                lines = [] if rep is None else [
                    f"{rep.path}: log cut at byte {rep.position} (offset {rep.offset}): {rep.reason}; "
                    f"dropped bytes kept in {', '.join(rep.dropped_files) or '(none)'}"]  # fmt: skip
                salvaged = list(rep.salvaged) if rep else []
                described = [f"record at offset {o} ({len(p)} bytes)" for o, p in salvaged]
    except LogLockedError as e:
        print(f"stalkd log repair: {e}; stop the server first", file=sys.stderr)
        return 1
    if not lines:
        print(f"{root}: nothing to repair, the log is intact")
        return 0
    for line in lines:
        print(line)
    if described:
        print(f"{len(salvaged)} records could still be read from the dropped bytes:")
        for line in described[:_LIST_MAX]:
            print(f"  {line}")
        if len(described) > _LIST_MAX:
            print(f"  ... and {len(described) - _LIST_MAX} more (the bytes are in the dropped/ files above)")
    elif salvaged == [] and any("cut" in x for x in lines) and not any("precede the snapshot" in x for x in lines):
        print("no whole record could be read from the dropped bytes")
    return 0


def main(argv: Sequence[str], hooks: DataDirHooks | None = None) -> int:
    """Entry point of ``stalkd log``; returns the exit code (1 on damage, 2 on usage errors or a
    directory holding no log)."""
    parser = argparse.ArgumentParser(prog="stalkd log", description="Inspect or repair a stalkd log.")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("inspect", help="segments, offsets, frame counts, groups and lag; exit 1 on damage",
                       description="Report a log and check it as recovery does (read-only, safe beside "
                                   "a running server). Exit 1 on damage, 2 if DIR holds no log.")  # fmt: skip
    r = sub.add_parser("repair", help="cut a damaged log at its damage, keeping the dropped bytes",
                       description="Cut the log at its first damage (every frame is checked). The bytes "
                                   "cut off are kept in the log's dropped/ directory; the records still "
                                   "readable in them are listed. Stop the server first.")  # fmt: skip
    for q in (p, r):
        q.add_argument("dir", nargs="?", help="the log directory, a server data directory (its wal/), or for "
                                               "inspect an archive (s3://BUCKET/PREFIX, or its directory)")
        q.add_argument("-b", "--dir", dest="data_dir", metavar="DIR",
                       help="the server's data directory, as given to stalkd serve -b")
    p.add_argument("--verify", action="store_true", help="also check every frame of sealed segments and every snapshot "
                                                          "(of an archive: fetch each object, check it against the manifest)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    r.add_argument("-s", "--wal-size", type=int, metavar="BYTES",
                   help="size of a segment the repair creates (default: the largest existing one)")
    args = parser.parse_args(list(argv))
    given = args.data_dir if args.data_dir is not None else args.dir
    if given is None or (args.data_dir is not None and args.dir is not None):
        parser.error(f"give one directory: stalkd log {args.cmd} DIR (or -b DATA_DIR)")
    if hooks is not None and hooks.is_archive(given):
        if args.cmd == "repair":
            print(f"stalkd log repair: {given} is an archive, written only by the server shipping to it; "
                  f"check it with: stalkd log inspect {given} --verify", file=sys.stderr)
            return 2
        try:
            report = hooks.inspect_archive(given, args.verify)
        except (LogError, OSError) as e:  # no manifest (NotALogError), an unreachable store
            print(f"stalkd log: {e}", file=sys.stderr)
            return 2 if isinstance(e, NotALogError) else 1
        return _report(report, args.json, args.verify)
    try:
        root = str(resolve_log_dir(given))
    except NotALogError as e:
        print(f"stalkd log: {e}", file=sys.stderr)
        return 2
    if args.cmd == "repair":
        return repair(root, hooks, args.wal_size)
    try:
        report = inspect(root, verify=args.verify, hooks=hooks)
    except LogError as e:
        print(f"stalkd log: {e}", file=sys.stderr)
        return 1
    # A server shipping to an archive keeps only the newest segments: its log is both.
    url = hooks.shipped_to(root) if hooks is not None else None
    if url is None:
        return _report(report, args.json, args.verify)
    try:
        report["archive"] = hooks.inspect_archive(url, args.verify)  # type: ignore[union-attr]
    except NotALogError:  # no manifest yet: nothing sealed has been shipped
        report["archive"] = {"url": url, "segments": [], "corrupt": []}
    except (LogError, OSError) as e:
        report["archive"] = {"url": url, "error": str(e)}
    code = _report(report, args.json, args.verify)
    archive = report["archive"]
    if "error" in archive:
        print(f"stalkd log: the archive this server ships to, {url}, could not be read: {archive['error']}",
              file=sys.stderr)
        return 1
    if not args.json and "parts" not in archive:
        print(f"\nshipped to {url}: nothing yet (no manifest)")
    elif not args.json:
        print(f"\nshipped to {url} (the history retention deleted here):")
        _print(archive, args.verify)
    return 1 if archive["corrupt"] else code


def _report(report: dict[str, Any], as_json: bool, verify: bool) -> int:
    if as_json:
        print(json.dumps(report, indent=2))
    else:
        _print(report, verify)
    return 1 if report["corrupt"] else 0
