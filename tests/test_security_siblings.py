"""Siblings of the second protection round's holes, tried as a hostile user would.

Each test attacks a neighbour of a hole tests/test_security_windows.py, test_security_odp.py
and test_security_cm.py already close: the same rule reached by another path, another
order of calls or another moment. What a user cares about is asserted: the bytes of another
process's memory, the completion status, the errno. Every test also runs under the DMA audit
(tests/conftest.py).
"""

from __future__ import annotations

import errno
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nicsim.driver import enums as e
from nicsim.driver.cm_enums import RAI_PASSIVE, rdma_port_space
from nicsim.driver.cm_enums import rdma_cm_event_type as EV
from nicsim.driver.kernel.cm import mad as m
from nicsim.driver.kernel.cm.cma import CmId, CmState
from nicsim.driver.kernel.cm.gsi import ip_gid
from nicsim.driver.user.errors import PyverbsRDMAError
from nicsim.driver.user.rdma_addrinfo import AddrInfo
from nicsim.driver.user.rdmacm import CMID, CMEvent, CMEventChannel, ConnParam
from nicsim.driver.user.unsupported import MWBind, MWBindInfo, SrqAttr, SrqInitAttr
from nicsim.driver.user.verbs import (
    AH,
    CQ,
    GID,
    MR,
    MW,
    PD,
    QP,
    SGE,
    SRQ,
    AHAttr,
    Context,
    GlobalRoute,
    QPAttr,
    QPCap,
    QPInitAttr,
    RecvWR,
    SendWR,
)

from nicsim.exec.spec import WorldSpec
from nicsim.fabric.pfc import PfcStorm, PfcWatchdog
from nicsim.fabric.switch import PfcConfig, SwitchConfig
from nicsim.fabric.topology import Shape, TopologySpec
from nicsim.hwif import PAGE_SIZE, MptFlags
from nicsim.nic.config import NicConfig
from nicsim.testing.cm import (
    PORT,
    TCP,
    Conn,
    cm_kernel,
    device_ip,
    dreq_mad,
    rdma_device,
    run_cm,
    send_mad,
    valid_mads,
)
from nicsim.testing.dma_audit import DmaAudit
from nicsim.testing.exec_world import attached_world
from nicsim.testing.pfc import MIB, link_pair, poll_until, post_write, start_storm
from nicsim.testing.races import PATTERN, Bystander, step_until
from nicsim.testing.rdma import ALL_ACCESS, Side, connect, make_side, rdma_write, settle, wait
from nicsim.testing.ud import Side as UdSide
from nicsim.workloads.endpoint import roce_v2_gid
from nicsim.world import World

GSI_QKEY = m.GSI_QKEY
UDP = rdma_port_space.RDMA_PS_UDP

ODP = ALL_ACCESS | e.IBV_ACCESS_ON_DEMAND
PREFETCH_WRITE = e._IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE


def _big_pair(access: int = ALL_ACCESS, mem_mib: int = 256) -> tuple[World, Side, Side]:
    w = World.two_hosts(mem_size=mem_mib << 20)
    a, b = make_side(w, "a", access=access), make_side(w, "b", access=access)
    connect(a, b)
    connect(b, a)
    return w, a, b


def _drv(side: Side):  # noqa: ANN202 - the side's kernel driver (nsnic)
    return side.ctx.host.kernel.devices["nsnic0"].hw  # type: ignore[attr-defined]


# -- on-demand paging: a page fault resolved while the range is unmapped ------------------------


def test_odp_prefetch_racing_munmap_keeps_no_freed_page() -> None:
    """A process prefetches a large range of its ODP MR (the worker holds the command mailbox
    for several MTT writes), prefetches a second small range, and unmaps the whole MR range
    while both run. The munmap's MMU notifier must not return, and the pages must not be
    freed, while any resolution that saw the pages can still write them into the MTT
    (mmu_interval_read_retry); otherwise the second range's MTT entries keep pages another
    process is then given, and a remote WRITE through the ODP MR lands in its memory."""
    w, a, b = _big_pair(ODP)
    big, small = 2 * 4096 * PAGE_SIZE, 8 * PAGE_SIZE  # two WRITE_MTT commands, and a few pages
    va = b.ctx.alloc(big + small)
    odp = MR(b.pd, big + small, ODP, address=va)
    hw = _drv(b)
    mr = hw.mrs[odp.lkey >> 8]
    b.pd.advise_mr(PREFETCH_WRITE, 0, [SGE(va, big, odp.lkey)])  # asynchronous
    step_until(w, lambda: bool(mr.present) and hw._mbox_busy)  # its MTT writes have begun
    b.pd.advise_mr(PREFETCH_WRITE, 0, [SGE(va + big, small, odp.lkey)])
    b.ctx.aspace.munmap(va, big + small)
    settle(w, 200_000)  # the second prefetch ends, whatever it did
    other = Bystander(w, "b", big + small)
    status = rdma_write(a, odp.rkey, va + big, b"\x77" * 256)
    settle(w)
    assert other.intact()
    assert status == e.IBV_WC_REM_ACCESS_ERR  # the page is not the process's any more
    assert not any(big >> 12 <= p for p in mr.present), "a page given back is still mapped"


