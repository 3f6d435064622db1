"""Shared receive queues (IBA 10.2.9): receive rings that several QPs take WQEs from.

An SRQ has the fields of a QP's receive queue (rq_base, rq_log_size, rq_log_stride, rq_pi,
rq_ci, pd), so the receive path reads `qp.srq or qp` the same way. WQEs are taken in ring
order by whichever QP needs one next; the L_Keys of an SRQ's WQEs are checked against the
SRQ's PD. The SRQ limit (IBA 10.2.9.2, 11.6.3.2): once armed, the first WQE taken that leaves
fewer WQEs than the limit raises SRQ_LIMIT_REACHED on the asynchronous EQ and disarms it.
"""

from __future__ import annotations

from dataclasses import dataclass

from nicsim.hwif import WQE_INDEX_MASK, EqeType
from nicsim.nic.counters import new_counters
from nicsim.nic.dma import Dma
from nicsim.nic.eq import ASYNC_EQN, EventQueues


@dataclass(slots=True)
class SrqCtx:
    srqn: int
    pd: int
    rq_base: int
    rq_log_size: int
    rq_log_stride: int
    limit: int
    uar: int
    rq_pi: int = 0  # from the doorbell (16-bit)
    rq_ci: int = 0  # next WQE to take
    refs: int = 0  # QPs receiving from it

    @property
    def rq_stride(self) -> int:
        return 1 << self.rq_log_stride

    @property
    def wqes(self) -> int:
        """WQEs posted and not taken yet."""
        return (self.rq_pi - self.rq_ci) & WQE_INDEX_MASK


class SharedReceiveQueues:
    def __init__(self, eqs: EventQueues) -> None:
        self.eqs = eqs
        self.srqs: dict[int, SrqCtx] = {}
        self.counters = new_counters("srq_wqes", "srq_empty", "srq_limit_events")

    @staticmethod
    def resize(srq: SrqCtx, dma: Dma, base: int, log_size: int) -> bool:
        """RESIZE_SRQ (hwif.CmdOpcode): the WQEs not taken yet are copied to their slots in
        the ring at `base` (index & (size - 1): indices, and the completions that name them,
        do not change); WQEs already taken were read when they were taken. False if the ring
        would not hold them or is smaller than the current one (slots of taken WQEs that
        complete later must not collide)."""
        if log_size < srq.rq_log_size:
            return False
        stride, old_mask, new_mask = srq.rq_stride, (1 << srq.rq_log_size) - 1, \
            (1 << log_size) - 1
        old, t = dma.read(srq.rq_base, stride << srq.rq_log_size)
        ring = bytearray(stride << log_size)
        for k in range(srq.wqes):
            i = (srq.rq_ci + k) & WQE_INDEX_MASK
            src, dst = (i & old_mask) * stride, (i & new_mask) * stride
            ring[dst:dst + stride] = old[src:src + stride]
        dma.write(base, bytes(ring), t)
        srq.rq_base, srq.rq_log_size = base, log_size
        return True

    def took(self, srq: SrqCtx) -> None:
        """A QP took the WQE at rq_ci: advance, and check the armed limit."""
        srq.rq_ci = (srq.rq_ci + 1) & WQE_INDEX_MASK
        self.counters["srq_wqes"] += 1
        if srq.limit and srq.wqes < srq.limit:
            srq.limit = 0
            self.counters["srq_limit_events"] += 1
            self.eqs.post(ASYNC_EQN, EqeType.SRQ_LIMIT_REACHED, srq.srqn)
