"""Verbs misuse gives the errno pyverbs reports; protocol errors give the hardware's status."""

from __future__ import annotations

import errno

import pytest
from nicsim.driver import enums as e
from nicsim.driver.abi import DeallocPd, DestroyCq, UverbsError
from nicsim.driver.user.verbs import (
    CQ,
    MR,
    PD,
    QP,
    SGE,
    AHAttr,
    Context,
    GlobalRoute,
    PyverbsRDMAError,
    QPAttr,
    QPCap,
    QPInitAttr,
    RecvWR,
    SendWR,
)

from nicsim.testing.rdma import ALL_ACCESS, connect, make_side, pair, wait
from nicsim.workloads.endpoint import roce_v2_gid
from nicsim.world import World


def _errno(fn, *a, **kw) -> int:
    with pytest.raises(PyverbsRDMAError) as ei:
        fn(*a, **kw)
    return ei.value.error_code


def _write(a, b, size=64, lkey=None, rkey=None, addr=None, local=0):
    wr = SendWR(wr_id=1, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1,
                sg=[SGE(a.mr.buf + local, size, a.mr.lkey if lkey is None else lkey)])
    wr.set_wr_rdma(b.mr.rkey if rkey is None else rkey, b.mr.buf if addr is None else addr)
    return wr


@pytest.fixture
def world():
    return World.two_hosts()


def test_post_send_on_reset_qp_is_einval(world):
    a, b = make_side(world, "a"), make_side(world, "b")
    assert _errno(a.qp.post_send, _write(a, b)) == errno.EINVAL
    assert _errno(a.qp.post_recv, RecvWR(num_sge=0, sg=[])) == errno.EINVAL


def test_post_send_before_rts_is_einval(world):
    a, b = make_side(world, "a"), make_side(world, "b")
    attr = QPAttr(qp_access_flags=ALL_ACCESS, dest_qp_num=b.qp.qp_num,
                  ah_attr=AHAttr(GlobalRoute(dgid=b.ctx.query_gid())))
    a.qp.to_init(attr)
    a.qp.post_recv(RecvWR(num_sge=0, sg=[]))  # allowed from INIT on
    a.qp.to_rtr(attr)
    assert _errno(a.qp.post_send, _write(a, b)) == errno.EINVAL


def test_invalid_transition_is_einval(world):
    a, b = make_side(world, "a"), make_side(world, "b")
    attr = QPAttr(dest_qp_num=b.qp.qp_num, ah_attr=AHAttr(GlobalRoute(dgid=b.ctx.query_gid())))
    # RESET -> RTR and RESET -> RTS skip INIT (to_rtr and to_rts go through INIT themselves,
    # as pyverbs' do: the kernel sees the skip only through modify).
    attr.qp_state = e.IBV_QPS_RTR
    assert _errno(a.qp.modify, attr, e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU
                  | e.IBV_QP_DEST_QPN | e.IBV_QP_RQ_PSN | e.IBV_QP_MAX_DEST_RD_ATOMIC
                  | e.IBV_QP_MIN_RNR_TIMER) == errno.EINVAL
    attr.qp_state = e.IBV_QPS_RTS
    assert _errno(a.qp.modify, attr, e.IBV_QP_STATE | e.IBV_QP_SQ_PSN) == errno.EINVAL
    assert a.qp.query()[0].qp_state == e.IBV_QPS_RESET
    a.qp.to_init(attr)
    # INIT -> RTR without the required DEST_QPN attribute.
    mask = e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_RQ_PSN | \
        e.IBV_QP_MAX_DEST_RD_ATOMIC | e.IBV_QP_MIN_RNR_TIMER
    attr.qp_state = e.IBV_QPS_RTR
    assert _errno(a.qp.modify, attr, mask) == errno.EINVAL
    # RESET-only attribute masks: a mask with an attribute RTR does not take.
    assert _errno(a.qp.modify, attr, mask | e.IBV_QP_DEST_QPN | e.IBV_QP_SQ_PSN) == errno.EINVAL
    a.qp.modify(attr, mask | e.IBV_QP_DEST_QPN)
    assert a.qp.query()[0].qp_state == e.IBV_QPS_RTR


def test_query_qp_reads_back_what_the_nic_holds():
    w, a, b = pair()
    attr, init = a.qp.query()
    assert attr.qp_state == e.IBV_QPS_RTS
    assert attr.dest_qp_num == b.qp.qp_num
    assert attr.path_mtu == e.IBV_MTU_1024
    assert attr.ah_attr.gr.dgid == roce_v2_gid(b.ctx)[1]
    assert attr.ah_attr.gr.sgid_index == roce_v2_gid(a.ctx)[0] == 3


