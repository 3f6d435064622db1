"""UD multicast (IBA 10.5.2.5, Annex A17.4.5): attach/detach, the packet on the wire (IP group
address, its Ethernet group address, DQPN 0xFFFFFF), delivery to every attached QP of every
host and of the sender's own device, the switch's flooding, and the errnos of misuse."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from nicsim.driver import enums as e
from nicsim.driver.user.errors import PyverbsRDMAError
from nicsim.driver.user.verbs import (
    AH,
    GID,
    QP,
    SGE,
    AHAttr,
    GlobalRoute,
    QPCap,
    QPInitAttr,
    SendWR,
)
from scapy.utils import RawPcapReader

from nicsim.fabric.topology import Shape, TopologySpec
from nicsim.testing.ud import QKEY, Side
from nicsim.wire import MCAST_QPN, parse
from nicsim.wire.opcodes import Opcode
from nicsim.workloads.endpoint import roce_v2_gid
from nicsim.world import World

GROUP = GID("::ffff:239.1.2.3")
GROUP_MAC = bytes.fromhex("01005e010203")


def _send_to_group(s: Side, data: bytes, group: GID = GROUP, wr_id: int = 1) -> None:
    ah = AH(s.pd, attr=AHAttr(GlobalRoute(dgid=group, sgid_index=roce_v2_gid(s.ctx)[0])))
    s.mr.write(data, len(data))
    wr = SendWR(wr_id=wr_id, opcode=e.IBV_WR_SEND, num_sge=1,
                sg=[SGE(s.mr.buf, len(data), s.mr.lkey)])
    wr.set_wr_ud(ah, MCAST_QPN, QKEY)
    s.qp.post_send(wr)
    (wc,) = s.wait()
    assert wc.status == e.IBV_WC_SUCCESS


def test_device_reports_multicast_limits() -> None:
    w = World.two_hosts()
    a = Side(w, "a")
    attr = a.ctx.query_device()
    assert attr.max_mcast_grp == 8192 and attr.max_mcast_qp_attach == 56
    assert attr.max_total_mcast_qp_attach == 8192 * 56


def test_group_datagram_reaches_every_attached_qp_and_its_bytes_on_the_wire(
        tmp_path: Path) -> None:
    pcap = tmp_path / "mc.pcap"
    w = World.two_hosts(pcap=pcap)
    a = Side(w, "a")
    b1, b2, b3 = Side(w, "b"), Side(w, "b"), Side(w, "b")
    b1.qp.attach_mcast(GROUP)
    b2.qp.attach_mcast(GROUP)
    b2.qp.attach_mcast(GROUP)  # twice is once
    for s in (b1, b2, b3):
        s.recv(7)
    data = bytes(range(200))
    _send_to_group(a, data)
    for s in (b1, b2):
        (wc,) = s.wait()
        assert (wc.status, wc.opcode, wc.byte_len, wc.src_qp) == (
            e.IBV_WC_SUCCESS, e.IBV_WC_RECV, 40 + len(data), a.qp.qp_num)
        assert s.mr.read(len(data), 8192 + 40) == data
    assert b3.wait(limit_ns=20_000) == []  # not attached: nothing
    w.close()
    (frame,) = [bytes(f) for f, _ in RawPcapReader(str(pcap))]
    assert frame[0:6] == GROUP_MAC and frame[30:34] == bytes((239, 1, 2, 3))
    p = parse(frame)
    assert p.opcode == Opcode.UD_SEND_ONLY and p.dqpn == MCAST_QPN
    assert (p.deth_qkey, p.deth_src_qp) == (QKEY, a.qp.qp_num)
    assert w.nics["b"].counters()["mcast.delivered"] == 2


def test_sender_device_members_get_a_looped_copy_and_detach_stops_delivery() -> None:
    w = World.two_hosts()
    a, a2, b = Side(w, "a"), Side(w, "a"), Side(w, "b")
    for s in (a, a2, b):
        s.qp.attach_mcast(GROUP)
        s.recv(1)
    _send_to_group(a, b"hello group")
    for s in (a, a2, b):  # the sender's own QP is a member too: it gets its copy
        (wc,) = [x for x in s.wait() if x.opcode == e.IBV_WC_RECV]
        assert wc.status == e.IBV_WC_SUCCESS
        assert s.mr.read(11, 8192 + 40) == b"hello group"
    assert w.nics["a"].counters()["port.loopback_frames"] == 1
    b.qp.detach_mcast(GROUP)
    b.recv(2)
    _send_to_group(a, b"after leave", wr_id=2)
    assert b.wait(limit_ns=20_000) == []
    assert "mcast.drop_not_joined" not in w.nics["b"].counters()  # the MAC filter first
    assert w.nics["b"].counters()["rx.not_for_us"] == 1


@pytest.mark.parametrize("shape", [Shape.STAR, Shape.LEAF_SPINE])
def test_switches_flood_group_frames_to_every_member(shape: Shape) -> None:
    spec = TopologySpec(shape=shape, hosts=4, leaves=2, spines=2, hosts_per_leaf=2)
    w = World.from_topology(spec)
    names = list(w.nics)
    src = Side(w, names[0])
    members = [Side(w, h) for h in names[1:]]
    for s in members:
        s.qp.attach_mcast(GROUP)
        s.recv(3)
    _send_to_group(src, b"to all leaves")
    for s in members:
        (wc,) = s.wait()
        assert wc.status == e.IBV_WC_SUCCESS and s.mr.read(13, 8192 + 40) == b"to all leaves"
        assert s.wait(limit_ns=20_000) == []  # one copy each: the flood has no loop
    w.close()


def test_misuse_errnos() -> None:
    w = World.two_hosts()
    a = Side(w, "a")
    with pytest.raises(PyverbsRDMAError) as ei:
        a.qp.attach_mcast(GID("::ffff:10.0.0.9"))  # not a multicast address
    assert ei.value.error_code == errno.EINVAL
    with pytest.raises(PyverbsRDMAError) as ei:
        a.qp.detach_mcast(GROUP)  # not attached
    assert ei.value.error_code == errno.EINVAL
    rc = QP(a.pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=a.cq, rcq=a.cq, cap=QPCap(4, 4, 1, 1)))
    with pytest.raises(PyverbsRDMAError) as ei:
        rc.attach_mcast(GROUP)  # multicast is UD only (ib_attach_mcast)
    assert ei.value.error_code == errno.EINVAL
    a.qp.attach_mcast(GROUP)
    with pytest.raises(PyverbsRDMAError) as ei:
        a.qp.close()  # still attached (uverbs_free_qp)
    assert ei.value.error_code == errno.EBUSY
    a.qp.detach_mcast(GROUP)
    a.qp.close()
    a.ctx.close()
    # Process exit (the device file closes with nothing destroyed) detaches what is still
    # attached, then destroys the QP.
    b = Side(w, "b")
    b.qp.attach_mcast(GROUP)
    b.ctx.file.close()
    assert w.nics["b"].mcast.groups == {}
