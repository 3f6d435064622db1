"""Congestion-control settings of a NIC: the algorithm, its parameters, and the notification
point (CNP generation). Two DCQCN presets:

- `dcqcn_paper`: Zhu et al., "Congestion Control for Large-Scale RDMA Deployments", SIGCOMM
  2015 (section 5's parameters: g = 1/256, 55 us timers, a 10 MB byte counter, F = 5, R_AI =
  40 Mb/s, CNPs at most every 50 us per QP). The paper gives no hyper-increase step: R_HAI is
  ten times R_AI, the ratio of 802.1Qau QCN's defaults (5 and 50 Mb/s).
- `dcqcn_mlx`: NVIDIA's documented ConnectX firmware defaults (the roce_rp / roce_np
  parameters of mlx5: dce_tcp_g 1019 -> g = (1024 - 1019) / 1024, dce_tcp_rtt 1 us alpha
  period, initial_alpha_value 1023 -> 1023/1024, rate_reduce_monitor_period 4 us,
  rpg_time_reset 300 us, rpg_byte_reset 32767 B, rpg_threshold 1, rpg_ai_rate 5 Mb/s,
  rpg_hai_rate 50 Mb/s, rpg_min_rate 1 Mb/s, rpg_min_dec_fac 50 %, clamp_tgt_rate 0, cnp DSCP
  48). The NP's
  min_time_between_cnps is taken as 4 us; firmware versions differ, read yours with mlxreg.

- `dcqcn_tuned`: the paper's algorithm with parameters chosen here (not from a source) for
  100 Gb/s and millisecond runs: g = 1/16, R_AI = 1 Gb/s, K = 10 us. With the paper's values
  alpha takes some 14 ms to forget a start-up burst and a sender regains 0.7 Gb/s per ms; a
  short K gives many small cuts instead of a few large ones, so flows settle at their fair
  share within a few milliseconds (tests/test_fabric.py).

The CNP generation delay (CE-marked packet in, CNP out) has no published figure; 1 us is an
assumption, set it to what your NIC measures.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class CcAlgorithm(StrEnum):
    NONE = "none"
    DCQCN = "dcqcn"
    HPCC = "hpcc"
    TIMELY = "timely"
    DCTCP = "dctcp"
    CUSTOM = "custom"  # a user's RateControl from a Python file (`cc: {module: ...}`)


class AlphaUpdate(StrEnum):
    """How DCQCN's alpha (its estimate of the congestion extent) is updated."""

    ON_CNP = "on_cnp"  # the paper: alpha = (1-g)alpha + g per CNP; (1-g)alpha per K without
    PERIODIC = "periodic"  # firmware: every period, + g if a CNP came in it


@dataclass(frozen=True)
class DcqcnParams:
    g: float = 1 / 256
    alpha_init: float = 1.0
    alpha_period_us: float = 55.0  # K
    alpha_update: AlphaUpdate = AlphaUpdate.ON_CNP
    reduce_period_us: float = 0.0  # 0: cut on every CNP; else at most one cut per period
    timer_us: float = 55.0  # T: rate-increase timer
    byte_counter: int = 10 * 1024 * 1024  # B: a rate-increase event every B bytes sent
    threshold: int = 5  # F: fast-recovery events before additive increase
    rai_mbps: float = 40.0
    rhai_mbps: float = 400.0
    min_rate_mbps: float = 1.0
    max_cut: float = 0.5  # a cut never takes more than this fraction of the rate
    # On a cut, Rt = Rc always (the paper), or (firmware's clamp_tgt_rate 0) only if the
    # rate-increase timer has fired since the last cut: a burst of CNPs then keeps the
    # target of before the burst, and recovery heads back there.
    clamp_target: bool = True

    def check(self) -> None:
        _check(0 < self.g <= 1, "g", "must be in (0, 1]")
        _check(0 <= self.alpha_init <= 1, "alpha_init", "must be in [0, 1]")
        _check(self.alpha_period_us > 0, "alpha_period_us", "must be > 0")
        _check(self.reduce_period_us >= 0, "reduce_period_us", "must be >= 0")
        _check(self.timer_us > 0, "timer_us", "must be > 0")
        _check(self.byte_counter > 0, "byte_counter", "must be > 0")
        _check(self.threshold >= 0, "threshold", "must be >= 0")
        _check(self.rai_mbps >= 0, "rai_mbps", "must be >= 0")
        _check(self.rhai_mbps >= 0, "rhai_mbps", "must be >= 0")
        _check(self.min_rate_mbps > 0, "min_rate_mbps", "must be > 0")
        _check(0 < self.max_cut <= 1, "max_cut", "must be in (0, 1]")


@dataclass(frozen=True)
class CnpConfig:
    """The notification point: a CE-marked request makes the NIC send a CNP to the sender's
    QP (RoCEv2 Annex A17.9.3), at most one per QP per interval."""

    enabled: bool = True
    interval_us: float = 50.0
    delay_ns: float = 1000.0
    dscp: int = 48

    def check(self) -> None:
        _check(self.interval_us >= 0, "cnp.interval_us", "must be >= 0")
        _check(self.delay_ns >= 0, "cnp.delay_ns", "must be >= 0")
        _check(0 <= self.dscp < 64, "cnp.dscp", "must be in 0..63")


@dataclass(frozen=True)
class CcConfig:
    algorithm: CcAlgorithm = CcAlgorithm.NONE
    preset: str = "none"
    dcqcn: DcqcnParams = field(default_factory=DcqcnParams)
    cnp: CnpConfig = field(default_factory=CnpConfig)
    trace: bool = False  # keep each QP's rate and alpha as a time series
    # A rate-limited QP's packets are spaced within +-pacing_jitter of the exact gap (the
    # mean rate is kept). Hardware rate limiters are not exact (their schedulers work in
    # time slots and share a pipeline); perfectly periodic flows phase-lock at a switch
    # queue and one of them collects the ECN marks (the phase effects of Floyd and
    # Jacobson, 1992), which a real fabric does not show. 0 makes pacing exact.
    pacing_jitter: float = 0.05
    # The parameters of an algorithm other than DCQCN (its RateControl.Params; DCQCN's are
    # `dcqcn`), the user's RateControl class (CUSTOM) and the file it came from.
    params: Any = None
    impl: Any = None
    module: str | None = None


PRESETS: dict[str, CcConfig] = {
    "none": CcConfig(),
    "dcqcn_paper": CcConfig(CcAlgorithm.DCQCN, "dcqcn_paper", DcqcnParams(), CnpConfig()),
    "dcqcn_mlx": CcConfig(
        CcAlgorithm.DCQCN, "dcqcn_mlx",
        DcqcnParams(g=5 / 1024, alpha_init=1023 / 1024, alpha_period_us=1.0,
                    alpha_update=AlphaUpdate.PERIODIC, reduce_period_us=4.0, timer_us=300.0,
                    byte_counter=32767, threshold=1, rai_mbps=5.0, rhai_mbps=50.0,
                    min_rate_mbps=1.0, max_cut=0.5, clamp_target=False),
        CnpConfig(interval_us=4.0)),
    "dcqcn_tuned": CcConfig(
        CcAlgorithm.DCQCN, "dcqcn_tuned",
        DcqcnParams(g=1 / 16, rai_mbps=1000.0, alpha_period_us=10.0), CnpConfig()),
}


class CcConfigError(ValueError):
    """A bad `cc` setting; the message is one line naming the field."""


def _check(ok: bool, name: str, why: str) -> None:
    if not ok:
        raise CcConfigError(f"cc.{name}: {why}")
