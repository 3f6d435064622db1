"""DCQCN's reaction point (Zhu et al., SIGCOMM 2015, section 3.1 and figure 5).

Per QP: the current rate Rc, the target rate Rt and alpha, the estimate of how congested the
path is. A QP is unlimited (qp.rate None, line rate) until its first CNP.

- CNP: Rt = Rc (with `clamp_target` off, only if the increase timer fired since the last
  cut); Rc = Rc (1 - alpha/2), never below the minimum rate, never a larger cut than max_cut;
  then, in the paper's ON_CNP mode, alpha = (1 - g) alpha + g. The increase stages restart.
  With `reduce_period_us` (firmware's rate_reduce_monitor_period) a QP is cut at most once
  per period: a CNP inside the period is acted on at its end.
- alpha without CNPs: ON_CNP mode, alpha = (1 - g) alpha each K (alpha_period_us) after the
  last CNP; PERIODIC mode (firmware), at the end of every period alpha = (1 - g) alpha + g if
  a CNP came in the period, (1 - g) alpha if not. Alpha is worked out when it is needed (the
  closed form of the decay), not by a timer event per period.
- Rate increase events: every T (timer_us) and every B bytes sent (byte_counter), counted as
  T_stage and B_stage since the last cut. At each event, with the counts after it:
  fast recovery while max(T_stage, B_stage) <= F: Rc = (Rt + Rc)/2;
  hyper increase when min(T_stage, B_stage) > F: Rt += R_HAI, Rc = (Rt + Rc)/2;
  additive increase otherwise: Rt += R_AI, Rc = (Rt + Rc)/2.
  Rates never exceed the line rate. When Rt is the line rate and Rc is within one R_AI of
  it, the QP is released (unlimited again, its state forgotten), as firmware frees the rate
  limiter of a recovered flow.

Increase timers wait in a queue per QP (they come due in the order they were set: each is T
after its start), and only the first of each QP has an entry in SimPy's queue: every cut
restarts the timer, and the timers it voids would otherwise crowd SimPy's queue until their
time (hundreds of them in a congested fabric, making every event of the world dearer). Each
timer keeps the time and sequence number a Timeout made when it was set would have, and its
entry is pushed with exactly that key when the one before it comes due: every timer fires,
and is checked, at the same place in the event order as a Timeout.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from nicsim.nic.cc.config import AlphaUpdate, CcConfig, DcqcnParams
from nicsim.nic.cc.control import RateControl, Signal
from nicsim.nic.qp import QpCtx
from nicsim.sim import Entry, Sim


class DcqcnState:
    __slots__ = ("rc", "rt", "alpha", "alpha_t", "cnp_in_period", "t_stage", "b_stage",
                 "bytes", "last_cut", "cut_pending", "gen")

    def __init__(self, line: float, alpha: float, now: float) -> None:
        self.rc = line
        self.rt = line
        self.alpha = alpha
        self.alpha_t = now  # alpha is worked out up to here
        self.cnp_in_period = False
        self.t_stage = 0
        self.b_stage = 0
        self.bytes = 0
        self.last_cut = float("-inf")
        self.cut_pending = False
        self.gen = 0  # rate-increase timers of older generations are void


class Dcqcn(RateControl):
    name = "dcqcn"
    signals = Signal.CNP | Signal.SENT
    Params = DcqcnParams  # (kept in CcConfig.dcqcn, as the DCQCN presets give them)

    def __init__(self, env: Sim, cfg: CcConfig, line_gbps: Callable[[], float],
                 rate_changed: Callable[[QpCtx], None]) -> None:
        super().__init__(env, cfg, line_gbps, rate_changed)
        p = cfg.dcqcn
        self.p = p
        self.k_ns = p.alpha_period_us * 1000.0
        self.t_ns = p.timer_us * 1000.0
        self.r_ns = p.reduce_period_us * 1000.0
        self.rai = p.rai_mbps / 1000.0
        self.rhai = p.rhai_mbps / 1000.0
        self.min_rate = p.min_rate_mbps / 1000.0
        self.counters.update({k: 0 for k in (
            "rate_cuts", "cuts_deferred", "fast_recovery", "additive_increase",
            "hyper_increase", "timer_events", "byte_events", "released")})
        # Per QP number: its increase timers as (time, sequence number, state, generation,
        # QP), in the order they come due; the first has an entry in SimPy's queue (see the
        # module). The state is kept because a released QP's next state counts generations
        # from 0 again: a timer of the old state must not pass for one of the new.
        self._timers: dict[int, deque[tuple[float, int, DcqcnState, int, QpCtx]]] = {}

    # -- alpha ------------------------------------------------------------------------------

    def alpha(self, s: DcqcnState) -> float:
        """Alpha now (worked out lazily, see the module)."""
        now = self.env.now
        k = self.k_ns
        n = int((now - s.alpha_t) // k)
        if n <= 0:
            return s.alpha
        keep = 1.0 - self.p.g
        if self.p.alpha_update is AlphaUpdate.PERIODIC and s.cnp_in_period:
            s.alpha = keep * s.alpha + self.p.g  # the period that had a CNP
            s.cnp_in_period = False
            n -= 1
        s.alpha *= keep ** n
        s.alpha_t += (int((now - s.alpha_t) // k)) * k
        return s.alpha

    # -- events -----------------------------------------------------------------------------

    def on_cnp(self, qp: QpCtx) -> None:
        self.counters["cnp_received"] += 1
        s = qp.ccs
        now = self.env.now
        if s is None:
            s = qp.ccs = DcqcnState(self.line_gbps, self.p.alpha_init, now)
        alpha = self.alpha(s)
        if self.r_ns == 0 or now - s.last_cut >= self.r_ns:
            self._cut(qp, s, alpha)
        elif not s.cut_pending:
            s.cut_pending = True
            self.counters["cuts_deferred"] += 1
            self.env.timeout(s.last_cut + self.r_ns - now).callbacks.append(
                lambda _e, q=qp, st=s: self._deferred_cut(q, st))
        if self.p.alpha_update is AlphaUpdate.ON_CNP:
            s.alpha = (1.0 - self.p.g) * s.alpha + self.p.g
            s.alpha_t = now  # the K timer restarts
        else:
            s.cnp_in_period = True
        self.record(qp, s.alpha)

    def _deferred_cut(self, qp: QpCtx, s: DcqcnState) -> None:
        if qp.ccs is not s or not s.cut_pending:
            return
        self._cut(qp, s, self.alpha(s))
        self.record(qp, s.alpha)

    def _cut(self, qp: QpCtx, s: DcqcnState, alpha: float) -> None:
        self.counters["rate_cuts"] += 1
        if self.p.clamp_target or s.t_stage:
            s.rt = s.rc
        s.rc = max(self.min_rate, s.rc * max(1.0 - alpha / 2.0, 1.0 - self.p.max_cut))
        s.t_stage = s.b_stage = 0
        s.bytes = 0
        s.last_cut = self.env.now
        s.cut_pending = False
        s.gen += 1
        self._arm_timer(qp, s)
        self._set(qp, s)

    def _arm_timer(self, qp: QpCtx, s: DcqcnState) -> None:
        """Start an increase timer for generation s.gen, T from now (a Timeout's key)."""
        env = self.env
        t, seq = env.now + self.t_ns, env.ticket()
        q = self._timers.get(qp.qpn)
        if q is None:
            q = self._timers[qp.qpn] = deque()
        q.append((t, seq, s, s.gen, qp))
        if len(q) == 1:
            env.at_ticket(t, seq, Entry(self._due, q))

    def _due(self, ev: Entry) -> None:
        """The first timer of a QP's queue came due: its successor gets the entry."""
        q = ev.value
        _t, _seq, s, gen, qp = q.popleft()
        if q:
            nxt = q[0]
            self.env.at_ticket(nxt[0], nxt[1], Entry(self._due, q))
        self._timer(qp, s, gen)

    def _timer(self, qp: QpCtx, s: DcqcnState, gen: int) -> None:
        if qp.ccs is not s or s.gen != gen:
            return
        self.counters["timer_events"] += 1
        s.t_stage += 1
        self._increase(qp, s)
        if qp.ccs is s:
            s.gen += 1
            self._arm_timer(qp, s)

    def on_sent(self, qp: QpCtx, nbytes: int) -> None:
        s = qp.ccs
        if s is None:
            return
        s.bytes += nbytes
        b = self.p.byte_counter
        while s.bytes >= b and qp.ccs is s:
            s.bytes -= b
            self.counters["byte_events"] += 1
            s.b_stage += 1
            self._increase(qp, s)

    def _increase(self, qp: QpCtx, s: DcqcnState) -> None:
        f = self.p.threshold
        line = self.line_gbps
        if max(s.t_stage, s.b_stage) <= f:
            self.counters["fast_recovery"] += 1
        elif min(s.t_stage, s.b_stage) > f:
            self.counters["hyper_increase"] += 1
            s.rt = min(line, s.rt + self.rhai)
        else:
            self.counters["additive_increase"] += 1
            s.rt = min(line, s.rt + self.rai)
        s.rc = min(line, (s.rt + s.rc) / 2.0)
        if s.rt >= line and line - s.rc <= max(self.rai, 1e-9):
            self.counters["released"] += 1
            qp.ccs = None
            qp.rate = None
            self.rate_changed(qp)
            self.record(qp, s.alpha)
            return
        self._set(qp, s)
        self.record(qp, s.alpha)

    def _set(self, qp: QpCtx, s: DcqcnState) -> None:
        qp.rate = s.rc
        self.rate_changed(qp)

    def forget(self, qp: QpCtx) -> None:
        qp.ccs = None
        qp.rate = None
