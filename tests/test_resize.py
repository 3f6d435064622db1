"""Resize CQ (ibv_resize_cq) and resize SRQ (ibv_modify_srq with IBV_SRQ_MAX_WR) as real
operations: a new ring, a RESIZE command to the NIC, unpolled completions and posted receive
WQEs surviving in order, EINVAL where the kernel answers it."""

from __future__ import annotations

import errno

import pytest
from nicsim.driver import enums as e
from nicsim.driver.user.errors import PyverbsRDMAError
from nicsim.driver.user.unsupported import SrqAttr
from nicsim.driver.user.verbs import SGE, SendWR

from nicsim.testing.rdma import Side, connect, make_side, settle, wait
from nicsim.testing.srq import send, srq_world
from nicsim.world import World


def _pair(cqe: int) -> tuple[World, Side, Side]:
    w = World.two_hosts(seed=0)
    a, b = make_side(w, "a", cqe=cqe), make_side(w, "b")
    connect(a, b)
    connect(b, a)
    return w, a, b


def _writes(a: Side, b: Side, first: int, n: int) -> None:
    for i in range(first, first + n):
        a.mr.write(bytes([i & 0xFF]) * 64, 64, 64 * (i % 64))
        wr = SendWR(wr_id=i, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1,
                    sg=[SGE(a.mr.buf + 64 * (i % 64), 64, a.mr.lkey)])
        wr.set_wr_rdma(b.mr.rkey, b.mr.buf + 64 * (i % 64))
        a.qp.post_send(wr)


def _commands(w: World, host: str) -> list[str]:
    return w.hosts[host].kernel.devices["nsnic0"].hw.lim.command_log


def test_unpolled_completions_survive_a_resize_in_order_and_the_new_size_holds() -> None:
    w, a, b = _pair(cqe=8)
    assert a.cq.cqe == 8
    _writes(a, b, 0, 6)
    settle(w, 50_000)  # all six CQEs are in the ring, none polled
    a.cq.resize(32)
    assert a.cq.cqe == 32 and "RESIZE_CQ" in _commands(w, "a")
    assert [(c.wr_id, c.status) for c in wait(a, 6)] == [(i, e.IBV_WC_SUCCESS)
                                                          for i in range(6)]
    # 20 completions at once: more than the old ring held, no overrun.
    _writes(a, b, 6, 20)
    settle(w, 100_000)
    assert [c.wr_id for c in wait(a, 20)] == list(range(6, 26))
    assert w.nics["a"].counters()["cq.overruns"] == 0
    # Smaller, then back: the CQ keeps working at each size.
    a.cq.resize(2)
    assert a.cq.cqe == 2
    _writes(a, b, 26, 2)
    assert [c.wr_id for c in wait(a, 2)] == [26, 27]


def test_a_resize_below_the_unpolled_count_is_einval_and_changes_nothing() -> None:
    w, a, b = _pair(cqe=16)
    _writes(a, b, 0, 5)
    settle(w, 50_000)
    with pytest.raises(PyverbsRDMAError) as ei:
        a.cq.resize(4)
    assert ei.value.error_code == errno.EINVAL
    assert a.cq.cqe == 16
    assert [c.wr_id for c in wait(a, 5)] == list(range(5))
    a.cq.resize(4)  # with nothing unpolled it fits
    assert a.cq.cqe == 4


def test_a_resize_to_the_size_the_cq_has_keeps_its_unpolled_completions() -> None:
    """The same ring size: no command (as mlx5), and the provider keeps polling where it was
    (it used to start over at entry 0, losing the completions after its consumer index)."""
    w, a, b = _pair(cqe=8)
    _writes(a, b, 0, 5)
    settle(w, 50_000)
    assert [c.wr_id for c in wait(a, 2)] == [0, 1]
    n = len(_commands(w, "a"))
    a.cq.resize(7)
    assert a.cq.cqe == 8 and len(_commands(w, "a")) == n
    assert [c.wr_id for c in wait(a, 3)] == [2, 3, 4]
    _writes(a, b, 5, 6)  # across the ring's end
    assert [c.wr_id for c in wait(a, 6)] == list(range(5, 11))


