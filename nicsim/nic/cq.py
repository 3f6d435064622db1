"""CQE writeback: completions become CQEs DMA-written into the CQ ring in host memory: 32 bytes,
or 64 on a device with scatter to CQE, whose first 32 carry a small SEND's data (hwif.cqe_stride).

The owner bit flips on every pass over the ring, so software can tell a new CQE from an old one
without the NIC ever reading the ring. The NIC tracks software's consumer index lazily: only
when its own producer count says the ring may be full does it read the doorbell record (one
small DMA read). A CQ that is really full overruns: the CQE is dropped and counted, the CQ goes
to its error state and stays there (IBA 11.6.2: CQ overrun is an affiliated asynchronous
error, reported by a CQ_ERR event), and `on_overrun` tells the NIC, which moves the QPs that
use the CQ to ERR: their work can no longer complete. An armed CQ gives a completion event
(nicsim.nic.eq) for its next CQE, or with solicited-only for its next solicited or failed one.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

from nicsim.hwif import CQE_SIZE, WQE_INDEX_MASK, Cqe, EqeType, cqe_owner
from nicsim.nic.counters import new_counters
from nicsim.nic.dma import Dma
from nicsim.nic.engines import Units
from nicsim.nic.eq import ASYNC_EQN, EventQueues
from nicsim.sim.tracer import Stage, Tracer

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
    solicited_only: bool = False  # the arm asks for solicited (or failed) completions only
    refs: int = 0  # QPs using this CQ
    uar: int = 0  # the doorbell page CQ_ARM must come through
    stride: int = CQE_SIZE  # bytes per slot: the device's (hwif.cqe_stride)

    @property
    def size(self) -> int:
        return 1 << self.log_size


class CqWriter:
    def __init__(self, dma: Dma, eqs: EventQueues, cost_ns: float = 0.0) -> None:
        self.dma = dma
        self.eqs = eqs
        # The CQE builder (one unit, nicsim.nic.engines): each CQE occupies it `cost_ns`.
        self.builder = Units(1)
        self.cost = cost_ns
        self.cqs: dict[int, CqCtx] = {}
        self.counters = new_counters("cqes", "cqe_errors", "dbrec_reads", "overruns", "no_cq")
        self.on_overrun: Callable[[CqCtx], None] = lambda cq: None
        self.tracer: Tracer | None = None  # (Nic.observe)

    def post(self, cqn: int, qpn: int, wqe_index: int, opcode: int, status: int,
             byte_len: int = 0, imm_inv: int = 0, src_qp: int = 0, flags: int = 0,
             vendor_err: int = 0, not_before: float = 0.0, solicited: bool = False,
             inline: bytes | memoryview = b"") -> float:
        """Write one CQE (hwif.Cqe layout, in a slot of the CQ's stride); returns when it
        lands in host memory (or now if it was dropped). `inline`: a scattered SEND's data,
        for the slot's inline area (the caller sets CqeFlags.SCATTERED); the slot is one
        write either way."""
        cq = self.cqs.get(cqn)
        c = self.counters
        if cq is None or cq.overrun:
            c["no_cq" if cq is None else "overruns"] += 1
            return self.dma.env.now
        if cq.pi - cq.ci_seen >= cq.size:
            cq.ci_seen = self._consumer(cq)
            if cq.pi - cq.ci_seen >= cq.size:
                cq.overrun = True
                c["overruns"] += 1
                self.eqs.post(ASYNC_EQN, EqeType.CQ_ERR, cqn)
                self.on_overrun(cq)
                return self.dma.env.now
        owner = cqe_owner(cq.pi, cq.log_size)
        stride = cq.stride
        pa = cq.base + (cq.pi & (cq.size - 1)) * stride
        cq.pi += 1
        c["cqes"] += 1
        if status:
            c["cqe_errors"] += 1
        raw = _CQE.pack(qpn, wqe_index & WQE_INDEX_MASK, opcode, status, byte_len, imm_inv, src_qp,
                        flags, vendor_err, owner)
        if stride != CQE_SIZE:  # the inline area first, the Cqe at the slot's end
            raw = bytes(inline).ljust(stride - CQE_SIZE, b"\0") + raw
        now = self.dma.env.now
        landed = self.dma.write(pa, raw, self.builder.take(
            not_before if not_before > now else now, self.cost))
        if self.tracer is not None:
            self.tracer.emit(Stage.CQE_WRITTEN, cqn, qpn, wqe_index, opcode, status, landed)
        if cq.armed and (solicited or status or not cq.solicited_only):
            cq.armed = False
            self.eqs.post(cq.eqn, EqeType.COMPLETION, cqn, landed)
        return landed

    def _consumer(self, cq: CqCtx) -> int:
        """Software's consumer index, read from the doorbell record (one small DMA read): it
        holds a 32-bit count, rebuilt here near our producer count."""
        self.counters["dbrec_reads"] += 1
        raw, _t = self.dma.read(cq.dbrec, 4)
        return cq.pi - ((cq.pi - struct.unpack("<I", raw)[0]) & 0xFFFFFFFF)

    def resize(self, cq: CqCtx, base: int, log_size: int) -> bool:
        """RESIZE_CQ (hwif.CmdOpcode): the CQEs not polled yet move, in order, to the front
        of the ring at `base` (whose other entries are cleared), the counts start over there
        and the doorbell record goes to 0. False, and nothing changes, if they do not fit
        (more unpolled completions than the new size, as the kernel refuses with EINVAL).
        CQEs still on their way into the old ring move too: the NIC's read of it does not
        pass its own posted writes (nicsim.nic.dma.Dma.peek)."""
        ci = self._consumer(cq)
        n = cq.pi - ci
        size = 1 << log_size
        if n > size:
            return False
        stride = cq.stride
        old, t = self.dma.read(cq.base, cq.size * stride)
        ring = bytearray(size * stride)
        for k in range(n):
            src = ((ci + k) & (cq.size - 1)) * stride
            dst = k * stride
            ring[dst:dst + stride] = old[src:src + stride]
            ring[dst + stride - 1] = cqe_owner(k, log_size)  # the slot's last byte
        self.dma.write(base, bytes(ring), t)
        self.dma.write(cq.dbrec, bytes(4), t)
        cq.base, cq.log_size, cq.pi, cq.ci_seen = base, log_size, n, 0
        return True

    def arm(self, cq: CqCtx, solicited_only: bool) -> None:
        """CQ_ARM: one completion event for the next (solicited) CQE. Arming an armed CQ
        for solicited-only does not narrow an arm for any completion (IBA 11.4.2.2).

        The arm is a doorbell: it reaches the NIC a PCIe write after the program issued it,
        and a CQE written in between would wait for the next one, so a program that arms and
        then polls once (ibv_rc_pingpong -e) could poll before that CQE lands and then wait
        for ever. As ConnectX compares the consumer index its arm carries (mlx5_arm_cq), an
        arm for any completion that finds CQEs software has not consumed (the doorbell
        record) raises the event at once."""
        cq.solicited_only = solicited_only and (cq.solicited_only or not cq.armed)
        cq.armed = True
        if not cq.solicited_only and cq.pi != self._consumer(cq):
            cq.armed = False
            self.eqs.post(cq.eqn, EqeType.COMPLETION, cq.cqn, self.dma.env.now)
