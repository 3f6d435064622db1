"""Verbs misuse: a rejected modify_qp changes nothing, cur_qp_state is checked, and reg_mr,
close() and post_send answer as rxe and pyverbs do (errno, never a Python struct.error).
"""

from __future__ import annotations

import dataclasses
import errno

import pytest
from nicsim.driver import enums as e
from nicsim.driver.user.verbs import (
    MR,
    SGE,
    AHAttr,
    GlobalRoute,
    PyverbsRDMAError,
    QPAttr,
    SendWR,
)

from nicsim.nic.config import NicConfig
from nicsim.testing.rdma import ALL_ACCESS, Side, make_side, pair, wait
from nicsim.world import World

M = e.ibv_qp_attr_mask
TO_INIT = M.IBV_QP_STATE | M.IBV_QP_PKEY_INDEX | M.IBV_QP_PORT | M.IBV_QP_ACCESS_FLAGS
TO_RTR = (M.IBV_QP_STATE | M.IBV_QP_AV | M.IBV_QP_PATH_MTU | M.IBV_QP_DEST_QPN
          | M.IBV_QP_RQ_PSN | M.IBV_QP_MAX_DEST_RD_ATOMIC | M.IBV_QP_MIN_RNR_TIMER)
TO_RTS = (M.IBV_QP_STATE | M.IBV_QP_TIMEOUT | M.IBV_QP_RETRY_CNT | M.IBV_QP_RNR_RETRY
          | M.IBV_QP_SQ_PSN | M.IBV_QP_MAX_QP_RD_ATOMIC)
LW = e.IBV_ACCESS_LOCAL_WRITE


def _errno(fn, *a, **kw) -> int:  # noqa: ANN001, ANN002, ANN003
    """The errno of the PyverbsRDMAError `fn` raises (any other exception fails the test)."""
    with pytest.raises(PyverbsRDMAError) as ei:
        fn(*a, **kw)
    return ei.value.error_code


# -- 8. a rejected modify_qp changes nothing ---------------------------------------------------


def _qp_in(state: int) -> tuple[World, Side, QPAttr]:
    """a's QP brought to `state` (RESET, INIT, RTR or RTS) towards b, and the attributes
    used on the way."""
    w = World.two_hosts()
    a, b = make_side(w, "a"), make_side(w, "b")
    attr = QPAttr(qp_access_flags=ALL_ACCESS, path_mtu=e.IBV_MTU_1024, dest_qp_num=b.qp.qp_num,
                  max_rd_atomic=4, max_dest_rd_atomic=4, timeout=14, retry_cnt=7,
                  rnr_retry=7, min_rnr_timer=1,
                  ah_attr=AHAttr(GlobalRoute(dgid=b.ctx.query_gid())))
    steps = [(e.IBV_QPS_INIT, a.qp.to_init), (e.IBV_QPS_RTR, a.qp.to_rtr),
             (e.IBV_QPS_RTS, a.qp.to_rts)]
    for st, step in steps:
        if st > state:
            break
        step(dataclasses.replace(attr))
    return w, a, attr