def test_unknown_neighbour_is_ehostunreach(world):
    a = make_side(world, "a")
    attr = QPAttr(qp_access_flags=ALL_ACCESS, dest_qp_num=5,
                  ah_attr=AHAttr(GlobalRoute(dgid=None)))
    a.qp.to_init(attr)
    from nicsim.driver.user.verbs import GID
    attr.ah_attr = AHAttr(GlobalRoute(dgid=GID("::ffff:10.9.9.9")))
    assert _errno(a.qp.to_rtr, attr) == errno.EHOSTUNREACH


def test_resource_limits(world):
    ctx = Context("nsnic0", host=world.hosts["a"])
    pd = PD(ctx)
    cq = CQ(ctx, 16)
    # A QP type the verbs know and nsnic lacks is EOPNOTSUPP, a number that is no type EINVAL.
    assert _errno(QP, pd, QPInitAttr(qp_type=e.IBV_QPT_RAW_PACKET, scq=cq, rcq=cq)) == \
        errno.EOPNOTSUPP
    assert _errno(QP, pd, QPInitAttr(qp_type=77, scq=cq, rcq=cq)) == errno.EINVAL
    assert _errno(QP, pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq,
                                     cap=QPCap(max_send_sge=99))) == errno.EINVAL
    assert _errno(CQ, ctx, 0) == errno.EINVAL
    assert _errno(Context, "nsnic7", host=world.hosts["a"]) == errno.ENODEV
    # Remote write access without local write is refused (IBA 10.6.3.1).
    assert _errno(MR, pd, 4096, e.IBV_ACCESS_REMOTE_WRITE) == errno.EINVAL
    # The kernel refuses to free a PD with an MR on it, or a CQ a QP uses (EBUSY)...
    mr = MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE)
    qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq))
    with pytest.raises(UverbsError) as ei:
        ctx.file.write(DeallocPd(pd.handle))
    assert ei.value.errno == errno.EBUSY
    with pytest.raises(UverbsError) as ei:
        ctx.file.write(DestroyCq(cq.handle))
    assert ei.value.errno == errno.EBUSY
    # ... which is why pyverbs closes an object's children first: the CQ takes its QP with
    # it, the PD its MR, and what is closed stays closed.
    cq.close()
    assert qp.closed and not mr.closed
    pd.close()
    assert mr.closed and pd.closed
    assert not ctx.file.uctx.objects


def test_post_errors_on_the_provider():
    w, a, b = pair()
    wr = _write(a, b)
    wr.num_sge, wr.sg = 5, [wr.sg[0]] * 5  # max_send_sge is 4
    assert _errno(a.qp.post_send, wr) == errno.EINVAL
    bad = _write(a, b)
    bad.opcode = 42
    assert _errno(a.qp.post_send, bad) == errno.EINVAL
    inl = _write(a, b, size=65)  # max_inline_data is 64
    inl.send_flags = e.IBV_SEND_INLINE | e.IBV_SEND_SIGNALED
    assert _errno(a.qp.post_send, inl) == errno.EINVAL
    # Fill the 64-entry SQ without polling: the 65th post is ENOMEM.
    for _ in range(64):
        a.qp.post_send(_write(a, b))
    assert _errno(a.qp.post_send, _write(a, b)) == errno.ENOMEM
    assert len(wait(a, 64)) == 64
    a.qp.post_send(_write(a, b))  # room again
    wait(a)


def test_inline_send_carries_the_data():
    w, a, b = pair()
    a.mr.write(b"inline!", 7, 0)
    b.qp.post_recv(RecvWR(wr_id=1, num_sge=1, sg=[SGE(b.mr.buf, 64, b.mr.lkey)]))
    a.qp.post_send(SendWR(opcode=e.IBV_WR_SEND, num_sge=1, sg=[SGE(a.mr.buf, 7, a.mr.lkey)],
                          send_flags=e.IBV_SEND_INLINE | e.IBV_SEND_SIGNALED))
    a.mr.write(b"changed", 7, 0)  # inline data was copied at post time
    wait(a)
    assert wait(b)[0].byte_len == 7 and b.mr.read(7, 0) == b"inline!"


# -- protocol errors: completion statuses --------------------------------------------------


