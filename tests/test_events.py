"""Completion channels and asynchronous events: the NIC writes EQEs into the event queue in
host memory and raises its MSI-X write; the kernel's handler hands them to the channel of the
CQ or to the process's async event file (IBA 11.4.2.2, 11.6.3)."""

from __future__ import annotations

import errno

import pytest
from nicsim.driver import enums as e
from nicsim.driver.abi import DestroyCompChannel, UverbsError
from nicsim.driver.user.errors import PyverbsRDMAError
from nicsim.driver.user.verbs import (
    CQ,
    MR,
    PD,
    QP,
    SGE,
    CompChannel,
    Context,
    QPCap,
    QPInitAttr,
    RecvWR,
    SendWR,
)

from nicsim.hwif import EQE_SIZE, Eqe, EqeType
from nicsim.workloads.endpoint import ALL_ACCESS, Side, connect, make_side
from nicsim.world import World


def _event_side(w: World, cqe: int = 16) -> tuple[Side, CompChannel]:
    ctx = Context("nsnic0", host=w.hosts["b"])
    pd = PD(ctx)
    ch = CompChannel(ctx)
    cq = CQ(ctx, cqe, None, ch)
    qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=QPCap(8, 8, 1, 1, 0),
                           sq_sig_all=0))
    return Side(ctx, pd, cq, qp, MR(pd, 4096, ALL_ACCESS)), ch


def _setup(cqe: int = 16) -> tuple[World, Side, Side, CompChannel]:
    w = World.two_hosts(seed=0)
    a = make_side(w, "a")
    b, ch = _event_side(w, cqe)
    connect(a, b)
    connect(b, a)
    return w, a, b, ch


def _send(a: Side, data: bytes, flags: int = 0) -> None:
    a.mr.write(data, len(data))
    a.qp.post_send(SendWR(7, e.IBV_WR_SEND, 1, sg=[SGE(a.mr.buf, len(data), a.mr.lkey)],
                          send_flags=flags))


def _eqes(b: Side) -> list[Eqe]:
    hw = b.ctx.file.dev.hw
    eq = b.ctx.file.dev.events.eq
    assert eq is not None
    raw = hw.host.mem.read(eq.ring_pa, EQE_SIZE * eq.ci)
    return [Eqe.unpack(raw, i * EQE_SIZE) for i in range(eq.ci)]


def test_armed_cq_gets_one_event_after_its_cqe_lands() -> None:
    w, a, b, ch = _setup()
    b.qp.post_recv(RecvWR(1, 1, [SGE(b.mr.buf, 64, b.mr.lkey)]))
    b.cq.req_notify()
    _send(a, b"event me")
    ch.get_cq_event(b.cq)
    assert b.cq.num_events == 1
    # The event follows the CQE: polling now finds the completion and the bytes.
    n, wcs = b.cq.poll()
    assert n == 1 and wcs[0].status == e.IBV_WC_SUCCESS and wcs[0].byte_len == 8
    assert b.mr.read(8) == b"event me"
    # The EQE in host memory names the CQ; one interrupt woke the process.
    assert [(x.type, x.obj) for x in _eqes(b)] == [(EqeType.COMPLETION, b.cq.cqn)]
    assert b.ctx.file.dev.events.interrupts == 1
    assert w.nics["b"].eq.counters["interrupts"] == 1
    assert w.nics["b"].eq.counters["eqes"] == 1
    b.cq.ack_events(1)
    assert b.cq.num_events == 0


def test_unarmed_cq_gives_no_event_and_rearm_is_needed() -> None:
    w, a, b, ch = _setup()
    for i in range(2):
        b.qp.post_recv(RecvWR(i, 1, [SGE(b.mr.buf, 64, b.mr.lkey)]))
    _send(a, b"one")  # not armed: a CQE, no event
    w.hosts["a"].spend(20_000)
    assert b.cq.poll()[0] == 1
    with pytest.raises(PyverbsRDMAError) as ei:
        ch.get_cq_event(b.cq)
    assert ei.value.error_code == errno.ETIMEDOUT
    b.cq.req_notify()
    _send(a, b"two")
    ch.get_cq_event(b.cq)
    assert b.cq.poll()[0] == 1
    assert [x.type for x in _eqes(b)] == [EqeType.COMPLETION]


def test_solicited_only_waits_for_a_solicited_send() -> None:
    w, a, b, ch = _setup()
    for i in range(2):
        b.qp.post_recv(RecvWR(i, 1, [SGE(b.mr.buf + 64 * i, 64, b.mr.lkey)]))
    b.cq.req_notify(solicited_only=True)
    _send(a, b"plain")
    w.hosts["a"].spend(20_000)
    assert b.cq.poll()[0] == 1  # completed, but no event yet
    assert b.ctx.file.dev.events.eq is not None and _eqes(b) == []
    _send(a, b"urgent", e.IBV_SEND_SOLICITED)
    ch.get_cq_event(b.cq)
    n, wcs = b.cq.poll()
    assert n == 1 and wcs[0].wr_id == 1 and b.mr.read(6, 64) == b"urgent"


def test_cq_overrun_is_an_async_cq_err_event() -> None:
    w = World.two_hosts(seed=0)
    a = make_side(w, "a")
    ctx = Context("nsnic0", host=w.hosts["b"])
    pd = PD(ctx)
    # The device's event queue exists from the first request for events (a channel here).
    CompChannel(ctx)
    cq = CQ(ctx, 2)
    qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=QPCap(8, 8, 1, 1, 0)))
    b = Side(ctx, pd, cq, qp, MR(pd, 4096, ALL_ACCESS))
    connect(a, b)
    connect(b, a)
    for i in range(3):
        qp.post_recv(RecvWR(i, 1, [SGE(b.mr.buf, 64, b.mr.lkey)]))
        _send(a, b"x")
    ev = ctx.get_async_event()
    ev.ack()
    assert ev.event_type == e.IBV_EVENT_CQ_ERR and ev.element is cq


def test_channel_close_closes_its_cqs_and_kernel_refuses_busy_channel() -> None:
    _w, _a, b, ch = _setup()
    with pytest.raises(UverbsError) as ei:
        b.ctx.file.write(DestroyCompChannel(ch.handle))
    assert ei.value.errno == errno.EBUSY
    ch.close()
    assert b.cq.closed and b.qp.closed and ch.closed
    ch.close()  # idempotent
