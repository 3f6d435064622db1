"""On-demand paging in the nsnic driver (what mlx5's odp.c and ib_umem_odp do for ConnectX).

- Registration pins nothing: the MPT entry has MptFlags.ODP and the region's MTT entries are
  written not present (0). The region follows the process's address space from then on.
- Page faults: the NIC reports an access to a page not present with a PAGE_FAULT EQE on its
  own event queue (ODP_EQN). The EQ's MSI-X write wakes the fault handler, a kernel worker (a
  SimPy process with its own CPU, as mlx5's page-fault work queue runs beside the program).
  For each fault it makes the pages present in the process (hmm_range_fault: a page the
  process has none of yet is given one, zeroed), writes their MTT entries (WRITE_MTT) and lets
  the region's work go on (RESUME_PAGE_FAULT; with RESUME_FAILED when the address is not
  mapped at all). Its time: the interrupt, CpuCosts.odp_fault per fault, odp_page per page,
  and the two commands.
- Invalidation: an MMU notifier on the address space. Before munmap or MADV_DONTNEED takes
  pages of a region, ODP_INVALIDATE (fenced) makes them not present and revokes what the NIC
  holds through the region, so the pages can go; the next access faults again. Each
  invalidation advances the region's sequence number: a fault whose pages were invalidated
  while it was being resolved is resolved again (mmu_interval_read_retry).
- ibv_advise_mr: PREFETCH and PREFETCH_WRITE resolve a range ahead of the NIC's accesses,
  PREFETCH_NO_FAULT maps only pages the process already has; synchronous with
  IBV_ADVISE_MR_FLAG_FLUSH, else in the worker, the call returning at once.

Not modelled: implicit ODP (a region for the whole address space; the device reports no
IMPLICIT capability and registration of one fails as in rxe), huge pages, read-only faults
(every page is mapped writable).
"""

from __future__ import annotations

import errno
from collections.abc import Callable, Generator
from enum import IntEnum

import simpy
from nicsim.driver.kernel.hw.device import NsnicDevice
from nicsim.driver.kernel.hw.objects import MTT_PER_CMD, HwEq, HwError, HwMr

from nicsim.host.memory import AddressSpace, MemoryError_
from nicsim.hwif import (
    ODP_EQN,
    PAGE_SHIFT,
    PAGE_SIZE,
    RESUME_FAILED,
    CmdOpcode,
    DevCap,
    EqeType,
    MptFlags,
    OdpCaps,
    OdpGeneral,
    OdpRange,
    PageFaultEqe,
    Reg,
    pack_mtt,
)


class Advice(IntEnum):
    """ib_uverbs_advise_mr_advice."""

    PREFETCH = 0
    PREFETCH_WRITE = 1
    PREFETCH_NO_FAULT = 2


