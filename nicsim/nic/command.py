"""The command processor: the NIC's firmware side of the command mailbox.

The driver writes an input block to host memory, programs CMD_OPCODE/CMD_IN/CMD_OUT/CMD_MOD
and writes CMD_GO. The NIC reads the input by DMA, executes after a firmware latency, writes
the output by DMA and clears the busy bit in CMD_STATUS with a status code.

Commands after which the driver releases memory the NIC could reach (INVALIDATE_MPT before
the pages are unpinned, DESTROY_QP and DESTROY_CQ before the rings are freed) are fenced:
they stop the NIC's use of the memory at once, and they complete only when every DMA write
the NIC issued before them has landed. When the driver sees the status, nothing of the NIC's
is still on its way into that memory.
"""

from __future__ import annotations

from collections.abc import Callable, Generator

import simpy

from nicsim.host.pcie import Pcie
from nicsim.hwif import (
    CMD_BUSY,
    CQC_SIZE,
    GSI_QPN,
    MCAST_GID_SIZE,
    MPT_SIZE,
    MPT_SW_SIZE,
    MTT_ENTRY_SIZE,
    QPC_SIZE,
    RESUME_FAILED,
    CmdOpcode,
    CmdStatus,
    Cqc,
    CqState,
    DevCap,
    DevFeature,
    DeviceCaps,
    Eqc,
    HcaInit,
    Mpt,
    OdpCaps,
    OdpGeneral,
    OdpRange,
    OdpTransport,
    PathMtu,
    PortInfo,
    PortPhysState,
    PortState,
    QpAttrMask,
    Qpc,
    QpState,
    QpType,
    Srqc,
    blank_qpc,
    cqe_stride,
    device_commands,
    unpack_mtt,
)
from nicsim.nic.cc.control import RateControl
from nicsim.nic.completer import Completer
from nicsim.nic.config import NicConfig
from nicsim.nic.counters import bump, new_counters
from nicsim.nic.cq import CqCtx, CqWriter
from nicsim.nic.dma import Dma
from nicsim.nic.eq import EventQueues
from nicsim.nic.framing import Framing
from nicsim.nic.multicast import McastError, Multicast
from nicsim.nic.odp import PageFaults
from nicsim.nic.port import Port
from nicsim.nic.qp import QpCtx, RespCtx
from nicsim.nic.scheduler import SendEngine
from nicsim.nic.srq import SharedReceiveQueues, SrqCtx
from nicsim.nic.translation import TranslationCache
from nicsim.nic.windows import MemoryWindows
from nicsim.nic.wqe_fetch import WqeFetch
from nicsim.sim import Sim
from nicsim.sim.tracer import Stage, Tracer

_IN_SIZE = {
    CmdOpcode.INIT_HCA: HcaInit.size(),
    CmdOpcode.CREATE_CQ: CQC_SIZE,
    CmdOpcode.RESIZE_CQ: CQC_SIZE,
    CmdOpcode.RESIZE_SRQ: Srqc.size(),
    CmdOpcode.CREATE_QP: QPC_SIZE,
    CmdOpcode.MODIFY_QP: QPC_SIZE,
    CmdOpcode.WRITE_MPT: MPT_SW_SIZE,
    CmdOpcode.CREATE_EQ: Eqc.size(),
    CmdOpcode.CREATE_SRQ: Srqc.size(),
    CmdOpcode.MODIFY_SRQ: Srqc.size(),
    CmdOpcode.ODP_INVALIDATE: OdpRange.size(),
    CmdOpcode.ATTACH_MCAST: MCAST_GID_SIZE,
    CmdOpcode.DETACH_MCAST: MCAST_GID_SIZE,
}
# What an ODP region may be used for: every RC operation the NIC has, and UD sends and
# receives (the set rxe reports since Linux 6.13, without FLUSH and ATOMIC_WRITE).
_RC_ODP = (OdpTransport.SEND | OdpTransport.RECV | OdpTransport.WRITE | OdpTransport.READ
           | OdpTransport.ATOMIC | OdpTransport.SRQ_RECV | OdpTransport.FLUSH
           | OdpTransport.ATOMIC_WRITE)
