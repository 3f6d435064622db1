"""Parallel processing units of a NIC stage, as times at which each unit is next free.

A stage of the NIC (the doorbell decoder, the send engines, the responder units, the CQE
builder, the descriptor read tags) is `n` identical units. An item needs one unit for `cost`
ns (the stage's cycles over the NIC clock: its initiation interval, how soon the unit takes
the next item); the stage's latency is a separate pipeline delay in NicConfig. A unit is
taken with arithmetic on timestamps, no SimPy event: the item starts when it is ready and a
unit is free, the earliest free unit serves it, and the caller gets the start time.

The same arithmetic expresses an ASIC (a fast clock, many units) and an FPGA NIC (a slow
clock, one or two units), which is the point: the numbers are the profile's.
"""

from __future__ import annotations

from heapq import heapreplace


class Units:
    """`n` units; `take(ready, cost)` books the earliest free one and returns the start."""

    __slots__ = ("free", "n", "take")

    def __init__(self, n: int) -> None:
        if n < 1:
            raise ValueError("a stage has at least one unit")
        self.n = n
        self.free = [0.0] * n  # a min-heap of the units' free times
        # take(ready, cost): book the earliest free unit, return the start. Chosen once for
        # the number of units (a heap or not): it runs per packet.
        self.take = self._take_one if n == 1 else self._take_heap

    def _take_one(self, ready: float, cost: float) -> float:
        free = self.free
        start = free[0]
        if start < ready:
            start = ready
        free[0] = start + cost
        return start

    def _take_heap(self, ready: float, cost: float) -> float:
        free = self.free
        start = free[0]
        if start < ready:
            start = ready
        heapreplace(free, start + cost)
        return start

    def hold(self, ready: float) -> float:
        """When a unit can start an item ready at `ready` whose end is not known yet; the
        caller must `release` it with that end before taking another."""
        start = self.free[0]
        return start if start > ready else ready

    def release(self, until: float) -> None:
        """The unit `hold` gave is busy until `until`."""
        if self.n == 1:
            self.free[0] = until
        else:
            heapreplace(self.free, until)

    def earliest(self) -> float:
        """When the first unit is free."""
        return self.free[0]


def cycles_ns(cycles: float, clock_mhz: float) -> float:
    """`cycles` of a clock of `clock_mhz` MHz, in ns."""
    return cycles * 1000.0 / clock_mhz
