"""On-demand paging (nicsim.nic.odp, nicsim.driver.kernel.hw.odp): ODP MRs pin nothing, the
NIC faults their pages in through the driver, madvise/munmap invalidate them, ibv_advise_mr
prefetches; misuse answers as the kernel does."""

from __future__ import annotations

import contextlib
import errno
from collections.abc import Iterator

import pytest
from nicsim.driver import enums as e
from nicsim.driver.user.errors import PyverbsError, PyverbsRDMAError
from nicsim.driver.user.memory import madvise
from nicsim.driver.user.process import DeviceEntry, Process, attach
from nicsim.driver.user.verbs import MR, SGE, RecvWR, SendWR

from nicsim.hwif import CqeStatus, VendorErr
from nicsim.nic.config import NicConfig
from nicsim.testing.rdma import ALL_ACCESS, Side, connect, make_side, pair, settle, wait
from nicsim.world import World

ODP = ALL_ACCESS | e.IBV_ACCESS_ON_DEMAND
N = 3 * 4096 + 100  # four pages
PREFETCH_WRITE, FLUSH = e._IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, e._IBV_ADVISE_MR_FLAG_FLUSH


def odp_pair(nic: NicConfig | None = None) -> tuple[World, Side, Side]:
    w = World.two_hosts(nic=nic)
    a, b = make_side(w, "a", 1 << 16, access=ODP), make_side(w, "b", 1 << 16, access=ODP)
    connect(a, b)
    connect(b, a)
    return w, a, b


@contextlib.contextmanager
def process_of(side: Side) -> Iterator[None]:
    """pyverbs.mem_alloc acts on the current process: make it the one `side` belongs to."""
    host = side.ctx.host
    p = Process([DeviceEntry("nsnic0", host, 0)])
    p._aspaces[id(host)] = side.ctx.aspace
    attach(p)
    try:
        yield
    finally:
        attach(None)


def nic_odp(w: World, host: str) -> dict[str, int]:
    return {k.removeprefix("odp."): v for k, v in w.nics[host].counters().items()
            if k.startswith("odp.")}


def drv(side: Side):  # noqa: ANN201 - the device's ODP handler (driver counters)
    return side.ctx.host.kernel.devices["nsnic0"].hw.odp  # type: ignore[attr-defined]


def post(a: Side, op: int, lsge: SGE, rva: int = 0, rkey: int = 0,
         atomic: tuple[int, int] | None = None) -> None:
    wr = SendWR(wr_id=1, opcode=op, num_sge=1, sg=[lsge], send_flags=e.IBV_SEND_SIGNALED)
    if atomic is not None:
        wr.set_wr_atomic(rkey, rva, *atomic)
    elif op != e.IBV_WR_SEND:
        wr.set_wr_rdma(rkey, rva)
    a.qp.post_send(wr)


def timed(a: Side, *args: object, **kw: object) -> float:
    """Simulated time from the post to the completion (which must be a success)."""
    env = a.ctx.host.env
    t0 = env.now
    post(a, *args, **kw)  # type: ignore[arg-type]
    wc = wait(a)[0]
    assert wc.status == CqeStatus.SUCCESS, (wc.status, wc.vendor_err)
    return env.now - t0


def test_caps_are_reported_and_absent_on_a_device_without_odp() -> None:
    w, a, b = odp_pair()
    caps = a.ctx.query_device_ex().odp_caps
    assert caps.general_caps == e.IBV_ODP_SUPPORT  # no IMPLICIT
    want = (e.IBV_ODP_SUPPORT_SEND | e.IBV_ODP_SUPPORT_RECV | e.IBV_ODP_SUPPORT_WRITE
            | e.IBV_ODP_SUPPORT_READ | e.IBV_ODP_SUPPORT_ATOMIC | e.IBV_ODP_SUPPORT_SRQ_RECV
            | e.IBV_ODP_SUPPORT_FLUSH | e.IBV_ODP_SUPPORT_ATOMIC_WRITE)
    assert caps.rc_odp_caps == want
    assert caps.ud_odp_caps & e.IBV_ODP_SUPPORT_SEND and caps.uc_odp_caps == 0
    w, a, b = pair(nic=NicConfig(odp=False))
    caps = a.ctx.query_device_ex().odp_caps
    assert (caps.general_caps, caps.rc_odp_caps, caps.ud_odp_caps) == (0, 0, 0)
    with pytest.raises(PyverbsRDMAError) as ex:
        a.pd.advise_mr(PREFETCH_WRITE, FLUSH, [SGE(a.mr.buf, 64, a.mr.lkey)])
    assert ex.value.error_code == errno.EOPNOTSUPP


