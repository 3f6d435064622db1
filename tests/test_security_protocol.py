"""Protocol holes: spoofed addresses, duplicate READ amplification, RNR retry, zero-length
RDMA, and length, pad and access checks on incoming WRITEs.

Forged frames are built with the peer QP's own FrameBuilder (valid ICRC, right MACs, QPN and
PSN) so that the only thing wrong with each is the field under test.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import struct

import pytest
from nicsim.driver import enums as e
from nicsim.driver.user.verbs import MR, SGE, QPAttr, RecvWR, SendWR

from nicsim.testing.rdma import ALL_ACCESS, Side, drain, pair, settle, wait
from nicsim.wire import FrameBuilder, Opcode, aeth, atomic_eth, compute_icrc, parse, reth
from nicsim.wire.packet import frame_end
from nicsim.world import World

KIB = 1 << 10
MINE = b"\xab"
THEIRS = b"\x11"
ACK_CREDITS = 0x1F  # ACK syndrome with unlimited credits
READ_RESPONSES = {Opcode.RC_RDMA_READ_RESPONSE_FIRST, Opcode.RC_RDMA_READ_RESPONSE_MIDDLE,
                  Opcode.RC_RDMA_READ_RESPONSE_LAST, Opcode.RC_RDMA_READ_RESPONSE_ONLY}


class WireTap:
    """Records every frame the link delivers (both directions)."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []

    def write(self, frame: bytes, t_ns: int) -> None:
        self.frames.append(bytes(frame))

    def packets(self, dqpn: int | None = None) -> list:
        ps = [parse(f) for f in self.frames]
        return [p for p in ps if dqpn is None or p.dqpn == dqpn]

    def syndromes(self, dqpn: int) -> list[int]:
        """AETH syndromes of the ACK/NAK frames sent to QP `dqpn`."""
        return [p.aeth_syndrome for p in self.packets(dqpn) if p.opcode == Opcode.RC_ACKNOWLEDGE]


def tap(w: World) -> WireTap:
    t = WireTap()
    w.links[0].taps.append(t)
    return t


def builder(w: World, host: str, side: Side) -> FrameBuilder:
    """The FrameBuilder of `side`'s QP on `host`'s NIC: frames exactly as that QP sends."""
    b = w.nics[host].qps[side.qp.qp_num].builder
    assert b is not None
    return b


def spoofed(b: FrameBuilder, field: str, ip: str) -> FrameBuilder:
    """The same path (MACs, UDP port, QP pair) with the source or destination IP changed."""
    return FrameBuilder(dataclasses.replace(b.path, **{field: ipaddress.ip_address(ip).packed}))


def counters(w: World, host: str) -> dict[str, int]:
    return w.nics[host].counters()


def grown(before: dict[str, int], after: dict[str, int], prefix: str = "") -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in after.items()
            if k.startswith(prefix) and v != before.get(k, 0)}


def epsn(w: World, s: Side) -> int:
    return w.nics["b"].qps[s.qp.qp_num].epsn


def _rdma(side: Side, opcode: int, length: int, rkey: int, raddr: int, wr_id: int = 1,
          offset: int = 0) -> None:
    wr = SendWR(wr_id=wr_id, opcode=opcode, num_sge=1,
                sg=[SGE(side.mr.buf + offset, length, side.mr.lkey)])
    wr.set_wr_rdma(rkey, raddr)
    side.qp.post_send(wr)


# -- 3. spoofed and misdirected packets -----------------------------------------------------

# The peer is 10.0.0.1 (a) and the NIC 10.0.0.2 (b): one wrong address at a time.
SPOOFS = [pytest.param("sip", "10.0.0.99", id="wrong-source-ip"),
          pytest.param("dip", "10.0.0.77", id="wrong-destination-ip")]


