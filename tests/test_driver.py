"""The driver split: data path without the kernel, ib_core cleanup, hw driver bookkeeping."""

from __future__ import annotations

import struct

from nicsim.driver import enums as e
from nicsim.driver.user.verbs import MR, SGE, RecvWR, SendWR

from nicsim.hwif import MPT_SIZE, Mpt, MptFlags
from nicsim.testing.rdma import pair, wait


def test_data_path_makes_no_kernel_crossing():
    w, a, b = pair()
    before = (a.ctx.uverbs_commands, b.ctx.uverbs_commands)
    cmds_hw = w.nics["a"].commands.counters["commands"]
    for i in range(20):
        b.qp.post_recv(RecvWR(wr_id=i, num_sge=1, sg=[SGE(b.mr.buf, 64, b.mr.lkey)]))
        a.qp.post_send(SendWR(wr_id=i, opcode=e.IBV_WR_SEND, num_sge=1,
                              sg=[SGE(a.mr.buf, 64, a.mr.lkey)]))
        wr = SendWR(wr_id=i, opcode=e.IBV_WR_RDMA_READ, num_sge=1,
                    sg=[SGE(a.mr.buf + 4096, 64, a.mr.lkey)])
        wr.set_wr_rdma(b.mr.rkey, b.mr.buf)
        a.qp.post_send(wr)
        wait(a, 2)
        wait(b, 1)
    assert (a.ctx.uverbs_commands, b.ctx.uverbs_commands) == before
    assert w.nics["a"].commands.counters["commands"] == cmds_hw  # no mailbox command either
    assert w.nics["a"].counters()["sched.doorbells"] >= 40  # the doorbells were MMIO writes


def test_control_path_goes_through_uverbs():
    w, a, b = pair()
    n = a.ctx.uverbs_commands
    mr = MR(a.pd, 10000, e.IBV_ACCESS_LOCAL_WRITE)
    assert a.ctx.uverbs_commands == n + 1
    mr.close()
    assert a.ctx.uverbs_commands == n + 2


def test_reg_mr_pins_pages_and_programs_mpt_and_mtt():
    w, a, b = pair()
    drv = a.ctx.file.dev.hw
    va = a.ctx.alloc(3 * 4096) + 100
    mr = MR(a.pd, 2 * 4096, e.IBV_ACCESS_LOCAL_WRITE, address=va)
    hwmr = a.ctx.file.uctx.objects[mr.handle].hw
    # 8192 bytes from offset 100 span three pages; each is pinned and in the page list.
    assert len(hwmr.pages) == 3
    assert hwmr.pages == [a.ctx.aspace.translate(va - 100 + i * 4096) for i in range(3)]
    mem = w.hosts["a"].mem
    assert all(mem.pins.get(pa >> 12) == 1 for pa in hwmr.pages)
    # The MPT entry in the NIC's table in host memory is what the driver computed.
    raw = w.hosts["a"].mem.read(drv.mpt_pa + (mr.lkey >> 8) * MPT_SIZE, MPT_SIZE)
    mpt = Mpt.unpack(raw)
    assert (mpt.key, mpt.start, mpt.length, mpt.flags) == (mr.lkey, va, 8192, MptFlags.VALID)
    pas = struct.unpack("<3Q", w.hosts["a"].mem.read(drv.mtt_pa + mpt.mtt_index * 8, 24))
    assert list(pas) == hwmr.pages
    mr.close()
    assert Mpt.unpack(w.hosts["a"].mem.read(drv.mpt_pa + (mr.lkey >> 8) * MPT_SIZE,
                                            MPT_SIZE)).flags == 0
    assert not any(mem.is_pinned(pa) for pa in hwmr.pages)


def test_closing_a_context_leaves_no_working_qp_or_key():
    w, a, b = pair()
    rkey, qpn, addr = b.mr.rkey, b.qp.qp_num, b.mr.buf
    nic_b = w.nics["b"]
    assert qpn in nic_b.qps
    b.ctx.close()  # process exit: ib_core destroys QP, MR, CQ, PD
    assert qpn not in nic_b.qps and not nic_b.cq.cqs
    assert not b.ctx.file.uctx.objects
    # A packet for the dead QP is dropped and counted.
    wr = SendWR(opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(a.mr.buf, 8, a.mr.lkey)])
    wr.set_wr_rdma(rkey, addr)
    a.qp.post_send(wr)
    a.ctx.host.spend(20_000)
    assert nic_b.counters()["rx.unknown_qpn"] == 1


def test_stale_rkey_is_refused_after_dereg():
    w, a, b = pair()
    stale = b.mr.rkey
    buf = b.mr.buf
    b.mr.close()
    new = MR(b.pd, 1 << 16, 0xF)  # may reuse memory, never the key
    assert new.rkey != stale
    wr = SendWR(opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(a.mr.buf, 8, a.mr.lkey)])
    wr.set_wr_rdma(stale, buf)
    a.qp.post_send(wr)
    assert wait(a)[0].status == e.IBV_WC_REM_ACCESS_ERR


def test_qpns_are_not_reused_at_once():
    w, a, b = pair()
    from nicsim.driver.user.verbs import QP, QPInitAttr

    seen = set()
    for _ in range(10):
        qp = QP(a.pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=a.cq, rcq=a.cq))
        assert qp.qp_num not in seen
        seen.add(qp.qp_num)
        qp.close()


def test_mmio_read_does_not_pass_posted_writes():
    """PCIe ordering: a register read issued after a posted write sees that write, even
    when the downstream link is congested (the mailbox protocol relies on it)."""
    from nicsim.hwif import Reg

    w, a, b = pair()
    bar = w.hosts["a"].functions["0000:01:00.0"].bar
    pcie = w.nics["a"].pcie
    pcie.down_free = w.env.now + 50_000  # 50 us of read completions queued downstream
    bar.write64(Reg.CMD_MOD, 0x1234)
    assert bar.read64(Reg.CMD_MOD) == 0x1234
    # And the driver's commands stay correct under that congestion.
    pcie.down_free = w.env.now + 50_000
    assert a.qp.query()[0].qp_state == 3  # RTS, read back through the mailbox
