"""The responder: executes incoming requests (IBA 9.7.4-9.7.5).

Per packet: PSN check against the expected PSN, opcode-sequence check, then by kind:
SEND scatters into the receive WQE at the head of the RQ; RDMA WRITE checks the R_Key (MPT:
key, PD, REMOTE_WRITE, bounds) and writes through the MTT; READ queues response packets read
from memory; atomics execute on the 8 bytes in host memory and answer with ATOMIC ACKNOWLEDGE.
ACKs are coalesced: one per `ack_coalesce` packets and one for every packet with AckReq set.

A message in flight keeps the translation its first packet got; every later packet first
makes sure it still stands (see nicsim.nic.translation), and every packet is checked against
the QP's access rights of the moment. READs and atomics are remembered, max_dest_rd_atomic of
them, so that only a duplicate of one of those is executed again.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Generator

import simpy

from nicsim.host.pcie import Pcie
from nicsim.hwif import (
    WQE_INDEX_MASK,
    Access,
    CqeFlags,
    CqeOpcode,
    CqeStatus,
    QpState,
    XlateStatus,
)
from nicsim.nic.aeth import Syndrome, credit_code
from nicsim.nic.completer import Completer
from nicsim.nic.config import NicConfig
from nicsim.nic.counters import bump, new_counters
from nicsim.nic.dma import Dma
from nicsim.nic.engines import Units, cycles_ns
from nicsim.nic.mmu import Mmu
from nicsim.nic.port import Port
from nicsim.nic.qp import PSN_MASK, QpCtx, RdRes, RespCtx, RespState, psn_diff
from nicsim.nic.scheduler import SendEngine
from nicsim.nic.srq import SharedReceiveQueues
from nicsim.nic.translation import Held, Walk
from nicsim.nic.unreliable import UC_COUNTERS, UcReceive
from nicsim.nic.violations import Rule
from nicsim.nic.windows import MemoryWindows
from nicsim.nic.wqe_fetch import WqeFetch
from nicsim.sim import Sim
from nicsim.sim.tracer import Stage, Tracer
from nicsim.wire import Kind, Packet, aeth, atomic_ack_eth
from nicsim.wire.opcodes import Opcode
from nicsim.wire.packet import Unbuilt

_Q = struct.Struct("<Q")
_RECEIVING = (QpState.RTR, QpState.RTS, QpState.SQD)
_WRITE_MIDDLE = int(Opcode.RC_RDMA_WRITE_MIDDLE)
_SEND_MIDDLE = int(Opcode.RC_SEND_MIDDLE)
_ACK = int(Opcode.RC_ACKNOWLEDGE)
_WRITE_LAST = int(Opcode.RC_RDMA_WRITE_LAST)
# Enum members the per-packet and per-WQE paths compare with, bound once: see
# nicsim.nic.nic's _RC.
_IDLE, _IN_WRITE, _IN_SEND = RespState.IDLE, RespState.IN_WRITE, RespState.IN_SEND
_K_SEND, _K_WRITE, _K_READ_REQ = Kind.SEND, Kind.WRITE, Kind.READ_REQ
_K_FLUSH, _K_ATOMIC_WRITE = Kind.FLUSH, Kind.ATOMIC_WRITE
MAX_DMA_LEN = 1 << 31  # a RETH DMA length beyond this is a length error (C9-92, as rxe)
# A READ's source: its buffer, when the key check is done, the keys.
_ReadSource = tuple[Walk, float, tuple[int, ...]]
# Access rights as plain ints: IntFlag arithmetic builds enum objects on every check.
_LW, _RW, _RR, _RA = (int(a) for a in (Access.LOCAL_WRITE, Access.REMOTE_WRITE,
                                       Access.REMOTE_READ, Access.REMOTE_ATOMIC))
# FETH placement type (bits: global visibility 1, persistence 2) -> the rights it needs;
# selectivity levels: a range, or the whole memory region.
_FLUSH_TYPES = {1: int(Access.FLUSH_GLOBAL), 2: int(Access.FLUSH_PERSISTENT),
                3: int(Access.FLUSH_GLOBAL | Access.FLUSH_PERSISTENT)}
_SEL_RANGE, _SEL_MR = 0, 1
# What may come next in each responder state (IBA 9.7.4.1.3): for an RX_VIOLATION's text.
_NEXT_OPCODES = {RespState.IDLE: "a FIRST or ONLY opcode",
                 RespState.IN_SEND: "SEND MIDDLE or SEND LAST",
                 RespState.IN_WRITE: "RDMA WRITE MIDDLE or RDMA WRITE LAST"}
# States in which a QP has not been connected yet (IBA 10.3.1): a request to one is a peer
# running ahead of the connection setup. (A QP in ERR drops requests too, but after an error
# the peer's requests still in flight are expected.)
_NOT_READY = (QpState.RESET, QpState.INIT)


class Responder:
    # The congestion control's INT echo (RateControl.echo_int, for an algorithm with
    # Signal.INT): an ACK carries back the INT records of the request it answers.
    int_echo: Callable[[QpCtx, bytes | Unbuilt], bytes | Unbuilt] | None = None

    def __init__(self, env: Sim, cfg: NicConfig, engine: SendEngine, fetch: WqeFetch,
                 mmu: Mmu, dma: Dma, pcie: Pcie, completer: Completer,
                 windows: MemoryWindows, srq: SharedReceiveQueues, port: Port) -> None:
        self.env = env
        self.engine = engine
        self.fetch = fetch
        self.mmu = mmu
        self.dma = dma
        self.pcie = pcie
        self.completer = completer
        self.windows = windows
        self.srq = srq
        self.port = port
        self._atomics = cfg.atomics  # (a device without: DevCap.NO_ATOMICS)
        # Scatter to CQE: a whole SEND up to this many bytes goes into its CQE (0: never).
        self._scatter = cfg.scatter_to_cqe_bytes
        self.tracer: Tracer | None = None  # (Nic.observe)
        self._rx_lag = cfg.rx_pipeline_ns
        self._tx_lag = cfg.tx_pipeline_ns
        # The responder units (nicsim.nic.engines): each request packet occupies one for its
        # receive parse and the responder's decision; a QP's packets take turns on them
        # (RespCtx.unit_free), so they stay in order.
        self.units = Units(cfg.responder_units)
        self._take = self.units.take
        self._unit_cost = cycles_ns(cfg.rx_parse_cycles + cfg.resp_cycles, cfg.clock_mhz)
        self._ack_every = cfg.ack_coalesce
        self._xlate = mmu.xlate
        # Packets the receive fast path took (middle), WRITE and SEND: each is a request and
        # a write or send packet in `counters`; and the payload bytes placed. Added to the
        # counters when they are read.
        self._fast_writes = self._fast_sends = self._bytes_placed = 0
        self._c = new_counters(
            "requests", "send_packets", "write_packets", "read_requests", "atomics",
            "read_response_packets", "bytes_placed", "acks_sent", "naks_sent", "rnr_naks_sent",
            "duplicates", "out_of_sequence", "recv_completions", "drop_qp_state",
            "length_errors", "revoked", "duplicate_read_dropped", "duplicate_atomic_dropped",
            "read_replays", "atomic_replays", *UC_COUNTERS)
        self.uc = UcReceive(completer, self._c)

    @property
    def counters(self) -> dict[str, int]:
        """The counters, tallies added up: a new dict (writing to it counts nothing)."""
        c = dict(self._c)
        c["requests"] += self._fast_writes + self._fast_sends
        c["write_packets"] += self._fast_writes
        c["send_packets"] += self._fast_sends
        c["bytes_placed"] += self._bytes_placed
        return c

    # -- ACK/NAK ----------------------------------------------------------------------------

    def _send_ack(self, qp: QpCtx, psn: int, syndrome: int, t: float) -> None:
        assert qp.builder is not None
        frame = qp.builder.make(_ACK, qp.dest_qpn, psn, aeth(syndrome, qp.msn))
        if self.int_echo is not None:
            frame = self.int_echo(qp, frame)
        self._respond(qp, frame, t)
        qp.resp.unacked = 0
        c = self._c
        if syndrome >> 5 == 0:
            c["acks_sent"] += 1
        elif syndrome >> 5 == 1:
            c["rnr_naks_sent"] += 1
        else:
            c["naks_sent"] += 1

    def _ack(self, qp: QpCtx, psn: int, t: float) -> None:
        if qp.srq is not None:
            # A QP on an SRQ has no WQEs of its own to count: its ACKs carry the credit code
            # 0x1F, no end-to-end flow control (IBA 9.7.7.2.6, 10.2.9).
            self._send_ack(qp, psn, Syndrome.ACK | Syndrome.CREDITS_UNLIMITED, t)
            return
        free = (qp.rq_pi - qp.rq_ci) & WQE_INDEX_MASK
        self._send_ack(qp, psn, Syndrome.ACK | credit_code(free), t)

    def _rnr_nak(self, qp: QpCtx, psn: int, t: float) -> None:
        """No receive WQE: RNR NAK carrying this QP's min_rnr_timer (IBA 9.7.5.2.8). It is
        the NAK for this expected PSN: requests behind it that the requester had already sent
        are dropped silently, not NAKed again as sequence errors (which would spend the
        requester's transport retries on packets that were never lost)."""
        if not qp.reliable:
            self.uc.refuse(qp, Syndrome.RNR_NAK, t, None)
            return
        self._send_ack(qp, psn, Syndrome.RNR_NAK | (qp.min_rnr_timer & 0x1F), t)
        qp.resp.nak_sent = True

    def _fault_rnr(self, qp: QpCtx, psn: int, t: float) -> None:
        """The request's pages of an on-demand paging region are not present: the fault is
        raised (nicsim.nic.odp) and the request refused with an RNR NAK, which the requester
        retries after the RNR timer, rather than the responder holding the QP's packets."""
        self.mmu.faults.counters["rnr_naks"] += 1
        self._rnr_nak(qp, psn, t)

    def _fatal_nak(self, qp: QpCtx, psn: int, syndrome: int, t: float,
                   recv_status: CqeStatus | None = None) -> None:
        """A class C/D error (IBA 9.9.3.1): NAK, and the responder QP goes to ERR (UC: see
        nicsim.nic.unreliable)."""
        if not qp.reliable:
            self.uc.refuse(qp, syndrome, t, recv_status)
            return
        self._send_ack(qp, psn, syndrome, t)
        r = qp.resp
        if recv_status is not None and r.recv_active:  # a receive WQE is being filled
            self.completer.post_recv(qp, r.rq_index, CqeOpcode.RECV, recv_status,
                                         r.msg_len, 0, 0, t)
            if qp.srq is None:  # an SRQ's WQE was taken when the message started
                qp.rq_ci = (qp.rq_ci + 1) & WQE_INDEX_MASK
        r.state = RespState.IDLE
        r.rq_cap = 0
        r.recv_active = False
        self.completer.qp_error(qp)

    def _broke(self, qp: QpCtx, rule: Rule, expected: str, actual: str) -> None:
        """The request broke `rule` (nicsim.nic.violations): tell the observers."""
        if self.tracer is not None:
            self.tracer.emit(Stage.RX_VIOLATION, rule, qp.qpn, expected, actual)

    # -- entry ------------------------------------------------------------------------------

    def middle(self, qp: QpCtx, op: int, psn: int, ackreq: bool, payload: bytes | memoryview
               ) -> bool:
        """The receive fast path (Nic.receive): a MIDDLE packet of a WRITE or SEND, or the
        LAST of a WRITE without immediate, whose header the NIC has checked (address, P_Key,
        flags: no pad, no SE), with a payload, and whose ICRC is good. If it is the in-order
        continuation of the message in progress, which is most packets of a stream, every
        check `request` makes holds: place the payload and return True; otherwise False, and
        the packet takes the general path. (A QP going to ERR or RESET resets r.state to IDLE;
        an unchanged protection epoch means no key or access right changed since the
        message's last check.)"""
        r = qp.resp
        if psn != qp.epsn or r.epoch != self._xlate.epoch:
            return False
        n = len(payload)
        last = op == _WRITE_LAST
        if last:
            # The end of the RETH's length exactly, at most one MTU (C9-92).
            if (r.state is not _IN_WRITE or not n or n > qp.mtu
                    or r.msg_len + n != r.rq_cap):
                return False
            self._fast_writes += 1
        elif n != qp.mtu or r.msg_len + n > r.rq_cap:
            return False
        elif op == _WRITE_MIDDLE:
            if r.state is not _IN_WRITE:
                return False
            self._fast_writes += 1
        elif op == _SEND_MIDDLE and r.state is _IN_SEND:
            self._fast_sends += 1
        else:
            return False
        r.nak_sent = False
        t = self._unit_time(r)
        self._place(qp, payload, t)
        if last:  # the message is done (the general path's _write, for a LAST)
            qp.msn = (qp.msn + 1) & 0xFFFFFF
            r.state = _IDLE
            r.rq_cap = 0
        self._advance(qp, psn, ackreq, t)
        return True

    def _unit_time(self, r: RespCtx) -> float:
        """When the QP's receive unit starts on a packet arriving now (and takes it)."""
        t = self.env.now + self._rx_lag
        if r.unit_free > t:
            t = r.unit_free
        t = self._take(t, self._unit_cost)
        r.unit_free = t + self._unit_cost
        return t

    def request(self, qp: QpCtx, p: Packet) -> None:
        c = self._c
        # The receive side works in RTR, RTS and SQD (only the send queue drains in SQD).
        if qp.state not in _RECEIVING:
            c["drop_qp_state"] += 1
            if qp.state in _NOT_READY:
                self._broke(qp, Rule.QP_NOT_READY, "RTR, RTS or SQD", qp.state.name)
            return
        c["requests"] += 1
        r = qp.resp
        t = self._unit_time(r)
        if not qp.reliable:
            ok = self.uc.accept(qp, p)
            if self.uc.broke is not None:
                self._broke(qp, *self.uc.broke)
            if not ok:
                return
        elif d := psn_diff(p.psn, qp.epsn):
            if d > 0:
                # Sequence error: NAK once, then stay silent until the expected PSN arrives.
                c["out_of_sequence"] += 1
                if self.tracer is not None:
                    self._broke(qp, Rule.PSN_SEQUENCE, f"PSN {qp.epsn:#08x}",
                                f"PSN {p.psn:#08x} ({p.name}, {d} ahead)")
                if not r.nak_sent:
                    r.nak_sent = True
                    self._send_ack(qp, qp.epsn, Syndrome.NAK_PSN_SEQ, t)
                return
            c["duplicates"] += 1
            self._duplicate(qp, p, t)
            return
        r.nak_sent = False
        info = p.info
        kind = info.kind
        # Opcode sequence (IBA 9.7.4.1.3 / C9-29): a multi-packet message continues with the
        # same kind, and nothing but FIRST or ONLY may start one.
        if r.state is _IDLE:
            ok = info.is_first
        elif r.state is _IN_SEND:
            ok = kind is _K_SEND and not info.is_first
        else:
            ok = kind is _K_WRITE and not info.is_first
        if not ok and self.tracer is not None:
            self._broke(qp, Rule.OPCODE_SEQUENCE, _NEXT_OPCODES[r.state], p.name)
        plen = p.payload_len
        if ok and info.has_payload:
            # FIRST and MIDDLE carry exactly one MTU and no pad; LAST and ONLY at most one
            # MTU (C9-92, rxe's check_length).
            ok = (plen == qp.mtu and not p.pad) if not info.is_last else plen <= qp.mtu
            if ok and plen == 0 and info.is_last and not info.is_first:
                ok = False  # a LAST packet carries at least one byte
            if not ok and self.tracer is not None:
                self._broke(qp, Rule.LENGTH,
                            f"{qp.mtu} bytes (one MTU), pad 0" if not info.is_last else
                            f"at most {qp.mtu} bytes (the MTU)" if info.is_first else
                            f"1 to {qp.mtu} bytes", f"{plen} bytes, pad {p.pad} ({p.name})")
        if not ok:
            self._fatal_nak(qp, p.psn, Syndrome.NAK_INV_REQ, t, CqeStatus.REM_INV_REQ_ERR)
            return
        if kind is _K_SEND:
            self._send(qp, p, t)
        elif kind is _K_WRITE:
            self._write(qp, p, t)
        elif kind is _K_READ_REQ:
            self._read(qp, p, t)
        elif kind is _K_FLUSH:
            self._flush(qp, p, t)
        elif kind is _K_ATOMIC_WRITE:
            self._atomic_write(qp, p, t)
        elif self._atomics:
            self._atomic(qp, p, t)
        else:  # an atomic to a device without them: an invalid request (IBA 9.7.5.2.4)
            self._fatal_nak(qp, p.psn, Syndrome.NAK_INV_REQ, t, CqeStatus.REM_INV_REQ_ERR)

    def _advance(self, qp: QpCtx, psn: int, ackreq: bool, t: float) -> None:
        """The packet is done: expect the next PSN, and ACK if asked or if enough are due."""
        qp.epsn = (psn + 1) & PSN_MASK
        r = qp.resp
        if self.tracer is not None:
            self.tracer.emit(Stage.PLACED, qp.dest_qpn, psn, r.last_done_at)
        if not qp.reliable:
            return  # UC: nothing is acknowledged
        r.unacked += 1
        if ackreq or r.unacked >= self._ack_every:
            self._ack(qp, psn, t if t > r.posted_at else r.posted_at)

    def _place(self, qp: QpCtx, mv: bytes | memoryview, t: float) -> float:
        """Write a payload at the current position of the message's segments."""
        r = qp.resp
        n = len(mv)
        if not n:
            return t
        w = r.walk
        if w.covered < r.msg_len + n:  # translate the next chunk of the buffer
            r.data_ready_at = self.mmu.walk(w, r.msg_len + n, max(t, r.data_ready_at))
        pa, ln = r.segs[r.seg_i]
        off = r.seg_off
        r.msg_len += n
        self._bytes_placed += n
        qp.payload_in += n
        nb = t if t > r.data_ready_at else r.data_ready_at
        if off + n <= ln:  # the common case: inside one physical segment
            if off + n < ln:
                r.seg_off = off + n
            else:
                r.seg_i += 1
                r.seg_off = 0
            done = self.pcie.dma_write(n, nb, pa + off)
            self.dma.mem.post1(done, pa + off, mv)
        else:  # across segments: the general path
            done, (r.seg_i, r.seg_off) = self.dma.place(r.segs, (r.seg_i, off), mv, nb)
        r.last_done_at = done
        # The pipeline is in order: nothing about this packet (its ACK) leaves before its
        # write is posted to PCIe, which orders it before anything the NIC writes later.
        r.posted_at = self.pcie.last_write_start
        return done

    # -- held translations -----------------------------------------------------------------

    def _still_valid(self, held: RespCtx | Held) -> bool:
        """Whether the keys a message in flight holds still stand (a holder re-checks only
        when the protection epoch moved since its last check)."""
        if held.epoch == self._xlate.epoch or self._xlate.recheck(held):
            return True
        self._c["revoked"] += 1
        return False

    # -- SEND -------------------------------------------------------------------------------

    def _send(self, qp: QpCtx, p: Packet, t: float) -> None:
        r = qp.resp
        self._c["send_packets"] += 1
        if p.info.is_first:
            if (p.info.is_last and p.payload_len <= self._scatter and qp.srq is None
                    and r.held_wqe is None):
                self._scatter_send(qp, p, t)
                return
            if not self._take_recv_wqe(qp, p, t):
                return
        elif not self._still_valid(r):
            # The receive buffer was deregistered under the message: a local protection
            # error on the receive WQE, a remote operational error for the sender.
            self._fatal_nak(qp, p.psn, Syndrome.NAK_REM_OP, t, CqeStatus.LOC_PROT_ERR)
            return
        if r.msg_len + p.payload_len > r.rq_cap:
            # Message longer than the receive buffers (IBA 9.7.5.2.4: invalid request).
            self._fatal_nak(qp, p.psn, Syndrome.NAK_INV_REQ, t, CqeStatus.LOC_LEN_ERR)
            return
        self._place(qp, p.payload, t)
        if p.info.is_last:
            flags, imm = 0, 0
            if p.info.imm:
                flags, imm = CqeFlags.WITH_IMM, p.imm
            elif p.info.inv:
                # The key names a bound type 2 window of the QP's PD, which is freed
                # (IBA 10.6.7.2.6, 9.4.5); any other key is an invalid request (C10-106).
                if not self.windows.invalidate(qp.pd, p.ieth_rkey, qp.qpn):
                    self._fatal_nak(qp, p.psn, Syndrome.NAK_INV_REQ, t,
                                    CqeStatus.REM_INV_REQ_ERR)
                    return
                flags, imm = CqeFlags.WITH_INV, p.ieth_rkey
            self._complete_recv(qp, CqeOpcode.RECV, flags, imm, t, p.solicited)
        else:
            r.state = RespState.IN_SEND
        self._advance(qp, p.psn, p.ackreq, t)

    def _scatter_send(self, qp: QpCtx, p: Packet, t: float) -> None:
        """Scatter to CQE (hwif.CqeFlags.SCATTERED): a whole SEND of at most
        `scatter_to_cqe_bytes` on a QP with its own RQ goes into the CQE of the RQ's next WQE,
        one PCIe write. The WQE's scatter list is neither read nor translated, as on mlx5
        (MLX5_RES_SCAT_DATA32_CQE; NVIDIA's Inline-Receive notes: the HCA need not read the
        scatter list, the driver copies the data at poll): its L_Key, bounds and length are
        the provider's to check when it copies (nicsim.driver.rings), so a bad L_Key fails
        that completion only, after the message was acknowledged. An SRQ's WQEs and UC's
        held WQE take the general path (mlx5 scatters for SRQs too: not modelled)."""
        r = qp.resp
        if qp.rq_ci == qp.rq_pi:
            self._rnr_nak(qp, p.psn, t)
            return
        n = p.payload_len
        flags, imm = 0, 0
        if p.info.imm:
            flags, imm = CqeFlags.WITH_IMM, p.imm
        elif p.info.inv:
            # As _send: a bound type 2 window of the QP's PD, or an invalid request.
            if not self.windows.invalidate(qp.pd, p.ieth_rkey, qp.qpn):
                r.rq_index, r.rq_cap, r.msg_len, r.recv_active = qp.rq_ci, 0, 0, True
                self._fatal_nak(qp, p.psn, Syndrome.NAK_INV_REQ, t, CqeStatus.REM_INV_REQ_ERR)
                return
            flags, imm = CqeFlags.WITH_INV, p.ieth_rkey
        r.rq_index, r.rq_cap, r.msg_len, r.recv_active = qp.rq_ci, n, n, True
        self._bytes_placed += n
        qp.payload_in += n
        landed = self._complete_recv(qp, CqeOpcode.RECV, flags | CqeFlags.SCATTERED, imm, t,
                                     p.solicited, bytes(p.payload))
        r.last_done_at = landed
        # The ACK follows the CQE's write on PCIe, as it follows a placed payload's (_place).
        r.posted_at = self.pcie.last_write_start
        self._advance(qp, p.psn, p.ackreq, t)

    def _take_recv_wqe(self, qp: QpCtx, p: Packet, t: float) -> bool:
        """Start a message that consumes a receive WQE; RNR NAK if there is none."""
        r = qp.resp
        rq = qp.srq or qp  # an SRQ has the fields of a receive queue
        held = r.held_wqe is not None
        if held:  # (UC) an SRQ WQE a dropped message had taken
            (index, sges), ready, r.held_wqe = r.held_wqe, t, None
        else:
            if rq.rq_ci == rq.rq_pi:
                self._rnr_nak(qp, p.psn, t)
                return False
            sges, ready = self.fetch.fetch_rq(rq, t)
            index = rq.rq_ci
        pieces = [(lkey, addr, length) for addr, length, lkey in sges if length]
        st, walk, ready = self.mmu.check_walk(pieces, rq.pd, _LW, ready)
        if st is XlateStatus.PAGE_FAULT:
            if held:
                r.held_wqe = (index, sges)
            self._fault_rnr(qp, p.psn, t)  # the WQE stays for the retried request
            return False
        if not held and qp.srq is not None:  # taken now: other QPs take the next ones
            self.srq.took(qp.srq)
        r.wqe_sges = sges
        if st is not XlateStatus.OK:
            r.rq_index, r.rq_cap, r.msg_len, r.recv_active = index, 0, 0, True
            self._fatal_nak(qp, p.psn, Syndrome.NAK_REM_OP, t, CqeStatus.LOC_PROT_ERR)
            return False
        self._start(r, walk, tuple(lkey for lkey, _, _ in pieces), ready)
        r.rq_index, r.rq_cap, r.recv_active = index, walk.total, True
        return True

    def _start(self, r: RespCtx, walk: Walk, keys: tuple[int, ...], ready: float) -> None:
        """A message starts placing into `walk`'s buffer, its keys checked now."""
        r.walk, r.segs, r.seg_i, r.seg_off, r.msg_len = walk, walk.segs, 0, 0, 0
        r.keys, r.epoch = keys, self._xlate.epoch
        r.data_ready_at = ready

    def _complete_recv(self, qp: QpCtx, opcode: CqeOpcode, flags: int, imm: int,
                       t: float, solicited: bool, inline: bytes = b"") -> float:
        """The message's last packet arrived; `solicited`: its BTH SE bit (IBA 9.2.3), which
        a CQ armed for solicited completions waits for; `inline`: a scattered SEND's data
        (_scatter_send). Returns when the CQE lands."""
        r = qp.resp
        # The CQE follows the last payload write on the same PCIe direction: posted writes
        # stay in order (PCIe base spec 2.4.1), so it may be issued once that write is, and
        # software that sees the CQE sees the data.
        landed = self.completer.post_recv(qp, r.rq_index, opcode, CqeStatus.SUCCESS,
                                          r.msg_len, flags, imm, max(t, r.posted_at),
                                          solicited, inline)
        self._c["recv_completions"] += 1
        if qp.srq is None:
            qp.rq_ci = (qp.rq_ci + 1) & WQE_INDEX_MASK
            self.fetch.consumed_rq(qp)
        qp.msn = (qp.msn + 1) & 0xFFFFFF
        r.state = RespState.IDLE
        r.rq_cap = 0
        r.msg_len = 0
        r.recv_active = False
        return landed

    # -- RDMA WRITE -------------------------------------------------------------------------

    def _length_error(self, qp: QpCtx, p: Packet, t: float, expected: str) -> None:
        """The packet does not fit the DMA length its message announced (C9-92); `expected`:
        what would have (for RX_VIOLATION)."""
        self._c["length_errors"] += 1
        if self.tracer is not None:
            dma = f", RETH DMA length {p.reth_len}" if p.reth_len is not None else ""
            self._broke(qp, Rule.LENGTH, expected,
                        f"{p.payload_len} bytes, pad {p.pad}{dma} ({p.name})")
        self._fatal_nak(qp, p.psn, Syndrome.NAK_INV_REQ, t)

    def _write(self, qp: QpCtx, p: Packet, t: float) -> None:
        r = qp.resp
        self._c["write_packets"] += 1
        info = p.info
        plen = p.payload_len
        # The QP's REMOTE_WRITE right is checked on every packet (rxe's check_op_valid): a
        # modify that removes it stops a message in flight at its next packet.
        if not qp.access & _RW:
            self._fatal_nak(qp, p.psn, Syndrome.NAK_REM_ACCESS, t)
            return
        if info.is_first:
            length = p.reth_len
            # The packet must agree with the RETH's DMA length: an ONLY carries all of it,
            # with the pad that length implies; a FIRST leaves more to come (C9-92; rxe's
            # check_rkey).
            if length > MAX_DMA_LEN or (
                    (plen != length or p.pad != -length & 3) if info.is_last
                    else length <= qp.mtu):
                self._length_error(
                    qp, p, t, f"at most {MAX_DMA_LEN} bytes" if length > MAX_DMA_LEN else
                    f"{length} bytes (the RETH's DMA length), pad {-length & 3}"
                    if info.is_last else f"a DMA length over one MTU ({qp.mtu})")
                return
            # A zero-length WRITE needs no valid R_Key or address (C9-88): nothing is checked
            # and nothing is placed.
            pieces = [(p.reth_rkey, p.reth_va, length)] if length else []
            st, walk, ready = self.mmu.check_walk(pieces, qp.pd, _RW, t, qp.qpn)
            if self._refused(qp, p, st, t):
                return
            self._start(r, walk, (p.reth_rkey,) if length else (), ready)
            r.rq_cap = length
        else:
            if not self._still_valid(r):
                self._fatal_nak(qp, p.psn, Syndrome.NAK_REM_ACCESS, t)
                return
            if r.msg_len + plen > r.rq_cap or info.is_last and (
                    r.msg_len + plen != r.rq_cap or p.pad != -plen & 3):
                left = r.rq_cap - r.msg_len
                self._length_error(qp, p, t, f"{left} bytes (the rest of the DMA length), pad "
                                   f"{-left & 3}" if info.is_last else
                                   f"at most {left} bytes (the rest of the DMA length)")
                return
        rq = qp.srq or qp
        if info.is_last and info.imm and rq.rq_ci == rq.rq_pi and r.held_wqe is None:
            # The immediate needs a receive WQE: RNR NAK before anything of this packet is
            # placed, so the retried packet starts from the same state.
            self._rnr_nak(qp, p.psn, t)
            return
        self._place(qp, p.payload, t)
        if info.is_last:
            if info.imm:
                # The receive WQE is consumed without scatter: it only carries the completion.
                if r.held_wqe is not None:  # (UC) an SRQ WQE a dropped message had taken
                    r.rq_index, r.held_wqe = r.held_wqe[0], None
                else:
                    r.rq_index = rq.rq_ci
                    self.fetch.counters["rq_wqes"] += 1
                    if qp.srq is not None:
                        self.srq.took(qp.srq)
                self._complete_recv(qp, CqeOpcode.RECV_RDMA_WITH_IMM, CqeFlags.WITH_IMM, p.imm,
                                    t, p.solicited)
            else:
                qp.msn = (qp.msn + 1) & 0xFFFFFF
                r.state = _IDLE
                r.rq_cap = 0
        else:
            r.state = _IN_WRITE
        self._advance(qp, p.psn, p.ackreq, t)

    # -- RDMA READ --------------------------------------------------------------------------

    def _remember(self, qp: QpCtx, res: RdRes) -> None:
        """Keep a READ or atomic for its duplicates: the newest max_dest_rd_atomic of them
        (a requester never has more outstanding, so an older one cannot be retried)."""
        rd = qp.resp.rd_res
        rd.append(res)
        while len(rd) > max(1, qp.max_dest_rd_atomic):
            rd.popleft()

    @staticmethod
    def _find(qp: QpCtx, psn: int) -> RdRes | None:
        for res in qp.resp.rd_res:
            if psn_diff(psn, res.first_psn) >= 0 and psn_diff(res.last_psn, psn) >= 0:
                return res
        return None

    def _read(self, qp: QpCtx, p: Packet, t: float) -> None:
        self._c["read_requests"] += 1
        if not qp.access & _RR:
            self._fatal_nak(qp, p.psn, Syndrome.NAK_REM_ACCESS, t)
            return
        r = qp.resp
        if r.reads_inflight >= max(1, qp.max_dest_rd_atomic):
            # More READs outstanding than this QP accepts (IBA 9.7.7.1, C9-129).
            self._broke(qp, Rule.TOO_MANY_READS,
                        f"at most {max(1, qp.max_dest_rd_atomic)} READs being answered",
                        f"READ {r.reads_inflight + 1} at PSN {p.psn:#08x}")
            self._fatal_nak(qp, p.psn, Syndrome.NAK_INV_REQ, t)
            return
        length = p.reth_len
        if length > MAX_DMA_LEN:
            self._length_error(qp, p, t, f"a DMA length of at most {MAX_DMA_LEN}")
            return
        npkts = max(1, -(-length // qp.mtu))
        src = self._read_source(qp, p, t)
        if src is None:
            return
        self._remember(qp, RdRes(p.psn, (p.psn + npkts - 1) & PSN_MASK, p.reth_rkey,
                                 p.reth_va, length))
        qp.epsn = (p.psn + npkts) & PSN_MASK
        qp.msn = (qp.msn + 1) & 0xFFFFFF  # a READ counts at once (C9-148)
        r.unacked = 0
        # A duplicate reuses the resource of the READ it repeats: only new READs count.
        r.reads_inflight += 1
        self._queue_read_response(qp, p, src, counted=True)

    def _read_source(self, qp: QpCtx, p: Packet, t: float) -> _ReadSource | None:
        """Check the READ's R_Key: the buffer to read (walked as it is sent), when its check
        is done and the keys; None after a NAK."""
        length = p.reth_len
        # C9-88: a zero-length READ has no R_Key or address to check.
        pieces = [(p.reth_rkey, p.reth_va, length)] if length else []
        st, walk, ready = self.mmu.check_walk(pieces, qp.pd, _RR, t, qp.qpn)
        if self._refused(qp, p, st, t):
            return None
        return walk, ready, (p.reth_rkey,) if length else ()

    def _queue_read_response(self, qp: QpCtx, p: Packet, src: _ReadSource,
                             counted: bool) -> None:
        walk, ready, keys = src
        psn, msn, length, epoch = p.psn, qp.msn, p.reth_len, self._xlate.epoch
        qp.resp.jobs_queued += 1
        self.engine.add_job(lambda: self._read_response(
            qp, psn, msn, walk, length, ready, keys, epoch, counted))

    def _read_response(self, qp: QpCtx, psn: int, msn: int, walk: Walk,
                       length: int, ready: float, keys: tuple[int, ...], epoch: int,
                       counted: bool = True) -> Generator[simpy.Event, None, None]:
        """Send the READ RESPONSE packets, payload read from host memory (IBA 9.7.4.1.4).
        Each packet's read first checks that the R_Key still stands: a region deregistered
        under the stream ends it with a NAK remote access error at that packet's PSN."""
        env = self.env
        held = Held(keys, epoch)
        b = qp.builder
        mtu = qp.mtu
        npkts = max(1, -(-length // mtu))
        ack = aeth(Syndrome.ACK | Syndrome.CREDITS_UNLIMITED, msn)
        pipeline = self._tx_lag
        pos = (0, 0)
        try:
            for i in range(npkts):
                if qp.state is QpState.ERR or qp.state is QpState.RESET or b is None:
                    return  # a QP in error (or reset, or destroyed) sends nothing more
                if not self._still_valid(held):
                    self._fatal_nak(qp, (psn + i) & PSN_MASK, Syndrome.NAK_REM_ACCESS,
                                    env.now + pipeline)
                    return
                n = min(mtu, length - i * mtu)
                if n:
                    if walk.covered < i * mtu + n:
                        ready = self.mmu.walk(walk, i * mtu + n, ready)
                    payload, t, pos = self.dma.read_at(walk.segs, pos, n, ready)
                else:
                    payload, t = b"", max(ready, env.now)
                if npkts == 1:
                    opc, ext = Opcode.RC_RDMA_READ_RESPONSE_ONLY, ack
                elif i == 0:
                    opc, ext = Opcode.RC_RDMA_READ_RESPONSE_FIRST, ack
                elif i == npkts - 1:
                    opc, ext = Opcode.RC_RDMA_READ_RESPONSE_LAST, ack
                else:
                    opc, ext = Opcode.RC_RDMA_READ_RESPONSE_MIDDLE, b""
                frame = b.make(opc, qp.dest_qpn, (psn + i) & PSN_MASK, ext, payload)
                self._c["read_response_packets"] += 1
                wait = self.engine.emit(frame, t + pipeline)
                if wait > env.now or self.port.queued:
                    yield from self.engine.window(wait)
        finally:
            r = qp.resp  # (after a reset a fresh context: never below zero)
            r.jobs_queued = max(0, r.jobs_queued - 1)
            if counted:
                r.reads_inflight = max(0, r.reads_inflight - 1)

    # -- atomics ----------------------------------------------------------------------------

    def _atomic(self, qp: QpCtx, p: Packet, t: float) -> None:
        """CMP_SWAP / FETCH_ADD on 8 aligned bytes (IBA 9.4.5): executed here, in one event,
        so no other access to host memory through this NIC can interleave."""
        self._c["atomics"] += 1
        va = p.atomic_va
        if va & 7:
            self._fatal_nak(qp, p.psn, Syndrome.NAK_INV_REQ, t)
            return
        if not qp.access & _RA:
            self._fatal_nak(qp, p.psn, Syndrome.NAK_REM_ACCESS, t)
            return
        st, segs, ready = self.mmu.translate(p.atomic_rkey, qp.pd, _RA, va, 8, t, qp.qpn)
        if self._refused(qp, p, st, t):
            return
        pa = segs[0][0]
        dma = self.dma
        # The read-modify-write: a DMA read round trip, then the write, posted behind it. No
        # other access through this NIC interleaves (its own later reads see the posted
        # write, PCIe ordering).
        raw, t_read = dma.read(pa, 8, ready)
        (orig,) = _Q.unpack(raw)
        # Remember the result: a duplicate of this request is answered from here and never
        # executed twice (IBA 9.7.5.1.1, o9-28).
        self._remember(qp, RdRes(p.psn, p.psn, p.atomic_rkey, va, 8, orig))
        if p.opcode == Opcode.RC_COMPARE_SWAP:
            new = p.atomic_swap_add if orig == p.atomic_compare else orig
        else:
            new = (orig + p.atomic_swap_add) & 0xFFFFFFFFFFFFFFFF
        dma.write(pa, _Q.pack(new), t_read)
        qp.epsn = (p.psn + 1) & PSN_MASK
        qp.msn = (qp.msn + 1) & 0xFFFFFF
        qp.resp.unacked = 0
        self._atomic_ack(qp, p.psn, orig, t_read)

    # -- FLUSH and ATOMIC WRITE (the Memory Placement annex of IBA 1.5) ----------------------

    def _flush(self, qp: QpCtx, p: Packet, t: float) -> None:
        """FLUSH: once every write this NIC placed before it has reached host memory (global
        visibility), answer with a READ RESPONSE without payload. The QP and the region must
        grant the placement type's flush right (else NAK remote access, as rxe checks them);
        the selectivity level is a range (RETH) or the whole MR (the RETH's address and
        length ignored). A persistent placement cannot be granted on nsnic: no MR holds
        FLUSH_PERSISTENT (the host has no persistent memory)."""
        bump(self._c, "flushes")
        plt, sel = p.feth_plt, p.feth_sel
        if plt not in _FLUSH_TYPES or sel not in (_SEL_RANGE, _SEL_MR):
            self._fatal_nak(qp, p.psn, Syndrome.NAK_INV_REQ, t)  # reserved values
            return
        need = _FLUSH_TYPES[plt]
        if qp.access & need != need:
            self._fatal_nak(qp, p.psn, Syndrome.NAK_REM_ACCESS, t)
            return
        va, length = p.reth_va, p.reth_len
        if sel == _SEL_MR:
            mpt, _ = self._xlate.mpt(p.reth_rkey)
            if mpt is not None:
                va, length = mpt.start, mpt.length
        st, _, ready = self.mmu.check_walk([(p.reth_rkey, va, length)], qp.pd, need, t,
                                           qp.qpn)
        if self._refused(qp, p, st, t):
            return
        landed = self.pcie.writes_landed_by()
        self._placed(qp, p, max(ready, landed))

    def _atomic_write(self, qp: QpCtx, p: Packet, t: float) -> None:
        """ATOMIC WRITE: the 8-byte payload written at the RETH's address in one access (no
        other access through this NIC sees half of it), then a READ RESPONSE without payload
        once it is in memory. REMOTE_WRITE on the QP and the region (NAK remote access), 8
        bytes to an 8-byte aligned address (NAK invalid request, as rxe's misaligned
        atomic)."""
        bump(self._c, "atomic_writes")
        if not qp.access & _RW:
            self._fatal_nak(qp, p.psn, Syndrome.NAK_REM_ACCESS, t)
            return
        if p.reth_len != 8 or p.payload_len != 8:
            self._length_error(qp, p, t, "8 bytes, DMA length 8")
            return
        va = p.reth_va
        st, segs, ready = self.mmu.translate(p.reth_rkey, qp.pd, _RW, va, 8, t, qp.qpn)
        if self._refused(qp, p, st, t):
            return
        if va & 7:
            self._fatal_nak(qp, p.psn, Syndrome.NAK_INV_REQ, t)
            return
        done = self.dma.write(segs[0][0], bytes(p.payload), ready)
        self._c["bytes_placed"] += 8
        self._placed(qp, p, done)

    def _refused(self, qp: QpCtx, p: Packet, st: XlateStatus, t: float) -> bool:
        """Answer a request whose R_Key check failed, and say whether it did: a page not
        present (ODP) faults and RNR-NAKs so the retry finds it mapped; anything else (key,
        PD, right, bounds) NAKs remote access, a class C error (_fatal_nak)."""
        if st is XlateStatus.OK:
            return False
        if st is XlateStatus.PAGE_FAULT:
            self._fault_rnr(qp, p.psn, t)
        else:
            self._fatal_nak(qp, p.psn, Syndrome.NAK_REM_ACCESS, t)
        return True

    def _placed(self, qp: QpCtx, p: Packet, t: float) -> None:
        """A FLUSH or ATOMIC WRITE done: remember it for its duplicates, count it, answer."""
        self._remember(qp, RdRes(p.psn, p.psn, p.reth_rkey, p.reth_va, p.reth_len,
                                 placement=True))
        qp.epsn = (p.psn + 1) & PSN_MASK
        qp.msn = (qp.msn + 1) & 0xFFFFFF
        qp.resp.unacked = 0
        self._placement_response(qp, p.psn, t)

    def _placement_response(self, qp: QpCtx, psn: int, t: float) -> None:
        assert qp.builder is not None
        frame = qp.builder.make(Opcode.RC_RDMA_READ_RESPONSE_ONLY, qp.dest_qpn, psn,
                                aeth(Syndrome.ACK | Syndrome.CREDITS_UNLIMITED, qp.msn))
        self._respond(qp, frame, t)

    def _atomic_ack(self, qp: QpCtx, psn: int, orig: int, t: float) -> None:
        assert qp.builder is not None
        frame = qp.builder.make(Opcode.RC_ATOMIC_ACKNOWLEDGE, qp.dest_qpn, psn,
                                aeth(Syndrome.ACK | Syndrome.CREDITS_UNLIMITED, qp.msn)
                                + atomic_ack_eth(orig))
        self._respond(qp, frame, t)

    def _respond(self, qp: QpCtx, frame: bytes | Unbuilt, t: float) -> None:
        """Send a response: straight to the port, unless READ responses of this QP are still
        queued, in which case it waits behind them (responses go out in PSN order, C9-96)."""
        r = qp.resp
        if not r.jobs_queued:
            self.port.send(frame, t)
            return
        r.jobs_queued += 1
        engine = self.engine
        env = self.env

        def job() -> Generator[simpy.Event, None, None]:
            try:
                wait = engine.emit(frame, t)
                if wait > env.now or engine.port.queued:
                    yield from engine.window(wait)
            finally:
                r.jobs_queued -= 1

        engine.add_job(job)

    # -- duplicates -------------------------------------------------------------------------

    @staticmethod
    def _remembered(qp: QpCtx) -> str:
        """What a duplicate READ or atomic may repeat (for RX_VIOLATION): the requests the
        responder remembers."""
        rd = qp.resp.rd_res
        if not rd:
            return "a duplicate of a remembered READ or atomic (none remembered)"
        return "a duplicate of " + ", ".join(
            f"{'atomic' if r.orig is not None else 'READ'} PSN {r.first_psn:#08x}"
            + (f"-{r.last_psn:#08x} VA {r.va:#x} length {r.length}" if r.orig is None else "")
            for r in rd)

    def _duplicate(self, qp: QpCtx, p: Packet, t: float) -> None:
        """A request already executed (IBA 9.7.5.1.1): a SEND or WRITE is acknowledged again
        (once per message, on its AckReq packet, so a go-back-N burst draws no ACK storm;
        C9-105) and never re-executed; a READ is executed again from the requested PSN and
        an atomic answered from its remembered result, but only if it is a duplicate of one
        the responder remembers. Anything else is a class D error, dropped silently (9.9.3):
        otherwise a few bytes of forged requests would draw any amount of response."""
        kind = p.info.kind
        if kind is Kind.SEND or kind is Kind.WRITE:
            if p.ackreq:
                self._ack(qp, (qp.epsn - 1) & PSN_MASK, t)
            return
        res = self._find(qp, p.psn)
        if kind is Kind.FLUSH or kind is Kind.ATOMIC_WRITE:
            # Answered again from the remembered result, never executed twice.
            if res is None or not res.placement or res.first_psn != p.psn:
                bump(self._c, "duplicate_placement_dropped")
                self._broke(qp, Rule.INVALID_DUPLICATE, self._remembered(qp),
                            f"{p.name} at PSN {p.psn:#08x}")
                return
            bump(self._c, "placement_replays")
            self._placement_response(qp, p.psn, t)
            return
        if kind is Kind.READ_REQ:
            # The request must ask for the rest of the remembered READ from that PSN on,
            # with its R_Key: the PSN's packet offset matches the address's (rxe checks a
            # subset; a PSN that does not match its address would misplace data).
            if res is None or res.orig is not None or res.placement or \
                    p.reth_rkey != res.rkey or \
                    p.reth_va - res.va != psn_diff(p.psn, res.first_psn) * qp.mtu or \
                    p.reth_va + p.reth_len != res.va + res.length:
                self._c["duplicate_read_dropped"] += 1
                self._broke(qp, Rule.INVALID_DUPLICATE, self._remembered(qp),
                            f"READ at PSN {p.psn:#08x}, VA {p.reth_va:#x}, length "
                            f"{p.reth_len}, R_Key {p.reth_rkey:#x}")
                return
            if not qp.access & _RR:
                self._fatal_nak(qp, p.psn, Syndrome.NAK_REM_ACCESS, t)
                return
            self._c["read_replays"] += 1
            src = self._read_source(qp, p, t)
            if src is not None:
                self._queue_read_response(qp, p, src, counted=False)
            return
        if res is None or res.orig is None or res.first_psn != p.psn:
            self._c["duplicate_atomic_dropped"] += 1
            self._broke(qp, Rule.INVALID_DUPLICATE, self._remembered(qp),
                        f"{p.name} at PSN {p.psn:#08x}")
            return
        self._c["atomic_replays"] += 1
        self._atomic_ack(qp, p.psn, res.orig, t)
