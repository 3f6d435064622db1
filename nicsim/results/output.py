"""A run's result directory (`nicsim run FILE --out DIR`):

    flows.csv            one row per WR (written during the run)
    timeseries/*.csv     one file per probe, sampled every `sample_us` (during the run)
    summary.json         configuration, seed, how it stopped, goodput, FCT slowdown, latency
    *.png                FCT slowdown by size, latency CDF, one plot per time series
    report.html          all of it on one page
    columns.txt          what each column of flows.csv means, with its unit

Everything the runner writes goes inside DIR under fixed names: nothing a scenario says can
lead a file out of it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nicsim.results import html, plots
from nicsim.results.summary import summary
from nicsim.scenario.collect import FLOW_COLUMNS, FLOW_UNITS


class OutputError(Exception):
    """The result directory cannot be used; one line saying why."""


def prepare(out: Path) -> Path:
    """Create DIR (not its parents: a missing parent is more likely a typo than a wish)."""
    if out.exists() and not out.is_dir():
        raise OutputError(f"--out {out}: exists and is not a directory")
    if not out.parent.is_dir():
        raise OutputError(f"--out {out}: directory {out.parent} does not exist")
    try:
        out.mkdir(exist_ok=True)
    except OSError as e:
        raise OutputError(f"--out {out}: {e.strerror}") from None
    return out


def write(result: Any, out: Path) -> list[str]:
    """Write what is left once the run is over; returns the files of the directory."""
    s = summary(result)
    (out / "summary.json").write_text(json.dumps(s, indent=2) + "\n")
    (out / "columns.txt").write_text(
        "flows.csv columns:\n" + "".join(f"  {c}: {FLOW_UNITS[c]}\n" for c in FLOW_COLUMNS)
        + "\ntimeseries/*.csv: time_us (simulated time since the traffic started, us), the "
          "series, and the value (its unit in the column name)\n")
    figs: list[tuple[str, str]] = []
    c = result.collector
    for name, title, fn in (("fct_slowdown.png", "FCT slowdown vs message size",
                             plots.fct_slowdown),
                            ("latency_cdf.png", "Completion time CDF", plots.latency_cdf)):
        if fn(c, out / name) is not None:
            figs.append((name, title))
    for p in result.probes:
        src = out / "timeseries" / f"{p.name}.csv"
        name = f"{p.name}.png"
        if src.exists() and plots.timeseries(p, src, out / name) is not None:
            figs.append((name, p.title or p.name))
    files = ["summary.json", "flows.csv", "columns.txt"] + [f for f, _ in figs]
    if (out / "timeseries").is_dir():
        files += sorted(f"timeseries/{p.name}" for p in (out / "timeseries").iterdir())
    for pcap in result.pcaps or ([result.pcap] if result.pcap else []):
        if Path(pcap).resolve().parent == out.resolve():
            files.append(Path(pcap).name)
    html.write(out / "report.html", html.run_report(s, figs, files))
    return ["report.html", *files]