_UD_ODP = OdpTransport.SEND | OdpTransport.RECV | OdpTransport.SRQ_RECV

# Commands whose completion the driver takes as "the NIC no longer reaches this memory".
_FENCED = (CmdOpcode.INVALIDATE_MPT, CmdOpcode.ODP_INVALIDATE, CmdOpcode.DESTROY_QP,
           CmdOpcode.DESTROY_CQ,
           CmdOpcode.DESTROY_EQ, CmdOpcode.DESTROY_SRQ, CmdOpcode.RESIZE_CQ,
           CmdOpcode.RESIZE_SRQ)

# Transitions the hardware accepts (IBA 10.3.1, figure 124); the kernel checks attributes.
_LEGAL = {
    (QpState.RESET, QpState.INIT), (QpState.INIT, QpState.INIT), (QpState.INIT, QpState.RTR),
    (QpState.RTR, QpState.RTS), (QpState.RTS, QpState.RTS), (QpState.RTS, QpState.SQD),
    (QpState.SQD, QpState.SQD), (QpState.SQD, QpState.RTS), (QpState.SQE, QpState.RTS),
}


class CommandError(Exception):
    def __init__(self, status: CmdStatus) -> None:
        super().__init__(status.name)
        self.status = status


def dev_caps(cfg: NicConfig) -> DevCap:
    """DeviceCaps.flags of a configuration: the command sets it has, the transports and
    operations it lacks."""
    flags = DevCap.ODP if cfg.odp else DevCap(0)
    if not cfg.ud:
        flags |= DevCap.NO_UD
    if not cfg.uc:
        flags |= DevCap.NO_UC
    if not cfg.atomics:
        flags |= DevCap.NO_ATOMICS
    return flags


