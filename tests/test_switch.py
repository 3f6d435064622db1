"""The switch (nicsim.fabric.switch) in tiny worlds: a Switch, Links, and stub hosts that
serialize hand-built RoCEv2 frames onto their link the way nicsim.nic.port.Port does, honour
PFC if asked, and record what arrives. Every expected figure is derived from the parameters.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nicsim.fabric.link import Link, LinkConfig
from nicsim.fabric.pfc import (
    MAX_QUANTA,
    PAUSE_OPCODE,
    PFC_DMAC,
    PFC_LEN,
    pfc_frame,
    quanta_ns,
)
from nicsim.fabric.switch import (
    PfcConfig,
    PortSpec,
    RedConfig,
    Scheduler,
    Switch,
    SwitchConfig,
    check_switch_config,
    pfc_headroom_bytes,
)
from nicsim.sim import Sim
from nicsim.testing.switch_world import (
    HDR4,
    WIRE,
    World,
    host_ip,
    host_ip6,
    host_mac,
    incast,
    ipv4_header_ok,
    last_bit_ns,
    slot_ns,
    small_cfg,
    sw_mac,
    write,
)
from nicsim.testing.wire_cases import paths
from nicsim.wire import Ecn, FrameBuilder, Opcode, Path, parse
from nicsim.wire.packet import (
    ETH_MIN_FRAME,
)

# --- forwarding -------------------------------------------------------------------------------


def test_forwarding_rewrites_macs_ttl_checksum_keeps_icrc() -> None:
    w = World(small_cfg(), [100.0, 100.0])
    fb = w.builder(0, 1, ttl=64)
    sent = fb.build(Opcode.RC_RDMA_WRITE_ONLY, 0x33, 5, bytes(16), b"x" * 300, ackreq=True)
    w.hosts[0].send(sent)
    w.env.run()
    [(_, got)] = w.hosts[1].rx
    assert got[0:6] == host_mac(1) and got[6:12] == sw_mac(1)
    assert got[22] == 63  # TTL - 1
    assert ipv4_header_ok(got)
    p = parse(got)  # raises on a bad ICRC
    assert (p.opcode, p.dqpn, p.psn, bytes(p.payload)) == (Opcode.RC_RDMA_WRITE_ONLY, 0x33, 5,
                                                          b"x" * 300)
    # Nothing else changed: TTL and checksum are the only IP bytes a router rewrites here.
    assert got[12:22] == sent[12:22] and got[23:24] == sent[23:24] and got[26:] == sent[26:]
    c = w.sw.counters()
    assert (c["p0.rx_frames"], c["p1.q3.enqueued"], c["p1.q3.dequeued"], c["p1.tx_frames"]) \
        == (1, 1, 1, 1)


@settings(max_examples=40, deadline=None)
@given(paths(), st.integers(2, 255))
def test_rewrite_of_any_path_keeps_frame_valid(path: Path, ttl: int) -> None:
    """Any addresses, DSCP, ECN, flow label, IPv4 or IPv6: after the hop the IP header is
    valid (RFC 1624 update), the hop count is one less and the ICRC still holds."""
    w = World(small_cfg(red=(RedConfig(0, 0, 1.0),) * 8), [100.0, 100.0])
    v6 = path.ipv6
    dst = host_ip6(1) if v6 else host_ip(1)
    path = replace(path, smac=host_mac(0), dmac=sw_mac(0), dip=dst, ttl=ttl)
    sent = FrameBuilder(path).build(Opcode.RC_SEND_ONLY, 7, 9, b"", b"payload!")
    w.hosts[0].send(sent)
    w.env.run()
    [(_, got)] = w.hosts[1].rx
    p = parse(got)
    assert bytes(p.payload) == b"payload!"
    # Kmin = Kmax = 0: every ECT frame is marked, CE stays CE, Not-ECT stays Not-ECT.
    want_ecn = Ecn.NOT_ECT if path.ecn is Ecn.NOT_ECT else Ecn.CE
    assert p.ecn is want_ecn and p.tos >> 2 == path.dscp
    if v6:
        assert got[21] == ttl - 1
    else:
        assert got[22] == ttl - 1 and ipv4_header_ok(got)


@pytest.mark.parametrize("tpids", [(0x8100,), (0x88A8, 0x8100)])
def test_vlan_tagged_frames_classified_by_pcp(tpids: tuple[int, ...]) -> None:
    w = World(small_cfg(classify="pcp"), [100.0, 100.0])
    inner = write(w.builder(0, 1, dscp=26), 502)
    tags = b"".join(t.to_bytes(2, "big") + ((5 << 13) | 42).to_bytes(2, "big") for t in tpids)
    w.hosts[0].send(inner[:12] + tags + inner[12:])
    untagged = write(w.builder(0, 1, dscp=26), 502, psn=1)
    w.hosts[0].send(untagged)
    w.env.run()
    c = w.sw.counters()
    # PCP 5 -> class 5 (not DSCP 26's class 3); untagged -> default priority 0.
    assert (c["p1.q5.enqueued"], c["p1.q0.enqueued"], c["p1.q3.enqueued"]) == (1, 1, 0)
    got = w.hosts[1].rx[0][1]
    n = 4 * len(tpids)
    assert got[12:12 + n] == tags  # the tag is kept
    stripped = got[:12] + got[12 + n:]
    assert stripped[22] == 63 and ipv4_header_ok(stripped)
    parse(stripped)


def test_drops_before_a_queue_are_counted() -> None:
    w = World(small_cfg(), [100.0, 100.0])
    h = w.hosts[0]
    h.send(write(w.builder(0, 1, ttl=1), 202))  # would leave with TTL 0
    h.send(write(w.builder(0, 9), 202))  # no route to 10.0.0.9
    h.send(b"\xff" * 6 + host_mac(0) + b"\x08\x06" + bytes(46))  # ARP: not IP
    wrong = write(w.builder(0, 1), 202)
    h.send(host_mac(7) + wrong[6:])  # not addressed to the switch
    h.send(write(w.builder(0, 1), 1102))  # longer than mtu_bytes
    h.send(write(w.builder(0, 1), 202))  # the one good frame
    w.env.run()
    c = w.sw.counters()
    assert {k: c[f"drop.{k}"] for k in ("ttl", "no_route", "not_ip", "not_our_mac",
                                        "oversize")} == dict.fromkeys(
        ("ttl", "no_route", "not_ip", "not_our_mac", "oversize"), 1)
    assert len(w.hosts[1].rx) == 1 and c["p0.rx_frames"] == 6


def run_mixed_workload() -> tuple[list[list[tuple[float, bytes]]], dict[str, int]]:
    """IPv4 and IPv6 flows over an ECMP group and a plain route, ECT and not, several frame
    sizes, into slower egress links: queues build, RED marks, the threshold drops."""
    cfg = small_cfg(buffer_bytes=60_000, red=(RedConfig(2_000, 30_000, 0.3),) * 8)
    w = World(cfg, [100.0, 25.0, 25.0, 10.0], seed=4)
    group = bytes([10, 7, 7, 7])
    w.sw.add_route(group, [(1, host_mac(1)), (2, host_mac(2))])
    rng = np.random.default_rng(2)
    for flow in range(40):
        v6 = flow % 3 == 0
        if v6:
            fb = w.builder(0, 3, sport=0xC000 + flow, v6=True, ecn=Ecn(flow % 4))
        else:
            dst = group if flow % 2 else host_ip(3)
            fb = FrameBuilder(Path(host_mac(0), sw_mac(0), host_ip(0), dst, 0xC000 + flow,
                                   dscp=26 if flow % 5 else 8, ecn=Ecn(flow % 4)))
        for i in range(15):
            size = int(rng.integers(0, 250)) * 4
            w.hosts[0].send(fb.build(Opcode.RC_SEND_MIDDLE, 5, i, b"", bytes(size)))
    w.env.run()
    return [h.rx for h in w.hosts], w.sw.counters()


def test_flow_cache_gives_the_same_bytes_times_and_counters(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Frames of a known flow take the remembered decision; every frame taking the full
    parse and route instead gives the same frames at the same times and the same counters."""
    fast = run_mixed_workload()
    import nicsim.fabric.switch as switch_mod
    monkeypatch.setattr(switch_mod, "_KEY6", 1 << 30)  # no frame is long enough to look up
    slow = run_mixed_workload()
    assert fast == slow
    c = fast[1]
    assert c["ecn_marked"] > 0 and c["dropped.dynamic_threshold"] > 0
    assert c["p1.tx_frames"] > 0 and c["p2.tx_frames"] > 0 and c["p3.tx_frames"] > 0


