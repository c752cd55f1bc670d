"""The analytics report: PNG plots, one HTML page that shows them, and a terminal summary.

Pure with respect to Spark: it takes the already collected ``windows`` and ``tubes`` rows (small:
one per tube and window), so it can be tested and re-rendered without a session.

Ensures: every plot the page references exists next to it (relative links, so the output
directory can be moved or served as is); text in the page is HTML-escaped.

Example::

    >>> text = summary_text([])        # no tubes: says so instead of printing an empty table
    >>> "no jobs" in text
    True
"""

from __future__ import annotations

import html
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

PLOTS = (
    ("throughput.png", "Throughput per tube (puts and deletes per window)"),
    ("latency.png", "Queue wait and run time per tube (p50 / p90 / p99)"),
    ("backlog.png", "Backlog per tube (jobs put and not yet deleted)"),
    ("rates.png", "Retry and bury rates per tube and window"),
)

Row = Mapping[str, Any]


def utc(dt: datetime) -> datetime:
    """A naive datetime from ``collect()`` (local time) as an aware UTC datetime."""
    return datetime.fromtimestamp(dt.timestamp(), tz=UTC) if dt.tzinfo is None else dt.astimezone(UTC)


def _series(windows: Sequence[Row], key: str, *, step: float | None = None
            ) -> dict[str, tuple[list[datetime], list[float]]]:
    """Per tube: window starts and values. With ``step`` (the window length) the last window
    gets an end point too, so a step plot shows it as wide as the others."""
    out: dict[str, tuple[list[datetime], list[float]]] = defaultdict(lambda: ([], []))
    for r in sorted(windows, key=lambda r: (r["tube"], r["window_start"])):
        xs, ys = out[r["tube"]]
        xs.append(utc(r["window_start"]))
        v = r[key]
        ys.append(math.nan if v is None else float(v))
    if step is not None:
        for xs, ys in out.values():
            xs.append(xs[-1] + timedelta(seconds=step))
            ys.append(ys[-1])
    return dict(out)


