"""The requester: turns a send WQE into packets (IBA 9.7.1-9.7.2).

It translates the WQE's local SGEs (lkey -> MPT -> MTT), segments the message by the path
MTU, assigns PSNs, builds each frame with the QP's header template and hands it to the send
engine. A READ is one request packet that reserves one PSN per expected response packet;
atomics are one packet each.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING

import simpy

from nicsim.hwif import Access, CqeStatus, QpType, VendorErr, WqeFlags, WqeOpcode, XlateStatus
from nicsim.nic.counters import Counters
from nicsim.nic.qp import PSN_MASK, QpCtx, SendOp
from nicsim.nic.wqe_fetch import SendWqe
from nicsim.wire import Kind, Pos, Transport, atomic_eth, ieth, immdt, message_opcodes, reth
from nicsim.wire.opcodes import Opcode

if TYPE_CHECKING:
    from nicsim.nic.nic import Nic

_XLATE_VENDOR = {
    XlateStatus.BAD_KEY: VendorErr.BAD_LKEY,
    XlateStatus.PD_MISMATCH: VendorErr.LKEY_PD_MISMATCH,
    XlateStatus.ACCESS: VendorErr.LKEY_ACCESS,
    XlateStatus.BOUNDS: VendorErr.LKEY_BOUNDS,
}


def _ops(kind: Kind, imm: bool = False, inv: bool = False) -> tuple[int, int, int, int]:
    m = message_opcodes(Transport.RC, kind, imm, inv)
    return (m[Pos.FIRST].value, m[Pos.MIDDLE].value, m[Pos.LAST].value, m[Pos.ONLY].value)


# (opcodes by position, is RDMA write, carries immediate, carries invalidate)
_MSG = {
    WqeOpcode.RDMA_WRITE: (_ops(Kind.WRITE), True, False, False),
    WqeOpcode.RDMA_WRITE_WITH_IMM: (_ops(Kind.WRITE, imm=True), True, True, False),
    WqeOpcode.SEND: (_ops(Kind.SEND), False, False, False),
    WqeOpcode.SEND_WITH_IMM: (_ops(Kind.SEND, imm=True), False, True, False),
    WqeOpcode.SEND_WITH_INV: (_ops(Kind.SEND, inv=True), False, False, True),
}
_RC_OPS = set(_MSG) | {WqeOpcode.RDMA_READ, WqeOpcode.ATOMIC_CMP_AND_SWP,
                       WqeOpcode.ATOMIC_FETCH_AND_ADD}
MAX_MSG = 1 << 31
# Plain ints: IntFlag arithmetic builds enum objects, too slow for the per-WQE path.
_SIGNALED, _INLINE, _SOLICITED = int(WqeFlags.SIGNALED), int(WqeFlags.INLINE), int(
    WqeFlags.SOLICITED)


class Requester:
    def __init__(self, nic: Nic) -> None:
        self.nic = nic
        self.env: simpy.Environment = nic.env
        self.counters = Counters("wqes", "data_packets", "data_bytes", "read_requests",
                                 "atomic_requests", "local_errors", "flushed")

    # -- local translation ------------------------------------------------------------------

    def _local(self, qp: QpCtx, wqe: SendWqe, access: int, t: float
               ) -> tuple[CqeStatus, VendorErr, list[tuple[int, int]], int, float]:
        """Translate every SGE; returns status, vendor error, segments, length, ready time."""
        segs: list[tuple[int, int]] = []
        total = 0
        for addr, length, lkey in wqe.sges:
            if not length:
                continue
            st, s, t = self.nic.translate(lkey, qp.pd, access, addr, length, t)
            if st is not XlateStatus.OK:
                return CqeStatus.LOC_PROT_ERR, _XLATE_VENDOR[st], [], 0, t
            segs += s
            total += length
        if total > MAX_MSG:
            return CqeStatus.LOC_LEN_ERR, VendorErr.NONE, [], 0, t
        return CqeStatus.SUCCESS, VendorErr.NONE, segs, total, t

    # -- execution --------------------------------------------------------------------------

    def execute(self, qp: QpCtx, wqe: SendWqe) -> Generator[simpy.Event, None, None]:
        c = self.counters
        c["wqes"] += 1
        ctrl = wqe.ctrl
        nic = self.nic
        env = self.env
        signaled = bool(ctrl.flags & _SIGNALED)
        try:
            op = WqeOpcode(ctrl.opcode)
        except ValueError:
            op = None
        if op is None or op not in _RC_OPS or qp.type is not QpType.RC:
            c["local_errors"] += 1
            nic.completer.local_error(qp, wqe.index, op or WqeOpcode.SEND,
                                      CqeStatus.LOC_QP_OP_ERR, VendorErr.BAD_OPCODE)
            return
        t = env.now
        if op in _MSG:
            if ctrl.flags & _INLINE:
                segs, total, status, verr = [], len(wqe.inline), CqeStatus.SUCCESS, VendorErr.NONE
            else:
                status, verr, segs, total, t = self._local(qp, wqe, 0, t)
            if status is not CqeStatus.SUCCESS:
                c["local_errors"] += 1
                nic.completer.local_error(qp, wqe.index, op, status, verr)
                return
            yield from self._message(qp, wqe, op, segs, total, signaled, t)
            return
        # READ and atomics write into local memory: LOCAL_WRITE is required on the MR.
        status, verr, segs, total, t = self._local(qp, wqe, Access.LOCAL_WRITE, t)
        if status is CqeStatus.SUCCESS and op is not WqeOpcode.RDMA_READ and total != 8:
            status, verr = CqeStatus.LOC_LEN_ERR, VendorErr.NONE
        if status is not CqeStatus.SUCCESS:
            c["local_errors"] += 1
            nic.completer.local_error(qp, wqe.index, op, status, verr)
            return
        psn = qp.sq_psn
        b = qp.builder
        assert b is not None
        if op is WqeOpcode.RDMA_READ:
            c["read_requests"] += 1
            npkts = max(1, -(-total // qp.mtu))
            qp.sq_psn = (psn + npkts) & PSN_MASK
            qp.outstanding.append(SendOp(wqe.index, op, signaled, psn,
                                         (psn + npkts - 1) & PSN_MASK, total, segs))
            frame = b.build(Opcode.RC_RDMA_READ_REQUEST, qp.dest_qpn, psn,
                            reth(ctrl.remote_addr, ctrl.rkey, total), ackreq=True)
        else:
            c["atomic_requests"] += 1
            qp.sq_psn = (psn + 1) & PSN_MASK
            qp.outstanding.append(SendOp(wqe.index, op, signaled, psn, psn, 8, segs))
            if op is WqeOpcode.ATOMIC_CMP_AND_SWP:
                ext = atomic_eth(ctrl.remote_addr, ctrl.rkey, ctrl.swap, ctrl.compare_add)
                opc = Opcode.RC_COMPARE_SWAP
            else:
                ext = atomic_eth(ctrl.remote_addr, ctrl.rkey, ctrl.compare_add, 0)
                opc = Opcode.RC_FETCH_ADD
            frame = b.build(opc, qp.dest_qpn, psn, ext, ackreq=True)
        wait = nic.engine.emit(frame, t + nic.cfg.tx_pipeline_ns)
        if wait > env.now:
            yield env.timeout(wait - env.now)

    def _message(self, qp: QpCtx, wqe: SendWqe, op: WqeOpcode, segs: list[tuple[int, int]],
                 total: int, signaled: bool, t: float) -> Generator[simpy.Event, None, None]:
        """SEND or RDMA WRITE: one packet per MTU of payload."""
        (first_op, mid_op, last_op, only_op), is_write, has_imm, has_inv = _MSG[op]
        nic = self.nic
        env = self.env
        ctrl = wqe.ctrl
        mtu = qp.mtu
        npkts = max(1, -(-total // mtu))
        psn = qp.sq_psn
        qp.sq_psn = (psn + npkts) & PSN_MASK
        qp.outstanding.append(SendOp(wqe.index, op, signaled, psn, (psn + npkts - 1) & PSN_MASK,
                                     total, imm=ctrl.imm_inv))
        b = qp.builder
        assert b is not None
        build = b.build
        emit = nic.engine.emit
        mem = nic.dma.mem
        buf = mem.mv
        dma_read = nic.dma.pcie.dma_read
        ready_lag = nic.cfg.tx_pipeline_ns
        dqpn = qp.dest_qpn
        solicited = bool(ctrl.flags & _SOLICITED)
        inline = wqe.inline
        c = self.counters
        c["data_packets"] += npkts
        c["data_bytes"] += total
        last_i = npkts - 1
        first_ext = reth(ctrl.remote_addr, ctrl.rkey, total) if is_write else b""
        last_ext = immdt(ctrl.imm_inv) if has_imm else ieth(ctrl.imm_inv) if has_inv else b""
        si = so = 0  # position in segs: segment index, offset within it
        for i in range(npkts):
            n = total - i * mtu
            if n > mtu:
                n = mtu
            if inline:
                payload, ready = inline[i * mtu:i * mtu + n], t
            elif n:
                if mem.posted:
                    mem.sync()
                # Gather n bytes from the physical segments (the MTT walk's result).
                pa, ln = segs[si]
                if so + n <= ln:
                    payload = buf[pa + so:pa + so + n].tobytes()
                    so += n
                else:
                    parts, k = [], n
                    while k:
                        pa, ln = segs[si]
                        m = min(ln - so, k)
                        parts.append(buf[pa + so:pa + so + m].tobytes())
                        so += m
                        k -= m
                        if so == ln and k:
                            si, so = si + 1, 0
                    payload = b"".join(parts)
                if so == ln and si + 1 < len(segs):
                    si, so = si + 1, 0
                ready = dma_read(n, t)
            else:
                payload, ready = b"", t
            if i == last_i:
                ext = (first_ext + last_ext) if i == 0 else last_ext
                frame = build(only_op if i == 0 else last_op, dqpn, (psn + i) & PSN_MASK, ext,
                              payload, ackreq=True, solicited=solicited)
            elif i == 0:
                frame = build(first_op, dqpn, psn, first_ext, payload)
            else:
                frame = build(mid_op, dqpn, (psn + i) & PSN_MASK, b"", payload)
            wait = emit(frame, ready + ready_lag)
            if wait and wait > env.now:
                yield env.timeout(wait - env.now)

    def flush_sq(self, qp: QpCtx) -> None:
        """QP in ERR: every WQE posted and not completed completes with WR_FLUSH_ERR."""
        comp = self.nic.completer
        while qp.fetched:
            w = qp.fetched.popleft()
            comp.flush_send(qp, w.index)
            self.counters["flushed"] += 1
        while (qp.sq_pi - qp.sq_fetch) & 0xFFFF:
            comp.flush_send(qp, qp.sq_fetch)
            qp.sq_fetch = (qp.sq_fetch + 1) & 0xFFFF
            self.counters["flushed"] += 1
