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


INCOMPLETE = "INCOMPLETE"  # in DIR while its run has not finished; it says why
MANIFEST = ".nicsim-run"  # what the last run wrote in DIR, one file a line (for --force)


def prepare_run(out: Path, force: bool) -> Path:
    """`run --out DIR`: DIR made (see prepare), empty, or holding an earlier run's results
    that `force` removes; marked INCOMPLETE until `write` finishes it."""
    prepare(out)
    entries = sorted(p.name for p in out.iterdir())
    if entries and not force:
        raise OutputError(f"--out {out}: not empty ({len(entries)} entries); give an empty or "
                          f"new directory, or --force to replace an earlier run's results")
    if entries:
        _remove_earlier(out)
    (out / INCOMPLETE).write_text("This run has not finished: the files here are partial.\n")
    return out


def _remove_earlier(out: Path) -> None:
    """The files an earlier run wrote into `out` (its manifest, else the names runs use);
    whatever else is there stays."""
    m = out / MANIFEST
    names = m.read_text().split("\n") if m.is_file() else []
    names += [INCOMPLETE, "report.html", "summary.json", "flows.csv", "columns.txt"]
    for name in names:
        f = (out / name).resolve()
        if name and f.parent in (out.resolve(), (out / "timeseries").resolve()) and f.is_file():
            f.unlink()
    ts = out / "timeseries"
    if ts.is_dir() and not any(ts.iterdir()):
        ts.rmdir()
    m.unlink(missing_ok=True)


def interrupted(out: Path) -> None:
    """The run in `out` was stopped: say so in the directory."""
    (out / INCOMPLETE).write_text("This run was interrupted (Ctrl-C): the files here are "
                                  "partial.\n")


def write(result: Any, out: Path) -> list[str]:
    """Write what is left once the run is over; returns the files of the directory (this
    run's, whatever else the directory holds), and lists them in the manifest."""
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
    files += sorted(f"timeseries/{p.name}.csv" for p in result.probes
                    if (out / "timeseries" / f"{p.name}.csv").is_file())
    for pcap in result.pcaps or ([result.pcap] if result.pcap else []):
        if Path(pcap).resolve().parent == out.resolve():
            files.append(Path(pcap).name)
    html.write(out / "report.html", html.run_report(s, figs, files))
    files = ["report.html", *files]
    (out / MANIFEST).write_text("\n".join(files) + "\n")
    (out / INCOMPLETE).unlink(missing_ok=True)
    return files
