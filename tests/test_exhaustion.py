"""Exhaustion fails cleanly: a CQ that overruns goes to error with its QPs and the caller is
told instead of waiting forever; running out of MPT entries gives ENOMEM and leaves no page
pinned; running out of host memory gives ENOMEM, not a traceback."""

from __future__ import annotations

import errno
from dataclasses import replace

import pytest
from nicsim.driver import enums as e
from nicsim.driver.user.verbs import CQ, MR, PD, SGE, Context, PyverbsRDMAError, QPCap, SendWR

from nicsim.nic.config import NicConfig
from nicsim.testing.rdma import connect, make_side
from nicsim.world import World


def test_cq_overrun_puts_cq_and_qps_in_error_and_poll_says_so():
    """A CQ of 4 entries gets 8 signaled completions without being polled: the fifth finds
    it full. The CQ goes to error (IBA 11.6.2), the QP that uses it to ERR, and once the
    caller has drained what the CQ holds, the next poll raises instead of waiting forever."""
    w = World.two_hosts()
    a = make_side(w, "a", cqe=4, cap=QPCap(16, 4, 1, 1))
    b = make_side(w, "b")
    connect(a, b)
    connect(b, a)
    for i in range(8):
        wr = SendWR(wr_id=i, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1,
                    sg=[SGE(a.mr.buf, 64, a.mr.lkey)], send_flags=e.IBV_SEND_SIGNALED)
        wr.set_wr_rdma(b.mr.rkey, b.mr.buf)
        a.qp.post_send(wr)
    w.hosts["a"].spend(50_000)
    nic = w.nics["a"]
    assert nic.counters()["cq.overruns"] >= 1
    assert a.qp.query()[0].qp_state == e.IBV_QPS_ERR
    got = []
    with pytest.raises(PyverbsRDMAError) as ei:
        for _ in range(100):
            got += a.cq.poll(8)[1]
    assert ei.value.error_code == errno.EOVERFLOW
    assert "overran" in str(ei.value)
    assert [c.wr_id for c in got] == [0, 1, 2, 3]  # what fitted, in order


def test_mpt_exhaustion_is_enomem_and_leaks_no_pin():
    """With a NIC of 256 MPT entries (255 usable), the 256th MR is ENOMEM; after every MR is
    deregistered no page is pinned."""
    w = World.two_hosts(nic=replace(NicConfig(), log_mpt_entries=8))
    ctx = Context("nsnic0", host=w.hosts["a"])
    pd = PD(ctx)
    buf = ctx.alloc(4096 * 4)
    mrs = []
    with pytest.raises(PyverbsRDMAError) as ei:
        for _ in range(300):
            mrs.append(MR(pd, 8192, e.IBV_ACCESS_LOCAL_WRITE, address=buf + 100))
    assert ei.value.error_code == errno.ENOMEM
    assert len(mrs) == 255
    mem = w.hosts["a"].mem
    assert mem.pins
    for mr in mrs:
        mr.close()
    assert not mem.pins


def test_host_memory_exhaustion_is_enomem():
    """Queues larger than the host's memory: ENOMEM from create, not a traceback, and the
    device keeps working."""
    w = World.two_hosts(mem_size=4 << 20)
    ctx = Context("nsnic0", host=w.hosts["a"])
    with pytest.raises(PyverbsRDMAError) as ei:
        CQ(ctx, 1 << 20)  # 32 MiB of ring
    assert ei.value.error_code == errno.ENOMEM
    with pytest.raises(PyverbsRDMAError) as ei:
        MR(PD(ctx), 8 << 20, e.IBV_ACCESS_LOCAL_WRITE)
    assert ei.value.error_code == errno.ENOMEM
    CQ(ctx, 64).poll()
