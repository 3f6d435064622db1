"""Any bytes at a port: dropped or NAKed, counted by reason, never an exception, never a
corrupted QP or buffer that the attacker had no right to touch."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from driver.user import enums as e
from driver.user.verbs import MR, SGE, QPAttr, RecvWR, SendWR
from nicsim.wire import ParseError
from tests.fuzz_frames import builder_to, fuzz_frame
from tests.rdma import connect, make_side, pair, settle, wait


def _victims():
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


def _still_works(w, a2, b2, canary):
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


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1))
def test_random_frames_never_escape(seed):
    w, a, b, a2, b2, canary, nb, bld = _victims()
    rng = random.Random(seed)
    qpns = [b.qp.qp_num, b2.qp.qp_num + 1000]  # the victim, and a QPN that does not exist
    keys = [b.mr.rkey, canary.rkey, b.mr.rkey ^ 1]
    addrs = [b.mr.buf, canary.buf]
    na = w.nics["a"]
    to_a = builder_to(na.cfg.mac, nb.cfg.mac, bytes([10, 0, 0, 2]), bytes([10, 0, 0, 1]))
    for i in range(300):
        if i % 3:  # requests (and junk) at the responder, b
            nb.receive(fuzz_frame(rng, bld, qpns, keys, addrs))
        else:  # responses (and junk) at the requester, a: the completer
            na.receive(fuzz_frame(rng, to_a, [a.qp.qp_num], keys, addrs))
        if i % 50 == 49:
            w.hosts["a"].spend(50_000)
            revive(b, a)
            revive(a, b)
    w.hosts["a"].spend(200_000)  # let every NAK, ACK and READ response play out
    c, ca = nb.counters(), na.counters()
    assert c["rx.packets"] + ca["rx.packets"] >= 300
    # Every dropped frame is counted under a reason.
    reasons = {r.value for r in ParseError}
    for cs in (c, ca):
        assert all(k.split(".", 1)[1] in reasons for k, v in cs.items()
                   if k.startswith("rx_drop.") and v)
    assert sum(v for cs in (c, ca) for k, v in cs.items() if k.startswith("rx_drop.")) > 0
    _still_works(w, a2, b2, canary)


@settings(max_examples=60, deadline=None)
@given(frame=st.binary(max_size=200))
def test_arbitrary_bytes_are_dropped(frame):
    w, a, b, a2, b2, canary, nb, bld = _victims()
    nb.receive(frame)
    assert nb.counters()["rx.packets"] == 1
    w.hosts["a"].spend(10_000)
    assert b.qp.query()[0].qp_state == e.IBV_QPS_RTS
