"""The protection model: PDs, bounds and access rights of every SGE and RETH, stale keys.

Each rule is shown refusing, with the exact completion status a NIC reports, and without a
byte of the target memory changing.
"""

from __future__ import annotations

import struct

import pytest
from nicsim.driver import enums as e
from nicsim.driver.user.verbs import MR, PD, SGE, RecvWR, SendWR

from nicsim.testing.rdma import ALL_ACCESS, connect, make_side, pair, settle, wait
from nicsim.world import World

LW, RW, RR, RA = (e.IBV_ACCESS_LOCAL_WRITE, e.IBV_ACCESS_REMOTE_WRITE,
                  e.IBV_ACCESS_REMOTE_READ, e.IBV_ACCESS_REMOTE_ATOMIC)


def _op(a, opcode, lkey, laddr, length, rkey=0, raddr=0):
    wr = SendWR(wr_id=7, opcode=opcode, num_sge=1, sg=[SGE(laddr, length, lkey)])
    if opcode in (e.IBV_WR_ATOMIC_FETCH_AND_ADD, e.IBV_WR_ATOMIC_CMP_AND_SWP):
        wr.set_wr_atomic(rkey, raddr, 1, 1)
    else:
        wr.set_wr_rdma(rkey, raddr)
    a.qp.post_send(wr)
    return wait(a)[0]


def test_local_mr_of_another_pd_is_local_protection_error():
    w, a, b = pair()
    other = MR(PD(a.ctx), 4096, LW)  # same process, different PD
    wc = _op(a, e.IBV_WR_RDMA_WRITE, other.lkey, other.buf, 64, b.mr.rkey, b.mr.buf)
    assert wc.status == e.IBV_WC_LOC_PROT_ERR


def test_remote_mr_of_another_pd_is_remote_access_error():
    w, a, b = pair()
    other = MR(PD(b.ctx), 4096, LW | RW | RR)  # the responder QP's PD is not this one
    other.write(b"\x55" * 64, 64)
    wc = _op(a, e.IBV_WR_RDMA_WRITE, a.mr.lkey, a.mr.buf, 64, other.rkey, other.buf)
    assert wc.status == e.IBV_WC_REM_ACCESS_ERR
    settle(w)
    assert other.read(64) == b"\x55" * 64
    # The NAK is a remote access error (AETH syndrome 0x62) and counted by code.
    assert w.nics["a"].counters()["completer.nak_0x62"] == 1


@pytest.mark.parametrize("opcode,missing", [
    (e.IBV_WR_RDMA_WRITE, RW), (e.IBV_WR_RDMA_READ, RR),
    (e.IBV_WR_ATOMIC_FETCH_AND_ADD, RA)])
def test_mr_access_rights_are_enforced(opcode, missing):
    w = World.two_hosts()
    a = make_side(w, "a")
    b = make_side(w, "b", access=ALL_ACCESS & ~missing)
    connect(a, b)
    connect(b, a)
    b.mr.write(struct.pack("<Q", 77), 8, 0)
    wc = _op(a, opcode, a.mr.lkey, a.mr.buf, 8, b.mr.rkey, b.mr.buf)
    assert wc.status == e.IBV_WC_REM_ACCESS_ERR
    settle(w)
    assert struct.unpack("<Q", b.mr.read(8, 0))[0] == 77


@pytest.mark.parametrize("opcode,missing", [
    (e.IBV_WR_RDMA_WRITE, RW), (e.IBV_WR_RDMA_READ, RR),
    (e.IBV_WR_ATOMIC_FETCH_AND_ADD, RA)])
def test_qp_access_flags_are_enforced(opcode, missing):
    """The responder QP's qp_access_flags gate remote operations too (IBA 10.2.3)."""
    w = World.two_hosts()
    a, b = make_side(w, "a"), make_side(w, "b")
    connect(a, b)
    connect(b, a, access=ALL_ACCESS & ~missing)
    wc = _op(a, opcode, a.mr.lkey, a.mr.buf, 8, b.mr.rkey, b.mr.buf)
    assert wc.status == e.IBV_WC_REM_ACCESS_ERR