# (state the QP is in, target state, mask, the bad attribute)
BAD_MODIFIES = [
    pytest.param(e.IBV_QPS_RTS, e.IBV_QPS_RTS, M.IBV_QP_STATE | M.IBV_QP_MIN_RNR_TIMER,
                 {"min_rnr_timer": 300}, id="min_rnr_timer=300"),
    pytest.param(e.IBV_QPS_RTS, e.IBV_QPS_RTS, M.IBV_QP_STATE | M.IBV_QP_MIN_RNR_TIMER,
                 {"min_rnr_timer": -1}, id="min_rnr_timer=-1"),
    pytest.param(e.IBV_QPS_RTR, e.IBV_QPS_RTS, TO_RTS, {"timeout": 32}, id="timeout=32"),
    pytest.param(e.IBV_QPS_RTR, e.IBV_QPS_RTS, TO_RTS, {"retry_cnt": 8}, id="retry_cnt=8"),
    pytest.param(e.IBV_QPS_RTR, e.IBV_QPS_RTS, TO_RTS, {"rnr_retry": 8}, id="rnr_retry=8"),
    pytest.param(e.IBV_QPS_RTR, e.IBV_QPS_RTS, TO_RTS, {"max_rd_atomic": 17},
                 id="max_rd_atomic=17"),
    pytest.param(e.IBV_QPS_RTR, e.IBV_QPS_RTS, TO_RTS, {"max_rd_atomic": -1},
                 id="max_rd_atomic=-1"),
    pytest.param(e.IBV_QPS_INIT, e.IBV_QPS_RTR, TO_RTR, {"path_mtu": 9}, id="path_mtu=9"),
    pytest.param(e.IBV_QPS_INIT, e.IBV_QPS_RTR, TO_RTR, {"max_dest_rd_atomic": 17},
                 id="max_dest_rd_atomic=17"),
    pytest.param(e.IBV_QPS_INIT, e.IBV_QPS_RTR, TO_RTR, {"min_rnr_timer": 32},
                 id="min_rnr_timer=32"),
    pytest.param(e.IBV_QPS_RESET, e.IBV_QPS_INIT, TO_INIT, {"pkey_index": 5},
                 id="pkey_index=5"),
    pytest.param(e.IBV_QPS_RESET, e.IBV_QPS_INIT, TO_INIT, {"port_num": 2}, id="port_num=2"),
]


@pytest.mark.parametrize("state,target,mask,bad", BAD_MODIFIES)
def test_rejected_modify_changes_nothing(state, target, mask, bad):
    """An attribute out of its IBA range (5-bit timers, 3-bit retry counts, one port, a
    one-entry P_Key table, the device's rd_atomic limit) is EINVAL, never struct.error; the
    QP reads back exactly as before, and it still takes the next modifies."""
    w, a, attr = _qp_in(state)
    before = a.qp.query()[0]
    assert before.qp_state == state
    wrong = dataclasses.replace(attr, qp_state=target, **bad)
    assert _errno(a.qp.modify, wrong, mask) == errno.EINVAL
    assert a.qp.query()[0] == before
    # The rejected values must not linger anywhere to poison later modifies.
    a.qp.modify(QPAttr(qp_state=e.IBV_QPS_ERR), M.IBV_QP_STATE)
    assert a.qp.query()[0].qp_state == e.IBV_QPS_ERR
    a.qp.modify(QPAttr(qp_state=e.IBV_QPS_RESET), M.IBV_QP_STATE)
    assert a.qp.query()[0].qp_state == e.IBV_QPS_RESET


# -- 9. cur_qp_state ---------------------------------------------------------------------------


@pytest.mark.parametrize("target", [e.IBV_QPS_RTS, e.IBV_QPS_ERR], ids=["RTS", "ERR"])
@pytest.mark.parametrize("claimed", [e.IBV_QPS_INIT, e.IBV_QPS_RTR, e.IBV_QPS_SQD],
                         ids=["INIT", "RTR", "SQD"])
def test_wrong_cur_qp_state_is_einval(claimed, target):
    """IBV_QP_CUR_STATE asserts what state the caller believes the QP is in; if the QP is
    not in it (here: it is in RTS), the modify is EINVAL and nothing changes."""
    w, a, b = pair()
    before = a.qp.query()[0]
    attr = QPAttr(qp_state=target, cur_qp_state=claimed)
    assert _errno(a.qp.modify, attr, M.IBV_QP_STATE | M.IBV_QP_CUR_STATE) == errno.EINVAL
    assert a.qp.query()[0] == before


