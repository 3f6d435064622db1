"""Congestion control in the NIC: CNP generation (notification point), DCQCN's arithmetic
(reaction point) step by step, pacing at the rate it sets, and bad settings."""

from __future__ import annotations

import struct
from dataclasses import replace

import pytest
from nicsim.driver import enums as e
from nicsim.driver.user.verbs import SGE, SendWR

from nicsim.fabric.link import Link
from nicsim.hwif import QpType
from nicsim.nic.cc import PRESETS, AlphaUpdate, CcConfig, DcqcnParams, cc_from_dict
from nicsim.nic.cc.config import CcAlgorithm, CcConfigError
from nicsim.nic.cc.dcqcn import Dcqcn
from nicsim.nic.config import NicConfig
from nicsim.nic.qp import QpCtx
from nicsim.sim import Sim
from nicsim.testing.rdma import pair, wait
from nicsim.wire import FrameBuilder, parse
from nicsim.wire.opcodes import Opcode
from nicsim.wire.packet import ETH_FCS, ETH_IFG, ETH_PREAMBLE, Ecn, Unbuilt, ipv4_checksum

WIRE_EXTRA = ETH_PREAMBLE + ETH_FCS + ETH_IFG


def ce_mark(frame: bytes) -> bytes:
    """The frame as a switch marks it: ECN = CE, IPv4 header checksum fixed."""
    hdr = bytearray(frame[14:34])
    hdr[1] |= 3
    hdr[10:12] = b"\0\0"
    hdr[10:12] = struct.pack("!H", ipv4_checksum(bytes(hdr)))
    return frame[:14] + bytes(hdr) + frame[34:]


class Marker:
    """Marks CE on every RoCE request a sends to b (a switch past Kmax)."""

    def __init__(self, link: Link, from_end: int) -> None:
        self.orig = link.carry
        self.end = from_end
        self.on = True
        link.carry = self.carry  # type: ignore[method-assign]

    def carry(self, frame: bytes | Unbuilt, from_end: int, t: float) -> None:
        if frame.__class__ is Unbuilt:
            frame = frame.build()  # a switch sees the bytes
        if self.on and from_end == self.end and len(frame) > 60 and frame[23] == 17:
            frame = ce_mark(frame)
        self.orig(frame, from_end, t)


class Frames:
    def __init__(self) -> None:
        self.got: list[tuple[int, bytes]] = []

    def write(self, frame: bytes, t_ns: int) -> None:
        self.got.append((t_ns, bytes(frame)))


def cc_pair(cc: CcConfig, **kw):
    w, a, b = pair(nic=NicConfig(cc=cc), mr_len=4 << 20, **kw)
    return w, a, b


def write(a, b, size: int, n: int = 1) -> None:
    for i in range(n):
        wr = SendWR(wr_id=i, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1,
                    sg=[SGE(a.mr.buf, size, a.mr.lkey)],
                    send_flags=e.IBV_SEND_SIGNALED)
        wr.set_wr_rdma(b.mr.rkey, b.mr.buf)
        a.qp.post_send(wr)


# -- notification point --------------------------------------------------------------------


def test_ce_marked_request_gets_a_cnp_laid_out_as_connectx_sends_it():
    w, a, b = cc_pair(PRESETS["dcqcn_paper"])
    link = w.links[0]
    Marker(link, from_end=0)
    tap = Frames()
    link.end_taps[1].append(tap)  # what b sends
    write(a, b, 4096)
    assert wait(a)[0].status == e.IBV_WC_SUCCESS
    w.hosts["a"].spend(5000)
    cnps = [(t, f) for t, f in tap.got if f[42] == Opcode.CNP]
    assert len(cnps) == 1  # four marked packets within one CNP interval
    t, f = cnps[0]
    p = parse(f)  # ICRC checked
    assert p.dqpn == a.qp.qp_num and p.psn == 0 and p.becn and not p.ackreq
    assert p.pkey == 0xFFFF and not p.migreq
    assert bytes(f[54:70]) == bytes(16) and len(f) == 14 + 20 + 8 + 12 + 16 + 4
    assert f[15] >> 2 == 48 and Ecn(f[15] & 3) is Ecn.ECT0
    data = next(fr for _, fr in tap.got if fr[42] != Opcode.CNP)
    assert p.sport == parse(data).sport  # the QP's own UDP source port
    nb = w.nics["b"].counters()
    assert nb["np.ce_marked"] == 4 and nb["np.cnp_sent"] == 1 and nb["np.cnp_suppressed"] == 3
    na = w.nics["a"].counters()
    assert na["rx.cnp"] == 1 and na["cc.cnp_received"] == 1 and na["cc.rate_cuts"] == 1