class CommandProcessor:
    """The firmware. It owns the tables the commands write (QPs, and through their blocks the
    CQs, EQs, SRQs, multicast groups, MPT and MTT) and tells the engines of what changed."""

    def __init__(self, env: Sim, cfg: NicConfig, features: DevFeature, *, dma: Dma,
                 pcie: Pcie, xlate: TranslationCache, qps: dict[int, QpCtx], cq: CqWriter,
                 eq: EventQueues, srq: SharedReceiveQueues, mcast: Multicast,
                 windows: MemoryWindows, faults: PageFaults, fetch: WqeFetch,
                 engine: SendEngine, completer: Completer, cc: RateControl | None,
                 port: Port, framing: Framing) -> None:
        self.env = env
        self.cfg = cfg
        self.dma, self.pcie, self.xlate, self.qps = dma, pcie, xlate, qps
        self.cq, self.eq, self.srq, self.mcast = cq, eq, srq, mcast
        self.windows, self.faults, self.fetch, self.engine = windows, faults, fetch, engine
        self.completer, self.cc, self.port, self.framing = completer, cc, port, framing
        self.tracer: Tracer | None = None
        self.status = 0
        self.counters = new_counters("commands", "command_errors")
        self.caps = DeviceCaps(cfg.max_qp, cfg.max_cq, 1 << cfg.log_mpt_entries,
                               1 << cfg.log_mtt_entries, cfg.max_qp_wr, cfg.max_sge,
                               cfg.max_cqe, cfg.max_qp_rd_atom, cfg.max_inline, cfg.max_uar,
                               cfg.max_eq, cfg.max_srq, dev_caps(cfg),
                               cfg.scatter_to_cqe_bytes)
        # What this configuration executes; the rest is BAD_OPCODE (nothing is read).
        self.known = device_commands(self.caps, features)

    def go(self, opcode: int, pa_in: int, pa_out: int, mod: int) -> None:
        if self.status & CMD_BUSY:
            return  # a GO while busy is ignored, as the register spec says
        self.status = CMD_BUSY
        self.env.process(self._run(opcode, pa_in, pa_out, mod))

    def _run(self, opcode: int, pa_in: int, pa_out: int,
             mod: int) -> Generator[simpy.Event, None, None]:
        env = self.env
        self.counters["commands"] += 1
        op = CmdOpcode(opcode) if opcode in CmdOpcode._value2member_map_ else None
        if op not in self.known:
            yield env.timeout(self.cfg.firmware_ns)
            self._done(CmdStatus.BAD_OPCODE)
            return
        n_in = _IN_SIZE.get(op, 0)
        if op is CmdOpcode.WRITE_MTT:
            n_in = 8 + 8 * int.from_bytes(self.dma.mem.read(pa_in, 4), "little")
        raw = b""
        if n_in:
            raw, t = self.dma.read(pa_in, n_in)
            yield env.timeout(t - env.now)
        yield env.timeout(self.cfg.firmware_ns)
        try:
            out = _HANDLERS[op](self, raw, mod)
        except CommandError as e:
            self.counters["command_errors"] += 1
            self._done(e.status)
            return
        if out:
            t = self.dma.write(pa_out, out)
            yield env.timeout(t - env.now)
        if op in _FENCED:
            t = self.pcie.writes_landed_by()
            if t > env.now:
                bump(self.counters, "fence_waits")
                yield env.timeout(t - env.now)
        self._done(CmdStatus.OK)

    def _done(self, status: CmdStatus) -> None:
        self.status = int(status)
        if self.tracer is not None:
            self.tracer.emit(Stage.COMMAND_DONE, status.name)

    def read_status(self) -> int:
        return self.status

    # -- commands (one handler each: _HANDLERS) ---------------------------------------------

    def _query_device(self, _raw: bytes, _mod: int) -> bytes:
        return self.caps.pack()

    def _query_port(self, _raw: bytes, mod: int) -> bytes:
        if mod != 1:  # one port, numbered from 1 (IBA 14.2.5.6)
            raise CommandError(CmdStatus.BAD_PARAM)
        link = self.port.link
        if link is None:
            return PortInfo(PortState.DOWN, PortPhysState.POLLING, PathMtu.MTU_4096, 0).pack()
        return PortInfo(PortState.ACTIVE, PortPhysState.LINK_UP, PathMtu.MTU_4096,
                        round(link.cfg.rate_gbps * 1000)).pack()

    def _init_hca(self, raw: bytes, _mod: int) -> bytes:
        h = HcaInit.unpack(raw)
        cfg = self.cfg
        if h.log_mpt_entries > cfg.log_mpt_entries or h.log_mtt_entries > cfg.log_mtt_entries:
            raise CommandError(CmdStatus.EXCEED_LIM)
        x = self.xlate
        x.mpt_base, x.mtt_base = h.mpt_base, h.mtt_base
        x.mpt_entries, x.mtt_entries = 1 << h.log_mpt_entries, 1 << h.log_mtt_entries
        return b""

    def _write_mpt(self, raw: bytes, mod: int) -> bytes:
        """WRITE_MPT, and INVALIDATE_MPT (no input: the entry is zeroed)."""
        x = self.xlate
        self._check_index(mod, x.mpt_entries)
        # An MR that memory windows are bound to is neither rewritten nor invalidated
        # (nicsim.nic.windows); a bound window rewritten or invalidated stops being bound.
        if self.windows.busy(mod):
            raise CommandError(CmdStatus.BUSY)
        self.windows.forget(mod)
        self.dma.write(x.mpt_base + mod * MPT_SIZE,
                       Mpt.from_sw(raw).pack() if raw else bytes(MPT_SIZE))
        x.invalidate_mpt(mod)
        self.faults.forget(mod)
        return b""

    def _write_mtt(self, raw: bytes, mod: int) -> bytes:
        pas = unpack_mtt(raw)
        x = self.xlate
        if mod + len(pas) > x.mtt_entries:
            raise CommandError(CmdStatus.EXCEED_LIM)
        self.dma.write(x.mtt_base + mod * MTT_ENTRY_SIZE, raw[8:])
        x.invalidate_mtt(mod, len(pas))
        return b""

    def _cq(self, mod: int) -> CqCtx:
        cq = self.cq.cqs.get(mod)
        if cq is None:
            raise CommandError(CmdStatus.BAD_RESOURCE)
        return cq

    def _create_cq(self, raw: bytes, _mod: int) -> bytes:
        c = Cqc.unpack(raw)
        cfg = self.cfg
        if c.cqn in self.cq.cqs or c.cqn >= cfg.max_cq or not 0 < c.uar <= cfg.max_uar:
            raise CommandError(CmdStatus.BAD_PARAM)
        if (1 << c.log_size) > cfg.max_cqe:
            raise CommandError(CmdStatus.EXCEED_LIM)
        self.cq.cqs[c.cqn] = CqCtx(c.cqn, c.log_size, c.base, c.dbrec, c.eqn, uar=c.uar,
                                   stride=cqe_stride(cfg.scatter_to_cqe_bytes))
        return b""

    def _query_cq(self, _raw: bytes, mod: int) -> bytes:
        cq = self._cq(mod)
        return Cqc(cq.cqn, cq.log_size, CqState.OVERRUN if cq.overrun else CqState.OK,
                   cq.base, cq.dbrec, cq.eqn, cq.uar).pack()

    def _resize_cq(self, raw: bytes, mod: int) -> bytes:
        cq = self._cq(mod)
        c = Cqc.unpack(raw)
        if (1 << c.log_size) > self.cfg.max_cqe:
            raise CommandError(CmdStatus.EXCEED_LIM)
        if not self.cq.resize(cq, c.base, c.log_size):
            raise CommandError(CmdStatus.BAD_PARAM)
        return b""

    def _destroy_cq(self, _raw: bytes, mod: int) -> bytes:
        if self._cq(mod).refs:
            raise CommandError(CmdStatus.BUSY)
        del self.cq.cqs[mod]
        return b""

    def _create_eq(self, raw: bytes, _mod: int) -> bytes:
        e = Eqc.unpack(raw)
        if e.eqn in self.eq.eqs or e.eqn >= self.cfg.max_eq or not 0 < e.log_size <= 16:
            raise CommandError(CmdStatus.BAD_PARAM)
        self.eq.create(e)
        return b""

    def _destroy_eq(self, _raw: bytes, mod: int) -> bytes:
        if self.eq.eqs.pop(mod, None) is None:
            raise CommandError(CmdStatus.BAD_RESOURCE)
        return b""

    def _query_qp(self, _raw: bytes, mod: int) -> bytes:
        qp = self.qps.get(mod)
        if qp is None:
            raise CommandError(CmdStatus.BAD_RESOURCE)
        return self._qpc_of(qp).pack()

    def _destroy_qp(self, _raw: bytes, mod: int) -> bytes:
        qp = self.qps.pop(mod, None)
        if qp is None:
            raise CommandError(CmdStatus.BAD_RESOURCE)
        self.mcast.forget_qp(mod)
        self.windows.forget_qp(mod)  # its type 2 windows go with it
        for cqn in (qp.send_cqn, qp.recv_cqn):
            if cqn in self.cq.cqs:
                self.cq.cqs[cqn].refs -= 1
        if qp.srq is not None:
            qp.srq.refs -= 1
        # Every engine checks the state before it touches the QP's memory again.
        self._reset(qp)
        return b""

    def _odp(self, op: CmdOpcode, raw: bytes, mod: int) -> bytes:
        """QUERY_ODP, RESUME_PAGE_FAULT and ODP_INVALIDATE."""
        if op is CmdOpcode.QUERY_ODP:
            return OdpCaps(OdpGeneral.SUPPORT, _RC_ODP, 0, _UD_ODP).pack()
        x = self.xlate
        idx = mod & ~RESUME_FAILED
        self._check_index(idx, x.mpt_entries)
        if op is CmdOpcode.RESUME_PAGE_FAULT:
            self.faults.resume(idx, bool(mod & RESUME_FAILED))
            return b""
        # ODP_INVALIDATE: the entries become not present, and what was translated through
        # the region is revoked before the driver lets the pages go (fenced).
        r = OdpRange.unpack(raw)
        if r.first + r.count > x.mtt_entries:
            raise CommandError(CmdStatus.EXCEED_LIM)
        self.dma.write(x.mtt_base + r.first * MTT_ENTRY_SIZE, bytes(r.count * MTT_ENTRY_SIZE))
        x.invalidate_mtt(r.first, r.count)
        x.invalidate_mpt(idx)
        return b""

    @staticmethod
    def _check_index(i: int, n: int) -> None:
        if not 0 <= i < n:
            raise CommandError(CmdStatus.EXCEED_LIM)

    def _srq_of(self, mod: int) -> SrqCtx:
        srq = self.srq.srqs.get(mod)
        if srq is None:
            raise CommandError(CmdStatus.BAD_RESOURCE)
        return srq

    def _create_srq(self, raw: bytes, _mod: int) -> bytes:
        c = Srqc.unpack(raw)
        cfg = self.cfg
        if c.srqn in self.srq.srqs or not 0 < c.srqn < cfg.max_srq or \
                not 0 < c.uar <= cfg.max_uar:
            raise CommandError(CmdStatus.BAD_PARAM)
        if (1 << c.log_size) > cfg.max_qp_wr:
            raise CommandError(CmdStatus.EXCEED_LIM)
        self.srq.srqs[c.srqn] = SrqCtx(c.srqn, c.pd, c.base, c.log_size, c.log_stride,
                                       c.limit, c.uar)
        return b""

    def _modify_srq(self, raw: bytes, mod: int) -> bytes:
        srq = self._srq_of(mod)
        c = Srqc.unpack(raw)
        if c.limit > srq.wqes + (1 << srq.rq_log_size):
            raise CommandError(CmdStatus.BAD_PARAM)
        srq.limit = c.limit
        return b""

    def _resize_srq(self, raw: bytes, mod: int) -> bytes:
        srq = self._srq_of(mod)
        c = Srqc.unpack(raw)
        if (1 << c.log_size) > self.cfg.max_qp_wr:
            raise CommandError(CmdStatus.EXCEED_LIM)
        if c.log_stride != srq.rq_log_stride or \
                not self.srq.resize(srq, self.dma, c.base, c.log_size):
            raise CommandError(CmdStatus.BAD_PARAM)
        return b""

    def _query_srq(self, _raw: bytes, mod: int) -> bytes:
        srq = self._srq_of(mod)
        return Srqc(srq.srqn, srq.pd, srq.rq_base, srq.rq_log_size, srq.rq_log_stride,
                    srq.limit, srq.uar, srq.wqes).pack()

    def _destroy_srq(self, _raw: bytes, mod: int) -> bytes:
        if self._srq_of(mod).refs:  # an SRQ that QPs still receive from
            raise CommandError(CmdStatus.BUSY)
        del self.srq.srqs[mod]
        return b""

    def _create_qp(self, raw: bytes, srqn: int) -> bytes:
        c = Qpc.unpack(raw)
        cfg = self.cfg
        if c.qpn in self.qps or not 0 < c.qpn < cfg.max_qp or not 0 < c.uar <= cfg.max_uar:
            raise CommandError(CmdStatus.BAD_PARAM)
        srq = self.srq.srqs.get(srqn) if srqn else None
        if srqn and srq is None:
            raise CommandError(CmdStatus.BAD_RESOURCE)
        try:
            qtype = QpType(c.type)
        except ValueError:
            raise CommandError(CmdStatus.BAD_PARAM) from None
        if qtype is QpType.UC and not cfg.uc or \
                qtype is QpType.UD and not cfg.ud and c.qpn != GSI_QPN:
            raise CommandError(CmdStatus.BAD_PARAM)  # (DevCap.NO_UC, NO_UD)
        for cqn in (c.send_cqn, c.recv_cqn):
            if cqn not in self.cq.cqs:
                raise CommandError(CmdStatus.BAD_RESOURCE)
        for cqn in (c.send_cqn, c.recv_cqn):
            self.cq.cqs[cqn].refs += 1
        self.qps[c.qpn] = q = QpCtx(c.qpn, qtype, c.pd, c.send_cqn, c.recv_cqn, c.sq_base,
                                   c.sq_log_size, c.sq_log_stride, c.rq_base, c.rq_log_size,
                                   c.rq_log_stride, uar=c.uar, srq=srq)
        if srq is not None:
            srq.refs += 1
        if qtype is QpType.UD:
            q.mtu = PathMtu.MTU_4096.bytes  # a datagram is one packet of up to the port's MTU
        return b""

    def _modify_qp(self, raw: bytes, _mod: int) -> bytes:
        c = Qpc.unpack(raw)
        qp = self.qps.get(c.qpn)
        if qp is None:
            raise CommandError(CmdStatus.BAD_RESOURCE)
        m = QpAttrMask(c.attr_mask)
        try:
            new = QpState(c.state) if m & QpAttrMask.STATE else qp.state
        except ValueError:
            raise CommandError(CmdStatus.BAD_PARAM) from None  # no such state (as the RTL)
        if m & QpAttrMask.AV and not 0 <= c.sgid_index < len(self.framing.gids):
            raise CommandError(CmdStatus.BAD_PARAM)  # no such source GID in the port's table
        old = qp.state
        if new is QpState.RESET:
            self._reset(qp)
        elif new is QpState.ERR:
            self.completer.qp_error(qp)
        elif (old, new) not in _LEGAL:
            raise CommandError(CmdStatus.BAD_STATE)
        if new not in (QpState.RESET, QpState.ERR):
            self._apply(qp, c, m)
            qp.state = new
            if new is QpState.RTS and (qp.sq_pending or qp.fetched):
                self.engine.kick(qp)
        # (A move to ERR is the completer's, which tells the tracer itself.)
        if old is not new and new is not QpState.ERR and self.tracer is not None:
            self.tracer.emit(Stage.QP_STATE, qp.qpn, old.name, new.name)
        return b""

    def _reset(self, qp: QpCtx) -> None:
        qp.state = QpState.RESET
        qp.sq_pi = qp.sq_fetch = qp.rq_pi = qp.rq_ci = 0
        self.fetch.reset(qp)
        qp.outstanding.clear()
        qp.cur = None
        qp.redo.clear()
        qp.recv_outstanding = qp.rd_outstanding = qp.recv_msgs_sent = 0
        qp.recv_limit = qp.resend_psn = qp.timer_deadline = None
        qp.resp = RespCtx()
        qp.builder = None
        qp.rx_addrs = None
        if self.cc is not None:
            self.cc.forget(qp)
        qp.next_tx = qp.last_tx = 0.0
        qp.held = False
        qp.pace_gen += 1
        qp.cnp_at = float("-inf")
        self.faults.drop(qp)  # a send WQE waiting for a page fault is gone with the rest

    def _apply(self, qp: QpCtx, c: Qpc, m: QpAttrMask) -> None:
        M = QpAttrMask
        if m & M.ACCESS_FLAGS:
            if c.access != qp.access:
                # Takes effect at once, inside a message too (the responder checks the QP's
                # rights on every packet, as rxe's check_op_valid does): messages in flight
                # re-validate at their next packet.
                self.xlate.bump()
            qp.access = c.access
        if m & M.PATH_MTU:
            qp.mtu = 128 << c.path_mtu
        if m & M.DEST_QPN:
            qp.dest_qpn = c.dest_qpn
        if m & M.RQ_PSN:
            qp.epsn = c.rq_psn & 0xFFFFFF
        if m & M.SQ_PSN:
            qp.sq_psn = c.sq_psn & 0xFFFFFF
        if m & M.TIMEOUT:
            qp.timeout = c.timeout
        if m & M.RETRY_CNT:
            qp.retry_cnt = qp.retry_left = c.retry_cnt
        if m & M.RNR_RETRY:
            qp.rnr_retry = qp.rnr_left = c.rnr_retry
        if m & M.MIN_RNR_TIMER:
            qp.min_rnr_timer = c.min_rnr_timer
        if m & M.MAX_QP_RD_ATOMIC:
            qp.max_rd_atomic = c.max_rd_atomic
        if m & M.MAX_DEST_RD_ATOMIC:
            qp.max_dest_rd_atomic = c.max_dest_rd_atomic
        if m & M.QKEY:
            qp.qkey = c.qkey
        if m & M.AV:
            qp.dmac, qp.smac, qp.sgid, qp.dgid = c.dmac, c.smac, c.sgid, c.dgid
            qp.sgid_index = c.sgid_index
            qp.traffic_class = c.traffic_class
        if m & (M.AV | M.DEST_QPN) and qp.dest_qpn and any(qp.dgid):
            qp.builder = self.framing.builder_for(qp)
            path = qp.builder.path
            qp.rx_addrs = path.dip + path.sip  # a frame from the peer: its IP, then ours

    def _qpc_of(self, qp: QpCtx) -> Qpc:
        c = blank_qpc(qp.qpn)
        c.state, c.type, c.pd, c.access = qp.state, qp.type, qp.pd, qp.access
        c.path_mtu = qp.mtu.bit_length() - 8
        c.send_cqn, c.recv_cqn = qp.send_cqn, qp.recv_cqn
        c.sq_base, c.rq_base = qp.sq_base, qp.rq_base
        c.sq_log_size, c.sq_log_stride = qp.sq_log_size, qp.sq_log_stride
        c.rq_log_size, c.rq_log_stride = qp.rq_log_size, qp.rq_log_stride
        c.timeout, c.retry_cnt, c.rnr_retry = qp.timeout, qp.retry_cnt, qp.rnr_retry
        c.min_rnr_timer, c.dest_qpn = qp.min_rnr_timer, qp.dest_qpn
        c.sq_psn, c.rq_psn, c.qkey = qp.sq_psn, qp.epsn, qp.qkey
        c.dmac, c.smac, c.sgid, c.dgid = qp.dmac, qp.smac, qp.sgid, qp.dgid
        c.sgid_index = qp.sgid_index
        c.pkey, c.max_rd_atomic = qp.pkey, qp.max_rd_atomic
        c.max_dest_rd_atomic, c.traffic_class = qp.max_dest_rd_atomic, qp.traffic_class
        c.uar = qp.uar
        return c


