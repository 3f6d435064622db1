"""Protection across time: deregistration and destroy raced against traffic, at random moments.

Each test frees memory the NIC is using while transfers run, hands the pages to other
processes, and checks that nothing of the transfers reaches them: their bytes are unchanged,
the transfer ends with the status hardware reports, and the DMA audit (tests/conftest.py)
saw no access outside a live registration. tests/test_security_memory.py has one regression
test per hole the independent tester found; these are the races around them.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
from nicsim.driver import enums as e
from nicsim.driver.user.verbs import MR, PD, SGE, RecvWR, SendWR

from nicsim.fabric.faults import FaultConfig
from nicsim.testing.dma_audit import DmaAudit
from nicsim.testing.races import Bystander, step_until
from nicsim.testing.rdma import ALL_ACCESS, Side, connect, make_side, pair, settle, wait
from nicsim.world import World

KB = 1024


def _free(side: Side, mr: MR) -> set[int]:
    """Deregister `mr` and free its buffer (pyverbs' MR.close does both; the munmap says so
    explicitly): its pages."""
    pages = {side.ctx.aspace.translate(mr.buf + i) >> 12 for i in range(0, mr.length, 4096)}
    mr.close()
    side.ctx.aspace.munmap(mr.buf, mr.length)
    return pages


def _audited(audits: list[DmaAudit]) -> None:
    """The audit ran (the conftest fixture fails the test on any violation)."""
    assert audits and all(a.checked for a in audits)


@pytest.mark.parametrize("after,status", [(1, e.IBV_WC_REM_ACCESS_ERR),
                                          (64, e.IBV_WC_REM_ACCESS_ERR),
                                          (510, e.IBV_WC_SUCCESS)])
def test_remote_write_target_freed_mid_message(after, status, dma_audits):
    """A 512 KiB WRITE whose target MR is deregistered and freed after `after` of its 512
    packets, the pages going to another process (tests/test_security_memory.py has the
    tester's case, at 8). Near the end, the last packets land while the deregistration
    command is still on its way to the NIC: the WRITE completes, all of it inside the live
    registration."""
    w, a, b = pair(mr_len=512 * KB)
    a.mr.write(b"\x11" * 512 * KB, 512 * KB)
    wr = SendWR(wr_id=1, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1,
                sg=[SGE(a.mr.buf, 512 * KB, a.mr.lkey)])
    wr.set_wr_rdma(b.mr.rkey, b.mr.buf)
    a.qp.post_send(wr)
    nb = w.nics["b"]
    step_until(w, lambda: nb.responder.counters["write_packets"] >= after)
    freed = _free(b, b.mr)
    other = Bystander(w, "b", 512 * KB)
    assert other.pages & freed, "the bystander should get the freed pages"
    (wc,) = wait(a)
    settle(w)
    assert other.intact()
    assert wc.status == status
    failed = status != e.IBV_WC_SUCCESS
    assert (b.qp.query()[0].qp_state == e.IBV_QPS_ERR) == failed
    assert nb.counters()["responder.revoked"] == failed
    _audited(dma_audits)


def test_context_close_mid_traffic_on_both_sides(dma_audits):
    """Process exit on both ends while a WRITE and a READ are in flight."""
    w, a, b = pair(mr_len=256 * KB)
    for op in (e.IBV_WR_RDMA_WRITE, e.IBV_WR_RDMA_READ):
        wr = SendWR(opcode=op, num_sge=1, sg=[SGE(a.mr.buf, 128 * KB, a.mr.lkey)],
                    send_flags=e.IBV_SEND_SIGNALED)
        wr.set_wr_rdma(b.mr.rkey, b.mr.buf)
        a.qp.post_send(wr)
    nb = w.nics["b"]
    step_until(w, lambda: nb.responder.counters["write_packets"] >= 20)
    b.ctx.close()
    ob = Bystander(w, "b", 256 * KB)
    wcs = wait(a, 2, limit_ns=2e9)
    assert wcs[0].status != e.IBV_WC_SUCCESS
    a.ctx.close()
    oa = Bystander(w, "a", 256 * KB)
    settle(w, 100_000)
    assert ob.intact() and oa.intact()
    _audited(dma_audits)


@pytest.mark.parametrize("seed", range(12))
def test_random_frees_under_random_traffic(seed, dma_audits):
    """A soak: several QP pairs run a random mix of WRITE, READ, SEND, WRITE with immediate
    and atomics while MRs, QPs and whole contexts are freed at random moments, and other
    processes grab the pages. Whatever completes, no access leaves a live registration and
    no bystander's byte changes."""
    rng = random.Random(seed)
    w = World.two_hosts(seed=seed, faults=FaultConfig(loss=0.02, seed=seed) if seed % 3 == 0
                        else None, mem_size=32 << 20)
    pairs = []
    for _ in range(3):
        x, y = make_side(w, "a", 64 * KB), make_side(w, "b", 64 * KB)
        connect(x, y)
        connect(y, x)
        pairs.append((x, y))
    ops = [e.IBV_WR_RDMA_WRITE, e.IBV_WR_RDMA_READ, e.IBV_WR_SEND,
           e.IBV_WR_RDMA_WRITE_WITH_IMM, e.IBV_WR_ATOMIC_FETCH_AND_ADD]
    bystanders: list[Bystander] = []
    for x, y in pairs:
        for _ in range(8):
            y.qp.post_recv(RecvWR(num_sge=1, sg=[SGE(y.mr.buf, 64 * KB, y.mr.lkey)]))
        for _ in range(rng.randint(4, 12)):
            op = rng.choice(ops)
            n = 8 if op == e.IBV_WR_ATOMIC_FETCH_AND_ADD else rng.randint(1, 64 * KB)
            wr = SendWR(opcode=op, num_sge=1, sg=[SGE(x.mr.buf, n, x.mr.lkey)],
                        send_flags=e.IBV_SEND_SIGNALED)
            if op == e.IBV_WR_ATOMIC_FETCH_AND_ADD:
                wr.set_wr_atomic(y.mr.rkey, y.mr.buf, 1)
            else:
                wr.set_wr_rdma(y.mr.rkey, y.mr.buf)
            x.qp.post_send(wr)
    victims: list[Callable[[], None]] = []
    for x, y in pairs:
        victims += [x.mr.close, y.mr.close, x.qp.close, y.qp.close, x.ctx.close, y.ctx.close]
    rng.shuffle(victims)
    for kill in victims[:rng.randint(2, 8)]:
        w.hosts["a"].spend(rng.uniform(100, 20_000))
        kill()
        bystanders.append(Bystander(w, rng.choice("ab"), rng.choice([4, 16, 64]) * KB))
    w.hosts["a"].spend(200_000)
    assert all(by.intact() for by in bystanders)
    _audited(dma_audits)


def test_the_audit_sees_a_stale_translation(dma_audits):
    """The oracle itself: a page list used after deregistration is reported, and so is a
    page freed under a device write still on its way."""
    w, a, b = pair()
    (audit,) = dma_audits
    pa = a.ctx.aspace.translate(a.mr.buf)
    a.mr.close()
    w.nics["a"].dma.read(pa, 64)
    assert "no live registration" in audit.violations[0]
    mem = w.hosts["a"].mem
    page = a.ctx.alloc(4096)
    mem.post(w.env.now + 1000, [(a.ctx.aspace.translate(page), b"late")])
    a.ctx.aspace.munmap(page, 4096)
    assert "still landing" in audit.violations[-1]
    audit.violations.clear()  # seen: the test is about the audit, not the NIC


def test_pd_of_another_process_is_no_way_in():
    """A sibling of the PD rule: a second process on the same host, its own PD, cannot use
    the first process's lkey through its own QP."""
    w, a, b = pair()
    x, y = make_side(w, "a"), make_side(w, "b")
    connect(x, y)
    connect(y, x)
    wr = SendWR(opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(a.mr.buf, 64, a.mr.lkey)],
                send_flags=e.IBV_SEND_SIGNALED)
    wr.set_wr_rdma(y.mr.rkey, y.mr.buf)
    x.qp.post_send(wr)
    assert wait(x)[0].status == e.IBV_WC_LOC_PROT_ERR
    assert MR(PD(x.ctx), 4096, ALL_ACCESS).lkey != a.mr.lkey


