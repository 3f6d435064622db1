"""The strict checker (nicsim.cosim.strict) on the model NIC alone, no simulator: frames built
by nicsim.wire with the peer QP's own FrameBuilder (right MACs, IPs, QPN, ICRC), each wrong
in one field, go straight into host b's NIC, and the checker must raise ProtocolViolation
naming the rule the NIC's receive path refused the frame for; good frames pass and are
logged expected against actual.
"""

from __future__ import annotations

import pytest
from nicsim.driver import enums as e
from nicsim.driver.user.verbs import SGE, RecvWR

from nicsim.cosim.strict import NO_QP, ProtocolViolation, StrictChecker
from nicsim.nic.violations import CLAUSE, Rule
from nicsim.testing.rdma import Side, connect, make_side, pair, settle
from nicsim.wire import FrameBuilder, Opcode, aeth, parse, reth
from nicsim.wire.packet import frame_end
from nicsim.world import World

MTU = 1024


def setup(tolerate: tuple[Rule, ...] = ()) -> tuple[World, Side, Side, StrictChecker]:
    w, a, b = pair()
    return w, a, b, StrictChecker(w.nics["b"], tolerate)


def builder(w: World, a: Side) -> FrameBuilder:
    """a's QP's FrameBuilder: frames exactly as a's NIC would send them to b."""
    fb = w.nics["a"].qps[a.qp.qp_num].builder
    assert fb is not None
    return fb


def epsn(w: World, b: Side) -> int:
    return w.nics["b"].qps[b.qp.qp_num].epsn


def write_only(w: World, a: Side, b: Side, psn: int, n: int = 64) -> bytes:
    return builder(w, a).build(Opcode.RC_RDMA_WRITE_ONLY, b.qp.qp_num, psn,
                               reth(b.mr.buf, b.mr.rkey, n), bytes(range(n)), ackreq=True)


def refused(w: World, frame: bytes) -> ProtocolViolation:
    with pytest.raises(ProtocolViolation) as ei:
        w.nics["b"].receive(frame)
    return ei.value


def test_good_frames_pass_and_are_logged() -> None:
    w, a, b, chk = setup()
    psn = epsn(w, b)
    for k in range(3):
        w.nics["b"].receive(write_only(w, a, b, (psn + k) & 0xFFFFFF))
        settle(w, 2000)
    assert chk.first is None and chk.violations == []
    log = chk.log(b.qp.qp_num)
    assert [(e.opcode, e.psn, e.expect_psn, e.length, e.expect_length, e.verdict)
            for e in log] == [("RDMA_WRITE_ONLY", (psn + k) & 0xFFFFFF,
                               f"{(psn + k) & 0xFFFFFF:#08x}", 64, "64", "ok")
                              for k in range(3)]
    assert b.mr.read(64) == bytes(range(64))


def test_psn_gap() -> None:
    w, a, b, chk = setup()
    psn = epsn(w, b)
    w.nics["b"].receive(write_only(w, a, b, psn))
    v = refused(w, write_only(w, a, b, (psn + 2) & 0xFFFFFF))
    assert v.rule is Rule.PSN_SEQUENCE and v.qpn == b.qp.qp_num
    assert v.expected == f"PSN {(psn + 1) & 0xFFFFFF:#08x}"
    assert v.actual.startswith(f"PSN {(psn + 2) & 0xFFFFFF:#08x}")
    assert [e.verdict for e in v.log] == ["ok", "psn_sequence"]
    text = str(v)
    assert f"QP {b.qp.qp_num:#x}: psn_sequence, {CLAUSE[Rule.PSN_SEQUENCE]}" in text
    assert "RC_RDMA_WRITE_ONLY" in text and "0000  " in text  # the summary and the bytes
    assert chk.first is v


def test_bad_icrc() -> None:
    w, a, b, _ = setup()
    frame = bytearray(write_only(w, a, b, epsn(w, b)))
    end = frame_end(bytes(frame))
    good = int.from_bytes(frame[end - 4:end], "little")
    frame[end - 1] ^= 0x40
    v = refused(w, bytes(frame))
    assert v.rule is Rule.BAD_ICRC and v.qpn == b.qp.qp_num
    assert v.expected == f"ICRC {good:#010x}"
    assert v.actual == f"ICRC {good ^ 0x40000000:#010x}"