def test_odp_madvise_dontneed_then_remote_access_reaches_only_the_owner() -> None:
    """MADV_DONTNEED gives the pages back and leaves the range mapped: the next remote
    WRITE faults a fresh zeroed page in for the owner, never the page another process got."""
    w, a, b = _big_pair(ODP)
    n = 4 * PAGE_SIZE
    va = b.ctx.alloc(n)
    b.ctx.aspace.write(va, b"\x01" * n)
    odp = MR(b.pd, n, ODP, address=va)
    b.pd.advise_mr(PREFETCH_WRITE, e._IBV_ADVISE_MR_FLAG_FLUSH, [SGE(va, n, odp.lkey)])
    b.ctx.aspace.madvise_dontneed(va, n)
    other = Bystander(w, "b", n)
    assert rdma_write(a, odp.rkey, va + PAGE_SIZE, b"fresh page") == e.IBV_WC_SUCCESS
    settle(w)
    assert other.intact()
    assert b.ctx.aspace.read(va + PAGE_SIZE, 12) == b"fresh page\0\0"


@pytest.mark.parametrize("op", ["write", "read", "atomic"])
def test_odp_partial_munmap_then_page_reuse(op: str) -> None:
    """Part of an ODP MR's range is unmapped after being faulted in; its pages go to another
    process. WRITE, READ and atomic through the ODP MR at the unmapped part fail
    (REM_ACCESS_ERR) and neither change nor return the other process's bytes."""
    w, a, b = _big_pair(ODP)
    n = 8 * PAGE_SIZE
    va = b.ctx.alloc(n)
    odp = MR(b.pd, n, ODP, address=va)
    b.pd.advise_mr(PREFETCH_WRITE, e._IBV_ADVISE_MR_FLAG_FLUSH, [SGE(va, n, odp.lkey)])
    gone = va + 2 * PAGE_SIZE
    b.ctx.aspace.munmap(gone, 3 * PAGE_SIZE)
    other = Bystander(w, "b", 3 * PAGE_SIZE)
    a.mr.write(bytes(64), 64)
    wr = SendWR(wr_id=1, send_flags=e.IBV_SEND_SIGNALED)
    if op == "write":
        a.mr.write(b"\x77" * 64, 64)
        wr.opcode, wr.num_sge, wr.sg = e.IBV_WR_RDMA_WRITE, 1, [SGE(a.mr.buf, 64, a.mr.lkey)]
        wr.set_wr_rdma(odp.rkey, gone + 64)
    elif op == "read":
        wr.opcode, wr.num_sge, wr.sg = e.IBV_WR_RDMA_READ, 1, [SGE(a.mr.buf, 64, a.mr.lkey)]
        wr.set_wr_rdma(odp.rkey, gone + 64)
    else:
        wr.opcode, wr.num_sge, wr.sg = (e.IBV_WR_ATOMIC_FETCH_AND_ADD, 1,
                                        [SGE(a.mr.buf, 8, a.mr.lkey)])
        wr.set_wr_atomic(odp.rkey, gone + 64, 1, 0)
    a.qp.post_send(wr)
    (wc,) = wait(a)
    settle(w)
    assert wc.status == e.IBV_WC_REM_ACCESS_ERR
    assert other.intact()
    assert PATTERN not in a.mr.read(64, 0)  # nothing of the other process came back


@pytest.mark.parametrize("ring", ["sq", "rq", "srq", "cq_dbrec"])
def test_odp_mr_over_every_ring_kind_reaches_nothing_after_destroy(ring: str) -> None:
    """An ODP MR over each kind of ring mapping (SQ, RQ, SRQ, a CQ's doorbell record): the
    object is destroyed and another process's new object of the same kind gets the pages;
    a remote WRITE through the ODP MR never reaches them."""
    w, a, b = _big_pair(ODP)
    pd = PD(b.ctx)
    cq = CQ(b.ctx, 256)
    srq = SRQ(pd, SrqInitAttr(SrqAttr(max_wr=256, max_sge=1))) if ring == "srq" else None
    qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, srq=srq,
                           cap=QPCap(256, 256 if srq is None else 0, 1, 1)))
    if ring == "sq":
        va, n = qp._p.r.sq_va, PAGE_SIZE  # type: ignore[attr-defined]
    elif ring == "rq":
        va, n = qp._p.r.rq_va, PAGE_SIZE  # type: ignore[attr-defined]
    elif ring == "srq":
        assert srq is not None
        va, n = srq._p.r.ring_va, PAGE_SIZE
    else:
        va, n = cq._p.r.dbrec_va & ~(PAGE_SIZE - 1), PAGE_SIZE
    pa = b.ctx.aspace.translate(va)
    odp = MR(pd, n, ODP, address=va)
    pd.advise_mr(PREFETCH_WRITE, 0, [SGE(va, n, odp.lkey)])  # (device memory: nothing)
    qp.close()
    if srq is not None:
        srq.close()
    cq.close()
    other = Context("nsnic0", host=w.hosts["b"])
    opd, ocq = PD(other), CQ(other, 256)
    osrq = SRQ(opd, SrqInitAttr(SrqAttr(max_wr=256, max_sge=1))) if ring == "srq" else None
    QP(opd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=ocq, rcq=ocq, srq=osrq,
                       cap=QPCap(256, 256 if osrq is None else 0, 1, 1)))
    before = w.hosts["b"].mem.read(pa & ~(PAGE_SIZE - 1), PAGE_SIZE)
    st = rdma_write(a, odp.rkey, va, b"\x77" * 32)
    settle(w)
    assert st == e.IBV_WC_REM_ACCESS_ERR
    assert w.hosts["b"].mem.read(pa & ~(PAGE_SIZE - 1), PAGE_SIZE) == before


# -- memory windows: binds and frees in every order --------------------------------------------