def write_plots(windows: Sequence[Row], tubes: Sequence[Row], out_dir: Path, window_seconds: float) -> list[Path]:
    """Render the four PNGs into ``out_dir``; returns their paths in page order."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / name for name, _ in PLOTS]
    per = f"per {window_seconds:g} s"

    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    for tube, (xs, ys) in _series(windows, "puts", step=window_seconds).items():
        ax1.plot(xs, ys, label=tube, drawstyle="steps-post")
    for tube, (xs, ys) in _series(windows, "deletes", step=window_seconds).items():
        ax2.plot(xs, ys, label=tube, drawstyle="steps-post")
    ax1.set_ylim(bottom=0)
    ax2.set_ylim(bottom=0)
    ax1.set_ylabel(f"puts {per}")
    ax2.set_ylabel(f"deletes {per}")
    ax2.set_xlabel("time (UTC)")
    _legend(ax1)
    _finish(fig, paths[0])

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    names = [str(t["tube"]) for t in tubes]
    for ax, kind in ((ax1, "wait"), (ax2, "run")):
        width = 0.26
        for i, p in enumerate(("p50", "p90", "p99")):
            vals = [float(t[f"{kind}_{p}_s"] or 0.0) for t in tubes]
            ax.bar([x + (i - 1) * width for x in range(len(names))], vals, width, label=p)
        ax.set_xticks(range(len(names)), names, rotation=30, ha="right")
        pad = max(0.0, (3 - len(names)) / 2)  # few tubes: keep the bars narrow and centred
        ax.set_xlim(-0.6 - pad, len(names) - 0.4 + pad)
        ax.set_ylabel(f"{'queue wait' if kind == 'wait' else 'run time'} (s)")
        ax.set_title("queue wait" if kind == "wait" else "run time")
        _legend(ax)
    _finish(fig, paths[1], dates=False)

    fig, ax = plt.subplots(figsize=(10, 4))
    ax = cast(Any, ax)  # matplotlib's stubs reject datetime x values, which it plots fine
    for tube, (xs, ys) in _series(windows, "backlog", step=window_seconds).items():
        ax.plot(xs, ys, label=tube, drawstyle="steps-post")
    ax.set_ylim(bottom=0)
    ax.set_ylabel("jobs in the queue")
    ax.set_xlabel("time (UTC)")
    _legend(ax)
    _finish(fig, paths[2])

    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    for tube, (xs, ys) in _series(windows, "retry_rate").items():
        ax1.plot(xs, ys, label=tube, marker=".")
    for tube, (xs, ys) in _series(windows, "bury_rate").items():
        ax2.plot(xs, ys, label=tube, marker=".")
    ax1.set_ylim(bottom=0)
    ax2.set_ylim(bottom=0)
    ax1.set_ylabel("retries / reserve")
    ax2.set_ylabel("buries / reserve")
    ax2.set_xlabel("time (UTC)")
    _legend(ax1)
    _finish(fig, paths[3])
    return paths


def _legend(ax: Any) -> None:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best", fontsize="small")


def _finish(fig: Any, path: Path, *, dates: bool = True) -> None:
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    if dates:
        for ax in fig.axes:
            # Concise labels (no "10:40.000000"): the axis offset shows the date once.
            locator = mdates.AutoDateLocator(tz=UTC)  # type: ignore[no-untyped-call]
            ax.xaxis.set_major_locator(locator)
            ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator, tz=UTC))  # type: ignore[no-untyped-call]
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


_COLUMNS = (
    ("tube", "tube", "{}"),
    ("jobs", "jobs", "{:,}"),
    ("puts", "puts", "{:,}"),
    ("reserves", "reserves", "{:,}"),
    ("deletes", "deletes", "{:,}"),
    ("buried_jobs", "buried", "{:,}"),
    ("retry_rate", "retry rate", "{:.1%}"),
    ("wait_p50_s", "wait p50", "{:.3f} s"),
    ("wait_p99_s", "wait p99", "{:.3f} s"),
    ("run_p50_s", "run p50", "{:.3f} s"),
    ("run_p99_s", "run p99", "{:.3f} s"),
)


def _cell(row: Row, key: str, fmt: str) -> str:
    v = row.get(key)
    return "-" if v is None else fmt.format(v)


def summary_text(tubes: Sequence[Row], *, records: int | None = None, span: str = "") -> str:
    """A fixed-width table of the per-tube figures, for the terminal."""
    if not tubes:
        return "no jobs found in the log"
    rows = [[h for _, h, _ in _COLUMNS]] + [[_cell(t, k, f) for k, _, f in _COLUMNS] for t in tubes]
    widths = [max(len(r[i]) for r in rows) for i in range(len(_COLUMNS))]
    lines = []
    if records is not None:
        lines.append(f"{records:,} records{', ' + span if span else ''}")
    for n, r in enumerate(rows):
        lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))))
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def write_html(out_dir: Path, tubes: Sequence[Row], *, source: str, records: int, span: str,
               window_seconds: float) -> Path:
    """Write ``report.html`` beside the PNGs; returns its path."""
    head = "".join(f"<th>{html.escape(h)}</th>" for _, h, _ in _COLUMNS)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_cell(t, k, f))}</td>" for k, _, f in _COLUMNS) + "</tr>"
        for t in tubes
    )
    figures = "".join(
        f'<figure><img src="{name}" alt="{html.escape(title)}"><figcaption>{html.escape(title)}</figcaption></figure>'
        for name, title in PLOTS
    )
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>stalkd job analytics</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1000px; color: #222; }}
h1 {{ font-size: 1.5em; margin-bottom: 0.2em; }}
p.meta {{ color: #555; margin-top: 0; }}
table {{ border-collapse: collapse; width: 100%; font-size: 0.9em; }}
th, td {{ border-bottom: 1px solid #ddd; padding: 4px 8px; text-align: right; white-space: nowrap; }}
th:first-child, td:first-child {{ text-align: left; }}
th {{ background: #f3f3f3; }}
figure {{ margin: 1.5em 0; }}
img {{ max-width: 100%; border: 1px solid #eee; }}
figcaption {{ color: #555; font-size: 0.9em; }}
</style></head>
<body>
<h1>stalkd job analytics</h1>
<p class="meta">{html.escape(source)} &middot; {records:,} records &middot; {html.escape(span)}
 &middot; windows of {window_seconds:g} s</p>
<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>
{figures}
<p class="meta">Tables (Parquet): jobs/, windows/, tubes/ next to this page.</p>
</body></html>
"""
    path = out_dir / "report.html"
    path.write_text(page, encoding="utf-8")
    return path
