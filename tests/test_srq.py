"""Shared receive queues (IBA 10.2.9): several RC QPs take receive WQEs from one SRQ in ring
order, the SRQ's PD checks its L_Keys, the SRQ limit raises its asynchronous event once, a
failing QP leaves the SRQ's WQEs to the others, and ACKs of a QP on an SRQ carry no credits."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from nicsim.driver import enums as e
from nicsim.driver.abi import DestroySrq, UverbsError
from nicsim.driver.user.errors import PyverbsRDMAError
from nicsim.driver.user.unsupported import SrqAttr, SrqInitAttr
from nicsim.driver.user.verbs import (
    MR,
    PD,
    SGE,
    SRQ,
    RecvWR,
)
from scapy.utils import RawPcapReader

from nicsim.nic.aeth import Syndrome
from nicsim.testing.srq import send, srq_world
from nicsim.wire import parse
from nicsim.wire.opcodes import Opcode
from nicsim.workloads.endpoint import ALL_ACCESS


def test_two_qps_take_wqes_from_one_srq_in_ring_order(tmp_path: Path) -> None:
    pcap = tmp_path / "srq.pcap"
    w, (c0, c1), s = srq_world(pcap)
    for i in range(4):
        s.post(100 + i, 1024 * i)
    send(c0, b"first from qp0")
    wcs = s.wait(1)  # one at a time: the WQE order follows the messages' order
    send(c1, b"then qp1")
    wcs += s.wait(1)
    send(c0, b"qp0 again")
    wcs += s.wait(1)
    assert [(wc.wr_id, wc.qp_num, wc.byte_len, wc.status) for wc in wcs] == [
        (100, s.qps[0].qp_num, 14, 0), (101, s.qps[1].qp_num, 8, 0),
        (102, s.qps[0].qp_num, 9, 0)]
    assert s.mr.read(14, 0) == b"first from qp0"
    assert s.mr.read(8, 1024) == b"then qp1" and s.mr.read(9, 2048) == b"qp0 again"
    assert s.srq.query().max_wr >= 16
    w.close()
    # ACKs of a QP on an SRQ carry the "no credits" code: the SRQ is not the QP's to count.
    acks = [p for p in (parse(bytes(f)) for f, _ in RawPcapReader(str(pcap)))
            if p.opcode == Opcode.RC_ACKNOWLEDGE and p.dqpn in (c0.qp.qp_num, c1.qp.qp_num)]
    assert acks and all(p.aeth_syndrome == Syndrome.CREDITS_UNLIMITED for p in acks)


def test_srq_limit_event_fires_once_when_wqes_fall_below_it() -> None:
    _w, (c0, _c1), s = srq_world()
    for i in range(10):
        s.post(i, 256 * i)
    s.srq.modify(SrqAttr(srq_limit=7), e.IBV_SRQ_LIMIT)
    assert s.srq.query().srq_limit == 7
    for k in range(4):  # 10 -> 6 WQEs: below 7 after the fourth
        send(c0, b"m%d" % k)
        assert len(s.wait(1)) == 1
    ev = s.ctx.get_async_event()
    assert ev.event_type == e.IBV_EVENT_SRQ_LIMIT_REACHED and ev.element is s.srq
    assert s.srq.query().srq_limit == 0  # disarmed by the event (IBA 11.6.3.2)
    with pytest.raises(PyverbsRDMAError) as ei:
        s.srq.modify(SrqAttr(srq_limit=1000), e.IBV_SRQ_LIMIT)
    assert ei.value.error_code == errno.EINVAL
    with pytest.raises(PyverbsRDMAError) as ei:  # (resizing: tests/test_resize.py)
        s.srq.modify(SrqAttr(max_wr=1 << 30), e.IBV_SRQ_MAX_WR)
    assert ei.value.error_code == errno.EINVAL


def test_bad_lkey_in_srq_fails_only_that_qp() -> None:
    _w, (c0, c1), s = srq_world()
    other_pd_mr = MR(PD(s.ctx), 4096, ALL_ACCESS)  # another PD: not the SRQ's
    s.post(1, 0, lkey=other_pd_mr.lkey)
    s.post(2, 512)
    send(c0, b"bad")
    (wc,) = s.wait(1)
    assert (wc.wr_id, wc.status, wc.qp_num) == (1, e.IBV_WC_LOC_PROT_ERR, s.qps[0].qp_num)
    assert s.qps[0].query()[0].qp_state == e.IBV_QPS_ERR
    # The QP's error does not flush the SRQ: QP 1 still gets WQE 2.
    send(c1, b"good")
    (wc,) = s.wait(1)
    assert (wc.wr_id, wc.qp_num) == (2, s.qps[1].qp_num) and s.mr.read(4, 512) == b"good"


def test_srq_misuse() -> None:
    _w, _c, s = srq_world()
    with pytest.raises(PyverbsRDMAError) as ei:  # a QP on an SRQ has no RQ of its own
        s.qps[0].post_recv(RecvWR(1, 1, [SGE(s.mr.buf, 8, s.mr.lkey)]))
    assert ei.value.error_code == errno.EINVAL
    with pytest.raises(UverbsError) as ue:  # QPs still receive from it
        s.ctx.file.write(DestroySrq(s.srq.handle))
    assert ue.value.errno == errno.EBUSY
    for i in range(16):
        s.post(i, 0)
    with pytest.raises(PyverbsRDMAError) as ei:  # 16 asked for: the ring has 31 slots
        for i in range(16, 40):
            s.post(i, 0)
    assert ei.value.error_code == errno.ENOMEM
    with pytest.raises(PyverbsRDMAError) as ei:
        SRQ(s.pd, SrqInitAttr(SrqAttr(max_wr=1 << 20)))
    assert ei.value.error_code == errno.EINVAL
    s.srq.close()  # closes its QPs first
    assert s.qps[0].closed and s.qps[1].closed and s.srq.closed