def test_cnp_generation_delay_and_interval():
    cc = cc_from_dict({"preset": "dcqcn_paper", "cnp": {"interval_us": 20.0, "delay_ns": 3000}})
    w, a, b = cc_pair(cc)
    link = w.links[0]
    Marker(link, from_end=0)
    sent, back = Frames(), Frames()
    link.end_taps[0].append(sent)
    link.end_taps[1].append(back)
    write(a, b, 64 * 1024, n=4)
    wait(a, 4)
    w.hosts["a"].spend(50_000)
    cnp_t = [t for t, f in back.got if f[42] == Opcode.CNP]
    assert len(cnp_t) >= 3
    assert all(y - x >= 20_000 for x, y in zip(cnp_t, cnp_t[1:], strict=False))
    # The first CNP leaves `delay_ns` (+ its own port's wait) after the first marked
    # request arrives at b: the request's start of frame + serialization + propagation.
    t0, f0 = sent.got[0]
    ns_per_byte = 8 / link.cfg.rate_gbps
    arrive = t0 + (len(f0) + ETH_FCS) * ns_per_byte + link.cfg.prop_ns
    assert 3000 <= cnp_t[0] - arrive < 3000 + 2 * (1100 + WIRE_EXTRA) * ns_per_byte


def test_cnp_from_a_stranger_or_with_cc_none_is_ignored():
    w, a, b = cc_pair(PRESETS["none"])
    Marker(w.links[0], from_end=0)
    write(a, b, 4096)
    wait(a)
    w.hosts["a"].spend(5000)
    na, nb = w.nics["a"].counters(), w.nics["b"].counters()
    assert nb["np.cnp_sent"] == 1  # the NP works whatever the sender's algorithm
    assert na["rx.cnp"] == 1 and na["rx.cnp_ignored"] == 1
    assert w.nics["a"].qps[a.qp.qp_num].rate is None
    # A CNP whose IP source is not the QP's peer does not slow it down.
    w, a, b = cc_pair(PRESETS["dcqcn_paper"])
    qp_a = w.nics["a"].qps[a.qp.qp_num]
    path = w.nics["b"].framing.builder_for(w.nics["b"].qps[b.qp.qp_num], 48).path
    forged = FrameBuilder(replace(path, sip=bytes([10, 9, 9, 9]))).build(
        Opcode.CNP, qp_a.qpn, 0, bytes(16), becn=True, migreq=False)
    w.nics["a"].receive(forged)
    assert w.nics["a"].counters()["rx.cnp_ignored"] == 1
    assert w.nics["a"].qps[a.qp.qp_num].rate is None


# -- reaction point: DCQCN step by step ----------------------------------------------------


