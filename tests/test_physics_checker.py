"""The physics checker (nicsim.checks.physics) names what no run may show. Each case breaks
one invariant on purpose and expects the checker to say so; a clean run shows nothing."""

from __future__ import annotations

import pytest
from nicsim.driver import enums as e
from nicsim.driver.user.verbs import SGE, SendWR

from nicsim.checks.physics import PhysicsChecker
from nicsim.fabric.faults import FaultConfig
from nicsim.hwif import CqeStatus
from nicsim.nic.port import Port
from nicsim.testing.rdma import pair, rdma_write, settle
from nicsim.testing.ud import Side as UdSide
from nicsim.wire import FrameBuilder, Opcode, Path
from nicsim.world import World

# Every test here breaks physics on purpose: the suite's own checker (conftest) stands aside.
pytestmark = pytest.mark.breaks_physics


def _finish(c: PhysicsChecker) -> list[str]:
    c.world.close()
    return c.finish()


def _stray_frame() -> bytes:
    """A 1 KiB RDMA WRITE MIDDLE from a to b that no QP sent (a test carries it itself)."""
    fb = FrameBuilder(Path(b"\x02" * 6, b"\x04" * 6, bytes([10, 0, 0, 1]),
                           bytes([10, 0, 0, 2]), 0xC000))
    return fb.build(Opcode.RC_RDMA_WRITE_MIDDLE, 0x999, 1, b"", bytes(1024))


def test_a_clean_run_shows_nothing() -> None:
    w, a, b = pair()
    c = PhysicsChecker(w)
    assert rdma_write(a, b.mr.rkey, b.mr.buf, bytes(5000)) == CqeStatus.SUCCESS
    settle(w)
    assert _finish(c) == []


def test_frames_faster_than_the_wire_are_named() -> None:
    w, _a, _b = pair()
    c = PhysicsChecker(w)
    link = w.links[0]
    frame = _stray_frame()
    now = w.env.now
    link.carry(frame, 0, now + 100)
    link.carry(frame, 0, now + 150)  # 50 ns later: a 1 KiB frame takes 84 ns at 100 Gb/s
    w.hosts["a"].spend(10_000)
    found = _finish(c)
    assert any(v.startswith("wire rate: a.eth0 started a frame") for v in found), found


def test_a_completion_ahead_of_its_packet_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bug UD had: a datagram's CQE posted when it was handed to the port."""
    monkeypatch.setattr(Port, "_when_sent", lambda self, t, on_sent: on_sent(t))
    w = World.two_hosts()
    c = PhysicsChecker(w)
    a, b = UdSide(w, "a"), UdSide(w, "b")
    b.recv(1)
    a.send(b, bytes(2000))
    assert [wc.status for wc in a.wait(1)] == [e.IBV_WC_SUCCESS]
    b.wait(1)
    found = _finish(c)
    assert any(v.startswith("completion before the wire: a:") for v in found), found


def test_a_completion_without_its_acknowledgement_is_named() -> None:
    w, a, b = pair(faults=FaultConfig(loss=1.0))  # (no packet gets through)
    c = PhysicsChecker(w)
    nic = w.nics["a"]
    qp = nic.qps[a.qp.qp_num]
    a.mr.write(b"x" * 8, 8)
    wr = SendWR(wr_id=1, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1,
                sg=[SGE(a.mr.buf, 8, a.mr.lkey)], send_flags=e.IBV_SEND_SIGNALED)
    wr.set_wr_rdma(b.mr.rkey, b.mr.buf)
    a.qp.post_send(wr)
    w.hosts["a"].spend(2_000)
    assert qp.outstanding
    nic.completer.ack(qp, qp.outstanding[-1].last_psn, 0)  # as if an ACK had come
    found = c.summary()
    assert any(v.startswith("completion before acknowledgement: a QP") for v in found), found


def test_a_sent_frame_the_port_does_not_count_is_named() -> None:
    w, a, b = pair()
    c = PhysicsChecker(w)
    assert rdma_write(a, b.mr.rkey, b.mr.buf, bytes(5000)) == CqeStatus.SUCCESS
    settle(w)
    w.nics["a"].port._wire.clear()  # the port forgets what it sent
    found = _finish(c)
    assert any(v.startswith("conservation: a.eth0 counts 0 frames sent") for v in found), found


def test_a_payload_placed_faster_than_pcie_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    w, a, b = pair()
    c = PhysicsChecker(w)
    pcie = w.nics["b"].pcie
    monkeypatch.setattr(pcie, "dma_write", lambda n, t, addr=None: w.env.now)  # lands as it arrives
    assert rdma_write(a, b.mr.rkey, b.mr.buf, bytes(5000)) == CqeStatus.SUCCESS
    settle(w)
    found = _finish(c)
    assert any(v.startswith("faster than PCIe: b:") for v in found), found


def test_check_fails_a_run_that_breaks_physics_with_exit_3(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from nicsim.checks import physics
    from nicsim.cli import main

    monkeypatch.delenv("NICSIM_CHECK", raising=False)
    monkeypatch.setattr(Port, "_when_sent", lambda self, t, on_sent: on_sent(t))
    try:
        code = main(["perftest", "ib_send_bw", "-c", "UD", "-s", "1024", "-n", "50",
                     "--check"])
    finally:
        physics.disable()
    err = capsys.readouterr().err
    assert code == 3
    assert "the run broke physics" in err and "completion before the wire" in err


def test_without_check_the_same_run_is_not_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    from nicsim.cli import main

    monkeypatch.delenv("NICSIM_CHECK", raising=False)
    monkeypatch.setattr(Port, "_when_sent", lambda self, t, on_sent: on_sent(t))
    assert main(["perftest", "ib_send_bw", "-c", "UD", "-s", "1024", "-n", "50"]) == 0


def test_a_switch_whose_frames_do_not_add_up_is_named() -> None:
    from nicsim.fabric.topology import Shape, TopologySpec
    from nicsim.workloads.bulk import incast

    w = World.from_topology(TopologySpec(Shape.STAR, hosts=3))
    c = PhysicsChecker(w)
    incast(w, ["h1", "h2"], "h0", msgs=4)
    assert _finish(c) == []
    w.switches["sw0"].ports[1].rx_frames += 1  # a frame counted and then lost track of
    found = c.finish()
    assert any(v.startswith("conservation: sw0 received") for v in found), found


@pytest.mark.parametrize("early_ns", [0.6, 0.3])
def test_a_frame_due_just_after_the_run_ends_is_in_flight(early_ns: float) -> None:
    """A run that stops a fraction of a nanosecond before a frame arrives has not delivered
    it (the taps' start-of-frame times are whole nanoseconds: the link, not the timestamps,
    says what is still on its way; the CM fuzz test's closing world once reported one frame
    too few received)."""
    w, _a, _b = pair()
    c = PhysicsChecker(w)
    link = w.links[0]
    frame = _stray_frame()
    last_bit = w.env.now + 100.37
    link.carry(frame, 0, last_bit)
    w.env.advance(last_bit + link.cfg.prop_ns - early_ns)
    found = _finish(c)
    assert not [v for v in found if v.startswith("conservation: b.eth0")], found
