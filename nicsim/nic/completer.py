"""The completer: matches responses to outstanding WQEs and completes them (IBA 9.7.6).

ACKs complete every outstanding SEND/WRITE up to their PSN, in order; READ responses are
placed into the WQE's local buffers and complete the READ on its last packet (and, implicitly,
everything before it); ATOMIC ACKNOWLEDGE writes the original value to the local buffer. NAKs
end the WQE with the status hardware reports and move the QP to ERR, after which every WQE
still on the SQ or RQ completes with WR_FLUSH_ERR (IBA 10.3.1, C10-?; "flush").
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from nicsim.hwif import CqeOpcode, CqeStatus, QpState, VendorErr, WqeOpcode
from nicsim.nic.counters import Counters
from nicsim.nic.dma import take
from nicsim.nic.qp import QpCtx, RespState, SendOp, psn_diff
from nicsim.wire import Kind, Packet

if TYPE_CHECKING:
    from nicsim.nic.nic import Nic

_CQE_OPCODE = {
    WqeOpcode.RDMA_WRITE: CqeOpcode.RDMA_WRITE,
    WqeOpcode.RDMA_WRITE_WITH_IMM: CqeOpcode.RDMA_WRITE,
    WqeOpcode.SEND: CqeOpcode.SEND,
    WqeOpcode.SEND_WITH_IMM: CqeOpcode.SEND,
    WqeOpcode.SEND_WITH_INV: CqeOpcode.SEND,
    WqeOpcode.RDMA_READ: CqeOpcode.RDMA_READ,
    WqeOpcode.ATOMIC_CMP_AND_SWP: CqeOpcode.COMP_SWAP,
    WqeOpcode.ATOMIC_FETCH_AND_ADD: CqeOpcode.FETCH_ADD,
}
_WAITS_FOR_DATA = (WqeOpcode.RDMA_READ, WqeOpcode.ATOMIC_CMP_AND_SWP,
                   WqeOpcode.ATOMIC_FETCH_AND_ADD)
# NAK codes (low 5 bits of a NAK syndrome, IBA table 43) -> completion status.
_NAK_STATUS = {
    1: CqeStatus.REM_INV_REQ_ERR,
    2: CqeStatus.REM_ACCESS_ERR,
    3: CqeStatus.REM_OP_ERR,
    4: CqeStatus.REM_INV_RD_REQ_ERR,
}
_Q = struct.Struct("<Q")


class Completer:
    def __init__(self, nic: Nic) -> None:
        self.nic = nic
        self.counters = Counters("acks", "naks", "rnr_naks", "read_response_packets",
                                 "atomic_acks", "send_completions", "error_completions",
                                 "flush_completions", "unexpected_responses", "qp_errors")

    # -- CQEs -------------------------------------------------------------------------------

    def _post_send(self, qp: QpCtx, op: SendOp, status: CqeStatus,
                   vendor: VendorErr = VendorErr.NONE, t: float = 0.0) -> None:
        self.nic.cq.post(qp.send_cqn, qp.qpn, op.wqe_index, _CQE_OPCODE[op.opcode], status,
                         op.length, vendor_err=vendor, not_before=t)
        if status is CqeStatus.SUCCESS:
            self.counters["send_completions"] += 1
        else:
            self.counters["error_completions"] += 1

    def post_recv(self, qp: QpCtx, index: int, opcode: CqeOpcode, status: CqeStatus,
                  byte_len: int, flags: int, imm: int, t: float) -> None:
        self.nic.cq.post(qp.recv_cqn, qp.qpn, index, opcode, status, byte_len, imm,
                         flags=flags, not_before=t)

    def local_error(self, qp: QpCtx, index: int, op: WqeOpcode, status: CqeStatus,
                    vendor: VendorErr) -> None:
        """A WQE failed before anything was sent: complete it (signaled or not) and fail the
        QP, like a real NIC (IBA 10.8.3.2: errors always generate a completion)."""
        self._post_send(qp, SendOp(index, op, True, 0, 0, 0), status, vendor)
        self.qp_error(qp)

    def flush_send(self, qp: QpCtx, index: int) -> None:
        self.nic.cq.post(qp.send_cqn, qp.qpn, index, CqeOpcode.SEND, CqeStatus.WR_FLUSH_ERR,
                         vendor_err=VendorErr.FLUSHED)
        self.counters["flush_completions"] += 1

    def flush_recv(self, qp: QpCtx) -> None:
        while qp.rq_ci != qp.rq_pi:
            self.nic.cq.post(qp.recv_cqn, qp.qpn, qp.rq_ci, CqeOpcode.RECV,
                             CqeStatus.WR_FLUSH_ERR, vendor_err=VendorErr.FLUSHED)
            self.counters["flush_completions"] += 1
            qp.rq_ci = (qp.rq_ci + 1) & 0xFFFF

    def qp_error(self, qp: QpCtx) -> None:
        """Move the QP to ERR and flush everything outstanding on it."""
        if qp.state is not QpState.ERR:
            self.counters["qp_errors"] += 1
            self.nic.trace("qp_state", qpn=qp.qpn, old=qp.state.name, new="ERR")
        qp.state = QpState.ERR
        qp.resp.state = RespState.IDLE
        while qp.outstanding:
            op = qp.outstanding.popleft()
            self.flush_send(qp, op.wqe_index)
        self.flush_recv(qp)
        self.nic.engine.kick(qp)  # the send engine flushes fetched and posted WQEs

    # -- responses --------------------------------------------------------------------------

    def response(self, qp: QpCtx, p: Packet) -> None:
        if qp.state is not QpState.RTS and qp.state is not QpState.SQD:
            self.counters["unexpected_responses"] += 1
            return
        kind = p.info.kind
        if kind is Kind.ACK:
            syn = p.aeth_syndrome
            cls = syn >> 5
            if cls == 0:
                self.counters["acks"] += 1
                self._complete_through(qp, p.psn)
            elif cls == 1:
                self.counters["rnr_naks"] += 1
                self._fail_at(qp, p.psn, CqeStatus.RNR_RETRY_EXC_ERR, VendorErr.RNR_EXCEEDED)
            elif cls == 3:
                self.counters["naks"] += 1
                code = syn & 0x1F
                if code == 0:
                    # PSN sequence error: needs retransmission, which is not modelled yet.
                    self._fail_at(qp, p.psn, CqeStatus.RETRY_EXC_ERR, VendorErr.RETRY_EXCEEDED)
                else:
                    self._fail_at(qp, p.psn, _NAK_STATUS.get(code, CqeStatus.REM_OP_ERR),
                                  VendorErr.REMOTE_NAK)
            else:
                self.counters["unexpected_responses"] += 1
        elif kind is Kind.READ_RESP:
            self._read_response(qp, p)
        elif kind is Kind.ATOMIC_ACK:
            self._atomic_ack(qp, p)

    def _complete_through(self, qp: QpCtx, psn: int) -> None:
        """Complete, in order, every WQE whose last PSN is at or before `psn`. A READ or
        atomic still waiting for its response stops the walk."""
        out = qp.outstanding
        while out:
            op = out[0]
            if psn_diff(op.last_psn, psn) > 0 or op.opcode in _WAITS_FOR_DATA:
                break
            out.popleft()
            if op.signaled:
                self._post_send(qp, op, CqeStatus.SUCCESS)

    def _fail_at(self, qp: QpCtx, psn: int, status: CqeStatus, vendor: VendorErr) -> None:
        out = qp.outstanding
        # Everything before the NAKed PSN was received (a NAK acknowledges its predecessors).
        while out and psn_diff(out[0].last_psn, psn) < 0 and out[0].opcode not in _WAITS_FOR_DATA:
            op = out.popleft()
            if op.signaled:
                self._post_send(qp, op, CqeStatus.SUCCESS)
        if out:
            self._post_send(qp, out.popleft(), status, vendor)
        self.qp_error(qp)

    def _read_response(self, qp: QpCtx, p: Packet) -> None:
        c = self.counters
        c["read_response_packets"] += 1
        out = qp.outstanding
        # Responses also acknowledge the SEND/WRITEs before the READ (implicit ACK, 9.7.6.1).
        while out and out[0].opcode is not WqeOpcode.RDMA_READ:
            if out[0].opcode in _WAITS_FOR_DATA:
                break
            op = out.popleft()
            if op.signaled:
                self._post_send(qp, op, CqeStatus.SUCCESS)
        if not out or out[0].opcode is not WqeOpcode.RDMA_READ:
            c["unexpected_responses"] += 1
            return
        op = out[0]
        idx = psn_diff(p.psn, op.first_psn)
        expect = op.read_done // qp.mtu if op.length else 0
        if idx != expect or psn_diff(op.last_psn, p.psn) < 0:
            c["unexpected_responses"] += 1
            return
        n = p.payload_len
        t = self.nic.env.now + self.nic.cfg.rx_pipeline_ns
        if n:
            if op.read_done + n > op.length:
                c["unexpected_responses"] += 1
                return
            pieces, _ = take(op.local, _position(op.local, op.read_done), n)
            mv = p.payload
            parts, o = [], 0
            for pa, k in pieces:
                parts.append((pa, mv[o:o + k]))
                o += k
            t = self.nic.dma.scatter(parts, n, t)
            op.read_done += n
        if p.info.is_last:
            out.popleft()
            if op.signaled:
                self._post_send(qp, op, CqeStatus.SUCCESS, t=t)

    def _atomic_ack(self, qp: QpCtx, p: Packet) -> None:
        self.counters["atomic_acks"] += 1
        out = qp.outstanding
        while out and out[0].opcode not in _WAITS_FOR_DATA:
            op = out.popleft()
            if op.signaled:
                self._post_send(qp, op, CqeStatus.SUCCESS)
        if not out or out[0].opcode is WqeOpcode.RDMA_READ or out[0].first_psn != p.psn:
            self.counters["unexpected_responses"] += 1
            return
        op = out.popleft()
        t = self.nic.env.now + self.nic.cfg.rx_pipeline_ns
        data = memoryview(_Q.pack(p.atomic_orig))
        pieces, _ = take(op.local, (0, 0), 8)
        parts, o = [], 0
        for pa, k in pieces:
            parts.append((pa, data[o:o + k]))
            o += k
        t = self.nic.dma.scatter(parts, 8, t)
        if op.signaled:
            self._post_send(qp, op, CqeStatus.SUCCESS, t=t)


def _position(segs: list[tuple[int, int]], offset: int) -> tuple[int, int]:
    """(segment index, offset within it) of byte `offset` of a segment list."""
    for i, (_pa, n) in enumerate(segs):
        if offset < n:
            return i, offset
        offset -= n
    return len(segs), 0
