"""Memory windows and the memory they point to, across time (second protection round).

A window is a view of an MR's pages. Nothing may let a window outlive the translation it
points to: deregistering or re-registering an MR while a window is bound to it is refused
(as rxe_dereg_mr refuses while num_mw > 0; IBA 10.6.7.2.6 lets a CI refuse), a window is
never bound over an on-demand paging MR (the NIC would walk MTT entries that are "not
present"), physical page 0 is never a DMA target, and a type 2 window answers only on the QP
that bound it (IBA 10.6.7.2.1; rxe_lookup_mw). Each attack ends the same way if the rule
does not hold: the pages of the old MR go to another process, and a remote WRITE through the
window lands in that process's memory with SUCCESS.
"""

from __future__ import annotations

import errno

import pytest
from nicsim.driver import enums as e
from nicsim.driver.user.errors import PyverbsRDMAError
from nicsim.driver.user.unsupported import MWBind, MWBindInfo
from nicsim.driver.user.verbs import MR, MW, PD, QP, Context, QPCap, QPInitAttr, SendWR

from nicsim.hwif import PAGE_SIZE, MptFlags
from nicsim.testing.rdma import ALL_ACCESS, Side, connect, pair, rdma_write, settle, wait
from nicsim.world import World

RW, RR = e.IBV_ACCESS_REMOTE_WRITE, e.IBV_ACCESS_REMOTE_READ
BINDABLE = ALL_ACCESS | e.IBV_ACCESS_MW_BIND
STRANGER = b"\xee"
N = 4 * PAGE_SIZE


def _pair() -> tuple[World, Side, Side]:
    return pair(access=BINDABLE)


def _bind2(b: Side, mw: MW, mr: MR, off: int, length: int, rights: int = RW | RR) -> tuple[
        int, int]:
    wr = SendWR(wr_id=77, opcode=e.IBV_WR_BIND_MW)
    wr.set_bind_wr(mw, MWBindInfo(mr, mr.buf + off, length, rights))
    b.qp.post_send(wr)
    (wc,) = wait(b)
    return wr.rkey, wc.status


def _stranger_takes_pages(w: World, n: int) -> tuple[Context, int]:
    """Another process on host b maps `n` bytes (the pages the free list hands out next)
    and fills them with its own pattern."""
    other = Context("nsnic0", host=w.hosts["b"])
    va = other.alloc(n)
    other.aspace.write(va, STRANGER * n)
    return other, va


def _untouched(other: Context, va: int, n: int) -> bool:
    return other.aspace.read(va, n) == STRANGER * n


# -- 1. deregistration under a bound window ------------------------------------------------


@pytest.mark.parametrize("mw_type", [e.IBV_MW_TYPE_1, e.IBV_MW_TYPE_2])
def test_dereg_mr_with_a_bound_window_is_refused(mw_type: int) -> None:
    w, a, b = _pair()
    mr = MR(b.pd, N, BINDABLE)
    mw = MW(b.pd, mw_type)
    if mw_type == e.IBV_MW_TYPE_2:
        key, st = _bind2(b, mw, mr, 0, N)
    else:
        b.qp.bind_mw(mw, MWBind(MWBindInfo(mr, mr.buf, N, RW), e.IBV_SEND_SIGNALED))
        st, key = wait(b)[0].status, mw.rkey
    assert st == e.IBV_WC_SUCCESS
    with pytest.raises(PyverbsRDMAError) as err:
        mr.close()
    assert err.value.error_code == errno.EINVAL
    assert not mr.closed
    # The window still reaches the MR's own pages, which nobody else was given.
    other, va = _stranger_takes_pages(w, N)
    assert rdma_write(a, key, mr.buf + 8, b"still mine") == e.IBV_WC_SUCCESS
    settle(w)
    assert mr.read(10, 8) == b"still mine" and _untouched(other, va, N)
    # Unbound, the MR goes; the window's key then reaches nothing.
    mw.close()
    mr.close()
    other2, va2 = _stranger_takes_pages(w, N)
    assert rdma_write(a, key, mr.buf, b"too late") == e.IBV_WC_REM_ACCESS_ERR
    settle(w)
    assert _untouched(other2, va2, N)


