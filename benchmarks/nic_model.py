"""The NIC processing model's headline figures under a profile, measured the way perftest
measures them (until `nicsim perftest` covers every case, this is the quick check):

- WRITE bandwidth of one QP at 2 KiB and 4 KiB (MTU 4096; 128 WRs outstanding, a completion
  every 100th WR: ib_write_bw's defaults), in Gb/s of payload;
- the small-message rate of one QP (64 B WRITEs, same posting), in Mpps;
- the message rate with 16 and with 1000 QPs (64 B WRITEs, each QP with its own window);
- SEND latency at 32 B (a ping-pong, inline as perftest does on the profile's device),
  half the round trip, mean over the iterations after a warm-up.

    python benchmarks/nic_model.py [--profile NAME] [--json] [--iters N]
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass

from nicsim.driver import enums as e
from nicsim.driver.user.verbs import CQ, MR, PD, QP, SGE, Context, QPCap, QPInitAttr, RecvWR, SendWR

from nicsim.profiles import load_profile
from nicsim.scenario.build import build_world
from nicsim.scenario.schema import validate
from nicsim.workloads.endpoint import ALL_ACCESS, connect_qp, roce_v2_gid
from nicsim.world import World

TX_DEPTH = 128  # ib_write_bw's default --tx-depth
CQ_MOD = 100  # ib_write_bw's default --cq-mod
SEND_LAT_INLINE = 236  # perftest's default inline size for SEND latency on a ConnectX


@dataclass
class Ends:
    w: World
    qps: list[tuple[QP, QP]]
    cq_a: CQ
    cq_b: CQ
    mr_a: MR
    mr_b: MR


def world(profile: str) -> World:
    """The two hosts of `profile`, as a scenario naming it builds them (nicsim.scenario)."""
    sc = validate({"name": "nic_model", "seed": 1, "pcap": None, "ops": [{"op": "write"}],
                   "profile": profile}, "--profile")
    return build_world(sc, None, 256 << 20)


def ends(profile: str, nqp: int, msg: int, inline: int = 0) -> Ends:
    w = world(profile)
    sides = []
    for h in ("a", "b"):
        ctx = Context("nsnic0", host=w.hosts[h])
        pd = PD(ctx)
        cq = CQ(ctx, max(4096, 2 * nqp))
        mr = MR(pd, max(msg, 4096) * 2, ALL_ACCESS)
        cap = QPCap(max_send_wr=TX_DEPTH, max_recv_wr=TX_DEPTH, max_send_sge=1,
                    max_recv_sge=1, max_inline_data=inline)
        qps = [QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap, sq_sig_all=0))
               for _ in range(nqp)]
        sides.append((ctx, cq, mr, qps))
    (ca, cqa, mra, qa), (cb, cqb, mrb, qb) = sides
    for x, y in zip(qa, qb, strict=True):
        connect_qp(x, y.qp_num, roce_v2_gid(cb)[1], e.IBV_MTU_4096)
        connect_qp(y, x.qp_num, roce_v2_gid(ca)[1], e.IBV_MTU_4096)
    return Ends(w, list(zip(qa, qb, strict=True)), cqa, cqb, mra, mrb)


def write_bw(profile: str, msg: int, nqp: int = 1, iters: int = 5000) -> dict:
    """ib_write_bw's loop: each QP keeps TX_DEPTH WRs posted, every CQ_MOD-th signaled."""
    x = ends(profile, nqp, msg)
    env = x.w.env
    wrs = []
    for flags in (0, e.IBV_SEND_SIGNALED):
        wr = SendWR(opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(x.mr_a.buf, msg,
                                                                   x.mr_a.lkey)],
                    send_flags=flags)
        wr.set_wr_rdma(x.mr_b.rkey, x.mr_b.buf)
        wrs.append(wr)
    posted = [0] * nqp
    done = [0] * nqp
    index = {qa.qp_num: i for i, (qa, _) in enumerate(x.qps)}
    t0 = env.now
    total = iters * nqp
    finished = 0
    while finished < total:
        for i, (qa, _) in enumerate(x.qps):
            while posted[i] < iters and posted[i] - done[i] < TX_DEPTH:
                k = posted[i]
                # Every CQ_MOD-th WR, and the last, asks for a completion; its wr_id says
                # how many of the QP's WRs are then complete.
                wr = wrs[k % CQ_MOD == CQ_MOD - 1 or k == iters - 1]
                wr.wr_id = k + 1
                qa.post_send(wr)
                posted[i] += 1
        _, wcs = x.cq_a.poll(64)
        for wc in wcs:
            assert wc.status == e.IBV_WC_SUCCESS, wc.status
            i = index[wc.qp_num]
            finished += wc.wr_id - done[i]
            done[i] = wc.wr_id
    elapsed = env.now - t0
    return {"msg": msg, "qps": nqp, "gbps": total * msg * 8 / elapsed,
            "mpps": total / elapsed * 1e3}


