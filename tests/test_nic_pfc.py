"""The NIC honours PFC pauses (IEEE 802.1Qbb) on the priorities it is told to: a paused
priority stops after the frame in progress for quanta x 512 bit times or until resumed,
other priorities go on, and no byte is lost."""

from __future__ import annotations

from nicsim.driver import enums as e
from nicsim.driver.user.verbs import SGE, SendWR

from nicsim.fabric.pfc import pfc_frame, quanta_ns
from nicsim.nic.config import NicConfig
from nicsim.nic.port import priority_of
from nicsim.testing.rdma import pair, wait
from nicsim.wire.packet import ETH_FCS, ETH_IFG, ETH_MIN_FRAME, ETH_PREAMBLE

SWITCH_MAC = bytes.fromhex("02aa00000001")


class Frames:
    def __init__(self) -> None:
        self.got: list[tuple[int, bytes]] = []

    def write(self, frame: bytes, t_ns: int) -> None:
        self.got.append((t_ns, bytes(frame)))


def wire_ns(frame: bytes, rate_gbps: float) -> float:
    n = max(len(frame), ETH_MIN_FRAME)
    return (n + ETH_PREAMBLE + ETH_FCS + ETH_IFG) * 8 / rate_gbps


def start_write(a, b, size: int) -> None:
    data = bytes(range(256)) * (size // 256)
    a.mr.write(data, size)
    wr = SendWR(opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(a.mr.buf, size, a.mr.lkey)],
                send_flags=e.IBV_SEND_SIGNALED)
    wr.set_wr_rdma(b.mr.rkey, b.mr.buf)
    a.qp.post_send(wr)


def test_paused_priority_stops_after_the_frame_in_progress_and_resumes():
    w, a, b = pair(nic=NicConfig(pfc_classes=(0,)), mr_len=1 << 20)
    link = w.links[0]
    sent = Frames()
    link.end_taps[0].append(sent)
    start_write(a, b, 512 * 1024)
    w.hosts["a"].spend(20_000)  # well into the message
    nic = w.nics["a"]
    quanta = 200
    t_pause = w.env.now
    nic.receive(pfc_frame(SWITCH_MAC, {0: quanta}))
    pause = quanta_ns(quanta, link.cfg.rate_gbps)
    assert wait(a, limit_ns=10e6)[0].status == e.IBV_WC_SUCCESS
    w.hosts["a"].spend(5000)
    assert b.mr.read(512 * 1024) == bytes(range(256)) * 2048
    times = [t for t, f in sent.got]
    after = [t for t in times if t >= t_pause]
    # At most the frame on the wire at the pause finishes; the next starts when it ends.
    first_after = after[0]
    longest = max(wire_ns(f, link.cfg.rate_gbps) for _, f in sent.got)
    assert first_after >= t_pause + pause - 1  # nothing started inside the pause
    assert first_after - (t_pause + pause) < longest
    c = nic.counters()
    assert c["port.pfc_received"] == 1
    assert abs(c["port.paused_ns.prio0"] - pause) <= 1


def test_resume_ends_a_pause_early_and_other_priorities_keep_going():
    w, a, b = pair(nic=NicConfig(pfc_classes=(3,)), mr_len=1 << 20)
    link = w.links[0]
    sent = Frames()
    link.end_taps[0].append(sent)
    start_write(a, b, 256 * 1024)
    w.hosts["a"].spend(10_000)
    nic = w.nics["a"]
    # The QP's traffic is priority 0: a pause of priority 3 does not touch it.
    nic.receive(pfc_frame(SWITCH_MAC, {3: 0xFFFF}))
    n0 = len(sent.got)
    w.hosts["a"].spend(5_000)
    assert len(sent.got) > n0 + 20
    assert {priority_of(f) for _, f in sent.got} == {0}
    wait(a)
    # Pause priority 0 on a NIC that honours only 3: ignored (counted), nothing stops.
    assert nic.counters()["port.pfc_received"] == 1


def test_xon_resumes_at_once():
    w, a, b = pair(nic=NicConfig(pfc_classes=(0,)), mr_len=1 << 20)
    sent = Frames()
    w.links[0].end_taps[0].append(sent)
    start_write(a, b, 512 * 1024)
    w.hosts["a"].spend(10_000)
    nic = w.nics["a"]
    nic.receive(pfc_frame(SWITCH_MAC, {0: 0xFFFF}))  # 335 us at 100 Gb/s
    w.hosts["a"].spend(2_000)
    t_xon = w.env.now
    n = len(sent.got)
    nic.receive(pfc_frame(SWITCH_MAC, {0: 0}))
    w.hosts["a"].spend(2_000)
    resumed = [t for t, _ in sent.got[n:]]
    assert resumed and resumed[0] - t_xon < 100
    assert wait(a)[0].status == e.IBV_WC_SUCCESS
    assert abs(nic.counters()["port.paused_ns.prio0"] - 2_000) < 1


def test_nic_without_pfc_counts_and_ignores_pauses_and_malformed_mac_control():
    w, a, b = pair(mr_len=1 << 20)
    nic = w.nics["a"]
    nic.receive(pfc_frame(SWITCH_MAC, {0: 0xFFFF}))
    bad = bytearray(pfc_frame(SWITCH_MAC, {0: 1}))
    bad[16] = 0xFF  # reserved bits of the class-enable vector
    nic.receive(bytes(bad))
    pause = bytes.fromhex("0180c2000001") + SWITCH_MAC + b"\x88\x08\x00\x01\xff\xff"
    nic.receive(pause + bytes(60 - len(pause)))
    c = nic.counters()
    assert c["port.pfc_ignored"] == 1 and c["port.mac_control_malformed"] == 1
    assert c["port.pause_ignored"] == 1
    start_write(a, b, 64 * 1024)
    assert wait(a)[0].status == e.IBV_WC_SUCCESS