def test_request_in_the_invalidation_window_sees_the_invalid_key():
    """INVALIDATE_MPT zeroes the entry in host memory by a posted write, and the command
    completes only when it has landed. A request that arrives in between, with the entry out
    of the NIC's cache, must read the entry as the NIC itself left it (its own write in
    flight, PCIe ordering), not the stale valid one: the atomic is refused."""
    from nicsim.hwif import CmdOpcode, Reg, key_index
    from nicsim.wire import atomic_eth
    from nicsim.wire.opcodes import Opcode

    w, a, b = pair()
    nb = w.nics["b"]
    target = MR(b.pd, 4096, ALL_ACCESS)
    qb = nb.qps[b.qp.qp_num]
    bld = w.nics["a"].qps[a.qp.qp_num].builder
    revoked = nb.xlate.revocations
    # The driver's INVALIDATE_MPT, issued by hand so the world can be stopped inside it.
    bar = b.ctx.file.dev.hw.bar
    bar.write64(Reg.CMD_OPCODE, CmdOpcode.INVALIDATE_MPT)
    bar.write64(Reg.CMD_MOD, key_index(target.rkey))
    bar.write64(Reg.CMD_GO, 1)
    step_until(w, lambda: nb.xlate.revocations > revoked)
    assert nb.dma.mem.posted, "the zeroing write is still on its way"
    nb.receive(bld.build(Opcode.RC_FETCH_ADD, qb.qpn, qb.epsn,
                         atomic_eth(target.buf, target.rkey, 5, 0), ackreq=True))
    settle(w)
    c = nb.counters()
    assert (c["responder.atomics"], c["responder.naks_sent"]) == (1, 1)
    assert b.qp.query()[0].qp_state == e.IBV_QPS_ERR
