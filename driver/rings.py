"""The nsnic user-space provider (like rdma-core's providers/mlx5): the data path.

post_send writes WQEs into the SQ ring in the process's memory and rings the doorbell with one
MMIO write; post_recv does the same for the RQ; poll_cq reads CQEs out of the CQ ring,
recognising new ones by the owner bit, and publishes the consumer index in the CQ's doorbell
record in host memory. None of it enters the kernel.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from nicsim.driver import sched
from nicsim.driver.abi import CreateCqResp, CreateQpResp, CreateSrqResp, DoorbellPage
from nicsim.driver.enums import ibv_qp_state, ibv_send_flags, ibv_wc_flags, ibv_wr_opcode

from nicsim.host.host import Host
from nicsim.host.memory import AddressSpace
from nicsim.hwif import (
    RECV_WQE_CTRL_SIZE,
    SGE_SIZE,
    WQE_INDEX_MASK,
    Access,
    Cqe,
    CqeFlags,
    CqeOpcode,
    CqeStatus,
    RecvWqeCtrl,
    SendWqeCtrl,
    Sge,
    UarReg,
    UdAv,
    VendorErr,
    WqeFlags,
    WqeOpcode,
    bf_burst_len,
    cqe_offset,
)

_WR_OPCODES = {int(o) for o in WqeOpcode}  # what an nsnic send WQE can carry
_VERBS_OPCODES = {int(o) for o in ibv_wr_opcode}
_CTRL, _SGE = SendWqeCtrl.FMT, Sge.FMT  # the hwif layouts
_SIGNALED = int(ibv_send_flags.IBV_SEND_SIGNALED)
_FENCE = int(ibv_send_flags.IBV_SEND_FENCE)
_SOLICITED = int(ibv_send_flags.IBV_SEND_SOLICITED)
_INLINE = int(ibv_send_flags.IBV_SEND_INLINE)
_WQE_INLINE = int(WqeFlags.INLINE)  # in the WQE's flags byte (hwif SendWqeCtrl offset 1)
_ATOMICS = (ibv_wr_opcode.IBV_WR_ATOMIC_CMP_AND_SWP, ibv_wr_opcode.IBV_WR_ATOMIC_FETCH_AND_ADD)
_WITH_IMM = (ibv_wr_opcode.IBV_WR_SEND_WITH_IMM, ibv_wr_opcode.IBV_WR_RDMA_WRITE_WITH_IMM)
MAX_MSG = 1 << 31  # the largest message (IBA 9.4.1 / rxe's validate_send_wr)
_U64, _U32 = (1 << 64) - 1, (1 << 32) - 1
_WR_FIELDS = (("wr_id", _U64), ("send_flags", _U32), ("imm_data", _U32), ("remote_addr", _U64),
              ("rkey", _U32), ("compare_add", _U64), ("swap", _U64), ("invalidate_rkey", _U32))


def _misfit(obj: object, fields: tuple[tuple[str, int], ...]) -> ProviderError:
    """The error for the first field of a WR or SGE that does not fit its C type (ibv_send_wr,
    ibv_sge), found after a fast check failed."""
    for name, top in fields:
        v = getattr(obj, name)
        if not isinstance(v, int) or not 0 <= v <= top:
            return ProviderError(f"{name} {v!r} does not fit its field", errno.EINVAL)
    if not isinstance(getattr(obj, "wr_id", 0), int):
        return ProviderError("wr_id is not an integer", errno.EINVAL)
    return ProviderError("a field does not fit", errno.EINVAL)  # pragma: no cover


_SGE_FIELDS = (("addr", _U64), ("length", _U32), ("lkey", _U32))


def _sges(wr: object, max_sge: int) -> list:
    """The WR's scatter/gather list, checked: num_sge entries, each field in range, the
    message at most 2^31 bytes."""
    sg = list(wr.sg or [])  # type: ignore[attr-defined]
    n = wr.num_sge  # type: ignore[attr-defined]
    if not isinstance(n, int) or not 0 <= n <= len(sg):
        raise ProviderError(f"num_sge {n!r} with {len(sg)} SGEs", errno.EINVAL)
    if n > max_sge:
        raise ProviderError(f"{n} SGEs > max_sge {max_sge}", errno.EINVAL)
    total = 0
    for s in sg[:n]:
        try:
            if not (0 <= s.addr <= _U64 and 0 <= s.length <= _U32 and 0 <= s.lkey <= _U32):
                raise TypeError
        except TypeError:
            raise _misfit(s, _SGE_FIELDS) from None
        total += s.length
    if total > MAX_MSG:
        raise ProviderError(f"message of {total} bytes > 2^31", errno.EINVAL)
    return sg[:n]


_UD_OPCODES = (ibv_wr_opcode.IBV_WR_SEND, ibv_wr_opcode.IBV_WR_SEND_WITH_IMM)
_INVALIDATES = (ibv_wr_opcode.IBV_WR_SEND_WITH_INV, ibv_wr_opcode.IBV_WR_LOCAL_INV)
_PLACEMENT = (ibv_wr_opcode.IBV_WR_FLUSH, ibv_wr_opcode.IBV_WR_ATOMIC_WRITE)
# The rights a window carries (ibv_access_flags' remote bits; LOCAL_WRITE is accepted and
# means nothing for a window, as in rxe).
_MW_RIGHTS = int(Access.REMOTE_WRITE | Access.REMOTE_READ | Access.REMOTE_ATOMIC)
_MW_ACCESS_OK = _MW_RIGHTS | int(Access.LOCAL_WRITE)


def _placement_fields(wr: object) -> tuple[int, int]:
    """A FLUSH's or ATOMIC_WRITE's control fields (hwif.WqeOpcode): (compare_add, swap)."""
    if wr.opcode == ibv_wr_opcode.IBV_WR_ATOMIC_WRITE:  # type: ignore[attr-defined]
        data = wr.atomic_wr  # type: ignore[attr-defined]
        if not isinstance(data, bytes) or len(data) != 8:
            raise ProviderError("ATOMIC_WRITE needs 8 bytes of data", errno.EINVAL)
        return 0, int.from_bytes(data, "little")
    n, ptype, level = wr.flush_length, wr.flush_type, wr.flush_level  # type: ignore
    if not (isinstance(n, int) and 0 <= n <= _U32 and isinstance(ptype, int)
            and 0 <= ptype <= 0xF and isinstance(level, int) and 0 <= level <= 3):
        # The RETH carries a 32-bit length, the FETH 4 bits of type and 2 of level.
        raise ProviderError(f"FLUSH length {n!r}, type {ptype!r}, level {level!r}",
                            errno.EINVAL)
    return n, ptype | level << 4


def _bind_fields(wr: object) -> tuple[int, int, int, int]:
    """A BIND_MW WR's control fields (hwif.SendWqeCtrl): the MR's L_Key, the window's
    start, length and rights | type << 8 (the new R_Key is the WR's rkey)."""
    mw, info = getattr(wr, "bind_mw", None), getattr(wr, "bind_info", None)
    mr = getattr(info, "mr", None)
    if mw is None or info is None or mr is None or getattr(mw, "closed", False):
        raise ProviderError("a BIND_MW WR needs a live MW and bind info (set_bind_wr)",
                            errno.EINVAL)
    access = int(info.mw_access_flags)  # type: ignore[attr-defined]
    if access & ~_MW_ACCESS_OK:
        raise ProviderError(f"memory window access 0x{access:x}", errno.EINVAL)
    return (mr.lkey, int(info.addr), int(info.length),  # type: ignore[attr-defined]
            (access & _MW_RIGHTS) | int(mw.mw_type) << 8)  # type: ignore[attr-defined]


def _ud_fields(wr: object) -> tuple[int, int, bytes]:
    """A UD WR's destination: remote QPN, Q_Key and the AH's address vector (hwif.UdAv)."""
    ah = getattr(wr, "ah", None)
    av = getattr(ah, "av", None)
    if av is None or getattr(ah, "closed", False):
        raise ProviderError("a UD WR needs a live AH (set_wr_ud)", errno.EINVAL)
    qpn, qkey = wr.remote_qpn, wr.remote_qkey  # type: ignore[attr-defined]
    if not (isinstance(qpn, int) and 0 <= qpn <= 0xFFFFFF and isinstance(qkey, int)
            and 0 <= qkey <= _U32):
        raise ProviderError(f"remote QPN {qpn!r} or Q_Key {qkey!r} out of range", errno.EINVAL)
    return qpn, qkey, UdAv(av.dmac, av.traffic_class, av.hop_limit, av.dgid,
                           av.flow_label, av.sgid_index).pack()


class ProviderError(Exception):
    def __init__(self, msg: str, errno_: int) -> None:
        super().__init__(msg)
        self.errno = errno_


@dataclass
class RawWc:
    """A decoded CQE before the verbs layer turns it into a WC."""

    wr_id: int
    status: int
    opcode: int
    vendor_err: int
    byte_len: int
    qp_num: int
    imm_data: int
    wc_flags: int
    src_qp: int = 0


def prefer_bf() -> bool:
    """Whether a post of one non-inline WR goes by BlueFlame too: yes unless the environment
    says NSNIC_POST_SEND_PREFER_BF=0, as mlx5's provider reads MLX5_POST_SEND_PREFER_BF."""
    return os.environ.get("NSNIC_POST_SEND_PREFER_BF", "1") != "0"


@dataclass
class ProviderQp:
    host: Host
    aspace: AddressSpace
    db: DoorbellPage
    r: CreateQpResp
    max_send_sge: int
    max_recv_sge: int
    max_inline: int
    sq_sig_all: bool
    state: int = ibv_qp_state.IBV_QPS_RESET
    prefer_bf: bool = field(default_factory=prefer_bf)
    ud: bool = False  # a UD QP: each WQE carries its address vector (hwif.UdAv)
    atomics: bool = True  # the device has atomics (abi.ContextResp)
    srq: ProviderSrq | None = None  # the SRQ it receives from
    pd: int = 0  # the handle of its PD (the L_Key check of a scattered SEND)
    rq_busy: list[bool] | None = None  # (a QP's own RQ completes in ring order)
    sq_head: int = 0  # WQEs posted (not wrapped)
    sq_tail: int = 0  # WQEs completed
    rq_head: int = 0
    rq_tail: int = 0
    sq_wrid: list[int] = field(default_factory=list)
    rq_wrid: list[int] = field(default_factory=list)
    # An observer's hook (nicsim.trace.breakdown): called with (qpn, WQE index) as each send WR
    # is written into the ring, at the time of the ibv_post_send call.
    on_post: Callable[[int, int], None] | None = None

    def __post_init__(self) -> None:
        self.sq_size = 1 << self.r.sq_log_size
        self.rq_size = 1 << self.r.rq_log_size
        self.sq_stride = 1 << self.r.sq_log_stride
        self.rq_stride = 1 << self.r.rq_log_stride
        self.sq_wrid = [0] * self.sq_size
        self.rq_wrid = [0] * self.rq_size

    def post_send(self, wr: object) -> None:
        """Post a chain of send WRs (via .next_wr). Raises ProviderError at the first bad WR;
        the WRs before it stay posted (ibv_post_send's bad_wr contract)."""
        if self.state not in (ibv_qp_state.IBV_QPS_RTS, ibv_qp_state.IBV_QPS_SQD,
                              ibv_qp_state.IBV_QPS_ERR):
            raise ProviderError("post_send on a QP that is not in RTS", errno.EINVAL)
        n = 0
        wqe = b""
        try:
            while wr is not None:
                wqe = self._write_send_wqe(wr)
                n += 1
                if self.on_post is not None:
                    self.on_post(self.r.qpn, self.sq_head - 1)
                wr = getattr(wr, "next_wr", None)
        finally:
            if n:
                costs = self.host.costs
                db = (self.r.qpn << 32) | (self.sq_head & WQE_INDEX_MASK)
                # A post of one WR goes by BlueFlame when its WQE fits the device's buffer
                # (inline data, or any WQE if prefer_bf: mlx5's default, its
                # MLX5_POST_SEND_PREFER_BF): the WQE is stored with the doorbell,
                # write-combined, and the NIC need not read it back from the ring.
                bf = bf_burst_len(len(wqe), self.db.bf_size) \
                    if n == 1 and (self.prefer_bf or wqe[1] & _WQE_INLINE) else 0
                if bf:
                    self.host.spend(costs.post_send + costs.mmio_write * (-(-bf // 64) - 1))
                    self.db.write_bf(db.to_bytes(8, "little") + wqe.ljust(bf - 8, b"\0"))
                else:
                    self.host.spend(costs.post_send * n)
                    self.db.write64(UarReg.SQ_DB, db)

    def _write_send_wqe(self, wr: object) -> bytes:
        """Write one WQE into the ring; returns its bytes."""
        op = wr.opcode  # type: ignore[attr-defined]
        if op not in _WR_OPCODES:
            if op in _VERBS_OPCODES:
                raise ProviderError(f"send opcode {ibv_wr_opcode(op).name} is not supported by "
                                    "nsnic", errno.EOPNOTSUPP)
            raise ProviderError(f"unknown send opcode {op!r}", errno.EINVAL)
        if self.sq_head - self.sq_tail >= self.sq_size:
            raise ProviderError("send queue is full", errno.ENOMEM)
        sges = _sges(wr, self.max_send_sge)
        w = wr
        try:  # every field fits its C type (one expression: this runs per post)
            if not (isinstance(w.wr_id, int) and 0 <= w.wr_id <= _U64  # type: ignore
                    and 0 <= w.send_flags <= _U32  # type: ignore
                    and 0 <= w.imm_data <= _U32 and 0 <= w.remote_addr <= _U64  # type: ignore
                    and 0 <= w.rkey <= _U32 and 0 <= w.compare_add <= _U64  # type: ignore
                    and 0 <= w.swap <= _U64 and 0 <= w.invalidate_rkey <= _U32):  # type: ignore
                raise TypeError
        except TypeError:
            raise _misfit(wr, _WR_FIELDS) from None
        op = int(op)
        if self.ud and op not in _UD_OPCODES:
            # A datagram is a SEND (IBA 9.8.2; rxe's validate_send_wr).
            raise ProviderError(f"{ibv_wr_opcode(op).name} on a UD QP", errno.EINVAL)
        if op in _ATOMICS and not self.atomics:
            # A device with atomic_cap NONE: as siw's post_send answers an opcode it lacks.
            raise ProviderError(f"{ibv_wr_opcode(op).name}: the device has no atomics",
                                errno.EINVAL)
        flags = 0
        sf = int(wr.send_flags)  # type: ignore[attr-defined]
        if sf & _SIGNALED or self.sq_sig_all:
            flags |= 1  # WqeFlags.SIGNALED
        if sf & _FENCE:
            flags |= 2  # WqeFlags.FENCE
        if sf & _SOLICITED:
            flags |= 4  # WqeFlags.SOLICITED
        body = b""
        inline_len = 0
        if sf & _INLINE:
            if op in _ATOMICS or op in _PLACEMENT or op == ibv_wr_opcode.IBV_WR_RDMA_READ:
                raise ProviderError("inline data on a READ, atomic or FLUSH", errno.EINVAL)
            body = b"".join(self.aspace.read(s.addr, s.length) for s in sges)
            inline_len = len(body)
            if inline_len > self.max_inline:
                raise ProviderError(f"inline data {inline_len} > max_inline_data "
                                    f"{self.max_inline}", errno.EINVAL)
            flags |= 8  # WqeFlags.INLINE
        else:
            try:
                body = b"".join(_SGE.pack(s.addr, s.length, s.lkey) for s in sges)
            except struct.error:
                raise ProviderError("an SGE field is not an integer", errno.EINVAL) from None
        imm = wr.imm_data  # type: ignore[attr-defined]
        raddr, rkey = wr.remote_addr, wr.rkey  # type: ignore[attr-defined]
        cmp_add, swap = wr.compare_add, wr.swap  # type: ignore[attr-defined]
        if op in _WITH_IMM:
            # ibv_send_wr's imm_data is a __be32 (the program stores htonl(x)): its bytes go
            # to the wire as they are. The WQE carries the ImmDt's value (hwif SendWqeCtrl).
            try:
                imm = socket.ntohl(imm)
            except TypeError:  # a value that compares like an integer but is not one
                raise _misfit(wr, _WR_FIELDS) from None
        elif op in _INVALIDATES:
            # ibv_send_wr's imm_data and invalidate_rkey are one union member
            imm = wr.invalidate_rkey or imm  # type: ignore[attr-defined]
        elif op == ibv_wr_opcode.IBV_WR_BIND_MW:
            imm, raddr, cmp_add, swap = _bind_fields(wr)
        elif op in _PLACEMENT:
            cmp_add, swap = _placement_fields(wr)
            body, sges = b"", []  # the operation carries its own data (hwif WqeOpcode)
        dqpn = qkey = 0
        if self.ud:
            dqpn, qkey, av = _ud_fields(wr)
            body = av + body
        try:
            ctrl = _CTRL.pack(op, flags, len(sges) if not inline_len else 0, imm, raddr, rkey,
                              inline_len, cmp_add, swap, dqpn, qkey)
        except struct.error:  # a value that compares like an integer but is not one
            raise _misfit(wr, _WR_FIELDS) from None
        slot = self.sq_head & (self.sq_size - 1)
        data = ctrl + body
        assert len(data) <= self.sq_stride, "stride computed by the kernel from the caps"
        self.aspace.write(self.r.sq_va + slot * self.sq_stride, data)
        self.sq_wrid[slot] = wr.wr_id  # type: ignore[attr-defined]
        self.sq_head += 1
        return data

    def post_recv(self, wr: object) -> None:
        if self.state == ibv_qp_state.IBV_QPS_RESET:
            raise ProviderError("post_recv on a QP in RESET", errno.EINVAL)
        if self.srq is not None:
            raise ProviderError("post_recv on a QP that receives from an SRQ", errno.EINVAL)
        _post_recv_chain(self, wr, self.r.rq_va, UarReg.RQ_DB, self.r.qpn)


def _post_recv_chain(q: ProviderQp | ProviderSrq, wr: object, ring_va: int, reg: UarReg,
                     number: int) -> None:
    """Write a chain of receive WRs into a receive ring (a QP's RQ or an SRQ) and ring its
    doorbell once; the WRs before a bad one stay posted."""
    n = 0
    size = q.rq_size
    try:
        while wr is not None:
            slot = q.rq_head & (size - 1)
            if q.rq_head - q.rq_tail >= size or q.rq_busy is not None and q.rq_busy[slot]:
                raise ProviderError("receive queue is full", errno.ENOMEM)
            sges = _sges(wr, q.max_recv_sge)
            if not isinstance(wr.wr_id, int) or not 0 <= wr.wr_id <= _U64:  # type: ignore
                raise _misfit(wr, (("wr_id", _U64),))
            data = RecvWqeCtrl(len(sges)).pack() + b"".join(
                Sge(s.addr, s.length, s.lkey).pack() for s in sges)
            q.aspace.write(ring_va + slot * q.rq_stride, data)
            q.rq_wrid[slot] = wr.wr_id  # type: ignore[attr-defined]
            if q.rq_busy is not None:
                q.rq_busy[slot] = True
            q.rq_head += 1
            n += 1
            wr = getattr(wr, "next_wr", None)
    finally:
        if n:
            q.host.spend(q.host.costs.post_recv * n)
            q.db.write64(reg, (number << 32) | (q.rq_head & WQE_INDEX_MASK))


class ProviderSrq:
    """An SRQ's ring. The NIC takes its WQEs in ring order, but they complete in the order
    their QPs' messages end, so a slot is free again only when its own completion was polled
    (`rq_busy`), not when some later one was."""

    def __init__(self, host: Host, aspace: AddressSpace, db: DoorbellPage, r: CreateSrqResp,
                 max_sge: int) -> None:
        self.host, self.aspace, self.db, self.r = host, aspace, db, r
        self.rq_size = 1 << r.log_size
        self.rq_stride = 1 << r.log_stride
        self.max_recv_sge = max_sge
        self.rq_head = 0
        self.rq_tail = 0  # completions polled
        self.rq_wrid = [0] * self.rq_size
        self.rq_busy: list[bool] | None = [False] * self.rq_size

    def post_recv(self, wr: object) -> None:
        _post_recv_chain(self, wr, self.r.ring_va, UarReg.SRQ_DB, self.r.srqn)

    def resized(self, ring_va: int, log_size: int) -> None:
        """The kernel moved the SRQ to a ring at least as large (RESIZE_SRQ): a WQE keeps
        its index, so each slot posted and not completed moves to index & (new size - 1)."""
        if log_size == self.r.log_size:
            return
        old, new = self.rq_size, 1 << log_size
        assert self.rq_busy is not None and new > old
        wrid, busy = [0] * new, [False] * new
        last = self.rq_head - 1
        for slot in range(old):
            if self.rq_busy[slot]:
                index = last - ((last - slot) & (old - 1))  # the newest index on that slot
                wrid[index & (new - 1)], busy[index & (new - 1)] = self.rq_wrid[slot], True
        self.rq_wrid, self.rq_busy, self.rq_size = wrid, busy, new
        self.r = replace(self.r, ring_va=ring_va, log_size=log_size)

    def completed(self, index: int) -> int:
        """The wr_id of the WQE at `index`, whose slot is free from now on."""
        slot = index & (self.rq_size - 1)
        assert self.rq_busy is not None
        self.rq_busy[slot] = False
        self.rq_tail += 1
        return self.rq_wrid[slot]


_CQE_WITH_IMM = int(CqeFlags.WITH_IMM)
_SCATTERED = int(CqeFlags.SCATTERED)


@dataclass(frozen=True)
class MrInfo:
    """What the provider keeps of a process's MR for the L_Key check of a scattered SEND
    (ProviderCq._scatter_to_wqe): its PD handle, range and access flags."""

    pd: int
    addr: int
    length: int
    access: int


MrTable = dict[int, MrInfo]  # by L_Key
_FLAG_MAP = tuple((int(a), int(b)) for a, b in (
    (CqeFlags.WITH_IMM, ibv_wc_flags.IBV_WC_WITH_IMM),
    (CqeFlags.WITH_INV, ibv_wc_flags.IBV_WC_WITH_INV),
    (CqeFlags.GRH, ibv_wc_flags.IBV_WC_GRH)))


class ProviderCq:
    def __init__(self, host: Host, aspace: AddressSpace, r: CreateCqResp,
                 qps: dict[int, ProviderQp], mrs: MrTable | None = None) -> None:
        self.host = host
        self.aspace = aspace
        self.r = r
        self.size = 1 << r.log_size
        # Bytes per slot: the Cqe is its last CQE_SIZE, a scattered SEND's data before it.
        self.stride = 1 << r.log_stride
        self._at = cqe_offset(self.stride)
        # The process's MRs, for the L_Key check of a scattered SEND (scatter_to_wqe).
        self.mrs = mrs
        self.ci = 0
        self.qps = qps  # QPs of the context, by QPN
        # Consecutive empty polls that each waited their whole window with no CQE write.
        self.silent = 0
        # An observer's hook (nicsim.trace.breakdown): called with each CQE a poll returns.
        self.on_cqe: Callable[[Cqe], None] | None = None
        self._ring_pa = aspace.translate(r.ring_va)  # the ring is physically contiguous

    def poll(self, num_entries: int) -> list[RawWc]:
        out: list[RawWc] = []
        a = self.aspace
        log = self.r.log_size
        stride, at = self.stride, self._at
        while len(out) < num_entries:
            raw = a.read(self.r.ring_va + (self.ci & (self.size - 1)) * stride, stride)
            if raw[stride - 1] & 1 != ((self.ci >> log) & 1) ^ 1:
                break  # not written by the NIC on this pass of the ring yet
            self.ci += 1
            cqe = Cqe.unpack(raw, at)
            if self.on_cqe is not None:
                self.on_cqe(cqe)
            wc = self._to_wc(cqe)
            if cqe.flags & _SCATTERED:
                self._scatter_to_wqe(cqe, raw[:cqe.byte_len], wc)
            out.append(wc)
        if out:
            a.write(self.r.dbrec_va, struct.pack("<I", self.ci & 0xFFFFFFFF))
            self.host.spend(self.host.costs.poll_cqe * len(out))
            self.silent = 0
        elif sched.idle():
            self.silent = 0  # another side of the program ran first: look again
        elif self.host.poll_wait(self.host.costs.poll_empty, self._ring_pa,
                                 self._ring_pa + self.ring_bytes):
            self.silent = 0
        else:
            self.silent += 1
        return out

    @property
    def ring_bytes(self) -> int:
        return self.size * self.stride

    def ready(self) -> bool:
        """Whether a CQE is waiting at the consumer index (its owner bit, read as poll
        reads it, in no time)."""
        raw = self.aspace.read(self.r.ring_va + (self.ci & (self.size - 1)) * self.stride
                               + self.stride - 1, 1)
        return raw[0] & 1 == ((self.ci >> self.r.log_size) & 1) ^ 1

    def _scatter_to_wqe(self, cqe: Cqe, data: bytes, wc: RawWc) -> None:
        """A SEND the NIC put in the CQE (CqeFlags.SCATTERED): copy it into the buffers of
        the receive WQE it completes, read from the RQ ring in the process's memory, as
        libmlx5's mlx5_copy_to_recv_wqe (copy_to_scat) does. Its CPU time is the poll's
        (poll_cqe): a copy of at most 32 bytes.

        The device never saw the WQE's scatter list, so its L_Keys are checked here, against
        the process's MRs (the QP's PD, LOCAL_WRITE, the bounds): LOC_PROT_ERR, nothing
        copied. (libmlx5's copy_to_scat does not check: it copies to each SGE's address as a
        virtual address of the process, which is why an MR whose IOVA is not the process's
        address must not be used with scatter to CQE, mlx5dv_create_qp(3). nsnic keeps the
        IBA's L_Key check instead; the failure comes at poll, after the message was
        acknowledged, so the sender's completion is a success and the QP stays usable.) More
        data than the SGEs hold: LOC_LEN_ERR, as copy_to_scat returns."""
        qp = self.qps.get(cqe.qpn)
        if qp is None or qp.srq is not None or cqe.status:
            return
        slot = cqe.wqe_index & (qp.rq_size - 1)
        wqe = self.aspace.read(qp.r.rq_va + slot * qp.rq_stride, qp.rq_stride)
        n = RecvWqeCtrl.unpack(wqe).num_sge
        sges = [Sge.unpack(wqe, RECV_WQE_CTRL_SIZE + i * SGE_SIZE) for i in range(n)]
        for s in sges:
            err = self._lkey_error(qp, s) if s.length else 0
            if err:
                wc.status, wc.vendor_err = CqeStatus.LOC_PROT_ERR, err
                return
        left = memoryview(data)
        for s in sges:
            if not left:
                break
            k = min(len(left), s.length)
            self.aspace.write(s.addr, bytes(left[:k]))
            left = left[k:]
        if left:
            wc.status, wc.vendor_err = CqeStatus.LOC_LEN_ERR, VendorErr.RECV_TOO_SMALL

    def _lkey_error(self, qp: ProviderQp, s: Sge) -> int:
        """The VendorErr of an SGE the QP may not write (the device's order: key, PD,
        access, bounds, as nicsim.nic.translation.check), or 0."""
        mr = self.mrs.get(s.lkey) if self.mrs is not None else None
        if mr is None:
            return VendorErr.BAD_LKEY
        if mr.pd != qp.pd:
            return VendorErr.LKEY_PD_MISMATCH
        if not mr.access & Access.LOCAL_WRITE:
            return VendorErr.LKEY_ACCESS
        if s.addr < mr.addr or s.addr + s.length > mr.addr + mr.length:
            return VendorErr.LKEY_BOUNDS
        return 0

    def resized(self, ring_va: int, log_size: int) -> None:
        """The kernel moved the CQ to a new ring (RESIZE_CQ): the NIC put the unpolled CQEs
        at its front and zeroed the doorbell record, so polling starts over at 0. The same
        ring back (a size the CQ already has: the kernel issued nothing) changes nothing."""
        if ring_va == self.r.ring_va and log_size == self.r.log_size:
            return
        self.r = replace(self.r, ring_va=ring_va, log_size=log_size)
        self.size = 1 << log_size
        self.ci = 0
        self._ring_pa = self.aspace.translate(ring_va)

    def clean(self, qpn: int) -> int:
        """Remove the unpolled CQEs of QP `qpn` (it went to RESET: its flushed completions
        must not reach the poller, as mlx5's provider cleans them in mlx5_modify_qp): the
        other CQEs move up behind the consumer index, keeping their order and each slot's
        owner bit. Returns how many were removed."""
        a, log, size = self.aspace, self.r.log_size, self.size
        base, stride, cqe_at = self.r.ring_va, self.stride, self._at

        def at(i: int) -> int:
            return base + (i & (size - 1)) * stride

        prod = self.ci
        while prod - self.ci < size:
            raw = a.read(at(prod), stride)
            if raw[stride - 1] & 1 != ((prod >> log) & 1) ^ 1:
                break
            prod += 1
        freed = 0
        for i in range(prod - 1, self.ci - 1, -1):
            raw = a.read(at(i), stride)
            if int.from_bytes(raw[cqe_at:cqe_at + 4], "little") == qpn:
                freed += 1
            elif freed:
                dest = i + freed
                owner = ((dest >> log) & 1) ^ 1
                a.write(at(dest), raw[:stride - 1] + bytes([owner]))
        if freed:
            self.ci += freed
            a.write(self.r.dbrec_va, struct.pack("<I", self.ci & 0xFFFFFFFF))
        return freed

    def _to_wc(self, c: Cqe) -> RawWc:
        qp = self.qps.get(c.qpn)
        wr_id = 0
        if qp is not None:
            if c.opcode >= CqeOpcode.RECV:
                if qp.srq is not None:
                    wr_id = qp.srq.completed(c.wqe_index)
                else:
                    wr_id = qp.rq_wrid[c.wqe_index & (qp.rq_size - 1)]
                    qp.rq_tail += 1
            else:
                wr_id = qp.sq_wrid[c.wqe_index & (qp.sq_size - 1)]
                # Unsignaled WQEs before this one are complete too (mlx5's wqe_counter).
                done = (c.wqe_index - qp.sq_tail + 1) & WQE_INDEX_MASK
                qp.sq_tail += done
        flags = 0
        for hw, verbs in _FLAG_MAP:
            if c.flags & hw:
                flags |= verbs
        # The CQE carries the ImmDt's value; ibv_wc's imm_data is a __be32 holding the wire's
        # bytes (the program reads ntohl(wc.imm_data)). An invalidated rkey is host order.
        imm = socket.htonl(c.imm_inv) if c.flags & _CQE_WITH_IMM else c.imm_inv
        return RawWc(wr_id, c.status, c.opcode, c.vendor_err, c.byte_len, c.qpn, imm, flags,
                     c.src_qp)
