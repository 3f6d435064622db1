"""RTL throughput: cycles per packet through each streaming block, back to back with no
backpressure, against the ideal ceil(bytes / (DATA_WIDTH/8)), and the line rate that means at
250 MHz. The figures come from the cocotb benches themselves (their back-to-back tests write a
JSON line per packet size to HDL_BENCH_OUT); cycle counts in RTL simulation are exact.

    python benchmarks/hdl_throughput.py [--json] [--clock-mhz 250]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCHES = ["hdl_tb/test_icrc.py", "hdl_tb/test_tx_framer.py", "hdl_tb/test_rx_parser.py",
           "hdl_tb/test_wqe_cqe.py", "hdl_tb/test_mr_translate.py"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--clock-mhz", type=float, default=250.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "tput.jsonl"
        env = dict(os.environ, HDL_BENCH_OUT=str(out))
        benches = [b for b in BENCHES if (ROOT / b).exists()]
        r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "-p",
                            "no:cacheprovider", "-k", "not verilator", *benches],
                           cwd=ROOT, env=env, capture_output=True, text=True)
        if r.returncode != 0:
            print(r.stdout[-3000:], r.stderr[-2000:], file=sys.stderr)
            return 1
        lines = [json.loads(x) for x in out.read_text().splitlines()] if out.exists() else []
    agg: dict[tuple, list[dict]] = defaultdict(list)
    for x in lines:
        agg[(x["block"], x.get("data_width"))].append(x)
    rows = []
    for (block, width), xs in sorted(agg.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0)):
        cycles = sum(x["cycles"] for x in xs)
        ideal = sum(x["ideal_cycles"] for x in xs)
        row = {"block": block, "data_width": width, "cases": len(xs),
               "packets": sum(x.get("packets", 0) for x in xs), "cycles": cycles,
               "ideal_cycles": ideal, "fraction_of_ideal": ideal / cycles if cycles else 0.0}
        big = max(xs, key=lambda x: x.get("frame_bytes") or 0)
        if width and big.get("frame_bytes"):
            per_pkt = big["cycles"] / big["packets"]
            row["largest_frame_bytes"] = big["frame_bytes"]
            row["gbps_at_clock"] = big["frame_bytes"] * 8 * args.clock_mhz / 1e3 / per_pkt
        rows.append(row)
    if args.json:
        print(json.dumps({"clock_mhz": args.clock_mhz, "results": rows}, indent=2))
    else:
        print(f"back-to-back, no backpressure; Gb/s at {args.clock_mhz:g} MHz for the largest "
              f"frame size\n")
        print(f"{'block':<22} {'width':>5} {'cycles':>8} {'ideal':>8} {'fraction':>8} "
              f"{'Gb/s':>7}")
        for x in rows:
            g = f"{x['gbps_at_clock']:7.1f}" if "gbps_at_clock" in x else "      -"
            print(f"{x['block']:<22} {x['data_width'] or '-':>5} {x['cycles']:>8} "
                  f"{x['ideal_cycles']:>8} {x['fraction_of_ideal']:>8.3f} {g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
