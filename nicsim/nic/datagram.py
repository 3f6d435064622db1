"""Unreliable Datagram (IBA 9.8, RoCEv2 Annex A17): the send and receive sides of UD QPs.

Send: a UD send WQE is one SEND packet (BTH + DETH with the Q_Key and our QPN, + ImmDt) to
the address vector the WQE carries (hwif.UdAv), no larger than the port's MTU. Nothing
acknowledges it: it completes once its last bit has left the port.

Receive: a datagram for a UD QP in RTR or RTS whose DETH Q_Key matches the QP's fills the
next receive WQE: the 40-byte GRH first (RoCEv2 over IPv4: 20 reserved bytes, then the IPv4
header; over IPv6: the IPv6 header), then the payload. The completion names the sender's QPN
(DETH) and carries IBV_WC_GRH. A datagram with a wrong Q_Key, or with no receive WQE waiting,
is dropped silently (C10-15, o10-5.2.1; no RNR for UD); one that does not fit its receive
buffer completes the WQE with LOC_LEN_ERR and puts the QP in error, as rxe does.
"""

from __future__ import annotations

from collections.abc import Generator
from functools import partial

import simpy

from nicsim.host.pcie import Pcie
from nicsim.hwif import (
    WQE_INDEX_MASK,
    Access,
    CqeFlags,
    CqeOpcode,
    CqeStatus,
    QpState,
    UdAv,
    VendorErr,
    WqeFlags,
    WqeOpcode,
    XlateStatus,
)
from nicsim.nic.completer import Completer
from nicsim.nic.config import NicConfig
from nicsim.nic.counters import bump, new_counters
from nicsim.nic.cq import CqWriter
from nicsim.nic.dma import Dma
from nicsim.nic.framing import Framing
from nicsim.nic.interfaces import Stalls
from nicsim.nic.mmu import Mmu
from nicsim.nic.port import Port
from nicsim.nic.qp import PSN_MASK, QpCtx
from nicsim.nic.scheduler import SendEngine
from nicsim.nic.srq import SharedReceiveQueues
from nicsim.nic.translation import XLATE_VENDOR
from nicsim.nic.violations import Rule
from nicsim.nic.wqe_fetch import SendWqe, WqeFetch
from nicsim.sim import Sim
from nicsim.sim.tracer import Stage, Tracer
from nicsim.wire import Ecn, FrameBuilder, Packet, Path, deth, immdt, roce_udp_sport
from nicsim.wire.opcodes import Opcode

GRH_LEN = 40  # the GRH a UD receive buffer starts with (IBA 11.4.1.1)
QKEY_USE_QP = 0x80000000  # a WR Q_Key with this bit set means the QP's own (IBA 10.2.5)
_RECEIVING = (QpState.RTR, QpState.RTS, QpState.SQD)
_SEND_OPS = {int(WqeOpcode.SEND): Opcode.UD_SEND_ONLY,
             int(WqeOpcode.SEND_WITH_IMM): Opcode.UD_SEND_ONLY_WITH_IMMEDIATE}


