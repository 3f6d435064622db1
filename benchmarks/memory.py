"""Memory: the simulator's resident memory follows what the simulation uses, not the size of
the simulated hosts or the length of the run.

Each case runs in its own process and reports that process's peak RSS (the whole Python
process: interpreter, nicsim, both hosts):

- `idle`: two booted 64 MiB hosts and nothing else (the floor the other cases stand on);
- `hosts`: two hosts of 64 MiB, 1 GiB or 16 GiB of simulated memory, a 1 MiB MR written on
  each and sent across by RDMA WRITE;
- `write64m`: one 64 MiB RDMA WRITE (source filled in 1 MiB pieces, destination checked);
- `reg3g`: a 3 GiB MR registered on a 16 GiB host and written at its last page;
- `small`: a scenario of N 64-byte WRITEs run by `nicsim run` (default one million), every
  byte checked.

    python benchmarks/memory.py [--json] [--small 1000000]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time

MIB = 1 << 20


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _pair(mem: int, mr_len: int):  # noqa: ANN202
    from nicsim.driver import enums as e

    from nicsim.workloads.endpoint import connect, make_side
    from nicsim.world import World

    w = World.two_hosts(seed=1, mem_size=mem)
    a, b = make_side(w, "a", mr_len), make_side(w, "b", mr_len)
    connect(a, b, e.IBV_MTU_4096)
    connect(b, a, e.IBV_MTU_4096)
    return w, a, b


def _write(a, b, n: int, to: int | None = None) -> None:  # noqa: ANN001
    from nicsim.driver import enums as e
    from nicsim.driver.user.verbs import SGE, SendWR

    wr = SendWR(opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(a.mr.buf, n, a.mr.lkey)])
    wr.set_wr_rdma(b.mr.rkey, b.mr.buf if to is None else to)
    a.qp.post_send(wr)
    while not a.cq.poll()[0]:
        pass
    a.ctx.host.spend(20_000)


def case(name: str, arg: int) -> dict:
    t = time.perf_counter()
    if name == "idle":
        _pair(64 * MIB, 4096)
    elif name == "hosts":
        w, a, b = _pair(arg, MIB)
        a.ctx.aspace.write(a.mr.buf, bytes(range(256)) * (MIB // 256))
        _write(a, b, MIB)
        assert b.ctx.aspace.read(b.mr.buf, MIB) == a.ctx.aspace.read(a.mr.buf, MIB)
    elif name == "write64m":
        size = 64 * MIB
        w, a, b = _pair(256 * MIB, size)
        piece = bytes(range(256)) * (MIB // 256)
        for off in range(0, size, MIB):
            a.ctx.aspace.write(a.mr.buf + off, piece)
        _write(a, b, size)
        for off in range(0, size, MIB):
            assert b.ctx.aspace.read(b.mr.buf + off, MIB) == piece
    elif name == "reg3g":
        from nicsim.driver.user.verbs import MR

        w, a, b = _pair(16 << 30, 4096)
        big = MR(b.pd, 3 << 30, 15)
        a.ctx.aspace.write(a.mr.buf, b"x" * 4096)
        b.mr = big  # the WRITE's target: the big MR, its last page
        big_end = big.buf + (3 << 30) - 4096
        _write(a, b, 4096, big_end)
        assert b.ctx.aspace.read(big_end, 4096) == b"x" * 4096
    elif name == "small":
        from nicsim.scenario.runner import Runner
        from nicsim.scenario.schema import parse_scenario

        sc = parse_scenario(f"name: small\ndepth: 16\npcap: null\n"
                            f"ops:\n  - {{op: write, bytes: 64, repeat: {arg}}}\n")
        r = Runner(sc).run()
        assert r.ok and r.verified_bytes == 64 * arg
    return {"case": name, "arg": arg, "peak_rss_mb": _peak_mb(),
            "wall_s": time.perf_counter() - t}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--small", type=int, default=1_000_000, help="WRs of the `small` case")
    ap.add_argument("--case", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.case:
        print(json.dumps(case(args.case[0], int(args.case[1]))))
        return 0
    plan = [("idle", 0), ("hosts", 64 * MIB), ("hosts", 1024 * MIB), ("hosts", 16384 * MIB),
            ("write64m", 0), ("reg3g", 0), ("small", args.small)]
    rows = []
    with tempfile.TemporaryDirectory():
        for name, arg in plan:
            out = subprocess.run([sys.executable, __file__, "--case", name, str(arg)],
                                 capture_output=True, text=True, check=True)
            rows.append(json.loads(out.stdout))
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    label = {"idle": lambda a: "two booted 64 MiB hosts, idle",
             "hosts": lambda a: f"two {a // MIB:,} MiB hosts, 1 MiB written and sent",
             "write64m": lambda a: "one 64 MiB RDMA WRITE (two 256 MiB hosts)",
             "reg3g": lambda a: "a 3 GiB MR on a 16 GiB host, written at its end",
             "small": lambda a: f"{a:,} x 64 B WRITEs by `nicsim run`, every byte checked"}
    for r in rows:
        print(f"{label[r['case']](r['arg']):<58} peak RSS {r['peak_rss_mb']:>7.0f} MB "
              f"({r['wall_s']:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
