"""Goodput of a long RDMA WRITE stream against the analytic bound of the wire.

The bound: every message of S bytes goes out as n = ceil(S / MTU) packets, each carrying
preamble+SFD, Ethernet, IPv4, UDP, BTH, ICRC, FCS and the inter-frame gap around its payload
(and its pad), plus one RETH on the first packet. Goodput can be at most
line_rate * S / (S + wire overhead of the message). The simulated goodput is the payload
delivered divided by the simulated time from the first post to the last completion.

    python benchmarks/goodput.py [--json] [--mb 64] [--msg 262144]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from nicsim.driver import enums as e
from nicsim.driver.user.verbs import SGE, SendWR

from nicsim.fabric.link import LinkConfig
from nicsim.wire import Ext, packet_overhead
from nicsim.workloads.endpoint import connect, make_side
from nicsim.world import World

_MTU_ENUM = {1024: e.IBV_MTU_1024, 4096: e.IBV_MTU_4096}


def bound_gbps(rate: float, msg: int, mtu: int) -> float:
    n = -(-msg // mtu)
    pad = sum(-min(mtu, msg - i * mtu) & 3 for i in range(n))
    wire = msg + pad + n * packet_overhead(0) + Ext.RETH.size
    return rate * msg / wire


def run(mtu: int, total: int, msg: int, depth: int = 16, rate: float = 100.0) -> dict:
    w = World.two_hosts(seed=1, link=LinkConfig(rate_gbps=rate), mem_size=128 << 20)
    a = make_side(w, "a", mr_len=msg, cqe=4 * depth)
    b = make_side(w, "b", mr_len=msg, cqe=4 * depth)
    connect(a, b, _MTU_ENUM[mtu])
    connect(b, a, _MTU_ENUM[mtu])
    env = w.env
    count = total // msg
    wr = SendWR(opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(a.mr.buf, msg, a.mr.lkey)])
    wr.set_wr_rdma(b.mr.rkey, b.mr.buf)
    posted = done = 0
    wall = time.perf_counter()
    t0 = env.now
    while done < count:
        while posted < count and posted - done < depth:
            a.qp.post_send(wr)
            posted += 1
        n, _ = a.cq.poll(depth)
        done += n
    elapsed = env.now - t0
    wall = time.perf_counter() - wall
    sim = count * msg * 8 / elapsed
    bound = bound_gbps(rate, msg, mtu)
    return {"mtu": mtu, "message_bytes": msg, "messages": count, "simulated_gbps": sim,
            "bound_gbps": bound, "fraction_of_bound": sim / bound,
            "data_packets": w.nics["a"].counters()["requester.data_packets"],
            "wall_s": wall}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--mb", type=int, default=64, help="MiB written per MTU")
    ap.add_argument("--msg", type=int, default=256 * 1024, help="bytes per WRITE")
    args = ap.parse_args()
    rows = [run(mtu, args.mb << 20, args.msg) for mtu in (1024, 4096)]
    ok = all(abs(1 - r["fraction_of_bound"]) <= 0.01 for r in rows)
    if args.json:
        print(json.dumps({"results": rows, "within_1_percent": ok}, indent=2))
    else:
        print(f"{'MTU':>5} {'msg':>8} {'simulated Gb/s':>15} {'bound Gb/s':>11} {'fraction':>9}")
        for r in rows:
            print(f"{r['mtu']:>5} {r['message_bytes']:>8} {r['simulated_gbps']:>15.3f} "
                  f"{r['bound_gbps']:>11.3f} {r['fraction_of_bound']:>9.4f}")
        print("within 1% of the bound:", "yes" if ok else "NO")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
