"""Memory safety across deregistration, destruction and page reuse.

The rule every test here holds the NIC and the driver to: nothing may ever land in, or be read
from, memory that is not part of a live registration at the moment of access. After
`mr.close()` and `munmap` the pages go back to the host's free list (LIFO), so the next
allocation on that host, in another process, gets exactly those pages: any DMA that still
uses the old translation is then a write into (or a read out of) a stranger's memory.

Destroyed and closed verbs objects must refuse to be used (PyverbsUserError), close() is
idempotent, and a destroyed QP's rings are unmapped, so a stale object cannot scribble on
rings the kernel has handed to another process.
"""

from __future__ import annotations

import errno
from functools import partial

import pytest
from nicsim.driver import enums as e
from nicsim.driver.abi import UverbsError
from nicsim.driver.user.verbs import (
    MR,
    SGE,
    Context,
    PyverbsUserError,
    RecvWR,
    SendWR,
)

from nicsim.fabric.faults import FaultConfig
from nicsim.host.memory import MemoryError_
from nicsim.hwif import UarReg
from nicsim.testing.rdma import ALL_ACCESS, Side, connect, drain, make_side, pair, settle, wait
from nicsim.wire import Opcode, parse, reth
from nicsim.wire.packet import Unbuilt
from nicsim.world import World

KIB = 1 << 10
BIG = 512 * KIB
MINE = b"\xab"  # the requester's data
THEIRS = b"\x11"  # what the responder's MR holds before the attack
STRANGER = b"\xee"  # the other process's pattern
# A run of the stranger's pattern long enough that it cannot be a coincidence in a frame.
STRANGER_RUN = STRANGER * 64


class WireTap:
    """Records every frame the link delivers (both directions)."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []

    def write(self, frame: bytes, t_ns: int) -> None:
        self.frames.append(bytes(frame))

    def carrying(self, needle: bytes) -> int:
        return sum(1 for f in self.frames if needle in f)


def tap(w: World) -> WireTap:
    t = WireTap()
    w.links[0].taps.append(t)
    return t


def stranger(w: World, host: str) -> Context:
    """Another process on `host`, opened before the attack so that opening it costs no time
    in the middle of one."""
    return Context("nsnic0", host=w.hosts[host])


def free_and_reuse(owner: Context, mr: MR, other: Context, n: int) -> int:
    """Deregister `mr`, unmap its buffer (its pages go back to the free list) and let `other`
    allocate the same number of pages and fill them with its own pattern. Only dereg spends
    simulated time; from munmap on nothing runs until the pattern is in place, so every byte
    that differs from the pattern later was written after the pages changed hands."""
    mr.close()
    owner.aspace.munmap(mr.buf, n)
    va = other.alloc(n)
    other.aspace.write(va, STRANGER * n)
    return va


def changed(other: Context, va: int, n: int) -> int:
    """Bytes of the other process's buffer that are no longer its pattern."""
    data = other.aspace.read(va, n)
    return n - data.count(STRANGER[0])


def step_until(w: World, cond, limit_ns: float = 50e6) -> None:  # noqa: ANN001
    deadline = w.env.now + limit_ns
    while not cond():
        assert w.env.now < deadline, "the transfer never got that far"
        w.env.step()


def counter(w: World, host: str, name: str) -> int:
    return w.nics[host].counters().get(name, 0)


def _rdma(side: Side, opcode: int, length: int, rkey: int, raddr: int, wr_id: int = 1,
          laddr: int | None = None, lkey: int | None = None) -> None:
    wr = SendWR(wr_id=wr_id, opcode=opcode, num_sge=1,
                sg=[SGE(side.mr.buf if laddr is None else laddr, length,
                        side.mr.lkey if lkey is None else lkey)])
    wr.set_wr_rdma(rkey, raddr)
    side.qp.post_send(wr)


# -- 1. DMA after deregistration ------------------------------------------------------------


def test_remote_write_into_freed_and_reused_mr():
    """1a: a WRITE whose target MR is deregistered mid-message must not place the rest of
    the message in the pages' next owner; the requester sees a remote access error."""
    w, a, b = pair(mr_len=BIG)
    other = stranger(w, "b")
    a.mr.write(MINE * BIG, BIG)
    _rdma(a, e.IBV_WR_RDMA_WRITE, BIG, b.mr.rkey, b.mr.buf)
    step_until(w, lambda: counter(w, "b", "responder.write_packets") >= 8)
    va = free_and_reuse(b.ctx, b.mr, other, BIG)
    (wc,) = wait(a)
    settle(w)
    assert changed(other, va, BIG) == 0
    assert wc.status == e.IBV_WC_REM_ACCESS_ERR
    assert b.qp.query()[0].qp_state == e.IBV_QPS_ERR


