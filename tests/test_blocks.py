"""The requester, responder and completer on their own: each built on a NIC's services
(nicsim.testing.blocks) with no Nic, driven through its own entry points, judged by the
frames it sends, the bytes it places in host memory and the CQEs it writes."""

from __future__ import annotations

from nicsim.hwif import (
    Access,
    CqeOpcode,
    CqeStatus,
    SendWqeCtrl,
    Sge,
    WqeFlags,
    WqeOpcode,
)
from nicsim.nic.completer import Completer
from nicsim.nic.datagram import Datagram
from nicsim.nic.qp import QpCtx, SendOp
from nicsim.nic.requester import Requester
from nicsim.nic.responder import Responder
from nicsim.testing.blocks import PEER_IP, Bench
from nicsim.wire import Opcode, parse
from nicsim.wire.packet import reth

PEER_QPN = 0x33


class Progress:
    """The requester, as the completer sees it (nicsim.nic.interfaces.Requests)."""

    def __init__(self) -> None:
        self.restarts: list[int] = []

    def restart_timer(self, qp: QpCtx) -> None:
        self.restarts.append(qp.qpn)

    def first_unacked(self, qp: QpCtx) -> int:
        return qp.outstanding[0].first_psn if qp.outstanding else qp.sq_psn

    def still_valid(self, sop: SendOp) -> bool:
        return True


def _completer(b: Bench) -> Completer:
    return Completer(b.env, b.cfg, b.cq, b.engine, b.dma, b.mmu)


def test_responder_places_a_write_and_acknowledges_its_last_packet() -> None:
    b = Bench()
    cq = b.add_cq(1)
    key, va, pages = b.add_mr(pd=1, length=3 * 4096, access=Access.LOCAL_WRITE
                              | Access.REMOTE_WRITE)
    qp = b.rc_qp(0x11, PEER_QPN, cq, access=Access.REMOTE_WRITE)
    resp = Responder(b.env, b.cfg, b.engine, b.fetch, b.mmu, b.dma, b.pcie, _completer(b),
                     b.windows, b.srq, b.port)
    data = bytes(range(256)) * 10  # 2560 bytes at MTU 1024: FIRST, MIDDLE, LAST
    fb = b.peer_builder(qp)
    at = va + 4000  # across a page boundary
    pieces = [(Opcode.RC_RDMA_WRITE_FIRST, reth(at, key, len(data)), data[:1024]),
              (Opcode.RC_RDMA_WRITE_MIDDLE, b"", data[1024:2048]),
              (Opcode.RC_RDMA_WRITE_LAST, b"", data[2048:])]
    for psn, (op, ext, payload) in enumerate(pieces):
        resp.request(qp, parse(fb.build(op, qp.qpn, psn, ext, payload, ackreq=psn == 2)))
    b.env.run(until=b.env.now + 10_000)
    assert b.read_va(pages, va, at, len(data)) == data
    assert b.read_va(pages, va, at - 8, 8) == bytes(8)  # nothing before it
    acks = [parse(f) for _t, f in b.sent]
    assert [(p.opcode, p.psn, p.dqpn, p.aeth_syndrome) for p in acks] == \
        [(Opcode.RC_ACKNOWLEDGE, 2, PEER_QPN, 0)]
    assert acks[0].frame[30:34] == PEER_IP  # to the peer
    assert qp.epsn == 3


def test_responder_naks_a_write_outside_the_region_and_places_nothing() -> None:
    b = Bench()
    cq = b.add_cq(1)
    key, va, pages = b.add_mr(pd=1, length=4096, access=Access.LOCAL_WRITE
                              | Access.REMOTE_WRITE)
    qp = b.rc_qp(0x11, PEER_QPN, cq, access=Access.REMOTE_WRITE)
    resp = Responder(b.env, b.cfg, b.engine, b.fetch, b.mmu, b.dma, b.pcie, _completer(b),
                     b.windows, b.srq, b.port)
    fb = b.peer_builder(qp)
    resp.request(qp, parse(fb.build(Opcode.RC_RDMA_WRITE_ONLY, qp.qpn, 0,
                                    reth(va + 4000, key, 200), b"\xee" * 200, ackreq=True)))
    b.env.run(until=b.env.now + 10_000)
    (nak,) = [parse(f) for _t, f in b.sent]
    assert nak.opcode == Opcode.RC_ACKNOWLEDGE and nak.aeth_syndrome == 0x62  # remote access
    assert b.read_va(pages, va, va, 4096) == bytes(4096)


