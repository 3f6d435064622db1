"""WQE fetch: DMA-read send and receive WQEs out of their rings and decode them, ahead of use.

Send WQEs are read when the doorbell is decoded and again whenever a QP holds fewer than
`max_wqe_prefetch` fetched, up to that many per read (contiguous in the ring unless it
wraps), so a QP's next WQE is normally in the NIC before its last packet has gone, and the
reads of many QPs overlap (bounded by the read tags) instead of one engine waiting for each.
A BlueFlame doorbell brings its WQE along (hwif UarReg.BF): no read at all.

Receive WQEs are read when the RQ doorbell is decoded into a per-QP cache of `rwqe_cache`
entries, the way RNICs keep receive descriptors on chip: an incoming SEND finds its receive
WQE in the NIC and its payload can be placed at once.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING

import simpy

from nicsim.hwif import (
    RECV_WQE_CTRL_SIZE,
    SEND_WQE_CTRL_SIZE,
    SGE_SIZE,
    UD_AV_SIZE,
    WQE_INDEX_MASK,
    QpType,
    RecvWqeCtrl,
    SendWqeCtrl,
    UdAv,
    WqeFlags,
)
from nicsim.nic.config import NicConfig
from nicsim.nic.counters import new_counters
from nicsim.nic.dma import Dma
from nicsim.nic.engines import Units
from nicsim.nic.qp import QpCtx

if TYPE_CHECKING:
    from nicsim.nic.srq import SrqCtx

_SGE = struct.Struct("<QII")
_INLINE = int(WqeFlags.INLINE)  # (an int: IntFlag operators run in Python)
_UD = QpType.UD  # (bound once: see nicsim.nic.nic's _RC)


@dataclass(slots=True)
class SendWqe:
    index: int  # 16-bit SQ index
    ctrl: SendWqeCtrl
    sges: list[tuple[int, int, int]]  # (addr, length, lkey)
    inline: bytes = b""
    av: UdAv | None = None  # UD: where the datagram goes
    ready: float = 0.0  # when it is decoded in the NIC (fetched by DMA, or by BlueFlame)


def decode_send_wqe(index: int, raw: bytes, stride: int, ud: bool = False) -> SendWqe:
    ctrl = SendWqeCtrl.unpack(raw)
    at = SEND_WQE_CTRL_SIZE
    av = None
    if ud:  # the address vector comes right after the control segment
        av = UdAv.unpack(raw, at)
        at += UD_AV_SIZE
    if ctrl.flags & _INLINE:
        n = min(ctrl.inline_len, stride - at)
        return SendWqe(index, ctrl, [], raw[at:at + n], av)
    nsge = min(ctrl.num_sge, (stride - at) // SGE_SIZE)
    sges = [_SGE.unpack_from(raw, at + i * SGE_SIZE) for i in range(nsge)]
    return SendWqe(index, ctrl, sges, b"", av)


def decode_recv_wqe(raw: bytes, stride: int) -> list[tuple[int, int, int]]:
    ctrl = RecvWqeCtrl.unpack(raw)
    nsge = min(ctrl.num_sge, (stride - RECV_WQE_CTRL_SIZE) // SGE_SIZE)
    return [_SGE.unpack_from(raw, RECV_WQE_CTRL_SIZE + i * SGE_SIZE) for i in range(nsge)]


class WqeFetch:
    """The descriptor fetcher. Reads are issued ahead of need and cost no SimPy event: each
    decoded WQE carries the time it is in the NIC (`SendWqe.ready`), and whoever uses it
    starts no sooner. At most `dma_read_tags` descriptor reads are in flight; a read that
    finds every tag taken starts when the first comes back."""

    def __init__(self, env: simpy.Environment, cfg: NicConfig, dma: Dma) -> None:
        self.env = env
        self.cfg = cfg
        self.dma = dma
        self.tags = Units(cfg.dma_read_tags)
        self._decode = cfg.wqe_decode_ns
        self.counters = new_counters("sq_dma_reads", "sq_wqes", "rq_dma_reads", "rq_wqes",
                                     "rq_cache_misses", "bf_wqes")

    def _read(self, pa: int, n: int, not_before: float) -> tuple[bytes, float]:
        """A descriptor read on a free tag; returns the bytes and when they are decoded."""
        tags = self.tags
        start = tags.hold(not_before)
        raw, done = self.dma.read(pa, n, start)
        tags.release(done)
        return raw, done + self._decode

    def prefetch_sq(self, qp: QpCtx) -> None:
        """Read pending send WQEs while the QP holds fewer than `max_wqe_prefetch` fetched:
        up to that many per read (contiguous in the ring), behind the doorbell."""
        cap = self.cfg.max_wqe_prefetch
        fetched = qp.fetched
        size = 1 << qp.sq_log_size
        stride = qp.sq_stride
        ud = qp.type is _UD
        c = self.counters
        now = self.env.now
        while len(fetched) < cap:
            pending = qp.sq_pending
            if not pending:
                return
            first = qp.sq_fetch & (size - 1)
            n = min(pending, cap, size - first)
            raw, ready = self._read(qp.sq_base + first * stride, n * stride, now)
            c["sq_dma_reads"] += 1
            c["sq_wqes"] += n
            for i in range(n):
                w = decode_send_wqe((qp.sq_fetch + i) & WQE_INDEX_MASK,
                                    raw[i * stride:(i + 1) * stride], stride, ud)
                w.ready = ready
                fetched.append(w)
            qp.sq_fetch = (qp.sq_fetch + n) & WQE_INDEX_MASK

    def take_bf(self, qp: QpCtx, pi: int, raw: bytes) -> bool:
        """A BlueFlame doorbell (hwif UarReg.BF) announcing WQE pi - 1 with `raw`, its first
        bytes: used when it is the only WQE not yet fetched and `raw` holds all of it."""
        index = (pi - 1) & WQE_INDEX_MASK
        if index != qp.sq_fetch or len(qp.fetched) >= self.cfg.max_wqe_prefetch:
            return False
        ud = qp.type is _UD
        if len(raw) < SEND_WQE_CTRL_SIZE + (UD_AV_SIZE if ud else 0):
            return False
        ctrl = SendWqeCtrl.unpack(raw)
        body = ctrl.inline_len if ctrl.flags & _INLINE else ctrl.num_sge * SGE_SIZE
        if SEND_WQE_CTRL_SIZE + (UD_AV_SIZE if ud else 0) + body > min(len(raw),
                                                                         qp.sq_stride):
            return False
        w = decode_send_wqe(index, raw, qp.sq_stride, ud)
        w.ready = self.env.now + self._decode
        qp.fetched.append(w)
        qp.sq_fetch = pi & WQE_INDEX_MASK
        self.counters["bf_wqes"] += 1
        return True

    def prefetch_rq(self, qp: QpCtx) -> None:
        """Read posted receive WQEs into the QP's cache (up to `rwqe_cache` ahead of rq_ci),
        behind the RQ doorbell."""
        cap = self.cfg.rwqe_cache
        size = 1 << qp.rq_log_size
        stride = qp.rq_stride
        c = self.counters
        now = self.env.now
        while True:
            held = (qp.rq_fetch - qp.rq_ci) & WQE_INDEX_MASK
            pending = (qp.rq_pi - qp.rq_fetch) & WQE_INDEX_MASK
            if not pending or held >= cap or pending > size:
                return
            first = qp.rq_fetch & (size - 1)
            n = min(pending, cap - held, size - first)
            raw, ready = self._read(qp.rq_base + first * stride, n * stride, now)
            c["rq_dma_reads"] += 1
            c["rq_wqes"] += n
            for i in range(n):
                qp.rq_cache.append(((qp.rq_fetch + i) & WQE_INDEX_MASK,
                                    decode_recv_wqe(raw[i * stride:(i + 1) * stride], stride),
                                    ready))
            qp.rq_fetch = (qp.rq_fetch + n) & WQE_INDEX_MASK

    def _read_rwqe(self, rq: QpCtx | SrqCtx, index: int, not_before: float
                   ) -> tuple[list[tuple[int, int, int]], float]:
        size = 1 << rq.rq_log_size
        raw, ready = self._read(rq.rq_base + (index & (size - 1)) * rq.rq_stride, rq.rq_stride,
                                not_before)
        self.counters["rq_wqes"] += 1
        return decode_recv_wqe(raw, rq.rq_stride), ready

    def fetch_rq(self, qp: QpCtx | SrqCtx, not_before: float
                 ) -> tuple[list[tuple[int, int, int]], float]:
        """The receive WQE at rq_ci of a QP's RQ (from its cache, or read now if it was not
        prefetched) or of an SRQ (read as it is taken: shared queues have no cache yet); its
        SGEs and when they are known."""
        if not isinstance(qp, QpCtx):
            return self._read_rwqe(qp, qp.rq_ci, not_before)
        cache = qp.rq_cache
        ci = qp.rq_ci
        while cache and cache[0][0] != ci:
            cache.popleft()  # consumed since it was cached
        if not cache:
            self.counters["rq_cache_misses"] += 1
            qp.rq_fetch = ci
            self.prefetch_rq(qp)
            if not cache:  # nothing posted: the caller checked, but be safe
                return self._read_rwqe(qp, ci, not_before)
        _i, sges, ready = cache[0]
        return sges, ready if ready > not_before else not_before

    def consumed_rq(self, qp: QpCtx) -> None:
        """rq_ci moved on: drop what it passed and keep the cache topped up."""
        cache = qp.rq_cache
        ci = qp.rq_ci
        while cache and cache[0][0] != ci:
            cache.popleft()
        if qp.rq_pi != qp.rq_fetch:
            self.prefetch_rq(qp)

    @staticmethod
    def reset(qp: QpCtx) -> None:
        """The QP's rings start over (RESET): nothing fetched is valid."""
        qp.fetched.clear()
        qp.rq_cache.clear()
        qp.rq_fetch = 0
