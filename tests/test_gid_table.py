"""The port's GID table as a ConnectX port has it (show_gids: link-local and IPv4-mapped, each
as RoCE v1 and v2), every entry usable: RC and UD traffic from each goes out framed as its
type says (RoCE v1: EtherType 0x8915 and a GRH; v2: UDP over IPv6 or IPv4), byte-checked in
the capture and by tshark; a device without v1 lists v2 entries only; a frame of the wrong
RoCE version is not taken by a QP; a routed fabric drops v1, as a real one does."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from nicsim.driver import enums as e
from nicsim.driver.user.verbs import AH, SGE, AHAttr, GlobalRoute, SendWR
from scapy.utils import RawPcapReader

from nicsim.fabric.pcap import check_pcap
from nicsim.fabric.topology import Shape, TopologySpec
from nicsim.hwif import DevFeature, GidType, Reg, gid_table, link_local_gid
from nicsim.nic.config import NicConfig
from nicsim.testing.rdma import make_side, wait
from nicsim.testing.ud import Side
from nicsim.wire import FrameBuilder, Opcode, reth
from nicsim.wire import Path as WirePath
from nicsim.workloads.endpoint import connect_qp, roce_v2_gid
from nicsim.world import World

MAC_A, MAC_B = bytes.fromhex("02000000000a"), bytes.fromhex("02000000000b")
V4_A, V4_B = bytes(10) + b"\xff\xff" + bytes([10, 0, 0, 1]), \
    bytes(10) + b"\xff\xff" + bytes([10, 0, 0, 2])


def test_the_table_derives_from_the_mac_and_address() -> None:
    ll = link_local_gid(MAC_A)
    assert ll.hex() == "fe80000000000000" + "0000" + "00fffe00000a"  # modified EUI-64
    assert gid_table(MAC_A, bytes([10, 0, 0, 1]), True) == (
        (ll, GidType.ROCE_V1), (ll, GidType.ROCE_V2),
        (V4_A, GidType.ROCE_V1), (V4_A, GidType.ROCE_V2))
    assert gid_table(MAC_A, bytes([10, 0, 0, 1]), False) == (
        (ll, GidType.ROCE_V2), (V4_A, GidType.ROCE_V2))


def test_a_device_without_roce_v1_lists_v2_entries_only() -> None:
    w = World.two_hosts(nic=NicConfig(roce_v1=False))
    assert not w.nics["a"].mmio_read(Reg.FEATURES) & DevFeature.ROCE_V1
    s = make_side(w, "a")
    got = [(s.ctx.query_gid(1, i).raw, s.ctx.query_gid_type(1, i)) for i in range(2)]
    assert got == [(link_local_gid(MAC_A), e.IBV_GID_TYPE_SYSFS_ROCE_V2),
                   (V4_A, e.IBV_GID_TYPE_SYSFS_ROCE_V2)]
    assert s.ctx.query_gid(1, 2).raw == bytes(16)  # empty
    assert roce_v2_gid(s.ctx)[0] == 1  # rxe's layout: the IPv4 address is index 1


def _frames(pcap: Path) -> list[bytes]:
    return [bytes(f) for f, _ in RawPcapReader(str(pcap))]


@pytest.mark.parametrize("index", [0, 1, 2, 3])
def test_rc_traffic_from_each_gid_is_framed_as_its_type(tmp_path: Path, index: int) -> None:
    pcap = tmp_path / "x.pcap"
    w = World.two_hosts(pcap=pcap)
    a, b = make_side(w, "a"), make_side(w, "b")
    for x, y in ((a, b), (b, a)):
        connect_qp(x.qp, y.qp.qp_num, y.ctx.query_gid(1, index), sgid_index=index)
    data = bytes(range(256)) * 20  # 5 packets at MTU 1024
    _write(a, b, data)
    assert b.mr.read(len(data), 4096) == data
    w.close()
    frames = _frames(pcap)
    assert len(frames) >= 6 and check_pcap(pcap).ok
    v1 = index in (0, 2)
    sgid = (link_local_gid(MAC_A), link_local_gid(MAC_B)) if index < 2 else (V4_A, V4_B)
    for f in frames:
        if v1:
            # Ethernet type 0x8915, then a GRH: IPVer 6, next header BTH (0x1B), the GIDs
            assert f[12:14] == b"\x89\x15" and f[14] >> 4 == 6 and f[20] == 0x1B
            assert {f[22:38], f[38:54]} == set(sgid)
        elif index == 1:  # RoCE v2 over IPv6 link-local addresses, UDP 4791
            assert f[12:14] == b"\x86\xdd" and f[20] == 17 and f[56:58] == b"\x12\xb7"
            assert {f[22:38], f[38:54]} == set(sgid)
        else:  # RoCE v2 over IPv4
            assert f[12:14] == b"\x08\x00" and {f[26:30], f[30:34]} == {s[12:] for s in sgid}


def _write(a, b, data: bytes, at: int = 4096) -> None:  # noqa: ANN001
    """An RDMA WRITE of `data` from a's MR to b's at offset `at`, completed successfully."""
    a.mr.write(data, len(data))
    wr = SendWR(wr_id=1, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1,
                sg=[SGE(a.mr.buf, len(data), a.mr.lkey)], send_flags=e.IBV_SEND_SIGNALED)
    wr.set_wr_rdma(b.mr.rkey, b.mr.buf + at)
    a.qp.post_send(wr)
    (wc,) = wait(a)
    assert wc.status == e.IBV_WC_SUCCESS


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark is not installed")
def test_tshark_decodes_roce_v1_frames_as_infiniband(tmp_path: Path) -> None:
    pcap = tmp_path / "v1.pcap"
    w = World.two_hosts(pcap=pcap)
    a, b = make_side(w, "a"), make_side(w, "b")
    for x, y in ((a, b), (b, a)):
        connect_qp(x.qp, y.qp.qp_num, y.ctx.query_gid(1, 0), sgid_index=0)
    _write(a, b, b"v1" * 100, 0)
    w.close()
    out = subprocess.run(["tshark", "-r", str(pcap), "-T", "fields", "-e", "ipv6.src",
                          "-e", "infiniband.grh.dgid", "-e", "infiniband.bth.opcode"],
                         capture_output=True, text=True, timeout=120).stdout.split("\n")
    rows = [r.split("\t") for r in out if r]
    assert [r[2] for r in rows] == ["10", "17"]  # RC RDMA WRITE ONLY, then its ACK
    assert all(r[0] == "" and r[1].startswith("fe80::") for r in rows)  # a GRH, not IPv6


def test_a_frame_of_the_other_roce_version_is_not_taken() -> None:
    """A v1 QP is not answered by a v2 frame with the same GIDs (the link-local v1 and v2
    entries hold one address): counted, not executed."""
    w = World.two_hosts()
    a, b = make_side(w, "a"), make_side(w, "b")
    for x, y in ((a, b), (b, a)):
        connect_qp(x.qp, y.qp.qp_num, y.ctx.query_gid(1, 0), sgid_index=0)  # RoCE v1
    nic = w.nics["b"]
    fb = FrameBuilder(WirePath(MAC_A, MAC_B, link_local_gid(MAC_A), link_local_gid(MAC_B),
                               0xC000))  # the same GIDs as RoCE v2 over IPv6
    frame = fb.build(Opcode.RC_RDMA_WRITE_ONLY, b.qp.qp_num, 0,
                     reth(b.mr.buf, b.mr.rkey, 8), b"\xee" * 8, ackreq=True)
    nic.receive(frame)
    w.env.run(until=w.env.now + 10_000)
    assert nic.counters()["rx.bad_roce_version"] == 1
    assert b.mr.read(8, 0) == bytes(8)
    fb1 = FrameBuilder(WirePath(MAC_A, MAC_B, link_local_gid(MAC_A), link_local_gid(MAC_B),
                                0, roce_v1=True))
    nic.receive(fb1.build(Opcode.RC_RDMA_WRITE_ONLY, b.qp.qp_num, 0,
                          reth(b.mr.buf, b.mr.rkey, 8), b"\xee" * 8, ackreq=True))
    w.env.run(until=w.env.now + 10_000)
    assert b.mr.read(8, 0) == b"\xee" * 8  # the same packet as RoCE v1 is executed


@pytest.mark.parametrize("index", [0, 1, 2, 3])
def test_ud_from_each_gid_and_the_reply_from_the_completion(index: int) -> None:
    """A datagram from each entry arrives; the address handle made from its completion
    (ibv_create_ah_from_wc) names the same entry on the receiver and carries the reply."""
    w = World.two_hosts()
    a, b = Side(w, "a"), Side(w, "b")
    b.recv(1)
    a.recv(2)
    a.send(b, b"hello", ah=AH(a.pd, attr=AHAttr(GlobalRoute(dgid=b.ctx.query_gid(1, index),
                                                             sgid_index=index))))
    (wc,) = b.wait()
    assert wc.status == e.IBV_WC_SUCCESS and b.mr.read(5, 8192 + 40) == b"hello"
    back = AH(b.pd, wc=wc, port_num=1, grh=b.mr.buf + 8192)
    assert back.ah_attr.gr.sgid_index == index
    assert back.ah_attr.gr.dgid == a.ctx.query_gid(1, index)
    b.send(a, b"again", ah=back)
    wcs = a.wait(2)  # its own send's completion, and the reply
    assert [(c.wr_id, c.status) for c in wcs if c.opcode == e.IBV_WC_RECV] == [(2, 0)]
    assert a.mr.read(5, 8192 + 40) == b"again"


def test_a_routed_fabric_drops_roce_v1() -> None:
    """RoCE v1 is not routable: the fabric's switches route IP and drop it (counted), as a
    routed data-centre fabric does; RoCE v2 through the same switch arrives."""
    w = World.from_topology(TopologySpec(shape=Shape.STAR, hosts=2))
    h0, h1 = list(w.nics)
    a, b = Side(w, h0), Side(w, h1)
    b.recv(1)
    b.recv(2)
    a.send(b, b"v1", ah=AH(a.pd, attr=AHAttr(GlobalRoute(dgid=b.ctx.query_gid(1, 2),
                                                          sgid_index=2))))
    assert b.wait(limit_ns=50_000) == []
    (sw,) = w.switches.values()
    assert sw.counters()["drop.not_ip"] == 1
    a.send(b, b"v2")  # (Side's address handle: RoCE v2 over IPv4)
    (wc,) = b.wait()
    assert wc.status == e.IBV_WC_SUCCESS and b.mr.read(2, 8192 + 40) == b"v2"
