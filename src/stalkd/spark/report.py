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

from stalkd.tubes import is_internal

PLOTS = (  # file name, caption
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


LEGEND_MAX = 8  # tubes a chart names; the others are drawn thin and grey as one "N other tubes"
LABEL_MAX = 28  # characters of a tube name on an axis (stalkd.key.<sha1> would be 51)
OTHERS = "#b0b0b0"
PERCENTILES = (("p50", "#4c72b0"), ("p90", "#dd8452"), ("p99", "#c44e52"))

Legend = list[tuple[str, str]]  # (label, colour as #rrggbb), shown under a chart in the page


def named_tubes(tubes: Sequence[Row], limit: int = LEGEND_MAX) -> list[str]:
    """The ``limit`` busiest tubes (most jobs, then by name): the ones charts name.

    >>> named_tubes([{"tube": "a", "jobs": 1}, {"tube": "b", "jobs": 9}, {"tube": "c", "jobs": 5}], 2)
    ['b', 'c']
    """
    ranked = sorted(tubes, key=lambda t: (-int(t.get("jobs") or 0), str(t["tube"])))
    return [str(t["tube"]) for t in ranked[:limit]]


def short(name: str, limit: int = LABEL_MAX) -> str:
    """A tube name cut to ``limit`` characters for an axis, its middle elided (names of one
    family differ at their ends: ``stalkd.key.<sha1>``).

    >>> short("emails"), short("stalkd.key.0123456789abcdef", 16)
    ('emails', 'stalkd.…89abcdef')
    """
    if len(name) <= limit:
        return name
    tail = limit // 2
    return name[:limit - tail - 1] + "…" + name[-tail:]


def write_plots(windows: Sequence[Row], tubes: Sequence[Row], out_dir: Path,
                window_seconds: float) -> dict[str, Legend]:
    """Render the four PNGs into ``out_dir``; returns each one's legend (by file name), which
    the page shows beside it: at most ``LEGEND_MAX`` tubes have a colour and a legend entry,
    the rest share one grey entry, so no legend covers a chart however many tubes there are."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_hex

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / name for name, _ in PLOTS]
    per = f"per {window_seconds:g} s"
    named = named_tubes(tubes)
    # tab10 without its grey, which is the other tubes' colour
    palette = [to_hex(c) for i, c in enumerate(plt.get_cmap("tab10").colors) if i != 7]  # type: ignore[attr-defined]
    colour = {t: palette[i % len(palette)] for i, t in enumerate(named)}
    every = {str(t["tube"]) for t in tubes} | {str(w["tube"]) for w in windows}
    others = len(every - set(named))
    tube_legend: Legend = [(t, colour[t]) for t in named]
    if others:
        tube_legend.append((f"{others} other tube{'s' if others > 1 else ''}", OTHERS))

    def lines(ax: Any, key: str, **kw: Any) -> None:
        series = _series(windows, key, step=kw.pop("step", None))
        for tube in sorted(series, key=lambda t: t in colour):  # named tubes drawn on top
            xs, ys = series[tube]
            if tube in colour:
                ax.plot(xs, ys, color=colour[tube], linewidth=1.6, **kw)
            else:
                ax.plot(xs, ys, color=OTHERS, linewidth=0.8, alpha=0.7, **kw)

    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    lines(ax1, "puts", step=window_seconds, drawstyle="steps-post")
    lines(ax2, "deletes", step=window_seconds, drawstyle="steps-post")
    for ax, what in ((ax1, "puts"), (ax2, "deletes")):
        _counts_axis(ax)
        ax.set_ylabel(f"{what} {per}")
    ax2.set_xlabel("time (UTC)")
    _finish(fig, paths[0])

    # Latency: horizontal bars, one group per tube, so the names read across however many
    shown = sorted(tubes, key=lambda t: str(t["tube"]), reverse=True)  # A at the top
    names = [short(str(t["tube"])) for t in shown]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 1.4 + 0.42 * max(3, len(names))), sharey=True)
    for ax, kind in ((ax1, "wait"), (ax2, "run")):
        height = 0.26
        for i, (p, c) in enumerate(PERCENTILES):
            vals = [float(t[f"{kind}_{p}_s"] or 0.0) for t in shown]
            ax.barh([y + (1 - i) * height for y in range(len(names))], vals, height, color=c)
        ax.set_yticks(range(len(names)), names)
        ax.set_ylim(-0.6, len(names) - 0.4)
        ax.set_xlabel(f"{'queue wait' if kind == 'wait' else 'run time'} (s)")
        ax.set_title("queue wait" if kind == "wait" else "run time")
        ax.xaxis.set_major_locator(plt.MaxNLocator(5))  # type: ignore[attr-defined]
    _finish(fig, paths[1], dates=False)

    fig, ax = plt.subplots(figsize=(10, 4))
    ax = cast(Any, ax)  # matplotlib's stubs reject datetime x values, which it plots fine
    lines(ax, "backlog", step=window_seconds, drawstyle="steps-post")
    _counts_axis(ax)
    ax.set_ylabel("jobs in the queue")
    ax.set_xlabel("time (UTC)")
    _finish(fig, paths[2])

    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    lines(ax1, "retry_rate", marker=".")
    lines(ax2, "bury_rate", marker=".")
    ax1.set_ylim(bottom=0)
    ax2.set_ylim(bottom=0)
    ax1.set_ylabel("retries / reserve")
    ax2.set_ylabel("buries / reserve")
    ax2.set_xlabel("time (UTC)")
    _finish(fig, paths[3])
    return {PLOTS[0][0]: tube_legend, PLOTS[1][0]: list(PERCENTILES),
            PLOTS[2][0]: tube_legend, PLOTS[3][0]: tube_legend}


def _counts_axis(ax: Any) -> None:
    """A y axis of job counts: from 0, whole numbers only, at most 6 labels (no 0.5 jobs,
    no labels piling up on a small range)."""
    from matplotlib.ticker import MaxNLocator

    ax.set_ylim(bottom=0)
    ax.yaxis.set_major_locator(MaxNLocator(nbins=6, integer=True))


def _finish(fig: Any, path: Path, *, dates: bool = True) -> None:
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    if dates:
        for ax in fig.axes:
            # Concise labels (no "10:40.000000"): the axis offset shows the date once; at most
            # 8 ticks, so labels never touch at the page's width.
            locator = mdates.AutoDateLocator(tz=UTC, maxticks=8)  # type: ignore[no-untyped-call]
            ax.xaxis.set_major_locator(locator)
            ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator, tz=UTC))  # type: ignore[no-untyped-call]
    fig.align_ylabels()
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


def _legend_html(entries: Legend) -> str:
    if not entries:
        return ""
    items = "".join(f'<li><span class="swatch" style="background:{html.escape(c)}"></span>'
                    f"{html.escape(label)}</li>" for label, c in entries)
    return f'<ul class="legend">{items}</ul>'


def write_html(out_dir: Path, tubes: Sequence[Row], *, source: str, records: int, span: str,
               window_seconds: float, legends: Mapping[str, Legend] | None = None,
               hidden: int = 0) -> Path:
    """Write ``report.html`` beside the PNGs; returns its path. ``legends``: what
    ``write_plots`` returned; ``hidden``: internal tubes left out (said on the page)."""
    head = "".join(f"<th>{html.escape(h)}</th>" for _, h, _ in _COLUMNS)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_cell(t, k, f))}</td>" for k, _, f in _COLUMNS) + "</tr>"
        for t in tubes
    )
    figures = "".join(
        f'<figure><img src="{name}" alt="{html.escape(title)}"><figcaption>{html.escape(title)}'
        f"{_legend_html((legends or {}).get(name, []))}</figcaption></figure>"
        for name, title in PLOTS
    )
    note = (f" &middot; {hidden} internal stalkd.* tube{'s' if hidden > 1 else ''} hidden "
            "(stalkd analyze --all shows them)") if hidden else ""
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>stalkd job analytics</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1000px; padding: 0 1em;
        color: #222; }}
h1 {{ font-size: 1.5em; margin-bottom: 0.2em; }}
p.meta {{ color: #555; margin-top: 0; }}
table {{ border-collapse: collapse; width: 100%; font-size: 0.9em; }}
th, td {{ border-bottom: 1px solid #ddd; padding: 4px 8px; text-align: right; white-space: nowrap; }}
th:first-child, td:first-child {{ text-align: left; white-space: normal; overflow-wrap: anywhere;
                                  max-width: 16em; }}
ul.legend {{ list-style: none; padding: 0; margin: 0.4em 0 0; display: flex; flex-wrap: wrap;
             gap: 0.2em 1.2em; }}
ul.legend li {{ overflow-wrap: anywhere; }}
.swatch {{ display: inline-block; width: 0.9em; height: 0.9em; margin-right: 0.35em;
           vertical-align: -0.1em; border-radius: 2px; }}
th {{ background: #f3f3f3; }}
figure {{ margin: 1.5em 0; }}
img {{ max-width: 100%; border: 1px solid #eee; }}
figcaption {{ color: #555; font-size: 0.9em; }}
</style></head>
<body>
<h1>stalkd job analytics</h1>
<p class="meta">{html.escape(source)} &middot; {records:,} records &middot; {html.escape(span)}
 &middot; windows of {window_seconds:g} s{note}</p>
<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>
{figures}
<p class="meta">Tables (Parquet): jobs/, windows/, tubes/ next to this page.</p>
</body></html>
"""
    path = out_dir / "report.html"
    path.write_text(page, encoding="utf-8")
    return path


def write_report(out_dir: Path, windows: Sequence[Row], tubes: Sequence[Row], *, source: str,
                 records: int, span: str, window_seconds: float,
                 internal: bool = False) -> tuple[Path, str]:
    """The plots, ``report.html`` and ``summary.txt`` in ``out_dir``; returns the page's path
    and the summary. stalkd's internal tubes (``stalkd.*``: dead letters, unique keys, limits,
    cancel markers) are left out unless ``internal``, as ``stalkd tubes`` and ``top`` do."""
    shown_tubes = [t for t in tubes if internal or not is_internal(str(t["tube"]))]
    shown_windows = [w for w in windows if internal or not is_internal(str(w["tube"]))]
    hidden = len(tubes) - len(shown_tubes)
    legends = write_plots(shown_windows, shown_tubes, out_dir, window_seconds)
    page = write_html(out_dir, shown_tubes, source=source, records=records, span=span,
                      window_seconds=window_seconds, legends=legends, hidden=hidden)
    summary = summary_text(shown_tubes, records=records, span=span)
    if hidden:
        summary += f"\n({hidden} internal stalkd.* tube(s) hidden: --all shows them)"
    (out_dir / "summary.txt").write_text(summary + "\n", encoding="utf-8")
    return page, summary
