"""UC QPs (IBA 9.8): SEND and RDMA WRITE (+IMM) on the UC opcodes, no ACKs, a WQE complete
when its last packet is sent, a lost packet drops its message and the responder resyncs on
the next FIRST/ONLY, messages it cannot execute dropped silently, misuse answered as rxe
answers it."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from nicsim.driver import enums as e
from nicsim.driver.user.errors import PyverbsRDMAError
from nicsim.driver.user.unsupported import SrqAttr, SrqInitAttr
from nicsim.driver.user.verbs import (
    CQ,
    MR,
    PD,
    QP,
    SGE,
    SRQ,
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

from nicsim.hwif import VendorErr
from nicsim.testing.rdma import Side, connect, drain, make_side, settle, wait
from nicsim.workloads.endpoint import ALL_ACCESS
from nicsim.world import World

MTU = 1024
_BTH = 42  # Ethernet 14 + IPv4 20 + UDP 8


class DropFrames:
    """Fault injection for one link direction: loses the frames numbered in `drop` (from 1,
    in the order they are sent)."""

    def __init__(self, drop: set[int]) -> None:
        self.drop = drop
        self.n = 0
        self.counters = {"lost": 0, "corrupted": 0, "duplicated": 0, "reordered": 0}

    def apply(self, frame: bytes) -> list[tuple[bytes, float]]:
        self.n += 1
        if self.n in self.drop:
            self.counters["lost"] += 1
            return []
        return [(frame, 0.0)]


def uc_pair(pcap: str | None = None, drop_a_to_b: set[int] | None = None
            ) -> tuple[World, Side, Side]:
    w = World.two_hosts(seed=0, pcap=pcap)
    if drop_a_to_b is not None:
        (link,) = w.links
        link.faults = [DropFrames(drop_a_to_b), DropFrames(set())]
    a = make_side(w, "a", 1 << 16, qp_type=e.IBV_QPT_UC)
    b = make_side(w, "b", 1 << 16, qp_type=e.IBV_QPT_UC)
    connect(a, b, e.IBV_MTU_1024)
    connect(b, a, e.IBV_MTU_1024)
    return w, a, b


def send(s: Side, off: int, n: int, wr_id: int, op: int = e.IBV_WR_SEND, imm: int = 0,
         raddr: int = 0, rkey: int = 0) -> None:
    wr = SendWR(wr_id=wr_id, opcode=op, num_sge=1, sg=[SGE(s.mr.buf + off, n, s.mr.lkey)],
                imm_data=imm)
    wr.set_wr_rdma(rkey, raddr)
    s.qp.post_send(wr)


def recv(s: Side, off: int, n: int, wr_id: int) -> None:
    s.qp.post_recv(RecvWR(wr_id=wr_id, num_sge=1, sg=[SGE(s.mr.buf + off, n, s.mr.lkey)]))


def pattern(n: int, seed: int) -> bytes:
    return bytes((i * 7 + seed) & 0xFF for i in range(n))


def responder(w: World, host: str) -> dict[str, int]:
    return {k.split(".", 1)[1]: v for k, v in w.nics[host].counters().items()
            if k.startswith("responder.")}


def opcodes(pcap: Path) -> list[tuple[str, int]]:
    """(sender IP's last byte as 'a'/'b', BTH opcode) of every frame."""
    out = []
    for frame, _meta in RawPcapReader(str(pcap)):
        out.append(("a" if frame[29] == 1 else "b", frame[_BTH]))
    return out


def test_send_and_write_with_imm_place_their_bytes_on_uc_opcodes_without_acks(
        tmp_path: Path) -> None:
    pcap = tmp_path / "uc.pcap"
    w, a, b = uc_pair(pcap=str(pcap))
    msg, wdata = pattern(2500, 1), pattern(2100, 2)
    a.mr.write(msg + wdata, len(msg) + len(wdata))
    recv(b, 8192, 4096, 11)
    recv(b, 0, 0, 12)  # the WRITE's immediate only needs a WQE
    send(a, 0, len(msg), 1)
    send(a, len(msg), len(wdata), 2, e.IBV_WR_RDMA_WRITE_WITH_IMM, 0xCAFE,
         b.mr.buf + 20000, b.mr.rkey)
    sw = wait(a, 2)
    assert [(c.wr_id, c.status, c.opcode) for c in sw] == [
        (1, e.IBV_WC_SUCCESS, e.IBV_WC_SEND), (2, e.IBV_WC_SUCCESS, e.IBV_WC_RDMA_WRITE)]
    rw = wait(b, 2)
    assert [(c.wr_id, c.status, c.opcode, c.byte_len) for c in rw] == [
        (11, e.IBV_WC_SUCCESS, e.IBV_WC_RECV, 2500),
        (12, e.IBV_WC_SUCCESS, e.IBV_WC_RECV_RDMA_WITH_IMM, 2100)]
    assert rw[1].imm_data == 0xCAFE and rw[1].wc_flags & e.IBV_WC_WITH_IMM
    settle(w)
    assert b.mr.read(2500, 8192) == msg
    assert b.mr.read(2100, 20000) == wdata
    w.close()
    frames = opcodes(pcap)
    # 3 SEND packets then 3 WRITE packets, UC opcodes (IBA table 38), and nothing back.
    assert frames == [("a", 0x20), ("a", 0x21), ("a", 0x22),
                      ("a", 0x26), ("a", 0x27), ("a", 0x29)]
    assert responder(w, "b")["acks_sent"] == 0


def test_a_lost_middle_packet_drops_its_message_and_the_next_arrives_whole() -> None:
    # Three 3-packet SENDs; the a->b link loses frame 5, the MIDDLE of the second.
    w, a, b = uc_pair(drop_a_to_b={5})
    msgs = [pattern(2500, s) for s in (3, 4, 5)]
    a.mr.write(b"".join(msgs), 7500)
    for i in range(3):
        recv(b, 16384 + i * 4096, 4096, 10 + i)
    for i in range(3):
        send(a, i * 2500, 2500, i + 1)
    sw = wait(a, 3)
    # The sender hears of no loss: every WQE completed when its last packet left.
    assert [(c.wr_id, c.status) for c in sw] == [(i, e.IBV_WC_SUCCESS) for i in (1, 2, 3)]
    rw = wait(b, 2)
    assert drain(b, 100_000) == []
    # Message 2 is lost; message 3 fills the receive WQE message 2 had begun (WQE 11), from
    # its start; WQE 12 stays posted.
    assert [(c.wr_id, c.status, c.byte_len) for c in rw] == [
        (10, e.IBV_WC_SUCCESS, 2500), (11, e.IBV_WC_SUCCESS, 2500)]
    settle(w)
    assert b.mr.read(2500, 16384) == msgs[0]
    assert b.mr.read(2500, 16384 + 4096) == msgs[2]
    c = responder(w, "b")
    assert (c["uc_msgs_dropped"], c["uc_pkts_dropped"], c["uc_resyncs"]) == (1, 1, 1)
    assert c["recv_completions"] == 2 and c["acks_sent"] == 0 and c["naks_sent"] == 0
    # The QP is still in RTS and WQE 12 takes the next message.
    send(a, 0, 2500, 4)
    wait(a, 1)
    assert [(x.wr_id, x.byte_len) for x in wait(b, 1)] == [(12, 2500)]


def test_a_lost_first_packet_drops_the_message_until_the_next_first() -> None:
    # Two 3-packet WRITE_WITH_IMMs; frame 1 (the first's FIRST) is lost: its MIDDLE and LAST
    # are dropped, the second completes with its immediate.
    w, a, b = uc_pair(drop_a_to_b={1})
    data = pattern(2500, 6)
    a.mr.write(data, 2500)
    recv(b, 0, 0, 20)
    recv(b, 0, 0, 21)
    for i in range(2):
        send(a, 0, 2500, i + 1, e.IBV_WR_RDMA_WRITE_WITH_IMM, 100 + i,
             b.mr.buf + 8192 * (i + 1), b.mr.rkey)
    assert [c.status for c in wait(a, 2)] == [e.IBV_WC_SUCCESS] * 2
    rw = wait(b, 1)
    assert drain(b, 100_000) == []
    assert [(c.wr_id, c.imm_data, c.byte_len) for c in rw] == [(20, 101, 2500)]
    settle(w)
    assert b.mr.read(2500, 16384) == data
    assert b.mr.read(2500, 8192) == bytes(2500)  # nothing of the lost message was placed
    c = responder(w, "b")
    assert (c["uc_msgs_dropped"], c["uc_pkts_dropped"], c["uc_resyncs"]) == (0, 2, 1)


def test_messages_the_responder_cannot_execute_are_dropped_silently() -> None:
    w, a, b = uc_pair()
    a.mr.write(pattern(3000, 7), 3000)
    # No receive WQE (RC would RNR NAK), a bad R_Key (RC: NAK remote access), a SEND longer
    # than its receive buffer (RC: NAK invalid request): the sender sees SUCCESS each time,
    # the receiver nothing, and its QP stays in RTS.
    send(a, 0, 100, 1)
    send(a, 0, 100, 2, e.IBV_WR_RDMA_WRITE, 0, b.mr.buf, b.mr.rkey ^ 0x100)
    assert [c.status for c in wait(a, 2)] == [e.IBV_WC_SUCCESS] * 2
    recv(b, 0, 1000, 30)
    send(a, 0, 3000, 3)
    assert [c.status for c in wait(a, 1)] == [e.IBV_WC_SUCCESS]
    assert drain(b, 100_000) == []
    c = responder(w, "b")
    assert c["uc_msgs_dropped"] == 3 and c["naks_sent"] == c["rnr_naks_sent"] == 0
    assert b.qp.qp_state == e.IBV_QPS_RTS
    # WQE 30 was never completed: the next message that fits takes it.
    send(a, 0, 800, 4)
    wait(a, 1)
    assert [(x.wr_id, x.status, x.byte_len) for x in wait(b, 1)] == [
        (30, e.IBV_WC_SUCCESS, 800)]
    settle(w)
    assert b.mr.read(800) == pattern(3000, 7)[:800]


@pytest.mark.parametrize("op", [e.IBV_WR_RDMA_READ, e.IBV_WR_ATOMIC_FETCH_AND_ADD,
                                e.IBV_WR_ATOMIC_CMP_AND_SWP, e.IBV_WR_SEND_WITH_INV])
def test_read_atomic_and_send_with_invalidate_complete_with_local_qp_operation_error(
        op: int) -> None:
    w, a, b = uc_pair()
    send(a, 0, 8, 1, op, 0, b.mr.buf, b.mr.rkey)
    send(a, 0, 8, 2)
    wcs = wait(a, 2)
    assert [(c.wr_id, c.status) for c in wcs] == [(1, e.IBV_WC_LOC_QP_OP_ERR),
                                                   (2, e.IBV_WC_WR_FLUSH_ERR)]
    assert wcs[0].vendor_err == VendorErr.BAD_OPCODE
    assert w.nics["a"].counters()["port.tx_frames"] == 0  # nothing went on the wire


@pytest.mark.parametrize("attr,stage", [("timeout", "RTS"), ("retry_cnt", "RTS"),
                                        ("rnr_retry", "RTS"), ("max_rd_atomic", "RTS"),
                                        ("max_dest_rd_atomic", "RTR"),
                                        ("min_rnr_timer", "RTR"), ("qkey", "INIT")])
def test_rc_and_ud_attributes_on_a_uc_modify_are_einval(attr: str, stage: str) -> None:
    w = World.two_hosts(seed=0)
    a = make_side(w, "a", qp_type=e.IBV_QPT_UC)
    b = make_side(w, "b", qp_type=e.IBV_QPT_UC)
    mask_bit = {"timeout": e.IBV_QP_TIMEOUT, "retry_cnt": e.IBV_QP_RETRY_CNT,
                "rnr_retry": e.IBV_QP_RNR_RETRY, "max_rd_atomic": e.IBV_QP_MAX_QP_RD_ATOMIC,
                "max_dest_rd_atomic": e.IBV_QP_MAX_DEST_RD_ATOMIC,
                "min_rnr_timer": e.IBV_QP_MIN_RNR_TIMER, "qkey": e.IBV_QP_QKEY}[attr]
    attr_ = QPAttr(qp_access_flags=ALL_ACCESS, path_mtu=e.IBV_MTU_1024,
                   dest_qp_num=b.qp.qp_num,
                   ah_attr=AHAttr(GlobalRoute(dgid=b.ctx.query_gid())))
    masks = {"INIT": e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_ACCESS_FLAGS,
             "RTR": e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN | e.IBV_QP_RQ_PSN,
             "RTS": e.IBV_QP_SQ_PSN}
    states = {"INIT": e.IBV_QPS_INIT, "RTR": e.IBV_QPS_RTR, "RTS": e.IBV_QPS_RTS}
    for st in ("INIT", "RTR", "RTS"):
        attr_.qp_state = states[st]
        if st == stage:
            with pytest.raises(PyverbsRDMAError) as ex:
                a.qp.modify(attr_, e.IBV_QP_STATE | masks[st] | mask_bit)
            assert ex.value.error_code == errno.EINVAL
        a.qp.modify(attr_, e.IBV_QP_STATE | masks[st])
    assert a.qp.qp_state == e.IBV_QPS_RTS


def test_on_an_srq_the_wqe_a_lost_message_took_serves_the_next_and_flushes_with_the_qp() -> None:
    w = World.two_hosts(seed=0)
    (link,) = w.links
    link.faults = [DropFrames({2}), DropFrames(set())]  # the MIDDLE of message 1
    a = make_side(w, "a", 1 << 16, qp_type=e.IBV_QPT_UC)
    ctx = Context("nsnic0", host=w.hosts["b"])
    pd = PD(ctx)
    cq = CQ(ctx, 64)
    srq = SRQ(pd, SrqInitAttr(SrqAttr(max_wr=8, max_sge=1)))
    mr = MR(pd, 1 << 16, ALL_ACCESS)
    qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_UC, scq=cq, rcq=cq, srq=srq,
                           cap=QPCap(8, 0, 1, 0, 0)))
    b = Side(ctx, pd, cq, qp, mr)
    connect(a, b, e.IBV_MTU_1024)
    connect(b, a, e.IBV_MTU_1024)
    for i in range(3):
        srq.post_recv(RecvWR(wr_id=50 + i, num_sge=1,
                             sg=[SGE(mr.buf + 4096 * i, 4096, mr.lkey)]))
    msgs = [pattern(2500, s) for s in (8, 9)]
    a.mr.write(b"".join(msgs), 5000)
    send(a, 0, 2500, 1)  # 3 packets: its MIDDLE is lost
    send(a, 2500, 2500, 2)
    assert [c.status for c in wait(a, 2)] == [e.IBV_WC_SUCCESS] * 2
    # Message 2 fills WQE 50, which message 1 had taken from the SRQ.
    assert [(c.wr_id, c.byte_len) for c in wait(b, 1)] == [(50, 2500)]
    settle(w)
    assert mr.read(2500) == msgs[1]
    # Message 3 is lost too: WQE 51 stays with the QP; the QP's error flushes it (only it:
    # WQE 52 is the SRQ's and stays posted).
    link.faults[0].drop = {link.faults[0].n + 2}
    send(a, 0, 2500, 3)
    wait(a, 1)
    settle(w, 50_000)
    attr = QPAttr(qp_state=e.IBV_QPS_ERR)
    qp.modify(attr, e.IBV_QP_STATE)
    assert [(c.wr_id, c.status) for c in wait(b, 1)] == [(51, e.IBV_WC_WR_FLUSH_ERR)]
    assert drain(b, 50_000) == []