BINDABLE = ALL_ACCESS | e.IBV_ACCESS_MW_BIND
RW, RR = e.IBV_ACCESS_REMOTE_WRITE, e.IBV_ACCESS_REMOTE_READ
N = 4 * PAGE_SIZE


def _post_bind(b: Side, mw: MW, mr: MR, length: int = N) -> int:
    """Post a bind of `mw` over `mr` (type 2: a BIND_MW work request; type 1: ibv_bind_mw,
    which posts one too) without waiting for it; returns the key the window will have."""
    info = MWBindInfo(mr, mr.buf, length, RW | RR)
    if mw.mw_type == e.IBV_MW_TYPE_2:
        wr = SendWR(wr_id=77, opcode=e.IBV_WR_BIND_MW, send_flags=e.IBV_SEND_SIGNALED)
        wr.set_bind_wr(mw, info)
        b.qp.post_send(wr)
        return wr.rkey
    b.qp.bind_mw(mw, MWBind(info, e.IBV_SEND_SIGNALED))
    return mw.rkey


def _busy_sq(a: Side, b: Side, kb: int = 256) -> None:
    """Queue a large WRITE from b ahead of what b posts next, so that the NIC executes the
    next WQE only after the caller's following calls."""
    wr = SendWR(wr_id=1, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1,
                sg=[SGE(b.mr.buf, kb << 10, b.mr.lkey)])
    wr.set_wr_rdma(a.mr.rkey, a.mr.buf)
    b.qp.post_send(wr)


@pytest.mark.parametrize("mw_type", [e.IBV_MW_TYPE_1, e.IBV_MW_TYPE_2])
@pytest.mark.parametrize("undo", ["dereg", "rereg"])
def test_bind_posted_then_mr_dropped_before_the_nic_executes_it(mw_type: int,
                                                                undo: str) -> None:
    """BIND_MW posted behind a long WRITE, then (no poll) the MR deregistered or re-registered
    elsewhere, its old pages unmapped and given to another process; the bind then runs. It
    must fail (the MR's key or range is gone), and a remote WRITE through the window's key
    must not reach the other process."""
    w = World.two_hosts(mem_size=256 << 20)
    a, b = make_side(w, "a", 1 << 20, access=BINDABLE), make_side(w, "b", 1 << 20,
                                                                   access=BINDABLE)
    connect(a, b)
    connect(b, a)
    mr = MR(b.pd, N, BINDABLE)
    old = mr.buf
    mw = MW(b.pd, mw_type)
    _busy_sq(a, b)
    key = _post_bind(b, mw, mr)
    if undo == "dereg":
        mr.close()  # nothing is bound yet: accepted
    else:
        mr.rereg(e.IBV_REREG_MR_CHANGE_TRANSLATION, addr=b.ctx.alloc(N), length=N,
                 access=BINDABLE)
    b.ctx.aspace.munmap(old, N)
    other = Bystander(w, "b", N)
    wc = wait(b, 2)[1]  # (the WRITE's completion, then the bind's)
    assert wc.status == e.IBV_WC_MW_BIND_ERR
    entry = w.nics["b"].windows.entry(key >> 8)
    assert entry is not None and not entry.flags & MptFlags.VALID
    # (the bind error took b's QP to ERR: the window is tried over a second connection)
    x, y = _second_connection(a, b)
    st = rdma_write(x, key, old + 64, b"through the window")
    settle(w)
    assert st == e.IBV_WC_REM_ACCESS_ERR
    assert other.intact()


@pytest.mark.parametrize("mw_type,how", [(e.IBV_MW_TYPE_1, "dealloc_mw"),
                                         (e.IBV_MW_TYPE_2, "dealloc_mw"),
                                         (e.IBV_MW_TYPE_2, "destroy_qp")])
def test_window_freed_while_a_remote_write_through_it_is_in_flight(mw_type: int,
                                                                   how: str) -> None:
    """A 512 KiB WRITE through a window is on its way; the owner deallocates the window (or,
    for a type 2 window, destroys the QP that bound it), then deregisters the MR and frees
    the buffer, whose pages go to another process. The rest of the WRITE must not land."""
    kb = 512
    w = World.two_hosts(mem_size=256 << 20)
    a, b = make_side(w, "a", kb << 10, access=BINDABLE), make_side(w, "b", kb << 10,
                                                                    access=BINDABLE)
    connect(a, b, timeout=10, retry_cnt=2)  # (a QP destroyed under it: a retries, ~10 ms)
    connect(b, a)
    mw = MW(b.pd, mw_type)
    key = _post_bind(b, mw, b.mr, kb << 10)
    assert wait(b)[0].status == e.IBV_WC_SUCCESS
    a.mr.write(b"\x11" * (kb << 10), kb << 10)
    wr = SendWR(wr_id=1, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1,
                sg=[SGE(a.mr.buf, kb << 10, a.mr.lkey)], send_flags=e.IBV_SEND_SIGNALED)
    wr.set_wr_rdma(key, b.mr.buf)
    a.qp.post_send(wr)
    nb = w.nics["b"]
    step_until(w, lambda: nb.responder.counters["write_packets"] >= 16)
    buf, n = b.mr.buf, b.mr.length
    if how == "dealloc_mw":
        mw.close()
    else:
        b.qp.close()
    b.mr.close()
    b.ctx.aspace.munmap(buf, n)
    other = Bystander(w, "b", n)
    (wc,) = wait(a, limit_ns=100e6)
    settle(w)
    assert other.intact()
    # REM_ACCESS_ERR at the next packet; with the QP destroyed nothing answers any more
    assert wc.status == (e.IBV_WC_REM_ACCESS_ERR if how == "dealloc_mw"
                         else e.IBV_WC_RETRY_EXC_ERR)


