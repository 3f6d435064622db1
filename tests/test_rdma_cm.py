"""RDMA CM (pyverbs.cmid over nsnic's kernel CM): connections set up by CM MADs on QP1, whose
bytes on the wire are checked field by field (IBA 12.6), the QPs they connect carrying data,
and the errors of misuse as rdma_cm reports them."""

from __future__ import annotations

import errno
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from nicsim.driver import enums as e
from nicsim.driver.cm_enums import RAI_PASSIVE, rdma_port_space
from nicsim.driver.cm_enums import rdma_cm_event_type as EV
from nicsim.driver.kernel.cm import mad as m
from nicsim.driver.user.errors import PyverbsRDMAError
from nicsim.driver.user.rdma_addrinfo import AddrInfo
from nicsim.driver.user.rdmacm import CMID, CMEvent, CMEventChannel, ConnParam, UDParam
from nicsim.driver.user.verbs import AH, QPCap, QPInitAttr
from scapy.utils import RawPcapReader

from nicsim.exec.spec import WorldSpec
from nicsim.exec.threads import ThreadContext
from nicsim.testing.exec_world import attached_world, host_ips
from nicsim.wire import parse
from nicsim.wire.opcodes import Opcode
from nicsim.world import World

TCP, UDP = rdma_port_space.RDMA_PS_TCP, rdma_port_space.RDMA_PS_UDP
PORT = 7471


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    with attached_world(WorldSpec(hosts=2, mem_mib=128, pcap=str(tmp_path))) as w:
        yield w


def _mads(w: World, tmp: Path) -> list[tuple[str, m.Mad, object]]:
    """Every CM MAD in the captures, in time order: (sending host, MAD, packet)."""
    w.close()
    out = []
    for f in sorted(tmp.glob("*.pcap")):
        host = f.stem.rsplit("-", 1)[1]
        for frame, meta in RawPcapReader(str(f)):
            p = parse(frame)
            if p.dqpn == m.GSI_QPN:
                assert p.opcode == Opcode.UD_SEND_ONLY and p.deth_qkey == m.GSI_QKEY
                assert p.deth_src_qp == m.GSI_QPN and p.payload_len == m.MAD_SIZE
                t = meta.sec * 10**6 + meta.usec  # type: ignore[attr-defined]
                out.append((t, host, m.parse(bytes(p.payload)), p))
    out.sort(key=lambda x: x[0])
    return [(h, mad, p) for _, h, mad, p in out]


class Pair:
    """A passive side on host b listening, an active side on host a, async CMIDs."""

    def __init__(self, w: World, ps: int = TCP, port: int = PORT) -> None:
        self.cip, self.sip = host_ips(w)
        self.sch, self.cch = CMEventChannel(), CMEventChannel()
        self.listen = CMID(self.sch, port_space=ps)
        self.listen.bind_addr(AddrInfo(src=self.sip, src_service=str(PORT), flags=RAI_PASSIVE,
                                       port_space=ps))
        self.listen.listen()
        self.cli = CMID(self.cch, port_space=ps)
        self.cli.resolve_addr(AddrInfo(src=self.cip, dst=self.sip, dst_service=str(port),
                                       port_space=ps))
        assert CMEvent(self.cch).event_type == EV.RDMA_CM_EVENT_ADDR_RESOLVED
        self.cli.resolve_route()
        assert CMEvent(self.cch).event_type == EV.RDMA_CM_EVENT_ROUTE_RESOLVED
        qpt = e.IBV_QPT_RC if ps == TCP else e.IBV_QPT_UD
        self.init = QPInitAttr(qp_type=qpt, cap=QPCap(max_send_wr=4, max_recv_wr=4))
        self.cli.create_qp(self.init)

    def request(self, data: bytes = b"") -> CMID:
        p = ConnParam(data_len=len(data))
        p.set_private_data(data)
        self.cli.connect(p)
        ev = CMEvent(self.sch)
        assert ev.event_type == EV.RDMA_CM_EVENT_CONNECT_REQUEST
        assert ev.private_data[:len(data)] == data
        child = CMID(ev, listen_id=self.listen)
        child.create_qp(self.init)
        return child


