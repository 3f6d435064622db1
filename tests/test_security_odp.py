"""On-demand paging MRs and pages that leave a process (second protection round).

Linux fires the MMU notifiers on every way a page leaves an address space (munmap,
MADV_DONTNEED, the zap of a device mapping when its object is destroyed, process exit), so
an ODP MR never keeps a page the process no longer has. The rings nsnic maps into a process
are device memory to the process (remap_pfn_range: VM_IO | VM_PFNMAP): get_user_pages and
hmm_range_fault refuse such pages, so no MR, pinned or on demand, can be made of them.
Either way, once a CQ is destroyed and its ring page goes to another process, nothing
registered by the first process reaches it.
"""

from __future__ import annotations

import errno

import pytest
from nicsim.driver import enums as e
from nicsim.driver.user.errors import PyverbsRDMAError
from nicsim.driver.user.verbs import CQ, MR, PD, SGE, Context

from nicsim.hwif import CQE_SIZE, PAGE_SIZE
from nicsim.testing.rdma import ALL_ACCESS, Side, pair, rdma_write, settle
from nicsim.world import World

ODP = ALL_ACCESS | e.IBV_ACCESS_ON_DEMAND
RING_CQE = 256  # a ring of whole pages of its own (not sharing a page with others)
PREFETCH_WRITE, FLUSH = e._IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, e._IBV_ADVISE_MR_FLAG_FLUSH


def _pair() -> tuple[World, Side, Side]:
    return pair(access=ODP)


def _ring(cq: CQ) -> tuple[int, int]:
    """(VA, bytes) of a CQ's ring as mapped in its process."""
    p = cq._p  # the provider's view of the CQ: where the ring is mapped
    return p.r.ring_va, p.size * CQE_SIZE


def test_odp_mr_over_a_ring_never_reaches_the_next_owner_of_its_pages() -> None:
    w, a, b = _pair()
    cq = CQ(b.ctx, RING_CQE)
    va, n = _ring(cq)
    assert n >= 2 * PAGE_SIZE
    pas = [b.ctx.aspace.translate(va + i) for i in range(0, n, PAGE_SIZE)]
    odp = MR(b.pd, n, ODP, address=va)  # registration pins nothing: it is accepted
    # Fault it in ahead of the NIC (ibv_advise_mr): device memory cannot be mapped for it.
    b.pd.advise_mr(PREFETCH_WRITE, FLUSH, [SGE(va, n, odp.lkey)])
    cq.close()
    other = Context("nsnic0", host=w.hosts["b"])
    cq2 = CQ(other, RING_CQE)  # the freed ring pages go to the next ring of that size
    va2, _ = _ring(cq2)
    assert [other.aspace.translate(va2 + i) for i in range(0, n, PAGE_SIZE)] == pas
    before = other.aspace.read(va2, n)
    assert rdma_write(a, odp.rkey, va, b"\x77" * 64) == e.IBV_WC_REM_ACCESS_ERR
    settle(w)
    assert other.aspace.read(va2, n) == before


def test_unmapping_a_ring_runs_the_mmu_notifiers() -> None:
    """The zap of a ring mapping is a page leaving the address space like munmap: an ODP MR
    over it hears of it (and a pinned MR over it cannot exist at all)."""
    w, _a, b = _pair()
    cq = CQ(b.ctx, RING_CQE)
    va, n = _ring(cq)
    seen: list[tuple[int, int]] = []
    b.ctx.aspace.notifiers.append(lambda v, ln: seen.append((v, ln)))
    cq.close()
    assert any(v <= va and va + n <= v + ln for v, ln in seen)
    del w


def test_pinned_mr_over_a_ring_is_refused() -> None:
    _w, _a, b = _pair()
    cq = CQ(b.ctx, RING_CQE)
    va, n = _ring(cq)
    with pytest.raises(PyverbsRDMAError) as err:
        MR(b.pd, n, ALL_ACCESS, address=va)
    assert err.value.error_code == errno.EFAULT
    # And a QP's rings the same.
    with pytest.raises(PyverbsRDMAError):
        MR(PD(b.ctx), PAGE_SIZE, ALL_ACCESS, address=b.qp._p.r.sq_va)  # type: ignore


def test_odp_prefetch_of_a_ring_maps_nothing() -> None:
    _w, _a, b = _pair()
    cq = CQ(b.ctx, RING_CQE)
    va, n = _ring(cq)
    odp = MR(b.pd, n, ODP, address=va)
    hw = b.ctx.host.kernel.devices["nsnic0"].hw  # type: ignore[attr-defined]
    b.pd.advise_mr(PREFETCH_WRITE, FLUSH, [SGE(va, n, odp.lkey)])
    assert not hw.mrs[odp.lkey >> 8].present