@pytest.mark.parametrize("field,ip", SPOOFS)
@pytest.mark.parametrize("kind", ["write", "read", "atomic"])
def test_spoofed_request_is_dropped(kind, field, ip):
    """An RC WRITE (or READ, or atomic) with valid ICRC, MAC, QPN and PSN but from an IP that
    is not the QP's peer, or to an IP that is not this NIC's, is not executed: memory
    unchanged, no ACK or response, responder untouched, and the drop counted in rx.*."""
    w, a, b = pair()
    t = tap(w)
    b.mr.write(THEIRS * 64, 64)
    before = counters(w, "b")
    psn = epsn(w, b)
    if kind == "write":
        op, ext, payload = Opcode.RC_RDMA_WRITE_ONLY, reth(b.mr.buf, b.mr.rkey, 64), MINE * 64
    elif kind == "read":
        op, ext, payload = Opcode.RC_RDMA_READ_REQUEST, reth(b.mr.buf, b.mr.rkey, 64), b""
    else:
        op, ext, payload = Opcode.RC_FETCH_ADD, atomic_eth(b.mr.buf, b.mr.rkey, 1, 0), b""
    frame = spoofed(builder(w, "a", a), field, ip).build(op, b.qp.qp_num, psn, ext, payload,
                                                          ackreq=True)
    w.nics["b"].receive(frame)
    settle(w)
    assert b.mr.read(64) == THEIRS * 64
    assert t.frames == [], "b answered a spoofed request"
    after = counters(w, "b")
    assert grown(before, after, "responder.") == {}
    assert epsn(w, b) == psn
    rx = grown(before, after, "rx")
    for k in ("rx.packets", "rx.bytes", "rx.roce_packets"):
        rx.pop(k, None)
    assert rx, "the drop was not counted"


def _stall_responder(b: Side) -> None:
    """Put b's QP in ERR: it drops a's requests, so a's WQE stays outstanding and only a
    forged response can answer it."""
    b.qp.modify(QPAttr(qp_state=e.IBV_QPS_ERR), e.IBV_QP_STATE)
    drain(b, 1000)


@pytest.mark.parametrize("field,ip", SPOOFS)
@pytest.mark.parametrize("kind", ["ack", "read_response"])
def test_spoofed_response_does_not_complete_wqes(kind, field, ip):
    """An ACK or READ RESPONSE from a source IP that is not the QP's peer (or to a
    destination IP that is not ours) must not complete the requester's WQE nor place data;
    the same frame from the real peer does (the control that shows the forgery is right)."""
    w, a, b = pair()
    _stall_responder(b)
    a.mr.write(THEIRS * 64, 64)
    if kind == "ack":
        _rdma(a, e.IBV_WR_RDMA_WRITE, 64, b.mr.rkey, b.mr.buf)
        op, ext, payload = Opcode.RC_ACKNOWLEDGE, aeth(ACK_CREDITS, 1), b""
    else:
        _rdma(a, e.IBV_WR_RDMA_READ, 64, b.mr.rkey, b.mr.buf)
        op, ext, payload = Opcode.RC_RDMA_READ_RESPONSE_ONLY, aeth(ACK_CREDITS, 1), MINE * 64
    w.hosts["a"].spend(5000)  # the request went out and was dropped by b
    (sop,) = w.nics["a"].qps[a.qp.qp_num].outstanding
    real = builder(w, "b", b)
    forged = spoofed(real, field, ip).build(op, a.qp.qp_num, sop.last_psn, ext, payload)
    w.nics["a"].receive(forged)
    assert drain(a) == [], "a spoofed response completed the WQE"
    assert a.mr.read(64) == THEIRS * 64
    # Control: the very same response from the real peer completes it.
    w.nics["a"].receive(real.build(op, a.qp.qp_num, sop.last_psn, ext, payload))
    (wc,) = wait(a)
    assert wc.status == e.IBV_WC_SUCCESS


# -- 4. duplicate READ amplification --------------------------------------------------------


def _read_request(w: World, a: Side, b: Side, psn: int, va: int, rkey: int,
                  length: int) -> bytes:
    return builder(w, "a", a).build(Opcode.RC_RDMA_READ_REQUEST, b.qp.qp_num, psn,
                                    reth(va, rkey, length), ackreq=True)


def _read_responses(t: WireTap, a: Side) -> int:
    return sum(1 for p in t.packets(a.qp.qp_num) if p.opcode in READ_RESPONSES)


def test_unmatched_duplicate_reads_are_not_answered():
    """1,000 READ requests (74 bytes each) with PSNs behind the expected PSN that match no
    READ the responder executed: no READ response at all (each would answer 74 bytes with
    4 KiB), and every one counted as a drop."""
    w, a, b = pair()
    for i in range(32):  # move the expected PSN on with WRITEs, not READs
        _rdma(a, e.IBV_WR_RDMA_WRITE, 64, b.mr.rkey, b.mr.buf, wr_id=i)
    assert len(wait(a, 32)) == 32
    t = tap(w)
    before = counters(w, "b")
    nb, cur = w.nics["b"], epsn(w, b)
    for i in range(1000):
        frame = _read_request(w, a, b, (cur - 1 - i) & 0xFFFFFF, b.mr.buf, b.mr.rkey, 4 * KIB)
        assert len(frame) == 74
        nb.receive(frame)
    settle(w, 1_000_000)
    after = counters(w, "b")
    sent = after["responder.read_response_packets"] - before["responder.read_response_packets"]
    assert (_read_responses(t, a), sent) == (0, 0)
    drops = sum(v for k, v in grown(before, after).items() if "drop" in k)
    assert drops >= 1000, f"counters that grew: {grown(before, after)}"


