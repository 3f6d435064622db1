"""UD QPs with address handles (IBA 9.8): one packet per datagram, BTH + DETH (Q_Key, source
QPN), the 40-byte GRH at the head of the receive buffer, drops for a wrong Q_Key or no
receive WQE, errors as rxe reports them."""

from __future__ import annotations

import errno
import socket
from pathlib import Path

import pytest
from nicsim.driver import enums as e
from nicsim.driver.user.errors import PyverbsRDMAError
from nicsim.driver.user.verbs import (
    AH,
    CQ,
    PD,
    QP,
    SGE,
    AHAttr,
    Context,
    GlobalRoute,
    QPAttr,
    QPInitAttr,
    RecvWR,
    SendWR,
)
from scapy.utils import RawPcapReader

from nicsim.hwif import VendorErr
from nicsim.testing.ud import QKEY, Side
from nicsim.wire import parse
from nicsim.wire.opcodes import Opcode
from nicsim.world import World


def test_datagram_with_immediate_lands_behind_its_grh(tmp_path: Path) -> None:
    pcap = tmp_path / "ud.pcap"
    w = World.two_hosts(pcap=pcap)
    a, b = Side(w, "a"), Side(w, "b")
    assert a.qp.qp_state == e.IBV_QPS_RTS  # a QPAttr takes a UD QP all the way to RTS
    b.recv(5)
    data = bytes(range(251)) * 4
    a.send(b, data, imm=socket.htonl(0xCAFE))  # imm_data is a __be32
    (sw,) = a.wait()
    assert (sw.wr_id, sw.status, sw.opcode, sw.byte_len) == (1, 0, e.IBV_WC_SEND, len(data))
    (rw,) = b.wait()
    assert (rw.wr_id, rw.status, rw.opcode) == (5, 0, e.IBV_WC_RECV)
    assert rw.byte_len == 40 + len(data) and rw.src_qp == a.qp.qp_num
    assert rw.wc_flags == e.IBV_WC_GRH | e.IBV_WC_WITH_IMM
    assert socket.ntohl(rw.imm_data) == 0xCAFE
    w.close()
    (frame,) = [bytes(f) for f, _ in RawPcapReader(str(pcap))]
    p = parse(frame)
    assert p.opcode == Opcode.UD_SEND_ONLY_WITH_IMMEDIATE and p.dqpn == b.qp.qp_num
    assert (p.deth_qkey, p.deth_src_qp, p.imm) == (QKEY, a.qp.qp_num, 0xCAFE)
    assert frame[14 + 20 + 8 + 12 + 8:][:4] == bytes.fromhex("0000cafe")  # BTH, DETH, ImmDt
    buf = b.mr.read(40 + len(data), 8192)
    assert buf[:20] == bytes(20) and buf[20:40] == frame[14:34]  # RoCEv2/IPv4 "GRH"
    assert buf[40:] == data


def test_loopback_datagram_and_qkey_of_the_qp() -> None:
    w = World.two_hosts()
    a = Side(w, "a")
    b = Side(w, "a")  # a second UD QP on the same device: loopback
    b.recv(1)
    a.send(b, b"to myself", qkey=0x80000000 | 0x1234)  # bit 31: use the QP's own Q_Key
    assert a.wait()[0].status == 0
    (rw,) = b.wait()
    assert rw.status == 0 and b.mr.read(9, 8192 + 40) == b"to myself"
    assert w.nics["a"].counters()["port.loopback_frames"] == 1


def test_wrong_qkey_and_missing_receive_are_dropped() -> None:
    w = World.two_hosts()
    a, b = Side(w, "a"), Side(w, "b")
    a.send(b, b"no receive posted")
    assert a.wait()[0].status == 0  # UD: nothing tells the sender
    b.recv(1)
    a.send(b, b"wrong key", qkey=0x22222222, wr_id=2)
    assert a.wait()[0].status == 0
    assert b.wait(limit_ns=50_000) == []
    c = b.nic.counters()
    assert c["datagram.drop_no_recv_wqe"] == 1 and c["datagram.drop_qkey"] == 1
    a.send(b, b"right key", wr_id=3)  # the receive WQE is still there
    (rw,) = b.wait()
    assert rw.wr_id == 1 and b.mr.read(9, 8192 + 40) == b"right key"