def _another_qp(side: Side) -> Side:
    qp = QP(side.pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=side.cq, rcq=side.cq,
                                cap=QPCap(16, 16, 2, 2, 64)))
    return Side(side.ctx, side.pd, side.cq, qp, side.mr)


def _second_connection(a: Side, b: Side) -> tuple[Side, Side]:
    """A second RC connection between the processes of `a` and `b`, in the same PDs."""
    x, y = _another_qp(a), _another_qp(b)
    connect(x, y)
    connect(y, x)
    return x, y


def _bindable_pair() -> tuple[World, Side, Side]:
    w = World.two_hosts()
    a, b = make_side(w, "a", access=BINDABLE), make_side(w, "b", access=BINDABLE)
    connect(a, b)
    connect(b, a)
    return w, a, b


def test_type2_window_moved_to_another_qp_stops_answering_on_the_first() -> None:
    """A type 2 window is invalidated and bound again from a second QP: it then answers on
    the second connection only (IBA 10.6.7.2.1; rxe_lookup_mw)."""
    w, a, b = _bindable_pair()
    x, y = _second_connection(a, b)
    mw = MW(b.pd, e.IBV_MW_TYPE_2)
    key = _post_bind(b, mw, b.mr)
    assert wait(b)[0].status == e.IBV_WC_SUCCESS
    inv = SendWR(wr_id=8, opcode=e.IBV_WR_LOCAL_INV, send_flags=e.IBV_SEND_SIGNALED)
    inv.imm_data = key
    b.qp.post_send(inv)
    assert wait(b)[0].status == e.IBV_WC_SUCCESS
    key2 = _post_bind(y, mw, b.mr)
    assert wait(y)[0].status == e.IBV_WC_SUCCESS
    assert rdma_write(a, key2, b.mr.buf, b"first QP") == e.IBV_WC_REM_ACCESS_ERR
    assert rdma_write(x, key2, b.mr.buf + 64, b"second QP") == e.IBV_WC_SUCCESS
    settle(w)
    assert b.mr.read(9, 64) == b"second QP" and b.mr.read(8, 0) != b"first QP"


def test_send_with_invalidate_on_another_qp_of_the_pd_leaves_the_window() -> None:
    """A peer's SEND with invalidate, arriving on another QP of the same PD, names a type 2
    window bound by the first QP: the request is invalid (REM_INV_REQ_ERR for the sender)
    and the window keeps answering on its own QP."""
    w, a, b = _bindable_pair()
    x, y = _second_connection(a, b)
    key = _post_bind(b, MW(b.pd, e.IBV_MW_TYPE_2), b.mr)
    assert wait(b)[0].status == e.IBV_WC_SUCCESS
    y.qp.post_recv(RecvWR(wr_id=3, num_sge=1, sg=[SGE(b.mr.buf + 4096, 64, b.mr.lkey)]))
    wr = SendWR(wr_id=9, opcode=e.IBV_WR_SEND_WITH_INV, num_sge=1,
                sg=[SGE(x.mr.buf, 8, x.mr.lkey)], send_flags=e.IBV_SEND_SIGNALED)
    wr.imm_data = key
    x.qp.post_send(wr)
    assert wait(x)[0].status == e.IBV_WC_REM_INV_REQ_ERR
    assert rdma_write(a, key, b.mr.buf + 128, b"still bound") == e.IBV_WC_SUCCESS
    settle(w)
    assert b.mr.read(11, 128) == b"still bound"


def test_local_invalidate_of_the_mrs_own_key_with_windows_bound() -> None:
    """LOCAL_INV naming the MR's key (not a window's) while a window is bound to it: refused
    (only a type 2 window is invalidated this way), and the MR can still not be deregistered
    under the window, which keeps reaching the MR's own pages."""
    w, a, b = _bindable_pair()
    mr = MR(b.pd, N, BINDABLE)
    key = _post_bind(b, MW(b.pd, e.IBV_MW_TYPE_1), mr)
    assert wait(b)[0].status == e.IBV_WC_SUCCESS
    inv = SendWR(wr_id=8, opcode=e.IBV_WR_LOCAL_INV, send_flags=e.IBV_SEND_SIGNALED)
    inv.imm_data = mr.rkey
    b.qp.post_send(inv)
    assert wait(b)[0].status != e.IBV_WC_SUCCESS
    with pytest.raises(PyverbsRDMAError) as err:
        mr.close()
    assert err.value.error_code == errno.EINVAL
    other = Bystander(w, "b", N)
    x, y = _second_connection(a, b)  # (the LOCAL_INV error took b's QP to ERR)
    assert rdma_write(x, key, mr.buf + 8, b"own pages") == e.IBV_WC_SUCCESS
    settle(w)
    assert mr.read(9, 8) == b"own pages" and other.intact()


def test_dealloc_pd_with_a_bound_window_is_busy() -> None:
    """A PD with a bound window and its MR cannot go (EBUSY, ib_dealloc_pd's users); the
    window keeps working until it is deallocated."""
    w, a, b = _bindable_pair()
    key = _post_bind(b, MW(b.pd, e.IBV_MW_TYPE_2), b.mr)
    assert wait(b)[0].status == e.IBV_WC_SUCCESS
    drv = _drv(b)
    kernel_pd = next(o for o in b.ctx.file.uctx.objects.values()
                     if type(o).__name__ == "IbPd")
    with pytest.raises(Exception) as err:
        b.ctx.file.dev.dealloc_pd(b.ctx.file.uctx, kernel_pd)
    assert getattr(err.value, "errno", None) == errno.EBUSY
    assert drv.mrs
    assert rdma_write(a, key, b.mr.buf, b"pd alive") == e.IBV_WC_SUCCESS


