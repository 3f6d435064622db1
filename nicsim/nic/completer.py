"""The completer: matches responses to outstanding WQEs and completes them (IBA 9.7.6).

ACKs complete every outstanding SEND/WRITE up to their PSN, in order; READ responses are
placed into the WQE's local buffers and complete the READ on its last packet (and, implicitly,
everything before it); ATOMIC ACKNOWLEDGE writes the original value to the local buffer.
A PSN sequence error NAK, a missing READ response or an ACK past an unanswered READ sends the
requester back to the missing PSN (go-back-N) within the retry budget; an RNR NAK waits the
RNR timer first. Other NAKs end the WQE with the status hardware reports and move the QP to
ERR, after which every WQE still on the SQ or RQ completes with WR_FLUSH_ERR (IBA 10.3.1).
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from nicsim.hwif import WQE_INDEX_MASK, CqeOpcode, CqeStatus, QpState, VendorErr, WqeOpcode
from nicsim.nic.aeth import CREDITS, rnr_timer_ns
from nicsim.nic.config import NicConfig
from nicsim.nic.counters import bump, new_counters
from nicsim.nic.cq import CqWriter
from nicsim.nic.dma import Dma, position
from nicsim.nic.engines import Units, cycles_ns
from nicsim.nic.interfaces import Requests
from nicsim.nic.mmu import Mmu
from nicsim.nic.qp import PLACEMENT_OPS, PSN_MASK, QpCtx, RespState, SendOp, psn_diff
from nicsim.nic.scheduler import SendEngine
from nicsim.nic.violations import Rule
from nicsim.sim import Sim
from nicsim.sim.tracer import Stage, Tracer
from nicsim.wire import Kind, Packet
from nicsim.wire.opcodes import Opcode

CQE_OPCODE = {
    WqeOpcode.RDMA_WRITE: CqeOpcode.RDMA_WRITE,
    WqeOpcode.RDMA_WRITE_WITH_IMM: CqeOpcode.RDMA_WRITE,
    WqeOpcode.SEND: CqeOpcode.SEND,
    WqeOpcode.SEND_WITH_IMM: CqeOpcode.SEND,
    WqeOpcode.SEND_WITH_INV: CqeOpcode.SEND,
    WqeOpcode.RDMA_READ: CqeOpcode.RDMA_READ,
    WqeOpcode.ATOMIC_CMP_AND_SWP: CqeOpcode.COMP_SWAP,
    WqeOpcode.ATOMIC_FETCH_AND_ADD: CqeOpcode.FETCH_ADD,
    WqeOpcode.BIND_MW: CqeOpcode.BIND_MW,
    WqeOpcode.LOCAL_INV: CqeOpcode.LOCAL_INV,
    WqeOpcode.FLUSH: CqeOpcode.FLUSH,
    WqeOpcode.ATOMIC_WRITE: CqeOpcode.ATOMIC_WRITE,
}
# NAK codes (low 5 bits of a NAK syndrome, IBA table 43) -> completion status.
_NAK_STATUS = {
    1: CqeStatus.REM_INV_REQ_ERR,
    2: CqeStatus.REM_ACCESS_ERR,
    3: CqeStatus.REM_OP_ERR,
    4: CqeStatus.REM_INV_RD_REQ_ERR,
}
_Q = struct.Struct("<Q")
# Enum members the per-packet and per-WQE paths compare with, bound once: see nicsim.nic.nic's
# _RC.
_RTS, _SQD, _SUCCESS = QpState.RTS, QpState.SQD, CqeStatus.SUCCESS
_K_ACK, _K_READ_RESP, _K_ATOMIC_ACK = Kind.ACK, Kind.READ_RESP, Kind.ATOMIC_ACK


class Completer:
    """`requests`: the requester, told of progress (the NIC wires it in after building it).
    `on_acked` and `on_nak`: the congestion control's hooks (nicsim.nic.cc.RateControl's
    `acked` and `on_nak`), None unless its algorithm asks for ACKs or NAKs."""

    requests: Requests
    on_acked: Callable[[QpCtx, int], None] | None = None
    on_nak: Callable[[QpCtx, int, int], None] | None = None

    def __init__(self, env: Sim, cfg: NicConfig, cq: CqWriter, engine: SendEngine, dma: Dma,
                 mmu: Mmu) -> None:
        self.env = env
        self.cq = cq
        self.engine = engine
        self.dma = dma
        self.mmu = mmu
        self.tracer: Tracer | None = None
        # Response packets that carry data (READ responses, atomic ACKs) occupy the
        # requester's receive parser (one unit, nicsim.nic.engines) for rx_parse_cycles.
        self.parser = Units(1)
        self._parse = cycles_ns(cfg.rx_parse_cycles, cfg.clock_mhz)
        self._rx_lag = cfg.rx_pipeline_ns  # (per response packet: hoisted)
        self.counters = new_counters("acks", "naks", "rnr_naks", "read_response_packets",
                                     "atomic_acks", "send_completions", "error_completions",
                                     "flush_completions", "unexpected_responses",
                                     "duplicate_responses", "out_of_sequence_responses",
                                     "implicit_naks", "qp_errors", "nak_seq_redundant")

    @staticmethod
    def _pop(qp: QpCtx) -> SendOp:
        """Retire the oldest outstanding WQE, keeping the QP's running counts right."""
        op = qp.outstanding.popleft()
        if op.consumes_recv:
            qp.recv_outstanding -= 1
        if op.waits_for_data:
            qp.rd_outstanding -= 1
        return op

    # -- CQEs -------------------------------------------------------------------------------

    def _post_send(self, qp: QpCtx, op: SendOp, status: CqeStatus,
                   vendor: VendorErr = VendorErr.NONE, t: float = 0.0) -> None:
        self.cq.post(qp.send_cqn, qp.qpn, op.wqe_index, CQE_OPCODE[op.opcode], status,
                         op.length, vendor_err=vendor, not_before=t)
        if status is CqeStatus.SUCCESS:
            self.counters["send_completions"] += 1
        else:
            self.counters["error_completions"] += 1

    def post_recv(self, qp: QpCtx, index: int, opcode: CqeOpcode, status: CqeStatus,
                  byte_len: int, flags: int, imm: int, t: float,
                  solicited: bool = False, inline: bytes = b"") -> float:
        """A receive completion; `inline`: a scattered SEND's data (CqeFlags.SCATTERED).
        Returns when the CQE lands."""
        return self.cq.post(qp.recv_cqn, qp.qpn, index, opcode, status, byte_len, imm,
                            flags=flags, not_before=t, solicited=solicited, inline=inline)

    def local_error(self, qp: QpCtx, index: int, op: WqeOpcode, status: CqeStatus,
                    vendor: VendorErr) -> None:
        """A WQE failed before anything was sent: complete it (signaled or not) and fail the
        QP, like a real NIC (IBA 10.8.3.2: errors always generate a completion). WQEs sent
        before it and not yet acknowledged are flushed first: completions of a send queue
        come in the order it was posted (IBA 10.8.6)."""
        while qp.outstanding:
            self.flush_send(qp, self._pop(qp).wqe_index)
        self.cq.post(qp.send_cqn, qp.qpn, index, CQE_OPCODE[op], status,
                         vendor_err=vendor)
        self.counters["error_completions"] += 1
        self.qp_error(qp)

    def fail_local(self, qp: QpCtx, sop: SendOp, status: CqeStatus,
                   vendor: VendorErr) -> None:
        """An outstanding WQE hit a local error (its memory was deregistered under it): the
        WQEs before it are flushed, it completes with `status`, the QP goes to ERR."""
        out = qp.outstanding
        while out and out[0] is not sop:
            self.flush_send(qp, self._pop(qp).wqe_index)
        if out:
            self._post_send(qp, self._pop(qp), status, vendor)
        self.qp_error(qp)

    def sent(self, qp: QpCtx, sop: SendOp, t: float) -> None:
        """An unacknowledged (UC) WQE's last packet left the port at `t`: it is complete then,
        not before (IBA 9.8.1). (Flushed meanwhile, as a QP in error flushes: nothing.)"""
        if not qp.outstanding or qp.outstanding[0] is not sop:
            return
        self._pop(qp)
        if sop.signaled:
            self._post_send(qp, sop, CqeStatus.SUCCESS, t=t)

    def flush_send(self, qp: QpCtx, index: int) -> None:
        self.cq.post(qp.send_cqn, qp.qpn, index, CqeOpcode.SEND, CqeStatus.WR_FLUSH_ERR,
                         vendor_err=VendorErr.FLUSHED)
        self.counters["flush_completions"] += 1

    def flush_recv(self, qp: QpCtx) -> None:
        """Flush the QP's receive WQEs. An SRQ's are not the QP's: they stay for the other
        QPs (IBA 10.2.9.5); a WQE the QP had taken completed when its message failed."""
        if qp.srq is not None:
            held, qp.resp.held_wqe = qp.resp.held_wqe, None
            if held is not None:  # (UC) taken by a message that was dropped: the QP's
                self.cq.post(qp.recv_cqn, qp.qpn, held[0], CqeOpcode.RECV,
                                 CqeStatus.WR_FLUSH_ERR, vendor_err=VendorErr.FLUSHED)
                self.counters["flush_completions"] += 1
            return
        while qp.rq_ci != qp.rq_pi:
            self.cq.post(qp.recv_cqn, qp.qpn, qp.rq_ci, CqeOpcode.RECV,
                             CqeStatus.WR_FLUSH_ERR, vendor_err=VendorErr.FLUSHED)
            self.counters["flush_completions"] += 1
            qp.rq_ci = (qp.rq_ci + 1) & WQE_INDEX_MASK

    def qp_error(self, qp: QpCtx) -> None:
        """Move the QP to ERR and flush everything outstanding on it."""
        if qp.state is not QpState.ERR:
            self.counters["qp_errors"] += 1
            if self.tracer is not None:
                self.tracer.emit(Stage.QP_STATE, qp.qpn, qp.state.name, "ERR")
        qp.state = QpState.ERR
        qp.resp.state = RespState.IDLE
        qp.timer_deadline = None
        qp.resend_psn = None
        qp.cur = None
        qp.redo.clear()
        while qp.outstanding:
            op = self._pop(qp)
            self.flush_send(qp, op.wqe_index)
        self.flush_recv(qp)
        self.engine.kick(qp)  # the send engine flushes fetched and posted WQEs

    # -- responses --------------------------------------------------------------------------

    def _broke(self, qp: QpCtx, rule: Rule, expected: str, actual: str) -> None:
        """The response broke `rule` (nicsim.nic.violations): tell the observers."""
        if self.tracer is not None:
            self.tracer.emit(Stage.RX_VIOLATION, rule, qp.qpn, expected, actual)

    def _ghost(self, qp: QpCtx, psn: int, what: str) -> None:
        """A response must answer a PSN this requester has sent (IBA 9.7.6): one at or past
        the next PSN it would assign answers nothing, a 'ghost'. Only observed: what the
        completer does with it is unchanged (an ACK completes what it covers)."""
        if psn_diff(psn, qp.sq_psn) >= 0:
            out = qp.outstanding
            self._broke(qp, Rule.GHOST_RESPONSE,
                        f"a PSN up to {(qp.sq_psn - 1) & PSN_MASK:#08x} (the last sent"
                        + (f"; outstanding {out[0].first_psn:#08x}-{out[-1].last_psn:#08x})"
                           if out else "; nothing outstanding)"),
                        f"{what} for PSN {psn:#08x}")

    def response(self, qp: QpCtx, p: Packet) -> None:
        kind = p.info.kind
        if kind is _K_ACK:
            self.ack(qp, p.psn, p.aeth_syndrome)
            return
        if self.tracer is not None:
            self._ghost(qp, p.psn, p.name)
        if qp.state is not _RTS and qp.state is not _SQD:
            self.counters["unexpected_responses"] += 1
        elif kind is _K_READ_RESP:
            self._read_response(qp, p)
        elif kind is _K_ATOMIC_ACK:
            self._atomic_ack(qp, p)

    def ack(self, qp: QpCtx, psn: int, syn: int) -> None:
        """An ACKNOWLEDGE packet for PSN `psn` with AETH syndrome `syn` (IBA 9.7.5.1): an ACK,
        RNR NAK or NAK. (Nic.receive calls this directly for the ACKs of an RC QP's peer.)"""
        if self.tracer is not None:
            self._ghost(qp, psn, f"AETH syndrome {syn:#04x}")
        if qp.state is not _RTS and qp.state is not _SQD:
            self.counters["unexpected_responses"] += 1
            return
        cls = syn >> 5
        if cls == 0:
            self.counters["acks"] += 1
            self._complete_through(qp, psn)
            self._credits(qp, syn & 0x1F)
        elif cls == 1:
            self.counters["rnr_naks"] += 1
            if self.on_nak is not None:
                self.on_nak(qp, psn, syn)
            self._rnr(qp, psn, syn & 0x1F)
        elif cls == 3:
            self.counters["naks"] += 1
            if self.on_nak is not None:
                self.on_nak(qp, psn, syn)
            code = syn & 0x1F
            bump(self.counters, f"nak_{syn:#04x}")  # by AETH syndrome, as Wireshark shows it
            if code == 0:
                # PSN sequence error: everything before the PSN arrived; go back to it.
                self._complete_through(qp, (psn - 1) & PSN_MASK, progress_only=True)
                if qp.resend_psn is not None and psn_diff(psn, qp.resend_psn) >= 0:
                    # Already going back to that PSN or before it (an RNR wait, another
                    # NAK): nothing was lost that the resend does not cover, and the
                    # transport retry budget is not spent again (as rxe's started_retry).
                    self.counters["nak_seq_redundant"] += 1
                elif qp.state is _RTS:
                    self.retry(qp, psn, CqeStatus.RETRY_EXC_ERR, VendorErr.RETRY_EXCEEDED)
            else:
                self._fail_at(qp, psn, _NAK_STATUS.get(code, CqeStatus.REM_OP_ERR),
                              VendorErr.REMOTE_NAK)
        else:
            self.counters["unexpected_responses"] += 1
            self._broke(qp, Rule.BAD_AETH, "syndrome class ACK 0, RNR NAK 1 or NAK 3",
                        f"syndrome {syn:#04x} (class {cls})")

    @staticmethod
    def _credits(qp: QpCtx, code: int) -> None:
        """End-to-end credits (IBA 9.7.7.2): the AETH of an ACK says how many more receive
        WQEs the responder has beyond the messages it acknowledges; messages past that wait.
        (Called after the ACK has retired what it covers.)"""
        if code == 0x1F:
            qp.recv_limit = None
            return
        qp.recv_limit = qp.recv_msgs_sent - qp.recv_outstanding + CREDITS[code]

    def _progress(self, qp: QpCtx) -> None:
        """Something was acknowledged: fresh retry budgets, timer restarted, QP kicked (it
        may have been waiting for a READ slot, a fence or credits)."""
        qp.retry_left = qp.retry_cnt
        qp.rnr_left = qp.rnr_retry
        if self.on_acked is not None:
            self.on_acked(qp, qp.acked_psn)
        self.requests.restart_timer(qp)
        if qp.fetched or qp.sq_pending:
            self.engine.kick(qp)

    def _complete_through(self, qp: QpCtx, psn: int, progress_only: bool = False) -> None:
        """Complete, in order, every WQE whose last PSN is at or before `psn`. A READ or
        atomic still waiting for its response stops the walk; if the ACK is for a later PSN,
        its response was lost: ask again from the missing PSN (implicit NAK, 9.7.6.1.3)."""
        out = qp.outstanding
        moved = False
        if (qp.acked_psn < 0 or psn_diff(psn, qp.acked_psn) > 0) and out and \
                psn_diff(psn, out[0].first_psn) >= 0:
            qp.acked_psn = psn
            moved = True
        while out:
            op = out[0]
            if psn_diff(op.last_psn, psn) > 0:
                break
            if op.waits_for_data:
                if not progress_only and qp.resend_psn is None and not op.gap:
                    op.gap = True
                    self.counters["implicit_naks"] += 1
                    self.retry(qp, self.requests.first_unacked(qp),
                               CqeStatus.RETRY_EXC_ERR, VendorErr.RETRY_EXCEEDED)
                break
            self._pop(qp)
            moved = True
            if op.signaled:
                self._post_send(qp, op, _SUCCESS)
        if moved:
            self._progress(qp)

    def retry(self, qp: QpCtx, psn: int, status: CqeStatus, vendor: VendorErr) -> None:
        """Go back to `psn` if the retry budget allows, else fail the oldest WQE."""
        if not qp.outstanding:
            return
        if qp.retry_left <= 0:
            self._fail_at(qp, self.requests.first_unacked(qp), status, vendor)
            return
        qp.retry_left -= 1
        self._rewind(qp, psn)

    def _rewind(self, qp: QpCtx, psn: int) -> None:
        if qp.resend_psn is None or psn_diff(psn, qp.resend_psn) < 0:
            qp.resend_psn = psn
        self.requests.restart_timer(qp)
        self.engine.kick(qp)

    def _rnr(self, qp: QpCtx, psn: int, timer: int) -> None:
        """RNR NAK: the responder had no receive WQE. Wait the RNR timer, then send again
        from that PSN; rnr_retry 7 means forever (IBA 9.7.5.2.8, table 45)."""
        self._complete_through(qp, (psn - 1) & PSN_MASK, progress_only=True)
        if qp.state is not QpState.RTS:
            return
        if qp.rnr_retry != 7:
            if qp.rnr_left <= 0:
                self._fail_at(qp, psn, CqeStatus.RNR_RETRY_EXC_ERR, VendorErr.RNR_EXCEEDED)
                return
            qp.rnr_left -= 1
        env = self.env
        wait = rnr_timer_ns(timer)
        qp.rnr_until = env.now + wait
        if qp.resend_psn is None or psn_diff(psn, qp.resend_psn) < 0:
            qp.resend_psn = psn
        qp.timer_deadline = None  # the RNR wait replaces the transport timer
        env.timeout(wait).callbacks.append(lambda _e, q=qp: self.engine.kick(q))

    def _complete_before(self, qp: QpCtx, psn: int) -> None:
        """A NAK or a response for `psn` acknowledges the SENDs and WRITEs before it (IBA
        9.7.6.1.2); a READ or atomic waits for its own response."""
        out = qp.outstanding
        while out and not out[0].waits_for_data and psn_diff(out[0].last_psn, psn) < 0:
            op = self._pop(qp)
            if op.signaled:
                self._post_send(qp, op, CqeStatus.SUCCESS)

    def _fail_at(self, qp: QpCtx, psn: int, status: CqeStatus, vendor: VendorErr) -> None:
        out = qp.outstanding
        # Everything before the NAKed PSN was received (a NAK acknowledges its predecessors).
        self._complete_before(qp, psn)
        if out:
            # An error completes the WQE whether or not it asked for a completion.
            self._post_send(qp, self._pop(qp), status, vendor)
        self.qp_error(qp)

    def _read_response(self, qp: QpCtx, p: Packet) -> None:
        c = self.counters
        c["read_response_packets"] += 1
        out = qp.outstanding
        self._complete_before(qp, p.psn)
        if out and out[0].opcode in PLACEMENT_OPS:
            self._placement_response(qp, p)
            return
        if not out or out[0].opcode is not WqeOpcode.RDMA_READ:
            c["duplicate_responses"] += 1  # a READ answered twice, already completed
            return
        op = out[0]
        idx = psn_diff(p.psn, op.first_psn)
        expect = op.read_done // qp.mtu
        if idx < expect or psn_diff(op.last_psn, p.psn) < 0:
            c["duplicate_responses"] += 1
            return
        if idx > expect:
            # A response packet went missing: re-request from it, once per gap.
            c["out_of_sequence_responses"] += 1
            if self.tracer is not None:
                self._broke(qp, Rule.RESPONSE_SEQUENCE,
                            f"PSN {(op.first_psn + expect) & PSN_MASK:#08x}",
                            f"PSN {p.psn:#08x} ({p.name})")
            if not op.gap and qp.resend_psn is None:
                op.gap = True
                self.retry(qp, (op.first_psn + expect) & PSN_MASK, CqeStatus.RETRY_EXC_ERR,
                           VendorErr.RETRY_EXCEEDED)
            return
        op.gap = False
        n = p.payload_len
        last = idx == op.npkts - 1
        # Every packet but the last carries exactly one MTU (C9-x); anything else is a bad
        # response, which ends the READ (IBA 9.9.3.2: BAD_RESP_ERR). (A FIRST may appear at
        # any PSN: a READ re-requested from the middle is answered as a new READ.)
        want = op.length - op.read_done if last else qp.mtu
        if n != want or p.info.is_last != last or p.pad != -n & 3:
            if self.tracer is not None:
                self._broke(qp, Rule.BAD_RESPONSE,
                            f"{'a LAST or ONLY' if last else 'a FIRST or MIDDLE'} response, "
                            f"{want} bytes, pad {-want & 3}",
                            f"{p.name}, {n} bytes, pad {p.pad}")
            self._fail_at(qp, p.psn, CqeStatus.BAD_RESP_ERR, VendorErr.REMOTE_NAK)
            return
        t = self.parser.take(self.env.now + self._rx_lag, self._parse)
        if n:
            if not self._dest_valid(qp, op):
                return
            w = op.walk
            assert w is not None
            if w.covered < op.read_done + n:
                t = self.mmu.walk(w, op.read_done + n, t)
            t, _ = self.dma.place(w.segs, position(w.segs, op.read_done), p.payload, t)
            op.read_done += n
            qp.payload_in += n
        qp.acked_psn = p.psn
        if last:
            self._pop(qp)
            if op.signaled:
                self._post_send(qp, op, CqeStatus.SUCCESS, t=t)
        self._progress(qp)

    def _placement_response(self, qp: QpCtx, p: Packet) -> None:
        """A FLUSH or ATOMIC WRITE is answered by an RDMA READ RESPONSE ONLY without payload
        (as rxe answers them): for a FLUSH, the responder has made the range visible."""
        op = qp.outstanding[0]
        if p.psn != op.first_psn:
            self.counters["duplicate_responses"] += 1
            return
        if p.payload_len or p.opcode != Opcode.RC_RDMA_READ_RESPONSE_ONLY:
            self._broke(qp, Rule.BAD_RESPONSE, "RDMA_READ_RESPONSE_ONLY without payload",
                        f"{p.name}, {p.payload_len} bytes")
            self._fail_at(qp, p.psn, CqeStatus.BAD_RESP_ERR, VendorErr.REMOTE_NAK)
            return
        self._pop(qp)
        qp.acked_psn = p.psn
        if op.signaled:
            t = self.parser.take(self.env.now + self._rx_lag, self._parse)
            self._post_send(qp, op, CqeStatus.SUCCESS, t=t)
        self._progress(qp)

    def _dest_valid(self, qp: QpCtx, op: SendOp) -> bool:
        """Before response data is placed: the READ's or atomic's local buffer is still
        registered (else LOC_PROT_ERR, as rxe's do_read reports a failed copy)."""
        if self.requests.still_valid(op):
            return True
        self.fail_local(qp, op, CqeStatus.LOC_PROT_ERR, VendorErr.BAD_LKEY)
        return False

    def _atomic_ack(self, qp: QpCtx, p: Packet) -> None:
        self.counters["atomic_acks"] += 1
        out = qp.outstanding
        self._complete_before(qp, p.psn)
        if not out or out[0].opcode not in _ATOMICS or out[0].first_psn != p.psn:
            self.counters["duplicate_responses"] += 1
            return
        op = out[0]
        if not self._dest_valid(qp, op):
            return
        self._pop(qp)
        t = self.parser.take(self.env.now + self._rx_lag, self._parse)
        w = op.walk
        assert w is not None
        t = self.mmu.walk(w, 8, t)
        t, _ = self.dma.place(w.segs, (0, 0), _Q.pack(p.atomic_orig), t)
        qp.acked_psn = p.psn
        if op.signaled:
            self._post_send(qp, op, CqeStatus.SUCCESS, t=t)
        self._progress(qp)


_ATOMICS = (WqeOpcode.ATOMIC_CMP_AND_SWP, WqeOpcode.ATOMIC_FETCH_AND_ADD)
