"""A mixed RC workload over several QP pairs under link faults, checked byte for byte.

Used by tests/test_reliability.py and benchmarks/fault_sweep.py.
"""

from __future__ import annotations

import random
import struct

from nicsim.driver import enums as e
from nicsim.driver.user.verbs import SGE, RecvWR, SendWR
from nicsim.fabric.faults import FaultConfig
from nicsim.nic.config import NicConfig
from nicsim.testing.rdma import Side, connect, make_side, settle, wait
from nicsim.world import World

OPS = ("write", "read", "send", "write_imm", "fetch_add", "cmp_swap")


# Under faults heavy enough, a QP can run out of transport retries: the WR in flight completes
# RETRY_EXC_ERR and the rest of its queue is flushed. That is the protocol working.
GAVE_UP = (e.IBV_WC_RETRY_EXC_ERR, e.IBV_WC_WR_FLUSH_ERR)


def run_mix(w: World, pairs: list[tuple[Side, Side]], n: int, seed: int,
            max_size: int = 3 * 1024 + 7, gave_up: list[int] | None = None) -> int:
    """Post a random mix of WRs on several QP pairs at once, then check every byte. Every WR
    must succeed, unless `gave_up` is given: then WRs that ended in retry exhaustion (or
    were flushed after it) are appended to it and their bytes are not checked."""
    rng = random.Random(seed)
    expect: list[tuple[int, Side, int, bytes]] = []  # (WR, side, offset in its MR, bytes)
    pending: dict[int, int] = {}
    stride = (max_size + 64 + 4095) // 4096 * 4096  # each WR its own region
    for i in range(n):
        k = i % len(pairs)
        a, b = pairs[k]
        op = rng.choice(OPS)
        size = rng.randint(1, max_size)
        base = stride * (i // len(pairs)) + rng.randrange(0, 64)
        data = bytes(rng.getrandbits(8) for _ in range(size))
        if op in ("fetch_add", "cmp_swap"):
            base &= ~7
            init = rng.getrandbits(64)
            b.mr.write(struct.pack("<Q", init), 8, base)
            add = rng.getrandbits(32)
            wr = SendWR(wr_id=i, opcode=e.IBV_WR_ATOMIC_FETCH_AND_ADD if op == "fetch_add"
                        else e.IBV_WR_ATOMIC_CMP_AND_SWP, num_sge=1,
                        sg=[SGE(a.mr.buf + base, 8, a.mr.lkey)])
            wr.set_wr_atomic(b.mr.rkey, b.mr.buf + base, add if op == "fetch_add" else init,
                             add)
            new = (init + add) % 2**64 if op == "fetch_add" else add
            expect += [(i, a, base, struct.pack("<Q", init)), (i, b, base, struct.pack("<Q", new))]
        elif op == "read":
            b.mr.write(data, size, base)
            wr = SendWR(wr_id=i, opcode=e.IBV_WR_RDMA_READ, num_sge=1,
                        sg=[SGE(a.mr.buf + base, size, a.mr.lkey)])
            wr.set_wr_rdma(b.mr.rkey, b.mr.buf + base)
            expect.append((i, a, base, data))
        else:
            a.mr.write(data, size, base)
            opcode = {"write": e.IBV_WR_RDMA_WRITE, "send": e.IBV_WR_SEND,
                      "write_imm": e.IBV_WR_RDMA_WRITE_WITH_IMM}[op]
            wr = SendWR(wr_id=i, opcode=opcode, num_sge=1, imm_data=i,
                        sg=[SGE(a.mr.buf + base, size, a.mr.lkey)])
            wr.set_wr_rdma(b.mr.rkey, b.mr.buf + base)
            if op != "write":
                sg = [SGE(b.mr.buf + base, size, b.mr.lkey)] if op == "send" else []
                b.qp.post_recv(RecvWR(wr_id=i, num_sge=len(sg), sg=sg))
            expect.append((i, b, base, data))
        a.qp.post_send(wr)
        pending[k] = pending.get(k, 0) + 1
    failed = set()
    for k, cnt in pending.items():
        for wc in wait(pairs[k][0], cnt, limit_ns=5e9):
            if wc.status != e.IBV_WC_SUCCESS:
                assert gave_up is not None and wc.status in GAVE_UP, wc
                failed.add(wc.wr_id)
    settle(w, 50_000)
    checked = [x for x in expect if x[0] not in failed]
    for _i, side, off, data in checked:
        assert side.mr.read(len(data), off) == data
    if gave_up is not None:
        gave_up += sorted(failed)
    return sum(len(d) for *_, d in checked)


def fault_world(faults: FaultConfig, npairs: int, seed: int = 0, nic: NicConfig | None = None):
    w = World.two_hosts(seed=seed, faults=faults, nic=nic)
    pairs = []
    for _ in range(npairs):
        a, b = make_side(w, "a", 1 << 20), make_side(w, "b", 1 << 20)
        connect(a, b, timeout=8)  # ~1 ms transport timer
        connect(b, a, timeout=8)
        pairs.append((a, b))
    return w, pairs