class OdpHandler:
    def __init__(self, hw: NsnicDevice) -> None:
        self.hw = hw
        self.caps = OdpCaps(0, 0, 0, 0)
        if hw.caps.flags & DevCap.ODP:  # (a device without it has no QUERY_ODP either)
            self.caps = OdpCaps.unpack(hw.cmd(CmdOpcode.QUERY_ODP, out_size=OdpCaps.size()))
        self.mrs: dict[int, HwMr] = {}  # ODP regions by MPT index
        self._notifiers: dict[int, Callable[[int, int], None]] = {}
        self.eq: HwEq | None = None
        self._running = False
        # (a plain dict: the driver keeps its own counters, not the NIC model's class)
        self.counters: dict[str, int] = dict.fromkeys(
            ("interrupts", "faults", "pages_mapped", "fault_failures", "stale_faults",
             "retries", "invalidations", "pages_invalidated", "prefetches",
             "pages_prefetched"), 0)
        if self.supported:
            self.eq = hw.create_eq(ODP_EQN)
            self._watch()

    @property
    def supported(self) -> bool:
        return bool(self.caps.general & OdpGeneral.SUPPORT)

    # -- registration -----------------------------------------------------------------------

    def reg_mr(self, aspace: AddressSpace, va: int, length: int, access: int,
               pd: int) -> HwMr:
        hw = self.hw
        if not self.supported:
            raise HwError(f"{hw.name}: the device has no on-demand paging", errno.EOPNOTSUPP)
        npages = ((va + length - 1) >> PAGE_SHIFT) - (va >> PAGE_SHIFT) + 1
        idx = hw.mpts.alloc()
        start = hw.mtt.alloc(npages)
        if start is None:
            hw.mpts.free(idx)
            raise HwError(f"out of MTT entries for {npages} pages", errno.ENOMEM)
        mr = HwMr(hw._next_key(idx), idx, start, npages, va, length, [], aspace, odp=True)
        self._write(mr, access, pd)
        hw.mrs[idx] = self.mrs[idx] = mr
        note = self._notifiers[idx] = lambda v, n: self._invalidate(mr, v, n)
        aspace.notifiers.append(note)
        return mr

    def _write(self, mr: HwMr, access: int, pd: int) -> None:
        """The region's MTT entries not present, then its MPT entry."""
        mr.present.clear()
        mr.seq += 1
        self.hw._write_mr(mr.key, mr.index, mr.mtt_start, [0] * mr.npages, mr.va, mr.length,
                          access, pd, MptFlags.VALID | MptFlags.ODP)

    def rereg(self, mr: HwMr, va: int, length: int, access: int, pd: int) -> None:
        """After INVALIDATE_MPT: the region anew, every page not present."""
        hw = self.hw
        if (va, length) != (mr.va, mr.length):
            npages = ((va + length - 1) >> PAGE_SHIFT) - (va >> PAGE_SHIFT) + 1
            start = hw.mtt.alloc(npages)
            if start is None:
                raise HwError(f"out of MTT entries for {npages} pages", errno.ENOMEM)
            hw.mtt.free(mr.mtt_start, mr.npages)
            mr.mtt_start, mr.npages, mr.va, mr.length = start, npages, va, length
        self._write(mr, access, pd)

    def forget(self, mr: HwMr) -> None:
        """Deregistered (after INVALIDATE_MPT): no notifier, and a fault being resolved for
        it is dropped."""
        mr.dead = True
        mr.seq += 1
        del self.mrs[mr.index]
        note = self._notifiers.pop(mr.index)
        if note in mr.aspace.notifiers:
            mr.aspace.notifiers.remove(note)

    # -- invalidation (the MMU notifier) ----------------------------------------------------

    def _invalidate(self, mr: HwMr, va: int, length: int) -> None:
        lo, hi = max(va, mr.first_va), min(va + length, mr.va + mr.length)
        if lo >= hi:
            return
        first, last = (lo - mr.first_va) >> PAGE_SHIFT, (hi - 1 - mr.first_va) >> PAGE_SHIFT
        # The interval notifier's protocol (mmu_interval_set_seq / mmu_interval_read_retry,
        # as mlx5_ib_invalidate_range and ib_umem_odp use it): the sequence changes when the
        # invalidation starts, so a resolution that looked the pages up before it retries.
        mr.seq += 1
        # A resolution (a page fault, or a prefetch, which runs in a worker of its own) that
        # passed its sequence check holds the mailbox until its MTT entries are written:
        # only once it is done is `present` all the device may hold in the range.
        self.hw.wait_mailbox()
        hit = [p for p in mr.present if first <= p <= last]
        if hit:
            a, b = min(hit), max(hit)
            self.hw.cmd(CmdOpcode.ODP_INVALIDATE,
                        OdpRange(mr.mtt_start + a, b - a + 1).pack(), mod=mr.index)
            for p in hit:
                del mr.present[p]
            self.counters["invalidations"] += 1
            self.counters["pages_invalidated"] += len(hit)
        # And when it ends: a resolution that looked the pages up while it waited (they are
        # still the process's until the notifier returns) retries too, and then finds them
        # gone. Without this, its MTT entries would keep pages the caller frees next.
        mr.seq += 1

    # -- page faults ------------------------------------------------------------------------

    def _watch(self) -> None:
        assert self.eq is not None
        msi = self.eq.msi_pa
        self.hw.host.mem.watch(msi, msi + 4, self._interrupt)

    def _interrupt(self) -> None:
        """The EQ's MSI-X write landed: run the handler (unless it is running)."""
        if not self._running:
            self._running = True
            self.hw.host.env.process(self._handler())

    def _handler(self) -> Generator[simpy.Event, None, None]:
        hw, env = self.hw, self.hw.host.env
        assert self.eq is not None
        self.counters["interrupts"] += 1
        yield env.timeout(hw.host.costs.interrupt)
        while True:
            raws = hw.new_eqes(self.eq)
            if not raws:
                break
            for raw in raws:
                if raw[0] != EqeType.PAGE_FAULT:
                    continue  # only page faults come to this EQ
                e = PageFaultEqe.unpack(raw)
                self.counters["faults"] += 1
                yield from self._resolve(e.obj, e.page, e.npages, True, True)
        self._watch()
        hw.bar.write64(Reg.EQ_DB, hw.eq_rearm_word(self.eq), cpu=False)
        self._running = False

    def _map(self, mr: HwMr, first: int, n: int, fault: bool
             ) -> tuple[list[tuple[int, list[int]]], bool]:
        """The physical pages of region pages [first, first + n): runs of consecutive pages
        (first page, addresses), and whether a page could not be mapped (not mapped in the
        process at all). `fault`: give the process a page where it has none yet (else such
        pages are left out, PREFETCH_NO_FAULT)."""
        runs: list[tuple[int, list[int]]] = []
        cur: list[int] = []
        start = first
        for p in range(first, min(first + n, mr.npages)):
            va = mr.first_va + (p << PAGE_SHIFT)
            if not fault and not mr.aspace.is_present(va):
                pa = None
            else:
                try:
                    pa = mr.aspace.user_page(va)
                except MemoryError_:
                    if cur:
                        runs.append((start, cur))
                    return runs, True
            if pa is None:
                if cur:
                    runs.append((start, cur))
                cur = []
                continue
            if not cur:
                start = p
            cur.append(pa)
        if cur:
            runs.append((start, cur))
        return runs, False

    def _resolve(self, idx: int, first: int, n: int, fault: bool, resume: bool
                 ) -> Generator[simpy.Event, None, None]:
        """Map region `idx`'s pages [first, first + n) and write their MTT entries; then,
        for a fault, RESUME_PAGE_FAULT."""
        hw, env, costs = self.hw, self.hw.host.env, self.hw.host.costs
        mr = self.mrs.get(idx)
        if mr is None:
            self.counters["stale_faults"] += 1  # deregistered: the NIC forgot it already
            return
        yield env.timeout(costs.odp_fault)
        while True:
            seq = mr.seq
            runs, failed = self._map(mr, first, n, fault)
            mapped = sum(len(pas) for _, pas in runs)
            yield env.timeout(costs.odp_page * mapped)
            yield from hw.mailbox()
            try:
                if mr.dead:
                    return
                if mr.seq != seq:  # invalidated meanwhile: map again
                    self.counters["retries"] += 1
                    continue
                for start, pas in runs:
                    # Mapped for the device from the moment its MTT entries may be written.
                    mr.present.update(zip(range(start, start + len(pas)), pas, strict=True))
                    for i in range(0, len(pas), MTT_PER_CMD):
                        yield from hw.cmd_in_process(CmdOpcode.WRITE_MTT,
                                                     pack_mtt(pas[i:i + MTT_PER_CMD]),
                                                     mr.mtt_start + start + i)
                self.counters["pages_mapped" if resume else "pages_prefetched"] += mapped
                if resume:
                    bad = failed and not mapped
                    self.counters["fault_failures"] += bad
                    yield from hw.cmd_in_process(CmdOpcode.RESUME_PAGE_FAULT,
                                                 mod=idx | (RESUME_FAILED if bad else 0))
                return
            finally:
                hw.release_mailbox()

    # -- ibv_advise_mr ----------------------------------------------------------------------

    def advise(self, mr: HwMr, va: int, length: int, advice: Advice, sync: bool) -> None:
        """Prefetch [va, va + length) of an ODP region (checked by the caller to lie in it):
        synchronously (the caller waits for the MTT writes) or in the worker."""
        hw = self.hw
        first = (va - mr.first_va) >> PAGE_SHIFT
        n = ((va + max(length, 1) - 1 - mr.first_va) >> PAGE_SHIFT) - first + 1
        self.counters["prefetches"] += 1
        work = hw.host.env.process(self._resolve(mr.index, first, n,
                                                 advice is not Advice.PREFETCH_NO_FAULT,
                                                 False))
        if sync:
            while work.is_alive:
                hw.host.spend(PAGE_SIZE / 8)  # the call returns when the work is done
