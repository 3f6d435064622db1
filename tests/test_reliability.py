"""Reliable transport under link faults: nothing lost, nothing corrupted, errors reported."""

from __future__ import annotations

import struct
import zlib

import pytest
from nicsim.driver import enums as e
from nicsim.driver.user.verbs import SGE, RecvWR, SendWR

from nicsim.fabric.faults import FaultConfig
from nicsim.testing.rdma import make_side, pair, settle, wait
from nicsim.testing.traffic_mix import fault_world, run_mix
from nicsim.world import World


@pytest.mark.parametrize("fault", ["loss", "corrupt", "duplicate", "reorder"])
@pytest.mark.parametrize("rate", [0.02, 0.1])
def test_single_fault_sweep_keeps_memory_exact(fault, rate):
    w, pairs = fault_world(FaultConfig(**{fault: rate}, seed=11), npairs=3)
    assert run_mix(w, pairs, 24, seed=zlib.crc32(f"{fault}{rate}".encode())) > 0
    counted = w.links[0].fault_counters()
    assert counted[{"loss": "lost", "corrupt": "corrupted", "duplicate": "duplicated",
                    "reorder": "reordered"}[fault]] > 0


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_mixed_faults_many_qps(seed):
    faults = FaultConfig(loss=0.05, corrupt=0.03, duplicate=0.03, reorder=0.05, seed=seed)
    w, pairs = fault_world(faults, npairs=4, seed=seed)
    run_mix(w, pairs, 40, seed=seed)
    a = w.nics["a"].counters()
    assert a["requester.retransmitted_packets"] > 0  # the faults really hit


def test_total_loss_ends_in_retry_exceeded_and_flush():
    w, a, b = pair(faults=FaultConfig(loss=1.0), timeout=6, retry_cnt=3)
    for i in range(3):
        wr = SendWR(wr_id=i, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1,
                    sg=[SGE(a.mr.buf, 100, a.mr.lkey)])
        wr.set_wr_rdma(b.mr.rkey, b.mr.buf)
        a.qp.post_send(wr)
    wcs = wait(a, 3, limit_ns=1e9)
    assert [c.status for c in wcs] == [e.IBV_WC_RETRY_EXC_ERR, e.IBV_WC_WR_FLUSH_ERR,
                                       e.IBV_WC_WR_FLUSH_ERR]
    c = w.nics["a"].counters()
    assert c["requester.timeouts"] == 4  # the first try and retry_cnt=3 retries
    assert a.qp.query()[0].qp_state == e.IBV_QPS_ERR
    # The simulation is finished: nothing is left scheduled that could run forever.
    w.hosts["a"].spend(10_000_000)
    assert c["requester.timeouts"] == w.nics["a"].counters()["requester.timeouts"]


def test_rnr_retry_exhausted():
    w, a, b = pair(rnr_retry=2, min_rnr_timer=1)
    a.qp.post_send(SendWR(opcode=e.IBV_WR_SEND, num_sge=1, sg=[SGE(a.mr.buf, 10, a.mr.lkey)]))
    assert wait(a)[0].status == e.IBV_WC_RNR_RETRY_EXC_ERR
    assert w.nics["b"].counters()["responder.rnr_naks_sent"] == 3


def test_rnr_then_receive_posted_succeeds():
    w, a, b = pair(rnr_retry=7, min_rnr_timer=1)
    a.mr.write(b"late receiver", 13, 0)
    a.qp.post_send(SendWR(opcode=e.IBV_WR_SEND, num_sge=1, sg=[SGE(a.mr.buf, 13, a.mr.lkey)]))
    w.hosts["b"].spend(100_000)  # several RNR NAKs go by
    b.qp.post_recv(RecvWR(wr_id=5, num_sge=1, sg=[SGE(b.mr.buf + 100, 64, b.mr.lkey)]))
    assert wait(a)[0].status == e.IBV_WC_SUCCESS
    assert wait(b)[0].byte_len == 13
    assert b.mr.read(13, 100) == b"late receiver"
    assert w.nics["b"].counters()["responder.rnr_naks_sent"] >= 2


