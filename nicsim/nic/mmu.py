"""The NIC's memory management unit: every block's way to a key check and a translation.

It puts together what a check or a walk costs and what it can raise: the translation cache
(nicsim.nic.translation: MPT and MTT entries, held translations and their epochs), the DMA
read time of each cache miss on PCIe, and the page fault of an on-demand paging region whose
page is not present (nicsim.nic.odp).
"""

from __future__ import annotations

from nicsim.host.pcie import Pcie
from nicsim.hwif import Access, XlateStatus
from nicsim.nic.odp import PageFaults
from nicsim.nic.translation import TranslationCache, Walk

_OK = XlateStatus.OK  # (bound once: see nicsim.nic.nic's _RC)
# Accesses that write the region (a page fault for them needs writable pages).
_WRITES = int(Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_ATOMIC)
# Bytes a cache miss reads: an MPT entry or a line of MTT entries. (They come from the
# NIC's context memory, which the driver maps in large contiguous chunks: the IOMMU's IO-TLB
# is not charged for them, as for any read without an address.)
MISS_READ = 64


class Mmu:
    def __init__(self, xlate: TranslationCache, pcie: Pcie, faults: PageFaults) -> None:
        self.xlate = xlate
        self.pcie = pcie
        self.faults = faults

    def translate(self, key: int, pd: int, access: int, va: int, length: int,
                  t: float, qpn: int = 0) -> tuple[XlateStatus, list[tuple[int, int]], float]:
        """Check and translate through the cache; each miss costs a DMA read after `t`.
        A page of an on-demand paging region not present: PAGE_FAULT, the fault raised.
        `qpn`: the QP a remote access arrived on (a type 2 window answers on its own)."""
        st, segs, misses = self.xlate.translate(key, pd, access, va, length, qpn)
        pcie = self.pcie
        for _ in range(misses):
            t = pcie.dma_read(MISS_READ, t)
        if st is XlateStatus.PAGE_FAULT:
            st = self._page_fault(access, t)
        return st, segs, t

    def _page_fault(self, access: int, t: float) -> XlateStatus:
        """Translation met a page not present (xlate.fault says where): raise the fault, or
        ODP_ERROR if the driver could not resolve the region's last one."""
        fault = self.xlate.fault
        assert fault is not None
        if fault[0] in self.faults.failed:
            return XlateStatus.ODP_ERROR
        self.faults.fault(fault, bool(access & _WRITES), t)
        return XlateStatus.PAGE_FAULT

    def check_walk(self, pieces: list[tuple[int, int, int]], pd: int, access: int, t: float,
                   qpn: int = 0) -> tuple[XlateStatus, Walk, float]:
        """Check every (key, va, length) piece of a buffer (MPT misses cost DMA reads after
        `t`); the Walk then translates it as it is used (see `walk`). `qpn`: as translate's."""
        xlate, pcie = self.xlate, self.pcie
        checked = []
        for key, va, length in pieces:
            st, mpt, misses = xlate.check_key(key, pd, access, va, length, qpn)
            for _ in range(misses):
                t = pcie.dma_read(MISS_READ, t)
            if st is not _OK:
                if st is XlateStatus.PAGE_FAULT:
                    st = self._page_fault(access, t)
                return st, Walk(), t
            checked.append((mpt, va, length))
        return _OK, Walk(checked), t

    def walk(self, w: Walk, upto: int, t: float) -> float:
        """Translate w on to `upto` bytes; each MTT line missed costs a DMA read after `t`.
        Returns when the segments are known."""
        for _ in range(self.xlate.walk(w, upto)):
            t = self.pcie.dma_read(MISS_READ, t)
        return t