class Harness:
    """A Dcqcn with one QP and a line rate of 100 Gb/s, driven by hand."""

    def __init__(self, p: DcqcnParams) -> None:
        self.env = Sim()
        self.changes: list[float | None] = []
        self.cc = Dcqcn(self.env, CcConfig(CcAlgorithm.DCQCN, "t", p), lambda: 100.0,
                        lambda qp: self.changes.append(qp.rate))
        self.qp = QpCtx(1, QpType.RC, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        self.p = p

    def run(self, ns: float) -> None:
        self.env.run(until=self.env.now + ns + 1e-3)  # events at the boundary too


def test_one_cnp_cuts_the_rate_by_alpha_over_two_and_alpha_follows_the_paper():
    p = DcqcnParams()
    h = Harness(p)
    h.cc.on_cnp(h.qp)
    s = h.qp.ccs
    # First CNP: Rt = line, Rc = line (1 - alpha0/2), then alpha = (1-g) alpha0 + g.
    assert s.rt == 100.0
    assert h.qp.rate == pytest.approx(100.0 * (1 - p.alpha_init / 2))
    a1 = (1 - p.g) * p.alpha_init + p.g
    assert s.alpha == pytest.approx(a1)
    # Second CNP 10 us later (no K period passed): the cut uses alpha a1.
    h.run(10_000)
    rc = h.qp.rate
    h.cc.on_cnp(h.qp)
    assert h.qp.ccs.rt == pytest.approx(rc)
    assert h.qp.rate == pytest.approx(rc * (1 - a1 / 2))
    a2 = (1 - p.g) * a1 + p.g
    # Without CNPs alpha decays by (1 - g) every K.
    h.run(3 * p.alpha_period_us * 1000 + 1)
    assert h.cc.alpha(h.qp.ccs) == pytest.approx(a2 * (1 - p.g) ** 3)


def test_increase_phases_fast_recovery_additive_hyper():
    p = DcqcnParams(timer_us=10.0, byte_counter=1 << 40, threshold=2, rai_mbps=100.0,
                    rhai_mbps=1000.0)
    h = Harness(p)
    h.cc.on_cnp(h.qp)
    rt, rc = 100.0, h.qp.rate
    # Timer events only (the byte counter never fires): T = 1, 2 fast recovery (F = 2),
    # then additive increase; hyper increase needs both counters past F.
    for step in range(1, 6):
        h.run(p.timer_us * 1000)
        if step <= p.threshold:
            rc = (rt + rc) / 2
        else:
            rt = min(100.0, rt + p.rai_mbps / 1000)
            rc = (rt + rc) / 2
        assert h.qp.rate == pytest.approx(rc), step
    c = h.cc.counters
    assert c["fast_recovery"] == 2 and c["additive_increase"] == 3 and c["hyper_increase"] == 0


def test_byte_counter_and_hyper_increase():
    p = DcqcnParams(timer_us=10.0, byte_counter=1000, threshold=1, rai_mbps=100.0,
                    rhai_mbps=1000.0)
    h = Harness(p)
    h.cc.on_cnp(h.qp)
    rc0 = h.qp.rate
    h.cc.on_sent(h.qp, 2500)  # two byte events: B_stage 1 (fast recovery), 2 (additive)
    rt = 100.0
    rc = (rt + rc0) / 2
    rt_after_ai = 100.0  # Rt is already at the line rate: it stays there
    rc = (rt_after_ai + rc) / 2
    assert h.qp.rate == pytest.approx(rc)
    assert h.cc.counters["byte_events"] == 2
    # Cut again from a lower rate so that Rt has room, then push both counters past F.
    h.cc.on_cnp(h.qp)
    s = h.qp.ccs
    rt, rc = s.rt, h.qp.rate
    h.run(p.timer_us * 1000)  # T = 1: max(T, B) = 1 <= F: fast recovery
    h.cc.on_sent(h.qp, 1000)  # B = 1: still fast recovery
    h.run(p.timer_us * 1000)  # T = 2: max past F, min(T, B) = 1 not: additive
    h.cc.on_sent(h.qp, 1000)  # B = 2: min(T, B) = 2 > F: hyper
    c = h.cc.counters
    assert (c["fast_recovery"], c["additive_increase"], c["hyper_increase"]) == (2 + 1, 1 + 1, 1)
    assert s.rt == pytest.approx(min(100.0, rt + p.rai_mbps / 1000 + p.rhai_mbps / 1000))


def test_recovered_qp_is_released_and_min_rate_holds():
    p = DcqcnParams(timer_us=1.0, threshold=0, rai_mbps=50_000.0, min_rate_mbps=5000.0)
    h = Harness(p)
    for _ in range(20):
        h.cc.on_cnp(h.qp)
    assert h.qp.rate == pytest.approx(5.0)  # never below the minimum rate
    h.run(20_000)
    assert h.qp.rate is None and h.qp.ccs is None and h.cc.counters["released"] == 1


def test_periodic_alpha_and_reduce_period_as_firmware():
    p = PRESETS["dcqcn_mlx"].dcqcn
    h = Harness(p)
    h.cc.on_cnp(h.qp)  # first CNP: cut at once with alpha_init
    assert h.qp.rate == pytest.approx(100.0 * (1 - p.alpha_init / 2))
    h.run(1000)
    h.cc.on_cnp(h.qp)  # 1 us later, inside the 4 us reduce period: deferred
    rate = h.qp.rate
    assert h.cc.counters["rate_cuts"] == 1 and h.cc.counters["cuts_deferred"] == 1
    h.run(3000 - 1)
    assert h.qp.rate == rate
    # At the end of the period the cut happens with alpha as it is then: the first period
    # had a CNP (+g), the two after it one and none... worked out period by period.
    alpha = p.alpha_init
    k = p.alpha_period_us * 1000
    cnp_times = [0.0, 1000.0]
    for i in range(4):  # periods [0,1us) [1,2) [2,3) [3,4)
        had = any(i * k <= t < (i + 1) * k for t in cnp_times)
        alpha = (1 - p.g) * alpha + (p.g if had else 0)
        if i == 3:
            break
    h.run(2)
    assert h.cc.counters["rate_cuts"] == 2
    assert h.qp.rate == pytest.approx(rate * (1 - alpha / 2), rel=1e-9)


# -- pacing --------------------------------------------------------------------------------


def test_rate_limited_qp_sends_at_its_rate():
    w, a, b = cc_pair(PRESETS["dcqcn_paper"])
    qp = w.nics["a"].qps[a.qp.qp_num]
    qp.rate = 10.0  # Gb/s, as a CNP would have left it
    tap = Frames()
    w.links[0].end_taps[0].append(tap)
    write(a, b, 256 * 1024)
    assert wait(a)[0].status == e.IBV_WC_SUCCESS
    data = [(t, f) for t, f in tap.got if len(f) > 1000]
    t0, t1 = data[0][0], data[-1][0]
    wire_bits = sum(len(f) + WIRE_EXTRA for _, f in data[:-1]) * 8
    assert wire_bits / (t1 - t0) == pytest.approx(10.0, rel=0.01)


def test_dcqcn_write_is_cut_recovers_and_lands_byte_exact():
    w, a, b = cc_pair(replace(PRESETS["dcqcn_paper"], trace=True))
    marker = Marker(w.links[0], from_end=0)
    data = bytes(range(256)) * 8192
    a.mr.write(data, len(data))
    write(a, b, len(data))
    w.hosts["a"].spend(120_000)  # marked for two CNP intervals
    marker.on = False
    assert wait(a, limit_ns=50e6)[0].status == e.IBV_WC_SUCCESS
    w.hosts["a"].spend(5000)
    assert b.mr.read(len(data)) == data
    na = w.nics["a"].counters()
    assert na["cc.rate_cuts"] == na["cc.cnp_received"] >= 2
    assert na["cc.fast_recovery"] >= 1
    series = w.nics["a"].cc.series[a.qp.qp_num]
    rates = [r for _, r, _ in series]
    assert min(rates) < 50.0 and rates[-1] > min(rates)  # cut, then recovering


# -- settings ------------------------------------------------------------------------------


@pytest.mark.parametrize("spec,msg", [
    ("dcqcn_fast", "cc.preset: unknown preset 'dcqcn_fast'"),
    ({"preset": "dcqcn_mlx", "gain": 0.1}, "cc.gain: unknown parameter"),
    ({"preset": "dcqcn_mlx", "g": 0}, "cc.g: must be in (0, 1]"),
    ({"preset": "dcqcn_mlx", "g": "x"}, "cc.g: must be a number"),
    ({"preset": "dcqcn_mlx", "cnp": {"interval_us": -1}}, "cc.cnp.interval_us: must be >= 0"),
    ({"preset": "dcqcn_mlx", "cnp": {"dscp": 64}}, "cc.cnp.dscp: must be in 0..63"),
    ({"preset": "dcqcn_mlx", "cnp": {"rate": 1}}, "cc.cnp.rate: unknown parameter"),
    ({"preset": "dcqcn_mlx", "alpha_update": "sometimes"}, "cc.alpha_update"),
    ({"preset": "none", "g": 0.5}, "cc.g: preset 'none' has no parameters"),
])
def test_bad_cc_settings_are_one_line_errors(spec, msg):
    with pytest.raises(CcConfigError) as ei:
        cc_from_dict(spec)
    assert msg in str(ei.value) and "\n" not in str(ei.value)


def test_overrides_apply_on_top_of_a_preset():
    c = cc_from_dict({"preset": "dcqcn_paper", "g": 0.5, "alpha_update": "periodic",
                      "cnp": {"interval_us": 10}, "trace": True})
    assert c.dcqcn == replace(PRESETS["dcqcn_paper"].dcqcn, g=0.5,
                              alpha_update=AlphaUpdate.PERIODIC)
    assert c.cnp.interval_us == 10 and c.trace and c.algorithm is CcAlgorithm.DCQCN


def test_without_target_clamp_a_burst_of_cnps_keeps_the_target():
    p = DcqcnParams(clamp_target=False, timer_us=10.0)
    h = Harness(p)
    for _ in range(3):
        h.cc.on_cnp(h.qp)
    assert h.qp.ccs.rt == 100.0  # no increase timer between the cuts: target untouched
    rc = h.qp.rate
    h.run(p.timer_us * 1000)  # T = 1: fast recovery towards the line rate
    assert h.qp.rate == pytest.approx((100.0 + rc) / 2)
    before = h.qp.rate
    h.cc.on_cnp(h.qp)  # the timer fired since the last cut: now Rt = Rc
    assert h.qp.ccs.rt == pytest.approx(before)


def test_a_released_qps_old_timer_does_not_fire_for_its_next_state():
    """A QP released while an increase timer is pending, then cut again: the new state
    counts generations from 0 too, so the old timer (same generation number) must stay
    void, and the new state's first increase comes T after its own cut."""
    p = DcqcnParams(timer_us=10.0, byte_counter=1000, threshold=0, rai_mbps=50_000.0)
    h = Harness(p)
    h.cc.on_cnp(h.qp)  # state A, its timer due at 10 us
    h.run(1000)
    h.cc.on_sent(h.qp, 1000)  # one byte event brings Rc near the line: released
    assert h.qp.ccs is None and h.cc.counters["released"] == 1
    h.run(1000)
    h.cc.on_cnp(h.qp)  # state B at 2 us, its timer due at 12 us
    cut = h.qp.rate
    h.run(8500)  # 10.5 us: A's timer came due and is void
    assert h.cc.counters["timer_events"] == 0 and h.qp.rate == cut
    h.run(1500)  # 12 us: B's timer
    assert h.cc.counters["timer_events"] == 1 and h.qp.rate != cut  # raised (or released)