def test_dereg_after_local_invalidate_and_after_a_zero_length_rebind() -> None:
    _w, _a, b = _pair()
    mr = MR(b.pd, N, BINDABLE)
    key, _ = _bind2(b, MW(b.pd, e.IBV_MW_TYPE_2), mr, 0, N)
    inv = SendWR(wr_id=8, opcode=e.IBV_WR_LOCAL_INV)
    inv.imm_data = key
    b.qp.post_send(inv)
    assert wait(b)[0].status == e.IBV_WC_SUCCESS
    mr.close()  # nothing bound any more
    mr2 = MR(b.pd, N, BINDABLE)
    mw1 = MW(b.pd, e.IBV_MW_TYPE_1)
    b.qp.bind_mw(mw1, MWBind(MWBindInfo(mr2, mr2.buf, N, RW), e.IBV_SEND_SIGNALED))
    assert wait(b)[0].status == e.IBV_WC_SUCCESS
    b.qp.bind_mw(mw1, MWBind(MWBindInfo(mr2, mr2.buf, 0, 0), e.IBV_SEND_SIGNALED))
    assert wait(b)[0].status == e.IBV_WC_SUCCESS
    mr2.close()


def test_rebinding_a_type1_window_moves_it_off_the_first_mr() -> None:
    _w, _a, b = _pair()
    m1, m2 = MR(b.pd, N, BINDABLE), MR(b.pd, N, BINDABLE)
    mw = MW(b.pd, e.IBV_MW_TYPE_1)
    for mr in (m1, m2):
        b.qp.bind_mw(mw, MWBind(MWBindInfo(mr, mr.buf, PAGE_SIZE, RW), e.IBV_SEND_SIGNALED))
        assert wait(b)[0].status == e.IBV_WC_SUCCESS
    m1.close()  # the window now points into m2 only
    with pytest.raises(PyverbsRDMAError):
        m2.close()


def test_process_exit_with_bound_windows_releases_everything() -> None:
    w, a, b = _pair()
    mr = MR(b.pd, N, BINDABLE)
    key, _ = _bind2(b, MW(b.pd, e.IBV_MW_TYPE_2), mr, 0, N)
    mw1 = MW(b.pd, e.IBV_MW_TYPE_1)
    b.qp.bind_mw(mw1, MWBind(MWBindInfo(mr, mr.buf, N, RW), e.IBV_SEND_SIGNALED))
    assert wait(b)[0].status == e.IBV_WC_SUCCESS
    drv = w.hosts["b"].kernel.devices["nsnic0"].hw  # type: ignore[attr-defined]
    b.ctx.close()  # the kernel tears down QPs, windows, then MRs: nothing refuses
    assert not drv.mrs and not drv.mws
    nic = w.nics["b"]
    for k in (key, mw1.rkey, mr.lkey):  # every entry is invalid in the NIC's table
        entry = nic.windows.entry(k >> 8)
        assert entry is not None and not entry.flags & MptFlags.VALID
    del a


# -- 2. re-registration under a bound window -----------------------------------------------


@pytest.mark.parametrize("flags", [e.IBV_REREG_MR_CHANGE_TRANSLATION,
                                   e.IBV_REREG_MR_CHANGE_ACCESS, e.IBV_REREG_MR_CHANGE_PD])
