"""docs/benchmarks.md: every benchmark's figures, measured now, on this machine (`make
figures`). Each benchmark in benchmarks/ runs with --json; its output is rendered as tables,
and the page is stamped with the commit, the machine and the date. Nothing on the page is
typed by hand: to change a figure, change the code and run it again. The fidelity run also
writes the README's fit and check errors (the block between README_BEGIN and README_END).

    python scripts/figures.py [--only NAME ...] [--skip NAME ...]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "benchmarks.md"
README = ROOT / "README.md"
# The README's fidelity block, between these lines, is written from the fidelity run.
README_BEGIN = "<!-- fidelity: written by make figures (scripts/figures.py) -->"
README_END = "<!-- /fidelity -->"

# (benchmark, arguments, what it measures): in the order of the page.
RUNS: list[tuple[str, list[str], str]] = [
    ("goodput", [], "Goodput of a WRITE stream against the wire's bound, per MTU"),
    ("nic_model", [], "The NIC's processing model: one QP's bandwidth, message rates and a "
                      "SEND ping-pong (nsnic-100g)"),
    ("nic_model", ["--profile", "cx5-100g"], "The same on the cx5-100g profile"),
    ("sim_speed", [], "Simulation speed against bare SimPy and the minimal packet pipeline, "
                      "and the pcap tap's cost"),
    ("fabric_speed", [], "Simulation speed of a leaf-spine fabric"),
    ("scale_qps", [], "Memory and per-packet cost as QP pairs grow"),
    ("memory", [], "Memory of large transfers, many WRs and large hosts"),
    ("soak", [], "A fault soak under the DMA audit"),
    ("fuzz_rx", [], "Random and hostile frames at a NIC's receive path"),
    ("fault_sweep", [], "Goodput and retransmissions against link faults"),
    ("incast", [], "An 8:1 and 16:1 incast with PFC and each congestion-control preset"),
    ("workload", [], "WebSearch flows: FCT slowdown by load"),
    ("echo", [], "RDMA against TCP sockets, a request-response echo"),
    ("odp", [], "On-demand paging: first and later accesses"),
    ("fidelity", [], "Figures against published ones"),
    ("rtl_timing", [], "RTL timing closure: Fmax per block placed and routed for an ECP5-85 "
                       "(speed 8) at 64 bits, against 156.25 MHz"),
]


def machine() -> str:
    cpu = ""
    try:
        cpu = next(ln.split(":", 1)[1].strip() for ln in
                   Path("/proc/cpuinfo").read_text().splitlines() if ln.startswith("model name"))
    except (OSError, StopIteration):
        cpu = platform.processor()
    return f"{cpu}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}, " \
           f"Python {platform.python_version()}"


def commit() -> str:
    r = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"],
                       capture_output=True, text=True)
    return r.stdout.strip() or "unknown"


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:,.4g}" if abs(v) < 1e6 else f"{v:,.0f}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    if isinstance(v, (list, dict)):
        return "`" + json.dumps(v)[:120] + "`"
    return str(v).replace("|", "\\|")


def render(data: Any) -> list[str]:
    """JSON as markdown: a list of objects is a table, an object a key/value table (nested
    lists of objects get tables of their own)."""
    if isinstance(data, list) and data and all(isinstance(x, dict) for x in data):
        cols = list(dict.fromkeys(k for x in data for k in x))
        out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        out += ["| " + " | ".join(_fmt(x.get(c, "")) for c in cols) + " |" for x in data]
        return out + [""]
    if isinstance(data, dict):
        out = ["| figure | value |", "|---|---|"]
        nested = []
        for k, v in data.items():
            if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
                nested.append((k, v))
            else:
                out.append(f"| {k} | {_fmt(v)} |")
        out.append("")
        for k, v in nested:
            out += [f"`{k}`:", "", *render(v)]
        return out
    return ["```", json.dumps(data, indent=2), "```", ""]


def fidelity_view(data: dict[str, Any]) -> dict[str, Any]:
    """benchmarks/fidelity.py's JSON as the page shows it: the targets and the fit and check
    error first, then the fit rows and the check rows in tables of their own (the columns a
    reader compares; each row's source, NIC and link are in fidelity_figures.yaml)."""
    cols = ("id", "tool", "size", "profile", "published", "simulated", "ratio", "abs_error")
    rows = data.get("figures", [])
    return {"targets": data.get("targets", []), "summary": data.get("summary", []),
            **{f"{use} rows": [{c: r.get(c) for c in cols} for r in rows if r.get("use") == use]
               for use in ("fit", "check")},
            "shapes": data.get("shapes", [])}


def readme_fidelity(data: dict[str, Any], stamp: str) -> list[str]:
    """The README's lines on fidelity: the fit error and the check error apart."""
    out = [f"Against published perftest figures (`benchmarks/fidelity.py`, measured at commit "
           f"`{commit()}` on {stamp}): fit rows set a parameter, check rows are predictions "
           "no parameter was fitted to, the only evidence.", "",
           "| rows | count | median error | largest | within 10% | within 25% |",
           "|---|---|---|---|---|---|"]
    for s in data.get("summary", []):
        if s.get("rows"):
            out.append(f"| {s['set']} | {s['rows']} | {s['median_abs_error']:.0%} | "
                       f"{s['max_abs_error']:.0%} | {s['fraction_within_10pct']:.0%} | "
                       f"{s['fraction_within_25pct']:.0%} |")
    return out


def write_readme_block(lines: list[str]) -> None:
    text = README.read_text()
    i, j = text.find(README_BEGIN), text.find(README_END)
    if i < 0 or j < i:
        raise SystemExit(f"{README}: no fidelity block ({README_BEGIN} ... {README_END})")
    README.write_text(text[:i + len(README_BEGIN)] + "\n" + "\n".join(lines) + "\n"
                      + text[j:])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--skip", nargs="*", default=[])
    args = ap.parse_args()
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    page = ["# Benchmarks", "",
            f"Measured by `make figures` at commit `{commit()}` on {stamp}, on {machine()}. "
            "Each section is a benchmark's `--json` output "
            "(`python benchmarks/NAME.py --json`); the scripts' docstrings say what each "
            "figure is. Rates per second of CPU time where the benchmark says so; a shared "
            "machine makes wall-clock figures noisy.", ""]
    left_out: list[str] = []
    for name, extra, title in RUNS:
        if args.only is not None and name not in args.only or name in args.skip:
            left_out.append(f"`{' '.join([f'benchmarks/{name}.py', *extra])}` ({title})")
            continue
        t = time.perf_counter()
        r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / f"{name}.py"), "--json",
                            *extra], capture_output=True, text=True, cwd=ROOT)
        took = time.perf_counter() - t
        head = f"## {title}\n\n`benchmarks/{name}.py {' '.join(extra)}`".rstrip() + \
               f" ({took:.0f} s)\n"
        print(f"{name} {' '.join(extra)}: exit {r.returncode}, {took:.0f} s", file=sys.stderr)
        try:
            data = json.loads(r.stdout)
        except ValueError:
            page += [head, f"Did not give JSON (exit status {r.returncode}): "
                           f"`{(r.stderr.strip().splitlines() or [''])[-1][:200]}`", ""]
            continue
        missed = ([f"Exit status {r.returncode}: a figure missed the target the benchmark "
                   "states under `targets`.", ""] if r.returncode else [])
        if name == "fidelity" and isinstance(data, dict):
            write_readme_block(readme_fidelity(data, stamp))
            data = fidelity_view(data)
        page += [head, *missed, *render(data)]
    if left_out:
        page += ["## Not measured in this run", "", "Left out by --only or --skip:", "",
                 *(f"- {x}" for x in left_out), ""]
    OUT.write_text("\n".join(page) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
