"""The requester: turns a send WQE into packets, and sends them again when needed
(IBA 9.7.1-9.7.2, 9.7.6).

It translates the WQE's local SGEs (lkey -> MPT -> MTT), segments the message by the path
MTU, assigns PSNs, builds each frame with the QP's header template and hands it to the send
engine. A READ is one request packet that reserves one PSN per expected response packet;
atomics are one packet each. Every sent WQE stays outstanding until the completer retires it;
go-back-N resends from any PSN by rebuilding packets from the WQE and re-reading the payload,
as hardware does. The transport timer (4.096 us x 2^timeout, IBA 9.7.6.1.1) fires a resend
from the oldest unacknowledged PSN, retry_cnt times.
"""

from __future__ import annotations

import struct
from collections.abc import Generator
from functools import partial

import simpy

from nicsim.hwif import (
    WQE_INDEX_MASK,
    Access,
    CqeStatus,
    QpState,
    QpType,
    VendorErr,
    WqeFlags,
    WqeOpcode,
    XlateStatus,
)
from nicsim.nic.cc.control import RateControl, Signal
from nicsim.nic.completer import CQE_OPCODE, Completer
from nicsim.nic.config import NicConfig
from nicsim.nic.counters import bump, new_counters
from nicsim.nic.cq import CqWriter
from nicsim.nic.datagram import Datagram
from nicsim.nic.dma import Dma, position
from nicsim.nic.mmu import Mmu
from nicsim.nic.port import Port
from nicsim.nic.qp import PLACEMENT_OPS, PSN_MASK, QpCtx, SendOp, psn_diff
from nicsim.nic.scheduler import SendEngine
from nicsim.nic.translation import XLATE_VENDOR, Walk
from nicsim.nic.windows import MemoryWindows
from nicsim.nic.wqe_fetch import SendWqe, WqeFetch
from nicsim.sim import Sim
from nicsim.sim.tracer import Stage, Tracer
from nicsim.wire import (
    Kind,
    Pos,
    Transport,
    atomic_eth,
    feth,
    ieth,
    immdt,
    message_opcodes,
    reth,
)
from nicsim.wire.opcodes import Opcode

# Enum members the per-WQE path compares with, bound once: see nicsim.nic.nic's _RC.
_OK, _PAGE_FAULT = XlateStatus.OK, XlateStatus.PAGE_FAULT
_SUCCESS, _NO_VERR = CqeStatus.SUCCESS, VendorErr.NONE
_ERR, _RTS, _UD = QpState.ERR, QpState.RTS, QpType.UD
_SEND, _RDMA_READ, _FLUSH = WqeOpcode.SEND, WqeOpcode.RDMA_READ, WqeOpcode.FLUSH
_ATOMIC_WRITE, _CMP_AND_SWP = WqeOpcode.ATOMIC_WRITE, WqeOpcode.ATOMIC_CMP_AND_SWP
_LOCAL_WRITE = Access.LOCAL_WRITE

def _ops(tr: Transport, kind: Kind, imm: bool = False, inv: bool = False
         ) -> tuple[int, int, int, int]:
    m = message_opcodes(tr, kind, imm, inv)
    return (m[Pos.FIRST].value, m[Pos.MIDDLE].value, m[Pos.LAST].value, m[Pos.ONLY].value)


def _messages(tr: Transport) -> dict[WqeOpcode, tuple[tuple[int, int, int, int], bool, bool,
                                                         bool]]:
    """(opcodes by position, is RDMA write, carries immediate, carries invalidate) of the
    SEND and WRITE work requests `tr` has: UC has no SEND with invalidate (IBA table 38)."""
    out = {
        WqeOpcode.RDMA_WRITE: (_ops(tr, Kind.WRITE), True, False, False),
        WqeOpcode.RDMA_WRITE_WITH_IMM: (_ops(tr, Kind.WRITE, imm=True), True, True, False),
        WqeOpcode.SEND: (_ops(tr, Kind.SEND), False, False, False),
        WqeOpcode.SEND_WITH_IMM: (_ops(tr, Kind.SEND, imm=True), False, True, False),
    }
    if tr is Transport.RC:
        out[WqeOpcode.SEND_WITH_INV] = (_ops(tr, Kind.SEND, inv=True), False, False, True)
    return out