def test_completer_retires_an_acknowledged_write_with_one_cqe() -> None:
    b = Bench()
    cq = b.add_cq(1)
    qp = b.rc_qp(0x11, PEER_QPN, cq)
    comp = _completer(b)
    comp.requests = progress = Progress()
    wqe = type("Wqe", (), {"index": 7})()
    qp.outstanding.append(SendOp(wqe, WqeOpcode.RDMA_WRITE, True, 10, 12, 2560, 3))
    qp.sq_psn = 13
    comp.ack(qp, 11, 0)  # covers two of its three packets: nothing completes
    b.env.run(until=b.env.now + 5_000)
    assert b.cqes(cq) == [] and len(qp.outstanding) == 1
    comp.ack(qp, 12, 0)
    b.env.run(until=b.env.now + 5_000)
    (c,) = b.cqes(cq)
    assert (c.qpn, c.wqe_index, c.opcode, c.status, c.byte_len) == \
        (0x11, 7, CqeOpcode.RDMA_WRITE, CqeStatus.SUCCESS, 2560)
    assert not qp.outstanding and qp.acked_psn == 12
    assert progress.restarts  # the transport timer follows the progress


def test_requester_sends_a_write_from_the_send_ring_packet_by_packet() -> None:
    b = Bench()
    cq = b.add_cq(1)
    key, va, pages = b.add_mr(pd=1, length=8192, access=Access.LOCAL_WRITE)
    data = bytes((i * 7) & 0xFF for i in range(3000))
    b.write_va(pages, va, va + 3000, data)  # the source buffer, across a page boundary
    qp = b.rc_qp(0x11, PEER_QPN, cq)
    qp.sq_psn = 0x100
    comp = _completer(b)
    dg = Datagram(b.env, b.cfg, b.mac, b.ip.packed, b.engine, b.fetch, b.mmu, b.dma, b.pcie,
                  b.cq, comp, b.srq, b.port)
    req = Requester(b.env, b.cfg, b.engine, b.fetch, b.mmu, b.dma, b.cq, comp, b.windows, dg,
                    None, b.port)
    comp.requests = dg.requester = req
    b.engine.start(req, b.fetch)
    ctrl = SendWqeCtrl(WqeOpcode.RDMA_WRITE, WqeFlags.SIGNALED, 1, remote_addr=0xAB000,
                       rkey=0x4242)
    b.mem.write(qp.sq_base, ctrl.pack() + Sge(va + 3000, len(data), key).pack())
    qp.sq_pi = 1  # the doorbell: one WQE
    b.fetch.prefetch_sq(qp)
    b.engine.kick(qp)
    b.env.run(until=b.env.now + 20_000)
    pkts = [parse(f) for _t, f in b.sent]
    assert [p.opcode for p in pkts] == [Opcode.RC_RDMA_WRITE_FIRST, Opcode.RC_RDMA_WRITE_MIDDLE,
                                        Opcode.RC_RDMA_WRITE_LAST]
    assert [p.psn for p in pkts] == [0x100, 0x101, 0x102]
    assert all(p.dqpn == PEER_QPN for p in pkts) and pkts[-1].ackreq
    assert (pkts[0].reth_va, pkts[0].reth_rkey, pkts[0].reth_len) == (0xAB000, 0x4242, 3000)
    assert b"".join(bytes(p.payload) for p in pkts) == data
    assert len(qp.outstanding) == 1  # waits for its ACK

