"""The sweep's own results: points.csv (one row per point: its parameters, seed, status and
headline figures), sweep.json, plots of each figure across the swept parameters, and a
report.html linking every point's report."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from nicsim.results import html, plots
from nicsim.sweep.point import METRICS
from nicsim.sweep.spec import Sweep
from nicsim.trace.stats import mean_ci95

PLOTTED = (("goodput_max_direction_gbps", "Goodput of the busiest direction (Gb/s)"),
           ("slowdown_p99", "FCT slowdown p99"),
           ("small_slowdown_p99", "FCT slowdown p99, smallest flows"),
           ("latency_p99_us", "Latency p99 (us)"))
UNITS = {"goodput_total_gbps": "Gb/s, payload of successful WRs over their time in flight, "
                               "summed over every direction (src -> dst): it can exceed one "
                               "link's rate",
         "goodput_max_direction_gbps": "Gb/s, the same for the busiest direction alone",
         "latency_p50_us": "us", "latency_p99_us": "us",
         "slowdown_p50": "FCT / ideal, of the largest group",
         "slowdown_p99": "FCT / ideal, of the largest group",
         "small_slowdown_p99": "FCT / ideal, flows of at most 1 kB",
         "wall_s": "seconds of wall time the point took"}


def columns(sw: Sweep) -> list[str]:
    spread = [f"{m}_{s}" for m, _t in PLOTTED for s in ("mean", "ci95")] \
        if sw.spec.seeds else []
    return ["point", *sw.keys, "seed", "status", "stop", *METRICS, *spread, "wall_s", "error",
            "dir"]


def _spread(sw: Sweep, rows: list[dict[str, Any]]) -> None:
    """Each row gets the mean and 95% interval, over its seeds, of the plotted figures of
    its point (the same parameters)."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        if r.get("status") in ("ok", "not ok"):
            groups.setdefault(tuple(str(r.get(k)) for k in sw.keys), []).append(r)
    for members in groups.values():
        for m, _t in PLOTTED:
            vals = [float(r[m]) for r in members if r.get(m) not in (None, "")]
            if not vals:
                continue
            mean, half = mean_ci95(vals)
            for r in members:
                r[f"{m}_mean"], r[f"{m}_ci95"] = mean, half


def write(sw: Sweep, out: Path, rows: list[dict[str, Any]]) -> list[str]:
    cols = columns(sw)
    if sw.spec.seeds:
        _spread(sw, rows)
    with (out / "points.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for r in rows:
            w.writerow(["" if r.get(c) is None else r.get(c) for c in cols])
    (out / "sweep.json").write_text(json.dumps(
        {"name": sw.name, "spec": sw.spec.model_dump(mode="json"), "points": rows,
         "units": UNITS}, indent=2) + "\n")
    files = ["points.csv", "sweep.json"]
    figs = []
    keys = sw.keys
    varying = [k for k in keys if len({str(r.get(k)) for r in rows}) > 1] or keys
    x = varying[0]
    by = varying[1] if len(varying) > 1 else None
    good = [r for r in rows if r.get("status") in ("ok", "not ok")]
    for m, title in PLOTTED:
        name = f"{m}.png"
        if plots.sweep_lines(good, x, [m], by, out / name, f"{title} vs {x}") is not None:
            figs.append((name, f"{title} vs {x}"))
    files += [f for f, _ in figs]
    failed = [r for r in rows if r.get("status") == "failed"]
    sections = [("", f"<p>{len(rows)} points of {html.escape(str(sw.base))} "
                     f"({sw.spec.mode} of {', '.join(keys)}"
                     f"{', seeds' if rows and rows[0].get('seed') is not None else ''}): "
                     f"{sum(1 for r in rows if r.get('status') == 'ok')} ok, "
                     f"{sum(1 for r in rows if r.get('status') == 'not ok')} not ok, "
                     f"{len(failed)} failed.</p>")]
    shown = ["point", *keys, "seed", "status", "goodput_max_direction_gbps", "slowdown_p99",
             "latency_p99_us", "wall_s"]
    body = html.table(shown + ["report"], [
        [r.get(c) for c in shown] + [f"{r['dir']}/report.html" if r.get("status") != "failed"
                                     else r.get("error", "")] for r in rows],
        left=0)
    # Link each point's report (the table escapes text; links are added here).
    for r in rows:
        if r.get("status") != "failed":
            link = f"{r['dir']}/report.html"
            body = body.replace(f">{html.escape(link)}<",
                                f'><a href="{html.escape(link)}">report</a><', 1)
    sections.append(("Points", body))
    if figs:
        sections.append(("Plots", "".join(f"<h3>{html.escape(t)}</h3>{html.image(f, t)}"
                                          for f, t in figs)))
    html.write(out / "report.html", html.page(f"nicsim sweep: {sw.name}", sections))
    return ["report.html", *files]