def test_receive_buffer_too_small_is_loc_len_err() -> None:
    w = World.two_hosts()
    a, b = Side(w, "a"), Side(w, "b")
    b.recv(1, length=40 + 10)
    b.recv(2)
    a.send(b, b"x" * 11)
    (rw, fl) = b.wait(2)
    assert (rw.wr_id, rw.status, rw.vendor_err) == (1, e.IBV_WC_LOC_LEN_ERR,
                                                    VendorErr.RECV_TOO_SMALL)
    assert (fl.wr_id, fl.status) == (2, e.IBV_WC_WR_FLUSH_ERR)
    assert b.qp.query()[0].qp_state == e.IBV_QPS_ERR


def test_receive_buffer_with_a_bad_lkey_is_loc_prot_err_and_says_why() -> None:
    w = World.two_hosts()
    a, b = Side(w, "a"), Side(w, "b")
    b.qp.post_recv(RecvWR(wr_id=1, num_sge=1, sg=[SGE(b.mr.buf, 2048, b.mr.lkey ^ 0x100)]))
    b.recv(2)
    a.send(b, b"not for a bad key")
    (rw, fl) = b.wait(2)
    assert (rw.wr_id, rw.status, rw.vendor_err) == (1, e.IBV_WC_LOC_PROT_ERR,
                                                    VendorErr.BAD_LKEY)
    assert (fl.wr_id, fl.status) == (2, e.IBV_WC_WR_FLUSH_ERR)
    assert b.mr.read(17, 40) == bytes(17)  # nothing placed


def test_datagram_longer_than_the_mtu_is_loc_len_err() -> None:
    w = World.two_hosts()
    a, b = Side(w, "a"), Side(w, "b")
    a.send(b, bytes(4097))
    (sw,) = a.wait()
    assert sw.status == e.IBV_WC_LOC_LEN_ERR


def test_only_sends_on_ud_and_an_ah_is_needed() -> None:
    w = World.two_hosts()
    a, b = Side(w, "a"), Side(w, "b")
    wr = SendWR(opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(a.mr.buf, 8, a.mr.lkey)])
    wr.set_wr_ud(a.ah_to(b), b.qp.qp_num, QKEY)
    with pytest.raises(PyverbsRDMAError) as ei:
        a.qp.post_send(wr)
    assert ei.value.error_code == errno.EINVAL
    with pytest.raises(PyverbsRDMAError) as ei:
        a.qp.post_send(SendWR(num_sge=1, sg=[SGE(a.mr.buf, 8, a.mr.lkey)]))
    assert ei.value.error_code == errno.EINVAL


def test_ud_transitions_take_ud_attributes() -> None:
    w = World.two_hosts()
    ctx = Context("nsnic0", host=w.hosts["a"])
    pd, cq = PD(ctx), CQ(ctx, 8)
    qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_UD, scq=cq, rcq=cq))
    attr = QPAttr(qkey=7)
    attr.qp_state = e.IBV_QPS_INIT
    bad = e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_ACCESS_FLAGS
    with pytest.raises(PyverbsRDMAError) as ei:
        qp.modify(attr, bad)  # an RC mask: UD has a Q_Key, not access rights
    assert ei.value.error_code == errno.EINVAL
    qp.to_rts(attr)
    assert qp.query()[0].qkey == 7 and qp.qp_state == e.IBV_QPS_RTS


def test_ah_needs_a_grh_and_a_reachable_gid() -> None:
    w = World.two_hosts()
    a = Side(w, "a")
    with pytest.raises(PyverbsRDMAError) as ei:
        AH(a.pd, attr=AHAttr(port_num=1))  # no GRH on RoCE
    assert ei.value.error_code == errno.EINVAL
    from nicsim.driver.user.verbs import GID

    with pytest.raises(PyverbsRDMAError) as ei:
        AH(a.pd, attr=AHAttr(GlobalRoute(dgid=GID("::ffff:10.9.9.9"))))
    assert ei.value.error_code == errno.EHOSTUNREACH
