"""N:1 incast on a 100 Gb/s star: every sender streams 64 KiB RDMA WRITEs (MTU 4096) on its own
QP to one receiver, with congestion control none / dcqcn_paper / dcqcn_mlx / dcqcn_tuned /
hpcc / timely / dctcp and PFC on or off.

For each N (2, 4, 8, 16, 32, 64) and setting, the same total of bytes (`--mbytes`, shared out
among the senders): the receiver's goodput while all senders compete (until the first
finishes) and over the whole run (first post to last completion), Jain's fairness index and
the senders' spread around the fair share over the second half of the competing part, the
largest queue toward the receiver, switch drops, the time the senders' NICs spent paused, the
time to converge (every sender's rate, averaged over 10 bins, within 10% of the fair share
from then on; null when that never holds), retransmitted packets, whether every WR completed
and whether every byte landed. The RED band is
the switch default (the DCQCN paper's: Kmin 5 KB, Kmax 200 KB, Pmax 1%), except for dctcp,
whose switches mark every ECT frame above K = DCTCP_K_BYTES (DCTCP's step marking); the
switches add INT records for hpcc; TIMELY and HPCC are given the star's base RTT. PFC protects
class 3 (the streams' DSCP 26) when on. With `--plot`, a PNG of per-sender rate against time
for each 8:1 run with congestion control and PFC on.

    python benchmarks/incast.py [--json] [--n 2,4,8,16,32,64] [--pfc on,off] [--mbytes 32]
                                [--cc none,dcqcn_paper,dcqcn_mlx,dcqcn_tuned,hpcc,timely,dctcp]
                                [--plot FILE.png]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

from nicsim.fabric.switch import PfcConfig, RedConfig, SwitchConfig
from nicsim.fabric.topology import Shape, TopologySpec
from nicsim.nic.cc import ALGORITHMS, CcAlgorithm, CcConfig, Signal, cc_from_dict
from nicsim.nic.config import NicConfig
from nicsim.workloads.bulk import BulkResult, incast, jain
from nicsim.world import World

MSG = 64 * 1024


# DCTCP's marking threshold K on the star (Alizadeh et al. 2010, section 3.4: K > C x RTT / 7;
# 100 Gb/s x 8 us / 7 is 14 KB; the paper runs K of 20 packets at 1 Gb/s, 65 at 10 Gb/s).
DCTCP_K_BYTES = 30_000
# Base RTT of the star for the RTT- and INT-based algorithms: an unloaded 4 KiB packet's last
# bit out to its ACK back through one switch with the NICs' pipelines (what TIMELY measures),
# and the NIC knobs they run with: an ACK per packet, as HPCC's and TIMELY's feedback is per
# ACK (with the default of one ACK per 16 packets a QP slowed to a few Gb/s hears once every
# hundred microseconds).
STAR_RTT_US = 2.0
_CC_EXTRA: dict[str, dict[str, float]] = {
    "hpcc": {"base_rtt_us": STAR_RTT_US, "rai_mbps": 1000.0},
    # TIMELY's thresholds and step scaled from the paper's 10 Gb/s fabric (minRTT 20 us)
    # to this one: T_low 2.5 and T_high 25 base RTTs, delta 10x.
    "timely": {"min_rtt_us": STAR_RTT_US, "t_low_us": 2.5 * STAR_RTT_US,
               "t_high_us": 25 * STAR_RTT_US, "delta_mbps": 100.0}}
_NIC_EXTRA: dict[str, dict[str, int]] = {"hpcc": {"ack_coalesce": 1},
                                         "timely": {"ack_coalesce": 1}}


def cc_config(cc: str) -> CcConfig:
    """The benchmark's `cc` setting: a preset, with the star's RTTs for TIMELY and HPCC."""
    return cc_from_dict({"preset": cc, **_CC_EXTRA.get(cc, {})})


def switch_config(cc: CcConfig, pfc: bool) -> SwitchConfig:
    red = (RedConfig(DCTCP_K_BYTES, DCTCP_K_BYTES, 1.0),) * 8 \
        if cc.algorithm is CcAlgorithm.DCTCP else SwitchConfig().red
    uses_int = cc.algorithm is not CcAlgorithm.NONE and bool(
        (cc.impl or ALGORITHMS[cc.algorithm]).signals & Signal.INT)
    return SwitchConfig(pfc=PfcConfig(enabled=pfc), red=red, int_telemetry=uses_int)


def run(n: int, cc: str, pfc: bool, mbytes: float, bin_ns: float) -> tuple[dict, BulkResult]:
    msgs = max(4, math.ceil(mbytes * 1e6 / n / MSG))
    ccc = cc_config(cc)
    w = World.from_topology(TopologySpec(Shape.STAR, hosts=n + 1),
                            nic=NicConfig(cc=ccc, **_NIC_EXTRA.get(cc, {})),  # type: ignore[arg-type]
                            switch=switch_config(ccc, pfc))
    wall = time.perf_counter()
    r = incast(w, [f"h{i}" for i in range(1, n + 1)], "h0", msgs=msgs, bin_ns=bin_ns,
               dscp=26, limit_ns=2e9)
    wall = time.perf_counter() - wall
    per, goodput = r.window(0.5)
    fair = sum(per) / n if per else 0.0
    spread = max(abs(x - fair) / fair for x in per) if fair else None
    conv = r.converged_at(0.1)
    c = r.counters
    senders = [w.nics[f"h{i}"].counters() for i in range(1, n + 1)]
    _, whole = r.window(0.0)
    row = {
        "n": n, "cc": cc, "pfc": pfc,
        "bytes": n * msgs * MSG,
        "goodput_gbps": round(whole, 2),  # while every sender still has data
        "goodput_late_gbps": round(goodput, 2),  # the second half of that
        "goodput_run_gbps": round(n * msgs * MSG * 8 / r.duration_ns, 2),  # first post to last
        # completion
        "jain": round(jain(per), 4),
        "spread": None if spread is None else round(spread, 3),
        "max_queue_bytes": max(r.queue) if r.queue else 0,
        "drops": c["sw0.dropped.dynamic_threshold"] + c["sw0.dropped.buffer_full"]
        + c["sw0.dropped.headroom_overflow"],
        "pause_frames": sum(c[f"sw0.p{p}.pause_sent"] for p in range(n + 1)),
        "sender_paused_us": round(sum(s.get("port.paused_ns.prio3", 0) for s in senders)
                                  / 1000 / n, 1),
        "converged_us": None if conv is None else round(conv / 1000, 1),
        "retransmitted": sum(s["requester.retransmitted_packets"] for s in senders),
        "cnps": sum(s.get("cc.cnp_received", 0) for s in senders),
        "sim_ms": round(r.duration_ns / 1e6, 3),
        "wall_s": round(wall, 2),
        "completed": r.completed,
        "integrity": r.ok,
    }
    return row, r


def plot(r: BulkResult, path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    t = [x / 1e6 for x in r.times]
    for k, name in enumerate(r.senders):
        ax.plot(t, [row[k] for row in r.sent], lw=1, label=name)
    ax.plot(t, r.goodput, "k--", lw=1, label="receiver goodput")
    ax.set_xlabel("time (ms)")
    ax.set_ylabel("rate (Gb/s)")
    ax.set_title(title)
    ax.legend(ncol=5, fontsize=7, loc="upper right")
    ax.set_ylim(0, 105)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--n", default="2,4,8,16,32,64")
    ap.add_argument("--cc", default="none,dcqcn_paper,dcqcn_mlx,dcqcn_tuned,hpcc,timely,dctcp")
    ap.add_argument("--pfc", default="on,off")
    ap.add_argument("--mbytes", type=float, default=32.0, help="total MB sent per run")
    ap.add_argument("--bin-us", type=float, default=50.0)
    ap.add_argument("--plot", default="", help="PNG of the 8:1 runs' per-sender rates, "
                    "one per cc (FILE with the cc's name before .png)")
    args = ap.parse_args()
    rows = []
    for n in (int(x) for x in args.n.split(",")):
        for cc in args.cc.split(","):
            for pfc in (x == "on" for x in args.pfc.split(",")):
                row, r = run(n, cc, pfc, args.mbytes, args.bin_us * 1000)
                rows.append(row)
                if not args.json:
                    print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)
                if args.plot and n == 8 and cc != "none" and pfc:
                    p = Path(args.plot)
                    plot(r, str(p.with_name(f"{p.stem}-{cc}{p.suffix}")),
                         f"8:1 incast, 100 Gb/s star, {cc}, PFC on")
    if args.json:
        print(json.dumps(rows, indent=2))
    return 0 if all(r["integrity"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
