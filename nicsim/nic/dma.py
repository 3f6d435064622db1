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
        return self.peek(pa, n), self.pcie.dma_read(n, not_before, pa)

    def peek(self, pa: int, n: int) -> bytes:
        """What a device read of [pa, pa+n) returns now, without its timing: host memory
        with this NIC's own posted writes patched in (a read does not pass them)."""
        mem = self.mem
        if mem.posted:
            mem.sync()
        data = mem.mv[pa:pa + n].tobytes()
        if mem.posted:
            data = mem.overlay(pa, data)
        return data

    def read_at(self, segs: Segs, pos: tuple[int, int], n: int, not_before: float = 0.0
                ) -> tuple[bytes | memoryview, float, tuple[int, int]]:
        """Read the next `n` bytes of a segment list from `pos` (see take): the data, when it
        is in the NIC, and the position after it. Within one segment, and with none of this
        NIC's writes in flight, the data is a view of host memory: use it at once (the framer
        copies it into the frame), as the moment of the read is now."""
        mem = self.mem
        if mem.posted:
            mem.sync()
        buf = mem.mv
        si, so = pos
        pa, ln = segs[si]
        at = pa + so  # (for the IOMMU: a read across segments walks its first one's pages)
        if so + n <= ln:
            data: bytes | memoryview = buf[pa + so:pa + so + n]
            if mem.posted:  # this NIC's own writes still in flight (PCIe ordering)
                data = mem.overlay(pa + so, data)  # a copy only if they overlap it
            so += n
        else:
            parts, left = [], n
            while left:
                pa, ln = segs[si]
                m = min(ln - so, left)
                part = buf[pa + so:pa + so + m].tobytes()
                parts.append(mem.overlay(pa + so, part) if mem.posted else part)
                so += m
                left -= m
                if so == ln and left:
                    si, so = si + 1, 0
            data = b"".join(parts)
        if so == ln and si + 1 < len(segs):
            si, so = si + 1, 0
        return data, self.pcie.dma_read(n, not_before, at), (si, so)

    def write(self, pa: int, data: bytes | memoryview, not_before: float = 0.0) -> float:
        """A posted write; returns when it lands in host memory."""
        done = self.pcie.dma_write(len(data), not_before, pa)
        self.mem.post1(done, pa, data)
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
        done = self.pcie.dma_write(nbytes, not_before, parts[0][0] if parts else None)
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


def position(segs: Segs, offset: int) -> tuple[int, int]:
    """(segment index, offset within it) of byte `offset` of a segment list."""
    for i, (_pa, n) in enumerate(segs):
        if offset < n:
            return i, offset
        offset -= n
    return len(segs), 0
