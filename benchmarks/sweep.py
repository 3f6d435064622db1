"""Sweep speed-up: the same sweep of 8 points run with 1 worker and with every local core
(`nicsim sweep --workers N`), wall time of each and the speed-up. Each point is a stream of
4 KiB RDMA WRITEs (a different link rate and seed per point), so the points are alike in
cost and the speed-up measures the fan-out, not the mix.

    python benchmarks/sweep.py [--json] [--count N]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from nicsim.cli import main as nicsim


def sweep(d: Path, workers: int) -> float:
    out = d / f"out{workers}"
    t = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        rc = nicsim(["sweep", str(d / "sw.yaml"), "--out", str(out), "--workers",
                     str(workers), "--quiet"])
    assert rc == 0, rc
    return time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--count", type=int, default=3000, help="WRs per point")
    args = ap.parse_args()
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        (d / "base.yaml").write_text(
            f"name: point\npcap: null\nstreams:\n  - {{op: write, bytes: 4096, depth: 16, "
            f"count: {args.count}}}\n")
        (d / "sw.yaml").write_text("scenario: base.yaml\nparameters:\n"
                                   "  link.rate_gbps: [25, 50, 100, 200]\nseeds: 2\n")
        one = sweep(d, 1)
        every = sweep(d, cores)
    res = {"points": 8, "wrs_per_point": args.count, "cores": cores, "wall_s_1_worker": one,
           f"wall_s_{cores}_workers": every, "speedup": one / every,
           "efficiency": one / every / cores}
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        print(f"8 points x {args.count:,} WRs: 1 worker {one:.1f} s, {cores} workers "
              f"{every:.1f} s: speed-up {one / every:.2f} ({one / every / cores:.0%} of "
              f"linear on {cores} cores)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
