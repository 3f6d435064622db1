"""The connection manager against a hostile network (second protection round).

- Q_Keys with the high bit set are controlled (IBA 3.5.3, C3-32): an unprivileged process
  cannot give its UD QP the GSI's Q_Key and speak for the CM (ib_uverbs' modify_qp: EPERM
  without CAP_NET_RAW).
- Every CM message is checked against the connection it names: both communication IDs, the
  QPN, and the sender's GID (ib_cm's cm_acquire_id, cm_dreq_handler); what does not match is
  dropped and counted. Communication IDs are not sequential (ib_cm: a cyclic index XORed
  with a random operand).
- A malformed MAD of any kind is a counted drop, never an exception out of the MAD handler.
- A listener holds at most `backlog` connection requests its process has not taken (ucma's
  backlog); REQs beyond it are dropped without a REJ, so the active side retries.
"""

from __future__ import annotations

import contextlib
import errno
import struct
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nicsim.driver import enums as e
from nicsim.driver.cm_enums import rdma_cm_event_type as EV
from nicsim.driver.kernel.cm import mad as m
from nicsim.driver.kernel.cm.cma import CmState
from nicsim.driver.kernel.cm.gsi import ip_gid
from nicsim.driver.user.errors import PyverbsRDMAError
from nicsim.driver.user.process import Process, attach
from nicsim.driver.user.rdmacm import CMEvent
from nicsim.driver.user.verbs import CQ, PD, QP, Context, QPAttr, QPCap, QPInitAttr

from nicsim.exec.spec import WorldSpec
from nicsim.exec.world import devices
from nicsim.testing.cm import (
    PORT,
    Conn,
    cm_kernel,
    device_ip,
    dreq_mad,
    rdma_device,
    run_cm,
    send_mad,
    valid_mads,
)
from nicsim.testing.exec_world import attached_world
from nicsim.world import World


@pytest.fixture
def world() -> Iterator[World]:
    with attached_world(WorldSpec(hosts=3, mem_mib=128)) as w:
        yield w


# -- 6. controlled Q_Keys ---------------------------------------------------------------------


def _ud_qp(ctx: Context) -> QP:
    cq = CQ(ctx, 16)
    return QP(PD(ctx), QPInitAttr(qp_type=e.IBV_QPT_UD, scq=cq, rcq=cq,
                                  cap=QPCap(4, 4, 1, 1)))


def test_an_unprivileged_ud_qp_cannot_take_a_controlled_qkey(world: World) -> None:
    ctx = Context(rdma_device(world, "h2").name, host=world.hosts["h2"])
    qp = _ud_qp(ctx)
    with pytest.raises(PyverbsRDMAError) as err:
        qp.to_init(QPAttr(qkey=m.GSI_QKEY))
    assert err.value.error_code == errno.EPERM
    qp.to_init(QPAttr(qkey=0x1234))  # an ordinary Q_Key is fine
    with pytest.raises(PyverbsRDMAError) as err:
        qp.modify(QPAttr(qkey=0x80000000), e.IBV_QP_QKEY)
    assert err.value.error_code == errno.EPERM
    assert qp.query(e.IBV_QP_QKEY)[0].qkey == 0x1234


def test_a_privileged_process_may_set_one(world: World) -> None:
    p = Process(devices(world), cap_net_raw=True)
    attach(p)
    try:
        ctx = Context(rdma_device(world, "h2").name, host=world.hosts["h2"])
        qp = _ud_qp(ctx)
        qp.to_init(QPAttr(qkey=m.GSI_QKEY))
        assert qp.query(e.IBV_QP_QKEY)[0].qkey == m.GSI_QKEY
    finally:
        attach(Process(devices(world)))


# -- 7. a forged DREQ -------------------------------------------------------------------------


def test_a_forged_dreq_from_another_host_is_dropped(world: World) -> None:
    c = Conn(world)
    cli, srv = c.connect()
    k_cli, k_srv = cli._k, srv._k
    # The right comm IDs and QPN, from a third host: the GID is not the connection's.
    send_mad(world, "h2", c.sip, dreq_mad(k_cli.local_comm_id, k_srv.local_comm_id, k_srv.qpn))
    run_cm(world, "h1")
    assert k_srv.state is CmState.ESTABLISHED
    assert not c.sch.ch.events
    assert cm_kernel(world, "h1").counters.mads_unmatched >= 1


def test_a_dreq_with_the_wrong_qpn_or_comm_id_is_dropped(world: World) -> None:
    c = Conn(world)
    cli, srv = c.connect()
    k_cli, k_srv = cli._k, srv._k
    # From the peer's own host (its kernel), but not for this connection's QP, or naming
    # another connection of the peer.
    for local, qpn in ((k_cli.local_comm_id, k_srv.qpn ^ 1),
                       (k_cli.local_comm_id ^ 1, k_srv.qpn)):
        send_mad(world, "h0", c.sip, dreq_mad(local, k_srv.local_comm_id, qpn))
        run_cm(world, "h1")
        assert k_srv.state is CmState.ESTABLISHED
        assert not c.sch.ch.events
    # The real one still works.
    cli.disconnect()
    assert CMEvent(c.sch).event_type == EV.RDMA_CM_EVENT_DISCONNECTED