def test_rereg_mr_with_a_bound_window_is_refused(flags: int) -> None:
    w, a, b = _pair()
    mr = MR(b.pd, N, BINDABLE)
    key, _ = _bind2(b, MW(b.pd, e.IBV_MW_TYPE_2), mr, 0, N)
    new = b.ctx.alloc(N)
    old = mr.buf
    with pytest.raises(PyverbsRDMAError) as err:
        mr.rereg(flags, pd=PD(b.ctx), addr=new, length=N, access=BINDABLE)
    assert err.value.error_code == errno.EINVAL
    # The MR kept its old translation, still pinned: the window writes into it.
    b.ctx.aspace.munmap(old, N)  # the owner lets the virtual range go; pages stay pinned
    other, va = _stranger_takes_pages(w, N)
    assert rdma_write(a, key, old + 16, b"window") == e.IBV_WC_SUCCESS
    settle(w)
    assert _untouched(other, va, N)


# -- 4. a window over an on-demand paging MR -------------------------------------------------


def test_bind_over_an_odp_mr_is_refused_and_page_0_is_never_written() -> None:
    w, a, b = _pair()
    mem = w.hosts["b"].mem
    page0 = mem.read(0, PAGE_SIZE)
    odp = MR(b.pd, N, BINDABLE | e.IBV_ACCESS_ON_DEMAND)
    key, st = _bind2(b, MW(b.pd, e.IBV_MW_TYPE_2), odp, 0, N)
    assert st == e.IBV_WC_MW_BIND_ERR  # (and b's QP is in error, as after any local error)
    entry = w.nics["b"].windows.entry(key >> 8)
    assert entry is not None and not entry.flags & MptFlags.VALID
    settle(w)
    assert mem.read(0, PAGE_SIZE) == page0
    del a


# -- 5. a type 2 window belongs to the QP that bound it --------------------------------------


def _another_qp(side: Side) -> Side:
    """A second QP of the same process, in the same PD and on the same CQ."""
    qp = QP(side.pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=side.cq, rcq=side.cq,
                                cap=QPCap(16, 16, 2, 2, 64)))
    return Side(side.ctx, side.pd, side.cq, qp, side.mr)


def test_type2_window_answers_only_on_the_qp_that_bound_it() -> None:
    w, a, b = _pair()
    x, y = _another_qp(a), _another_qp(b)  # a second connection between the two processes
    connect(x, y)
    connect(y, x)
    key, st = _bind2(b, MW(b.pd, e.IBV_MW_TYPE_2), b.mr, 0, N)
    assert st == e.IBV_WC_SUCCESS
    assert rdma_write(x, key, b.mr.buf, b"other QP") == e.IBV_WC_REM_ACCESS_ERR
    assert rdma_write(a, key, b.mr.buf + 32, b"binding QP") == e.IBV_WC_SUCCESS
    settle(w)
    assert b.mr.read(10, 32) == b"binding QP" and b.mr.read(8) != b"other QP"


def test_type1_window_answers_on_any_qp_of_its_pd() -> None:
    w, a, b = _pair()
    x, y = _another_qp(a), _another_qp(b)
    connect(x, y)
    connect(y, x)
    mw1 = MW(b.pd, e.IBV_MW_TYPE_1)
    b.qp.bind_mw(mw1, MWBind(MWBindInfo(b.mr, b.mr.buf, N, RW), e.IBV_SEND_SIGNALED))
    assert wait(b)[0].status == e.IBV_WC_SUCCESS
    assert rdma_write(x, mw1.rkey, b.mr.buf + 64, b"any QP") == e.IBV_WC_SUCCESS
    settle(w)
    assert b.mr.read(6, 64) == b"any QP"


def test_destroying_the_binding_qp_invalidates_its_type2_windows() -> None:
    w, a, b = _pair()
    key, _ = _bind2(b, MW(b.pd, e.IBV_MW_TYPE_2), b.mr, 0, N)
    b.qp.close()  # the window goes with its QP (as qed's destroy_qp invalidates them)
    b.mr.close()  # so nothing is bound to the MR any more
    entry = w.nics["b"].windows.entry(key >> 8)
    assert entry is not None and not entry.flags & MptFlags.VALID
    del a
