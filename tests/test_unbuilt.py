"""Frames built only when something looks (nicsim.wire.packet.Unbuilt): between two NICs on a
cable with no fault, MIDDLE packets and the LAST of a WRITE travel as fields, and the peer's
receive fast path takes them without their bytes; a tap records them built. A run must not be
able to tell: the same frames (bytes and arrival times) reach the receiver, the same memory
and completions result, with the same counters, as when every frame is built."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nicsim.driver import enums as e
from nicsim.driver.user.verbs import SGE, RecvWR, SendWR

from nicsim.testing.rdma import pair, settle, wait
from nicsim.wire import parse
from nicsim.wire.packet import Unbuilt

KIB = 1024


class Frames:
    def __init__(self) -> None:
        self.got: list[tuple[int, bytes]] = []

    def write(self, frame: bytes, t_ns: int) -> None:
        self.got.append((t_ns, bytes(frame)))


def _record(w, end: int, log: list, unbuilt: list[int]) -> None:  # noqa: ANN001
    """Wrap what the link hands to end `end`: (time, the frame's bytes) of every frame."""
    link = w.links[0]
    recv = link.ends[end]
    env = w.env

    def record(frame) -> None:  # noqa: ANN001
        if frame.__class__ is Unbuilt:
            unbuilt[0] += 1
            log.append((env.now, frame.build()))
        else:
            log.append((env.now, bytes(frame)))
        recv(frame)

    link.ends[end] = record


def _wr(side, peer, wr_id: int, off: int, n: int, opcode: int = e.IBV_WR_RDMA_WRITE,  # noqa: ANN001
        flags: int = e.IBV_SEND_SIGNALED) -> SendWR:
    wr = SendWR(wr_id=wr_id, opcode=opcode, num_sge=1,
                sg=[SGE(side.mr.buf + off, n, side.mr.lkey)], send_flags=flags)
    if opcode != e.IBV_WR_SEND:
        wr.set_wr_rdma(peer.mr.rkey, peer.mr.buf + off)
    if opcode == e.IBV_WR_RDMA_WRITE_WITH_IMM:
        wr.imm_data = 0x1234
    return wr


def _world(mtu: int, mr_len: int, seed: int, built: bool) -> tuple:
    """Two connected sides with random MR contents, and what each end of the cable receives
    (time, the frame's bytes), with a count of the frames that came unbuilt. `built`: the
    reference, every frame built before it travels (as to a switch)."""
    w, a, b = pair(mtu=mtu, mr_len=mr_len, seed=seed)
    if built:
        w.links[0].general_path(build=True)
    rx: list[list] = [[], []]
    unbuilt = [0]
    for end in (0, 1):
        _record(w, end, rx[end], unbuilt)
    rng = np.random.default_rng(seed)
    for s in (a, b):
        s.mr.write(rng.integers(0, 256, mr_len, np.uint8).tobytes(), mr_len)
    return w, a, b, rx, unbuilt


def _outcome(w, a, b, rx: list, done: list) -> tuple:  # noqa: ANN001
    """Everything a run shows: frames received, completions, end time, memory, counters."""
    settle(w)
    for lk in w.links:
        lk.flush_taps()
    wcs = sorted((c.wr_id, c.status, c.opcode, c.byte_len) for c in done)
    return (rx, wcs, w.env.now, a.mr.read(a.mr.length, 0), b.mr.read(b.mr.length, 0),
            {n: nic.counters() for n, nic in w.nics.items()})


def run(built: bool = False, tapped: bool = False) -> tuple:
    """A fixed mix, as built or unbuilt frames, with or without a tap on the cable."""
    w, a, b, rx, unbuilt = _world(e.IBV_MTU_1024, 512 * KIB, 4, built)
    tap = Frames()
    if tapped:
        w.links[0].taps.append(tap)
    for i in range(2):
        b.qp.post_recv(RecvWR(wr_id=100 + i, num_sge=1,
                              sg=[SGE(b.mr.buf + 448 * KIB + i * 8 * KIB, 8 * KIB, b.mr.lkey)]))
    # Whole MTUs, a LAST of one byte (padded), a LAST with immediate, a SEND, a solicited
    # WRITE, and traffic the other way at the same time.
    a.qp.post_send(_wr(a, b, 1, 0, 64 * KIB))
    a.qp.post_send(_wr(a, b, 2, 64 * KIB, 4 * KIB + 1))
    a.qp.post_send(_wr(a, b, 3, 96 * KIB, 6 * KIB, e.IBV_WR_RDMA_WRITE_WITH_IMM))
    a.qp.post_send(_wr(a, b, 4, 128 * KIB, 5000, e.IBV_WR_SEND))
    a.qp.post_send(_wr(a, b, 5, 160 * KIB, 3 * KIB,
                       flags=e.IBV_SEND_SIGNALED | e.IBV_SEND_SOLICITED))
    b.qp.post_send(_wr(b, a, 6, 256 * KIB, 32 * KIB))
    # The source changes under the first WRITE while it is on the wire: the receiver gets
    # what each DMA read returned when it was made, not what the buffer holds later.
    w.hosts["a"].spend(2000)
    a.mr.write(bytes(range(256)) * 256, 64 * KIB)
    done = wait(a, 5) + wait(b, 3)
    return _outcome(w, a, b, rx, done), tap.got, unbuilt[0]


def test_unbuilt_frames_change_nothing() -> None:
    plain, _, unbuilt = run()
    reference, _, none = run(built=True)
    tapped, tap, _ = run(tapped=True)
    assert unbuilt > 80 and none == 0  # the fast lane was taken, and not in the reference
    assert plain == reference
    assert tapped == reference
    rx, wcs = plain[0], plain[1]
    assert [s for _, s, _, _ in wcs] == [e.IBV_WC_SUCCESS] * 8
    # What arrived is what the tap recorded, byte for byte, every ICRC right.
    sent = sorted(f for _, f in tap)
    assert sorted(f for end in rx for _, f in end) == sent
    for f in sent:
        parse(f)


def test_a_tap_added_while_frames_are_in_flight_records_them_built() -> None:
    w, a, b = pair(mtu=e.IBV_MTU_1024, mr_len=128 * KIB)
    a.mr.write(bytes(range(256)) * 512, 128 * KIB)
    a.qp.post_send(_wr(a, b, 1, 0, 128 * KIB))
    w.hosts["a"].spend(3000)  # the first packets are on the wire, carried unbuilt
    tap = Frames()
    w.links[0].taps.append(tap)
    assert wait(a)[0].status == e.IBV_WC_SUCCESS
    w.links[0].flush_taps()
    assert tap.got
    for _, f in tap.got:
        assert isinstance(f, bytes)
        parse(f)  # ICRC checked
    settle(w)
    assert b.mr.read(128 * KIB, 0) == a.mr.read(128 * KIB, 0)


def test_hostile_unbuilt_packets_get_what_their_frames_would() -> None:
    """An Unbuilt packet gets no more trust than its bytes: from a spoofed address it is
    dropped and counted, and an empty LAST that would end a message whose bytes are all
    placed is an invalid request (a LAST carries at least one byte, C9-92), not a completion."""
    from nicsim.hwif import QpState
    from nicsim.wire import FrameBuilder, Path, reth
    from nicsim.wire.opcodes import Opcode

    w, a, b = pair(mtu=e.IBV_MTU_1024, mr_len=64 * KIB)
    nb = w.nics["b"]
    qa = w.nics["a"].qps[a.qp.qp_num]
    qb = nb.qps[b.qp.qp_num]
    legit = qa.builder
    p = legit.path
    spoofed = FrameBuilder(Path(p.smac, p.dmac, bytes([10, 9, 9, 9]), p.dip, p.sport))
    assert spoofed.deferrable
    before = bytes(b.mr.read(64 * KIB, 0))
    nb.receive(Unbuilt(spoofed, int(Opcode.RC_RDMA_WRITE_MIDDLE), qb.qpn, qb.epsn, b"",
                       bytes(1024)))
    assert nb.counters()["rx.bad_src_ip"] == 1
    # FIRST of 2 KiB (as bytes), its MIDDLE, then an empty LAST: all from the right path.
    psn = qb.epsn
    nb.receive(legit.build(int(Opcode.RC_RDMA_WRITE_FIRST), qb.qpn, psn,
                           reth(b.mr.buf, b.mr.rkey, 2048), bytes([1]) * 1024))
    nb.receive(Unbuilt(legit, int(Opcode.RC_RDMA_WRITE_MIDDLE), qb.qpn, psn + 1, b"",
                       bytes([2]) * 1024))
    assert qb.state is QpState.RTS
    nb.receive(Unbuilt(legit, int(Opcode.RC_RDMA_WRITE_LAST), qb.qpn, psn + 2, b"", b"", True))
    c = nb.counters()
    assert c["responder.naks_sent"] == 1 and qb.state is QpState.ERR
    settle(w)
    assert bytes(b.mr.read(2048, 0)) == bytes([1]) * 1024 + bytes([2]) * 1024
    assert bytes(b.mr.read(64 * KIB - 2048, 2048)) == before[2048:]


_KINDS = (e.IBV_WR_RDMA_WRITE, e.IBV_WR_RDMA_WRITE_WITH_IMM, e.IBV_WR_SEND, e.IBV_WR_RDMA_READ,
          e.IBV_WR_ATOMIC_FETCH_AND_ADD, e.IBV_WR_ATOMIC_CMP_AND_SWP)
_ATOMIC_KINDS = (e.IBV_WR_ATOMIC_FETCH_AND_ADD, e.IBV_WR_ATOMIC_CMP_AND_SWP)
_MTUS = {e.IBV_MTU_256: 256, e.IBV_MTU_1024: 1024, e.IBV_MTU_4096: 4096}


def run_mixed(ops: list[tuple[bool, int, int, bool]], mtu: int, built: bool) -> tuple:
    """Each op (a to b?, kind, length, solicited) in its own 16 KiB slot, posted at once from
    both sides (an atomic adds or compares with its length); every result a run shows."""
    w, a, b, rx, n_unbuilt = _world(mtu, 256 * KIB, 9, built)
    want = {id(a): 0, id(b): 0}
    for k, (a_to_b, kind, n, se) in enumerate(ops):
        src, dst = (a, b) if a_to_b else (b, a)
        if kind == e.IBV_WR_SEND or kind == e.IBV_WR_RDMA_WRITE_WITH_IMM:
            dst.qp.post_recv(RecvWR(wr_id=1000 + k, num_sge=1,
                                    sg=[SGE(dst.mr.buf + 128 * KIB + k * 16 * KIB, 16 * KIB,
                                            dst.mr.lkey)]))
            want[id(dst)] += 1
        flags = e.IBV_SEND_SIGNALED | (e.IBV_SEND_SOLICITED if se else 0)
        if kind in _ATOMIC_KINDS:  # 8 aligned bytes; the original value comes back
            wr = _wr(src, dst, k, k * 16 * KIB, 8, e.IBV_WR_RDMA_WRITE, flags)
            wr.opcode = kind
            wr.set_wr_atomic(dst.mr.rkey, dst.mr.buf + k * 16 * KIB, n, n * 3)
            src.qp.post_send(wr)
        else:
            src.qp.post_send(_wr(src, dst, k, k * 16 * KIB, n, kind, flags))
        want[id(src)] += 1
    done = wait(a, want[id(a)]) + wait(b, want[id(b)])
    return _outcome(w, a, b, rx, done), n_unbuilt[0]


@settings(max_examples=20, deadline=None)
@given(mtu=st.sampled_from(sorted(_MTUS)), data=st.data())
def test_any_mix_of_messages_is_the_same_unbuilt(mtu: int, data: st.DataObject) -> None:
    size = _MTUS[mtu]
    ops = data.draw(st.lists(st.tuples(st.booleans(), st.sampled_from(_KINDS),
                                       st.integers(1, min(3 * size + 7, 16 * KIB)),
                                       st.booleans()), min_size=1, max_size=7))
    plain, _ = run_mixed(ops, mtu, built=False)
    reference, none = run_mixed(ops, mtu, built=True)
    assert none == 0
    assert plain == reference
    assert all(s == e.IBV_WC_SUCCESS for _, s, _, _ in plain[1])


_HOSTILE = ("bad rkey", "out of bounds", "no receive WQE", "PSN ahead", "length past the RETH",
            "ACK from nowhere")


def _hostile(case: str, as_unbuilt: bool) -> tuple:
    """Hand b's NIC one packet from a's path, as a frame or as Unbuilt; everything it shows."""
    from nicsim.wire import aeth, reth
    from nicsim.wire.opcodes import Opcode

    w, a, b = pair(mtu=e.IBV_MTU_1024, mr_len=64 * KIB)
    tap = Frames()
    w.links[0].taps.append(tap)
    nb = w.nics["b"]
    qb = nb.qps[b.qp.qp_num]
    bld = w.nics["a"].qps[a.qp.qp_num].builder
    psn = qb.epsn
    va, rkey = b.mr.buf, b.mr.rkey
    pkt = {  # (opcode, psn, ext, payload, ackreq)
        "bad rkey": (Opcode.RC_RDMA_WRITE_FIRST, psn, reth(va, rkey ^ 0x100, 4096),
                     bytes(1024), False),
        "out of bounds": (Opcode.RC_RDMA_WRITE_ONLY, psn, reth(va + 64 * KIB - 8, rkey, 16),
                          bytes(16), True),
        "no receive WQE": (Opcode.RC_SEND_ONLY, psn, b"", bytes(100), True),
        "PSN ahead": (Opcode.RC_RDMA_WRITE_ONLY, (psn + 5) & 0xFFFFFF, reth(va, rkey, 8),
                      bytes(8), True),
        "length past the RETH": (Opcode.RC_RDMA_WRITE_ONLY, psn, reth(va, rkey, 8),
                                 bytes(12), True),
        "ACK from nowhere": (Opcode.RC_ACKNOWLEDGE, 77, aeth(0, 5), b"", False),
    }[case]
    op, p, ext, payload, ackreq = pkt
    u = Unbuilt(bld, int(op), qb.qpn, p, ext, payload, ackreq)
    nb.receive(u if as_unbuilt else u.build())
    settle(w)
    w.links[0].flush_taps()
    return (tap.got, qb.state, b.mr.read(64 * KIB, 0), nb.counters(), w.env.now)


@pytest.mark.parametrize("case", _HOSTILE)
def test_a_hostile_packet_gets_the_same_answer_unbuilt(case: str) -> None:
    """Valid-ICRC packets with hostile contents, as frames and as Unbuilt: the same NAKs on
    the wire, QP state, memory and counters."""
    framed = _hostile(case, False)
    assert _hostile(case, True) == framed
    assert framed[0] or case == "ACK from nowhere"  # something was answered
