"""What on-demand paging costs: one RDMA WRITE between two hosts, from the post to its
completion (simulated time), with pinned MRs (first and second WRITE: the second finds the
NIC's translation cache warm) and with ODP MRs at both ends: the first touch
(the requester's WQE waits for its pages, the responder answers an RNR NAK while its driver
maps the target), the same WRITE again (every page present), and after a synchronous
ibv_advise_mr prefetch at both ends (whose own time is shown).

    python benchmarks/odp.py [--json] [--sizes 4096,65536,1048576] [--min-rnr-timer 1]

Every figure is simulated time, identical from run to run: the machine's load does not enter.
"""

from __future__ import annotations

import argparse
import json

from nicsim.driver import enums as e
from nicsim.driver.user.verbs import SGE, SendWR

from nicsim.workloads.endpoint import ALL_ACCESS, Side, connect, make_side
from nicsim.world import World

ODP = ALL_ACCESS | e.IBV_ACCESS_ON_DEMAND
COLUMNS = [("size", "size"), ("pinned us", "pinned_us"), ("pinned 2nd", "pinned_second_us"),
           ("ODP 1st us", "odp_first_us"),
           ("ODP 2nd us", "odp_second_us"), ("prefetch us", "prefetch_us"),
           ("prefetched us", "prefetched_us"), ("1st/pinned", "first_ratio"),
           ("faults a/b", "faults"), ("pages", "pages")]


def write_us(a: Side, b: Side, size: int) -> float:
    env = a.ctx.host.env
    wr = SendWR(wr_id=1, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1,
                sg=[SGE(a.mr.buf, size, a.mr.lkey)], send_flags=e.IBV_SEND_SIGNALED)
    wr.set_wr_rdma(b.mr.rkey, b.mr.buf)
    t0 = env.now
    a.qp.post_send(wr)
    while True:
        _, wcs = a.cq.poll(1)
        if wcs:
            if wcs[0].status != e.IBV_WC_SUCCESS:
                raise SystemExit(f"WRITE of {size} B failed: status {wcs[0].status}")
            return (env.now - t0) / 1000.0
        if env.now - t0 > 1e9:
            raise SystemExit(f"WRITE of {size} B did not complete in 1 s of simulated time")


def sides(size: int, access: int, rnr: int) -> tuple[World, Side, Side]:
    w = World.two_hosts(seed=1)
    a, b = make_side(w, "a", size, access=access), make_side(w, "b", size, access=access)
    connect(a, b, min_rnr_timer=rnr)
    connect(b, a, min_rnr_timer=rnr)
    a.mr.write(b"\x5a" * size, size)  # the process's own pages exist; the NIC's MTT has none
    return w, a, b


def measure(size: int, rnr: int) -> dict[str, float | int | str]:
    _, a, b = sides(size, ALL_ACCESS, rnr)
    pinned = write_us(a, b, size)
    pinned_second = write_us(a, b, size)
    w, a, b = sides(size, ODP, rnr)
    first = write_us(a, b, size)
    second = write_us(a, b, size)
    faults = f"{w.nics['a'].odp.counters['page_faults']}/{w.nics['b'].odp.counters['page_faults']}"
    pages = a.ctx.host.kernel.devices["nsnic0"].hw.odp.counters["pages_mapped"]  # type: ignore
    _, a, b = sides(size, ODP, rnr)
    env = a.ctx.host.env
    t0 = env.now
    for s in (a, b):
        s.pd.advise_mr(e._IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, e._IBV_ADVISE_MR_FLAG_FLUSH,
                       [SGE(s.mr.buf, size, s.mr.lkey)])
    prefetch = (env.now - t0) / 1000.0
    prefetched = write_us(a, b, size)
    return {"size": size, "pinned_us": pinned, "pinned_second_us": pinned_second,
            "odp_first_us": first, "odp_second_us": second,
            "prefetch_us": prefetch, "prefetched_us": prefetched,
            "first_ratio": first / pinned, "faults": faults, "pages": pages}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--sizes", default="4096,65536,1048576")
    ap.add_argument("--min-rnr-timer", type=int, default=1,
                    help="the responder's RNR timer code (IBA table 45; 1 = 10 us)")
    a = ap.parse_args()
    try:
        sizes = [int(x) for x in a.sizes.split(",")]
    except ValueError:
        ap.error(f"--sizes: comma-separated byte counts, not {a.sizes!r}")
    if any(not 0 < s <= 16 << 20 for s in sizes) or not 0 <= a.min_rnr_timer <= 31:
        ap.error("--sizes: 1 B .. 16 MiB each; --min-rnr-timer: 0 .. 31")
    rows = [measure(s, a.min_rnr_timer) for s in sizes]
    if a.json:
        print(json.dumps(rows, indent=1))
        return
    print(" ".join(f"{h:>13}" for h, _ in COLUMNS))
    for r in rows:
        print(" ".join(f"{r[k]:>13.2f}" if isinstance(r[k], float) else f"{r[k]:>13}"
                       for _, k in COLUMNS))


if __name__ == "__main__":
    main()