def test_rc_connect_traffic_disconnect_and_the_mads_on_the_wire(world: World,
                                                                 tmp_path: Path) -> None:
    pair = Pair(world)
    child = pair.request(b"hi there")
    child.accept(ConnParam(resources=1, depth=1))
    assert CMEvent(pair.cch).event_type == EV.RDMA_CM_EVENT_ESTABLISHED
    assert CMEvent(pair.sch).event_type == EV.RDMA_CM_EVENT_ESTABLISHED
    cli, srv = pair.cli, child
    # the IDs' devices are this world's (each test builds a world with the same names)
    assert (cli.context.host, srv.context.host) == (world.hosts["a"], world.hosts["b"])
    c_attr, _ = cli.query_qp(0)
    s_attr, _ = srv.query_qp(0)
    assert (c_attr.qp_state, s_attr.qp_state) == (e.IBV_QPS_RTS, e.IBV_QPS_RTS)
    assert (c_attr.dest_qp_num, s_attr.dest_qp_num) == (srv.qpn, cli.qpn)
    assert (c_attr.rq_psn, s_attr.rq_psn) == (s_attr.sq_psn, c_attr.sq_psn)
    # data both ways: a SEND each way, and an RDMA WRITE into the passive side
    smr, cmr = srv.reg_write(256), cli.reg_msgs(256)
    srv.post_recv(smr, 100)
    cmr.write(b"c" * 100, 100)
    cli.post_send(cmr, length=100)
    assert cli.get_send_comp().status == e.IBV_WC_SUCCESS
    wc = srv.get_recv_comp()
    assert (wc.status, wc.byte_len, wc.qp_num) == (e.IBV_WC_SUCCESS, 100, srv.qpn)
    assert smr.read(100, 0) == b"c" * 100
    cli.post_recv(cmr, 50)
    smr.write(b"s" * 50, 50)
    srv.post_send(smr, length=50)
    assert srv.get_send_comp().status == e.IBV_WC_SUCCESS
    assert cli.get_recv_comp().byte_len == 50 and cmr.read(50, 0) == b"s" * 50
    cmr.write(b"W" * 64, 64)
    cli.post_write(cmr, 64, smr.buf + 128, smr.rkey, flags=e.IBV_SEND_SIGNALED)
    assert cli.get_send_comp().status == e.IBV_WC_SUCCESS
    assert smr.read(64, 128) == b"W" * 64
    # the passive side hangs up; the active side hears it and answers
    srv.disconnect()
    assert srv.query_qp(0)[0].qp_state == e.IBV_QPS_ERR
    assert CMEvent(pair.cch).event_type == EV.RDMA_CM_EVENT_DISCONNECTED
    cli.disconnect()
    assert CMEvent(pair.sch).event_type == EV.RDMA_CM_EVENT_DISCONNECTED

    mads = _mads(world, tmp_path)
    assert [(h, mad.attr) for h, mad, _ in mads] == [
        ("a", m.AttrId.REQ), ("b", m.AttrId.REP), ("a", m.AttrId.RTU),
        ("b", m.AttrId.DREQ), ("a", m.AttrId.DREP)]
    req, rep, rtu, dreq, drep = (mad.msg for _, mad, _ in mads)
    assert isinstance(req, m.Req) and isinstance(rep, m.Rep) and isinstance(dreq, m.Dreq)
    assert req.service_id == 0x0000_0000_0106_0000 | PORT  # RDMA_PS_TCP, port 7471
    assert (req.local_qpn, req.starting_psn) == (cli.qpn, c_attr.sq_psn)
    assert (rep.local_qpn, rep.starting_psn) == (srv.qpn, s_attr.sq_psn)
    assert rep.remote_comm_id == req.local_comm_id
    assert (rtu.local_comm_id, rtu.remote_comm_id) == (req.local_comm_id, rep.local_comm_id)
    assert (dreq.local_comm_id, dreq.remote_comm_id, dreq.remote_qpn) == \
        (rep.local_comm_id, req.local_comm_id, cli.qpn)
    assert drep.remote_comm_id == rep.local_comm_id
    assert req.transport == m.Transport.RC and req.path_mtu == 5  # 4096 on a 9000-byte netdev
    assert req.local_gid == bytes(10) + b"\xff\xff" + bytes([10, 0, 0, 1])
    assert req.remote_gid == bytes(10) + b"\xff\xff" + bytes([10, 0, 0, 2])
    assert m.parse_cma_hdr(req.private_data) == (pair.cip, pair.sip, pair.cli._k.src_port)
    assert req.private_data[m.CMA_HDR_SIZE:m.CMA_HDR_SIZE + 8] == b"hi there"
    raw = mads[0][2].payload
    assert bytes(raw[:4]) == bytes([1, 0x07, 2, 0x03])  # base version, CM class v2, Send
    assert bytes(raw[16:18]) == b"\x00\x10"  # attribute ID: REQ


