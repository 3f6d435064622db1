"""Event queues: EQEs DMA-written into an EQ ring in host memory, and the MSI-X interrupt.

A CQ armed by software (CQ_ARM doorbell, ibv_req_notify_cq) gives one completion event for
its next CQE (IBA 11.4.2.2; with solicited-only, its next solicited or unsuccessful CQE),
then is disarmed until armed again. Asynchronous events (IBA 11.6.3: CQ overrun, SRQ limit)
go to EQ 0. An EQE lands after the CQE it announces (the writes are posted in order). The
interrupt is the MSI-X message the EQC names, a 4-byte posted write; the EQ raises it for
the first EQE after software armed it (EQ_DB), and no sooner than `moderation_ns` after the
previous one (interrupt moderation), then waits to be armed again, as mlx5's EQs do.
An EQ that is full (software has not taken its entries) drops the EQE and counts it:
events are lost, not written over the entries software has not read.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

from nicsim.hwif import EQE_SIZE, Eqc, Eqe, EqeType, cqe_owner
from nicsim.nic.counters import bump, new_counters
from nicsim.nic.dma import Dma

_EQE = Eqe.FMT
ASYNC_EQN = 0  # asynchronous events go to EQ 0


@dataclass(slots=True)
class EqCtx:
    eqn: int
    log_size: int
    base: int
    msi_addr: int
    msi_data: int
    moderation_ns: int = 0
    pi: int = 0  # EQEs written, not wrapped
    ci: int = 0  # what software last reported taking (EQ_DB)
    armed: bool = False
    last_irq: float = float("-inf")

    @property
    def size(self) -> int:
        return 1 << self.log_size


class EventQueues:
    def __init__(self, dma: Dma) -> None:
        self.dma = dma
        self.env = dma.env
        self.eqs: dict[int, EqCtx] = {}
        self.counters = new_counters("eqes", "interrupts", "eq_overflows", "no_eq", "moderated")

    def create(self, c: Eqc) -> None:
        self.eqs[c.eqn] = EqCtx(c.eqn, c.log_size, c.base, c.msi_addr, c.msi_data,
                                c.moderation_ns)

    def doorbell(self, value: int) -> None:
        """EQ_DB: (eqn << 32) | (arm << 31) | consumer index."""
        eq = self.eqs.get(value >> 32)
        if eq is None:
            bump(self.counters, "no_eq")
            return
        ci = value & 0x7FFFFFFF
        # The register holds 31 bits of the count; rebuild it near our producer count.
        eq.ci = eq.pi - ((eq.pi - ci) & 0x7FFFFFFF)
        if value & (1 << 31):
            eq.armed = True
            if eq.pi != eq.ci:  # entries software has not taken: interrupt again
                self._interrupt(eq, self.env.now)

    def post(self, eqn: int, kind: EqeType, obj: int, not_before: float = 0.0) -> None:
        """Write one EQE (after `not_before`, when what it announces has landed)."""
        self.post_record(eqn, lambda owner: _EQE.pack(int(kind), obj, owner), not_before)

    def post_record(self, eqn: int, build: Callable[[int], bytes],
                    not_before: float = 0.0) -> None:
        """Write the EQE `build(owner bit)` returns (an Eqe, or a type with its own layout
        such as PageFaultEqe)."""
        eq = self.eqs.get(eqn)
        c = self.counters
        if eq is None:
            c["no_eq"] += 1  # nobody asked for events: nothing to write
            return
        if eq.pi - eq.ci >= eq.size:
            c["eq_overflows"] += 1
            return
        pa = eq.base + (eq.pi & (eq.size - 1)) * EQE_SIZE
        raw = build(cqe_owner(eq.pi, eq.log_size))
        eq.pi += 1
        c["eqes"] += 1
        landed = self.dma.write(pa, raw, not_before)
        if eq.armed:
            self._interrupt(eq, landed)

    def _interrupt(self, eq: EqCtx, t: float) -> None:
        """The MSI-X write, after the EQE it announces (posted writes stay in order)."""
        at = max(t, eq.last_irq + eq.moderation_ns)
        if at > t:
            self.counters["moderated"] += 1
        eq.armed = False
        eq.last_irq = at
        self.counters["interrupts"] += 1
        self.dma.write(eq.msi_addr, struct.pack("<I", eq.msi_data), at)