class Datagram:
    """`requester`: where a send WQE whose page is not present goes back to wait (the NIC
    wires it in)."""

    requester: Stalls

    def __init__(self, env: Sim, cfg: NicConfig, mac: bytes, framing: Framing,
                 engine: SendEngine,
                 fetch: WqeFetch, mmu: Mmu, dma: Dma, pcie: Pcie, cq: CqWriter,
                 completer: Completer, srq: SharedReceiveQueues, port: Port) -> None:
        self.env = env
        self.mac = mac
        self.framing = framing  # the port's GID table: a datagram's source (UdAv.sgid_index)
        self.engine = engine
        self.fetch = fetch
        self.mmu = mmu
        self.dma = dma
        self.pcie = pcie
        self.cq = cq
        self.completer = completer
        self.srq = srq
        self.port = port
        self.tracer: Tracer | None = None  # (Nic.observe)
        self._tx_lag = cfg.tx_pipeline_ns
        self._rx_lag = cfg.rx_pipeline_ns
        self._ecn = Ecn.ECT0 if cfg.ecn_capable else Ecn.NOT_ECT
        # Counted when they happen (an RC-only world reports none of them).
        self.counters = new_counters()
        self._builders: dict[tuple[int, bytes], FrameBuilder] = {}

    # -- send -------------------------------------------------------------------------------

    def turn(self, qp: QpCtx) -> Generator[simpy.Event, None, bool]:
        """Send the UD QP's next WQE; returns whether it has more to send now."""
        if not qp.fetched:
            if not qp.sq_pending:
                return False
            self.fetch.prefetch_sq(qp)
        engine = self.engine
        due = engine.due(qp, qp.fetched[0])
        if due > self.env.now:  # (see Requester.turn)
            if engine.ready or engine.jobs:
                engine.wake_at(qp, due)
                return False
            yield self.env.timeout(due - self.env.now)
            if qp.state is not QpState.RTS or not qp.fetched:
                return True  # (a QP in error flushes in its next turn)
        engine.counters["schedules"] += 1
        wqe = qp.fetched.popleft()
        if qp.sq_pending:
            self.fetch.prefetch_sq(qp)
        yield from self._send(qp, wqe)
        return bool(qp.fetched or qp.sq_pending) and qp.state is QpState.RTS

    def _builder(self, qp: QpCtx, av: UdAv) -> FrameBuilder | None:
        """The frames of `av`'s path (None: its sgid_index is not in the GID table)."""
        key = (qp.qpn, av.pack())
        b = self._builders.get(key)
        if b is None:
            addrs = self.framing.addresses(av.sgid_index, av.dgid)
            if addrs is None:
                return None
            sip, dip, v1 = addrs
            if len(self._builders) > 4096:
                self._builders.clear()
            b = self._builders[key] = FrameBuilder(Path(
                self.mac, av.dmac, sip, dip, roce_udp_sport(qp.qpn, 0),
                av.traffic_class >> 2, self._ecn, av.hop_limit or 64, roce_v1=v1))
        return b

    def _send(self, qp: QpCtx, wqe: SendWqe) -> Generator[simpy.Event, None, None]:
        env = self.env
        c = self.counters
        ctrl = wqe.ctrl
        comp = self.completer
        opc = _SEND_OPS.get(ctrl.opcode)
        if opc is None or wqe.av is None:
            bump(c, "local_errors")
            op = WqeOpcode(ctrl.opcode) if ctrl.opcode in WqeOpcode._value2member_map_ \
                else WqeOpcode.SEND
            comp.local_error(qp, wqe.index, op, CqeStatus.LOC_QP_OP_ERR, VendorErr.BAD_OPCODE)
            return
        # Parse and header build on the QP's send engine, once the WQE is in the NIC.
        eng = self.engine
        t = env.now
        if wqe.ready > t:
            t = wqe.ready
        if qp.eng_free > t:
            t = qp.eng_free
        t = eng.units.take(t, eng.wqe_cost)
        qp.eng_free = t + eng.wqe_cost
        if qp.hdr_free > t:
            t = qp.hdr_free
        t = eng.hdr_units.take(t, eng.pkt_cost)
        qp.hdr_free = t + eng.pkt_cost
        if ctrl.flags & WqeFlags.INLINE:
            payload: bytes | memoryview = wqe.inline
        else:
            pieces = [(lkey, addr, length) for addr, length, lkey in wqe.sges if length]
            st, walk, t = self.mmu.check_walk(pieces, qp.pd, 0, t)
            if st is XlateStatus.PAGE_FAULT:
                self.requester.stall(qp, wqe)
                return
            if st is not XlateStatus.OK:
                bump(c, "local_errors")
                comp.local_error(qp, wqe.index, WqeOpcode(ctrl.opcode), CqeStatus.LOC_PROT_ERR,
                                 XLATE_VENDOR[st])
                return
            payload = b""
            if walk.total and walk.total <= qp.mtu:
                t = self.mmu.walk(walk, walk.total, t)
                payload, t, _ = self.dma.read_at(walk.segs, (0, 0), walk.total, t)
            elif walk.total:
                payload = bytes(walk.total)  # too long: only its length matters below
        if len(payload) > qp.mtu:
            # A datagram is one packet: a message longer than the MTU is a local length
            # error (IBA 9.8.3.2).
            bump(c, "local_errors")
            comp.local_error(qp, wqe.index, WqeOpcode(ctrl.opcode), CqeStatus.LOC_LEN_ERR,
                             VendorErr.NONE)
            return
        qkey = qp.qkey if ctrl.qkey & QKEY_USE_QP else ctrl.qkey
        ext = deth(qkey, qp.qpn)
        if opc is Opcode.UD_SEND_ONLY_WITH_IMMEDIATE:
            ext += immdt(ctrl.imm_inv)
        builder = self._builder(qp, wqe.av)
        if builder is None:  # a source GID the port does not have: nothing to send from
            bump(c, "local_errors")
            comp.local_error(qp, wqe.index, WqeOpcode(ctrl.opcode), CqeStatus.LOC_QP_OP_ERR,
                             VendorErr.NONE)
            return
        frame = builder.build(opc, ctrl.dest_qpn, qp.sq_psn, ext, payload,
                              solicited=bool(ctrl.flags & WqeFlags.SOLICITED))
        if self.tracer is not None:
            self.tracer.emit(Stage.WQE_FETCHED, qp.qpn, wqe.index, wqe.ready)
            self.tracer.emit(Stage.TRANSLATED, qp.qpn, wqe.index, t, qp.sq_psn, qp.sq_psn,
                             ctrl.dest_qpn)
        qp.sq_psn = (qp.sq_psn + 1) & PSN_MASK
        bump(c, "sent")
        bump(c, "sent_bytes", len(payload))
        # Nothing acknowledges a datagram: it is complete when its last bit has left the port,
        # not before (as UC, IBA 9.8.1).
        done = partial(self.cq.post, qp.send_cqn, qp.qpn, wqe.index, CqeOpcode.SEND,
                       CqeStatus.SUCCESS, len(payload)) \
            if ctrl.flags & WqeFlags.SIGNALED else None
        wait = self.engine.emit(frame, t + self._tx_lag,
                                None if done is None else lambda _left: done())
        if wait > env.now or self.port.queued:
            yield from self.engine.window(wait)

    # -- receive ----------------------------------------------------------------------------

    def receive(self, qp: QpCtx, p: Packet) -> None:
        c = self.counters
        if qp.state not in _RECEIVING:
            bump(c, "drop_qp_state")
            if self.tracer is not None and qp.state in (QpState.RESET, QpState.INIT):
                self.tracer.emit(Stage.RX_VIOLATION, Rule.QP_NOT_READY, qp.qpn,
                                 "RTR, RTS or SQD", qp.state.name)
            return
        if p.deth_qkey != qp.qkey:
            bump(c, "drop_qkey")  # a Q_Key violation: dropped silently (C10-15)
            if self.tracer is not None:
                self.tracer.emit(Stage.RX_VIOLATION, Rule.BAD_QKEY, qp.qpn,
                                 f"Q_Key {qp.qkey:#x}", f"Q_Key {p.deth_qkey:#x}")
            return
        rq = qp.srq or qp  # an SRQ has the fields of a receive queue
        if rq.rq_ci == rq.rq_pi:
            bump(c, "drop_no_recv_wqe")  # no receive WQE: dropped (UD has no RNR)
            return
        t = self.env.now + self._rx_lag
        sges, ready = self.fetch.fetch_rq(rq, t)
        index = rq.rq_ci
        pieces = [(lkey, addr, length) for addr, length, lkey in sges if length]
        st, walk, ready = self.mmu.check_walk(pieces, rq.pd, int(Access.LOCAL_WRITE), ready)
        if st is XlateStatus.PAGE_FAULT:
            # The receive buffer's page is not present: the datagram is dropped, its WQE
            # kept for the next one (no RNR for UD, o10-5.2.1); the fault is raised.
            self.mmu.faults.counters["ud_drops"] += 1
            bump(c, "drop_page_fault")
            return
        if qp.srq is not None:
            self.srq.took(qp.srq)
        else:
            qp.rq_ci = (qp.rq_ci + 1) & WQE_INDEX_MASK
            self.fetch.consumed_rq(qp)
        n = GRH_LEN + p.payload_len
        fail = None
        if st is not XlateStatus.OK:
            fail = CqeStatus.LOC_PROT_ERR, XLATE_VENDOR[st]
        elif n > walk.total:
            fail = CqeStatus.LOC_LEN_ERR, VendorErr.RECV_TOO_SMALL
        if fail is not None:
            status, vendor = fail
            bump(c, "recv_errors")
            self.cq.post(qp.recv_cqn, qp.qpn, index, CqeOpcode.RECV, status,
                        vendor_err=vendor, not_before=ready)
            self.completer.qp_error(qp)
            return
        frame = p.frame
        l3 = p.l3_off
        grh = frame[l3:l3 + 40] if p.ipv6 else bytes(20) + frame[l3:l3 + 20]
        ready = self.mmu.walk(walk, n, ready)
        self.dma.place(walk.segs, (0, 0), grh + bytes(p.payload), ready)
        qp.payload_in += p.payload_len
        # The CQE follows the data's write in PCIe's posted-write order (PCIe base spec
        # 2.4.1), so it is issued once that write is, as the RC responder does.
        posted = self.pcie.last_write_start
        flags = int(CqeFlags.GRH)
        if p.imm is not None:
            flags |= CqeFlags.WITH_IMM
        bump(c, "received")
        bump(c, "received_bytes", p.payload_len)
        self.cq.post(qp.recv_cqn, qp.qpn, index, CqeOpcode.RECV, CqeStatus.SUCCESS, n,
                    p.imm or 0, src_qp=p.deth_src_qp or 0, flags=flags, not_before=posted,
                    solicited=p.solicited)
