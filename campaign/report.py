"""A run's row of the table, the table as text and markdown, and the plot of a run.

Columns: cycles (faults injected), ops (client operations), acknowledged (puts the server
acknowledged), lost, duplicated, resurrected, invented, reused ids (the checker's counts), other
(its remaining kinds: double holds, priority, early delays, fenced acks) and unavailable s: the
time without any acknowledged put, summed over the gaps longer than ``GAP`` seconds between
consecutive acknowledged puts (producers put many times a second, so a longer gap is the
server not taking writes).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from campaign.checker import Anomaly, count
from campaign.history import WATCH, Op, is_harness

__all__ = ["row", "table", "markdown", "plot", "unavailable", "COLUMNS"]

GAP = 1.0
COLUMNS = ("run", "cycles", "ops", "acknowledged", "lost", "duplicated", "resurrected",
           "invented", "reused ids", "other", "unavailable s")
OTHER = ("double-hold", "priority", "early-delay", "fenced-ack")


def unavailable(ops: Iterable[Op]) -> float:
    """Seconds in gaps longer than ``GAP`` between acknowledged puts."""
    times = sorted(op.end for op in ops if op.f == "put" and op.ok)
    return sum(b - a for a, b in zip(times, times[1:], strict=False) if b - a > GAP)


def row(label: str, cycles: int, ops: Sequence[Op], anomalies: Sequence[Anomaly]) -> dict[str, Any]:
    n = count(anomalies)
    client = [op for op in ops if not is_harness(op.process)]
    return {"run": label, "cycles": cycles, "ops": len(client),
            "acknowledged": sum(1 for op in client if op.f == "put" and op.ok),
            "lost": n["lost"], "duplicated": n["duplicated"], "resurrected": n["resurrected"],
            "invented": n["invented"], "reused ids": n["reused-id"],
            "other": sum(n[k] for k in OTHER), "unavailable s": round(unavailable(client), 1)}


def table(rows: Iterable[dict[str, Any]]) -> str:
    """Rows as aligned text (what the campaign prints)."""
    rows = list(rows)
    cells = [list(COLUMNS)] + [[str(r[c]) for c in COLUMNS] for r in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(COLUMNS))]
    return "\n".join("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(line, widths, strict=True)))
                     for line in cells)


def markdown(rows: Iterable[dict[str, Any]]) -> str:
    out = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    out += ["| " + " | ".join(str(r[c]) for c in COLUMNS) + " |" for r in rows]
    return "\n".join(out) + "\n"


def fault_intervals(ops: Iterable[Op]) -> list[tuple[float, float, str]]:
    """(start, end, what) for each fault: from its start being sent to its stop completing."""
    out, begun = [], None
    for op in sorted(ops, key=lambda o: o.invoke):
        if op.process != "nemesis":
            continue
        if op.f == "start":
            begun = op
        elif op.f == "stop" and begun is not None:
            what = ",".join(str(v) for k, v in sorted(begun.value.items()) if k in ("node", "between", "offset"))
            out.append((begun.invoke, op.end, what))
            begun = None
    return out


def plot(ops: Sequence[Op], path: Path, title: str) -> None:
    """Throughput (acknowledged operations a second, by kind) and put latency over time, the
    faults shaded (Jepsen's way of drawing a run), each promotion a dashed line (``→b``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    client = [op for op in ops if not is_harness(op.process) and op.complete is not None]
    end = max((op.end for op in client), default=1.0)
    fig, (ax1, ax2) = plt.subplots(2, 1, sharex=True, figsize=(10, 6))
    bins = [i * 0.5 for i in range(int(end / 0.5) + 2)]
    for f in ("put", "reserve", "delete"):
        ts = [op.end for op in client if op.f == f and op.ok]
        if ts:
            ax1.hist(ts, bins=bins, histtype="step", label=f, weights=[2.0] * len(ts))
    ax1.set_ylabel("acknowledged ops/s")
    ax1.legend(loc="upper right", fontsize="small")
    for kind, colour in (("ok", "tab:blue"), ("fail", "tab:orange"), ("info", "tab:red")):
        pts = [(op.invoke, max(op.end - op.invoke, 1e-5)) for op in client if op.f == "put" and op.type == kind]
        if pts:
            ax2.scatter([p[0] for p in pts], [p[1] for p in pts], s=3, c=colour, label=f"put {kind}")
    ax2.set_yscale("log")
    ax2.set_ylabel("put latency (s)")
    ax2.set_xlabel("time (s)")
    ax2.legend(loc="upper right", fontsize="small")
    for a, b, what in fault_intervals(ops):
        for ax in (ax1, ax2):
            ax.axvspan(a, b, color="grey", alpha=0.25, lw=0)
        ax1.text(a, ax1.get_ylim()[1] * 0.95, what, fontsize="x-small", va="top")
    for op in ops:  # a promotion the harness saw (the failover nemesis's, or the ha topology's own)
        if op.process in ("nemesis", WATCH) and op.ok and "new" in op.value:
            for ax in (ax1, ax2):
                ax.axvline(op.end, color="tab:green", ls="--", lw=0.8)
            ax1.text(op.end, ax1.get_ylim()[1] * 0.80, f"\u2192{op.value['new']}", fontsize="x-small",
                     va="top", color="tab:green")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
