"""Scale in QPs: N RC QP pairs between two hosts (default host settings), each QP streaming small
RDMA WRITEs, for N = 1, 10, 100, 1,000 and 10,000.

For each N, in a fresh process (so its peak RSS is its own): the wall time to create and
connect the QP pairs, per pair; then the same total number of 64-byte WRITEs spread over the
QPs (every QP posts a burst of WRs, the last one signaled, and the program polls one shared CQ
until every QP's burst is done, round after round): wall (CPU) time per data packet, the
simulated message rate, and the process's peak RSS for the whole run. The per-packet cost is
also given relative to N = 1, the single-QP cost of the same workload.

    python benchmarks/scale_qps.py [--json] [--qps 1,10,100,1000,10000] [--wrs 100000]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

BURST = 16  # WRs per QP per round (perftest's -t would be the depth; one signaled per burst)
SIZE = 64


def one(n: int, total_wrs: int) -> dict:
    """Runs in its own process."""
    from nicsim.driver import enums as e
    from nicsim.driver.user.verbs import CQ, MR, PD, QP, SGE, Context, QPCap, QPInitAttr, SendWR

    from nicsim.workloads.endpoint import Side, connect
    from nicsim.world import World

    w = World.two_hosts(seed=1)
    t0 = time.perf_counter()
    cqe = max(64, n * 2)
    shared = {}
    for h in "ab":
        ctx = Context("nsnic0", host=w.hosts[h])
        pd = PD(ctx)
        shared[h] = (ctx, pd, CQ(ctx, cqe), MR(pd, 1 << 16, 15))
    qps: list[tuple[Side, Side]] = []
    for _ in range(n):
        side = {}
        for h in "ab":
            ctx, pd, cq, mr = shared[h]
            qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq,
                                   cap=QPCap(BURST, 1, 1, 1), sq_sig_all=0))
            side[h] = Side(ctx, pd, cq, qp, mr)
        connect(side["a"], side["b"])
        connect(side["b"], side["a"])
        qps.append((side["a"], side["b"]))
    setup = time.perf_counter() - t0
    a_cq, a_mr, b_mr = shared["a"][2], shared["a"][3], shared["b"][3]

    def wr(signaled: bool) -> SendWR:
        x = SendWR(opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(a_mr.buf, SIZE, a_mr.lkey)],
                   send_flags=e.IBV_SEND_SIGNALED if signaled else 0)
        x.set_wr_rdma(b_mr.rkey, b_mr.buf)
        return x

    plain, last = wr(False), wr(True)
    burst = max(1, min(BURST, total_wrs // n))
    rounds = max(1, total_wrs // (n * burst))
    nic = w.nics["a"]
    pk0 = nic.requester.counters["data_packets"]
    sim0 = w.env.now
    cpu0 = time.process_time()
    for _ in range(rounds):
        for x, _y in qps:
            for i in range(burst):
                x.qp.post_send(last if i == burst - 1 else plain)
        done = 0
        while done < n:
            done += a_cq.poll(64)[0]
    cpu = time.process_time() - cpu0
    packets = nic.requester.counters["data_packets"] - pk0
    sim_s = (w.env.now - sim0) / 1e9
    c = nic.counters()
    return {"qp_pairs": n, "setup_s": setup, "setup_ms_per_pair": setup / n * 1e3,
            "packets": packets, "cpu_s": cpu, "us_per_packet": cpu / packets * 1e6,
            "sim_mpps": packets / sim_s / 1e6,
            "wqe_dma_reads_per_wr": c["wqe_fetch.sq_dma_reads"] / max(1, c["requester.wqes"]),
            "mpt_misses": c["xlate.mpt_misses"],
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--qps", default="1,10,100,1000,10000")
    ap.add_argument("--wrs", type=int, default=160_000)
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.wrs)))
        return 0
    rows = []
    for n in (int(x) for x in args.qps.split(",")):
        out = subprocess.run([sys.executable, __file__, "--one", str(n), "--wrs", str(args.wrs)],
                             capture_output=True, text=True, check=True)
        rows.append(json.loads(out.stdout))
    base = rows[0]["us_per_packet"]
    for r in rows:
        r["cost_vs_first"] = r["us_per_packet"] / base
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{SIZE}-byte RDMA WRITEs, {BURST} per QP per round, {args.wrs:,} in all; "
          "each N in its own process")
    print(f"{'QP pairs':>9} {'setup ms/pair':>14} {'us/packet':>10} {'vs 1 QP':>8} "
          f"{'sim Mpps':>9} {'WQE reads/WR':>13} {'MPT misses':>11} {'peak RSS MB':>12}")
    for r in rows:
        print(f"{r['qp_pairs']:>9,} {r['setup_ms_per_pair']:>14.2f} {r['us_per_packet']:>10.1f} "
              f"{r['cost_vs_first']:>8.2f} {r['sim_mpps']:>9.2f} "
              f"{r['wqe_dma_reads_per_wr']:>13.2f} {r['mpt_misses']:>11,} "
              f"{r['peak_rss_mb']:>12.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