def test_duplicated_atomics_execute_once():
    w, a, b = pair(faults=FaultConfig(duplicate=1.0, reorder_ns=500, seed=3))
    b.mr.write(struct.pack("<Q", 1000), 8, 64)
    for i in range(5):
        wr = SendWR(wr_id=i, opcode=e.IBV_WR_ATOMIC_FETCH_AND_ADD, num_sge=1,
                    sg=[SGE(a.mr.buf + 8 * i, 8, a.mr.lkey)])
        wr.set_wr_atomic(b.mr.rkey, b.mr.buf + 64, 1)
        a.qp.post_send(wr)
        wait(a)
    settle(w)
    assert struct.unpack("<Q", b.mr.read(8, 64))[0] == 1005
    assert [struct.unpack("<Q", a.mr.read(8, 8 * i))[0] for i in range(5)] == list(
        range(1000, 1005))
    assert w.nics["b"].counters()["responder.duplicates"] >= 5


def test_max_rd_atomic_limits_outstanding_reads():
    w = World.two_hosts()
    a, b = make_side(w, "a", 1 << 20), make_side(w, "b", 1 << 20)
    from nicsim.driver.user.verbs import AHAttr, GlobalRoute, QPAttr

    for x, y in ((a, b), (b, a)):
        attr = QPAttr(qp_access_flags=0xF, dest_qp_num=y.qp.qp_num, max_rd_atomic=2,
                      max_dest_rd_atomic=2, ah_attr=AHAttr(GlobalRoute(dgid=y.ctx.query_gid())))
        x.qp.to_init(attr)
        x.qp.to_rtr(attr)
        x.qp.to_rts(attr)
    for i in range(8):
        b.mr.write(bytes([i]) * 5000, 5000, 8192 * i)
        wr = SendWR(wr_id=i, opcode=e.IBV_WR_RDMA_READ, num_sge=1,
                    sg=[SGE(a.mr.buf + 8192 * i, 5000, a.mr.lkey)])
        wr.set_wr_rdma(b.mr.rkey, b.mr.buf + 8192 * i)
        a.qp.post_send(wr)
    assert all(c.status == 0 for c in wait(a, 8))
    assert all(a.mr.read(5000, 8192 * i) == bytes([i]) * 5000 for i in range(8))
    assert w.nics["a"].counters()["requester.blocked_rd_atomic"] > 0
    # The responder never saw more than two READs at once (it would have NAKed).
    assert w.nics["b"].counters()["responder.naks_sent"] == 0


def test_fence_waits_for_the_read_before_it():
    w, a, b = pair(mr_len=1 << 20)
    b.mr.write(b"R" * 9000, 9000, 0)
    rd = SendWR(wr_id=1, opcode=e.IBV_WR_RDMA_READ, num_sge=1,
                sg=[SGE(a.mr.buf, 9000, a.mr.lkey)])
    rd.set_wr_rdma(b.mr.rkey, b.mr.buf)
    # The fenced WRITE sends what the READ fetched: without the fence it would send zeros.
    wr = SendWR(wr_id=2, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1,
                sg=[SGE(a.mr.buf, 9000, a.mr.lkey)],
                send_flags=e.IBV_SEND_SIGNALED | e.IBV_SEND_FENCE)
    wr.set_wr_rdma(b.mr.rkey, b.mr.buf + 100000)
    a.qp.post_send(rd)
    a.qp.post_send(wr)
    assert [c.wr_id for c in wait(a, 2)] == [1, 2]
    settle(w)
    assert b.mr.read(9000, 100000) == b"R" * 9000
    assert w.nics["a"].counters()["requester.blocked_fence"] > 0


def test_credits_hold_sends_until_receives_are_posted():
    w, a, b = pair(rnr_retry=7, min_rnr_timer=1)
    b.qp.post_recv(RecvWR(wr_id=0, num_sge=1, sg=[SGE(b.mr.buf, 64, b.mr.lkey)]))
    for i in range(4):
        a.qp.post_send(SendWR(wr_id=i, opcode=e.IBV_WR_SEND, num_sge=1,
                              sg=[SGE(a.mr.buf, 8, a.mr.lkey)]))
    assert wait(a)[0].wr_id == 0
    w.hosts["a"].spend(50_000)
    for i in range(1, 4):
        b.qp.post_recv(RecvWR(wr_id=i, num_sge=1, sg=[SGE(b.mr.buf + 64 * i, 64, b.mr.lkey)]))
    assert [c.status for c in wait(a, 3)] == [0, 0, 0]
    assert sorted(c.wr_id for c in wait(b, 4)) == [0, 1, 2, 3]
    c = w.nics["a"].counters()
    assert c["requester.blocked_credits"] + w.nics["b"].counters()[
        "responder.rnr_naks_sent"] > 0