# --- timing -----------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [HDR4, 334, 1058])  # HDR4 < 60: padded on the wire
def test_store_and_forward_latency_exact(size: int) -> None:
    rates, props, fwd = [100.0, 25.0], [130.0, 70.0], 640.0
    w = World(small_cfg(fwd_latency_ns=fwd), rates, props)
    frame = write(w.builder(0, 1), size)
    w.hosts[0].send(frame)
    w.env.run()
    [(t, _)] = w.hosts[1].rx
    n = len(frame)
    want = last_bit_ns(n, rates[0]) + props[0] + fwd + last_bit_ns(n, rates[1]) + props[1]
    assert t == pytest.approx(want, abs=1e-6)


def test_egress_serializes_back_to_back_at_its_line_rate() -> None:
    rates, props, fwd, n, k = [100.0, 10.0], [50.0, 50.0], 500.0, 702, 25
    w = World(small_cfg(fwd_latency_ns=fwd), rates, props)
    fb = w.builder(0, 1)
    for i in range(k):
        w.hosts[0].send(write(fb, n, psn=i))
    w.env.run()
    times = [t for t, _ in w.hosts[1].rx]
    first = last_bit_ns(n, rates[0]) + props[0] + fwd + last_bit_ns(n, rates[1]) + props[1]
    assert times == pytest.approx([first + i * slot_ns(n, rates[1]) for i in range(k)],
                                  abs=1e-6)
    assert [parse(f).psn for _, f in w.hosts[1].rx] == list(range(k))