# -- controlled Q_Keys: every way a user UD QP could get the GSI's ------------------------------


def test_a_controlled_qkey_is_refused_at_create_time_too() -> None:
    """ibv_create_qp followed by the attributes pyverbs' QP(pd, init_attr, qp_attr) applies:
    the same EPERM as a modify (IBA C3-32)."""
    w = World.two_hosts()
    ctx = Context("nsnic0", host=w.hosts["b"])
    pd, cq = PD(ctx), CQ(ctx, 16)
    for qkey in (GSI_QKEY, 0x80000000, 0xFFFFFFFF):
        with pytest.raises(PyverbsRDMAError) as err:
            QP(pd, QPInitAttr(qp_type=e.IBV_QPT_UD, scq=cq, rcq=cq, cap=QPCap(4, 4, 1, 1)),
               QPAttr(qkey=qkey))
        assert err.value.error_code == errno.EPERM


@pytest.fixture
def cm_world() -> Iterator[World]:
    with attached_world(WorldSpec(hosts=3, mem_mib=128)) as w:
        yield w


def test_a_user_ud_send_with_the_gsi_qkey_in_its_wr_does_not_reach_qp1(cm_world: World
                                                                        ) -> None:
    """A user process on the connection's own peer host (so its GID is the right one) sends
    a DREQ naming the connection, with its comm IDs and QPN, from an ordinary UD QP to QP1,
    putting the GSI Q_Key in the work request. A WR Q_Key with the high bit set means the
    QP's own (IBA 10.2.5), so QP1 drops it (Q_Key violation) and the connection stays."""
    w = cm_world
    c = Conn(w)
    cli, srv = c.connect()
    k_cli, k_srv = cli._k, srv._k
    h0 = UdSide(w, "h0")
    dreq = m.Mad(m.AttrId.DREQ, 0x4242, m.Dreq(k_cli.local_comm_id, k_srv.local_comm_id,
                                                k_srv.qpn)).pack()
    h0.mr.write(dreq, len(dreq))
    gid = ip_gid(c.sip)
    ah = AH(h0.pd, attr=AHAttr(GlobalRoute(dgid=GID(gid), sgid_index=roce_v2_gid(h0.ctx)[0])))
    wr = SendWR(wr_id=1, opcode=e.IBV_WR_SEND, num_sge=1,
                sg=[SGE(h0.mr.buf, len(dreq), h0.mr.lkey)], send_flags=e.IBV_SEND_SIGNALED)
    wr.set_wr_ud(ah, m.GSI_QPN, m.GSI_QKEY)
    h0.qp.post_send(wr)
    (wc,) = h0.wait()
    assert wc.status == e.IBV_WC_SUCCESS  # it left: a UD send completes when sent
    received = cm_kernel(w, "h1").counters.mads_received
    run_cm(w, "h1")
    assert cm_kernel(w, "h1").counters.mads_received == received  # QP1 never took it
    assert w.nics["h1"].counters()["datagram.drop_qkey"] >= 1
    assert k_srv.state is CmState.ESTABLISHED and not c.sch.ch.events


# -- the connection manager: forged answers, replays, floods -----------------------------------


def _forge(w: World, frm: str, to: str, attr: m.AttrId, msg: m.Message) -> None:
    """A CM message from the kernel of host `frm` to the CM at address `to`, handled."""
    send_mad(w, frm, to, m.Mad(attr, 0x777, msg).pack())
    run_cm(w, _host_of(w, to))


def _host_of(w: World, ip: str) -> str:
    return next(h for h in w.hosts if device_ip(w, h) == ip)


def test_forged_rep_rej_rtu_drep_from_a_third_host_change_nothing(cm_world: World) -> None:
    """Answers to a connection in progress (REP and REJ to the active side's REQ, RTU to the
    passive side's REP) and a DREP to a DREQ, each naming the right comm IDs but sent by a
    third host: dropped and counted (cm_acquire_id and the path's GID), the connection goes
    on as if nothing came."""
    w = cm_world
    c = Conn(w)
    cli = CMID(c.cch, port_space=TCP)
    cli.resolve_addr(AddrInfo(src=c.cip, dst=c.sip, dst_service=str(PORT), port_space=TCP))
    assert CMEvent(c.cch).event_type == EV.RDMA_CM_EVENT_ADDR_RESOLVED
    cli.resolve_route()
    assert CMEvent(c.cch).event_type == EV.RDMA_CM_EVENT_ROUTE_RESOLVED
    cli.create_qp(c.init)
    cli.connect(ConnParam())
    k_cli = cli._k
    assert k_cli.state is CmState.REQ_SENT
    # (the REQ is on its way: the third host answers first, naming the active side's ID)
    unmatched = cm_kernel(w, "h0").counters.mads_unmatched
    _forge(w, "h2", c.cip, m.AttrId.REJ, m.Rej(0x5555, k_cli.local_comm_id,
                                               m.RejReason.CONSUMER_DEFINED, 0))
    _forge(w, "h2", c.cip, m.AttrId.REP, m.Rep(0x5555, k_cli.local_comm_id, 0x99, 1, 2))
    assert k_cli.state is CmState.REQ_SENT and not c.cch.ch.events
    assert cm_kernel(w, "h0").counters.mads_unmatched == unmatched + 2
    ev = CMEvent(c.sch)
    assert ev.event_type == EV.RDMA_CM_EVENT_CONNECT_REQUEST
    srv = CMID(ev, listen_id=c.listen)
    srv.create_qp(c.init)
    srv.accept(ConnParam())
    k_srv = srv._k
    # An RTU for the passive side before the real one (the active side's REP handling
    # sends it): from the third host.
    _forge(w, "h2", c.sip, m.AttrId.RTU, m.Rtu(k_cli.local_comm_id, k_srv.local_comm_id))
    assert k_srv.state is CmState.REP_SENT
    assert CMEvent(c.cch).event_type == EV.RDMA_CM_EVENT_ESTABLISHED
    assert CMEvent(c.sch).event_type == EV.RDMA_CM_EVENT_ESTABLISHED
    # The passive side disconnects; a DREP from the third host does not end its wait.
    srv.disconnect()
    _forge(w, "h2", c.sip, m.AttrId.DREP, m.Drep(k_cli.local_comm_id, k_srv.local_comm_id))
    assert k_srv.state is CmState.DREQ_SENT


