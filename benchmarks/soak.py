"""Fault soak with the protection audit on: many seeds, each a random mix of every link fault
(loss, corruption, duplication, reordering, each up to --max-rate) under a random RC workload
on several QP pairs (WRITE, READ, SEND, WRITE with immediate, atomics, 1 byte to 3 MTUs + 11).

Every run checks destination memory byte for byte, and the DMA audit (nicsim/testing/dma_audit.py)
checks every access both NICs make against what their drivers have registered. Any wrong byte,
any error completion other than retry exhaustion, or any audit violation fails the soak (exit
1) and names the seed. With every fault at up to 20% a few QPs exhaust retry_cnt = 7: their WR
completes RETRY_EXC_ERR and the rest of their queue is flushed, as the transport defines; those
WRs are counted and their bytes are not checked.

    python benchmarks/soak.py [--json] [--seeds 200] [--qps 4] [--wrs 50] [--max-rate 0.2]
"""

from __future__ import annotations

import argparse
import json
import random
import time

from nicsim.fabric.faults import FaultConfig
from nicsim.testing.dma_audit import DmaAudit
from nicsim.testing.traffic_mix import fault_world, run_mix


def one(seed: int, qps: int, wrs: int, max_rate: float) -> dict:
    rng = random.Random(seed)
    faults = FaultConfig(loss=rng.uniform(0, max_rate), corrupt=rng.uniform(0, max_rate),
                         duplicate=rng.uniform(0, max_rate), reorder=rng.uniform(0, max_rate),
                         seed=seed)
    w, pairs = fault_world(faults, npairs=qps, seed=seed)
    audit = DmaAudit(w)
    gave_up: list[int] = []
    verified = run_mix(w, pairs, wrs, seed=seed, max_size=3 * 4096 + 11, gave_up=gave_up)
    a = w.nics["a"].counters()
    return {"seed": seed, "verified_bytes": verified, "dma_checked": audit.checked,
            "gave_up": len(gave_up),
            "violations": audit.violations[:3],
            "retransmitted": a["requester.retransmitted_packets"],
            "timeouts": a["requester.timeouts"], "link": w.links[0].fault_counters()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--qps", type=int, default=4)
    ap.add_argument("--wrs", type=int, default=50)
    ap.add_argument("--max-rate", type=float, default=0.2)
    args = ap.parse_args()
    rows, failed = [], []
    wall = time.perf_counter()
    for seed in range(args.seeds):
        try:
            row = one(seed, args.qps, args.wrs, args.max_rate)
        except AssertionError as err:  # a wrong byte or an error completion
            failed.append({"seed": seed, "error": str(err)[:300]})
            continue
        rows.append(row)
        if row["violations"]:
            failed.append({"seed": seed, "error": "; ".join(row["violations"])})
    out = {"seeds": args.seeds, "qps": args.qps, "wrs": args.wrs, "max_rate": args.max_rate,
           "verified_bytes": sum(r["verified_bytes"] for r in rows),
           "dma_accesses_audited": sum(r["dma_checked"] for r in rows),
           "retransmitted_packets": sum(r["retransmitted"] for r in rows),
           "timeouts": sum(r["timeouts"] for r in rows),
           "wrs_retry_exhausted": sum(r["gave_up"] for r in rows),
           "seeds_with_retry_exhaustion": sum(1 for r in rows if r["gave_up"]),
           "failed": failed, "wall_s": round(time.perf_counter() - wall, 1)}
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"{args.seeds} seeds x {args.qps} QP pairs x {args.wrs} WRs, every fault up to "
              f"{args.max_rate:.0%} at once, DMA audit on")
        print(f"verified {out['verified_bytes']:,} bytes; audited "
              f"{out['dma_accesses_audited']:,} DMA accesses; "
              f"{out['retransmitted_packets']:,} packets resent, {out['timeouts']:,} timeouts")
        print(f"WRs ended by retry exhaustion (or flushed after it): "
              f"{out['wrs_retry_exhausted']} in {out['seeds_with_retry_exhaustion']} seeds")
        print(f"failed seeds: {len(failed)}" + "".join(
            f"\n  seed {f['seed']}: {f['error']}" for f in failed[:10]))
        print(f"wall time {out['wall_s']} s")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