def test_write_faults_on_first_touch_at_both_ends_and_costs_time() -> None:
    w, a, b = odp_pair()
    a.mr.write(bytes(range(256)) * (N // 256 + 1), N)
    first = timed(a, e.IBV_WR_RDMA_WRITE, SGE(a.mr.buf, N, a.mr.lkey), b.mr.buf, b.mr.rkey)
    settle(w)
    assert b.mr.read(N, 0) == a.mr.read(N, 0)
    ca, cb = nic_odp(w, "a"), nic_odp(w, "b")
    # The requester's WQE waited for its pages; the responder answered an RNR NAK.
    assert ca["page_faults"] >= 1 and ca["wqe_waits"] >= 1 and ca["resumes"] >= 1
    assert cb["page_faults"] >= 1 and cb["rnr_naks"] >= 1
    assert drv(a).counters["pages_mapped"] == 4 and drv(b).counters["pages_mapped"] == 4
    second = timed(a, e.IBV_WR_RDMA_WRITE, SGE(a.mr.buf, N, a.mr.lkey), b.mr.buf, b.mr.rkey)
    assert nic_odp(w, "a")["page_faults"] == ca["page_faults"]  # present now: no fault
    assert nic_odp(w, "b")["page_faults"] == cb["page_faults"]
    assert first > 2 * second


def test_read_send_and_atomics_on_odp_regions() -> None:
    w, a, b = odp_pair()
    b.mr.write(b"r" * 5000, 5000)
    timed(a, e.IBV_WR_RDMA_READ, SGE(a.mr.buf, 5000, a.mr.lkey), b.mr.buf + 100, b.mr.rkey)
    assert a.mr.read(5000, 0) == b"r" * 4900 + bytes(100)
    a.mr.write(b"s" * 3000, 3000, 8192)
    b.qp.post_recv(RecvWR(wr_id=9, num_sge=1, sg=[SGE(b.mr.buf + 20000, 3000, b.mr.lkey)]))
    timed(a, e.IBV_WR_SEND, SGE(a.mr.buf + 8192, 3000, a.mr.lkey))
    wc = wait(b)[0]
    assert wc.status == CqeStatus.SUCCESS and wc.byte_len == 3000
    assert b.mr.read(3000, 20000) == b"s" * 3000
    b.mr.write((40).to_bytes(8, "little"), 8, 40960)
    timed(a, e.IBV_WR_ATOMIC_FETCH_AND_ADD, SGE(a.mr.buf + 32768, 8, a.mr.lkey),
          b.mr.buf + 40960, b.mr.rkey, atomic=(2, 0))
    timed(a, e.IBV_WR_ATOMIC_CMP_AND_SWP, SGE(a.mr.buf + 32776, 8, a.mr.lkey),
          b.mr.buf + 40960, b.mr.rkey, atomic=(42, 7))
    settle(w)
    assert int.from_bytes(a.mr.read(8, 32768), "little") == 40
    assert int.from_bytes(a.mr.read(8, 32776), "little") == 42
    assert int.from_bytes(b.mr.read(8, 40960), "little") == 7
    assert nic_odp(w, "b")["rnr_naks"] >= 3  # READ, SEND and the atomic each faulted there


def test_prefetch_leaves_no_fault_for_the_nic() -> None:
    w, a, b = odp_pair()
    a.pd.advise_mr(PREFETCH_WRITE, FLUSH, [SGE(a.mr.buf, N, a.mr.lkey)])
    b.pd.advise_mr(e._IBV_ADVISE_MR_ADVICE_PREFETCH, FLUSH, [SGE(b.mr.buf, N, b.mr.lkey)])
    assert drv(a).counters["pages_prefetched"] == 4
    a.mr.write(b"p" * N, N)
    timed(a, e.IBV_WR_RDMA_WRITE, SGE(a.mr.buf, N, a.mr.lkey), b.mr.buf, b.mr.rkey)
    settle(w)
    assert b.mr.read(N, 0) == b"p" * N
    assert nic_odp(w, "a")["page_faults"] == 0 and nic_odp(w, "b")["page_faults"] == 0


def test_async_prefetch_returns_at_once_and_maps_later() -> None:
    w, a, b = odp_pair()
    a.pd.advise_mr(PREFETCH_WRITE, 0, [SGE(a.mr.buf, N, a.mr.lkey)])
    assert drv(a).counters["pages_prefetched"] == 0
    a.ctx.host.spend(100_000)
    assert drv(a).counters["pages_prefetched"] == 4


def test_madvise_invalidates_and_the_next_access_faults_again() -> None:
    w, a, b = odp_pair()
    a.mr.write(b"1" * N, N)
    timed(a, e.IBV_WR_RDMA_WRITE, SGE(a.mr.buf, N, a.mr.lkey), b.mr.buf, b.mr.rkey)
    faults = nic_odp(w, "a")["page_faults"]
    with process_of(a):
        madvise(a.mr.buf, N)  # the pages go back; the MR's MTT entries become not present
    assert drv(a).counters["pages_invalidated"] == 4
    assert a.mr.read(N, 0) == bytes(N)  # fresh zeroed pages for the process
    a.mr.write(b"2" * N, N)
    timed(a, e.IBV_WR_RDMA_WRITE, SGE(a.mr.buf, N, a.mr.lkey), b.mr.buf, b.mr.rkey)
    settle(w)
    assert nic_odp(w, "a")["page_faults"] > faults
    assert b.mr.read(N, 0) == b"2" * N  # the new pages went out, not the freed ones


def test_unmapped_odp_pages_complete_in_error() -> None:
    """munmap under an ODP MR: the driver cannot make the page present (RESUME_FAILED) and
    the WQE completes with a local protection error."""
    w, a, b = odp_pair()
    buf = a.ctx.alloc(8192)
    mr = MR(a.pd, 8192, ODP, address=buf)
    a.ctx.aspace.munmap(buf, 8192)
    post(a, e.IBV_WR_RDMA_WRITE, SGE(buf, 100, mr.lkey), b.mr.buf, b.mr.rkey)
    wc = wait(a)[0]
    assert wc.status == CqeStatus.LOC_PROT_ERR and wc.vendor_err == VendorErr.ODP_FAULT
    assert drv(a).counters["fault_failures"] == 1


def test_dereg_and_rereg_of_an_odp_mr() -> None:
    w, a, b = odp_pair()
    a.mr.write(b"q" * 4096, 4096)
    timed(a, e.IBV_WR_RDMA_WRITE, SGE(a.mr.buf, 4096, a.mr.lkey), b.mr.buf, b.mr.rkey)
    b.mr.rereg(e.IBV_REREG_MR_CHANGE_ACCESS, access=ODP)  # same range, pages not present
    faults = nic_odp(w, "b")["page_faults"]
    timed(a, e.IBV_WR_RDMA_WRITE, SGE(a.mr.buf, 4096, a.mr.lkey), b.mr.buf, b.mr.rkey)
    assert nic_odp(w, "b")["page_faults"] == faults + 1
    with pytest.raises(PyverbsRDMAError) as ex:  # ODP cannot be turned off by rereg
        b.mr.rereg(e.IBV_REREG_MR_CHANGE_ACCESS, access=ALL_ACCESS)
    assert ex.value.error_code == errno.EOPNOTSUPP
    notifiers = len(a.ctx.aspace.notifiers)
    a.mr.close()
    assert len(a.ctx.aspace.notifiers) == notifiers - 1


@pytest.mark.parametrize(("advice", "flags", "which", "err"), [
    (PREFETCH_WRITE, 2, "odp", errno.EINVAL),  # a flag other than FLUSH
    (7, FLUSH, "odp", errno.EOPNOTSUPP),  # an advice the device does not know
    (PREFETCH_WRITE, FLUSH, "none", errno.EINVAL),  # no SGE
    (PREFETCH_WRITE, FLUSH, "pinned", errno.EINVAL),  # not an ODP MR
    (PREFETCH_WRITE, FLUSH, "outside", errno.EINVAL),  # beyond the MR
])
def test_advise_mr_misuse(advice: int, flags: int, which: str, err: int) -> None:
    w, a, b = odp_pair()
    pinned = MR(a.pd, 4096, ALL_ACCESS)
    sges = {"odp": [SGE(a.mr.buf, 64, a.mr.lkey)], "none": [],
            "pinned": [SGE(pinned.buf, 64, pinned.lkey)],
            "outside": [SGE(a.mr.buf + (1 << 16) - 8, 64, a.mr.lkey)]}[which]
    with pytest.raises(PyverbsRDMAError) as ex:
        a.pd.advise_mr(advice, flags, sges)
    assert ex.value.error_code == err


def test_implicit_odp_is_refused_and_madvise_takes_only_dontneed() -> None:
    w, a, b = odp_pair()
    with pytest.raises(PyverbsRDMAError) as ex:
        MR(a.pd, 0, ODP, implicit=True)
    assert ex.value.error_code == errno.EINVAL
    with process_of(a):
        with pytest.raises(PyverbsRDMAError) as ex:
            madvise(a.mr.buf, 4096, 3)  # MADV_WILLNEED
        assert ex.value.error_code == errno.EOPNOTSUPP
        with pytest.raises(PyverbsError):
            madvise(a.mr.buf + 1, 4096)  # not page aligned: EINVAL