def test_a_dreq_replayed_after_teardown_is_a_counted_drop(cm_world: World) -> None:
    """The exact DREQ of a connection that is gone (both IDs destroyed), sent again by the
    peer's host: nothing is named by it any more, nothing happens to the next connection."""
    w = cm_world
    c = Conn(w)
    cli, srv = c.connect()
    k_cli, k_srv = cli._k, srv._k
    dreq = (k_cli.local_comm_id, k_srv.local_comm_id, k_srv.qpn)
    cli.disconnect()
    assert CMEvent(c.sch).event_type == EV.RDMA_CM_EVENT_DISCONNECTED
    srv.disconnect()
    assert CMEvent(c.cch).event_type == EV.RDMA_CM_EVENT_DISCONNECTED
    cli.close()
    srv.close()
    cli2, srv2 = c.connect()
    unmatched = cm_kernel(w, "h1").counters.mads_unmatched
    for _ in range(3):
        send_mad(w, "h0", c.sip, dreq_mad(*dreq))
    run_cm(w, "h1")
    assert cm_kernel(w, "h1").counters.mads_unmatched == unmatched + 3
    assert srv2._k.state is CmState.ESTABLISHED and not c.sch.ch.events
    del cli2


def test_a_req_flood_from_many_fake_peers_holds_backlog_ids_only(cm_world: World) -> None:
    """REQs from 2,000 distinct (fake) source addresses and ports in rdma_cm's header, each
    with its own comm ID: the listener holds `backlog` of them, the CM keeps no ID, event or
    other record for the rest (ucma's backlog; cm_req_handler allocates per REQ only what it
    queues), and a real client that retries still gets in once the process takes one."""
    w = cm_world
    c = Conn(w, backlog=8)
    cm = cm_kernel(w, "h1")
    sid = m.service_id(m.PortSpace.TCP, PORT)
    ids0 = len(cm.ids)
    for i in range(2000):
        fake = f"10.{(i >> 8) & 255}.{i & 255}.77"
        req = m.Req(0x10000 + i, sid, 1, 0x100 + i, 7, ip_gid(fake), ip_gid(c.sip),
                    private_data=m.cma_hdr(fake, c.sip, 1024 + i))
        send_mad(w, "h2", c.sip, m.Mad(m.AttrId.REQ, 0x100 + i, req).pack())
        if i % 32 == 31:
            run_cm(w, "h1", 50_000)
    run_cm(w, "h1")
    assert len(cm.ids) - ids0 == 8
    assert len(c.sch.ch.events) == 8
    assert cm.counters.backlog_drops == 1992
    # The process takes (and rejects) them; a real client then gets through.
    for _ in range(8):
        ev = CMEvent(c.sch)
        CMID(ev, listen_id=c.listen).reject()
    cli, srv = c.connect()
    assert srv._k.state is CmState.ESTABLISHED
    del cli


def test_a_request_of_the_other_qp_type_reaches_no_listener(cm_world: World) -> None:
    """A REQ for a UD listener's service and a SIDR_REQ for a connected one's (the port
    space is in the Service ID, so a forger picks it): rdma_cm's
    cma_ib_check_req_qp_type refuses both. They make no ID and no event, are counted, and
    are answered as for a service nobody listens on (REJ; SIDR_REP "not supported")."""
    w = cm_world
    c = Conn(w)
    ulisten = CMID(CMEventChannel(), port_space=UDP)
    ulisten.bind_addr(AddrInfo(src=c.sip, src_service=str(PORT + 1), flags=RAI_PASSIVE,
                               port_space=UDP))
    ulisten.listen(0)
    cm = cm_kernel(w, "h1")
    ids0, rej0 = len(cm.ids), cm.counters.rej_sent
    hdr = m.cma_hdr(c.cip, c.sip, 0x9000)
    udp = m.service_id(m.PortSpace.UDP, PORT + 1)
    tcp = m.service_id(m.PortSpace.TCP, PORT)
    # (a REQ whose Service ID names the UDP port space and the UDP listener's port)
    _forge(w, "h0", c.sip, m.AttrId.REQ, m.Req(0x5151, udp, 1, 0x100, 7, ip_gid(c.cip),
                                               ip_gid(c.sip), private_data=hdr))
    _forge(w, "h0", c.sip, m.AttrId.SIDR_REQ, m.SidrReq(0x5252, tcp, private_data=hdr))
    assert len(cm.ids) == ids0
    assert not c.sch.ch.events and not ulisten._k.channel.events
    assert cm.counters.wrong_qp_type == 2
    assert cm.counters.rej_sent == rej0 + 1


