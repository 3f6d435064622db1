"""Frames for fuzzing a NIC's receive path: random bytes, damaged valid frames, and valid
frames (right ICRC) with random opcodes, PSNs and extension headers aimed at live QPs.

Shared by tests/test_rx_fuzz.py and benchmarks/fuzz_rx.py, with the live pair they attack
(`victims`), the way to bring an attacked QP back (`revive`) and the check that the NIC still
serves a healthy pair (`still_works`).
"""

from __future__ import annotations

import random

from nicsim.driver import enums as e
from nicsim.driver.user.verbs import MR, SGE, QPAttr, RecvWR, SendWR
from nicsim.testing.rdma import connect, make_side, pair, settle, wait
from nicsim.wire import OPCODES, FrameBuilder, Path, mac_bytes, roce_udp_sport
from nicsim.wire.opcodes import Ext

ALL_OPCODES = sorted(OPCODES)


def builder_to(dst_mac: str, src_mac: str, sip: bytes, dip: bytes) -> FrameBuilder:
    return FrameBuilder(Path(mac_bytes(src_mac), mac_bytes(dst_mac), sip, dip,
                             roce_udp_sport(1, 2)))


def random_valid(rng: random.Random, b: FrameBuilder, qpns: list[int], keys: list[int],
                 addrs: list[int]) -> bytes:
    """A well-formed frame: random opcode, header fields and payload, right ICRC."""
    op = rng.choice(ALL_OPCODES)
    info = OPCODES[op]
    ext = b""
    for x in info.exts:
        if x is Ext.RETH:
            va = rng.choice(addrs) + rng.randint(-64, 8192) if rng.random() < 0.7 else \
                rng.getrandbits(64)
            ext += (va % 2**64).to_bytes(8, "big") + rng.choice(keys + [rng.getrandbits(32)]
                                                                 ).to_bytes(4, "big")
            ext += rng.choice([0, 1, 8, 1024, 4096, rng.getrandbits(32)]).to_bytes(4, "big")
        elif x is Ext.ATOMIC_ETH:
            va = rng.choice(addrs) + rng.randint(-16, 64)
            ext += (va % 2**64).to_bytes(8, "big") + rng.choice(keys).to_bytes(4, "big")
            ext += rng.getrandbits(64).to_bytes(8, "big") + rng.getrandbits(64).to_bytes(8, "big")
        else:
            ext += rng.getrandbits(8 * x.size).to_bytes(x.size, "big")
    payload = rng.randbytes(rng.choice([0, 1, 3, 256, 1024, 1100, 4096])) \
        if info.has_payload else b""
    qpn = rng.choice(qpns) if rng.random() < 0.9 else rng.getrandbits(24)
    return b.build(op, qpn, rng.getrandbits(24) if rng.random() < 0.3 else rng.randint(0, 40),
                   ext, payload, ackreq=rng.random() < 0.5, solicited=rng.random() < 0.1,
                   becn=rng.random() < 0.05, pkey=0xFFFF if rng.random() < 0.95 else
                   rng.getrandbits(16))


def damaged(rng: random.Random, frame: bytes) -> bytes:
    """A valid frame cut short, extended, or with bits flipped or bytes replaced."""
    r = rng.random()
    if r < 0.25:
        return frame[:rng.randrange(0, len(frame))]
    if r < 0.35:
        return frame + rng.randbytes(rng.randint(1, 64))
    b = bytearray(frame)
    for _ in range(rng.randint(1, 4)):
        i = rng.randrange(len(b))
        if rng.random() < 0.5:
            b[i] ^= 1 << rng.randrange(8)
        else:
            b[i] = rng.getrandbits(8)
    return bytes(b)


def fuzz_frame(rng: random.Random, b: FrameBuilder, qpns: list[int], keys: list[int],
               addrs: list[int]) -> bytes:
    r = rng.random()
    if r < 0.2:
        return rng.randbytes(rng.randint(0, 300))
    if r < 0.55:
        return damaged(rng, random_valid(rng, b, qpns, keys, addrs))
    return random_valid(rng, b, qpns, keys, addrs)


def victims():
    """A pair under attack, plus a second pair on the same NICs that must keep working,
    and a canary MR on host b that grants no remote access."""
    w, a, b = pair(mr_len=1 << 16)
    a2, b2 = make_side(w, "a"), make_side(w, "b")
    connect(a2, b2)
    connect(b2, a2)
    canary = MR(b.pd, 4096, e.IBV_ACCESS_LOCAL_WRITE)
    canary.write(b"\xc5" * 4096, 4096)
    nb = w.nics["b"]
    bld = builder_to(nb.cfg.mac, w.nics["a"].cfg.mac, bytes([10, 0, 0, 1]),
                     bytes([10, 0, 0, 2]))
    for i in range(4):
        b.qp.post_recv(RecvWR(wr_id=i, num_sge=1, sg=[SGE(b.mr.buf + 1024 * i, 1024,
                                                            b.mr.lkey)]))
    return w, a, b, a2, b2, canary, nb, bld


def revive(x, y) -> bool:
    """If QP x went to ERR under attack, bring it back (RESET, INIT, RTR, RTS) as an
    application would, so the fuzz keeps reaching the QP's state machine."""
    if x.qp.query()[0].qp_state != e.IBV_QPS_ERR:
        return False
    x.qp.modify(QPAttr(qp_state=e.IBV_QPS_RESET), e.IBV_QP_STATE)
    connect(x, y)
    for i in range(4):
        x.qp.post_recv(RecvWR(wr_id=i, num_sge=1, sg=[SGE(x.mr.buf + 1024 * i, 1024,
                                                            x.mr.lkey)]))
    return True


def still_works(w, a2, b2, canary):
    data = bytes(range(256)) * 20
    a2.mr.write(data, len(data))
    wr = SendWR(wr_id=1, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1,
                sg=[SGE(a2.mr.buf, len(data), a2.mr.lkey)])
    wr.set_wr_rdma(b2.mr.rkey, b2.mr.buf + 7)
    a2.qp.post_send(wr)
    rd = SendWR(wr_id=2, opcode=e.IBV_WR_RDMA_READ, num_sge=1,
                sg=[SGE(a2.mr.buf + 8192, len(data), a2.mr.lkey)])
    rd.set_wr_rdma(b2.mr.rkey, b2.mr.buf + 7)
    a2.qp.post_send(rd)
    assert [c.status for c in wait(a2, 2)] == [0, 0]
    settle(w)
    assert b2.mr.read(len(data), 7) == data
    assert a2.mr.read(len(data), 8192) == data
    assert canary.read(4096) == b"\xc5" * 4096
