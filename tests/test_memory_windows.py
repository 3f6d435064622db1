"""Memory windows (IBA 10.6.7): type 1 bound by ibv_bind_mw, type 2 by a BIND_MW work
request; remote access through a window is limited to its range and rights; LOCAL_INV, SEND
with invalidate, a zero-length rebind and dealloc revoke it."""

from __future__ import annotations

import struct
from pathlib import Path

from nicsim.driver import enums as e
from nicsim.driver.user.unsupported import MWBind, MWBindInfo
from nicsim.driver.user.verbs import MR, MW, PD, SGE, RecvWR, SendWR
from scapy.utils import RawPcapReader

from nicsim.testing.rdma import ALL_ACCESS, connect, make_side, settle, wait
from nicsim.wire import parse
from nicsim.wire.opcodes import Opcode
from nicsim.workloads.endpoint import Side
from nicsim.world import World

RW, RR = e.IBV_ACCESS_REMOTE_WRITE, e.IBV_ACCESS_REMOTE_READ
BINDABLE = ALL_ACCESS | e.IBV_ACCESS_MW_BIND


def _pair(pcap: Path | None = None) -> tuple[World, Side, Side]:
    w = World.two_hosts(seed=0, pcap=pcap)
    a, b = make_side(w, "a"), make_side(w, "b", access=BINDABLE)
    connect(a, b)
    connect(b, a)
    return w, a, b


def _bind2(b: Side, mw: MW, off: int, length: int, rights: int = RW,
           mr: MR | None = None) -> tuple[int, int]:
    """Bind type 2 window `mw` over b's MR; returns (the new rkey, the completion status)."""
    mr = mr or b.mr
    wr = SendWR(wr_id=77, opcode=e.IBV_WR_BIND_MW)
    wr.set_bind_wr(mw, MWBindInfo(mr, mr.buf + off, length, rights))
    b.qp.post_send(wr)
    (wc,) = wait(b)
    assert wc.wr_id == 77
    if wc.status == e.IBV_WC_SUCCESS:
        assert wc.opcode == e.IBV_WC_BIND_MW
    return wr.rkey, wc.status


def _op(a: Side, opcode: int, rkey: int, raddr: int, data: bytes = b"",
        length: int = 0) -> int:
    n = len(data) or length
    a.mr.write(data, len(data))
    wr = SendWR(wr_id=5, opcode=opcode, num_sge=1, sg=[SGE(a.mr.buf, n, a.mr.lkey)])
    wr.set_wr_rdma(rkey, raddr)
    a.qp.post_send(wr)
    return wait(a)[0].status


def test_type2_window_grants_its_range_and_rights_only() -> None:
    w, a, b = _pair()
    mw = MW(b.pd, e.IBV_MW_TYPE_2)
    key, st = _bind2(b, mw, 4096, 1024)
    assert st == e.IBV_WC_SUCCESS and key >> 8 == mw.rkey >> 8 and key != mw.rkey
    assert _op(a, e.IBV_WR_RDMA_WRITE, key, b.mr.buf + 4096 + 10, b"through the window") \
        == e.IBV_WC_SUCCESS
    settle(w)
    assert b.mr.read(18, 4096 + 10) == b"through the window"
    # Outside its range, a right it lacks, and the MR's own old key for this QP: refused.
    assert _op(a, e.IBV_WR_RDMA_WRITE, key, b.mr.buf + 4096 + 1020, b"12345678") == \
        e.IBV_WC_REM_ACCESS_ERR


def test_window_rights_are_the_windows_not_the_mrs() -> None:
    _w, a, b = _pair()
    mw = MW(b.pd, e.IBV_MW_TYPE_2)
    key, _ = _bind2(b, mw, 0, 4096, rights=RW)
    assert _op(a, e.IBV_WR_RDMA_READ, key, b.mr.buf, length=8) == e.IBV_WC_REM_ACCESS_ERR


def test_local_invalidate_revokes_a_type2_window() -> None:
    w, a, b = _pair()
    mw = MW(b.pd, e.IBV_MW_TYPE_2)
    key, _ = _bind2(b, mw, 0, 4096)
    inv = SendWR(wr_id=8, opcode=e.IBV_WR_LOCAL_INV)
    inv.imm_data = key  # (imm_data and invalidate_rkey share a field, as in ibv_send_wr)
    b.qp.post_send(inv)
    (wc,) = wait(b)
    assert (wc.status, wc.opcode) == (e.IBV_WC_SUCCESS, e.IBV_WC_LOCAL_INV)
    b.mr.write(b"\x00" * 8, 8)
    assert _op(a, e.IBV_WR_RDMA_WRITE, key, b.mr.buf, b"revoked!") == e.IBV_WC_REM_ACCESS_ERR
    settle(w)
    assert b.mr.read(8) == bytes(8)