def _live_mads(w: World, c: Conn, est: tuple[CmId, CmId], pend: CmId) -> list[bytes]:
    """Valid MADs of every CM type that name live state at h1: a REQ and a SIDR_REQ for the
    TCP and UDP listeners, and REP, REJ, RTU, DREQ, DREP with the comm IDs and QPN of the
    established connection and of a passive ID waiting for its RTU."""
    cli, srv = est
    cip, sip = c.cip, c.sip
    tcp, udp = m.service_id(m.PortSpace.TCP, PORT), m.service_id(m.PortSpace.UDP, PORT)
    hdr = m.cma_hdr(cip, sip, 0x9000)
    lc, rc, qpn = cli.local_comm_id, srv.local_comm_id, srv.qpn
    plc, prc = pend.remote_comm_id, pend.local_comm_id
    msgs: list[tuple[m.AttrId, m.Message]] = [
        (m.AttrId.REQ, m.Req(0x31337, tcp, 1, 0x100, 7, ip_gid(cip), ip_gid(sip),
                             private_data=hdr)),
        (m.AttrId.REQ, m.Req(0x31338, udp, 1, 0x100, 7, ip_gid(cip), ip_gid(sip),
                             private_data=hdr)),
        (m.AttrId.SIDR_REQ, m.SidrReq(0x4444, udp, private_data=hdr)),
        (m.AttrId.SIDR_REQ, m.SidrReq(0x4445, tcp, private_data=hdr)),
        (m.AttrId.REP, m.Rep(lc, rc, 0x101, 9, 2)),
        (m.AttrId.REJ, m.Rej(plc, prc, 28, 1, b"no")),
        (m.AttrId.RTU, m.Rtu(plc, prc)),
        (m.AttrId.DREQ, m.Dreq(lc, rc, qpn)),
        (m.AttrId.DREP, m.Drep(lc, rc)),
        (m.AttrId.SIDR_REP, m.SidrRep(pend.local_comm_id, 0, 0x102, udp, 0x1234)),
    ]
    return [m.Mad(a, 3, msg).pack() for a, msg in msgs]


@settings(max_examples=400, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow])
@given(data=st.data())
def test_mad_fuzz_against_live_listeners_and_connections(cm_world: World,
                                                         data: st.DataObject) -> None:
    """The MAD fuzzer of test_security_cm sends mutations of MADs that name nothing (no
    listener, no connection), so most never get past the lookup. Here they name live state:
    listeners of both port spaces, an established connection, an ID waiting for its RTU;
    from the peer's GID or a third host's. Whatever the bytes, the CM only handles or counts
    them; nothing raises out of its receive path."""
    w = cm_world
    st_ = _fuzz_state(w)
    c, est, pend = st_
    cm = cm_kernel(w, "h1")
    base = data.draw(st.sampled_from(_live_mads(w, c, est, pend)))
    raw = bytearray(base)
    for _ in range(data.draw(st.integers(0, 8))):
        i = data.draw(st.integers(m.HDR_SIZE - 8, len(raw) - 1))
        raw[i] = data.draw(st.integers(0, 255))
    sgid = ip_gid(data.draw(st.sampled_from([c.cip, device_ip(w, "h2")])))
    before = cm.counters.mads_received
    cm.receive(cm.gsi(rdma_device(w, "h1")), sgid, bytes(raw))  # must not raise
    assert cm.counters.mads_received == before + 1


_FUZZ: dict[int, tuple] = {}


def _fuzz_state(w: World) -> tuple[Conn, tuple[CmId, CmId], CmId]:
    """Listeners (TCP and UDP), an established connection and a passive ID that has sent
    its REP, set up once per world."""
    got = _FUZZ.get(id(w))
    if got is not None and got[0].w is w:
        return got
    c = Conn(w)
    ulisten = CMID(CMEventChannel(), port_space=UDP)
    ulisten.bind_addr(AddrInfo(src=c.sip, src_service=str(PORT), flags=RAI_PASSIVE,
                               port_space=UDP))
    ulisten.listen(0)
    cli, srv = c.connect()
    # A second connection left at REP_SENT: its REQ is handled, its RTU never comes.
    pcli = CMID(c.cch, port_space=TCP)
    pcli.resolve_addr(AddrInfo(src=c.cip, dst=c.sip, dst_service=str(PORT), port_space=TCP))
    CMEvent(c.cch)
    pcli.resolve_route()
    CMEvent(c.cch)
    pcli.create_qp(c.init)
    pcli.connect(ConnParam())
    ev = CMEvent(c.sch)
    psrv = CMID(ev, listen_id=c.listen)
    psrv.create_qp(c.init)
    cm_kernel(w, "h0").ids.pop(pcli._k.local_comm_id)  # (the active side forgets it: no RTU)
    psrv.accept(ConnParam())
    run_cm(w, "h0")
    got = (c, (cli._k, srv._k), psrv._k)
    _FUZZ.clear()
    _FUZZ[id(w)] = got
    return got


_EDGE = (0x00, 0x01, 0x02, 0x03, 0x06, 0x0F, 0x10, 0x7F, 0x80, 0xC0, 0xFE, 0xFF)


