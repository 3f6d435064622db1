"""Host memory: numpy-backed physical memory, a page allocator and per-process address spaces.

Physical pages are handed out in a shuffled order, so a buffer that is contiguous in a
process's virtual address space is scattered in physical memory, as it is on a real host: the
NIC must walk the MTT to find it. Rings and other DMA-coherent buffers are physically
contiguous (dma_alloc_coherent).
"""

from __future__ import annotations

import errno
import mmap
import random
from bisect import bisect_left
from collections import deque
from collections.abc import Callable

import numpy as np
import simpy

from nicsim.hwif import PAGE_SHIFT, PAGE_SIZE
from nicsim.sim.paths import general


class MemoryError_(Exception):
    """Out of physical memory or a bad address: carries an errno for the verbs layer."""

    def __init__(self, msg: str, errno_: int) -> None:
        super().__init__(msg)
        self.errno = errno_


class Extents:
    """First-fit allocation of ranges from a free list, merging neighbours when freed (used
    for contiguous host memory here and for the NIC's MTT ranges by the driver)."""

    def __init__(self, start: int = 0, size: int = 0) -> None:
        self._free: list[tuple[int, int]] = [(start, size)] if size else []

    def alloc(self, n: int) -> int | None:
        """The start of a free range of `n`, or None."""
        for i, (start, ln) in enumerate(self._free):
            if ln >= n:
                if ln == n:
                    del self._free[i]
                else:
                    self._free[i] = (start + n, ln - n)
                return start
        return None

    def free(self, start: int, n: int) -> None:
        free = self._free
        i = bisect_left(free, (start, 0))
        free.insert(i, (start, n))
        # Merge with the neighbours on either side.
        if i + 1 < len(free) and start + n == free[i + 1][0]:
            free[i] = (start, n + free.pop(i + 1)[1])
        if i and free[i - 1][0] + free[i - 1][1] == start:
            s0, n0 = free.pop(i - 1)
            free[i - 1] = (s0, n0 + free[i - 1][1])

    @property
    def largest(self) -> int:
        return max((n for _, n in self._free), default=0)


LAND_AT = 64  # posted writes queued before those due are applied (PhysMem.post1)