Handler = Callable[[CommandProcessor, bytes, int], bytes]


def _mcast(attach: bool) -> Handler:
    def handler(cp: CommandProcessor, raw: bytes, mod: int) -> bytes:
        try:
            (cp.mcast.attach if attach else cp.mcast.detach)(mod, bytes(raw))
        except McastError as e:
            raise CommandError(e.status) from None
        return b""
    return handler


def _odp(op: CmdOpcode) -> Handler:
    def handler(cp: CommandProcessor, raw: bytes, mod: int) -> bytes:
        return cp._odp(op, raw, mod)
    return handler


C = CommandProcessor
# The handler of each command (what `device_commands` leaves out is BAD_OPCODE first).
_HANDLERS: dict[CmdOpcode | None, Handler] = {
    CmdOpcode.QUERY_DEVICE: C._query_device, CmdOpcode.QUERY_PORT: C._query_port,
    CmdOpcode.INIT_HCA: C._init_hca, CmdOpcode.WRITE_MPT: C._write_mpt,
    CmdOpcode.INVALIDATE_MPT: C._write_mpt, CmdOpcode.WRITE_MTT: C._write_mtt,
    CmdOpcode.CREATE_CQ: C._create_cq, CmdOpcode.QUERY_CQ: C._query_cq,
    CmdOpcode.RESIZE_CQ: C._resize_cq, CmdOpcode.DESTROY_CQ: C._destroy_cq,
    CmdOpcode.CREATE_EQ: C._create_eq, CmdOpcode.DESTROY_EQ: C._destroy_eq,
    CmdOpcode.CREATE_SRQ: C._create_srq, CmdOpcode.MODIFY_SRQ: C._modify_srq,
    CmdOpcode.RESIZE_SRQ: C._resize_srq, CmdOpcode.QUERY_SRQ: C._query_srq,
    CmdOpcode.DESTROY_SRQ: C._destroy_srq, CmdOpcode.CREATE_QP: C._create_qp,
    CmdOpcode.MODIFY_QP: C._modify_qp, CmdOpcode.QUERY_QP: C._query_qp,
    CmdOpcode.DESTROY_QP: C._destroy_qp,
    CmdOpcode.ATTACH_MCAST: _mcast(True), CmdOpcode.DETACH_MCAST: _mcast(False),
    CmdOpcode.QUERY_ODP: _odp(CmdOpcode.QUERY_ODP),
    CmdOpcode.RESUME_PAGE_FAULT: _odp(CmdOpcode.RESUME_PAGE_FAULT),
    CmdOpcode.ODP_INVALIDATE: _odp(CmdOpcode.ODP_INVALIDATE),
}
