"""Every WRITE, READ, SEND and atomic through all layers: destination memory byte for byte."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nicsim.driver import enums as e
from nicsim.driver.user.verbs import SGE, RecvWR, SendWR

from nicsim.testing.rdma import pair, settle, wait


def _sges(side, base: int, sizes: list[int]) -> list[SGE]:
    out, off = [], base
    for n in sizes:
        out.append(SGE(side.mr.buf + off, n, side.mr.lkey))
        off += n
    return out


def _parts(total: int, k: int) -> list[int]:
    base, extra = divmod(total, k)
    return [base + (i < extra) for i in range(k)]


@pytest.fixture(scope="module")
def conn():
    return pair(mr_len=1 << 20)


def _pattern(n: int, seed: int) -> bytes:
    return bytes((i * 7 + seed * 13 + (i >> 8)) & 0xFF for i in range(n))


@pytest.mark.parametrize("size", [1, 3, 1023, 1024, 1025, 4096, 3 * 4096 + 5, 70000])
@pytest.mark.parametrize("nsge", [1, 3])
def test_rdma_write_places_every_byte(conn, size, nsge):
    w, a, b = conn
    src_off, dst_off = 4093, 8 * 4096 + 3  # unaligned, and crossing page boundaries
    data = _pattern(size, size + nsge)
    a.mr.write(data, size, src_off)
    b.mr.write(b"\xee" * (size + 2), size + 2, dst_off - 1)
    wr = SendWR(wr_id=1, opcode=e.IBV_WR_RDMA_WRITE, num_sge=nsge,
                sg=_sges(a, src_off, _parts(size, nsge)))
    wr.set_wr_rdma(b.mr.rkey, b.mr.buf + dst_off)
    a.qp.post_send(wr)
    (wc,) = wait(a)
    assert (wc.status, wc.opcode, wc.wr_id) == (e.IBV_WC_SUCCESS, e.IBV_WC_RDMA_WRITE, 1)
    settle(w)
    assert b.mr.read(size, dst_off) == data
    # Not one byte outside the target range changed.
    assert b.mr.read(1, dst_off - 1) == b"\xee" and b.mr.read(1, dst_off + size) == b"\xee"


@pytest.mark.parametrize("size", [1, 1024, 1500, 5 * 4096 + 17])
@pytest.mark.parametrize("nsge", [1, 2, 4])
def test_rdma_read_fetches_every_byte(conn, size, nsge):
    w, a, b = conn
    remote_off, local_off = 12345, 200000 + 11
    data = _pattern(size, 3 * size + nsge)
    b.mr.write(data, size, remote_off)
    wr = SendWR(wr_id=2, opcode=e.IBV_WR_RDMA_READ, num_sge=nsge,
                sg=_sges(a, local_off, _parts(size, nsge)))
    wr.set_wr_rdma(b.mr.rkey, b.mr.buf + remote_off)
    a.qp.post_send(wr)
    (wc,) = wait(a)
    assert (wc.status, wc.opcode, wc.byte_len) == (e.IBV_WC_SUCCESS, e.IBV_WC_RDMA_READ, size)
    assert a.mr.read(size, local_off) == data


@pytest.mark.parametrize("size,send_sges,recv_sges", [(0, 1, 1), (1, 1, 1), (1024, 1, 2),
                                                      (9000, 3, 4), (4096 * 4, 2, 3)])
@pytest.mark.parametrize("imm", [None, 0xDEADBEEF])
def test_send_scatters_into_receive_sges(conn, size, send_sges, recv_sges, imm):
    w, a, b = conn
    data = _pattern(size, size + send_sges)
    a.mr.write(data, size, 100)
    # Receive buffers: recv_sges pieces scattered over separate pages, each a bit larger.
    parts = _parts(size, recv_sges)
    rsg = [SGE(b.mr.buf + 300000 + i * 9000 + 7, n + 2, b.mr.lkey) for i, n in enumerate(parts)]
    b.qp.post_recv(RecvWR(wr_id=77, num_sge=len(rsg), sg=rsg))
    op = e.IBV_WR_SEND if imm is None else e.IBV_WR_SEND_WITH_IMM
    a.qp.post_send(SendWR(wr_id=3, opcode=op, num_sge=send_sges, imm_data=imm or 0,
                          sg=_sges(a, 100, _parts(size, send_sges))))
    assert wait(a)[0].status == e.IBV_WC_SUCCESS
    (rwc,) = wait(b)
    assert (rwc.status, rwc.opcode, rwc.wr_id, rwc.byte_len) == (
        e.IBV_WC_SUCCESS, e.IBV_WC_RECV, 77, size)
    if imm is not None:
        assert rwc.wc_flags & e.IBV_WC_WITH_IMM and rwc.imm_data == imm
    else:
        assert not rwc.wc_flags & e.IBV_WC_WITH_IMM
    # The receive SGEs are filled in order, each up to its length (+2 slack stays unused).
    got, left = b"", size
    for s in rsg:
        k = min(left, s.length)
        got += b.mr.read(k, s.addr - b.mr.buf)
        left -= k
    assert got == data


def test_write_with_immediate_consumes_a_receive(conn):
    w, a, b = conn
    data = _pattern(3000, 9)
    a.mr.write(data, 3000, 0)
    b.qp.post_recv(RecvWR(wr_id=55, num_sge=0, sg=[]))
    wr = SendWR(wr_id=4, opcode=e.IBV_WR_RDMA_WRITE_WITH_IMM, num_sge=1, imm_data=0x1234,
                sg=[SGE(a.mr.buf, 3000, a.mr.lkey)])
    wr.set_wr_rdma(b.mr.rkey, b.mr.buf + 500000)
    a.qp.post_send(wr)
    wait(a)
    (rwc,) = wait(b)
    assert (rwc.opcode, rwc.wr_id, rwc.byte_len, rwc.imm_data) == (
        e.IBV_WC_RECV_RDMA_WITH_IMM, 55, 3000, 0x1234)
    assert b.mr.read(3000, 500000) == data


def test_atomics_return_the_original_value(conn):
    w, a, b = conn
    off = 600000
    b.mr.write(struct.pack("<Q", 40), 8, off)
    wr = SendWR(wr_id=5, opcode=e.IBV_WR_ATOMIC_FETCH_AND_ADD, num_sge=1,
                sg=[SGE(a.mr.buf + 700000 + 4, 8, a.mr.lkey)])  # unaligned local is fine
    wr.set_wr_atomic(b.mr.rkey, b.mr.buf + off, 2)
    a.qp.post_send(wr)
    assert wait(a)[0].opcode == e.IBV_WC_FETCH_ADD
    assert struct.unpack("<Q", a.mr.read(8, 700004))[0] == 40
    assert struct.unpack("<Q", b.mr.read(8, off))[0] == 42
    for compare, want_mem in ((41, 42), (42, 7)):  # mismatch leaves memory; match swaps
        wr = SendWR(wr_id=6, opcode=e.IBV_WR_ATOMIC_CMP_AND_SWP, num_sge=1,
                    sg=[SGE(a.mr.buf + 700016, 8, a.mr.lkey)])
        wr.set_wr_atomic(b.mr.rkey, b.mr.buf + off, compare, 7)
        a.qp.post_send(wr)
        assert wait(a)[0].status == e.IBV_WC_SUCCESS
        assert struct.unpack("<Q", a.mr.read(8, 700016))[0] == 42
        assert struct.unpack("<Q", b.mr.read(8, off))[0] == want_mem


def test_unsignaled_wrs_complete_with_the_next_signaled_one(conn):
    w, a, b = conn
    for i in range(5):
        a.mr.write(bytes([i]) * 64, 64, 64 * i)
        wr = SendWR(wr_id=10 + i, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1,
                    sg=[SGE(a.mr.buf + 64 * i, 64, a.mr.lkey)],
                    send_flags=e.IBV_SEND_SIGNALED if i == 4 else 0)
        wr.set_wr_rdma(b.mr.rkey, b.mr.buf + 800000 + 64 * i)
        a.qp.post_send(wr)
    (wc,) = wait(a)
    assert wc.wr_id == 14
    settle(w)
    assert b.mr.read(320, 800000) == b"".join(bytes([i]) * 64 for i in range(5))


@pytest.mark.parametrize("mtu", [e.IBV_MTU_256, e.IBV_MTU_4096])
def test_mtu_sets_packet_count(mtu):
    w, a, b = pair(mtu=mtu)
    size = 20000
    a.qp.post_send(_write(a, b, size))
    wait(a)
    mtu_bytes = 128 << mtu
    assert w.nics["a"].counters()["requester.data_packets"] == -(-size // mtu_bytes)


def _write(a, b, size, off=0):
    wr = SendWR(wr_id=9, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1,
                sg=[SGE(a.mr.buf + off, size, a.mr.lkey)])
    wr.set_wr_rdma(b.mr.rkey, b.mr.buf + off)
    return wr


def test_cq_ring_wraps_and_owner_bit_flips():
    w, a, b = pair()
    n = 3 * 256 + 5  # the CQ has 256 entries: wrap it three times
    for i in range(n):
        a.qp.post_send(SendWR(wr_id=i, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1,
                              sg=[SGE(a.mr.buf, 8, a.mr.lkey)], remote_addr=b.mr.buf,
                              rkey=b.mr.rkey))
        (wc,) = wait(a)
        assert wc.wr_id == i and wc.status == e.IBV_WC_SUCCESS


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(size=st.integers(0, 20000), src=st.integers(0, 8191), dst=st.integers(0, 8191),
       nsge=st.integers(1, 4), op=st.sampled_from(["write", "read", "send"]))
def test_random_transfers_are_exact(conn, size, src, dst, nsge, op):
    w, a, b = conn
    data = _pattern(size, src ^ dst)
    sizes = _parts(size, nsge)
    if op == "read":
        b.mr.write(data, size, 900000 + dst)
        wr = SendWR(wr_id=1, opcode=e.IBV_WR_RDMA_READ, num_sge=nsge,
                    sg=_sges(a, 400000 + src, sizes))
        wr.set_wr_rdma(b.mr.rkey, b.mr.buf + 900000 + dst)
    else:
        a.mr.write(data, size, 400000 + src)
        wr = SendWR(wr_id=1, opcode=e.IBV_WR_RDMA_WRITE if op == "write" else e.IBV_WR_SEND,
                    num_sge=nsge, sg=_sges(a, 400000 + src, sizes))
        wr.set_wr_rdma(b.mr.rkey, b.mr.buf + 900000 + dst)
        if op == "send":
            b.qp.post_recv(RecvWR(wr_id=2, num_sge=1,
                                  sg=[SGE(b.mr.buf + 900000 + dst, size, b.mr.lkey)]))
    a.qp.post_send(wr)
    assert wait(a)[0].status == e.IBV_WC_SUCCESS
    if op == "send":
        assert wait(b)[0].byte_len == size
    settle(w)
    got = a.mr.read(size, 400000 + src) if op == "read" else b.mr.read(size, 900000 + dst)
    assert got == data


def test_large_write_starts_at_once_and_lands_whole():
    """The requester translates a chunk at a time: the first packet of a 16 MiB WRITE is on
    the wire a few microseconds after the post (not after 4,096 page lookups), and every
    byte lands."""
    size = 16 << 20
    w, a, b = pair(mtu=e.IBV_MTU_4096, mr_len=size)
    data = bytes(range(251)) * (size // 251) + bytes(size % 251)
    a.mr.write(data, size)
    first: list[int] = []
    w.links[0].taps.append(type("Tap", (), {
        "write": lambda self, f, t: first.append(t) if not first else None})())
    wr = SendWR(opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(a.mr.buf, size, a.mr.lkey)])
    wr.set_wr_rdma(b.mr.rkey, b.mr.buf)
    t0 = w.env.now
    a.qp.post_send(wr)
    assert wait(a)[0].status == e.IBV_WC_SUCCESS
    assert first[0] - t0 < 5_000
    settle(w)
    assert b.mr.read(size) == data