def test_connect_to_a_port_nobody_listens_on_is_rejected(world: World,
                                                         tmp_path: Path) -> None:
    pair = Pair(world, port=PORT + 1)
    pair.cli.connect(ConnParam())
    ev = CMEvent(pair.cch)
    assert (ev.event_type, ev.status) == (EV.RDMA_CM_EVENT_REJECTED,
                                          m.RejReason.INVALID_SERVICE_ID)
    mads = _mads(world, tmp_path)
    assert [(h, mad.attr) for h, mad, _ in mads] == [("a", m.AttrId.REQ), ("b", m.AttrId.REJ)]
    rej = mads[1][1].msg
    assert isinstance(rej, m.Rej) and rej.reason == 8 and rej.message_rejected == 0
    assert rej.remote_comm_id == mads[0][1].msg.local_comm_id  # type: ignore[union-attr]
    assert world.hosts["b"].kernel.cm.counters.rej_sent == 1  # type: ignore[attr-defined]


def test_reject_carries_the_consumer_private_data(world: World) -> None:
    pair = Pair(world)
    child = pair.request()
    child.reject(b"connection rejected")
    ev = CMEvent(pair.cch)
    assert (ev.event_type, ev.status) == (EV.RDMA_CM_EVENT_REJECTED,
                                          m.RejReason.CONSUMER_DEFINED)
    assert ev.private_data[:19] == b"connection rejected"
    assert len(ev.private_data) == m.REJ_PRIVATE
    with pytest.raises(PyverbsRDMAError) as err:  # rejected: nothing left to accept
        child.accept()
    assert err.value.error_code == errno.EINVAL


