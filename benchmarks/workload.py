"""A WebSearch workload (DCTCP's flow sizes, Poisson arrivals) at 30% and 50% load on a
16-host star of 100 Gb/s links (one switch, PFC on the RoCE class, DCQCN with NVIDIA's
firmware defaults): flows simulated, simulated time, wall time, packets per wall-clock
second, and the FCT slowdown table by flow size.

Each host sends flows of random sizes to random other hosts at `load` x its link rate; each
flow is one RDMA WRITE on a QP of the pair's pool (`--qps`), FCT from the flow's arrival to its
completion, slowdown against the same message alone on an idle path. Every byte is checked.
`--hosts 2` runs the two-host cable instead.

    python benchmarks/workload.py [--json] [--flows N] [--loads 0.3 0.5] [--hosts 16]
                                  [--cc dcqcn_mlx] [--qps 2]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from nicsim.results.summary import fct_table
from nicsim.scenario.runner import Runner
from nicsim.scenario.schema import parse_scenario


def run(load: float, flows: int, seed: int, hosts: int, cc: str, qps: int) -> dict:
    topo = "" if hosts == 2 else f"topology: {{shape: star, hosts: {hosts}}}\ncc: {cc}\n"
    sc = parse_scenario(f"""
name: websearch-{load}
seed: {seed}
pcap: null
{topo}qp: {{dscp: 26}}
flows:
  - {{cdf: websearch, load: {load}, count: {flows}, qps: {qps}}}
""")
    wall, cpu = time.perf_counter(), time.process_time()
    r = Runner(sc).run()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    pkts = sum(c["requester.data_packets"] + c["responder.read_response_packets"]
               for c in r.counters.values())
    return {"load": load, "flows": r.total_wrs, "ok": r.ok,
            "hosts": len(r.counters), "bytes": r.verified_bytes,
            "simulated_ms": r.elapsed_ns / 1e6, "wall_s": wall, "cpu_s": cpu,
            "data_packets": pkts, "packets_per_wall_s": pkts / wall,
            "packets_per_cpu_s": pkts / cpu,
            "goodput_gbps": {f"{s}->{d}": x.gbps for (s, d), x in r.collector.directions.items()},
            "fct_slowdown": fct_table(r)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--flows", type=int, default=1000)
    ap.add_argument("--loads", type=float, nargs="+", default=[0.3, 0.5])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--hosts", type=int, default=16)
    ap.add_argument("--cc", default="dcqcn_mlx")
    ap.add_argument("--qps", type=int, default=2, help="QPs per host pair")
    args = ap.parse_args()
    rows = [run(x, args.flows, args.seed, args.hosts, args.cc, args.qps) for x in args.loads]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0 if all(r["ok"] for r in rows) else 1
    for r in rows:
        g = r["goodput_gbps"]
        gp = (", ".join(f"{k} {v:.1f}" for k, v in g.items()) if len(g) <= 4 else
              f"{len(g)} directions, mean {sum(g.values()) / len(g):.1f}, "
              f"max {max(g.values()):.1f}")
        print(f"WebSearch at load {r['load']:g}: {r['flows']:,} flows on {r['hosts']} hosts, "
              f"{r['bytes'] / 1e9:.2f} GB verified, {r['simulated_ms']:.2f} ms simulated in "
              f"{r['wall_s']:.1f} s wall ({r['cpu_s']:.1f} s CPU), {r['data_packets']:,} data "
              f"packets: {r['packets_per_wall_s'] / 1000:.1f} k packets/s wall "
              f"({r['packets_per_cpu_s'] / 1000:.1f} k/s CPU); goodput Gb/s {gp}")
        print(f"  {'size':<14} {'flows':>7} {'p50':>8} {'p95':>8} {'p99':>8}")
        for b in r["fct_slowdown"]:
            print(f"  {b['bucket']:<14} {b['flows']:>7,} {b['p50']:>8.2f} {b['p95']:>8.2f} "
                  f"{b['p99']:>8.2f}")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
