"""A C program's registered memory, as the simulated NIC sees it (nicsim exec's verbs server).

A C program under `nicsim exec` registers its own buffers (malloc, memalign, the stack);
the simulated NIC reads and writes the simulated host's memory (PhysMem). The scheme that
joins them (docs/explanation/c-programs.md, "Registered memory"):

- **Mirror pages at the program's addresses.** The server's pyverbs process for the program
  has its own simulated address space per host (nicsim.driver.user.process). At ibv_reg_mr
  the server maps simulated pages there at the *same virtual addresses* as the program's
  buffer (one page per 4 KiB page the buffer touches, shared by overlapping registrations)
  and registers the MR over them. So every address the program hands to a verb (an SGE, a
  remote address it sends to its peer) means the same bytes on both sides: nothing is
  translated. The server's own allocations in that address space (rings it maps, inline
  scratch) start at SIM_BASE, above any user-space address, so they never collide.
- **Reads: copied in when the NIC may read.** The program's bytes are copied into the mirror
  (process_vm_readv, straight into the simulated memory's mapping, no Python copy) for the
  SGEs of each ibv_post_send at the post (the program may not touch them until the
  completion), and, before every request, for the MRs a peer may read (REMOTE_READ,
  REMOTE_ATOMIC): a responder reads them without the owner making a verb call.
- **Writes: copied out when they land.** Every device write to host memory goes through
  PhysMem.post1 (nicsim.nic.dma, the responder); the server wraps that method on each host's
  memory to note the writes that fall in a mirror page, and after every request copies what
  has landed by then into its program (process_vm_writev), whichever program made the
  request: a peer's RDMA WRITE or SEND reaches the receiver's memory at the end of the verb
  call during which it landed, as DMA lands while the process does something else. A
  completion is never seen before its data: the CQE lands after the data (PCIe ordering)
  and the copy is made before the reply.

Costs: a post copies its SGEs' bytes in; a landing write is copied out once; a registration
copies the buffer in once; MRs open to remote reads are copied in whole before each request
(O(their size) per request: perftest's READ tests register 8 KiB per QP by default). The
NIC's per-packet write pays one dictionary look-up per page it touches.
"""

from __future__ import annotations

import ctypes
import errno
from collections.abc import Iterator
from dataclasses import dataclass, field

from nicsim.host.memory import AddressSpace, MemoryError_, PhysMem
from nicsim.hwif import PAGE_SHIFT, PAGE_SIZE

# Where the server's own mappings start in a C program's simulated address space: above
# the largest user-space address (2^56 with 5-level paging), so the program's buffers,
# mirrored at their own addresses, never meet them.
SIM_BASE = 1 << 57
IOV_MAX = 1024


class _Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


_libc = ctypes.CDLL(None, use_errno=True)
_readv = _libc.process_vm_readv
_writev = _libc.process_vm_writev
for _f in (_readv, _writev):
    _f.restype = ctypes.c_ssize_t
    _f.argtypes = [ctypes.c_int, ctypes.POINTER(_Iovec), ctypes.c_ulong,
                   ctypes.POINTER(_Iovec), ctypes.c_ulong, ctypes.c_ulong]


def _transfer(fn: object, pid: int, pieces: list[tuple[int, int, int]]) -> int:
    """Copy (local address, remote address, length) pieces with process_vm_readv/writev;
    returns the errno of the first failure (0: all copied). A dead program (ESRCH) or a
    buffer it unmapped (EFAULT) ends the copy: the NIC's DMA to freed memory goes nowhere."""
    for at in range(0, len(pieces), IOV_MAX):
        chunk = pieces[at:at + IOV_MAX]
        local = (_Iovec * len(chunk))(*((lo, n) for lo, _r, n in chunk))
        remote = (_Iovec * len(chunk))(*((r, n) for _lo, r, n in chunk))
        want = sum(n for _lo, _r, n in chunk)
        got = fn(pid, local, len(chunk), remote, len(chunk), 0)  # type: ignore[operator]
        if got < 0:
            return ctypes.get_errno() or errno.EIO
        if got != want:
            return errno.EFAULT  # (a partial copy stops at the first unmapped page)
    return 0


