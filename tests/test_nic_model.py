"""The NIC's processing model (nicsim.nic.engines, wqe_fetch, BlueFlame): stage costs bound the
rates they should, parallel engines multiply them, WQEs come by MMIO when the device says so
(and by DMA when it does not), receive WQEs wait in the NIC, and the bytes are right in every
case."""

from __future__ import annotations

from dataclasses import replace

import pytest
from nicsim.driver import enums as e
from nicsim.driver.user.verbs import SGE, QPCap, RecvWR, SendWR

from nicsim.hwif import PAGE_SIZE, UAR_BASE, DevFeature, Reg, UarReg
from nicsim.nic.config import NicConfig
from nicsim.nic.engines import Units, cycles_ns
from nicsim.scenario.schema import NicSpec
from nicsim.testing.rdma import pair, wait
from nicsim.workloads.endpoint import connect, make_side
from nicsim.world import World

PAYLOAD = bytes(range(48))


def test_units_serve_items_on_the_earliest_free_unit():
    u = Units(2)
    assert [u.take(0.0, 10.0) for _ in range(4)] == [0.0, 0.0, 10.0, 10.0]
    assert u.take(35.0, 10.0) == 35.0  # idle units start items when they are ready
    one = Units(1)
    assert [one.take(0.0, 10.0) for _ in range(3)] == [0.0, 10.0, 20.0]
    assert cycles_ns(250, 250.0) == 1000.0


def _send_inline(nic: NicConfig | None, inline: bool = True) -> tuple[float, dict, bytes]:
    """One 48-byte SEND a -> b (inline or not); the time to its receive completion, the
    NICs' counters, and the bytes in b's buffer."""
    w, a, b = pair(nic=nic)
    a.mr.write(PAYLOAD, len(PAYLOAD))
    b.qp.post_recv(RecvWR(wr_id=1, num_sge=1, sg=[SGE(b.mr.buf, 64, b.mr.lkey)]))
    wr = SendWR(wr_id=2, opcode=e.IBV_WR_SEND, num_sge=1,
                sg=[SGE(a.mr.buf, len(PAYLOAD), a.mr.lkey)],
                send_flags=e.IBV_SEND_SIGNALED | (e.IBV_SEND_INLINE if inline else 0))
    # Warm the translation caches first, so the times compare the WQE's path only.
    a.qp.post_send(wr)
    wait(b)
    wait(a)
    b.qp.post_recv(RecvWR(wr_id=1, num_sge=1, sg=[SGE(b.mr.buf, 64, b.mr.lkey)]))
    b.mr.write(bytes(64), 64)
    t = w.env.now
    a.qp.post_send(wr)
    (wc,) = wait(b)
    assert wc.status == e.IBV_WC_SUCCESS and wc.byte_len == len(PAYLOAD)
    ca = w.nics["a"].counters()
    return w.env.now - t, ca, b.mr.read(len(PAYLOAD), 0)


def test_blueflame_brings_a_small_inline_wqe_with_its_doorbell(monkeypatch):
    t_bf, c, data = _send_inline(None)
    assert data == PAYLOAD
    assert c["wqe_fetch.bf_wqes"] == 2 and c["wqe_fetch.sq_dma_reads"] == 0
    # A device without BlueFlame (FEATURES reads 0): the provider rings the plain doorbell
    # and the NIC reads the WQE by DMA, one PCIe round trip later.
    t_db, c, data = _send_inline(NicConfig(bf_size=0))
    assert data == PAYLOAD
    assert c["wqe_fetch.bf_wqes"] == 0 and c["wqe_fetch.sq_dma_reads"] == 2
    assert t_db - t_bf > 200  # a 64 B DMA read (~480 ns) less the longer MMIO burst
    # Not inline: a lone WQE that fits goes by BlueFlame too (mlx5's default, prefer_bf),
    # and the NIC reads only the payload; unless the environment turns that off, as
    # MLX5_POST_SEND_PREFER_BF=0 does for mlx5.
    t_sge, c, data = _send_inline(None, inline=False)
    assert data == PAYLOAD and c["wqe_fetch.bf_wqes"] == 2
    assert c["wqe_fetch.sq_dma_reads"] == 0
    monkeypatch.setenv("NSNIC_POST_SEND_PREFER_BF", "0")
    t_fetch, c, data = _send_inline(None, inline=False)
    assert data == PAYLOAD and c["wqe_fetch.bf_wqes"] == 0
    assert c["wqe_fetch.sq_dma_reads"] == 2
    assert t_fetch - t_sge > 200  # the WQE's DMA read


def test_the_device_advertises_blueflame_in_its_features_register():
    w = World.two_hosts(nic=NicConfig(bf_size=128))
    nic = w.nics["a"]
    word = nic.mmio_read(Reg.FEATURES)
    assert word & DevFeature.BLUEFLAME and word >> 16 == 128
    word = World.two_hosts(nic=NicConfig(bf_size=0)).nics["a"].mmio_read(Reg.FEATURES)
    assert not word & DevFeature.BLUEFLAME and word >> 16 == 0
    # The model's other features: multicast, FLUSH, ATOMIC WRITE, RoCE v1 (the RTL reads 0).
    assert word == DevFeature.MULTICAST | DevFeature.FLUSH | DevFeature.ATOMIC_WRITE \
        | DevFeature.ROCE_V1