def test_read_into_mr_without_local_write_is_local_protection_error():
    w, a, b = pair()
    ro = MR(a.pd, 4096, RR)  # no LOCAL_WRITE: the NIC may not write into it
    wc = _op(a, e.IBV_WR_RDMA_READ, ro.lkey, ro.buf, 64, b.mr.rkey, b.mr.buf)
    assert wc.status == e.IBV_WC_LOC_PROT_ERR


def test_receive_into_mr_without_local_write():
    w, a, b = pair()
    ro = MR(b.pd, 4096, RR)
    b.qp.post_recv(RecvWR(wr_id=1, num_sge=1, sg=[SGE(ro.buf, 64, ro.lkey)]))
    a.qp.post_send(SendWR(opcode=e.IBV_WR_SEND, num_sge=1, sg=[SGE(a.mr.buf, 8, a.mr.lkey)]))
    assert wait(a)[0].status == e.IBV_WC_REM_OP_ERR
    assert wait(b)[0].status == e.IBV_WC_LOC_PROT_ERR


@pytest.mark.parametrize("offset,length", [(-1, 8), (4096 - 4, 8), (0, 4097), (1 << 40, 8)])
def test_reth_outside_the_mr_is_refused(offset, length):
    w, a, b = pair(mr_len=1 << 16)
    small = MR(b.pd, 4096, ALL_ACCESS)
    small.write(b"\x11" * 4096, 4096)
    wc = _op(a, e.IBV_WR_RDMA_WRITE, a.mr.lkey, a.mr.buf, length, small.rkey,
             (small.buf + offset) % 2**64)
    assert wc.status == e.IBV_WC_REM_ACCESS_ERR
    settle(w)
    assert small.read(4096) == b"\x11" * 4096


def test_sge_outside_the_mr_is_refused():
    w, a, b = pair(mr_len=8192)
    wc = _op(a, e.IBV_WR_RDMA_WRITE, a.mr.lkey, a.mr.buf - 1, 8, b.mr.rkey, b.mr.buf)
    assert wc.status == e.IBV_WC_LOC_PROT_ERR


def test_stale_lkey_after_dereg():
    w, a, b = pair()
    mr = MR(a.pd, 4096, LW)
    lkey, buf = mr.lkey, mr.buf
    mr.close()
    assert _op(a, e.IBV_WR_RDMA_WRITE, lkey, buf, 8, b.mr.rkey, b.mr.buf).status == \
        e.IBV_WC_LOC_PROT_ERR


def test_closed_context_leaves_no_working_rkey():
    w, a, b = pair()
    a2, c2 = make_side(w, "a"), make_side(w, "b")  # another process on host b
    connect(a2, c2)
    connect(c2, a2)
    rkey, addr = c2.mr.rkey, c2.mr.buf
    c2.ctx.close()
    # Reuse the freed indices: new MRs get new keys, never the old one.
    fresh = [MR(b.pd, 4096, ALL_ACCESS) for _ in range(4)]
    assert rkey not in {m.rkey for m in fresh}
    # The stale rkey aimed at host b through a's live QP to b is refused.
    wc = _op(a, e.IBV_WR_RDMA_WRITE, a.mr.lkey, a.mr.buf, 8, rkey, addr)
    assert wc.status == e.IBV_WC_REM_ACCESS_ERR


def test_modify_qp_to_a_state_that_does_not_exist_is_bad_param():
    """A MODIFY_QP record naming a state beyond ERR fails the command with BAD_PARAM (as the
    RTL's command processor answers), it does not crash the device."""
    import errno

    from nicsim.driver.kernel.hw.objects import HwError

    from nicsim.hwif import QpAttrMask, QpState

    w, a, _ = pair()
    hw = w.hosts["a"].kernel.devices["nsnic0"].hw
    qpc = hw.query_qp(a.qp.qp_num)
    qpc.qpn, qpc.attr_mask, qpc.state = a.qp.qp_num, int(QpAttrMask.STATE), 9
    with pytest.raises(HwError) as ei:
        hw.modify_qp(qpc)
    assert ei.value.errno == errno.EINVAL
    assert w.nics["a"].qps[a.qp.qp_num].state is QpState.RTS