def test_remote_read_of_freed_and_reused_mr():
    """1b: a READ whose source MR is deregistered mid-response must not send the pages'
    next owner's data: not on the wire, not into the reader's buffer."""
    w, a, b = pair(mr_len=BIG)
    t = tap(w)
    other = stranger(w, "b")
    b.mr.write(THEIRS * BIG, BIG)
    _rdma(a, e.IBV_WR_RDMA_READ, BIG, b.mr.rkey, b.mr.buf)
    step_until(w, lambda: counter(w, "b", "responder.read_response_packets") >= 8)
    free_and_reuse(b.ctx, b.mr, other, BIG)
    (wc,) = wait(a)
    settle(w)
    assert t.carrying(STRANGER_RUN) == 0, "the other process's memory went on the wire"
    assert STRANGER_RUN not in a.mr.read(BIG)
    assert wc.status == e.IBV_WC_REM_ACCESS_ERR


def test_read_destination_freed_and_reused_mid_read():
    """1c: the READ responses still to come must not be placed in the requester's own
    destination MR once it is deregistered and its pages belong to another process."""
    w, a, b = pair(mr_len=BIG)
    other = stranger(w, "a")
    b.mr.write(THEIRS * BIG, BIG)
    _rdma(a, e.IBV_WR_RDMA_READ, BIG, b.mr.rkey, b.mr.buf)
    step_until(w, lambda: counter(w, "a", "completer.read_response_packets") >= 8)
    va = free_and_reuse(a.ctx, a.mr, other, BIG)
    (wc,) = wait(a)
    settle(w)
    assert changed(other, va, BIG) == 0
    assert wc.status == e.IBV_WC_LOC_PROT_ERR


@pytest.mark.parametrize("unbuilt", [False, True], ids=["frames", "unbuilt"])
def test_forged_write_continuation_after_dereg(unbuilt):
    """1d: a WRITE FIRST checked against a live MR gives no licence to the MIDDLE and LAST
    packets once the MR is gone: they are refused with a remote access NAK (0x62), also when
    they come as the receive fast path's Unbuilt packets (nicsim.wire.packet)."""
    w, a, b = pair()
    t = tap(w)
    other = stranger(w, "b")
    n = b.mr.length
    nb = w.nics["b"]
    qb = nb.qps[b.qp.qp_num]
    bld = w.nics["a"].qps[a.qp.qp_num].builder
    nb.receive(bld.build(Opcode.RC_RDMA_WRITE_FIRST, qb.qpn, qb.epsn,
                         reth(b.mr.buf, b.mr.rkey, 3 * KIB), MINE * KIB))
    naks = counter(w, "b", "responder.naks_sent")
    # No timing needed: the FIRST has been checked and placed before dereg returns.
    va = free_and_reuse(b.ctx, b.mr, other, n)
    make = partial(Unbuilt, bld) if unbuilt else bld.build
    nb.receive(make(Opcode.RC_RDMA_WRITE_MIDDLE, qb.qpn, qb.epsn, b"", MINE * KIB))
    nb.receive(make(Opcode.RC_RDMA_WRITE_LAST, qb.qpn, qb.epsn, b"", MINE * KIB, ackreq=True))
    settle(w)
    assert changed(other, va, n) == 0
    assert counter(w, "b", "responder.naks_sent") > naks
    syndromes = [p.aeth_syndrome for p in map(parse, t.frames)
                 if p.opcode == Opcode.RC_ACKNOWLEDGE and p.dqpn == a.qp.qp_num]
    assert 0x62 in syndromes, f"b answered with AETH syndromes {syndromes}"
    assert b.qp.query()[0].qp_state == e.IBV_QPS_ERR