def test_every_byte_of_every_mad_with_edge_values_parses_or_is_a_mad_error() -> None:
    """Exhaustively, where the hypothesis fuzzer samples: each byte of each valid CM MAD (and
    of MADs with the CM attributes this CM does not handle: MRA, LAP, APR, ClassPortInfo)
    set to each of a set of edge values (bit-field boundaries, sign bits, all ones). The
    parser returns a message or raises MadError; any other exception is a crash of the CM
    (CmKernel.receive catches MadError only)."""
    raws = valid_mads("10.0.0.1", "10.0.0.2")
    for attr in (0x0001, 0x0011, 0x0019, 0x001A):  # ClassPortInfo, MRA, LAP, APR
        raws.append(raws[3][:16] + attr.to_bytes(2, "big") + raws[3][18:])
    parsed = 0
    for raw in raws:
        for off in range(m.MAD_SIZE):
            for v in _EDGE:
                bad = raw[:off] + bytes([v]) + raw[off + 1:]
                try:
                    msg = m.parse(bad).msg
                    parsed += 1
                    # (and the header rdma_cm reads from a REQ's / SIDR_REQ's private data)
                    if isinstance(msg, m.Req | m.SidrReq):
                        m.parse_cma_hdr(msg.private_data)
                except m.MadError:
                    pass
    assert parsed  # (most of them are still valid messages)


# -- physical page 0 -----------------------------------------------------------------------------


def test_a_device_write_to_physical_page_0_never_lands(dma_audits: list[DmaAudit]) -> None:
    """Page 0 is never a DMA target: 0 is the translation of "none" (an MTT entry of an ODP
    page not present), so a write there means a translation went wrong. The host memory's
    DMA path refuses it and counts it, whichever way it comes (one write, or a piece of a
    scattered one); the tests' DMA audit reports it as a violation as well."""
    w = World.two_hosts()
    mem, dma = w.hosts["b"].mem, w.nics["b"].dma
    page0 = mem.read(0, PAGE_SIZE)
    dma.write(0x10, b"\x77" * 64)
    dma.scatter([(PAGE_SIZE - 8, b"\x66" * 8)], 8)
    settle(w)
    assert mem.read(0, PAGE_SIZE) == page0
    assert mem.page0_writes == 2
    (audit,) = [x for x in dma_audits if x.world is w]
    assert len(audit.violations) == 2 and all("page 0x0," in v for v in audit.violations)
    audit.violations.clear()  # (seen: the test's own writes)


# -- PFC storms: several at once, and one that stops and starts again ---------------------------


def _pfc_world(hosts: int, wd: PfcWatchdog | None = None) -> World:
    pfc = PfcConfig(watchdog=wd) if wd is not None else PfcConfig()
    return World.from_topology(TopologySpec(shape=Shape.STAR, hosts=hosts), seed=1,
                               switch=SwitchConfig(buffer_bytes=2 * MIB, pfc=pfc),
                               nic=NicConfig(pfc_watchdog=wd) if wd is not None else None,
                               mem_size=64 << 20)


def test_two_hosts_storming_at_once_do_not_stop_an_innocent_flow() -> None:
    """h2 and h3 both keep pausing the switch while h0 writes to each of them: the two
    queues toward them are stormed separately, and h0's WRITE to h1 still completes."""
    w = _pfc_world(4, PfcWatchdog(detect_ns=2e6, restore_ns=2e6))
    victims = [link_pair(w, "h0", h) for h in ("h2", "h3")]
    innocent, i = link_pair(w, "h0", "h1")
    storms = [start_storm(w, h) for h in ("h2", "h3")]
    for n, (s, v) in enumerate(victims):
        post_write(s, v, 2 * MIB, 10 + n)
    w.hosts["h0"].spend(50_000)
    post_write(innocent, i, 256 << 10, 2)
    (wc,) = poll_until(innocent, w.env.now + 1e9)
    assert (wc.wr_id, wc.status) == (2, e.IBV_WC_SUCCESS)
    assert i.mr.read(64) == innocent.mr.read(64)
    sw = w.switches["sw0"].counters()
    stormed = [p for p in range(4) if sw.get(f"p{p}.q3.pfc_wd.storms", 0)]
    assert len(stormed) >= 2  # each storming host's queue, detected on its own
    del storms


def test_a_storm_that_stops_and_starts_again_is_detected_again() -> None:
    """The storm stops, the queue is restored, the storm comes back: the watchdog detects it
    a second time (two storms, a restore between), and a WRITE to an innocent host posted
    during the second storm completes."""
    wd = PfcWatchdog(detect_ns=1e6, restore_ns=1e6)
    w = _pfc_world(3, wd)
    to_victim, v = link_pair(w, "h0", "h2")
    innocent, i = link_pair(w, "h0", "h1")
    t0 = w.env.now
    start_storm(w, "h2", stop_ns=t0 + 4e6)
    nic = w.nics["h2"]
    PfcStorm(w.env, nic.port.send_control, nic.mac, (3,), nic.port.rate_gbps, t0 + 10e6, None)
    post_write(to_victim, v, 1 * MIB, 1)
    w.hosts["h0"].spend(12e6 - (w.env.now - t0))  # into the second storm
    post_write(to_victim, v, 1 * MIB, 3)
    w.hosts["h0"].spend(50_000)
    post_write(innocent, i, 256 << 10, 2)
    (wc,) = poll_until(innocent, w.env.now + 1e9)
    assert (wc.wr_id, wc.status) == (2, e.IBV_WC_SUCCESS)
    sw = w.switches["sw0"].counters()
    port = next(p for p in range(3) if sw[f"p{p}.pause_received"])
    assert sw[f"p{port}.q3.pfc_wd.storms"] == 2
    assert sw[f"p{port}.q3.pfc_wd.restores"] >= 1
