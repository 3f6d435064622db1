"""ibv_rereg_mr: a registered MR gets new rights, a new PD or a new address range in place,
keeping its keys; the old rights and translation stop applying at once."""

from __future__ import annotations

import errno

import pytest
from nicsim.driver import enums as e
from nicsim.driver.user.errors import PyverbsRDMAError
from nicsim.driver.user.verbs import MR, PD, SGE, QPAttr, RecvWR, SendWR

from nicsim.testing.rdma import ALL_ACCESS, connect, pair, settle, wait

LW, RW = e.IBV_ACCESS_LOCAL_WRITE, e.IBV_ACCESS_REMOTE_WRITE


def _write(a, b, raddr: int, data: bytes) -> int:  # noqa: ANN001
    a.mr.write(data, len(data))
    wr = SendWR(wr_id=1, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1,
                sg=[SGE(a.mr.buf, len(data), a.mr.lkey)])
    wr.set_wr_rdma(b.mr.rkey, raddr)
    a.qp.post_send(wr)
    return wait(a)[0].status


def test_rereg_access_revokes_remote_write_and_keeps_the_key() -> None:
    w, a, b = pair()
    key = b.mr.rkey
    assert _write(a, b, b.mr.buf, b"before") == e.IBV_WC_SUCCESS
    b.mr.rereg(e.IBV_REREG_MR_CHANGE_ACCESS, access=LW)
    assert b.mr.rkey == b.mr.lkey == key
    b.mr.write(b"\x00" * 16, 16)
    assert _write(a, b, b.mr.buf, b"after!") == e.IBV_WC_REM_ACCESS_ERR
    settle(w)
    assert b.mr.read(6) == bytes(6)  # not a byte written


def test_rereg_translation_moves_the_mr_to_new_memory() -> None:
    w, a, b = pair()
    old = b.mr.buf
    new = b.ctx.alloc(8192)
    b.mr.rereg(e.IBV_REREG_MR_CHANGE_TRANSLATION, addr=new, length=8192)
    assert b.mr.buf == new and b.mr.length == 8192
    assert _write(a, b, new + 100, b"moved") == e.IBV_WC_SUCCESS
    settle(w)
    assert b.ctx.read_mem(new + 100, 5) == b"moved"
    # The old range is no longer the MR's: a WRITE there is outside it.
    assert _write(a, b, old, b"stale") == e.IBV_WC_REM_ACCESS_ERR


def test_rereg_pd_moves_the_mr_out_of_the_qps_pd() -> None:
    _w, a, b = pair()
    other = PD(b.ctx)
    b.mr.rereg(e.IBV_REREG_MR_CHANGE_PD, pd=other)
    assert b.mr.pd is other
    assert _write(a, b, b.mr.buf, b"x") == e.IBV_WC_REM_ACCESS_ERR
    other.close()  # closes the MR with it, as its child now
    assert b.mr.closed


def test_rereg_misuse() -> None:
    _w, _a, b = pair()
    mr = MR(b.pd, 4096, ALL_ACCESS)
    for flags, kw in ((0, {}), (8, {}),
                      (e.IBV_REREG_MR_CHANGE_ACCESS, {"access": RW}),  # REMOTE_WRITE needs LW
                      (e.IBV_REREG_MR_CHANGE_TRANSLATION, {"addr": mr.buf, "length": 0})):
        with pytest.raises(PyverbsRDMAError) as ei:
            mr.rereg(flags, **kw)
        assert ei.value.error_code == errno.EINVAL, (flags, kw)


def test_reset_drops_the_qps_unpolled_completions_and_the_pair_works_again() -> None:
    """After a failure the QP's flushed completions wait in the CQ; taking the QP to RESET
    removes them (the provider cleans the CQ, as mlx5's does), and a reconnected QP works."""
    w, a, b = pair()
    b.qp.post_recv(RecvWR(5, 1, [SGE(b.mr.buf, 64, b.mr.lkey)]))
    b.qp.post_recv(RecvWR(6, 1, [SGE(b.mr.buf, 64, b.mr.lkey)]))
    b.mr.rereg(e.IBV_REREG_MR_CHANGE_ACCESS, access=LW)
    assert _write(a, b, b.mr.buf, b"denied") == e.IBV_WC_REM_ACCESS_ERR
    settle(w, 50_000)
    for side in (a, b):
        side.qp.modify(QPAttr(qp_state=e.IBV_QPS_RESET), e.IBV_QP_STATE)
    assert a.cq.poll(16)[0] == 0 and b.cq.poll(16)[0] == 0  # the flushes are gone
    b.mr.rereg(e.IBV_REREG_MR_CHANGE_ACCESS, access=ALL_ACCESS)
    connect(a, b)
    connect(b, a)
    assert _write(a, b, b.mr.buf, b"again") == e.IBV_WC_SUCCESS
    settle(w)
    assert b.mr.read(5) == b"again"
