"""Host memory: numpy-backed physical memory, a page allocator and per-process address spaces.

Physical pages are handed out in a shuffled order, so a buffer that is contiguous in a
process's virtual address space is scattered in physical memory, as it is on a real host: the
NIC must walk the MTT to find it. Rings and other DMA-coherent buffers come from a separate
physically contiguous region (dma_alloc_coherent).
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable

import numpy as np
import simpy

from nicsim.hwif import PAGE_SHIFT, PAGE_SIZE


class MemoryError_(Exception):
    """Out of physical memory or a bad address: carries an errno for the verbs layer."""

    def __init__(self, msg: str, errno_: int) -> None:
        super().__init__(msg)
        self.errno = errno_


class PhysMem:
    """Physical memory of one host. `dma_fraction` of it is reserved for contiguous allocations.

    Device writes are posted: each lands at a time the PCIe model computes. Rather than one
    simulation event per write, posted writes wait in a queue ordered by landing time and are
    applied when anything observes memory (a CPU access, a device read) at or after that time,
    and a CPU waiting on an address range (MONITOR/MWAIT) is woken at the landing time. Every
    observer sees exactly what it would see if each write had its own event.
    """

    def __init__(self, size: int = 64 << 20, seed: int = 0, dma_fraction: float = 0.25,
                 env: simpy.Environment | None = None) -> None:
        if size % PAGE_SIZE:
            raise ValueError("physical memory size must be a multiple of the page size")
        self.size = size
        self.buf = np.zeros(size, dtype=np.uint8)
        # Copies go through a memoryview of the same bytes: a plain memcpy, without numpy's
        # per-call overhead, which dominates at packet sizes.
        self.mv = memoryview(self.buf)
        npages = size >> PAGE_SHIFT
        ndma = max(16, int(npages * dma_fraction))
        # Page 0 is never handed out, so physical address 0 can mean "none".
        self._dma_next = 1 << PAGE_SHIFT
        self._dma_end = ndma << PAGE_SHIFT
        self._dma_free: list[tuple[int, int]] = []
        pages = list(range(ndma, npages))
        random.Random(seed).shuffle(pages)
        self._free_pages = pages
        self.env = env
        # Address ranges a CPU is waiting on (MONITOR/MWAIT): [lo, hi) -> callback.
        self.watches: list[tuple[int, int, Callable[[], None]]] = []
        self._wlo, self._whi = 0, 0  # bounds of all watched ranges (empty: hi == 0)
        # Posted device writes not yet landed: (landing time, [(pa, data), ...]) in time order.
        self.posted: deque[tuple[float, list[tuple[int, bytes | memoryview]]]] = deque()

    # -- allocation ------------------------------------------------------------------------------

    def alloc_page(self) -> int:
        import errno

        if not self._free_pages:
            raise MemoryError_("out of physical pages", errno.ENOMEM)
        return self._free_pages.pop() << PAGE_SHIFT

    def free_page(self, pa: int) -> None:
        self.buf[pa:pa + PAGE_SIZE] = 0
        self._free_pages.append(pa >> PAGE_SHIFT)

    def alloc_contig(self, size: int) -> int:
        """Physically contiguous, page-aligned, zeroed memory (for rings and tables)."""
        import errno

        size = (size + PAGE_SIZE - 1) & ~(PAGE_SIZE - 1)
        for i, (pa, n) in enumerate(self._dma_free):
            if n == size:
                del self._dma_free[i]
                return pa
        if self._dma_next + size > self._dma_end:
            raise MemoryError_("out of DMA-coherent memory", errno.ENOMEM)
        pa = self._dma_next
        self._dma_next += size
        return pa

    def free_contig(self, pa: int, size: int) -> None:
        size = (size + PAGE_SIZE - 1) & ~(PAGE_SIZE - 1)
        self.buf[pa:pa + size] = 0
        self._dma_free.append((pa, size))

    # -- access ----------------------------------------------------------------------------------

    def read(self, pa: int, n: int) -> bytes:
        if self.posted:
            self.sync()
        return self.mv[pa:pa + n].tobytes()

    def write(self, pa: int, data: bytes | memoryview) -> None:
        if self.posted:
            self.sync()
        self.mv[pa:pa + len(data)] = data

    # -- posted device writes --------------------------------------------------------------------

    def post(self, t: float, parts: list[tuple[int, bytes | memoryview]]) -> None:
        """A device write of `parts` that lands in memory at time `t`."""
        q = self.posted
        # (env._now is the attribute behind SimPy's `now` property: this runs per packet.)
        now = self.env._now if self.env is not None else t
        if q and q[0][0] <= now:
            mv = self.mv
            while q and q[0][0] <= now:
                for pa, d in q.popleft()[1]:
                    mv[pa:pa + len(d)] = d
        if t <= now:
            self._apply(parts)
        elif not q or q[-1][0] <= t:
            q.append((t, parts))
        else:  # another device's writes land earlier: keep the queue in time order
            i = len(q)
            while i and q[i - 1][0] > t:
                i -= 1
            q.insert(i, (t, parts))
        if self._whi:
            # Most writes are data, far from the watched CQ rings: two comparisons say so.
            lo, hi = self._wlo, self._whi
            for pa, d in parts:
                if pa < hi and pa + len(d) > lo:
                    self._wake_watchers(t, parts)
                    break

    def overlay(self, pa: int, data: bytes) -> bytes:
        """`data` read at [pa, pa+len) by the device, with the device's own posted writes
        that have not landed yet patched in: a read request does not pass a posted write
        (PCIe ordering), so the device sees them though the CPU does not yet."""
        end = pa + len(data)
        out = None
        for _t, parts in self.posted:
            for wpa, d in parts:
                if wpa < end and pa < wpa + len(d):
                    if out is None:
                        out = bytearray(data)
                    lo, hi = max(pa, wpa), min(end, wpa + len(d))
                    out[lo - pa:hi - pa] = memoryview(d)[lo - wpa:hi - wpa]
        return data if out is None else bytes(out)

    def sync(self) -> None:
        """Apply every posted write that has landed by now."""
        q = self.posted
        now = self.env.now if self.env is not None else float("inf")
        while q and q[0][0] <= now:
            self._apply(q.popleft()[1])

    def _apply(self, parts: list[tuple[int, bytes | memoryview]]) -> None:
        mv = self.mv
        for pa, d in parts:
            mv[pa:pa + len(d)] = d

    def watch(self, lo: int, hi: int, cb: Callable[[], None]) -> tuple:
        """Call `cb` when a device write to [lo, hi) lands, including one already posted."""
        entry = (lo, hi, cb)
        self.watches.append(entry)
        self._rebound()
        for t, parts in self.posted:
            if any(lo < pa + len(d) and pa < hi for pa, d in parts):
                self._wake_watchers(t, parts)
                break
        return entry

    def unwatch(self, entry: tuple) -> None:
        if entry in self.watches:
            self.watches.remove(entry)
            self._rebound()

    def _rebound(self) -> None:
        w = self.watches
        self._wlo = min(x[0] for x in w) if w else 0
        self._whi = max(x[1] for x in w) if w else 0

    def _wake_watchers(self, t: float, parts: list[tuple[int, bytes | memoryview]]) -> None:
        # Called for every posted write while a CPU waits: plain loops, no allocation unless
        # a watched range is hit (it usually is not: the watch is a CQ ring, the write data).
        hit = None
        for w in self.watches:
            lo, hi = w[0], w[1]
            for pa, d in parts:
                if lo < pa + len(d) and pa < hi:
                    if hit is None:
                        hit = []
                    hit.append(w)
                    break
        if hit is None or self.env is None:
            return
        for w in hit:
            self.watches.remove(w)
        self._rebound()

        def wake(_e: simpy.Event) -> None:
            self.sync()
            for w in hit:
                w[2]()

        self.env.timeout(max(0.0, t - self.env.now)).callbacks.append(wake)


class AddressSpace:
    """A process's virtual memory: a page table from virtual page number to physical address."""

    def __init__(self, mem: PhysMem, base: int = 0x7F0000000000) -> None:
        self.mem = mem
        self.pages: dict[int, int] = {}
        self._next = base
        self.pinned: dict[int, int] = {}  # vpn -> pin count

    def mmap(self, size: int) -> int:
        """Anonymous memory backed by scattered physical pages; returns a page-aligned VA."""
        npages = max(1, (size + PAGE_SIZE - 1) >> PAGE_SHIFT)
        va = self._next
        self._next += (npages + 1) << PAGE_SHIFT  # leave a guard page
        for i in range(npages):
            self.pages[(va >> PAGE_SHIFT) + i] = self.mem.alloc_page()
        return va

    def map_phys(self, pa: int, size: int) -> int:
        """Map physically contiguous memory (a ring the kernel allocated) into the process."""
        npages = max(1, (size + PAGE_SIZE - 1) >> PAGE_SHIFT)
        va = self._next
        self._next += (npages + 1) << PAGE_SHIFT
        for i in range(npages):
            self.pages[(va >> PAGE_SHIFT) + i] = pa + (i << PAGE_SHIFT)
        return va

    def munmap(self, va: int, size: int, *, free_phys: bool = True) -> None:
        npages = max(1, (size + PAGE_SIZE - 1) >> PAGE_SHIFT)
        for i in range(npages):
            vpn = (va >> PAGE_SHIFT) + i
            pa = self.pages.pop(vpn, None)
            # A pinned page stays allocated until unpinned (get_user_pages semantics).
            if pa is not None and free_phys and not self.pinned.get(vpn):
                self.mem.free_page(pa)

    def translate(self, va: int) -> int:
        import errno

        pa = self.pages.get(va >> PAGE_SHIFT)
        if pa is None:
            raise MemoryError_(f"address 0x{va:x} is not mapped", errno.EFAULT)
        return pa + (va & (PAGE_SIZE - 1))

    def pin(self, va: int, length: int) -> list[int]:
        """Pin the pages under [va, va+length) and return their physical addresses in order."""
        first = va >> PAGE_SHIFT
        last = (va + max(length, 1) - 1) >> PAGE_SHIFT
        out = []
        for vpn in range(first, last + 1):
            out.append(self.translate(vpn << PAGE_SHIFT))
        for vpn in range(first, last + 1):
            self.pinned[vpn] = self.pinned.get(vpn, 0) + 1
        return out

    def unpin(self, va: int, length: int) -> None:
        first = va >> PAGE_SHIFT
        last = (va + max(length, 1) - 1) >> PAGE_SHIFT
        for vpn in range(first, last + 1):
            c = self.pinned.get(vpn, 0) - 1
            if c <= 0:
                self.pinned.pop(vpn, None)
            else:
                self.pinned[vpn] = c

    def _chunks(self, va: int, n: int):  # noqa: ANN202
        while n > 0:
            off = va & (PAGE_SIZE - 1)
            k = min(PAGE_SIZE - off, n)
            yield self.translate(va), k
            va += k
            n -= k

    def read(self, va: int, n: int) -> bytes:
        if (va & (PAGE_SIZE - 1)) + n <= PAGE_SIZE:  # within one page
            return self.mem.read(self.translate(va), n)
        return b"".join(self.mem.read(pa, k) for pa, k in self._chunks(va, n))

    def write(self, va: int, data: bytes | memoryview) -> None:
        if (va & (PAGE_SIZE - 1)) + len(data) <= PAGE_SIZE:
            self.mem.write(self.translate(va), data)
            return
        mv = memoryview(data).cast("B") if not isinstance(data, bytes) else memoryview(data)
        pos = 0
        for pa, k in self._chunks(va, len(mv)):
            self.mem.write(pa, mv[pos:pos + k])
            pos += k
