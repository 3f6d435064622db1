"""report.html: the configuration, the summary tables and the plots of a run (or a sweep) on
one page that opens from the file system, no server: images by relative path, no script, no
external style sheet."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from html import escape
from pathlib import Path
from typing import Any

import yaml

STYLE = """
body { font-family: sans-serif; margin: 2em auto; max-width: 62em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: .5em 0; font-size: .9em; }
th, td { border: 1px solid #ccc; padding: .25em .6em; text-align: right; }
th { background: #f0f0f0; } td.l, th.l { text-align: left; }
.ok { color: #070; font-weight: bold; } .bad { color: #b00; font-weight: bold; }
img { max-width: 100%; border: 1px solid #ddd; margin: .5em 0; }
pre { background: #f7f7f7; padding: .8em; overflow-x: auto; font-size: .85em; }
"""


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.3f}" if abs(v) < 1e6 else f"{v:,.0f}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    if isinstance(v, dict):
        return ", ".join(f"{k} {_fmt(x)}" for k, x in v.items())
    return str(v)


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], left: int = 1) -> str:
    """An HTML table; the first `left` columns are text (left-aligned)."""
    h = "".join(f'<th class="{"l" if i < left else ""}">{escape(x)}</th>'
                for i, x in enumerate(headers))
    body = "".join("<tr>" + "".join(f'<td class="{"l" if i < left else ""}">'
                                     f"{escape(_fmt(v))}</td>" for i, v in enumerate(r))
                   + "</tr>" for r in rows)
    return f"<table><tr>{h}</tr>{body}</table>"


def page(title: str, sections: list[tuple[str, str]]) -> str:
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{escape(title)}"
             f"</title><style>{STYLE}</style></head><body><h1>{escape(title)}</h1>"]
    for head, body in sections:
        parts.append(f"<h2>{escape(head)}</h2>{body}" if head else body)
    parts.append("</body></html>")
    return "\n".join(parts)


def image(name: str, alt: str) -> str:
    return f'<img src="{escape(name)}" alt="{escape(alt)}">'


def run_report(s: dict[str, Any], plots: list[tuple[str, str]], files: list[str]) -> str:
    """The page of one run, from its summary (summary.json) and its plots (file, title)."""
    stop = s["stop"]
    verdict = ('<p class="ok">OK: every WR completed successfully and every byte was '
               'verified.</p>' if s["ok"] else
               f'<p class="bad">Not OK: stopped by {escape(stop["reason"])}'
               f'{": " + escape(stop["detail"]) if stop["detail"] else ""}; '
               f'{s["wrs"]["errors"]:,} error completions, {s["wrs"]["outstanding"]:,} not '
               f'completed, {s["wrs"]["unknown"]:,} unknown; integrity '
               f'{escape(s["integrity"])}.</p>')
    head = (f"<p>Seed {s['seed']}, {s['wrs']['total']:,} WRs on {s['qps']:,} QP pairs, "
            f"{s['elapsed_ns'] / 1000:,.3f} us of simulated time in {s['run']['wall_s']:.1f} s "
            f"(stop: {escape(stop['reason'])}), {s['verified_bytes']:,} bytes verified.</p>"
            + verdict)
    sections = [("", head)]
    if s["goodput"]:
        sections.append(("Goodput", "<p>Payload of the WRs that succeeded, over the time they "
                         "were in flight (first post to last completion), per direction.</p>"
                         + table(["from", "to", "bytes", "WRs", "in flight (us)", "Gb/s"],
                                 [(g["src"], g["dst"], g["bytes"], g["wrs"], g["in_flight_us"],
                                   g["gbps"]) for g in s["goodput"]], 2)))
    if s["fct_slowdown"]:
        sections.append(("FCT slowdown by flow size", "<p>Completion time over the ideal: "
                         "the same message alone on an idle path.</p>" + table(
                             ["size", "flows", "p50", "p95", "p99"],
                             [(r["bucket"], r["flows"], r["p50"], r["p95"], r["p99"])
                              for r in s["fct_slowdown"]])))
    lat = s["latency_us"]
    if lat["count"]:
        sections.append(("Latency (us)", table(
            ["WRs", "min", "median", "p99", "p99.9", "max"],
            [(lat["count"], lat["min"], lat["p50"], lat["p99"], lat["p99.9"], lat["max"])],
            0)))
    wd = s.get("pfc_watchdog")
    if wd is not None:
        sections.append(("PFC watchdog", "<p>Lossless queues paused with frames waiting and "
                         "none leaving for the detection time are stormed: their pauses are "
                         "ignored (a switch drops their frames) until the pauses stop.</p>"
                         + table(["", "enabled", "detect ms", "restore ms"],
                                 [(k, wd[k]["enabled"], wd[k]["detect_ms"],
                                   wd[k]["restore_ms"]) for k in ("switch", "nic")])
                         + table(["queue", "storms", "restored", "frames dropped",
                                  "pauses ignored"],
                                 [("all", wd["storms"], wd["restores"], wd["dropped"],
                                   wd["pauses_ignored"])]
                                 + [(q["where"], q["storms"], q["restores"], q["dropped"],
                                     q["pauses_ignored"]) for q in wd["queues"]])))
    sections.append(("Traffic", table(
        ["group", "what", "WRs", "succeeded", "bytes", "median us", "p99 us", "statuses"],
        [(g["group"], g["what"], g["wrs"], g["succeeded"], g["bytes"], g["latency_us"]["p50"],
          g["latency_us"]["p99"], g["statuses"]) for g in s["groups"]], 2)))
    if plots:
        sections.append(("Plots", "".join(f"<h3>{escape(t)}</h3>{image(f, t)}"
                                          for f, t in plots)))
    sections.append(("Configuration", "<pre>" + escape(yaml.safe_dump(
        s["configuration"], sort_keys=False, default_flow_style=None, width=90)) + "</pre>"))
    counters = s["counters"]
    names = list(counters)
    keys = sorted({k for c in counters.values() for k, v in c.items() if v})
    sections.append(("Counters", "<details><summary>every non-zero counter of every NIC"
                     "</summary>" + table(["counter", *names],
                                          [(k, *(counters[n].get(k, 0) for n in names))
                                           for k in keys]) + "</details>"))
    sections.append(("Files", "<ul>" + "".join(f'<li><a href="{escape(f)}">{escape(f)}</a>'
                                                f"</li>" for f in files) + "</ul>"))
    return page(f"nicsim run: {s['scenario']}", sections)


def write(path: Path, html: str) -> Path:
    path.write_text(html)
    return path
