"""Extended verbs: the ibv_wr_* post-send API (QPEx) writes the same WQEs as post_send, and
the extended CQ (CQEX) reads the same completions as CQ."""

from __future__ import annotations

import errno

import pytest
from nicsim.driver import enums as e
from nicsim.driver.user.errors import PyverbsRDMAError
from nicsim.driver.user.extended import CQEX, QPEx
from nicsim.driver.user.unsupported import CqInitAttrEx
from nicsim.driver.user.verbs import (
    MR,
    PD,
    SGE,
    Context,
    QPCap,
    QPInitAttrEx,
    RecvWR,
    SendWR,
)

from nicsim.workloads.endpoint import ALL_ACCESS, Side, connect, make_side
from nicsim.world import World

_OPS = (e.IBV_QP_EX_WITH_SEND | e.IBV_QP_EX_WITH_RDMA_WRITE | e.IBV_QP_EX_WITH_RDMA_READ
        | e.IBV_QP_EX_WITH_SEND_WITH_IMM)
_MASK = e.IBV_QP_INIT_ATTR_PD | e.IBV_QP_INIT_ATTR_SEND_OPS_FLAGS


def _ex_side(w: World, ops: int = _OPS) -> Side:
    ctx = Context("nsnic0", host=w.hosts["a"])
    pd = PD(ctx)
    cq = CQEX(ctx, CqInitAttrEx(cqe=64, wc_flags=e.IBV_WC_STANDARD_FLAGS))
    qp = QPEx(ctx, QPInitAttrEx(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, pd=pd,
                                cap=QPCap(16, 16, 2, 2, 64), send_ops_flags=ops,
                                comp_mask=_MASK))
    return Side(ctx, pd, cq, qp, MR(pd, 1 << 16, ALL_ACCESS))


def _pair() -> tuple[World, Side, Side]:
    w = World.two_hosts(seed=0)
    a, b = _ex_side(w), make_side(w, "b")
    connect(a, b)
    connect(b, a)
    return w, a, b


def _poll_ex(cq: CQEX, n: int) -> list[tuple[int, int, int, int, int]]:
    out: list[tuple[int, int, int, int, int]] = []
    env = cq.ctx.host.env
    end = env.now + 1e7
    while len(out) < n and env.now < end:
        if cq.start_poll() != 0:
            continue
        while True:
            out.append((cq.wr_id, cq.status, cq.read_opcode(), cq.read_byte_len(),
                        cq.read_qp_num()))
            if cq.poll_next() != 0:
                break
        cq.end_poll()
    return out


def test_wr_api_batch_writes_reads_and_sends_with_one_doorbell() -> None:
    w, a, b = _pair()
    a.mr.write(b"W" * 100 + b"S" * 20, 120)
    b.mr.write(b"remote bytes", 12, 4096)
    b.qp.post_recv(RecvWR(9, 1, [SGE(b.mr.buf + 8192, 64, b.mr.lkey)]))
    qp = a.qp
    doorbells = w.nics["a"].engine.counters["doorbells"]
    qp.wr_start()
    qp.wr_id, qp.wr_flags = 1, e.IBV_SEND_SIGNALED
    qp.wr_rdma_write(b.mr.rkey, b.mr.buf)
    qp.wr_set_sge(SGE(a.mr.buf, 100, a.mr.lkey))
    qp.wr_id = 2
    qp.wr_rdma_read(b.mr.rkey, b.mr.buf + 4096)
    qp.wr_set_sge(SGE(a.mr.buf + 1024, 12, a.mr.lkey))
    qp.wr_id = 3
    qp.wr_send_imm(0x01020304)
    qp.wr_set_sge_list(2, [SGE(a.mr.buf + 100, 10, a.mr.lkey),
                           SGE(a.mr.buf + 110, 10, a.mr.lkey)])
    qp.wr_complete()
    w.hosts["a"].spend(5000)
    assert w.nics["a"].engine.counters["doorbells"] == doorbells + 1
    wcs = _poll_ex(a.cq, 3)
    assert [x[:4] for x in wcs] == [(1, 0, e.IBV_WC_RDMA_WRITE, 100),
                                    (2, 0, e.IBV_WC_RDMA_READ, 12), (3, 0, e.IBV_WC_SEND, 20)]
    assert all(x[4] == qp.qp_num for x in wcs)
    assert b.mr.read(100) == b"W" * 100 and a.mr.read(12, 1024) == b"remote bytes"
    (rwc,) = b.cq.poll()[1] or b.cq.poll()[1]
    assert rwc.wr_id == 9 and rwc.byte_len == 20 and b.mr.read(20, 8192) == b"S" * 20
    # The immediate travels as htobe32 made it (pyverbs' wr_send_imm), as SendWR carries it.
    assert rwc.imm_data == 0x04030201 and rwc.wc_flags & e.IBV_WC_WITH_IMM


def test_wr_api_writes_the_same_wqe_as_post_send() -> None:
    _w, a, b = _pair()
    ring = a.qp._p.r.sq_va
    stride = a.qp._p.sq_stride
    a.qp.post_send(SendWR(7, e.IBV_WR_RDMA_WRITE, 1, sg=[SGE(a.mr.buf, 8, a.mr.lkey)],
                          remote_addr=b.mr.buf, rkey=b.mr.rkey))
    a.qp.wr_start()
    a.qp.wr_id, a.qp.wr_flags = 7, e.IBV_SEND_SIGNALED
    a.qp.wr_rdma_write(b.mr.rkey, b.mr.buf)
    a.qp.wr_set_sge(SGE(a.mr.buf, 8, a.mr.lkey))
    a.qp.wr_complete()
    assert a.ctx.read_mem(ring, stride) == a.ctx.read_mem(ring + stride, stride)


def test_wr_api_errors() -> None:
    w = World.two_hosts(seed=0)
    with pytest.raises(PyverbsRDMAError) as ei:  # TSO: not an nsnic operation
        _ex_side(w, e.IBV_QP_EX_WITH_SEND | e.IBV_QP_EX_WITH_TSO)
    assert ei.value.error_code == errno.EOPNOTSUPP
    a, b = _ex_side(w, e.IBV_QP_EX_WITH_SEND), make_side(w, "b")
    a.qp.wr_start()  # the QP is in RESET: wr_complete fails as ibv_post_send would
    a.qp.wr_send()
    a.qp.wr_set_sge(SGE(a.mr.buf, 8, a.mr.lkey))
    with pytest.raises(PyverbsRDMAError) as ei:
        a.qp.wr_complete()
    assert ei.value.error_code == errno.EINVAL
    connect(a, b)
    a.qp.wr_start()  # an operation the QP was not created with
    a.qp.wr_rdma_write(b.mr.rkey, b.mr.buf)
    a.qp.wr_set_sge(SGE(a.mr.buf, 8, a.mr.lkey))
    with pytest.raises(PyverbsRDMAError) as ei:
        a.qp.wr_complete()
    assert ei.value.error_code == errno.EINVAL
    assert a.cq.start_poll() == errno.ENOENT  # nothing was posted
    with pytest.raises(PyverbsRDMAError) as ei:  # completion timestamps: not on nsnic
        CQEX(a.ctx, CqInitAttrEx(cqe=8, wc_flags=e.IBV_WC_EX_WITH_COMPLETION_TIMESTAMP))
    assert ei.value.error_code == errno.EOPNOTSUPP
    with pytest.raises(PyverbsRDMAError) as ei:
        CQEX(a.ctx, CqInitAttrEx(cqe=8, comp_vector=a.ctx.num_comp_vectors))
    assert ei.value.error_code == errno.EINVAL
