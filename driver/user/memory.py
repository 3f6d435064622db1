"""The process's own memory (pyverbs.mem_alloc): mmap, malloc, posix_memalign, and reading and
writing it, in the simulated process's address space on its home host (the host of the
first device; see nicsim.driver.user.process). Addresses are the simulated process's
virtual addresses, the ones MR(pd, length, access, address=...) registers.
"""

from __future__ import annotations

import mmap as _mm
import struct

from nicsim.driver.user.errors import PyverbsError
from nicsim.driver.user.process import current
from nicsim.driver.user.unsupported import unsupported

from nicsim.host.memory import AddressSpace, MemoryError_

PROT_EXEC_ = _mm.PROT_EXEC
PROT_READ_ = _mm.PROT_READ
PROT_WRITE_ = _mm.PROT_WRITE
PROT_NONE_ = 0
MAP_PRIVATE_ = _mm.MAP_PRIVATE
MAP_SHARED_ = _mm.MAP_SHARED
MAP_FIXED_ = 0x10
MAP_ANONYMOUS_ = _mm.MAP_ANONYMOUS
MAP_STACK_ = 0x20000
MAP_LOCKED_ = 0x2000
MAP_HUGETLB_ = 0x40000
MAP_POPULATE_ = 0x8000
MAP_NORESERVE_ = 0x4000
MAP_GROWSDOWN_ = 0x100
MADV_DONTNEED = 4

_blocks: dict[int, tuple[int, int]] = {}  # malloc'ed pointer -> (mapping, its length)


def _aspace() -> AddressSpace:
    proc = current()
    return proc.aspace(proc.home)


def mmap(addr: int = 0, length: int = 100, prot: int = PROT_READ_ | PROT_WRITE_,
         flags: int = MAP_PRIVATE_ | MAP_ANONYMOUS_, fd: int = 0, offset: int = 0) -> int:
    """Anonymous private memory; the simulated process has no files to map, no huge pages
    and no fixed placement."""
    if not flags & MAP_ANONYMOUS_ or flags & (MAP_FIXED_ | MAP_HUGETLB_) or \
            flags & MAP_SHARED_:
        raise MemoryError("Failed to mmap memory: the simulated process maps anonymous "
                          "private memory only")
    try:
        return _aspace().mmap(length)
    except MemoryError_ as e:
        raise MemoryError(f"Failed to mmap memory: {e}") from None


def munmap(addr: int, length: int) -> None:
    _aspace().munmap(addr, length)


def madvise(addr: int, length: int, flags: int = MADV_DONTNEED) -> None:
    """MADV_DONTNEED: the range's pages are freed (an on-demand paging MR over them is
    invalidated first); the next access gives zeroed pages. Other advice: unsupported."""
    if flags != MADV_DONTNEED:
        raise unsupported("Failed to madvise memory",
                          f"the simulated process takes only MADV_DONTNEED, not {flags}")
    if length <= 0 or addr & 4095:
        raise PyverbsError(f"Failed to madvise memory: EINVAL (0x{addr:x}+{length})")
    try:
        _aspace().madvise_dontneed(addr, length)
    except MemoryError_ as e:
        raise PyverbsError(f"Failed to madvise memory: {e}") from None


def posix_memalign(size: int, alignment: int = 8) -> int:
    """Zeroed memory aligned to `alignment` (a power of two)."""
    if alignment <= 0 or alignment & (alignment - 1):
        raise MemoryError(f"Failed to allocate memory: alignment {alignment}")
    a = _aspace()
    extra = max(0, alignment - 4096)
    try:
        base = a.mmap(size + extra)
    except MemoryError_ as e:
        raise MemoryError(f"Failed to allocate memory: {e}") from None
    ptr = (base + alignment - 1) & ~(alignment - 1)
    _blocks[ptr] = (base, size + extra)
    a.write(ptr, bytes(size))
    return ptr


def malloc(size: int) -> int:
    return posix_memalign(size, 16)


def free(ptr: int) -> None:
    blk = _blocks.pop(ptr, None)
    if blk is not None:
        _aspace().munmap(*blk)


def write(addr: int, data: bytes | str, length: int, offset: int = 0) -> None:
    b = data.encode() if isinstance(data, str) else bytes(data)
    _aspace().write(addr + offset, b[:length])


def read(addr: int, length: int, offset: int = 0) -> bytes:
    return _aspace().read(addr + offset, length)


def writebe32(addr: int, val: int, offset: int = 0) -> None:
    _aspace().write(addr + 4 * offset, struct.pack(">I", val))


def writebe64(addr: int, val: int, offset: int = 0) -> None:
    _aspace().write(addr + 8 * offset, struct.pack(">Q", val))


def read32(addr: int, offset: int = 0) -> int:
    return struct.unpack("<I", _aspace().read(addr + 4 * offset, 4))[0]


def read64(addr: int, offset: int = 0) -> int:
    return struct.unpack("<Q", _aspace().read(addr + 8 * offset, 8))[0]


__all__ = ["PyverbsError", "free", "madvise", "malloc", "mmap", "munmap", "posix_memalign",
           "read", "read32", "read64", "write", "writebe32", "writebe64"]