def test_ud_service_lookup_and_datagrams_both_ways(world: World, tmp_path: Path) -> None:
    pair = Pair(world, UDP)
    child = pair.request(b"sidr")
    child.accept()
    ev = CMEvent(pair.cch)
    assert ev.event_type == EV.RDMA_CM_EVENT_ESTABLISHED
    ud = UDParam(ev)
    assert (ud.qp_num, ud.qkey) == (child.qpn, 0x01234567)
    cmr, smr = pair.cli.reg_msgs(256), child.reg_msgs(256)
    child.post_recv(smr, 40 + 64)
    cmr.write(b"u" * 64, 64)
    pair.cli.post_ud_send(cmr, AH(pair.cli.pd, attr=ud.ah_attr), rqpn=ud.qp_num, length=64)
    assert pair.cli.get_send_comp().status == e.IBV_WC_SUCCESS
    wc = child.get_recv_comp()
    assert (wc.status, wc.byte_len, wc.src_qp) == (e.IBV_WC_SUCCESS, 40 + 64, pair.cli.qpn)
    assert smr.read(64, 40) == b"u" * 64
    # the answer goes back on an AH made from the completion and its GRH
    pair.cli.post_recv(cmr, 40 + 32)
    back = AH(child.pd, wc=wc, port_num=1, grh=smr.buf)
    smr.write(b"r" * 32, 32)
    child.post_ud_send(smr, back, rqpn=wc.src_qp, length=32)
    assert child.get_send_comp().status == e.IBV_WC_SUCCESS
    assert pair.cli.get_recv_comp().byte_len == 40 + 32 and cmr.read(32, 40) == b"r" * 32
    mads = _mads(world, tmp_path)
    assert [(h, mad.attr) for h, mad, _ in mads] == [("a", m.AttrId.SIDR_REQ),
                                                     ("b", m.AttrId.SIDR_REP)]
    sreq, srep = mads[0][1].msg, mads[1][1].msg
    assert isinstance(sreq, m.SidrReq) and isinstance(srep, m.SidrRep)
    assert sreq.service_id == 0x0111_0000 | PORT and srep.request_id == sreq.request_id
    assert (srep.status, srep.qpn, srep.qkey) == (m.SidrStatus.VALID, child.qpn, 0x01234567)


def test_addressing_errors(world: World) -> None:
    cip, _ = host_ips(world)
    ch = CMEventChannel()
    with pytest.raises(PyverbsRDMAError) as err:
        CMID(ch).bind_addr(AddrInfo(src="10.9.9.9", src_service="1", flags=RAI_PASSIVE))
    assert err.value.error_code == errno.EADDRNOTAVAIL
    with pytest.raises(PyverbsRDMAError) as err:
        AddrInfo(src="not-an-address", flags=RAI_PASSIVE)
    assert err.value.error_code == errno.EADDRNOTAVAIL
    cid = CMID(ch)
    cid.resolve_addr(AddrInfo(src=cip, dst="10.9.9.9", dst_service="1"))
    ev = CMEvent(ch)
    assert (ev.event_type, ev.status) == (EV.RDMA_CM_EVENT_ADDR_ERROR, -errno.EHOSTUNREACH)
    with pytest.raises(PyverbsRDMAError) as err:  # the route needs a resolved address
        cid.resolve_route()
    assert err.value.error_code == errno.EINVAL
    with pytest.raises(PyverbsRDMAError) as err:  # nothing more can happen: no hang
        CMEvent(ch)
    assert err.value.error_code == errno.ETIMEDOUT
    a = CMID(ch)
    a.bind_addr(AddrInfo(src=cip, src_service=str(PORT), flags=RAI_PASSIVE))
    with pytest.raises(PyverbsRDMAError) as err:
        CMID(ch).bind_addr(AddrInfo(src=cip, src_service=str(PORT), flags=RAI_PASSIVE))
    assert err.value.error_code == errno.EADDRINUSE


def test_malformed_mads_are_counted_and_dropped(world: World) -> None:
    pair = Pair(world)
    cm_b = world.hosts["b"].kernel.cm  # type: ignore[attr-defined]
    gsi_a = pair.cli._k.gsi
    bad = bytearray(m.Mad(m.AttrId.RTU, 1, m.Rtu(1, 2)).pack())
    bad[1] = 0x04  # not the CM class
    gsi_a.send(cm_b.gsi(world.hosts["b"].kernel.devices["nsnic1"]).dev.hw.gid(3)[0],  # type: ignore
               bytes(bad))
    pair.cli.connect(ConnParam())
    assert CMEvent(pair.sch).event_type == EV.RDMA_CM_EVENT_CONNECT_REQUEST
    assert cm_b.counters.mads_malformed == 1 and cm_b.counters.mads_received == 2