@pytest.mark.parametrize("opcode", [e.IBV_WR_RDMA_WRITE, e.IBV_WR_SEND], ids=["write", "send"])
def test_source_freed_and_reused_mid_message(opcode):
    """1e: the requester must not read the rest of a WRITE's (or SEND's) payload out of a
    source MR that was deregistered and whose pages now hold another process's data."""
    w, a, b = pair(mr_len=BIG)
    t = tap(w)
    other = stranger(w, "a")
    a.mr.write(MINE * BIG, BIG)
    b.mr.write(THEIRS * BIG, BIG)
    if opcode == e.IBV_WR_SEND:
        b.qp.post_recv(RecvWR(wr_id=5, num_sge=1, sg=[SGE(b.mr.buf, BIG, b.mr.lkey)]))
    _rdma(a, opcode, BIG, b.mr.rkey, b.mr.buf)
    step_until(w, lambda: counter(w, "b", "responder.bytes_placed") >= 8 * KIB)
    free_and_reuse(a.ctx, a.mr, other, BIG)
    (wc,) = wait(a)
    settle(w)
    assert t.carrying(STRANGER_RUN) == 0, "the other process's memory went on the wire"
    assert STRANGER_RUN not in b.mr.read(BIG)
    assert wc.status == e.IBV_WC_LOC_PROT_ERR


def test_atomic_result_into_freed_and_reused_mr():
    """Sibling of 1c: an atomic's original value is written into the requester's buffer when
    the ATOMIC ACKNOWLEDGE arrives. Queued behind a long READ response, it arrives after the
    buffer's MR was deregistered and its page given to another process: it must not land."""
    w, a, b = pair(mr_len=BIG)
    other = stranger(w, "a")
    small = MR(a.pd, 4 * KIB, ALL_ACCESS)  # the last pages allocated: the first reused
    _rdma(a, e.IBV_WR_RDMA_READ, BIG, b.mr.rkey, b.mr.buf, wr_id=1)
    wr = SendWR(wr_id=2, opcode=e.IBV_WR_ATOMIC_FETCH_AND_ADD, num_sge=1,
                sg=[SGE(small.buf, 8, small.lkey)])
    wr.set_wr_atomic(b.mr.rkey, b.mr.buf, 1)
    wr.compare_add = 0x0101010101010101  # b's memory is zero: orig is 0, b ends up 0x01s
    a.qp.post_send(wr)
    step_until(w, lambda: counter(w, "b", "responder.atomics") >= 1)
    va = free_and_reuse(a.ctx, small, other, 4 * KIB)
    wcs = {c.wr_id: c.status for c in wait(a, 2)}
    settle(w)
    assert changed(other, va, 4 * KIB) == 0
    assert wcs == {1: e.IBV_WC_SUCCESS, 2: e.IBV_WC_LOC_PROT_ERR}


def test_send_into_receive_buffer_freed_mid_message():
    """1f: the rest of a SEND must not be scattered into a receive buffer whose MR was
    deregistered mid-message; the receive fails LOC_PROT_ERR, the sender REM_OP_ERR."""
    w, a, b = pair(mr_len=BIG)
    other = stranger(w, "b")
    a.mr.write(MINE * BIG, BIG)
    b.qp.post_recv(RecvWR(wr_id=5, num_sge=1, sg=[SGE(b.mr.buf, BIG, b.mr.lkey)]))
    a.qp.post_send(SendWR(wr_id=6, opcode=e.IBV_WR_SEND, num_sge=1,
                          sg=[SGE(a.mr.buf, BIG, a.mr.lkey)]))
    step_until(w, lambda: counter(w, "b", "responder.send_packets") >= 8)
    va = free_and_reuse(b.ctx, b.mr, other, BIG)
    (swc,) = wait(a)
    (rwc,) = wait(b)
    settle(w)
    assert changed(other, va, BIG) == 0
    assert (rwc.wr_id, rwc.status) == (5, e.IBV_WC_LOC_PROT_ERR)
    assert (swc.wr_id, swc.status) == (6, e.IBV_WC_REM_OP_ERR)