def _reads(w: World, a: Side, b: Side, n: int, length: int) -> list[bytes]:
    """Execute n READs one after another; returns their request frames as sent."""
    t = tap(w)
    for i in range(n):
        _rdma(a, e.IBV_WR_RDMA_READ, length, b.mr.rkey, b.mr.buf + i * length, wr_id=i,
              offset=i * length)
        (wc,) = wait(a)
        assert wc.status == e.IBV_WC_SUCCESS
    w.links[0].taps.remove(t)
    return [f for f in t.frames if parse(f).opcode == Opcode.RC_RDMA_READ_REQUEST]


def test_genuine_duplicate_read_is_answered():
    """A duplicate of the last READ (same PSN, rkey, va, length) is executed again
    (IBA 9.7.5.1.1): a requester whose responses were lost depends on it."""
    w, a, b = pair()
    (req,) = _reads(w, a, b, 1, 4 * KIB)
    t = tap(w)
    w.nics["b"].receive(req)
    settle(w)
    assert _read_responses(t, a) == 4


def test_partial_duplicate_read_is_answered():
    """A READ re-requested from the middle (PSN, va and length advanced by the responses
    already received, as go-back-N does) is answered with the rest."""
    w, a, b = pair()
    (req,) = _reads(w, a, b, 1, 4 * KIB)
    p = parse(req)
    t = tap(w)
    w.nics["b"].receive(_read_request(w, a, b, p.psn + 2, p.reth_va + 2 * KIB, p.reth_rkey,
                                      2 * KIB))
    settle(w)
    assert _read_responses(t, a) == 2


def test_duplicate_read_matches_only_the_last_max_dest_rd_atomic():
    """The responder remembers max_dest_rd_atomic (4) READs: a duplicate of an older one is
    not executed again, a duplicate of the newest still is."""
    w, a, b = pair()
    reqs = _reads(w, a, b, 6, KIB)
    assert b.qp.query()[0].max_dest_rd_atomic == 4
    t = tap(w)
    w.nics["b"].receive(reqs[0])
    settle(w)
    assert _read_responses(t, a) == 0, "a READ older than the last 4 was executed again"
    w.nics["b"].receive(reqs[-1])
    settle(w)
    assert _read_responses(t, a) == 1


@pytest.mark.parametrize("change", ["length", "va", "rkey"])
def test_duplicate_read_with_other_fields_is_not_answered(change):
    """A 'duplicate' that reuses an executed READ's PSN but asks for more bytes, other bytes
    or another MR matches nothing: it is not executed (no amplification, no fresh read)."""
    w, a, b = pair()
    (req,) = _reads(w, a, b, 1, 4 * KIB)
    p = parse(req)
    other = MR(b.pd, 4 * KIB, ALL_ACCESS)
    va, rkey, length = p.reth_va, p.reth_rkey, p.reth_len
    if change == "length":
        length = 32 * KIB
    elif change == "va":
        va += 8 * KIB
    else:
        va, rkey = other.buf, other.rkey
    t = tap(w)
    w.nics["b"].receive(_read_request(w, a, b, p.psn, va, rkey, length))
    settle(w)
    assert _read_responses(t, a) == 0


# -- 5. rnr_retry 7 is infinite ---------------------------------------------------------------


