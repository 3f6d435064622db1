"""RDMA FLUSH and ATOMIC WRITE (IBA 1.5 Memory Placement annex, as rxe implements them):
the FETH and the 8-byte payload on the wire, the zero-length READ RESPONSE that answers them,
the bytes in the responder's memory, completions, and the errors of misuse."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from nicsim.driver import enums as e
from nicsim.driver.user.errors import PyverbsRDMAError, PyverbsUserError
from nicsim.driver.user.extended import QPEx
from nicsim.driver.user.verbs import CQ, MR, PD, SGE, Context, QPCap, QPInitAttrEx
from scapy.utils import RawPcapReader

from nicsim.wire import parse
from nicsim.wire.opcodes import Opcode
from nicsim.workloads.endpoint import ALL_ACCESS, Side, connect, make_side
from nicsim.world import World

_OPS = (e.IBV_QP_EX_WITH_RDMA_WRITE | e.IBV_QP_EX_WITH_FLUSH
        | e.IBV_QP_EX_WITH_ATOMIC_WRITE)
_MASK = e.IBV_QP_INIT_ATTR_PD | e.IBV_QP_INIT_ATTR_SEND_OPS_FLAGS
_QP_FLUSH = e.IBV_ACCESS_FLUSH_GLOBAL | e.IBV_ACCESS_FLUSH_PERSISTENT


def _pair(pcap: Path | None = None, mr_access: int = ALL_ACCESS | e.IBV_ACCESS_FLUSH_GLOBAL,
          qp_access: int = ALL_ACCESS | _QP_FLUSH) -> tuple[World, Side, Side]:
    w = World.two_hosts(seed=0, pcap=pcap)
    ctx = Context("nsnic0", host=w.hosts["a"])
    pd = PD(ctx)
    cq = CQ(ctx, 64)
    qp = QPEx(ctx, QPInitAttrEx(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, pd=pd,
                                cap=QPCap(16, 16, 2, 2, 0), send_ops_flags=_OPS,
                                comp_mask=_MASK))
    a = Side(ctx, pd, cq, qp, MR(pd, 1 << 16, ALL_ACCESS))
    b = make_side(w, "b", access=mr_access)
    connect(a, b, access=qp_access)
    connect(b, a, access=qp_access)
    return w, a, b


def _wait(s: Side, n: int = 1) -> list:
    env = s.ctx.host.env
    end = env.now + 1e7
    out: list = []
    while len(out) < n and env.now < end:
        out += s.cq.poll(n - len(out))[1]
    return out


def _post(s: Side, build: object, wr_id: int = 1) -> None:
    qp = s.qp
    qp.wr_start()
    qp.wr_id, qp.wr_flags = wr_id, e.IBV_SEND_SIGNALED
    build(qp)  # type: ignore[operator]
    qp.wr_complete()


def test_device_reports_flush_global_and_atomic_write_not_persistent() -> None:
    w = World.two_hosts()
    caps = Context("nsnic0", host=w.hosts["a"]).query_device_ex().device_cap_flags_ex
    assert caps & (1 << 38) and caps & (1 << 40)  # IBV_DEVICE_FLUSH_GLOBAL, ATOMIC_WRITE
    assert not caps & (1 << 39)  # FLUSH_PERSISTENT: the host has no persistent memory


def test_atomic_write_places_eight_bytes_and_its_packets(tmp_path: Path) -> None:
    pcap = tmp_path / "aw.pcap"
    w, a, b = _pair(pcap)
    b.mr.write(b"\xee" * 24, 24)
    _post(a, lambda qp: qp.wr_atomic_write(b.mr.rkey, b.mr.buf + 8, b"ABCDEFGH"))
    (wc,) = _wait(a)
    assert (wc.wr_id, wc.status, wc.opcode, wc.byte_len) == (
        1, e.IBV_WC_SUCCESS, e.IBV_WC_ATOMIC_WRITE, 8)
    assert b.mr.read(24, 0) == b"\xee" * 8 + b"ABCDEFGH" + b"\xee" * 8
    w.close()
    frames = [parse(bytes(f)) for f, _ in RawPcapReader(str(pcap))]
    req, resp = frames
    assert req.opcode == Opcode.RC_ATOMIC_WRITE and req.ackreq
    assert (req.reth_va, req.reth_rkey, req.reth_len) == (b.mr.buf + 8, b.mr.rkey, 8)
    assert bytes(req.payload) == b"ABCDEFGH" and req.pad == 0
    assert resp.opcode == Opcode.RC_RDMA_READ_RESPONSE_ONLY and resp.payload_len == 0
    assert resp.psn == req.psn and resp.aeth_syndrome >> 5 == 0


def test_flush_after_writes_its_feth_and_both_selectivity_levels(tmp_path: Path) -> None:
    pcap = tmp_path / "flush.pcap"
    w, a, b = _pair(pcap)
    a.mr.write(b"made visible", 12)

    def write_then_flush(qp: QPEx) -> None:
        qp.wr_rdma_write(b.mr.rkey, b.mr.buf + 100)
        qp.wr_set_sge(SGE(a.mr.buf, 12, a.mr.lkey))
        qp.wr_id = 2
        qp.wr_flush(b.mr.rkey, b.mr.buf + 100, 12, e.IBV_FLUSH_GLOBAL, e.IBV_FLUSH_RANGE)
        qp.wr_id = 3  # the whole MR: address and length do not matter
        qp.wr_flush(b.mr.rkey, b.mr.buf, 1 << 30, e.IBV_FLUSH_GLOBAL, e.IBV_FLUSH_MR)

    _post(a, write_then_flush)
    wcs = _wait(a, 3)
    assert [(c.wr_id, c.status, c.opcode) for c in wcs] == [
        (1, 0, e.IBV_WC_RDMA_WRITE), (2, 0, e.IBV_WC_FLUSH), (3, 0, e.IBV_WC_FLUSH)]
    assert b.mr.read(12, 100) == b"made visible"
    w.close()
    pkts = [parse(bytes(f)) for f, _ in RawPcapReader(str(pcap))]
    flushes = [p for p in pkts if p.opcode == Opcode.RC_FLUSH]
    assert [(p.feth_plt, p.feth_sel, p.feth_rsvd) for p in flushes] == [(1, 0, 0), (1, 1, 0)]
    assert (flushes[0].reth_va, flushes[0].reth_len) == (b.mr.buf + 100, 12)
    resps = [p for p in pkts if p.opcode == Opcode.RC_RDMA_READ_RESPONSE_ONLY]
    assert [p.psn for p in resps] == [p.psn for p in flushes]
    assert all(p.payload_len == 0 for p in resps)


def test_flush_placement_type_the_region_lacks_is_a_remote_access_error() -> None:
    w, a, b = _pair()
    _post(a, lambda qp: qp.wr_flush(b.mr.rkey, b.mr.buf, 64, e.IBV_FLUSH_PERSISTENT,
                                    e.IBV_FLUSH_RANGE))
    (wc,) = _wait(a)
    assert (wc.status, wc.opcode) == (e.IBV_WC_REM_ACCESS_ERR, e.IBV_WC_FLUSH)
    assert w.nics["b"].counters()["responder.naks_sent"] == 1


def test_flush_without_the_mr_flush_right_is_a_remote_access_error() -> None:
    w, a, b = _pair(mr_access=ALL_ACCESS)
    _post(a, lambda qp: qp.wr_flush(b.mr.rkey, b.mr.buf, 64, e.IBV_FLUSH_GLOBAL,
                                    e.IBV_FLUSH_RANGE))
    assert _wait(a)[0].status == e.IBV_WC_REM_ACCESS_ERR


def test_flush_without_the_qp_flush_right_is_a_remote_access_error() -> None:
    w, a, b = _pair(qp_access=ALL_ACCESS)
    _post(a, lambda qp: qp.wr_flush(b.mr.rkey, b.mr.buf, 64, e.IBV_FLUSH_GLOBAL,
                                    e.IBV_FLUSH_MR))
    assert _wait(a)[0].status == e.IBV_WC_REM_ACCESS_ERR


def test_unaligned_atomic_write_is_an_invalid_request_and_writes_nothing() -> None:
    w, a, b = _pair()
    b.mr.write(bytes(16), 16)
    _post(a, lambda qp: qp.wr_atomic_write(b.mr.rkey, b.mr.buf + 4, b"12345678"))
    (wc,) = _wait(a)
    assert (wc.status, wc.opcode) == (e.IBV_WC_REM_INV_REQ_ERR, e.IBV_WC_ATOMIC_WRITE)
    assert b.mr.read(16, 0) == bytes(16)


def test_atomic_write_needs_remote_write() -> None:
    w, a, b = _pair(mr_access=e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_READ)
    _post(a, lambda qp: qp.wr_atomic_write(b.mr.rkey, b.mr.buf, b"12345678"))
    assert _wait(a)[0].status == e.IBV_WC_REM_ACCESS_ERR
    assert b.mr.read(8, 0) == bytes(8)


def test_registration_and_creation_errnos() -> None:
    w = World.two_hosts()
    ctx = Context("nsnic0", host=w.hosts["a"])
    pd = PD(ctx)
    with pytest.raises(PyverbsRDMAError) as ei:  # no persistent memory: as rxe on DRAM
        MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_FLUSH_PERSISTENT)
    assert ei.value.error_code == errno.EINVAL
    MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_FLUSH_GLOBAL).close()
    cq = CQ(ctx, 8)
    qp = QPEx(ctx, QPInitAttrEx(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, pd=pd,
                                cap=QPCap(4, 4, 1, 1, 0), send_ops_flags=_OPS,
                                comp_mask=_MASK))
    qp.wr_start()
    with pytest.raises(PyverbsUserError):  # fewer than 8 bytes to write
        qp.wr_atomic_write(1, 0, b"short")
    qp.wr_abort()


def test_wire_layout_of_flush_and_atomic_write() -> None:
    """Byte offsets after the BTH, as the Memory Placement annex lays them out (Debian's
    tshark does not dissect these opcodes, so the layout is checked here by hand): FLUSH is
    BTH + FETH (reserved 26 bits, selectivity 2, placement type 4) + RETH, no payload;
    ATOMIC WRITE is BTH + RETH + 8 bytes of data."""
    from nicsim.wire import FrameBuilder, Path, feth, reth

    path = Path(bytes(6), bytes(6), bytes(4), bytes(4), 0xC000)
    fb = FrameBuilder(path)
    f = fb.build(Opcode.RC_FLUSH, 0x123456, 7, feth(0, 1, 2) + reth(0x1122334455667788,
                                                                     0xAABBCCDD, 0x1000))
    b = 14 + 20 + 8
    assert f[b] == 0x1C and f[b + 12:b + 16] == bytes((0, 0, 0, 0x12))
    assert f[b + 16:b + 32] == bytes.fromhex("1122334455667788aabbccdd00001000")
    assert len(f) == b + 12 + 4 + 16 + 4  # ... and the ICRC
    p = parse(f)
    assert (p.feth_sel, p.feth_plt, p.reth_len, p.payload_len) == (1, 2, 0x1000, 0)
    f = fb.build(Opcode.RC_ATOMIC_WRITE, 0x123456, 8, reth(0x40, 0x55, 8), b"ABCDEFGH")
    assert f[b] == 0x1D and f[b + 12:b + 28] == bytes.fromhex("0000000000000040000000550000"
                                                              "0008")
    assert f[b + 28:b + 36] == b"ABCDEFGH" and len(f) == b + 12 + 16 + 8 + 4
    assert bytes(parse(f).payload) == b"ABCDEFGH"


def test_atomic_write_and_flush_into_an_odp_region_fault_its_page_in_first() -> None:
    """On an ODP MR (rxe covers both since Linux 6.15): the responder's first access to a page
    not present raises a page fault and RNR-NAKs; the retry places the 8 bytes and the
    FLUSH answers."""
    odp = ALL_ACCESS | e.IBV_ACCESS_FLUSH_GLOBAL | e.IBV_ACCESS_ON_DEMAND
    w, a, b = _pair(mr_access=odp)

    def write_then_flush(qp: QPEx) -> None:
        qp.wr_atomic_write(b.mr.rkey, b.mr.buf + 4096 + 8, b"ODPWRITE")
        qp.wr_id = 2
        qp.wr_flush(b.mr.rkey, b.mr.buf + 4096, 16, e.IBV_FLUSH_GLOBAL, e.IBV_FLUSH_RANGE)

    _post(a, write_then_flush)
    wcs = _wait(a, 2)
    assert [(wc.wr_id, wc.status, wc.opcode) for wc in wcs] == [
        (1, e.IBV_WC_SUCCESS, e.IBV_WC_ATOMIC_WRITE), (2, e.IBV_WC_SUCCESS, e.IBV_WC_FLUSH)]
    assert b.mr.read(8, 4096 + 8) == b"ODPWRITE"
    c = w.nics["b"].counters()
    assert c["odp.page_faults"] >= 1 and c["odp.rnr_naks"] >= 1
