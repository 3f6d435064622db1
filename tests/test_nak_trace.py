"""Every NAK the responder sends is on the wire as IBA defines it, and tshark shows it."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from nicsim.driver import enums as e
from nicsim.driver.user.verbs import SGE, RecvWR, SendWR

from nicsim.fabric.faults import FaultConfig
from nicsim.fabric.pcap import check_pcap
from nicsim.testing.rdma import pair, settle, wait


def _write(a, b, rkey=None, size=64, addr=None):
    wr = SendWR(opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(a.mr.buf, size, a.mr.lkey)])
    wr.set_wr_rdma(b.mr.rkey if rkey is None else rkey, b.mr.buf if addr is None else addr)
    return wr


def _syndromes(path) -> list[int]:
    out = subprocess.run(
        ["tshark", "-r", str(path), "-Y", "infiniband.bth.opcode == 17", "-T", "fields",
         "-e", "infiniband.aeth.syndrome"], capture_output=True, text=True, check=True).stdout
    return [int(x, 0) for x in out.split()]


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark is not installed")
def test_nak_syndromes_in_the_capture(tmp_path):
    # 1. Remote access error: a bad rkey.
    p1 = tmp_path / "access.pcap"
    w, a, b = pair(pcap=p1)
    a.qp.post_send(_write(a, b, rkey=0xBAD00))
    assert wait(a)[0].status == e.IBV_WC_REM_ACCESS_ERR
    w.close()
    # 2. Invalid request: a misaligned atomic.
    p2 = tmp_path / "invalid.pcap"
    w, a, b = pair(pcap=p2)
    wr = SendWR(opcode=e.IBV_WR_ATOMIC_FETCH_AND_ADD, num_sge=1,
                sg=[SGE(a.mr.buf, 8, a.mr.lkey)])
    wr.set_wr_atomic(b.mr.rkey, b.mr.buf + 3, 1)
    a.qp.post_send(wr)
    assert wait(a)[0].status == e.IBV_WC_REM_INV_REQ_ERR
    w.close()
    # 3. Remote operational error: the receive WQE's lkey is bad.
    p3 = tmp_path / "op.pcap"
    w, a, b = pair(pcap=p3)
    b.qp.post_recv(RecvWR(num_sge=1, sg=[SGE(b.mr.buf, 64, 0xDEAD00)]))
    a.qp.post_send(SendWR(opcode=e.IBV_WR_SEND, num_sge=1, sg=[SGE(a.mr.buf, 8, a.mr.lkey)]))
    assert wait(a)[0].status == e.IBV_WC_REM_OP_ERR
    w.close()
    # 4. RNR NAK (with the responder's min_rnr_timer), then success once a receive is posted.
    p4 = tmp_path / "rnr.pcap"
    w, a, b = pair(pcap=p4, min_rnr_timer=3)
    a.qp.post_send(SendWR(opcode=e.IBV_WR_SEND, num_sge=1, sg=[SGE(a.mr.buf, 8, a.mr.lkey)]))
    w.hosts["b"].spend(50_000)
    b.qp.post_recv(RecvWR(num_sge=1, sg=[SGE(b.mr.buf, 64, b.mr.lkey)]))
    assert wait(a)[0].status == e.IBV_WC_SUCCESS
    w.close()
    # 5. PSN sequence error: lose packets of a long WRITE.
    p5 = tmp_path / "seq.pcap"
    w, a, b = pair(pcap=p5, mr_len=1 << 20, faults=FaultConfig(loss=0.2, seed=5), timeout=8)
    for _ in range(4):
        a.qp.post_send(_write(a, b, size=20000))
        assert wait(a, limit_ns=1e9)[0].status == e.IBV_WC_SUCCESS
    settle(w)
    w.close()

    assert 0x62 in _syndromes(p1)  # NAK: remote access error
    assert 0x61 in _syndromes(p2)  # NAK: invalid request
    assert 0x63 in _syndromes(p3)  # NAK: remote operational error
    rnr = [s for s in _syndromes(p4) if s >> 5 == 1]
    assert rnr and all(s & 0x1F == 3 for s in rnr)  # RNR NAK carrying the timer code
    assert 0x60 in _syndromes(p5)  # NAK: PSN sequence error
    # Every frame in every capture is well formed, with a right ICRC.
    for p in (p1, p2, p3, p4, p5):
        rep = check_pcap(p)
        assert rep.frames and not rep.bad, rep.bad