def test_rnr_retry_7_retries_forever_with_two_sends_queued():
    """rnr_retry = 7 means retry forever (IBA table 45). Two SENDs wait for receives through
    many RNR rounds; neither may fail with RETRY_EXC_ERR because the second SEND, arriving
    while the first is RNR-NAKed, drew PSN sequence error NAKs that ate the retry_cnt budget."""
    w, a, b = pair(rnr_retry=7, min_rnr_timer=1, retry_cnt=2)
    for i in range(2):
        a.qp.post_send(SendWR(wr_id=i, opcode=e.IBV_WR_SEND, num_sge=1,
                              sg=[SGE(a.mr.buf, 8, a.mr.lkey)]))
    w.hosts["b"].spend(300_000)  # RNR rounds of 10 us each go by
    rnr = counters(w, "b")["responder.rnr_naks_sent"]
    for i in range(2):
        b.qp.post_recv(RecvWR(wr_id=10 + i, num_sge=1,
                              sg=[SGE(b.mr.buf + 64 * i, 64, b.mr.lkey)]))
    wcs = wait(a, 2)
    assert [(c.wr_id, c.status) for c in wcs] == [(0, e.IBV_WC_SUCCESS), (1, e.IBV_WC_SUCCESS)]
    assert [(c.wr_id, c.status) for c in wait(b, 2)] == [(10, e.IBV_WC_SUCCESS),
                                                          (11, e.IBV_WC_SUCCESS)]
    assert rnr >= 10, f"only {rnr} RNR NAKs: the scenario did not test many rounds"
    # The second SEND is not a sequence error while the first waits for a receive.
    assert counters(w, "b")["responder.naks_sent"] == 0
    assert counters(w, "a").get("completer.nak_0x60", 0) == 0


# -- 6. zero-length RDMA ----------------------------------------------------------------------


@pytest.mark.parametrize("rkey,addr", [(0, 0), (0xDEADBEEF, 0x1234)], ids=["zero", "garbage"])
@pytest.mark.parametrize("opcode", [e.IBV_WR_RDMA_WRITE, e.IBV_WR_RDMA_WRITE_WITH_IMM,
                                    e.IBV_WR_RDMA_READ], ids=["write", "write_imm", "read"])
def test_zero_length_rdma_needs_no_rkey(opcode, rkey, addr):
    """IBA C9-88: a zero-length RDMA operation does not validate the R_Key or address.
    WRITE, WRITE_WITH_IMM and READ of 0 bytes with rkey/address 0 (or garbage) succeed; the
    immediate consumes a receive and completes RECV_RDMA_WITH_IMM with byte_len 0."""
    w, a, b = pair()
    b.qp.post_recv(RecvWR(wr_id=9, num_sge=1, sg=[SGE(b.mr.buf, 64, b.mr.lkey)]))
    wr = SendWR(wr_id=3, opcode=opcode, num_sge=0, sg=[], imm_data=0x1234)
    wr.set_wr_rdma(rkey, addr)
    a.qp.post_send(wr)
    (wc,) = wait(a)
    assert wc.status == e.IBV_WC_SUCCESS
    if opcode == e.IBV_WR_RDMA_WRITE_WITH_IMM:
        (rwc,) = wait(b)
        assert (rwc.wr_id, rwc.status, rwc.opcode, rwc.byte_len, rwc.imm_data) == (
            9, e.IBV_WC_SUCCESS, e.IBV_WC_RECV_RDMA_WITH_IMM, 0, 0x1234)
    assert b.qp.query()[0].qp_state == e.IBV_QPS_RTS


# -- 7. length, pad and access checks -----------------------------------------------------------


def test_write_only_shorter_than_reth_length_is_invalid_request():
    """A WRITE ONLY carrying 64 bytes whose RETH says 4096 is a length error (IBA 9.7.5.2.4):
    NAK invalid request (0x61), nothing placed."""
    w, a, b = pair()
    t = tap(w)
    b.mr.write(THEIRS * 64, 64)
    placed = counters(w, "b")["responder.bytes_placed"]
    w.nics["b"].receive(builder(w, "a", a).build(
        Opcode.RC_RDMA_WRITE_ONLY, b.qp.qp_num, epsn(w, b), reth(b.mr.buf, b.mr.rkey, 4 * KIB),
        MINE * 64, ackreq=True))
    settle(w)
    assert b.mr.read(64) == THEIRS * 64
    assert counters(w, "b")["responder.bytes_placed"] == placed
    assert t.syndromes(a.qp.qp_num) == [0x61]


def test_write_last_short_of_reth_length_is_invalid_request():
    """Sibling: a FIRST (RETH 4096) and then a LAST that ends the message at 1088 bytes. The
    LAST is a length error: NAK 0x61, and its bytes are not placed."""
    w, a, b = pair()
    t = tap(w)
    b.mr.write(THEIRS * 4 * KIB, 4 * KIB)
    bld, nb = builder(w, "a", a), w.nics["b"]
    nb.receive(bld.build(Opcode.RC_RDMA_WRITE_FIRST, b.qp.qp_num, epsn(w, b),
                         reth(b.mr.buf, b.mr.rkey, 4 * KIB), MINE * KIB))
    nb.receive(bld.build(Opcode.RC_RDMA_WRITE_LAST, b.qp.qp_num, epsn(w, b), b"",
                         b"\xcd" * 64, ackreq=True))
    settle(w)
    assert b.mr.read(64, KIB) == THEIRS * 64
    assert t.syndromes(a.qp.qp_num) == [0x61]