class PhysMem:
    """Physical memory of one host.

    Backed by an anonymous mapping without transparent huge pages, so the simulator's resident
    memory follows the pages the simulation touches, not the size of the simulated host; a
    freed page is given back to the OS (and reads as zeros). Pages for processes are handed
    out upward from the bottom, in 2 MiB blocks whose pages are taken in a seeded shuffled
    order: a buffer contiguous in a process's virtual memory is scattered in physical memory as
    on a real host (the NIC must walk the MTT), while touching it stays local. Physically
    contiguous allocations (rings, device tables) come from the top down. The two meet only
    when memory is full.

    Device writes are posted: each lands at a time the PCIe model computes. Rather than one
    simulation event per write, posted writes wait in a queue ordered by landing time and are
    applied when anything observes memory (a CPU access, a device read) at or after that time,
    and a CPU waiting on an address range (MONITOR/MWAIT) is woken at the landing time. Every
    observer sees exactly what it would see if each write had its own event.
    """

    BLOCK_PAGES = 512  # 2 MiB

    def __init__(self, size: int = 64 << 20, seed: int = 0,
                 env: simpy.Environment | None = None) -> None:
        if size % PAGE_SIZE or size < 16 * PAGE_SIZE:
            raise ValueError("physical memory must be whole pages, at least 16 of them")
        self.size = size
        flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_NORESERVE", 0)
        self._map = mmap.mmap(-1, size, flags=flags)
        if hasattr(mmap, "MADV_NOHUGEPAGE"):
            self._map.madvise(mmap.MADV_NOHUGEPAGE)
        self.buf = np.frombuffer(self._map, dtype=np.uint8)
        # Copies go through a memoryview of the same bytes: a plain memcpy, without numpy's
        # per-call overhead, which dominates at packet sizes.
        self.mv = memoryview(self.buf)
        self._rng = random.Random(seed)
        # Page 0 is never handed out, so physical address 0 can mean "none".
        self._low = 1  # next fresh page number for processes
        self._block: list[int] = []  # the rest of the current block, in shuffled order
        self._high = size >> PAGE_SHIFT  # contiguous memory lies at [_high, end)
        self._free_pages: list[int] = []  # freed page numbers, reused first (LIFO)
        self._contig_free = Extents()  # freed contiguous ranges (bytes), reused first
        self.env = env
        # Address ranges a CPU is waiting on (MONITOR/MWAIT): [lo, hi) -> callback.
        self.watches: list[tuple[int, int, Callable[[], None]]] = []
        self._wlo, self._whi = 0, 0  # bounds of all watched ranges (empty: hi == 0)
        # Posted device writes not yet landed: (landing time, pa, data) in time order (the
        # pieces of one transfer are consecutive entries with its time).
        self.posted: deque[tuple[float, int, bytes | memoryview]] = deque()
        # The general path (nicsim.sim.paths): each posted write lands by an event of its own.
        self._each = general() and env is not None
        # Device writes aimed at physical page 0, refused (see post1).
        self.page0_writes = 0
        self.pins: dict[int, int] = {}  # physical page number -> pin count
        # Freed while pinned: start address -> size (> 0: a page, < 0: a contiguous region).
        self._deferred: dict[int, int] = {}

    # -- allocation ------------------------------------------------------------------------------

    @property
    def free_bytes(self) -> int:
        """Memory that can still be allocated (pages, or contiguous runs of them)."""
        # (_low is already past the block being handed out: its pages count once, as _block)
        fresh = self._high - self._low + len(self._block)
        return (fresh + len(self._free_pages)) * PAGE_SIZE + sum(
            n for _, n in self._contig_free._free)

    def alloc_page(self) -> int:
        if self._free_pages:
            return self._free_pages.pop() << PAGE_SHIFT
        if not self._block:
            end = min(self._low + self.BLOCK_PAGES, self._high)
            if end <= self._low:
                pa = self._contig_free.alloc(PAGE_SIZE)  # the last resort: freed ring memory
                if pa is None:
                    raise MemoryError_("out of physical pages", errno.ENOMEM)
                return pa
            self._block = list(range(self._low, end))
            self._rng.shuffle(self._block)
            self._low = end
        return self._block.pop() << PAGE_SHIFT

    def free_page(self, pa: int) -> None:
        """Give a page back. A pinned page stays allocated until its last unpin
        (get_user_pages semantics): the device may still reach it."""
        if self.pins.get(pa >> PAGE_SHIFT):
            self._deferred[pa] = PAGE_SIZE
            return
        self._release(pa, PAGE_SIZE)
        self._free_pages.append(pa >> PAGE_SHIFT)

    def alloc_contig(self, size: int) -> int:
        """Physically contiguous, page-aligned, zeroed memory (for rings and tables)."""
        size = (size + PAGE_SIZE - 1) & ~(PAGE_SIZE - 1)
        pa = self._contig_free.alloc(size)
        if pa is not None:
            return pa
        npages = size >> PAGE_SHIFT
        if self._high - npages < self._low:
            raise MemoryError_(f"out of contiguous memory for {size} bytes", errno.ENOMEM)
        self._high -= npages
        return self._high << PAGE_SHIFT

    def free_contig(self, pa: int, size: int) -> None:
        size = (size + PAGE_SIZE - 1) & ~(PAGE_SIZE - 1)
        if any(self.pins.get(p) for p in range(pa >> PAGE_SHIFT, (pa + size) >> PAGE_SHIFT)):
            self._deferred[pa] = -size  # negative: a contiguous region
            return
        self._release(pa, size)
        self._contig_free.free(pa, size)

    def _release(self, pa: int, size: int) -> None:
        """Zero memory that goes back to the allocator, and give its pages back to the OS.
        Device writes that have landed are applied first, so none can surface later in the
        next owner's memory."""
        if self.posted:
            self.sync()
        self._map.madvise(mmap.MADV_DONTNEED, pa, size)

    def pin(self, pages: list[int]) -> None:
        """Pin physical pages (the page list handed to a device): freeing waits for unpin."""
        pins = self.pins
        for pa in pages:
            pins[pa >> PAGE_SHIFT] = pins.get(pa >> PAGE_SHIFT, 0) + 1

    def unpin(self, pages: list[int]) -> None:
        pins = self.pins
        for pa in pages:
            pfn = pa >> PAGE_SHIFT
            c = pins.get(pfn, 0) - 1
            if c > 0:
                pins[pfn] = c
                continue
            pins.pop(pfn, None)
            if self._deferred:
                self._free_deferred(pfn)

    def _free_deferred(self, pfn: int) -> None:
        """A page lost its last pin: free what was waiting for it."""
        for start, size in list(self._deferred.items()):
            n = abs(size)
            if not start >> PAGE_SHIFT <= pfn < (start + n) >> PAGE_SHIFT:
                continue
            if size < 0 and any(self.pins.get(p) for p in
                                range(start >> PAGE_SHIFT, (start + n) >> PAGE_SHIFT)):
                continue
            del self._deferred[start]
            if size > 0:
                self.free_page(start)
            else:
                self.free_contig(start, n)

    def is_pinned(self, pa: int) -> bool:
        return bool(self.pins.get(pa >> PAGE_SHIFT))

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
        """A device write of `parts` (one transfer) that lands in memory at time `t`."""
        for pa, d in parts:
            self.post1(t, pa, d)

    def post1(self, t: float, pa: int, d: bytes | memoryview) -> None:
        """A device write of `d` at `pa` that lands in memory at time `t` (this runs per
        packet: one piece, no list). It waits in the queue even if it has landed already:
        whatever looks at memory syncs first, and the queue is landed in bulk when it grows
        past LAND_AT entries."""
        if pa < PAGE_SIZE:
            # Page 0 is never handed out, and 0 is what a translation holds for "none" (an
            # MTT entry of an ODP page not present, a window's unset entry): a device write
            # there came through a translation that went wrong. Like an IOMMU fault it never
            # lands, and it is counted (the DMA audit of the tests fails on it first).
            self.page0_writes += 1
            return
        q = self.posted
        if self._each:
            self.env.timeout(max(t - self.env.now, 0.0)).callbacks.append(  # type: ignore[union-attr]
                lambda _e: self.sync())
        if not q or q[-1][0] <= t:
            q.append((t, pa, d))
            if len(q) > LAND_AT:
                self.sync()
        else:  # another device's writes land earlier: keep the queue in time order
            i = len(q)
            while i and q[i - 1][0] > t:
                i -= 1
            q.insert(i, (t, pa, d))
        # Most writes are data, far from the watched CQ rings: two comparisons say so.
        if self._whi and pa < self._whi and pa + len(d) > self._wlo:
            self._wake_watchers(t, pa, len(d))

    def overlay(self, pa: int, data: bytes | memoryview) -> bytes | memoryview:
        """`data` read at [pa, pa+len) by the device, with the device's own posted writes
        that have not landed yet patched in: a read request does not pass a posted write
        (PCIe ordering), so the device sees them though the CPU does not yet. `data` itself
        when none of them overlaps it, else a patched copy."""
        end = pa + len(data)
        out = None
        for _t, wpa, d in self.posted:
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
        mv = self.mv
        while q and q[0][0] <= now:
            _, pa, d = q.popleft()
            mv[pa:pa + len(d)] = d

    def watch(self, lo: int, hi: int, cb: Callable[[], None]) -> tuple:
        """Call `cb` when a device write to [lo, hi) lands, including one already posted."""
        entry = (lo, hi, cb)
        self.watches.append(entry)
        self._rebound()
        for t, pa, d in self.posted:
            if lo < pa + len(d) and pa < hi:
                self._wake_watchers(t, pa, len(d))
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

    def _wake_watchers(self, t: float, pa: int, n: int) -> None:
        """A device write to [pa, pa+n) within the bounds of the watched ranges, landing at
        `t`: wake the CPUs whose range it reaches."""
        hit = [w for w in self.watches if w[0] < pa + n and pa < w[1]]
        if not hit or self.env is None:
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
        self._kernel: set[int] = set()  # vpns mapping kernel memory (rings): never freed here
        # Mapped anonymous pages with no physical page yet (after MADV_DONTNEED): the first
        # access gives them a zeroed page, as a CPU page fault does.
        self._zero: set[int] = set()
        # MMU notifiers (mmu_interval_notifier): called with (va, length) before the pages of
        # a range are taken from the process (munmap, MADV_DONTNEED), so a device's mapping
        # of them (an on-demand paging MR) is gone before the pages are freed.
        self.notifiers: list[Callable[[int, int], None]] = []
        self.populated = 0  # pages given on first touch

    def mmap(self, size: int) -> int:
        """Anonymous memory backed by scattered physical pages; returns a page-aligned VA."""
        npages = max(1, (size + PAGE_SIZE - 1) >> PAGE_SHIFT)
        if npages << PAGE_SHIFT > self.mem.free_bytes:
            raise MemoryError_(f"cannot map {size} bytes: {self.mem.free_bytes} bytes free",
                               errno.ENOMEM)
        va = self._next
        self._next += (npages + 1) << PAGE_SHIFT  # leave a guard page
        for i in range(npages):
            self.pages[(va >> PAGE_SHIFT) + i] = self.mem.alloc_page()
        return va

    def map_phys(self, pa: int, size: int) -> int:
        """Map physically contiguous kernel memory (a ring) into the process (mmap of the
        device file). The kernel owns the pages: unmap_phys removes the mapping only."""
        npages = max(1, (size + PAGE_SIZE - 1) >> PAGE_SHIFT)
        va = self._next
        self._next += (npages + 1) << PAGE_SHIFT
        for i in range(npages):
            vpn = (va >> PAGE_SHIFT) + i
            self.pages[vpn] = pa + (i << PAGE_SHIFT)
            self._kernel.add(vpn)
        return va

    def unmap_phys(self, va: int, size: int) -> None:
        """Zap a kernel mapping: afterwards any access through it faults (EFAULT). Like
        every way a page leaves the address space, it runs the MMU notifiers first
        (unmap_mapping_range does), so no device mapping keeps the page."""
        npages = max(1, (size + PAGE_SIZE - 1) >> PAGE_SHIFT)
        for n in list(self.notifiers):
            n(va & ~(PAGE_SIZE - 1), npages << PAGE_SHIFT)
        for i in range(npages):
            vpn = (va >> PAGE_SHIFT) + i
            if vpn in self._kernel:
                self._kernel.discard(vpn)
                self.pages.pop(vpn, None)

    def munmap(self, va: int, size: int) -> None:
        """Unmap anonymous memory and free its pages (a pinned page is freed at its unpin)."""
        self._drop(va, size, keep=False)

    def madvise_dontneed(self, va: int, size: int) -> None:
        """MADV_DONTNEED on private anonymous memory: its pages are freed and the range stays
        mapped; the next access finds a zeroed page. A pinned page is freed at its unpin:
        the device keeps the old page, the process gets a new one, as in Linux."""
        self._drop(va, size, keep=True)

    def _drop(self, va: int, size: int, keep: bool) -> None:
        npages = max(1, (size + PAGE_SIZE - 1) >> PAGE_SHIFT)
        for n in list(self.notifiers):
            n(va & ~(PAGE_SIZE - 1), npages << PAGE_SHIFT)
        for i in range(npages):
            vpn = (va >> PAGE_SHIFT) + i
            if vpn in self._kernel:
                continue  # a ring mapping: only its owner (the kernel) removes it
            pa = self.pages.pop(vpn, None)
            if pa is not None:
                self.mem.free_page(pa)
                if keep:
                    self._zero.add(vpn)
            elif not keep:
                self._zero.discard(vpn)

    def translate(self, va: int) -> int:
        pa = self.pages.get(va >> PAGE_SHIFT)
        if pa is None:
            vpn = va >> PAGE_SHIFT
            if vpn not in self._zero:
                raise MemoryError_(f"address 0x{va:x} is not mapped", errno.EFAULT)
            pa = self.mem.alloc_page()  # (freed pages read as zeros)
            self._zero.discard(vpn)
            self.pages[vpn] = pa
            self.populated += 1
        return pa + (va & (PAGE_SIZE - 1))

    def is_present(self, va: int) -> bool:
        """Whether the page under `va` has a physical page now (without touching it)."""
        return va >> PAGE_SHIFT in self.pages

    def user_page(self, va: int) -> int:
        """The physical address under `va` for a device mapping of process memory
        (get_user_pages, hmm_range_fault): a page it has none of yet is given one; a ring
        mapping is device memory to the process (remap_pfn_range: VM_IO | VM_PFNMAP), which
        neither may take (EFAULT), as an unmapped address."""
        if va >> PAGE_SHIFT in self._kernel:
            raise MemoryError_(f"address 0x{va:x} is a device mapping", errno.EFAULT)
        return self.translate(va)

    def pin(self, va: int, length: int) -> list[int]:
        """Pin the pages under [va, va+length) and return their physical addresses in order
        (get_user_pages; EFAULT at the first unmapped page or device mapping, nothing
        pinned then)."""
        first = va >> PAGE_SHIFT
        last = (va + max(length, 1) - 1) >> PAGE_SHIFT
        out = [self.user_page(vpn << PAGE_SHIFT) for vpn in range(first, last + 1)]
        self.mem.pin(out)
        return out

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