@pytest.mark.parametrize("seed", [1, 2, 4])
def test_go_back_n_resend_after_source_freed(seed):
    """1g: a go-back-N resend re-reads the payload from host memory. If the source MR was
    deregistered (and its pages reused) after the first transmission, the resend must not
    send what the pages now hold."""
    n = 128 * KIB
    w, a, b = pair(mr_len=n, faults=FaultConfig(loss=0.05, seed=seed), timeout=8)
    t = tap(w)
    other = stranger(w, "a")
    a.mr.write(MINE * n, n)
    b.mr.write(THEIRS * n, n)
    _rdma(a, e.IBV_WR_RDMA_WRITE, n, b.mr.rkey, b.mr.buf)
    # Wait until as many data frames went out as the message has packets: from here on
    # everything a sends is a resend (with these seeds, lost packets and ACKs make it
    # resend after the pages changed hands, by NAK and by timeout).
    step_until(w, lambda: counter(w, "a", "port.tx_frames") >= n // KIB)
    free_and_reuse(a.ctx, a.mr, other, n)
    (wc,) = wait(a, limit_ns=1e9)
    settle(w)
    assert t.carrying(STRANGER_RUN) == 0, "a resend carried the other process's memory"
    assert STRANGER_RUN not in b.mr.read(n)
    assert wc.status == e.IBV_WC_LOC_PROT_ERR


# -- 2. destroyed QPs and CQs, closed contexts ----------------------------------------------


def _write_wr(a: Side, b: Side, wr_id: int = 1, n: int = 64) -> SendWR:
    wr = SendWR(wr_id=wr_id, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1,
                sg=[SGE(a.mr.buf, n, a.mr.lkey)])
    wr.set_wr_rdma(b.mr.rkey, b.mr.buf)
    return wr


def _recv_wr(s: Side, wr_id: int = 1) -> RecvWR:
    return RecvWR(wr_id=wr_id, num_sge=1, sg=[SGE(s.mr.buf, 64, s.mr.lkey)])


def test_post_send_on_destroyed_qp_is_a_user_error():
    w, a, b = pair()
    a.qp.close()
    with pytest.raises(PyverbsUserError):
        a.qp.post_send(_write_wr(a, b))


def test_post_recv_on_destroyed_qp_is_a_user_error():
    w, a, b = pair()
    a.qp.close()
    with pytest.raises(PyverbsUserError):
        a.qp.post_recv(_recv_wr(a))


def test_poll_on_destroyed_cq_is_a_user_error():
    w, a, b = pair()
    a.qp.close()
    a.cq.close()
    with pytest.raises(PyverbsUserError):
        a.cq.poll(1)


@pytest.mark.parametrize("use", ["post_send", "post_recv", "poll", "mr_read", "mr_write"])
def test_data_path_after_context_close_is_a_user_error(use):
    """Process teardown destroyed every object: the objects the program still holds must
    refuse to touch the rings and buffers the kernel has reclaimed."""
    w, a, b = pair()
    a.ctx.close()
    calls = {
        "post_send": lambda: a.qp.post_send(_write_wr(a, b)),
        "post_recv": lambda: a.qp.post_recv(_recv_wr(a)),
        "poll": lambda: a.cq.poll(1),
        "mr_read": lambda: a.mr.read(8),
        "mr_write": lambda: a.mr.write(b"x" * 8, 8),
    }
    with pytest.raises(PyverbsUserError):
        calls[use]()


def test_close_after_context_close_raises_nothing():
    """Closing children after their context (which already destroyed them) and closing the
    context twice are no-ops, as pyverbs' close() is."""
    w, a, b = pair()
    a.ctx.close()
    a.qp.close()
    a.mr.close()
    a.cq.close()
    a.pd.close()
    a.ctx.close()


@pytest.mark.parametrize("ring", ["sq", "rq"])
def test_destroyed_qp_rings_are_unmapped(ring):
    """After destroy_qp the kernel frees the ring pages: the process must lose its mapping of
    them, or it keeps a window onto whatever the kernel puts there next."""
    w, a, b = pair()
    va = getattr(a.qp._p.r, f"{ring}_va")
    a.ctx.aspace.write(va, b"x")  # mapped while the QP lives
    a.qp.close()
    with pytest.raises(MemoryError_):
        a.ctx.aspace.write(va, b"x")


def test_destroyed_cq_ring_is_unmapped():
    w, a, b = pair()
    r = a.cq._p.r
    a.qp.close()
    a.cq.close()
    for va in (r.ring_va, r.dbrec_va):
        with pytest.raises(MemoryError_):
            a.ctx.aspace.write(va, b"x")


def test_stale_qp_cannot_corrupt_the_rings_of_the_next_process():
    """A destroyed QP's SQ and RQ rings go back to the kernel, which hands them to the next
    process's CQ ring and SQ ring. Posting on the stale QP object must raise, and the next
    process's traffic must complete exactly as it was posted."""
    w = World.two_hosts()
    old, peer = make_side(w, "a"), make_side(w, "b")
    connect(old, peer)
    connect(peer, old)
    old.qp.close()
    # Another process on a: its CQ ring and SQ ring are the pages the old QP's rings were.
    x, y = make_side(w, "a"), make_side(w, "b")
    connect(x, y)
    connect(y, x)
    refused = 0
    for i in range(16):
        x.qp.post_send(_write_wr(x, y, wr_id=100 + i))
        # Stale posts right behind it, before the NIC fetches x's WQE. compare_add's top
        # byte lands on a CQE's owner byte: a forged completion if it reaches x's CQ ring.
        bad = _write_wr(old, peer, wr_id=0xBAD)
        bad.compare_add = 1 << 56
        for post in (lambda: old.qp.post_send(bad),  # noqa: B023
                     lambda: old.qp.post_recv(_recv_wr(old, wr_id=0xBAD))):
            try:
                post()
            except PyverbsUserError:
                refused += 1
    got = [(c.wr_id, c.status, c.qp_num) for c in drain(x)]
    assert got == [(100 + i, e.IBV_WC_SUCCESS, x.qp.qp_num) for i in range(16)]
    assert refused == 32


def test_another_process_cannot_ring_this_qps_doorbells():
    """A sibling of the ring holes: doorbells carry a QPN, so a process that could ring any
    QP's doorbell could move another process's producer index and make the NIC execute stale
    WQEs from its ring (or consume stale receive WQEs). Each process has its own doorbell page
    (UAR) and the NIC takes a QP's or CQ's doorbell only through its owner's page."""
    w = World.two_hosts()
    y, peer = make_side(w, "a"), make_side(w, "b")
    connect(y, peer)
    connect(peer, y)
    for i in range(4):
        y.qp.post_send(_write_wr(y, peer, wr_id=i))
    assert [c.status for c in drain(y)] == [e.IBV_WC_SUCCESS] * 4
    x = make_side(w, "a")  # the attacker, another process on the same host
    assert x.ctx.file.doorbells.uar != y.ctx.file.doorbells.uar
    nic, qpc = w.nics["a"], w.nics["a"].qps[y.qp.qp_num]
    sent = counter(w, "a", "requester.data_packets")
    db = x.ctx.file.doorbells
    # Wrap the ring: 64 "new" WQEs, the four old ones among them.
    db.write64(UarReg.SQ_DB, y.qp.qp_num << 32 | (qpc.sq_pi + 64) & 0xFFFF)
    db.write64(UarReg.RQ_DB, y.qp.qp_num << 32 | (qpc.rq_pi + 64) & 0xFFFF)
    db.write64(UarReg.CQ_ARM, y.cq.cqn << 32)
    w.hosts["a"].spend(100_000)
    assert counter(w, "a", "sched.doorbell_bad_target") == 3
    assert (qpc.sq_pending, qpc.rq_pi) == (0, 0) and not nic.cq.cqs[y.cq.cqn].armed
    assert counter(w, "a", "requester.data_packets") == sent
    assert drain(y) == []
    # Its own doorbells still work.
    y.qp.post_send(_write_wr(y, peer, wr_id=9))
    assert [(c.wr_id, c.status) for c in drain(y)] == [(9, e.IBV_WC_SUCCESS)]


@pytest.mark.parametrize("op", ["read", "write"])
def test_destroy_qp_with_work_in_flight_then_reuse_pages(op):
    """Destroying a QP with 32 WRs queued and in flight, then freeing the MR they use:
    nothing the NIC still does for the dead QP may touch the pages' next owner (READ
    responses placed into them, WRITE payload read out of them)."""
    w, a, b = pair(mr_len=BIG)
    t = tap(w)
    other = stranger(w, "a")
    a.mr.write(MINE * BIG, BIG)
    b.mr.write(THEIRS * BIG, BIG)
    chunk = 16 * KIB
    opcode = e.IBV_WR_RDMA_READ if op == "read" else e.IBV_WR_RDMA_WRITE
    for i in range(BIG // chunk):
        _rdma(a, opcode, chunk, b.mr.rkey, b.mr.buf + i * chunk, wr_id=i,
              laddr=a.mr.buf + i * chunk)
    progress = "completer.read_response_packets" if op == "read" else "port.tx_frames"
    step_until(w, lambda: counter(w, "a", progress) >= 8)
    a.qp.close()
    va = free_and_reuse(a.ctx, a.mr, other, BIG)
    w.hosts["a"].spend(2e6)
    assert changed(other, va, BIG) == 0
    assert t.carrying(STRANGER_RUN) == 0


def test_doorbell_page_of_a_closed_context_is_unmapped():
    """Closing the device file gives its doorbell page back (to be reused by another process
    once out of quarantine): a store through the old mapping faults instead of ringing the
    next owner's queues."""
    w, a, b = pair()
    db = a.ctx.file.doorbells
    a.ctx.close()
    with pytest.raises(UverbsError) as ei:
        db.write64(UarReg.SQ_DB, b.qp.qp_num << 32 | 1)
    assert ei.value.errno == errno.EFAULT
