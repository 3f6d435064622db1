"""Buffers of a run: where each work request's data sits, and what that data is.

Each host registers one memory region (an arena) at the start; a work request takes a region
of it for its local buffer and one on the peer for the remote buffer, and gives them back once
its bytes are checked. Memory then follows what is in flight, not the length of the run.

The data a WR carries is a window of a per-host random pool, at an offset drawn per WR: it
costs no random generation per WR, differs from WR to WR, and can be produced again at check
time, so no copy is kept while the WR is in flight. The pool's length is not a multiple of
any MTU, so packets of one message never carry the same bytes at the same offsets.
"""

from __future__ import annotations

from bisect import bisect_left

import numpy as np

PAGE = 4096
POOL = (1 << 20) + 12347


def ceil_page(n: int) -> int:
    return (n + PAGE - 1) // PAGE * PAGE


class Arena:
    """First fit over a free list sorted by offset, neighbours merged on release: what is
    allocated at any time is what is in flight, whatever mix of sizes comes and goes."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._free: list[tuple[int, int]] = [(0, size)] if size else []  # (offset, length)
        self.used = 0
        self.peak = 0

    def alloc(self, n: int) -> int | None:
        n = max(PAGE, ceil_page(n))
        for i, (off, ln) in enumerate(self._free):
            if ln >= n:
                if ln == n:
                    del self._free[i]
                else:
                    self._free[i] = (off + n, ln - n)
                self.used += n
                if self.used > self.peak:
                    self.peak = self.used
                return off
        return None

    def release(self, off: int, n: int) -> None:
        n = max(PAGE, ceil_page(n))
        self.used -= n
        f = self._free
        i = bisect_left(f, (off, 0))
        if i < len(f) and f[i][0] == off + n:  # merge with the next free block
            n += f[i][1]
            del f[i]
        if i and f[i - 1][0] + f[i - 1][1] == off:  # and the previous one
            off, n = f[i - 1][0], f[i - 1][1] + n
            del f[i - 1]
            i -= 1
        f.insert(i, (off, n))


class DataPool:
    """Random bytes for WR payloads (see the module)."""

    def __init__(self, rng: np.random.Generator) -> None:
        pool = rng.integers(0, 256, POOL, dtype=np.uint8).tobytes()
        self._two = memoryview(pool + pool)

    def data(self, off: int, n: int) -> bytes | memoryview:
        """n bytes from position `off` of the pool, wrapping around it."""
        if n <= POOL:
            return self._two[off:off + n]
        head = bytes(self._two[off:off + POOL])
        reps = -(-n // POOL)
        return memoryview(head * reps)[:n]
