"""HPCC, TIMELY and DCTCP checked against their papers' update rules: a sequence of signals
fed by hand, and the exact rates the equations give, worked out here independently."""

from __future__ import annotations

import pytest

from nicsim.hwif import QpType
from nicsim.nic.cc import cc_from_dict
from nicsim.nic.cc.dctcp import Dctcp
from nicsim.nic.cc.hpcc import Hpcc
from nicsim.nic.cc.timely import Timely
from nicsim.nic.qp import QpCtx
from nicsim.sim import Sim
from nicsim.wire.telemetry import IntHop

LINE = 100.0  # Gb/s


def harness(cls, spec):  # type: ignore[no-untyped-def]
    env = Sim()
    cc = cls(env, cc_from_dict(spec), lambda: LINE, lambda qp: None)
    qp = QpCtx(1, QpType.RC, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    return env, cc, qp


# -- HPCC (Li et al. 2019, Algorithm 1) --------------------------------------------------------


def hop(ts: int, tx: int, qlen: int) -> IntHop:
    return IntHop(LINE, ts, tx, qlen)


def test_hpcc_follows_algorithm_1_ack_by_ack():
    # T = 10 us, eta 0.95, maxStage 5, W_AI = 800 Mb/s x T = 1000 bytes.
    env, cc, qp = harness(Hpcc, {"algorithm": "hpcc", "base_rtt_us": 10, "rai_mbps": 800})
    T, B, eta, wai = 10_000.0, LINE / 8, 0.95, 1000.0  # ns, bytes/ns
    w_init = B * T  # 125 kB
    qp.sq_psn = 100  # snd_nxt without send times
    cc.on_int(qp, 1, [hop(0, 0, 50_000)])  # the first ACK only sets L
    assert qp.rate is None and qp.ccs.prev is not None
    # ACK 2, 5 us later: the hop sent 62.5 kB (txRate 12.5 B/ns = B) with 50 kB queued both
    # times: u' = 50e3 / (B T) + 1 = 1.4; tau = 5 us: U = (1 - 0.5) 1 + 0.5 x 1.4 = 1.2.
    cc.on_int(qp, 2, [hop(5000, 62_500, 50_000)])
    u = 0.5 * 1.0 + 0.5 * (50_000 / (B * T) + 1.0)
    assert cc.p.eta == eta and qp.ccs.u == pytest.approx(u)
    # U >= eta: W = Wc / (U / eta) + W_AI, and (ack 2 > lastUpdateSeq: none yet) Wc = W.
    w = w_init / (u / eta) + wai
    assert qp.ccs.wc == pytest.approx(w) and qp.ccs.inc_stage == 0
    assert qp.rate == pytest.approx(w * 8 / T)
    assert qp.ccs.last_update_seq == 100
    # ACK 3 (< lastUpdateSeq 100): queue gone, the hop sent 25 kB in 10 us (0.2 B): tau = T,
    # U = u' = 0 / (B T) + 2.5 / 12.5 = 0.2 < eta and incStage 0 < 5: W = Wc + W_AI, Wc kept.
    cc.on_int(qp, 3, [hop(15_000, 87_500, 0)])
    assert qp.ccs.u == pytest.approx(0.2)
    assert qp.rate == pytest.approx((w + wai) * 8 / T) and qp.ccs.wc == pytest.approx(w)
    # ACK 101 (> 100): the same, and now Wc = W, incStage 1, lastUpdateSeq = snd_nxt.
    qp.sq_psn = 200
    cc.on_int(qp, 101, [hop(25_000, 112_500, 0)])
    assert qp.ccs.wc == pytest.approx(w + wai) and qp.ccs.inc_stage == 1
    assert qp.ccs.last_update_seq == 200


def test_hpcc_after_max_stage_additive_steps_increases_multiplicatively():
    env, cc, qp = harness(Hpcc, {"algorithm": "hpcc", "base_rtt_us": 10, "rai_mbps": 800,
                                 "max_stage": 2})
    T, wai = 10_000.0, 1000.0
    cc.on_int(qp, 0, [hop(0, 0, 0)])
    ts = tx = 0
    psn = 0
    for _ in range(3):  # U = 0.2 each time: two AI stages, then MI
        ts += 10_000
        tx += 25_000
        psn += 10
        qp.sq_psn = psn
        cc.on_int(qp, psn, [hop(ts, tx, 0)])
    w0 = LINE / 8 * T
    w_ai2 = w0 + 2 * wai  # after two AI stages (each moved Wc)
    assert qp.ccs.inc_stage == 0  # reset by the multiplicative step
    assert qp.ccs.wc == pytest.approx(w_ai2 / (0.2 / 0.95) + wai)
    assert qp.rate == LINE  # (capped at the line rate)


def test_hpcc_takes_the_most_loaded_hop_and_skips_one_that_did_not_move():
    env, cc, qp = harness(Hpcc, {"algorithm": "hpcc", "base_rtt_us": 10})
    B, T = LINE / 8, 10_000.0
    cc.on_int(qp, 0, [hop(0, 0, 0), hop(0, 0, 10_000), hop(0, 0, 0)])
    # Hop 1: 0.5 B, no queue (u' 0.5). Hop 2: B and 20 kB queued (min of 10 kB, 20 kB):
    # u' = 10e3 / (B T) + 1 = 1.08. Hop 3: its timestamp did not move: skipped.
    cc.on_int(qp, 1, [hop(10_000, 62_500, 0), hop(10_000, 125_000, 20_000), hop(0, 5, 0)])
    assert qp.ccs.u == pytest.approx(10_000 / (B * T) + 1.0)


# -- TIMELY (Mittal et al. 2015, Algorithm 1) --------------------------------------------------


def test_timely_follows_algorithm_1_sample_by_sample():
    spec = {"algorithm": "timely", "alpha": 0.5, "beta": 0.8, "delta_mbps": 100,
            "t_low_us": 10, "t_high_us": 100, "min_rtt_us": 5, "hai_thresh": 2, "hai_n": 5}
    env, cc, qp = harness(Timely, spec)
    cc.on_ack(qp, 1, None)  # no sample: nothing
    assert qp.ccs is None
    cc.on_ack(qp, 1, 20_000.0)  # the first sample sets prev_rtt
    assert qp.ccs.prev_rtt == 20_000 and qp.rate is None
    # rtt 30 us: diff 10 us, rtt_diff = 0.5 x 10 us = 5 us, gradient 5/5 = 1 > 0:
    # rate = 100 (1 - 0.8 x 1) = 20 Gb/s.
    cc.on_ack(qp, 2, 30_000.0)
    assert qp.rate == pytest.approx(20.0)
    # rtt 25 us: diff -5 us, rtt_diff = 0.5 x 5 + 0.5 x -5 = 0: gradient 0 <= 0, first in a
    # row: + delta.
    cc.on_ack(qp, 3, 25_000.0)
    assert qp.rate == pytest.approx(20.1)
    # rtt 24 us: rtt_diff = 0.5 x -1 us: gradient < 0, second in a row (hai_thresh 2): +5 delta
    cc.on_ack(qp, 4, 24_000.0)
    assert qp.rate == pytest.approx(20.6)
    # rtt 200 us > T_high: rate (1 - beta (1 - T_high / rtt)) = 20.6 (1 - 0.8 x 0.5)
    cc.on_ack(qp, 5, 200_000.0)
    assert qp.rate == pytest.approx(20.6 * 0.6)
    # rtt 5 us < T_low: + delta
    cc.on_ack(qp, 6, 5_000.0)
    assert qp.rate == pytest.approx(20.6 * 0.6 + 0.1)
    # a gradient that would take the rate below the minimum stops there
    cc.on_ack(qp, 7, 90_000.0)
    assert qp.rate == pytest.approx(0.1)


# -- DCTCP (Alizadeh et al. 2010, section 3.1, equation (1)) ----------------------------------


def test_dctcp_cuts_once_per_window_and_updates_alpha_by_equation_1():
    env, cc, qp = harness(Dctcp, {"algorithm": "dctcp", "g": 0.25, "rai_mbps": 500})
    g = 0.25
    qp.sq_psn = 10  # snd_nxt (no send times): the first window is PSNs up to 9
    cc.on_ack(qp, 0, None)
    # Two marks (CNPs) in the window: the first cuts at once with alpha 1 (rate / 2), the
    # second does not cut again.
    cc.on_cnp(qp)
    assert qp.rate == pytest.approx(50.0)
    cc.on_cnp(qp)
    assert qp.rate == pytest.approx(50.0)
    cc.on_ack(qp, 4, None)
    qp.sq_psn = 20
    cc.on_ack(qp, 8, None)  # 8 packets acknowledged so far
    cc.on_ack(qp, 9, None)  # the window ends: F = 2 / 9, alpha = 0.75 + 0.25 F
    a1 = (1 - g) * 1.0 + g * (2 / 9)
    assert qp.ccs.alpha == pytest.approx(a1) and qp.rate == pytest.approx(50.0)
    # The next window (to PSN 19) has one mark: cut by alpha / 2 at once.
    cc.on_cnp(qp)
    assert qp.rate == pytest.approx(50.0 * (1 - a1 / 2))
    cc.on_ack(qp, 19, None)
    a2 = (1 - g) * a1 + g * (1 / 10)
    assert qp.ccs.alpha == pytest.approx(a2)
    # A window without marks: alpha decays by (1 - g), the rate gains R_AI.
    r = qp.rate
    qp.sq_psn = 30
    cc.on_ack(qp, 29, None)
    assert qp.ccs.alpha == pytest.approx((1 - g) * a2) and qp.rate == pytest.approx(r + 0.5)