def send_lat(profile: str, msg: int = 32, iters: int = 1000) -> float:
    """ib_send_lat's ping-pong: each side posts a receive, the client sends, the server
    answers once its receive completes; half the round trip, mean after a warm-up."""
    dev = load_profile(profile)
    inline = SEND_LAT_INLINE if dev.perftest_device.mellanox and \
        dev.values()["nic"]["max_inline"] >= SEND_LAT_INLINE else 0
    x = ends(profile, 1, msg, inline)
    env = x.w.env
    qa, qb = x.qps[0]
    flags = e.IBV_SEND_SIGNALED | (e.IBV_SEND_INLINE if msg <= inline else 0)
    swr = {m: SendWR(opcode=e.IBV_WR_SEND, num_sge=1, sg=[SGE(mr.buf, msg, mr.lkey)],
                     send_flags=flags) for m, mr in (("a", x.mr_a), ("b", x.mr_b))}
    rwr = {m: RecvWR(num_sge=1, sg=[SGE(mr.buf + max(msg, 4096), msg, mr.lkey)])
           for m, mr in (("a", x.mr_a), ("b", x.mr_b))}
    for _ in range(2):
        qa.post_recv(rwr["a"])
        qb.post_recv(rwr["b"])

    def wait_recv(cq: CQ) -> None:
        while True:
            _, wcs = cq.poll(4)
            for wc in wcs:
                assert wc.status == e.IBV_WC_SUCCESS, wc.status
            if any(wc.opcode == e.IBV_WC_RECV for wc in wcs):
                return

    samples = []
    warm = iters // 10
    for i in range(iters + warm):
        t = env.now
        qa.post_send(swr["a"])
        wait_recv(x.cq_b)
        qb.post_recv(rwr["b"])
        qb.post_send(swr["b"])
        wait_recv(x.cq_a)
        qa.post_recv(rwr["a"])
        if i >= warm:
            samples.append((env.now - t) / 2)
    return sum(samples) / len(samples)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="nsnic-100g")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--iters", type=int, default=5000)
    a = ap.parse_args()
    p = a.profile
    out = {
        "profile": p,
        "write_bw_2k_gbps": write_bw(p, 2048, iters=a.iters)["gbps"],
        "write_bw_4k_gbps": write_bw(p, 4096, iters=a.iters)["gbps"],
        "write_64b_mpps": write_bw(p, 64, iters=a.iters)["mpps"],
        "write_64b_q16_mpps": write_bw(p, 64, 16, iters=max(200, a.iters // 16))["mpps"],
        "write_64b_q1000_mpps": write_bw(p, 64, 1000, iters=200)["mpps"],
        "send_lat_32b_us": send_lat(p) / 1000,
    }
    if a.json:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            print(f"{k:<24} {v:.3f}" if isinstance(v, float) else f"{k:<24} {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