def test_bad_icrc_on_the_fast_path() -> None:
    """A WRITE MIDDLE takes the NIC's receive fast path, which checks the ICRC itself."""
    w, a, b, _ = setup()
    psn = epsn(w, b)
    fb = builder(w, a)
    w.nics["b"].receive(fb.build(Opcode.RC_RDMA_WRITE_FIRST, b.qp.qp_num, psn,
                                 reth(b.mr.buf, b.mr.rkey, 3 * MTU), bytes(MTU)))
    frame = bytearray(fb.build(Opcode.RC_RDMA_WRITE_MIDDLE, b.qp.qp_num, psn + 1, b"",
                               bytes(MTU)))
    frame[-1] ^= 1
    assert refused(w, bytes(frame)).rule is Rule.BAD_ICRC


def test_wrong_pad() -> None:
    """777 bytes with pad count 1 (the remainder, not its complement): 778 bytes of payload
    and pad, not whole words."""
    w, a, b, _ = setup()
    fb = builder(w, a)
    good = fb.build(Opcode.RC_SEND_ONLY, b.qp.qp_num, epsn(w, b), b"", bytes(777))
    p = parse(good)
    assert p.pad == 3
    frame = bytearray(good[:p.payload_off + 777] + b"\0" + good[frame_end(good) - 4:])
    frame[p.bth_off + 1] = (frame[p.bth_off + 1] & 0xCF) | 1 << 4
    # lengths and checksums as the design would have made them for its frame
    frame = _refit(bytes(frame))
    v = refused(w, frame)
    assert v.rule is Rule.BAD_PAD
    assert v.expected == "pad 3 after 777 payload bytes"
    assert v.actual == "pad 1 (778 bytes of payload and pad)"


def _refit(frame: bytes) -> bytes:
    """IPv4 total length, header checksum, UDP length and ICRC made right for the frame's
    length (what a design's framer does whatever its pad count)."""
    from nicsim.wire.packet import compute_icrc, ipv4_checksum

    f = bytearray(frame)
    tot = len(f) - 14
    f[16:18] = tot.to_bytes(2, "big")
    f[24:26] = b"\0\0"
    f[24:26] = ipv4_checksum(bytes(f[14:34])).to_bytes(2, "big")
    f[38:40] = (tot - 20).to_bytes(2, "big")
    f[-4:] = compute_icrc(bytes(f), 14, len(f)).to_bytes(4, "little")
    return bytes(f)


def test_middle_shorter_than_the_mtu() -> None:
    w, a, b, _ = setup()
    b.qp.post_recv(RecvWR(wr_id=1, num_sge=1, sg=[SGE(b.mr.buf, 4 * MTU, b.mr.lkey)]))
    settle(w, 2000)  # the doorbell reaches the NIC
    psn = epsn(w, b)
    fb = builder(w, a)
    w.nics["b"].receive(fb.build(Opcode.RC_SEND_FIRST, b.qp.qp_num, psn, b"", bytes(MTU)))
    v = refused(w, fb.build(Opcode.RC_SEND_MIDDLE, b.qp.qp_num, psn + 1, b"", bytes(512)))
    assert v.rule is Rule.LENGTH
    assert v.expected == f"{MTU} bytes (one MTU), pad 0"
    assert v.actual.startswith("512 bytes, pad 0")


def test_longer_than_the_mtu() -> None:
    w, a, b, _ = setup()
    v = refused(w, builder(w, a).build(Opcode.RC_SEND_ONLY, b.qp.qp_num, epsn(w, b), b"",
                                       bytes(MTU + 4)))
    assert v.rule is Rule.LENGTH and v.expected == f"at most {MTU} bytes (the MTU)"


def test_write_only_shorter_than_its_dma_length() -> None:
    w, a, b, _ = setup()
    frame = builder(w, a).build(Opcode.RC_RDMA_WRITE_ONLY, b.qp.qp_num, epsn(w, b),
                                reth(b.mr.buf, b.mr.rkey, 100), bytes(96))
    v = refused(w, frame)
    assert v.rule is Rule.LENGTH
    assert v.expected == "100 bytes (the RETH's DMA length), pad 0"


def test_opcode_out_of_sequence() -> None:
    """A SEND MIDDLE with no SEND FIRST before it (IBA 9.7.4.1.3)."""
    w, a, b, _ = setup()
    v = refused(w, builder(w, a).build(Opcode.RC_SEND_MIDDLE, b.qp.qp_num, epsn(w, b), b"",
                                       bytes(MTU)))
    assert v.rule is Rule.OPCODE_SEQUENCE
    assert (v.expected, v.actual) == ("a FIRST or ONLY opcode", "RC_SEND_MIDDLE")


def test_opcode_of_another_transport() -> None:
    w, a, b, _ = setup()
    v = refused(w, builder(w, a).build(Opcode.UC_SEND_ONLY, b.qp.qp_num, epsn(w, b), b"",
                                       bytes(64)))
    assert v.rule is Rule.TRANSPORT_MISMATCH
    assert (v.expected, v.actual) == ("a RC opcode", "UC_SEND_ONLY")


