"""PNG plots of a run (matplotlib, no display: figures are drawn with the Agg canvas
directly, so plotting works in any process, a sweep's workers included)."""

from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from nicsim.trace.stats import mean_ci95, plot_bin_size
from nicsim.trace.timeseries import Probe

MAX_SERIES = 8  # lines in one time-series plot; the busiest are drawn, the rest named


def _figure() -> tuple[Figure, Any]:
    fig = Figure(figsize=(7.5, 4.2), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(111)
    ax.grid(True, alpha=0.3)
    return fig, ax


def _save(fig: Figure, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path)
    return path


def fct_slowdown(collector: Any, path: Path) -> Path | None:
    """FCT slowdown (p50, p95, p99) against message size, in logarithmic size bins."""
    bins = sorted((b, q) for b, q in collector.plot.items() if q.n)
    if not bins:
        return None
    x = np.array([plot_bin_size(b) for b, _ in bins])
    fig, ax = _figure()
    for q, style in ((0.5, "o-"), (0.95, "s--"), (0.99, "^:")):
        ax.plot(x, [b[1].quantile(q) for b in bins], style, ms=4,
                label=f"p{q * 100:g}" if q != 0.5 else "median")
    ax.set_xscale("log")
    ax.set_yscale("log")  # slowdowns span 1 to thousands under congestion
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("FCT slowdown (FCT / ideal)")
    ax.set_title("FCT slowdown by size")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.legend()
    return _save(fig, path)


def latency_cdf(collector: Any, path: Path) -> Path | None:
    v, f = collector.latency.cdf()
    if not len(v):
        return None
    fig, ax = _figure()
    ax.plot(v / 1000.0, f, drawstyle="steps-post")
    ax.set_xscale("log")
    ax.set_xlabel("latency / FCT (us)")
    ax.set_ylabel("fraction of WRs")
    ax.set_ylim(0, 1.01)
    ax.set_title("Completion time CDF")
    return _save(fig, path)


def read_series(path: Path) -> tuple[str, dict[str, tuple[np.ndarray, np.ndarray]]]:
    """A long-format time-series CSV as {series: (times_us, values)} and the value column."""
    data: dict[str, tuple[list[float], list[float]]] = defaultdict(lambda: ([], []))
    with path.open(newline="") as f:
        r = csv.reader(f)
        header = next(r)
        for t, s, v in r:
            d = data[s]
            d[0].append(float(t))
            d[1].append(float(v))
    return header[2], {s: (np.array(t), np.array(v)) for s, (t, v) in data.items()}


def timeseries(probe: Probe, csv_path: Path, path: Path) -> Path | None:
    value, series = read_series(csv_path)
    if not series:
        return None
    ranked = sorted(series, key=lambda s: -float(np.mean(series[s][1])))
    fig, ax = _figure()
    for s in ranked[:MAX_SERIES]:
        t, v = series[s]
        ax.plot(t, v, lw=1.2, label=s)
    if len(ranked) > MAX_SERIES:
        ax.set_title(f"{probe.title or probe.name} (busiest {MAX_SERIES} of {len(ranked)})")
    else:
        ax.set_title(probe.title or probe.name)
    ax.set_xlabel("simulated time (us)")
    ax.set_ylabel(value.replace("_", " "))
    ax.legend(fontsize="small", loc="best")
    return _save(fig, path)


def sweep_lines(rows: list[dict[str, Any]], x: str, metrics: list[str], by: str | None,
                path: Path, title: str) -> Path | None:
    """One metric (or several) of a sweep's points against a swept parameter, one line per
    value of another parameter (`by`): the mean over seeds with its 95% interval."""
    pts: dict[Any, dict[Any, list[float]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        for m in metrics:
            v = row.get(m)
            if v in (None, ""):
                continue
            key = (row.get(by), m) if by else (None, m)
            pts[key][row[x]].append(float(v))
    if not pts:
        return None
    fig, ax = _figure()
    numeric = all(isinstance(k, (int, float)) for d in pts.values() for k in d)
    for (b, m), d in sorted(pts.items(), key=lambda kv: str(kv[0])):
        xs = sorted(d) if numeric else list(d)
        label = m if b is None else (f"{by}={b}" + (f" {m}" if len(metrics) > 1 else ""))
        # The mean over seeds, and its 95% interval where there are several seeds.
        spread = [mean_ci95(d[k]) for k in xs]
        yerr = [h or 0.0 for _m, h in spread]
        ax.errorbar(range(len(xs)) if not numeric else xs, [m for m, _h in spread],
                    yerr=yerr if any(yerr) else None, fmt="o-", capsize=3, label=label)
        if not numeric:
            ax.set_xticks(range(len(xs)), [str(k) for k in xs])
    ax.set_xlabel(x)
    ax.set_ylabel(metrics[0] if len(metrics) == 1 else "value")
    ax.set_title(title)
    ax.legend(fontsize="small")
    return _save(fig, path)
