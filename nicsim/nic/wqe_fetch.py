"""WQE fetch: DMA-read send WQEs out of the SQ ring and decode them.

When several WQEs are pending the NIC reads up to `max_wqe_prefetch` of them with one DMA
read (they are contiguous in the ring unless it wraps), as real NICs batch descriptor reads.
"""

from __future__ import annotations

import struct
from collections.abc import Generator
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
from nicsim.nic.counters import Counters
from nicsim.nic.dma import Dma
from nicsim.nic.qp import QpCtx

if TYPE_CHECKING:
    from nicsim.nic.srq import SrqCtx

_SGE = struct.Struct("<QII")


@dataclass(slots=True)
class SendWqe:
    index: int  # 16-bit SQ index
    ctrl: SendWqeCtrl
    sges: list[tuple[int, int, int]]  # (addr, length, lkey)
    inline: bytes = b""
    av: UdAv | None = None  # UD: where the datagram goes


def decode_send_wqe(index: int, raw: bytes, stride: int, ud: bool = False) -> SendWqe:
    ctrl = SendWqeCtrl.unpack(raw)
    at = SEND_WQE_CTRL_SIZE
    av = None
    if ud:  # the address vector comes right after the control segment
        av = UdAv.unpack(raw, at)
        at += UD_AV_SIZE
    if ctrl.flags & WqeFlags.INLINE:
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
    def __init__(self, env: simpy.Environment, cfg: NicConfig, dma: Dma) -> None:
        self.env = env
        self.cfg = cfg
        self.dma = dma
        self.counters = Counters("sq_dma_reads", "sq_wqes", "rq_wqes")

    def fetch_sq(self, qp: QpCtx) -> Generator[simpy.Event, None, None]:
        """Fetch the next batch of pending send WQEs into qp.fetched."""
        pending = qp.sq_pending
        size = 1 << qp.sq_log_size
        first = qp.sq_fetch & (size - 1)
        n = min(pending, self.cfg.max_wqe_prefetch, size - first)
        stride = qp.sq_stride
        raw, done = self.dma.read(qp.sq_base + first * stride, n * stride)
        self.counters["sq_dma_reads"] += 1
        self.counters["sq_wqes"] += n
        yield self.env.timeout(done + self.cfg.wqe_decode_ns - self.env.now)
        ud = qp.type is QpType.UD
        for i in range(n):
            qp.fetched.append(decode_send_wqe((qp.sq_fetch + i) & WQE_INDEX_MASK,
                                              raw[i * stride:(i + 1) * stride], stride, ud))
        qp.sq_fetch = (qp.sq_fetch + n) & WQE_INDEX_MASK

    def fetch_rq(self, qp: QpCtx | SrqCtx, not_before: float
                 ) -> tuple[list[tuple[int, int, int]], float]:
        """Read the receive WQE at rq_ci of a QP's RQ or an SRQ; returns its SGEs and when
        they are known."""
        size = 1 << qp.rq_log_size
        stride = qp.rq_stride
        raw, done = self.dma.read(qp.rq_base + (qp.rq_ci & (size - 1)) * stride, stride,
                                  not_before)
        self.counters["rq_wqes"] += 1
        return decode_recv_wqe(raw, stride), done + self.cfg.wqe_decode_ns