def test_send_with_invalidate_frees_the_window_at_the_receiver(tmp_path: Path) -> None:
    pcap = tmp_path / "inv.pcap"
    w, a, b = _pair(pcap)
    mw = MW(b.pd, e.IBV_MW_TYPE_2)
    key, _ = _bind2(b, mw, 0, 4096)
    b.qp.post_recv(RecvWR(3, 1, [SGE(b.mr.buf + 8192, 64, b.mr.lkey)]))
    a.mr.write(b"bye", 3)
    wr = SendWR(wr_id=9, opcode=e.IBV_WR_SEND_WITH_INV, num_sge=1,
                sg=[SGE(a.mr.buf, 3, a.mr.lkey)])
    wr.imm_data = key
    a.qp.post_send(wr)
    assert wait(a)[0].status == e.IBV_WC_SUCCESS
    (rwc,) = wait(b)
    assert rwc.wc_flags & e.IBV_WC_WITH_INV and rwc.imm_data == key and rwc.byte_len == 3
    assert _op(a, e.IBV_WR_RDMA_WRITE, key, b.mr.buf, b"late") == e.IBV_WC_REM_ACCESS_ERR
    w.close()
    inv = [p for p in (parse(bytes(f)) for f, _ in RawPcapReader(str(pcap)))
           if p.opcode == Opcode.RC_SEND_ONLY_WITH_INVALIDATE]
    assert len(inv) == 1 and inv[0].ieth_rkey == key


def test_send_with_invalidate_of_a_non_window_key_is_an_invalid_request() -> None:
    _w, a, b = _pair()
    b.qp.post_recv(RecvWR(3, 1, [SGE(b.mr.buf, 64, b.mr.lkey)]))
    wr = SendWR(wr_id=9, opcode=e.IBV_WR_SEND_WITH_INV, num_sge=1,
                sg=[SGE(a.mr.buf, 3, a.mr.lkey)])
    wr.imm_data = b.mr.rkey  # an MR's key cannot be invalidated remotely
    a.qp.post_send(wr)
    assert wait(a)[0].status == e.IBV_WC_REM_INV_REQ_ERR
    assert wait(b)[0].status == e.IBV_WC_REM_INV_REQ_ERR


def test_type1_bind_rebind_to_zero_and_dealloc() -> None:
    w, a, b = _pair()
    mw = MW(b.pd, e.IBV_MW_TYPE_1)
    first = mw.rkey
    b.qp.bind_mw(mw, MWBind(MWBindInfo(b.mr, b.mr.buf, 8192, RW | RR),
                            e.IBV_SEND_SIGNALED))
    (wc,) = wait(b)
    assert (wc.status, wc.opcode) == (e.IBV_WC_SUCCESS, e.IBV_WC_BIND_MW)
    assert mw.rkey != first and mw.rkey >> 8 == first >> 8
    b.mr.write(struct.pack("<Q", 42), 8, 16)
    assert _op(a, e.IBV_WR_RDMA_READ, mw.rkey, b.mr.buf + 16, length=8) == e.IBV_WC_SUCCESS
    settle(w)
    assert a.mr.read(8) == struct.pack("<Q", 42)
    b.qp.bind_mw(mw, MWBind(MWBindInfo(b.mr, b.mr.buf, 0, 0), e.IBV_SEND_SIGNALED))
    assert wait(b)[0].status == e.IBV_WC_SUCCESS  # a zero-length bind unbinds it
    assert _op(a, e.IBV_WR_RDMA_READ, mw.rkey, b.mr.buf, length=8) == e.IBV_WC_REM_ACCESS_ERR


def test_dealloc_revokes_and_bind_errors() -> None:
    _w, a, b = _pair()
    mw = MW(b.pd, e.IBV_MW_TYPE_2)
    key, _ = _bind2(b, mw, 0, 4096)
    mw.close()
    assert _op(a, e.IBV_WR_RDMA_WRITE, key, b.mr.buf, b"gone") == e.IBV_WC_REM_ACCESS_ERR
    # An MR registered without IBV_ACCESS_MW_BIND cannot carry a window (the bind fails
    # and, as any local error, takes the QP to ERR).
    _w, a, b = _pair()
    plain = MR(b.pd, 4096, ALL_ACCESS)
    _key, st = _bind2(b, MW(b.pd, e.IBV_MW_TYPE_2), 0, 4096, mr=plain)
    assert st == e.IBV_WC_MW_BIND_ERR
    # A window of another PD, and a window key used as an L_Key.
    _w, a, b = _pair()
    _key, st = _bind2(b, MW(PD(b.ctx), e.IBV_MW_TYPE_2), 0, 4096)
    assert st == e.IBV_WC_MW_BIND_ERR
    _w, a, b = _pair()
    key, _ = _bind2(b, MW(b.pd, e.IBV_MW_TYPE_2), 0, 4096)
    wr = SendWR(wr_id=1, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(b.mr.buf, 8, key)])
    wr.set_wr_rdma(a.mr.rkey, a.mr.buf)
    b.qp.post_send(wr)
    assert wait(b)[0].status == e.IBV_WC_LOC_PROT_ERR