_MSG = _messages(Transport.RC)
_MSG_BY_TRANSPORT = {Transport.RC: _MSG, Transport.UC: _messages(Transport.UC)}
# The work requests each connected transport carries on the wire. UC has SEND and RDMA WRITE
# only (IBA 9.8.1 and table 38): a READ, an atomic or a SEND with invalidate on a UC QP
# completes with LOC_QP_OP_ERR, as rxe's requester answers (next_opcode has none for UC).
_WIRE_OPS = {Transport.RC: set(_MSG) | {WqeOpcode.RDMA_READ, WqeOpcode.ATOMIC_CMP_AND_SWP,
                                        WqeOpcode.ATOMIC_FETCH_AND_ADD, *PLACEMENT_OPS},
             Transport.UC: set(_MSG_BY_TRANSPORT[Transport.UC])}
MAX_MSG = 1 << 31
# Plain ints: IntFlag arithmetic builds enum objects, too slow for the per-WQE path.
_SIGNALED, _INLINE, _SOLICITED, _FENCE = (int(WqeFlags.SIGNALED), int(WqeFlags.INLINE),
                                          int(WqeFlags.SOLICITED), int(WqeFlags.FENCE))
# Work requests the NIC executes without the wire (memory windows, IBA 10.6.7.2).
_LOCAL_OPS = (WqeOpcode.BIND_MW, WqeOpcode.LOCAL_INV)
_CONSUMES_RECV = (WqeOpcode.SEND, WqeOpcode.SEND_WITH_IMM, WqeOpcode.SEND_WITH_INV,
                  WqeOpcode.RDMA_WRITE_WITH_IMM)


def transport_timeout_ns(timeout: int) -> float | None:
    """The transport timer for the QP attribute `timeout` (IBA 9.7.6.1.1; 0 means none)."""
    return None if timeout == 0 else 4096.0 * (1 << timeout)