# --- scheduling -------------------------------------------------------------------------------


def test_strict_priority_sends_higher_class_first() -> None:
    rates, prop, fwd, n, k = [100.0, 10.0], 50.0, 500.0, 998, 25
    w = World(small_cfg(fwd_latency_ns=fwd), rates, prop)
    low, high = w.builder(0, 1, dscp=8), w.builder(0, 1, dscp=40)  # classes 1 and 5
    for i in range(k):
        w.hosts[0].send(write(low, n, i))
    for i in range(k):
        w.hosts[0].send(write(high, n, 100 + i))
    w.env.run()
    order = [parse(f).tos >> 5 for _, f in w.hosts[1].rx]
    # Low frame j starts at ready_0 + j x slot_out while the backlog lasts; the high class
    # wins every choice from the moment its first frame is ready.
    ready = [i * slot_ns(n, rates[0]) + last_bit_ns(n, rates[0]) + prop + fwd
             for i in range(2 * k)]
    a = math.ceil((ready[k] - ready[0]) / slot_ns(n, rates[1]))
    assert 0 < a < k
    assert order == [1] * a + [5] * k + [1] * (k - a)


def test_dwrr_byte_shares_follow_weights() -> None:
    weights = (1.0, 1.0, 1.0, 1.0, 1.0, 3.0, 1.0, 1.0)
    w = World(small_cfg(scheduler="dwrr", dwrr_weights=weights, alpha=8.0),
              [100.0, 100.0, 25.0])
    a, b = w.builder(0, 2, dscp=8), w.builder(1, 2, dscp=40)  # classes 1 and 5
    big, small = 1058, 258  # different frame sizes: DWRR shares bytes, not frames
    total = 300_000
    for i in range(total // big):
        w.hosts[0].send(write(a, big, i))
    for i in range(total // small):
        w.hosts[1].send(write(b, small, i))
    w.env.run()
    got = {1: 0, 5: 0}
    half = (total // big * big + total // small * small) / 2
    # Class 5 (3/4 of the line) holds the larger half of the bytes and empties last-but-one:
    # the first half of all bytes leave while both classes still have frames queued.
    for _, f in w.hosts[2].rx:
        got[parse(f).tos >> 5] += len(f)
        if sum(got.values()) >= half:
            break
    share5 = got[5] / sum(got.values())
    assert share5 == pytest.approx(weights[5] / (weights[1] + weights[5]), abs=0.03)
    assert w.sw.counters()["dropped.dynamic_threshold"] == 0


# --- shared buffer ----------------------------------------------------------------------------


@pytest.mark.parametrize("alpha", [0.5, 1.0, 2.0])
def test_dynamic_threshold_limits_queue_to_alpha_times_free(alpha: float) -> None:
    buf, n, k = 100_000, 998, 400
    w = World(small_cfg(buffer_bytes=buf, alpha=alpha), [100.0, 10.0])
    fb = w.builder(0, 1)
    for i in range(k):
        w.hosts[0].send(write(fb, n, i))
    w.env.run()
    c = w.sw.counters()
    # Admitted while depth + n <= alpha (S - depth): the queue tops out at j frames, the
    # largest j with (j - 1) n + n <= alpha (S - (j - 1) n).
    j = math.floor(alpha * (buf + n) / ((1 + alpha) * n))
    assert c["p1.q3.max_depth_bytes"] == j * n
    drops = c["p1.q3.dropped.dynamic_threshold"]
    assert drops > 0 and c["p1.q3.dropped.buffer_full"] == 0
    assert len(w.hosts[1].rx) == k - drops == c["p1.q3.dequeued"]


def test_buffer_full_when_threshold_is_loose() -> None:
    buf, n, k, alpha = 50_000, 998, 200, 100.0
    # The threshold never binds before the pool is full: q + n <= alpha (S - q) holds up to
    # q = S - n.
    assert buf <= alpha * n
    w = World(small_cfg(buffer_bytes=buf, alpha=alpha), [100.0, 10.0])
    fb = w.builder(0, 1)
    for i in range(k):
        w.hosts[0].send(write(fb, n, i))
    w.env.run()
    c = w.sw.counters()
    assert c["p1.q3.max_depth_bytes"] == buf // n * n
    assert c["p1.q3.dropped.buffer_full"] > 0 and c["p1.q3.dropped.dynamic_threshold"] == 0


# --- ECN --------------------------------------------------------------------------------------


def test_red_marking_probability_follows_the_line() -> None:
    """The egress class is paused by the receiver, so the i-th probe finds exactly i x n bytes
    queued; ECT probes are marked with RED's probability at that depth, checked per depth
    band against the binomial spread; Not-ECT and CE frames are left as they are."""
    red = RedConfig(kmin_bytes=20_000, kmax_bytes=100_000, pmax=0.4)
    n = 102
    cfg = small_cfg(red=(red,) * 8,
                    pfc=PfcConfig(classes=(3,), xoff_bytes=1_000_000))
    w = World(cfg, [100.0, 100.0], seed=7)
    k = (red.kmax_bytes + 10_000) // n
    ecns = [Ecn.NOT_ECT if i % 5 == 0 else Ecn.CE if i % 7 == 0 else
            Ecn.ECT1 if i % 2 else Ecn.ECT0 for i in range(k)]
    fbs = {e: w.builder(0, 1, ecn=e) for e in Ecn}
    w.hosts[1].send_ctrl(pfc_frame(host_mac(1), {3: MAX_QUANTA}))

    def probes() -> None:
        for i, e in enumerate(ecns):
            w.hosts[0].send(write(fbs[e], n, i))

    w.at(1_000, probes)
    w.at(1_000 + k * slot_ns(n, 100.0) + 2_000,
         lambda: w.hosts[1].send_ctrl(pfc_frame(host_mac(1), {3: 0})))
    w.env.run()
    rx = [f for _, f in w.hosts[1].rx]
    assert [parse(f).psn for f in rx] == list(range(k))
    assert all(ipv4_header_ok(f) for f in rx)
    got = [parse(f).ecn for f in rx]
    bands: dict[int, list[tuple[float, bool]]] = {}
    marks = 0
    for i, (sent, now) in enumerate(zip(ecns, got, strict=True)):
        if sent in (Ecn.NOT_ECT, Ecn.CE):
            assert now is sent
            continue
        marked = now is Ecn.CE
        marks += marked
        depth = i * n
        p = red.probability(depth)
        if depth < red.kmin_bytes:
            assert not marked
        elif depth >= red.kmax_bytes:
            assert marked
        else:
            bands.setdefault(4 * (depth - red.kmin_bytes)
                             // (red.kmax_bytes - red.kmin_bytes), []).append((p, marked))
    assert sorted(bands) == [0, 1, 2, 3]
    for band in bands.values():
        mean = sum(p for p, _ in band)
        sd = math.sqrt(sum(p * (1 - p) for p, _ in band))
        # 4 standard deviations: a false alarm about once in 16,000 seeds.
        assert abs(sum(m for _, m in band) - mean) <= 4 * sd + 1
    assert w.sw.counters()["p1.q3.ecn_marked"] == marks


def test_red_probability_function() -> None:
    r = RedConfig(1000, 3000, 0.2)
    assert [r.probability(d) for d in (0, 999, 1000, 2000, 2999, 3000, 10**6)] == \
        pytest.approx([0, 0, 0, 0.1, 0.2 * 1999 / 2000, 1, 1])


# --- PFC --------------------------------------------------------------------------------------


def test_pfc_incast_is_lossless_and_pauses_senders() -> None:
    senders, frames, n = 8, 150, 1058
    w, cfg = incast(True, senders, frames, n)
    c = w.sw.counters()
    assert len(w.hosts[0].rx) == senders * frames
    for k in ("dropped.dynamic_threshold", "dropped.buffer_full", "dropped.headroom_overflow"):
        assert c[k] == 0, k
    # Each sender's flow arrives whole and in order.
    psns: dict[int, list[int]] = {}
    for _, f in w.hosts[0].rx:
        psns.setdefault(f[29], []).append(parse(f).psn)  # last byte of the source IP
    assert psns == {s: list(range(frames)) for s in range(1, senders + 1)}
    pfc_frames = [(s, pf) for s in range(1, senders + 1) for _, pf, _ in w.hosts[s].pfc_rx]
    assert pfc_frames and sum(c[f"p{s}.pause_sent"] + c[f"p{s}.resume_sent"]
                              for s in range(1, senders + 1)) == len(pfc_frames)
    for s, pf in pfc_frames:
        assert pf.src == sw_mac(s) and pf.enable == 1 << 3
        assert pf.quanta[3] in (MAX_QUANTA, 0) and not any(pf.quanta[:3] + pf.quanta[4:])
    paused = [s for s in range(1, senders + 1) if c[f"p{s}.pause_sent"]]
    assert len(paused) >= senders // 2
    for s in range(1, senders + 1):
        h = w.hosts[s]
        head = w.sw.headroom(s)
        assert c[f"p{s}.pg3.headroom_max_bytes"] <= head
        # The last resume leaves every sender free to finish.
        assert not any(q for q in h.queues) and (not h.pfc_rx or h.pfc_rx[-1][1].quanta[3] == 0)
    # The senders were held back: they could not start their last frames before the
    # bottleneck had drained all but what the buffer, the cables and the pipeline hold.
    total_line = senders * frames * slot_ns(n, 100.0)
    in_flight = senders * (slot_ns(n, 100.0) + 100.0) + cfg.fwd_latency_ns + 100.0
    finish = max(h.sent[-1][0] for h in w.hosts[1:])
    assert finish >= total_line - cfg.buffer_bytes * 8 / 100.0 - in_flight
    assert finish > frames * slot_ns(n, 100.0) * 2  # far slower than line rate alone


def test_pfc_frames_on_the_wire_are_well_formed() -> None:
    """The bytes the switch put on the wire, field by field (802.1Qbb): destination
    01:80:C2:00:00:01, source the port's MAC, MAC Control 0x8808, opcode 0x0101, class-enable
    vector with bit 3, eight 16-bit times, zero padding to 60 bytes."""
    w, _ = incast(True, senders=4, frames=100)
    seen = 0
    for s in range(1, 5):
        for _, _, raw in w.hosts[s].pfc_rx:
            assert len(raw) == ETH_MIN_FRAME
            assert raw[:6] == PFC_DMAC and raw[6:12] == sw_mac(s)
            assert raw[12:16] == b"\x88\x08\x01\x01" and raw[16:18] == b"\x00\x08"
            times = [int.from_bytes(raw[18 + 2 * c:20 + 2 * c], "big") for c in range(8)]
            assert times[3] in (MAX_QUANTA, 0) and times[:3] + times[4:] == [0] * 7
            assert not any(raw[PFC_LEN:])
            seen += 1
    assert seen


def test_without_pfc_the_same_incast_drops() -> None:
    senders, frames = 8, 150
    w, _ = incast(False, senders, frames)
    c = w.sw.counters()
    drops = c["dropped.dynamic_threshold"] + c["dropped.buffer_full"]
    assert drops > 0 and len(w.hosts[0].rx) == senders * frames - drops
    assert all(not h.pfc_rx for h in w.hosts)


def test_headroom_holds_long_cable_and_jumbo_frames() -> None:
    """Long cable, largest frames: the headroom used stays within the formula's bound."""
    mtu = 9214
    w, _ = incast(True, senders=4, frames=40, n=mtu, prop=2_000.0, mtu=mtu,
                  shared=2 * mtu)
    c = w.sw.counters()
    assert c["dropped.headroom_overflow"] == 0 and len(w.hosts[0].rx) == 4 * 40
    used = [c[f"p{s}.pg3.headroom_max_bytes"] for s in range(1, 5)]
    assert max(used) > 0 and max(used) <= w.sw.headroom(1)


def test_headroom_overflow_is_counted_when_senders_ignore_pfc() -> None:
    w, _ = incast(True, senders=8, frames=150, honour=False)
    c = w.sw.counters()
    assert c["dropped.headroom_overflow"] > 0
    assert c["dropped.dynamic_threshold"] == c["dropped.buffer_full"] == 0


def test_received_pfc_pauses_one_class_for_its_quanta() -> None:
    rate, prop, fwd, n, quanta = 100.0, 80.0, 500.0, 502, 3000
    cfg = small_cfg(fwd_latency_ns=fwd, pfc=PfcConfig(classes=(3,)))
    w = World(cfg, [rate, rate], prop)
    # Class 1 is not lossless: its half of the frame is ignored (PFC is enabled per priority).
    w.hosts[1].send_ctrl(pfc_frame(host_mac(1), {3: quanta, 1: quanta}))
    w.hosts[0].send(write(w.builder(0, 1, dscp=26), n, 1))  # class 3: paused
    w.hosts[0].send(write(w.builder(0, 1, dscp=8), n, 2), tc=1)  # class 1: not paused
    w.env.run()
    (t1, f1), (t3, f3) = w.hosts[1].rx
    assert (parse(f1).psn, parse(f3).psn) == (2, 1)
    pause_at = last_bit_ns(ETH_MIN_FRAME, rate) + prop
    assert t3 == pytest.approx(pause_at + quanta_ns(quanta, rate) + last_bit_ns(n, rate) + prop,
                               abs=1e-6)
    low_ready = slot_ns(n, rate) + last_bit_ns(n, rate) + prop + fwd
    assert t1 == pytest.approx(low_ready + last_bit_ns(n, rate) + prop, abs=1e-6)
    c = w.sw.counters()
    assert c["p1.pause_received"] == 1
    assert c["p1.q3.paused_ns"] == round(quanta_ns(quanta, rate)) and c["p1.q1.paused_ns"] == 0


def test_resume_ends_a_pause_and_8023x_pause_is_ignored() -> None:
    rate, prop, fwd, n, resume_at = 100.0, 80.0, 500.0, 502, 5_000.0
    cfg = small_cfg(fwd_latency_ns=fwd, pfc=PfcConfig(classes=(3,)))
    w = World(cfg, [rate, rate], prop)
    w.hosts[1].send_ctrl(pfc_frame(host_mac(1), {3: MAX_QUANTA}))
    pause_8023x = (PFC_DMAC + host_mac(1) + b"\x88\x08" + PAUSE_OPCODE.to_bytes(2, "big")
                   + MAX_QUANTA.to_bytes(2, "big")).ljust(ETH_MIN_FRAME, b"\0")
    w.hosts[1].send_ctrl(pause_8023x)
    w.hosts[0].send(write(w.builder(0, 1), n))
    w.at(resume_at, lambda: w.hosts[1].send_ctrl(pfc_frame(host_mac(1), {3: 0})))
    w.env.run()
    [(t, _)] = w.hosts[1].rx
    resumed = resume_at + last_bit_ns(ETH_MIN_FRAME, rate) + prop
    assert t == pytest.approx(resumed + last_bit_ns(n, rate) + prop, abs=1e-6)
    c = w.sw.counters()
    assert (c["p1.pause_received"], c["p1.pause_8023x_received"]) == (2, 1)
    assert c["p1.q3.paused_ns"] == round(resumed - (last_bit_ns(ETH_MIN_FRAME, rate) + prop))


def test_pause_propagates_upstream_and_is_refreshed() -> None:
    """The receiver holds the switch's egress paused for three pause times (re-sending its
    pause); the switch's queue fills, it pauses both senders and keeps them paused by
    refreshing its own PFC frames until the receiver lets go: nothing is lost."""
    rate, prop, n, frames = 100.0, 100.0, 1058, 100
    long_pause = quanta_ns(MAX_QUANTA, rate)
    hold = 3 * long_pause
    cfg = small_cfg(buffer_bytes=200_000, pfc=PfcConfig(classes=(3,)))
    w = World(cfg, [rate] * 3, prop)
    rx = w.hosts[0]
    for k in range(6):  # every half pause time until `hold`
        w.at(k * long_pause / 2, lambda: rx.send_ctrl(pfc_frame(host_mac(0), {3: MAX_QUANTA})))
    w.at(hold, lambda: rx.send_ctrl(pfc_frame(host_mac(0), {3: 0})))
    for s in (1, 2):
        fb = w.builder(s, 0, sport=0xC000 + s)
        for i in range(frames):
            w.hosts[s].send(write(fb, n, i))
    w.env.run()
    c = w.sw.counters()
    assert len(rx.rx) == 2 * frames and c["dropped.headroom_overflow"] == 0
    assert c["p0.q3.paused_ns"] == round(hold)
    for s in (1, 2):
        first_xoff = w.hosts[s].pfc_rx[0][0]
        # One XOFF, refreshed every half pause time while the receiver held on.
        refreshes = math.floor((hold - first_xoff) / (long_pause / 2))
        before = [pf.quanta[3] for t, pf, _ in w.hosts[s].pfc_rx if t < hold]
        assert before == [MAX_QUANTA] * (1 + refreshes)
        # The sender sent nothing from one frame after the XOFF until the receiver let go.
        starts = [st for st, _ in w.hosts[s].sent]
        assert not [st for st in starts if first_xoff + slot_ns(n, rate) < st < hold]
        assert max(starts) > hold


# --- ECMP -------------------------------------------------------------------------------------


def chi2_sf(x: float, df: int) -> float:
    """P(X >= x) for a chi-square variable with `df` degrees of freedom: the regularized
    upper incomplete gamma Q(df/2, x/2), by its recurrence from Q(1/2) or Q(1)."""
    y = x / 2
    if df % 2:
        q, a = math.erfc(math.sqrt(y)), 0.5
    else:
        q, a = math.exp(-y), 1.0
    while a < df / 2:
        q += math.exp(a * math.log(y) - y - math.lgamma(a + 1))
        a += 1
    return q


def chi2_uniform_p(counts: list[int]) -> float:
    e = sum(counts) / len(counts)
    return chi2_sf(sum((o - e) ** 2 / e for o in counts), len(counts) - 1)


def test_chi2_helper_matches_known_values() -> None:
    # Q(1, y) = e^-y exactly for df 2; df 1 is erfc; the recurrence links them to df 3, 4.
    assert chi2_sf(5.0, 2) == pytest.approx(math.exp(-2.5))
    assert chi2_sf(3.0, 1) == pytest.approx(math.erfc(math.sqrt(1.5)))
    y = 2.0
    assert chi2_sf(2 * y, 4) == pytest.approx(math.exp(-y) * (1 + y))
    assert chi2_sf(2 * y, 3) == pytest.approx(
        math.erfc(math.sqrt(y)) + 2 * math.sqrt(y / math.pi) * math.exp(-y))


def test_ecmp_spreads_flows_and_keeps_each_on_one_path() -> None:
    uplinks, flows, repeat = 4, 800, 3
    w = World(small_cfg(), [100.0] * (1 + uplinks), seed=3)
    dst = bytes([10, 9, 9, 9])
    w.sw.add_route(dst, [(u, host_mac(u)) for u in range(1, 1 + uplinks)])
    rng = np.random.default_rng(11)
    sports = rng.choice(np.arange(0xC000, 0x10000), flows, replace=False)
    for sp in sports:
        fb = FrameBuilder(Path(host_mac(0), sw_mac(0), host_ip(0), dst, int(sp)))
        for i in range(repeat):
            w.hosts[0].send(write(fb, 102, i))
    w.env.run()
    where: dict[int, set[int]] = {}
    counts = []
    for u in range(1, 1 + uplinks):
        got = w.hosts[u].rx
        counts.append(len(got) // repeat)
        for _, f in got:
            where.setdefault(f[34] << 8 | f[35], set()).add(u)  # UDP source port
    assert len(where) == flows and all(len(s) == 1 for s in where.values())
    assert sum(counts) == flows
    assert chi2_uniform_p(counts) > 0.001


def test_ecmp_tiers_do_not_polarize() -> None:
    """Flows one switch sends to member 0 spread evenly over another switch's members; two
    switches with the same salt (same name and seed) would send them all to one."""
    env = Sim()
    leaf = Switch(env, "leaf1", SwitchConfig(), seed=5)
    spine = Switch(env, "spine1", SwitchConfig(), seed=5)
    twin = Switch(env, "leaf1", SwitchConfig(), seed=5)
    m, frames = 4, []
    for sp in range(0xC000, 0xC000 + 4000):
        fb = FrameBuilder(Path(host_mac(0), sw_mac(0), host_ip(1), host_ip(2), sp))
        frames.append(fb.build(Opcode.RC_SEND_ONLY, 1, 0, b"", b""))
    first = [f for f in frames if leaf.ecmp_member(f, m) == 0]
    counts = [0] * m
    for f in first:
        counts[spine.ecmp_member(f, m)] += 1
    assert chi2_uniform_p(counts) > 0.001
    assert {twin.ecmp_member(f, m) for f in first} == {0}


# --- configuration ----------------------------------------------------------------------------


@pytest.mark.parametrize(("make", "field"), [
    (lambda: SwitchConfig(red=(RedConfig(9000, 8000, 0.1),) * 8), "red[0].kmin_bytes"),
    (lambda: SwitchConfig(red=(RedConfig(pmax=1.5),) * 8), "red[0].pmax"),
    (lambda: SwitchConfig(alpha=0), "alpha"),
    (lambda: SwitchConfig(classify="vlan"), "classify"),  # type: ignore[arg-type]
    (lambda: SwitchConfig(scheduler="wfq"), "scheduler"),  # type: ignore[arg-type]
    (lambda: SwitchConfig(dwrr_weights=(1.0,) * 7), "dwrr_weights"),
    (lambda: SwitchConfig(dwrr_weights=(1.0,) * 7 + (0.0,)), "dwrr_weights"),
    (lambda: SwitchConfig(dscp_map=(0,) * 63), "dscp_map"),
    (lambda: SwitchConfig(pfc=PfcConfig(classes=(3, 8))), "pfc.classes"),
    (lambda: SwitchConfig(buffer_bytes=0), "buffer_bytes"),
    (lambda: check_switch_config(SwitchConfig(buffer_bytes=100_000),
                                 [PortSpec(100.0, 100.0)] * 4), "buffer_bytes"),
    (lambda: check_switch_config(SwitchConfig(pfc=PfcConfig(headroom_bytes=10_000)),
                                 [PortSpec(100.0, 100.0)]), "pfc.headroom_bytes"),
])
def test_bad_config_names_the_field(make: Callable[[], object], field: str) -> None:
    with pytest.raises(ValueError) as e:
        make()
    msg = str(e.value)
    assert msg.startswith(f"{field}: ") and "\n" not in msg


def test_buffer_check_is_exactly_mtu_plus_headroom() -> None:
    ports = [PortSpec(100.0, 100.0), PortSpec(40.0, 1000.0)]
    cfg = SwitchConfig(pfc=PfcConfig(classes=(3, 4)))
    heads = [pfc_headroom_bytes(p.rate_gbps, p.prop_ns, cfg.mtu_bytes, 2) for p in ports]
    need = cfg.mtu_bytes + 2 * sum(heads)
    assert check_switch_config(replace(cfg, buffer_bytes=need), ports) == heads
    with pytest.raises(ValueError, match="^buffer_bytes: "):
        check_switch_config(replace(cfg, buffer_bytes=need - 1), ports)
    # A configured headroom must hold what the formula says is in flight on every port.
    ok = replace(cfg, pfc=replace(cfg.pfc, headroom_bytes=max(heads)))
    assert check_switch_config(ok, ports) == [max(heads)] * 2
    with pytest.raises(ValueError, match="^pfc.headroom_bytes: "):
        check_switch_config(replace(cfg, pfc=replace(cfg.pfc, headroom_bytes=max(heads) - 1)),
                            ports)


def test_headroom_formula_terms() -> None:
    rate, prop, mtu = 100.0, 500.0, 4200
    w = WIRE
    # Frame in reception + PFC behind a max frame + PFC frame + sender's frame + round trip.
    want = mtu + (mtu + w) + (ETH_MIN_FRAME + w) + (mtu + w) + rate / 8 * 2 * prop
    assert pfc_headroom_bytes(rate, prop, mtu) == math.ceil(want)
    assert pfc_headroom_bytes(rate, prop, mtu, 3, 100.0) == math.ceil(
        want + 2 * (ETH_MIN_FRAME + w) + rate / 8 * 100.0)


def test_add_port_refuses_headroom_the_buffer_cannot_hold() -> None:
    env = Sim()
    head = pfc_headroom_bytes(100.0, 100.0, 1100)
    sw = Switch(env, "s", SwitchConfig(buffer_bytes=1100 + 2 * head, mtu_bytes=1100), 0)
    for i in range(2):
        sw.add_port(Link(env, LinkConfig(100.0, 100.0)), sw_mac(i))
    assert sw.shared_bytes == 1100
    with pytest.raises(ValueError, match="^buffer_bytes: "):
        sw.add_port(Link(env, LinkConfig(100.0, 100.0)), sw_mac(2))


def test_scheduler_enum_from_string() -> None:
    assert SwitchConfig(scheduler="dwrr").scheduler is Scheduler.DWRR