def test_a_bad_blueflame_write_is_counted_and_ignored():
    w, a, b = pair()
    nic = w.nics["a"]
    before = nic.counters()
    uar = nic.qps[a.qp.qp_num].uar
    nic.mmio_write_block(UAR_BASE * uar + UarReg.BF, bytes(12))  # not a multiple of 8
    nic.mmio_write_block(uar * PAGE_SIZE + UarReg.BF, bytes(512))  # beyond the buffer
    nic.mmio_write_block(uar * PAGE_SIZE + UarReg.SQ_DB, bytes(16))  # not the BF offset
    after = nic.counters()
    assert after["sched.bf_bad_write"] - before["sched.bf_bad_write"] == 3
    assert after["sched.doorbells"] == before["sched.doorbells"]


def test_a_chain_of_inline_wrs_goes_by_doorbell_and_arrives_whole():
    w, a, b = pair()
    a.mr.write(PAYLOAD, len(PAYLOAD))
    for i in range(2):
        b.qp.post_recv(RecvWR(wr_id=i, num_sge=1, sg=[SGE(b.mr.buf + 64 * i, 64, b.mr.lkey)]))
    w1 = SendWR(wr_id=1, opcode=e.IBV_WR_SEND, num_sge=1,
                sg=[SGE(a.mr.buf, 16, a.mr.lkey)], send_flags=e.IBV_SEND_INLINE)
    w2 = SendWR(wr_id=2, opcode=e.IBV_WR_SEND, num_sge=1,
                sg=[SGE(a.mr.buf + 16, 32, a.mr.lkey)],
                send_flags=e.IBV_SEND_INLINE | e.IBV_SEND_SIGNALED)
    w1.next_wr = w2
    a.qp.post_send(w1)
    assert [wc.byte_len for wc in wait(b, 2)] == [16, 32]
    assert b.mr.read(16, 0) == PAYLOAD[:16] and b.mr.read(32, 64) == PAYLOAD[16:]
    c = w.nics["a"].counters()
    assert c["wqe_fetch.bf_wqes"] == 0 and c["wqe_fetch.sq_wqes"] == 2


def test_receive_wqes_are_prefetched_at_the_rq_doorbell():
    w, a, b = pair()
    a.mr.write(PAYLOAD, len(PAYLOAD))
    head = None
    for i in reversed(range(4)):
        r = RecvWR(wr_id=i, num_sge=1, sg=[SGE(b.mr.buf + 64 * i, 64, b.mr.lkey)])
        r.next_wr = head
        head = r
    b.qp.post_recv(head)  # one doorbell: one descriptor read of all four
    for i in range(4):
        a.qp.post_send(SendWR(wr_id=i, opcode=e.IBV_WR_SEND, num_sge=1,
                              sg=[SGE(a.mr.buf, 8 + i, a.mr.lkey)],
                              send_flags=e.IBV_SEND_SIGNALED))
    assert [wc.byte_len for wc in wait(b, 4)] == [8, 9, 10, 11]
    for i in range(4):
        assert b.mr.read(8 + i, 64 * i) == PAYLOAD[:8 + i]
    c = w.nics["b"].counters()
    assert (c["wqe_fetch.rq_dma_reads"], c["wqe_fetch.rq_wqes"]) == (1, 4)
    assert c["wqe_fetch.rq_cache_misses"] == 0


def _writes(nic: NicConfig, nqp: int, per_qp: int) -> float:
    """Time for nqp QPs to each complete per_qp 64-byte WRITEs posted at once."""
    w = World.two_hosts(nic=nic)
    cap = QPCap(64, 64, 1, 1, 0)
    sides = [(make_side(w, "a", 4096, cap), make_side(w, "b", 4096, cap))
             for _ in range(nqp)]
    for a, b in sides:
        connect(a, b, e.IBV_MTU_1024)
        connect(b, a, e.IBV_MTU_1024)
        a.mr.write(PAYLOAD, len(PAYLOAD))
    t = w.env.now
    for a, b in sides:
        for i in range(per_qp):
            wr = SendWR(wr_id=i, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1,
                        sg=[SGE(a.mr.buf, 64, a.mr.lkey)],
                        send_flags=e.IBV_SEND_SIGNALED if i == per_qp - 1 else 0)
            wr.set_wr_rdma(b.mr.rkey, b.mr.buf + 64 * i)
            a.qp.post_send(wr)
    for a, b in sides:
        assert [wc.status for wc in wait(a)] == [e.IBV_WC_SUCCESS]
        assert b.mr.read(48, 64 * (per_qp - 1)) == PAYLOAD
    return w.env.now - t


def test_the_wqe_stage_cost_bounds_a_qp_and_engines_multiply_it():
    slow = replace(NicConfig(), clock_mhz=100.0, sched_cycles=100, wqe_parse_cycles=100,
                   send_engines=1)  # 2 us per WQE
    one_qp = _writes(slow, 1, 20)
    assert one_qp >= 19 * 2000
    assert _writes(slow, 2, 10) >= 19 * 2000  # one engine: two QPs share its rate
    two = _writes(replace(slow, send_engines=2), 2, 10)
    assert two < 0.6 * one_qp  # two engines: each QP has its own
    assert _writes(NicConfig(), 1, 20) < 0.5 * one_qp


def test_profile_knobs_are_checked():
    with pytest.raises(ValueError, match="bf_size must be 0"):
        NicSpec(bf_size=100)
    with pytest.raises(ValueError):
        NicSpec(send_engines=0)