def test_comm_ids_are_not_sequential(world: World) -> None:
    c = Conn(world)
    ids = [c.connect()[0]._k.local_comm_id for _ in range(6)]
    steps = {b - a for a, b in zip(ids, ids[1:], strict=False)}
    assert steps != {1} and len(set(ids)) == len(ids)


# -- 8. malformed MADs -----------------------------------------------------------------------


def _req(comm: int, sid: int, src: str, dst: str, transport: int = 0) -> bytes:
    req = m.Req(comm, sid, 1, 0x100, 5, ip_gid(src), ip_gid(dst),
                private_data=m.cma_hdr(src, dst, 0x9000))
    raw = bytearray(m.Mad(m.AttrId.REQ, comm, req).pack())
    raw[m.HDR_SIZE + 40 + 3] = (raw[m.HDR_SIZE + 40 + 3] & ~6) | transport << 1
    return bytes(raw)


@pytest.mark.parametrize("transport", [2, 3])
def test_a_req_with_a_reserved_transport_is_a_counted_drop(world: World,
                                                           transport: int) -> None:
    c = Conn(world)
    sid = m.service_id(m.PortSpace.TCP, PORT)
    send_mad(world, "h2", c.sip, _req(77, sid, device_ip(world, "h2"), c.sip, transport))
    run_cm(world, "h1")
    assert cm_kernel(world, "h1").counters.mads_malformed == 1
    c.connect()  # the CM still serves


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_mad_fuzz_only_counted_drops(world: World, data: st.DataObject) -> None:
    """Every MAD type, every field: a valid MAD with bytes overwritten, truncated or
    extended, or random bytes, goes through the MAD handler as the network would deliver
    it. Nothing may escape it; what is not a valid message for a connection is counted."""
    cm = cm_kernel(world, "h1")
    src, dst = device_ip(world, "h2"), device_ip(world, "h1")
    base = data.draw(st.sampled_from(valid_mads(src, dst)))
    raw = bytearray(base)
    for _ in range(data.draw(st.integers(0, 6))):
        i = data.draw(st.integers(0, len(raw) - 1))
        raw[i] = data.draw(st.integers(0, 255))
    kind = data.draw(st.sampled_from(["mutated", "random", "short", "long"]))
    if kind == "random":
        raw = bytearray(data.draw(st.binary(min_size=0, max_size=300)))
    elif kind == "short":
        raw = raw[:data.draw(st.integers(0, len(raw)))]
    elif kind == "long":
        raw += data.draw(st.binary(min_size=1, max_size=40))
    before = cm.counters.mads_received
    g = cm.gsi(rdma_device(world, "h1"))
    cm.receive(g, ip_gid(src), bytes(raw))  # must not raise
    assert cm.counters.mads_received == before + 1


def test_every_field_of_every_mad_is_checked_by_the_parser() -> None:
    """Field by field: each 32-bit word of each valid MAD set to all ones parses or raises
    MadError, nothing else."""
    for raw in valid_mads("10.0.0.1", "10.0.0.2"):
        for off in range(0, m.MAD_SIZE, 4):
            bad = raw[:off] + b"\xff\xff\xff\xff" + raw[off + 4:]
            with contextlib.suppress(m.MadError):
                m.parse(bad)


# -- 9. the listen backlog ----------------------------------------------------------------------


def test_listen_backlog_bounds_the_requests_held(world: World) -> None:
    c = Conn(world, backlog=4)
    cm = cm_kernel(world, "h1")
    sid = m.service_id(m.PortSpace.TCP, PORT)
    src = device_ip(world, "h2")
    for i in range(320):
        send_mad(world, "h2", c.sip, _req(1000 + i, sid, src, c.sip))
        if i % 32 == 31:
            run_cm(world, "h1", 50_000)
    run_cm(world, "h1")
    pending = [cid for cid in cm.ids.values() if cid.listen is c.listen._k]
    assert len(pending) == 4
    assert len(c.sch.ch.events) == 4
    assert cm.counters.backlog_drops == 316
    # Taking a request makes room for one more.
    CMEvent(c.sch)
    send_mad(world, "h2", c.sip, _req(5000, sid, src, c.sip))
    run_cm(world, "h1")
    assert len(c.sch.ch.events) == 4


def test_listen_backlog_zero_means_the_system_limit(world: World) -> None:
    c = Conn(world, backlog=0)
    cm = cm_kernel(world, "h1")
    assert c.listen._k.backlog == 1024
    del cm


def test_struct_of_a_req_word_40() -> None:
    """The test's REQ builder puts the transport where IBA 12.6.5 puts it."""
    raw = _req(1, 2, "10.0.0.1", "10.0.0.2", transport=1)
    (w40,) = struct.unpack_from(">I", raw, m.HDR_SIZE + 40)
    assert (w40 >> 1) & 3 == 1