def test_write_last_past_reth_length_is_invalid_request():
    """Sibling: a FIRST (RETH 2.5 KiB), a MIDDLE, and a LAST of a whole MTU that would end the
    message at 3 KiB. The LAST has the MIDDLE's length, so it meets the receive fast path with
    the flow's headers known (Responder.middle): its length check must send it to the general
    path, which NAKs 0x61 and places nothing of it, not even the part inside the RETH's
    range."""
    w, a, b = pair()
    t = tap(w)
    b.mr.write(THEIRS * 3 * KIB, 3 * KIB)
    bld, nb = builder(w, "a", a), w.nics["b"]
    nb.receive(bld.build(Opcode.RC_RDMA_WRITE_FIRST, b.qp.qp_num, epsn(w, b),
                         reth(b.mr.buf, b.mr.rkey, 5 * KIB // 2), MINE * KIB))
    nb.receive(bld.build(Opcode.RC_RDMA_WRITE_MIDDLE, b.qp.qp_num, epsn(w, b), b"",
                         MINE * KIB))
    nb.receive(bld.build(Opcode.RC_RDMA_WRITE_LAST, b.qp.qp_num, epsn(w, b), b"",
                         b"\xcd" * KIB, ackreq=True))
    settle(w)
    assert b.mr.read(2 * KIB) == MINE * 2 * KIB
    assert b.mr.read(KIB, 2 * KIB) == THEIRS * KIB
    assert t.syndromes(a.qp.qp_num) == [0x61]


def _with_pad(frame: bytes, pad: int) -> bytes:
    """The frame with its BTH pad count changed and the ICRC recomputed (so it parses)."""
    f = bytearray(frame)
    bth = 14 + 20 + 8  # IPv4
    f[bth + 1] = (f[bth + 1] & ~0x30) | (pad << 4)
    end = frame_end(bytes(f))
    struct.pack_into("<I", f, end - 4, compute_icrc(bytes(f), 14, end))
    return bytes(f)


def test_write_with_wrong_pad_count_is_invalid_request():
    """An 8-byte WRITE ONLY (RETH length 8) whose pad count says 3: by the headers it carries
    5 bytes, which contradicts the RETH. NAK 0x61, memory unchanged (not 5 bytes placed)."""
    w, a, b = pair()
    t = tap(w)
    b.mr.write(THEIRS * 8, 8)
    frame = _with_pad(builder(w, "a", a).build(
        Opcode.RC_RDMA_WRITE_ONLY, b.qp.qp_num, epsn(w, b), reth(b.mr.buf, b.mr.rkey, 8),
        MINE * 8, ackreq=True), 3)
    assert parse(frame).payload_len == 5  # the forgery is well-formed
    w.nics["b"].receive(frame)
    settle(w)
    assert b.mr.read(8) == THEIRS * 8
    assert t.syndromes(a.qp.qp_num) == [0x61]


def test_revoking_remote_write_mid_message_stops_the_write():
    """Access rights hold per packet, not per message: once b's QP loses REMOTE_WRITE
    (RTS->RTS with IBV_QP_ACCESS_FLAGS), the rest of an in-progress WRITE is not placed and
    the requester gets REM_ACCESS_ERR."""
    n = 512 * KIB
    w, a, b = pair(mr_len=n)
    a.mr.write(MINE * n, n)
    b.mr.write(THEIRS * n, n)
    _rdma(a, e.IBV_WR_RDMA_WRITE, n, b.mr.rkey, b.mr.buf)
    nb = w.nics["b"]
    while nb.counters()["responder.write_packets"] < 8:
        w.env.step()
    b.qp.modify(QPAttr(qp_state=e.IBV_QPS_RTS,
                       qp_access_flags=e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_READ),
                e.IBV_QP_STATE | e.IBV_QP_ACCESS_FLAGS)
    # What b placed before the modify returned is a prefix of the message; the change took
    # effect by then, so nothing after it may be placed.
    placed = nb.counters()["responder.bytes_placed"]
    assert placed < n // 2, "the scenario needs the change well inside the message"
    (wc,) = wait(a)
    settle(w)
    assert nb.counters()["responder.bytes_placed"] == placed
    assert b.mr.read(n - placed, placed) == THEIRS * (n - placed)
    assert wc.status == e.IBV_WC_REM_ACCESS_ERR
