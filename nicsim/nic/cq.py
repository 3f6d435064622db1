"""CQE writeback: completions become 32-byte CQEs DMA-written into the CQ ring in host memory.

The owner bit flips on every pass over the ring, so software can tell a new CQE from an old one
without the NIC ever reading the ring. The NIC tracks software's consumer index lazily: only
when its own producer count says the ring may be full does it read the doorbell record (one
small DMA read). A CQ that is really full overruns: the CQE is dropped and counted, the CQ goes
to its error state and stays there (IBA 11.6.2: CQ overrun is an affiliated asynchronous
error), and `on_overrun` tells the NIC, which moves the QPs that use the CQ to ERR: their work
can no longer complete.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

from nicsim.hwif import CQE_SIZE, WQE_INDEX_MASK, Cqe, cqe_owner
from nicsim.nic.counters import Counters
from nicsim.nic.dma import Dma

_CQE = Cqe.FMT


@dataclass(slots=True)
class CqCtx:
    cqn: int
    log_size: int
    base: int
    dbrec: int
    eqn: int = 0
    pi: int = 0  # producer count, not wrapped
    ci_seen: int = 0  # last consumer index read from the doorbell record
    overrun: bool = False
    armed: bool = False
    refs: int = 0  # QPs using this CQ
    uar: int = 0  # the doorbell page CQ_ARM must come through

    @property
    def size(self) -> int:
        return 1 << self.log_size


class CqWriter:
    def __init__(self, dma: Dma) -> None:
        self.dma = dma
        self.cqs: dict[int, CqCtx] = {}
        self.counters = Counters("cqes", "cqe_errors", "dbrec_reads", "overruns", "no_cq")
        self.on_overrun: Callable[[CqCtx], None] = lambda cq: None

    def post(self, cqn: int, qpn: int, wqe_index: int, opcode: int, status: int,
             byte_len: int = 0, imm_inv: int = 0, src_qp: int = 0, flags: int = 0,
             vendor_err: int = 0, not_before: float = 0.0) -> float:
        """Write one CQE (hwif.Cqe layout); returns when it lands in host memory (or now if
        it was dropped)."""
        cq = self.cqs.get(cqn)
        c = self.counters
        if cq is None or cq.overrun:
            c["no_cq" if cq is None else "overruns"] += 1
            return self.dma.env.now
        if cq.pi - cq.ci_seen >= cq.size:
            c["dbrec_reads"] += 1
            raw, _t = self.dma.read(cq.dbrec, 4)
            ci = struct.unpack("<I", raw)[0]
            # The record holds a 32-bit count; rebuild the full value near our producer count.
            cq.ci_seen = cq.pi - ((cq.pi - ci) & 0xFFFFFFFF)
            if cq.pi - cq.ci_seen >= cq.size:
                cq.overrun = True
                c["overruns"] += 1
                self.on_overrun(cq)
                return self.dma.env.now
        owner = cqe_owner(cq.pi, cq.log_size)
        pa = cq.base + (cq.pi & (cq.size - 1)) * CQE_SIZE
        cq.pi += 1
        c["cqes"] += 1
        if status:
            c["cqe_errors"] += 1
        raw = _CQE.pack(qpn, wqe_index & WQE_INDEX_MASK, opcode, status, byte_len, imm_inv, src_qp,
                        flags, vendor_err, owner)
        return self.dma.write(pa, raw, not_before)