def test_bad_lkey_is_local_protection_error_and_flushes():
    w, a, b = pair()
    a.qp.post_send(_write(a, b, lkey=a.mr.lkey ^ 0x100))
    a.qp.post_send(_write(a, b))
    wcs = wait(a, 2)
    assert [c.status for c in wcs] == [e.IBV_WC_LOC_PROT_ERR, e.IBV_WC_WR_FLUSH_ERR]
    assert a.qp.query()[0].qp_state == e.IBV_QPS_ERR
    # Posting to a QP in ERR completes with flush error too (IBA 10.8.3.3).
    a.qp.post_send(_write(a, b))
    assert wait(a)[0].status == e.IBV_WC_WR_FLUSH_ERR


def test_sge_beyond_the_mr_is_local_protection_error():
    w, a, b = pair(mr_len=8192)
    a.qp.post_send(_write(a, b, size=200, local=8192 - 100))
    assert wait(a)[0].status == e.IBV_WC_LOC_PROT_ERR


def test_bad_rkey_and_bounds_are_remote_access_errors():
    for kw in ({"rkey": 0x12345}, {"addr": None, "size": 64}):
        w, a, b = pair(mr_len=8192)
        if "addr" in kw:
            kw = {"addr": b.mr.buf + 8192 - 10, "size": 64}
        a.qp.post_send(_write(a, b, **kw))
        (wc,) = wait(a)
        assert wc.status == e.IBV_WC_REM_ACCESS_ERR
        assert w.nics["b"].counters()["responder.naks_sent"] == 1


def test_mr_without_remote_write_refuses_rdma_write():
    w = World.two_hosts()
    a = make_side(w, "a")
    b = make_side(w, "b", access=e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_READ)
    connect(a, b)
    connect(b, a)
    a.qp.post_send(_write(a, b))
    assert wait(a)[0].status == e.IBV_WC_REM_ACCESS_ERR
    # The responder's QP went to ERR as well (class C error, IBA 9.9.3).
    assert b.qp.query()[0].qp_state == e.IBV_QPS_ERR


def test_receive_buffer_too_small():
    w, a, b = pair()
    b.qp.post_recv(RecvWR(wr_id=3, num_sge=1, sg=[SGE(b.mr.buf, 100, b.mr.lkey)]))
    a.qp.post_send(SendWR(opcode=e.IBV_WR_SEND, num_sge=1, sg=[SGE(a.mr.buf, 101, a.mr.lkey)]))
    assert wait(a)[0].status == e.IBV_WC_REM_INV_REQ_ERR
    rwc = wait(b)[0]
    assert (rwc.status, rwc.wr_id) == (e.IBV_WC_LOC_LEN_ERR, 3)


def test_misaligned_atomic_is_invalid_request():
    w, a, b = pair()
    wr = SendWR(opcode=e.IBV_WR_ATOMIC_FETCH_AND_ADD, num_sge=1,
                sg=[SGE(a.mr.buf, 8, a.mr.lkey)])
    wr.set_wr_atomic(b.mr.rkey, b.mr.buf + 4, 1)
    a.qp.post_send(wr)
    assert wait(a)[0].status == e.IBV_WC_REM_INV_REQ_ERR


def test_opcode_sequence_error_in_a_write_takes_no_receive_wqe():
    """A broken WRITE must not complete (or consume) a receive WQE it never took."""
    from nicsim.wire import reth
    from nicsim.wire.opcodes import Opcode

    w, a, b = pair()
    b.qp.post_recv(RecvWR(wr_id=9, num_sge=1, sg=[SGE(b.mr.buf, 64, b.mr.lkey)]))
    nb, qb = w.nics["b"], w.nics["b"].qps[b.qp.qp_num]
    bld = w.nics["a"].qps[a.qp.qp_num].builder
    # WRITE FIRST, then a SEND MIDDLE where a WRITE MIDDLE/LAST must come: invalid request.
    nb.receive(bld.build(Opcode.RC_RDMA_WRITE_FIRST, qb.qpn, qb.epsn,
                         reth(b.mr.buf, b.mr.rkey, 4096), bytes(1024)))
    nb.receive(bld.build(Opcode.RC_SEND_MIDDLE, qb.qpn, qb.epsn, b"", bytes(1024)))
    assert b.qp.query()[0].qp_state == e.IBV_QPS_ERR
    # The receive WQE is flushed, not failed as if the WRITE had used it.
    assert [(c.wr_id, c.status) for c in wait(b)] == [(9, e.IBV_WC_WR_FLUSH_ERR)]