def test_matching_cur_qp_state_is_accepted():
    w, a, b = pair()
    a.qp.modify(QPAttr(qp_state=e.IBV_QPS_RTS, cur_qp_state=e.IBV_QPS_RTS, min_rnr_timer=5),
                M.IBV_QP_STATE | M.IBV_QP_CUR_STATE | M.IBV_QP_MIN_RNR_TIMER)
    got = a.qp.query()[0]
    assert (got.qp_state, got.min_rnr_timer) == (e.IBV_QPS_RTS, 5)


# -- 10. errno as rxe / pyverbs -----------------------------------------------------------------


@pytest.mark.parametrize("flag", [1 << 20, 1 << 4], ids=["RELAXED_ORDERING", "MW_BIND"])
def test_reg_mr_accepts_optional_and_mw_bind_access(flag):
    """IBV_ACCESS_RELAXED_ORDERING is an optional flag (a device may ignore it) and
    IBV_ACCESS_MW_BIND is a defined access right: reg_mr accepts both."""
    w, a, b = pair()
    mr = MR(a.pd, 4096, LW | flag)
    assert mr.lkey
    mr.close()


def test_reg_mr_with_unknown_access_bit_is_einval():
    """(Passes on the baseline: guards against accepting every unknown bit along with the
    optional ones.)"""
    w, a, b = pair()
    assert _errno(MR, a.pd, 4096, LW | (1 << 15)) == errno.EINVAL


def test_reg_mr_on_demand_without_odp_is_eopnotsupp():
    """IBV_ACCESS_ON_DEMAND on a device without on-demand paging (NicConfig(odp=False)):
    a known flag the device does not support, EOPNOTSUPP (ib_check_mr_access)."""
    w, a, b = pair(nic=NicConfig(odp=False))
    assert _errno(MR, a.pd, 4096, LW | (1 << 6)) == errno.EOPNOTSUPP


def test_reg_mr_wrapping_the_address_space_is_einval():
    """address + length beyond 2^64 is an invalid range (EINVAL), checked before any page is
    looked up (which would say EFAULT)."""
    w, a, b = pair()
    assert _errno(MR, a.pd, 8192, LW, address=2**64 - 4096) == errno.EINVAL


@pytest.mark.parametrize("obj", ["mr", "qp", "cq", "pd"])
def test_double_close_raises_nothing(obj):
    """close() twice is a no-op the second time, as in pyverbs."""
    w, a, b = pair()
    if obj in ("cq", "pd"):
        a.qp.close()  # the CQ and PD are in use by the QP (and the PD by the MR)
        a.mr.close()
    if obj == "pd":
        a.cq.close()
    target = getattr(a, obj)
    target.close()
    target.close()


def _write(a: Side, b: Side, sges: list[SGE], wr_id: int = 1) -> SendWR:
    wr = SendWR(wr_id=wr_id, opcode=e.IBV_WR_RDMA_WRITE, num_sge=len(sges), sg=sges)
    wr.set_wr_rdma(b.mr.rkey, b.mr.buf)
    return wr


@pytest.mark.parametrize("lengths", [
    pytest.param([2**31 + 1], id="sge-over-2^31"),
    pytest.param([2**30 + 1, 2**30 + 1], id="total-over-2^31"),
    pytest.param([2**32], id="sge-2^32"),
    pytest.param([2**40], id="sge-2^40"),
])
def test_message_longer_than_2_31_is_einval_at_post(lengths):
    """IBA caps a message at 2^31 bytes and an SGE length is a u32: post_send refuses longer
    ones with EINVAL (as rxe does), nothing is posted, and the QP keeps working."""
    w, a, b = pair()
    sges = [SGE(a.mr.buf, n, a.mr.lkey) for n in lengths]
    assert _errno(a.qp.post_send, _write(a, b, sges, wr_id=66)) == errno.EINVAL
    a.qp.post_send(_write(a, b, [SGE(a.mr.buf, 64, a.mr.lkey)], wr_id=7))
    assert [(c.wr_id, c.status) for c in wait(a)] == [(7, e.IBV_WC_SUCCESS)]