@pytest.mark.parametrize("cqe", [0, -1, 1 << 30])
def test_a_resize_out_of_range_is_einval(cqe: int) -> None:
    _w, a, _b = _pair(cqe=8)
    with pytest.raises(PyverbsRDMAError) as ei:
        a.cq.resize(cqe)
    assert ei.value.error_code == errno.EINVAL
    assert a.cq.cqe == 8


def test_a_resize_while_completions_are_being_written_loses_none() -> None:
    w, a, b = _pair(cqe=64)
    _writes(a, b, 0, 40)
    a.cq.resize(128)  # at once: most of the writes are still in flight
    assert [(c.wr_id, c.status) for c in wait(a, 40)] == [(i, e.IBV_WC_SUCCESS)
                                                           for i in range(40)]
    settle(w)
    for i in range(40):
        assert b.mr.read(64, 64 * i) == bytes([i]) * 64


def _srq_sends(c: Side, first: int, n: int) -> None:
    """n SENDs, 16 at a time (the client's send queue holds 64)."""
    for k in range(first, first + n, 16):
        m = min(16, first + n - k)
        for j in range(m):
            send(c, b"msg%03d" % (k + j))
        assert all(x.status == e.IBV_WC_SUCCESS for x in wait(c, m))


def test_srq_grows_and_its_posted_and_unpolled_wqes_keep_their_wr_ids() -> None:
    w, (c0, _c1), s = srq_world()  # SRQ max_wr 16: a ring of 32
    srq = s.srq
    n0 = srq.query().max_wr
    for i in range(n0):
        s.post(1000 + i, 256 * (i % 32), 256)
    _srq_sends(c0, 0, 3)  # three WQEs taken and completed, one completion polled
    assert [c.wr_id for c in s.wait(1)] == [1000]
    settle(w, 50_000)
    with pytest.raises(PyverbsRDMAError) as ei:  # fewer than the WQEs not taken yet
        srq.modify(SrqAttr(max_wr=n0 - 4), e.IBV_SRQ_MAX_WR)
    assert ei.value.error_code == errno.EINVAL
    srq.modify(SrqAttr(max_wr=4 * n0), e.IBV_SRQ_MAX_WR)
    assert srq.query().max_wr >= 4 * n0 and "RESIZE_SRQ" in _commands(w, "b")
    extra = n0 + 1  # more than the old ring could hold
    for i in range(extra):
        s.post(2000 + i, 256 * (i % 32), 256)
    got = [c.wr_id for c in s.wait(2)]
    _srq_sends(c0, 3, (n0 - 3) + extra)
    got += [c.wr_id for c in s.wait((n0 - 3) + extra)]
    assert got == [1001, 1002] + [1000 + i for i in range(3, n0)] + \
        [2000 + i for i in range(extra)]


def test_srq_resize_below_its_armed_limit_is_einval_and_smaller_keeps_the_ring() -> None:
    _w, _c, s = srq_world()
    n0 = s.srq.query().max_wr
    for i in range(4):
        s.post(i, 256 * i)
    s.srq.modify(SrqAttr(srq_limit=3), e.IBV_SRQ_LIMIT)
    with pytest.raises(PyverbsRDMAError) as ei:
        s.srq.modify(SrqAttr(max_wr=2), e.IBV_SRQ_MAX_WR)
    assert ei.value.error_code == errno.EINVAL
    s.srq.modify(SrqAttr(max_wr=8), e.IBV_SRQ_MAX_WR)  # held already: nothing moves
    assert s.srq.query().max_wr == n0
    with pytest.raises(PyverbsRDMAError) as ei:
        s.srq.modify(SrqAttr(max_wr=1 << 30), e.IBV_SRQ_MAX_WR)
    assert ei.value.error_code == errno.EINVAL


def test_the_device_reports_srq_resize() -> None:
    _w, _c, s = srq_world()
    assert s.ctx.query_device().device_cap_flags & e.IBV_DEVICE_SRQ_RESIZE