def test_thread_processes_report_exit_codes_and_meet_at_barriers() -> None:
    ctx = ThreadContext()
    bar, q = ctx.Barrier(2, timeout=5), ctx.Queue()

    def side(n: int) -> None:
        bar.wait()
        q.put(n)
        if n == 1:
            sys.exit(5)
        if n == 2:
            raise ValueError("boom")

    ps = [ctx.Process(target=side, args=(n,)) for n in (1, 2)]
    for p in ps:
        p.start()
    for p in ps:
        p.join(5)
    assert [p.exitcode for p in ps] == [5, 1] and not any(p.is_alive() for p in ps)
    assert sorted([q.get(), q.get()]) == [1, 2]


def test_rdmacm_between_two_thread_processes(world: World) -> None:
    """The shape of rdma-core's rdmacm tests: a passive and an active side, each a 'process'
    of the fork context, synchronous CMIDs, meeting through the one world."""
    cip, sip = host_ips(world)
    ctx = ThreadContext()
    bar, q = ctx.Barrier(2, timeout=20), ctx.Queue()
    init = QPInitAttr(qp_type=e.IBV_QPT_RC, cap=QPCap(max_recv_wr=2))

    def passive() -> None:
        ep = CMID(AddrInfo(src=sip, src_service="9000", flags=RAI_PASSIVE), qp_init_attr=init)
        ep.listen()
        bar.wait()
        conn = ep.get_request()
        conn.accept()
        mr = conn.reg_msgs(32)
        conn.post_recv(mr)
        bar.wait()
        q.put(conn.get_recv_comp().byte_len)
        q.put(mr.read(32, 0))
        conn.disconnect()

    def active() -> None:
        ep = CMID(AddrInfo(src=cip, dst=sip, dst_service="9000"), qp_init_attr=init)
        bar.wait()
        ep.connect()
        mr = ep.reg_msgs(32)
        mr.write(b"z" * 32, 32)
        bar.wait()
        ep.post_send(mr)
        assert ep.get_send_comp().status == e.IBV_WC_SUCCESS

    ps = [ctx.Process(target=passive), ctx.Process(target=active)]
    for p in ps:
        p.start()
    for p in ps:
        p.join(60)
    assert [p.exitcode for p in ps] == [0, 0]
    assert q.get(timeout=1) == 32 and q.get(timeout=1) == b"z" * 32


TSHARK = shutil.which("tshark")


@pytest.mark.skipif(TSHARK is None, reason="tshark is not installed (apt-get install tshark)")
def test_tshark_decodes_the_cm_exchange(world: World, tmp_path: Path) -> None:
    pair = Pair(world)
    child = pair.request()
    child.accept()
    assert CMEvent(pair.cch).event_type == EV.RDMA_CM_EVENT_ESTABLISHED
    assert CMEvent(pair.sch).event_type == EV.RDMA_CM_EVENT_ESTABLISHED  # the RTU is in
    world.close()
    cap = next(tmp_path.glob("*-a.pcap"))
    out = subprocess.run([TSHARK, "-r", str(cap), "-V"], capture_output=True, text=True,
                         check=True).stdout
    assert "CM ConnectRequest" in out and "CM ReadyToUse" in out
    assert f"Local QPN: 0x{pair.cli.qpn:06x}" in out
    assert "IP CM Source IP: 10.0.0.1" in out and "IP CM Destination IP: 10.0.0.2" in out
    assert "Management Class: 0x07" in out


def test_a_lost_req_is_sent_again_after_the_response_timeout(world: World,
                                                             tmp_path: Path) -> None:
    pair = Pair(world)
    pair.cli.connect(ConnParam())
    b = world.hosts["b"]
    cm_b = b.kernel.cm  # type: ignore[attr-defined]
    gsi_b = next(iter(cm_b._gsi.values()))
    lost = []
    while not lost:  # the REQ reaches b's QP1 and is lost there
        b.spend(1000.0)
        lost = gsi_b.poll()
    assert m.parse(lost[0].mad).attr is m.AttrId.REQ
    t0 = world.env.now
    ev = CMEvent(pair.sch)  # nothing left to do but wait for the REQ to come again
    assert ev.event_type == EV.RDMA_CM_EVENT_CONNECT_REQUEST
    assert world.env.now - t0 >= 2 * 4096.0 * (1 << 20) * 0.99
    assert world.hosts["a"].kernel.cm.counters.mads_resent == 1  # type: ignore[attr-defined]
    mads = _mads(world, tmp_path)
    reqs = [mad for h, mad, _ in mads if mad.attr is m.AttrId.REQ]
    assert len(reqs) == 2 and reqs[0].pack() == reqs[1].pack()  # the same MAD, same TID


