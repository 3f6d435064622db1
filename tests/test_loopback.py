"""Loopback inside the NIC: traffic between two QPs of one device (to the device's own GID)
turns around after the transmit MAC, never reaches the link, and is in the port's pcap."""

from __future__ import annotations

from pathlib import Path

from nicsim.driver import enums as e
from nicsim.driver.user.verbs import (
    CQ,
    MR,
    PD,
    QP,
    SGE,
    AHAttr,
    Context,
    GlobalRoute,
    QPAttr,
    QPCap,
    QPInitAttr,
    RecvWR,
    SendWR,
)
from scapy.utils import RawPcapReader

from nicsim.fabric.pcap import check_pcap
from nicsim.workloads.endpoint import roce_v2_gid
from nicsim.world import World

ACC = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ


def wait(cq: CQ, n: int, limit_ns: float = 10e6) -> list:
    env = cq.ctx.host.env
    deadline = env.now + limit_ns
    out: list = []
    while len(out) < n:
        out += cq.poll(n - len(out))[1]
        assert env.now < deadline, f"only {len(out)} of {n} completions"
    return out


def _pair(w: World) -> tuple[Context, CQ, QP, QP, MR, MR]:
    ctx = Context("nsnic0", host=w.hosts["a"])
    pd = PD(ctx)
    cq = CQ(ctx, 64)
    qa, qb = (QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=QPCap(16, 16, 2, 2)))
              for _ in range(2))
    index, gid = roce_v2_gid(ctx)  # RoCE v2 over the host's IPv4 address
    for x, y in ((qa, qb), (qb, qa)):
        x.to_rts(QPAttr(qp_access_flags=ACC, dest_qp_num=y.qp_num,
                        ah_attr=AHAttr(GlobalRoute(dgid=gid, sgid_index=index))))
    return ctx, cq, qa, qb, MR(pd, 16384, ACC), MR(pd, 16384, ACC)


def test_write_and_send_loop_back_inside_the_nic(tmp_path: Path) -> None:
    pcap = tmp_path / "lb.pcap"
    w = World.two_hosts(pcap=pcap)
    ctx, cq, qa, qb, ma, mb = _pair(w)
    data = bytes(range(256)) * 12  # 3 packets at MTU 1024
    ma.write(data, len(data))
    wr = SendWR(wr_id=1, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1,
                sg=[SGE(ma.buf, len(data), ma.lkey)])
    wr.set_wr_rdma(mb.rkey, mb.buf + 100)
    qa.post_send(wr)
    (wc,) = wait(cq, 1)
    assert (wc.wr_id, wc.status, wc.byte_len) == (1, e.IBV_WC_SUCCESS, len(data))
    assert mb.read(len(data), 100) == data
    # A SEND the other way, into a posted receive.
    qa.post_recv(RecvWR(wr_id=7, num_sge=1, sg=[SGE(ma.buf + 8192, 64, ma.lkey)]))
    mb.write(b"pong" * 4, 16)
    qb.post_send(SendWR(wr_id=2, num_sge=1, sg=[SGE(mb.buf, 16, mb.lkey)]))
    wcs = sorted(wait(cq, 2), key=lambda c: c.wr_id)
    assert [(c.wr_id, c.status) for c in wcs] == [(2, 0), (7, 0)]
    assert wcs[1].opcode == e.IBV_WC_RECV and wcs[1].byte_len == 16
    assert ma.read(16, 8192) == b"pong" * 4
    c = w.nics["a"].counters()
    # 3 WRITE packets + SEND, and their ACKs: on the NIC's loopback, none on the cable.
    assert c["port.loopback_frames"] >= 5 and c["port.tx_frames"] == 0
    assert w.nics["b"].counters()["rx.packets"] == 0
    w.close()
    frames = [bytes(f) for f, _ in RawPcapReader(str(pcap))]
    assert len(frames) == c["port.loopback_frames"]
    ip = bytes([10, 0, 0, 1])
    assert all(f[0:6] == f[6:12] and f[26:30] == ip and f[30:34] == ip for f in frames)
    assert not check_pcap(pcap).bad


def test_loopback_takes_serialization_time_and_a_loopback_delay() -> None:
    w = World.two_hosts()
    _, cq, qa, _, ma, mb = _pair(w)
    n = 16 * 1024
    wr = SendWR(opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(ma.buf, n, ma.lkey)])
    wr.set_wr_rdma(mb.rkey, mb.buf)
    t0 = w.env.now
    qa.post_send(wr)
    assert wait(cq, 1)[0].status == e.IBV_WC_SUCCESS
    # 16 packets of 1 KiB at 100 Gb/s take at least their wire time through the loop.
    assert w.env.now - t0 > n * 8 / 100


def test_rtr_to_own_gid_resolves_to_own_mac() -> None:
    w = World.two_hosts()
    _, _, qa, _, _, _ = _pair(w)
    attr, _ = qa.query()
    assert attr.qp_state == e.IBV_QPS_RTS
    q = w.nics["a"].qps[qa.qp_num]
    assert q.dmac == w.nics["a"].mac
