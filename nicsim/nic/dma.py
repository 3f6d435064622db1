"""The NIC's DMA engine: reads and writes of host memory with PCIe timing.

A read returns the bytes and the time they are in the NIC. A write is posted to host memory
with the time the PCIe model says it lands there (see PhysMem.post), so software observing host
memory sees data no earlier than the hardware would deliver it.
"""

from __future__ import annotations

import simpy

from nicsim.host.memory import PhysMem
from nicsim.host.pcie import Pcie

Segs = list[tuple[int, int]]


class Dma:
    def __init__(self, env: simpy.Environment, mem: PhysMem, pcie: Pcie) -> None:
        self.env = env
        self.mem = mem
        self.pcie = pcie

    def read(self, pa: int, n: int, not_before: float = 0.0) -> tuple[bytes, float]:
        mem = self.mem
        if mem.posted:
            mem.sync()
        data = mem.mv[pa:pa + n].tobytes()
        if mem.posted:
            data = mem.overlay(pa, data)
        return data, self.pcie.dma_read(n, not_before)

    def gather(self, segs: Segs, not_before: float = 0.0) -> tuple[bytes, float]:
        mem = self.mem
        if mem.posted:
            mem.sync()
        buf = mem.mv
        if mem.posted:
            data = b"".join(mem.overlay(pa, buf[pa:pa + n].tobytes()) for pa, n in segs)
        elif len(segs) == 1:
            pa, n = segs[0]
            data = buf[pa:pa + n].tobytes()
        else:
            data = b"".join(buf[pa:pa + n].tobytes() for pa, n in segs)
        return data, self.pcie.dma_read(len(data), not_before)

    def write(self, pa: int, data: bytes | memoryview, not_before: float = 0.0) -> float:
        """A posted write; returns when it lands in host memory."""
        done = self.pcie.dma_write(len(data), not_before)
        self.mem.post(done, [(pa, data)])
        return done

    def place(self, segs: Segs, pos: tuple[int, int], data: bytes | memoryview,
              not_before: float = 0.0) -> tuple[float, tuple[int, int]]:
        """Write `data` into a segment list from position `pos` (see take); returns when
        it lands and the position after it."""
        pieces, pos = take(segs, pos, len(data))
        mv = memoryview(data)
        parts, o = [], 0
        for pa, k in pieces:
            parts.append((pa, mv[o:o + k]))
            o += k
        return self.scatter(parts, len(data), not_before), pos

    def scatter(self, parts: list[tuple[int, bytes | memoryview]], nbytes: int,
                not_before: float = 0.0) -> float:
        """Write several (physical address, data) pieces as one transfer of `nbytes`."""
        done = self.pcie.dma_write(nbytes, not_before)
        self.mem.post(done, parts)
        return done


def take(segs: Segs, pos: tuple[int, int], n: int) -> tuple[Segs, tuple[int, int]]:
    """The next `n` bytes of a segment list from position (segment index, offset in it).

    Returns the physical pieces and the new position. Running off the end returns fewer bytes;
    the caller has checked lengths.
    """
    i, off = pos
    if i < len(segs):
        pa, ln = segs[i]
        if off + n < ln:  # the common case: inside one segment
            return [(pa + off, n)], (i, off + n)
    out: Segs = []
    while n > 0 and i < len(segs):
        pa, ln = segs[i]
        k = min(ln - off, n)
        out.append((pa + off, k))
        n -= k
        off += k
        if off == ln:
            i += 1
            off = 0
    return out, (i, off)