def test_a_peer_whose_cm_never_answers_is_unreachable(world: World,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    pair = Pair(world)
    cm_b = world.hosts["b"].kernel.cm  # type: ignore[attr-defined]
    monkeypatch.setattr(cm_b, "_handle", lambda *a: None)  # b's CM takes MADs, answers none
    pair.cli.connect(ConnParam())
    ev = CMEvent(pair.cch)
    assert (ev.event_type, ev.status) == (EV.RDMA_CM_EVENT_UNREACHABLE, -errno.ETIMEDOUT)
    cm_a = world.hosts["a"].kernel.cm  # type: ignore[attr-defined]
    assert (cm_a.counters.mads_resent, cm_a.counters.timeouts) == (15, 1)  # Max CM Retries
    assert cm_b.counters.mads_received == 16  # every REQ reached b
    assert cm_a.counters.mads_sent == 2  # the REQ, then a REJ (reason Timeout) as ib_cm sends


def test_multicast_join_attaches_the_qp_and_leave_detaches_it(world: World) -> None:
    cip, sip = host_ips(world)
    group = "239.1.2.3"
    sides = []
    for ip in (sip, cip):
        ch = CMEventChannel()
        cid = CMID(ch, port_space=UDP)
        cid.bind_addr(AddrInfo(src=ip, dst=ip, dst_service="1", port_space=UDP))
        cid.resolve_addr(AddrInfo(src=ip, dst=group))
        assert CMEvent(ch).event_type == EV.RDMA_CM_EVENT_ADDR_RESOLVED
        cid.create_qp(QPInitAttr(qp_type=e.IBV_QPT_UD, cap=QPCap(max_recv_wr=4)))
        cid.join_multicast(AddrInfo(src=group))
        ev = CMEvent(ch)
        assert ev.event_type == EV.RDMA_CM_EVENT_MULTICAST_JOIN
        sides.append((cid, UDParam(ev)))
    (srv, _), (cli, ud) = sides
    assert (ud.qp_num, ud.qkey) == (0xFFFFFF, 0x01234567)
    smr, cmr = srv.reg_msgs(128), cli.reg_msgs(128)
    srv.post_recv(smr, 40 + 16)
    cmr.write(b"m" * 16, 16)
    cli.post_ud_send(cmr, AH(cli.pd, attr=ud.ah_attr), rqpn=ud.qp_num, length=16)
    assert cli.get_send_comp().status == e.IBV_WC_SUCCESS
    wc = srv.get_recv_comp()
    assert (wc.status, wc.byte_len) == (e.IBV_WC_SUCCESS, 40 + 16)
    assert smr.read(16, 40) == b"m" * 16
    srv.leave_multicast(AddrInfo(src=group))
    with pytest.raises(PyverbsRDMAError) as err:  # left already
        srv.leave_multicast(AddrInfo(src=group))
    assert err.value.error_code == errno.EADDRNOTAVAIL
    srv.post_recv(smr, 40 + 16)
    cli.post_ud_send(cmr, AH(cli.pd, attr=ud.ah_attr), rqpn=ud.qp_num, length=16)
    assert cli.get_send_comp().status == e.IBV_WC_SUCCESS
    with pytest.raises(PyverbsRDMAError) as err:  # detached: nothing arrives
        srv.get_recv_comp()
    assert err.value.error_code == errno.ETIMEDOUT
    cli.close()  # still a member: rdma_destroy_id leaves the group before the QP goes
    assert cli.qp.closed