class Requester:
    def __init__(self, env: Sim, cfg: NicConfig, engine: SendEngine, fetch: WqeFetch,
                 mmu: Mmu, dma: Dma, cq: CqWriter, completer: Completer,
                 windows: MemoryWindows, datagram: Datagram, cc: RateControl | None,
                 port: Port) -> None:
        self.env = env
        self.engine = engine
        self.fetch = fetch
        self.mmu = mmu
        self.xlate = mmu.xlate
        self.dma = dma
        self.cq = cq
        self.completer = completer
        self.windows = windows
        self.tracer: Tracer | None = None  # (Nic.observe)
        self.datagram = datagram
        self.cc = cc
        # Send times for RTT samples, only for an algorithm that asks (nicsim.nic.cc.control).
        self._sent_psn = cc.sent_psn if cc is not None and cc.signals & Signal.RTT else None
        self.port = port
        self._lag = cfg.tx_pipeline_ns  # payload in the NIC to first bit on the wire
        # What an RC QP may send on this device (a device without atomics: DevCap.NO_ATOMICS)
        self._rc_ops = _WIRE_OPS[Transport.RC] if cfg.atomics else \
            _WIRE_OPS[Transport.RC] - {WqeOpcode.ATOMIC_CMP_AND_SWP,
                                       WqeOpcode.ATOMIC_FETCH_AND_ADD}
        self.counters = new_counters("wqes", "data_packets", "data_bytes", "read_requests",
                                     "atomic_requests", "local_errors", "flushed",
                                     "retransmitted_packets", "resends", "timeouts",
                                     "blocked_rd_atomic", "blocked_fence", "blocked_credits",
                                     "revoked", "blocked_local_op")

    # -- local translation ------------------------------------------------------------------

    def _local(self, qp: QpCtx, wqe: SendWqe, access: int, t: float
               ) -> tuple[CqeStatus | None, VendorErr, Walk | None, int, float,
                          tuple[int, ...]]:
        """Check every SGE's key (the buffer is walked through the MTT as it is sent);
        returns status, vendor error, the walk, length, ready time and the lkeys. Status
        None: a page of an on-demand paging region is not present, the fault is raised."""
        pieces = [(lkey, addr, length) for addr, length, lkey in wqe.sges if length]
        st, walk, t = self.mmu.check_walk(pieces, qp.pd, access, t)
        if st is _PAGE_FAULT:
            return None, _NO_VERR, None, 0, t, ()
        if st is not _OK:
            return CqeStatus.LOC_PROT_ERR, XLATE_VENDOR[st], None, 0, t, ()
        if walk.total > MAX_MSG:
            return CqeStatus.LOC_LEN_ERR, _NO_VERR, None, 0, t, ()
        return (_SUCCESS, _NO_VERR, walk, walk.total, t,
                tuple(lkey for lkey, _, _ in pieces))

    # -- admission --------------------------------------------------------------------------

    def blocked(self, qp: QpCtx, wqe: SendWqe) -> bool:
        """Whether the next WQE must wait: the READ/atomic limit (max_rd_atomic, IBA
        9.7.7.1), a fence, or no end-to-end credit for a receive-consuming message (9.7.7.2).
        The completer kicks the QP when what it waits for changes."""
        op = wqe.ctrl.opcode
        c = self.counters
        if op in _LOCAL_OPS and qp.outstanding:
            # Its completion must follow those of the WQEs before it (IBA 10.8.6), and a
            # bind must not change a window that messages before it still use.
            c["blocked_local_op"] += 1
            return True
        if op in _RD_ATOMIC or wqe.ctrl.flags & _FENCE:
            n = qp.rd_outstanding
            if op in _RD_ATOMIC and n >= max(1, qp.max_rd_atomic):
                c["blocked_rd_atomic"] += 1
                return True
            if wqe.ctrl.flags & _FENCE and n:
                c["blocked_fence"] += 1
                return True
        if op in _CONSUMES_RECV and qp.recv_limit is not None and \
                qp.recv_msgs_sent >= qp.recv_limit and qp.recv_outstanding:
            # Out of credits: wait for an ACK, unless nothing is outstanding, in which case
            # one message may go to probe (IBA 9.7.7.2.5).
            c["blocked_credits"] += 1
            return True
        return False

    # -- execution --------------------------------------------------------------------------
    #
    # The send engine gives QPs turns (nicsim.nic.scheduler). In its turn a QP sends packets
    # from its cursor: the message in progress (qp.cur, from packet qp.cur_k), else the next
    # outstanding op to resend (qp.redo), else its next WQE. A turn ends after `quantum`
    # packets when other QPs are waiting (packet-level round robin), at the end of a message
    # when one is alone, when the QP must wait (the read-ahead window, its rate, RNR, a
    # blocked WQE), or when something rewinds it. The cursor survives between turns.

    def turn(self, qp: QpCtx, quantum: int) -> Generator[simpy.Event, None, bool]:
        """One turn of `qp`; returns whether it has more to send now (the engine keeps it in
        line), False when it waits for something that kicks it again."""
        env = self.env
        if qp.state is _ERR:
            self.flush_sq(qp)
            return False
        if qp.state is not _RTS or qp.rnr_until > env.now or qp.odp_wait:
            # A doorbell is remembered; RTS, the end of an RNR wait and the resolution of a
            # page fault kick it.
            return False
        if qp.type is _UD:
            return (yield from self.datagram.turn(qp))
        if qp.resend_psn is not None:
            self._rewind(qp)
        if qp.cur is None:
            if qp.redo:
                sop = qp.redo.popleft()
                self._aim(qp, sop, 0, True)
            else:
                fetched = qp.fetched
                if not fetched:
                    if not qp.sq_pending:
                        return False
                    self.fetch.prefetch_sq(qp)
                wqe = fetched[0]
                if self.blocked(qp, wqe):
                    return False  # the completer kicks the QP when a response arrives
                engine = self.engine
                due = engine.due(qp, wqe)
                if due > env.now:
                    # Its WQE is still on its way, or no send engine can take it yet. The
                    # engine does not decide its packets ahead of that: they would hold up
                    # the packets of other QPs behind them in the port's queue, and reads
                    # issued meanwhile behind its payload reads. Other work waiting: serve
                    # that, and this QP then. Alone: wait (an event per WQE only when the
                    # NIC, not the host or the wire, is what limits the rate).
                    if engine.ready or engine.jobs:
                        engine.wake_at(qp, due)
                        return False
                    yield env.timeout(due - env.now)
                    if qp.state is not _RTS or qp.resend_psn is not None \
                            or not fetched or fetched[0] is not wqe:
                        return True
                engine.counters["schedules"] += 1
                self._start(qp, fetched.popleft())
                if qp.sq_pending:
                    self.fetch.prefetch_sq(qp)
                if qp.odp_wait:
                    return False  # its WQE waits for a page fault (nicsim.nic.odp)
                if qp.cur is None:
                    # A local error (flush what is left) or a local operation done (on to
                    # the next WQE).
                    return qp.state is _ERR or bool(qp.fetched or qp.sq_pending)
        yield from self._send(qp, quantum)
        return bool(qp.cur is not None or qp.redo or qp.resend_psn is not None or qp.fetched
                    or qp.sq_pending) and qp.state is _RTS and not qp.held

    def _aim(self, qp: QpCtx, sop: SendOp, k: int, again: bool) -> None:
        """Point the cursor at packet k of `sop`."""
        if sop.opcode is WqeOpcode.RDMA_READ:
            # Re-requests start at the first response not yet received (IBA 9.7.6.1.3).
            k = max(k, sop.read_done // qp.mtu)
        qp.cur, qp.cur_k, qp.cur_again = sop, k, again
        qp.cur_pos = position(sop.segs, k * qp.mtu) if sop.opcode in _MSG else (0, 0)
        qp.cur_t = self.env.now

    def _rewind(self, qp: QpCtx) -> None:
        """Go back N: from qp.resend_psn, every outstanding packet is sent again (its payload
        re-read from host memory, as hardware does)."""
        start = qp.resend_psn
        qp.resend_psn = None
        assert start is not None
        self.counters["resends"] += 1
        ops = [sop for sop in qp.outstanding if psn_diff(sop.last_psn, start) >= 0]
        qp.cur = None
        qp.redo.clear()
        if ops:
            self._aim(qp, ops[0], max(0, psn_diff(start, ops[0].first_psn)), True)
            qp.redo.extend(ops[1:])

    def _start(self, qp: QpCtx, wqe: SendWqe) -> None:
        """Begin a WQE: check it and its local buffers, give it its PSNs, make it outstanding
        and point the cursor at it (or complete it in error)."""
        c = self.counters
        c["wqes"] += 1
        ctrl = wqe.ctrl
        # The WQE is parsed once it is in the NIC, on the QP's send engine.
        t = self.env.now
        if wqe.ready > t:
            t = wqe.ready
        eng = self.engine
        if qp.eng_free > t:
            t = qp.eng_free
        t = eng.units.take(t, eng.wqe_cost)
        qp.eng_free = t + eng.wqe_cost
        op = _WQE_OPCODES.get(ctrl.opcode)  # (not WqeOpcode(...): an enum call per WQE)
        if op in _LOCAL_OPS:  # memory windows: RC and UC (UD is served elsewhere)
            self._local_op(qp, wqe, op)  # type: ignore[arg-type]
            return
        if op is None or op not in (self._rc_ops if qp.transport is Transport.RC
                                    else _WIRE_OPS[qp.transport]):
            c["local_errors"] += 1
            self.completer.local_error(qp, wqe.index, op or _SEND,
                                      CqeStatus.LOC_QP_OP_ERR, VendorErr.BAD_OPCODE)
            return
        keys: tuple[int, ...] = ()
        walk: Walk | None = None
        if op in PLACEMENT_OPS:
            # Nothing local to read or write: a FLUSH names a remote range, an ATOMIC WRITE
            # carries its 8 bytes in the WQE.
            status, verr = _SUCCESS, _NO_VERR
            total = ctrl.compare_add if op is _FLUSH else 8
        elif op in _MSG:
            if ctrl.flags & _INLINE:
                total, status, verr = len(wqe.inline), _SUCCESS, _NO_VERR
            else:
                status, verr, walk, total, t, keys = self._local(qp, wqe, 0, t)
        else:
            # READ and atomics write into local memory: LOCAL_WRITE is required on the MR.
            status, verr, walk, total, t, keys = self._local(qp, wqe, _LOCAL_WRITE, t)
            if status is _SUCCESS and op is not _RDMA_READ and total != 8:
                status, verr = CqeStatus.LOC_LEN_ERR, _NO_VERR
        if status is None:
            c["wqes"] -= 1  # not started: it is counted when it starts
            self.stall(qp, wqe)
            return
        if status is not _SUCCESS:
            c["local_errors"] += 1
            self.completer.local_error(qp, wqe.index, op, status, verr)
            return
        npkts = 1 if op in _SINGLE else max(1, -(-total // qp.mtu))
        psn = qp.sq_psn
        qp.sq_psn = (psn + npkts) & PSN_MASK
        # Receive credits (IBA 9.7.7.2) are RC's: a UC message is never held back for them.
        sop = SendOp(wqe, op, bool(ctrl.flags & _SIGNALED), psn, (psn + npkts - 1) & PSN_MASK,
                     total, npkts, walk, consumes_recv=qp.reliable and op in _CONSUMES_RECV,
                     keys=keys, epoch=self.xlate.epoch)
        if sop.consumes_recv:
            qp.recv_msgs_sent += 1
            qp.recv_outstanding += 1
        if sop.waits_for_data:
            qp.rd_outstanding += 1
        qp.outstanding.append(sop)
        qp.cur, qp.cur_k, qp.cur_again, qp.cur_pos, qp.cur_t = sop, 0, False, (0, 0), t
        if self.tracer is not None:
            self.tracer.emit(Stage.WQE_FETCHED, qp.qpn, wqe.index, wqe.ready)
            self.tracer.emit(Stage.TRANSLATED, qp.qpn, wqe.index, t, psn, sop.last_psn,
                             qp.dest_qpn)

    def stall(self, qp: QpCtx, wqe: SendWqe) -> None:
        """`wqe` met a page not present: it goes back to the head of the QP's fetched WQEs,
        and the QP waits for the fault's resolution (nicsim.nic.odp), as a NIC's requester
        holds a WQE whose local pages fault."""
        qp.fetched.appendleft(wqe)
        fault = self.xlate.fault
        assert fault is not None
        self.mmu.faults.wait(qp, fault[0])

    def _local_op(self, qp: QpCtx, wqe: SendWqe, op: WqeOpcode) -> None:
        """BIND_MW or LOCAL_INV: done in the NIC, completed now (when signaled); a failure
        completes with MW_BIND_ERR and the QP goes to ERR, as any local error."""
        ctrl = wqe.ctrl
        w = self.windows
        if op is WqeOpcode.BIND_MW:
            status = w.bind(qp.pd, qp.qpn, ctrl)
        else:
            status = CqeStatus.SUCCESS if w.invalidate(qp.pd, ctrl.imm_inv) \
                else CqeStatus.MW_BIND_ERR
        if status is not CqeStatus.SUCCESS:
            self.counters["local_errors"] += 1
            self.completer.local_error(qp, wqe.index, op, status, VendorErr.NONE)
            return
        if ctrl.flags & _SIGNALED:
            self.cq.post(qp.send_cqn, qp.qpn, wqe.index, CQE_OPCODE[op], status)

    def _send(self, qp: QpCtx, quantum: int) -> Generator[simpy.Event, None, None]:
        """Send packets from the cursor (see `turn`)."""
        sop = qp.cur
        assert sop is not None
        if sop.opcode in _MSG:
            yield from self._message(qp, sop, quantum)
            return
        env = self.env
        ctrl = sop.wqe.ctrl  # type: ignore[attr-defined]
        b = qp.builder
        assert b is not None
        if qp.rate is not None and qp.next_tx > env.now:
            self.engine.hold(qp)  # its rate (congestion control) says not yet
            return
        k = qp.cur_k
        if sop.opcode is _RDMA_READ:
            off = k * qp.mtu
            self.counters["read_requests"] += 1
            frame = b.make(Opcode.RC_RDMA_READ_REQUEST, qp.dest_qpn,
                           (sop.first_psn + k) & PSN_MASK,
                           reth(ctrl.remote_addr + off, ctrl.rkey, sop.length - off),
                           ackreq=True)
        elif sop.opcode is _FLUSH:
            bump(self.counters, "flush_requests")
            plt, sel = ctrl.swap & 0xF, (ctrl.swap >> 4) & 3
            frame = b.make(Opcode.RC_FLUSH, qp.dest_qpn, sop.first_psn,
                           feth(0, sel, plt) + reth(ctrl.remote_addr, ctrl.rkey, sop.length),
                           ackreq=True)
        elif sop.opcode is _ATOMIC_WRITE:
            bump(self.counters, "atomic_write_requests")
            frame = b.make(Opcode.RC_ATOMIC_WRITE, qp.dest_qpn, sop.first_psn,
                           reth(ctrl.remote_addr, ctrl.rkey, 8), _Q.pack(ctrl.swap),
                           ackreq=True)
        else:
            self.counters["atomic_requests"] += 1
            if sop.opcode is _CMP_AND_SWP:
                ext = atomic_eth(ctrl.remote_addr, ctrl.rkey, ctrl.swap, ctrl.compare_add)
                opc = Opcode.RC_COMPARE_SWAP
            else:
                ext = atomic_eth(ctrl.remote_addr, ctrl.rkey, ctrl.compare_add, 0)
                opc = Opcode.RC_FETCH_ADD
            frame = b.make(opc, qp.dest_qpn, sop.first_psn, ext, ackreq=True)
        if qp.cur_again:
            self.counters["retransmitted_packets"] += 1
        qp.cur = None
        self.arm_timer(qp)
        if qp.rate is not None:
            self.engine.paced(qp, len(frame))
            self.cc.on_sent(qp, len(frame))  # type: ignore[union-attr]
        eng = self.engine
        t = qp.cur_t if qp.cur_t > qp.hdr_free else qp.hdr_free
        t = eng.hdr_units.take(t, eng.pkt_cost)  # the header build
        qp.hdr_free = t + eng.pkt_cost
        wait = eng.emit(frame, t + self._lag)
        if self._sent_psn is not None:  # (sent: when its last bit is out, Port.free)
            self._sent_psn(qp, (sop.first_psn + k) & PSN_MASK, self.port.free)
        if wait > env.now or self.port.queued:
            yield from self.engine.window(wait)

    def _message(self, qp: QpCtx, sop: SendOp, quantum: int
                 ) -> Generator[simpy.Event, None, None]:
        """SEND or RDMA WRITE: one packet per MTU of payload, from the cursor on."""
        (first_op, mid_op, last_op, only_op), is_write, has_imm, has_inv = \
            _MSG_BY_TRANSPORT[qp.transport][sop.opcode]
        env = self.env
        engine = self.engine
        wqe = sop.wqe
        ctrl = wqe.ctrl  # type: ignore[attr-defined]
        mtu = qp.mtu
        total = sop.length
        npkts = sop.npkts
        psn = sop.first_psn
        walk = sop.walk
        segs = walk.segs if walk is not None else []
        b = qp.builder
        assert b is not None
        emit = engine.emit
        queued = self.port.queued
        read_at = self.dma.read_at
        take = engine.hdr_units.take
        pkt_cost = engine.pkt_cost
        ready_lag = self._lag
        dqpn = qp.dest_qpn
        solicited = bool(ctrl.flags & _SOLICITED)
        inline = wqe.inline  # type: ignore[attr-defined]
        xlate = self.xlate
        c = self.counters
        again = qp.cur_again
        t = qp.cur_t
        reliable = qp.reliable
        if reliable:
            self.arm_timer(qp)
        last_i = npkts - 1
        sent_psn = self._sent_psn if reliable else None
        first_ext = reth(ctrl.remote_addr, ctrl.rkey, total) if is_write else b""
        last_ext = immdt(ctrl.imm_inv) if has_imm else ieth(ctrl.imm_inv) if has_inv else b""
        # An RC QP's packets travel unbuilt where its path allows (wire.packet.Unbuilt).
        make = b.make if reliable else b.build
        pos = qp.cur_pos
        i = i0 = qp.cur_k  # packets i0..i-1 are sent and not counted yet (see _count)
        sent = 0
        while i < npkts:
            if sent >= quantum and (engine.ready or engine.jobs):
                break  # others are waiting: their turn
            if qp.rate is not None and qp.next_tx > env.now:
                engine.hold(qp)  # its rate (congestion control) says not yet
                break
            n = total - i * mtu
            if n > mtu:
                n = mtu
            if n and not inline:
                if sop.epoch != xlate.epoch and not self.still_valid(sop):
                    # The source buffer was deregistered under the message (go-back-N
                    # included): nothing more of it is read.
                    c["local_errors"] += 1
                    self._count(i0, i, total, mtu, again)
                    qp.cur = None
                    self.completer.fail_local(qp, sop, CqeStatus.LOC_PROT_ERR,
                                             VendorErr.BAD_LKEY)
                    return
                if walk.covered < i * mtu + n:  # type: ignore[union-attr]
                    t = self.mmu.walk(walk, i * mtu + n, t)  # type: ignore[arg-type]
            # The header build occupies a header unit (no sooner than the QP's previous
            # packet's); the payload read is issued when it starts.
            s = t if t > qp.hdr_free else qp.hdr_free
            s = take(s, pkt_cost)
            qp.hdr_free = s + pkt_cost
            if inline:
                payload, ready = inline[i * mtu:i * mtu + n], s
            elif n:
                payload, ready, pos = read_at(segs, pos, n, s)
            else:
                payload, ready = b"", s
            if i == last_i:
                ext = (first_ext + last_ext) if i == 0 else last_ext
                # AckReq asks an RC responder to acknowledge; UC has no acknowledgements.
                frame = make(only_op if i == 0 else last_op, dqpn, (psn + i) & PSN_MASK, ext,
                             payload, ackreq=reliable, solicited=solicited)
            elif i == 0:
                frame = make(first_op, dqpn, psn, first_ext, payload)
            else:
                frame = make(mid_op, dqpn, (psn + i) & PSN_MASK, b"", payload)
            i += 1
            sent += 1
            if qp.rate is not None:
                engine.paced(qp, len(frame))
                self.cc.on_sent(qp, len(frame))  # type: ignore[union-attr]
            # UC: nothing will acknowledge it; the WQE is done when its last packet has left
            # the port (IBA 9.8.1; rxe completes it when sent too).
            wait = emit(frame, ready + ready_lag, partial(self.completer.sent, qp, sop)
                        if i == npkts and not reliable else None)
            if sent_psn is not None:  # (sent: when its last bit is out, Port.free)
                sent_psn(qp, (psn + i - 1) & PSN_MASK, self.port.free)
            if wait and wait > env.now or queued:
                qp.cur_k, qp.cur_pos, qp.cur_t = i, pos, t
                self._count(i0, i, total, mtu, again)
                i0 = i
                yield from engine.window(wait)
                if qp.cur is not sop or qp.resend_psn is not None or qp.state is not _RTS:
                    return  # rewound or failed meanwhile: the cursor is someone else's now
        self._count(i0, i, total, mtu, again)
        if i >= npkts:
            qp.cur = None
        else:
            qp.cur_k, qp.cur_pos, qp.cur_t = i, pos, t

    def _count(self, i0: int, i: int, total: int, mtu: int, again: bool) -> None:
        """Count packets i0..i-1 of a message of `total` bytes as sent: once per run of
        packets, not in _message's per-packet loop."""
        c = self.counters
        c["data_packets"] += i - i0
        c["data_bytes"] += min(total, i * mtu) - min(total, i0 * mtu)
        if again:
            c["retransmitted_packets"] += i - i0

    def still_valid(self, sop: SendOp) -> bool:
        """Whether the lkeys a WQE's translation came from still stand (see
        nicsim.nic.translation)."""
        if sop.epoch == self.xlate.epoch or self.xlate.recheck(sop):
            return True
        self.counters["revoked"] += 1
        return False

    # -- transport timer --------------------------------------------------------------------

    def arm_timer(self, qp: QpCtx) -> None:
        """Start the transport timer if it is not running."""
        if qp.timer_deadline is None:
            self.restart_timer(qp)

    def restart_timer(self, qp: QpCtx) -> None:
        """(Re)start the timer after progress; stop it when the QP has no work left. It runs
        from the doorbell of work that has not left yet too (Nic._sq_doorbell): a QP whose
        frames cannot leave (a port held by PFC) is no different to its peer from one whose
        frames are lost, and ends the same way, in RETRY_EXC_ERR, rather than waiting for
        ever."""
        tmo = transport_timeout_ns(qp.timeout)
        if tmo is None or not (qp.outstanding or qp.fetched or qp.sq_pending):
            qp.timer_deadline = None
            return
        qp.timer_deadline = self.env.now + tmo
        if not qp.timer_pending:
            qp.timer_pending = True
            self.env.timeout(tmo).callbacks.append(lambda _e, q=qp: self._timer_event(q))

    def _timer_event(self, qp: QpCtx) -> None:
        qp.timer_pending = False
        d = qp.timer_deadline
        if d is None or qp.state is not QpState.RTS:
            return
        now = self.env.now
        if d > now:  # restarted since this event was scheduled: wait for the new deadline
            qp.timer_pending = True
            self.env.timeout(d - now).callbacks.append(lambda _e, q=qp: self._timer_event(q))
            return
        self.counters["timeouts"] += 1
        qp.timer_deadline = None
        if qp.outstanding:
            self.completer.retry(qp, self.first_unacked(qp), CqeStatus.RETRY_EXC_ERR,
                                     VendorErr.RETRY_EXCEEDED)
        elif qp.odp_wait:
            self.counters["timeouts"] -= 1  # waiting for a page fault, not for the wire
            self.restart_timer(qp)
        elif qp.fetched or qp.sq_pending:
            self._stalled(qp)

    def _stalled(self, qp: QpCtx) -> None:
        """The timer ran out and nothing of the QP's posted work has left the NIC: a try
        spent, as for a request lost (the send engine gets it going when the port lets it);
        out of tries, the first WQE completes with RETRY_EXC_ERR and the QP goes to ERR.
        The rest is flushed here: the send engine, held by the same port, may not come
        round to it."""
        bump(self.counters, "send_stalls")
        if qp.retry_left > 0:
            qp.retry_left -= 1
            self.restart_timer(qp)
            self.engine.kick(qp)
            return
        if qp.fetched:
            wqe = qp.fetched.popleft()
            index, op = wqe.index, _WQE_OPCODES.get(wqe.ctrl.opcode, _SEND)
        else:
            index, op = qp.sq_fetch, _SEND  # (an error completion's opcode is undefined)
            qp.sq_fetch = (qp.sq_fetch + 1) & WQE_INDEX_MASK
        self.completer.local_error(qp, index, op, CqeStatus.RETRY_EXC_ERR,
                                       VendorErr.RETRY_EXCEEDED)
        self.flush_sq(qp)

    @staticmethod
    def first_unacked(qp: QpCtx) -> int:
        """The oldest PSN nothing has acknowledged yet."""
        sop = qp.outstanding[0]
        # A READ or atomic is answered by its response, not by ACKs of later PSNs.
        if sop.opcode is WqeOpcode.RDMA_READ:
            return (sop.first_psn + sop.read_done // qp.mtu) & PSN_MASK
        if sop.opcode in _SINGLE:
            return sop.first_psn
        if qp.acked_psn >= 0 and psn_diff(qp.acked_psn, sop.first_psn) >= 0:
            return (qp.acked_psn + 1) & PSN_MASK
        return sop.first_psn

    def flush_sq(self, qp: QpCtx) -> None:
        """QP in ERR: every WQE posted and not completed completes with WR_FLUSH_ERR."""
        comp = self.completer
        while qp.fetched:
            w = qp.fetched.popleft()
            comp.flush_send(qp, w.index)
            self.counters["flushed"] += 1
        while qp.sq_pending:
            comp.flush_send(qp, qp.sq_fetch)
            qp.sq_fetch = (qp.sq_fetch + 1) & WQE_INDEX_MASK
            self.counters["flushed"] += 1


_WQE_OPCODES = {int(o): o for o in WqeOpcode}
_ATOMICS = (WqeOpcode.ATOMIC_CMP_AND_SWP, WqeOpcode.ATOMIC_FETCH_AND_ADD)
# One request packet, answered by one response; FLUSH and ATOMIC WRITE also count against
# max_rd_atomic and wait for fences like a READ.
_SINGLE = (*_ATOMICS, *PLACEMENT_OPS)
_RD_ATOMIC = tuple(int(o) for o in (WqeOpcode.RDMA_READ, *_SINGLE))
_Q = struct.Struct("<Q")  # ATOMIC WRITE data: the WQE's swap field holds it in memory order
