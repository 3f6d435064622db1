"""Fuzz a live NIC's receive path with a million (by default) hostile frames.

The frames are random bytes, valid frames cut short, extended or with bits and bytes changed,
and well-formed frames (right ICRC) with random opcodes, PSNs, keys, addresses and lengths aimed
at a live QP and at QPNs that do not exist. They go straight into the NIC's receive entry; every
few thousand, simulated time runs so the NAKs, ACKs and READ responses they provoke play out.
Then a second QP pair on the same two NICs must still move data byte for byte, and a buffer
that granted no remote access must be untouched.

    python benchmarks/fuzz_rx.py [--json] [--packets N] [--seed S]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time

from nicsim.testing.fuzz_frames import (
    builder_to,
    damaged,
    random_valid,
    revive,
    still_works,
    victims,
)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--packets", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    w, a, b, a2, b2, canary, nb, bld = victims()
    rng = random.Random(args.seed)
    qpns = [b.qp.qp_num, b2.qp.qp_num + 1000]
    keys = [b.mr.rkey, canary.rkey, b.mr.rkey ^ 1]
    addrs = [b.mr.buf, canary.buf]
    # A pool of well-formed hostile frames; each packet sent is one of them, damaged or not,
    # or random bytes (building every frame from scratch would measure the generator).
    pool = [random_valid(rng, bld, qpns, keys, addrs) for _ in range(20_000)]
    other = builder_to(nb.cfg.mac, "02:00:00:00:00:99", bytes([10, 0, 0, 9]),
                       bytes([10, 0, 0, 2]))
    pool += [random_valid(rng, other, qpns, keys, addrs) for _ in range(2_000)]
    # And responses (and junk) for the requester side, host a: the completer.
    na = w.nics["a"]
    to_a = builder_to(na.cfg.mac, nb.cfg.mac, bytes([10, 0, 0, 2]), bytes([10, 0, 0, 1]))
    pool_a = [random_valid(rng, to_a, [a.qp.qp_num], keys, addrs) for _ in range(5_000)]
    revived = 0
    spend = w.hosts["a"].spend
    t0 = time.perf_counter()
    busy = 0.0
    sent = 0
    batch = 5000
    while sent < args.packets:
        n = min(batch, args.packets - sent)
        frames = []
        for i in range(n):
            r = rng.random()
            at_a = i % 4 == 0
            f = rng.choice(pool_a if at_a else pool)
            if r < 0.15:
                f = rng.randbytes(rng.randint(0, 200))
            elif r < 0.6:
                f = damaged(rng, f)
            frames.append((na.receive if at_a else nb.receive, f))
        t = time.perf_counter()
        for receive, f in frames:
            receive(f)
        spend(100_000)  # let the provoked traffic run
        busy += time.perf_counter() - t
        sent += n
        # A QP the attack drove to ERR is brought back, so the fuzz keeps reaching QP state.
        revived += revive(b, a) + revive(a, b)
    wall = time.perf_counter() - t0
    still_works(w, a2, b2, canary)
    c = nb.counters()
    ca = na.counters()
    for k, v in ca.items():  # both NICs' receive paths, added up
        if k.startswith(("rx.", "rx_drop.")):
            c[k] = c.get(k, 0) + v
    drops = {k.split(".", 1)[1]: v for k, v in c.items() if k.startswith("rx_drop.") and v}
    rx = {k: v for k, v in c.items() if k.startswith("rx.") and v}
    resp = {k: v for k, v in c.items() if k.startswith("responder.") and v}
    comp = {k: v for k, v in ca.items() if k.startswith("completer.") and v}
    out = {
        "packets": sent,
        "packets_per_s": sent / busy,
        "wall_s": wall,
        "rx": rx,
        "parse_drops_by_reason": drops,
        "responder": resp,
        "completer": comp,
        "qps_revived": revived,
        "victim_qp_state": b.qp.query()[0].qp_state,
        "survivor_pair": "OK (WRITE and READ byte-exact; canary untouched)",
    }
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"{sent:,} hostile frames into the RX path, {out['packets_per_s']:,.0f} frames/s "
              f"(RX path and the traffic it provokes; {wall:.1f} s in all)")
        print("rx:", ", ".join(f"{k.split('.', 1)[1]} {v:,}" for k, v in rx.items()))
        print("dropped by the parser:", ", ".join(f"{k} {v:,}" for k, v in
                                                 sorted(drops.items(), key=lambda x: -x[1])))
        print("responder (b):", ", ".join(f"{k.split('.', 1)[1]} {v:,}" for k, v in resp.items()))
        print("completer (a):", ", ".join(f"{k.split('.', 1)[1]} {v:,}" for k, v in comp.items()))
        print(f"QPs driven to ERR and brought back: {revived}")
        print("no exception; the second QP pair still works:", out["survivor_pair"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