class Tracker:
    """One host's memory: which physical pages mirror which program's pages, and the device
    writes to them not yet copied out (PhysMem.post1 is wrapped to note them)."""

    def __init__(self, mem: PhysMem) -> None:
        self.mem = mem
        self.base = mem.buf.ctypes.data  # the simulated memory's address in this process
        self.owner: dict[int, tuple[Mirror, int]] = {}  # pfn -> (mirror, vpn)
        self.dirty: list[tuple[float, int, int]] = []  # (lands at, pa, length)
        self.copied_out = 0  # bytes written into programs (tests, the log)
        orig = mem.post1
        owner, dirty = self.owner, self.dirty

        def post1(t: float, pa: int, d: bytes | memoryview) -> None:
            orig(t, pa, d)
            if owner:
                n = len(d)
                for p in range(pa >> PAGE_SHIFT, ((pa + n - 1) >> PAGE_SHIFT) + 1):
                    if p in owner:
                        dirty.append((t, pa, n))
                        return

        mem.post1 = post1  # type: ignore[method-assign]

    def flush(self) -> None:
        """Copy every noted write that has landed by now into its program."""
        if not self.dirty:
            return
        mem = self.mem
        now = mem.env.now if mem.env is not None else float("inf")
        if mem.posted:
            mem.sync()
        keep: list[tuple[float, int, int]] = []
        by_pid: dict[int, list[tuple[int, int, int]]] = {}
        for t, pa, n in self.dirty:
            if t > now:
                keep.append((t, pa, n))  # lands later: copied after the request it lands in
                continue
            end = pa + n
            while pa < end:
                page_end = ((pa >> PAGE_SHIFT) + 1) << PAGE_SHIFT
                k = min(end, page_end) - pa
                o = self.owner.get(pa >> PAGE_SHIFT)
                if o is not None:
                    mirror, vpn = o
                    by_pid.setdefault(mirror.pid, []).append(
                        (self.base + pa, (vpn << PAGE_SHIFT) | (pa & (PAGE_SIZE - 1)), k))
                pa += k
        self.dirty[:] = keep
        for pid, pieces in by_pid.items():
            if not _transfer(_writev, pid, pieces):
                self.copied_out += sum(p[2] for p in pieces)


@dataclass
class Mirror:
    """A program's registered pages in one simulated address space (one per host it has
    registered memory on)."""

    pid: int
    aspace: AddressSpace
    tracker: Tracker
    refs: dict[int, int] = field(default_factory=dict)  # vpn -> registrations covering it

    def map(self, va: int, length: int) -> None:
        """Mirror pages for [va, va+length) (EFAULT if one is the server's own mapping)."""
        pages = self.aspace.pages
        mem = self.aspace.mem
        done: list[int] = []
        try:
            for vpn in _vpns(va, length):
                if vpn in self.refs:
                    self.refs[vpn] += 1
                elif vpn in pages:
                    raise MemoryError_(f"0x{vpn << PAGE_SHIFT:x} is not the program's",
                                       errno.EFAULT)
                else:
                    pa = mem.alloc_page()
                    pages[vpn] = pa
                    self.refs[vpn] = 1
                    self.tracker.owner[pa >> PAGE_SHIFT] = (self, vpn)
                done.append(vpn)
        except MemoryError_:
            self._drop(done)
            raise

    def unmap(self, va: int, length: int) -> None:
        self._drop(list(_vpns(va, length)))

    def unmap_all(self) -> None:
        self._drop([v for v, n in self.refs.items() for _ in range(n)])

    def _drop(self, vpns: list[int]) -> None:
        for vpn in vpns:
            n = self.refs.get(vpn, 0) - 1
            if n > 0:
                self.refs[vpn] = n
                continue
            self.refs.pop(vpn, None)
            pa = self.aspace.pages.get(vpn)
            if pa is not None:
                self.tracker.owner.pop(pa >> PAGE_SHIFT, None)
                pfn = pa >> PAGE_SHIFT
                self.tracker.dirty[:] = [d for d in self.tracker.dirty
                                         if not d[1] >> PAGE_SHIFT <= pfn
                                         <= (d[1] + d[2] - 1) >> PAGE_SHIFT]
                # (munmap frees the page, or at its unpin if the NIC still holds it)
                self.aspace.munmap(vpn << PAGE_SHIFT, PAGE_SIZE)

    def copy_in(self, va: int, length: int) -> int:
        """The program's bytes of [va, va+length) into the mirror (the parts of it that are
        mirrored); the errno of a failed copy, 0 if none."""
        pieces = list(self._pieces(va, length))
        if not pieces:
            return 0
        mem = self.aspace.mem
        if mem.posted:
            mem.sync()  # (writes that landed first, then the program's bytes over them)
        return _transfer(_readv, self.pid, pieces)

    def _pieces(self, va: int, length: int) -> Iterator[tuple[int, int, int]]:
        end = va + length
        base = self.tracker.base
        pages = self.aspace.pages
        while va < end:
            page_end = ((va >> PAGE_SHIFT) + 1) << PAGE_SHIFT
            k = min(end, page_end) - va
            vpn = va >> PAGE_SHIFT
            if vpn in self.refs:
                yield base + pages[vpn] + (va & (PAGE_SIZE - 1)), va, k
            va += k


def _vpns(va: int, length: int) -> range:
    if length <= 0:
        return range(0)
    return range(va >> PAGE_SHIFT, ((va + length - 1) >> PAGE_SHIFT) + 1)