def test_unknown_opcode() -> None:
    w, a, b, _ = setup()
    good = builder(w, a).build(Opcode.RC_SEND_ONLY, b.qp.qp_num, epsn(w, b), b"", bytes(64))
    p = parse(good)
    frame = bytearray(good)
    frame[p.bth_off] = 0x1E  # reserved in IBA table 38
    v = refused(w, _refit(bytes(frame)))
    assert v.rule is Rule.UNKNOWN_OPCODE and v.qpn == NO_QP
    assert v.actual == "opcode 0x1e"


def test_unknown_destination_qp() -> None:
    w, a, b, _ = setup()
    v = refused(w, builder(w, a).build(Opcode.RC_SEND_ONLY, 0x3FF, epsn(w, b), b"",
                                       bytes(64)))
    assert v.rule is Rule.UNKNOWN_QP and v.qpn == 0x3FF
    assert v.actual.startswith("DestQP 0x3ff")


def test_ack_for_nothing_outstanding() -> None:
    """b has sent nothing on its QP: an ACK for its next PSN answers nothing (a ghost)."""
    w, a, b, _ = setup()
    qp_b = w.nics["b"].qps[b.qp.qp_num]
    frame = builder(w, a).build(Opcode.RC_ACKNOWLEDGE, b.qp.qp_num, qp_b.sq_psn,
                                aeth(0x1F, 1))
    v = refused(w, frame)
    assert v.rule is Rule.GHOST_RESPONSE
    assert "nothing outstanding" in v.expected
    assert v.actual == f"AETH syndrome 0x1f for PSN {qp_b.sq_psn:#08x}"


def test_a_tolerated_rule_is_logged_not_raised() -> None:
    w, a, b, chk = setup(tolerate=(Rule.PSN_SEQUENCE,))
    psn = epsn(w, b)
    w.nics["b"].receive(write_only(w, a, b, (psn + 5) & 0xFFFFFF))  # NAKed, not raised
    assert chk.first is None and [v.rule for v in chk.violations] == [Rule.PSN_SEQUENCE]
    assert chk.log(b.qp.qp_num)[-1].verdict == "psn_sequence"
    chk.check()  # nothing to raise
    settle(w, 2000)
    assert w.nics["b"].counters()["responder.out_of_sequence"] == 1


def test_without_a_checker_the_nic_is_unchanged() -> None:
    """The same bad frames without an observer: counted and dropped or NAKed, nothing
    raised (the default ModelPeer)."""
    w, a, b = pair()
    psn = epsn(w, b)
    nic = w.nics["b"]
    nic.receive(write_only(w, a, b, (psn + 2) & 0xFFFFFF))
    nic.receive(builder(w, a).build(Opcode.RC_SEND_ONLY, 0x3FF, psn, b"", bytes(64)))
    settle(w, 2000)
    c = nic.counters()
    assert c["responder.out_of_sequence"] == 1 and c["rx.unknown_qpn"] == 1
    assert c["responder.naks_sent"] == 1



def uc_sides() -> tuple[World, Side, Side]:
    """A connected UC pair, host b's NIC strict."""
    w = World.two_hosts(seed=0)
    a = make_side(w, "a", 1 << 16, qp_type=e.IBV_QPT_UC)
    b = make_side(w, "b", 1 << 16, qp_type=e.IBV_QPT_UC)
    connect(a, b, e.IBV_MTU_1024)
    connect(b, a, e.IBV_MTU_1024)
    StrictChecker(w.nics["b"])
    return w, a, b


def test_uc_psn_gap_and_a_middle_without_a_first() -> None:
    """UC survives loss (it resynchronizes on the next FIRST or ONLY, IBA 9.8.3), but on a
    link that loses nothing a gap is the sender's: PSN_SEQUENCE; a MIDDLE with no message in
    progress: OPCODE_SEQUENCE."""
    w, a, b = uc_sides()
    psn = epsn(w, b)
    v = refused(w, builder(w, a).build(Opcode.UC_RDMA_WRITE_ONLY, b.qp.qp_num,
                                       (psn + 3) & 0xFFFFFF, reth(b.mr.buf, b.mr.rkey, 64),
                                       bytes(64)))
    assert v.rule is Rule.PSN_SEQUENCE and v.expected == f"PSN {psn:#08x}"
    w, a, b = uc_sides()
    v = refused(w, builder(w, a).build(Opcode.UC_RDMA_WRITE_MIDDLE, b.qp.qp_num, epsn(w, b),
                                       b"", bytes(MTU)))
    assert v.rule is Rule.OPCODE_SEQUENCE and v.actual == "UC_RDMA_WRITE_MIDDLE"
