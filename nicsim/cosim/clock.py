"""Time coupling between a SimPy world and an RTL simulation under cocotb.

The scheme is conservative and exact (a time-window scheme, as YAWNS and the quantum schemes
of SystemC TLM use): the RTL never runs ahead of SimPy, and it is never more than one window
W behind. Every effect that crosses between the two has a latency of at least W:

    SimPy -> RTL   MMIO writes (PCIe latency), frames arriving at the RTL's port (link
                   propagation), DMA read completions (PCIe round trip): they become known in
                   SimPy before the RTL reaches their time, because the RTL lags, and are
                   applied in the RTL at their exact time.
    RTL -> SimPy   frames the RTL sends (serialization + propagation before they arrive),
                   DMA writes (PCIe latency before they land), DMA read requests (PCIe latency
                   before they reach host memory): produced at RTL time t while the RTL catches
                   up to SimPy time T <= t + W, they take effect at t + latency >= T, so SimPy
                   can still schedule them at their exact time.

W is the smallest of those latencies (nicsim.cosim.window_ns: link propagation plus the
shortest frame's serialization, and the PCIe one-way latency), rounded down to whole clock
cycles. A SimPy process wakes every W and runs the RTL up to SimPy's time; an MMIO write
catches the RTL up first as well. Nothing is delivered late, so a co-simulated run sees the
same causality as a SimPy-only one. Two exceptions, both off the data path, are counted
(`late`): an MMIO read runs as an AXI4-Lite read when the CPU's read completes, which moves the
RTL a few cycles past SimPy (anything that arrives for it meanwhile is applied up to that late),
and an effect whose latency was configured below W is applied at SimPy's time.

The RTL side runs only inside `catch_up` (cocotb.task.resume from the SimPy thread): while it
runs the SimPy thread waits, and the reverse. So RTL-side code may call SimPy (schedule events,
post memory writes, hand frames to links) and SimPy callbacks may fill data the RTL side reads,
without locks.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import simpy
from cocotb.simtime import get_sim_time
from cocotb.task import resume
from cocotb.triggers import Timer


class TimeCoupler:
    """Keeps an RTL simulation within one window behind a SimPy environment.

    `rtl_ns = simpy_ns + offset` once `couple` has run. RTL-side code asks `now()` for the
    SimPy-time equivalent of the current RTL time and `until(t)` to wait for SimPy time t.
    """

    def __init__(self, window_ns: float, clk_ns: float) -> None:
        cycles = max(1, int(window_ns // clk_ns))
        self.window_ns = cycles * clk_ns
        self.clk_ns = clk_ns
        self.env: simpy.Environment | None = None
        self.offset_ps = 0
        self.hooks: list[Callable[[], None]] = []  # run (RTL side) before each catch-up
        # statistics: catch-ups, wall and CPU seconds spent running the RTL (the CPU time is the
        # process's: the two sides never run at once), effects applied late
        self.catchups = 0
        self.rtl_wall = 0.0
        self.rtl_cpu = 0.0
        self.late = 0
        self.max_ahead_ns = 0.0
        self._sync = resume(self.catch_up)

    # -- both sides -------------------------------------------------------------------------

    def couple(self, env: simpy.Environment) -> None:
        """From now on the RTL follows `env` (call on the RTL side, before SimPy runs)."""
        self.env = env
        self.offset_ps = int(get_sim_time("ps")) - round(env.now * 1000)
        w = self.window_ns

        def ticker():  # noqa: ANN202 - a SimPy process
            while True:
                yield env.timeout(w)
                self._sync()

        env.process(ticker())

    def now(self) -> float:
        """The current RTL time as SimPy time (ns)."""
        return (int(get_sim_time("ps")) - self.offset_ps) / 1000.0

    def rtl_ps(self, t: float) -> int:
        return round(t * 1000) + self.offset_ps

    async def until(self, t: float) -> None:
        """Wait (RTL side) until SimPy time `t` in RTL time."""
        d = self.rtl_ps(t) - int(get_sim_time("ps"))
        if d > 0:
            await Timer(d, unit="ps")

    def sim_time_for(self, t: float) -> float:
        """`t` if SimPy can still take an effect at `t`, else SimPy's now (counted late)."""
        env = self.env
        assert env is not None
        if t < env.now:
            self.late += 1
            return env.now
        return t

    # -- SimPy side (through resume) --------------------------------------------------------

    def sync(self) -> None:
        """Called from the SimPy thread: run the RTL up to SimPy's time."""
        self._sync()

    async def catch_up(self) -> None:
        """Run the RTL until its time reaches SimPy's."""
        env = self.env
        if env is None:
            return
        for hook in self.hooks:
            hook()
        d = self.rtl_ps(env.now) - int(get_sim_time("ps"))
        if d < 0:
            self.max_ahead_ns = max(self.max_ahead_ns, -d / 1000.0)
            return
        if d == 0:
            return
        self.catchups += 1
        t0, c0 = time.perf_counter(), time.process_time()
        await Timer(d, unit="ps")
        self.rtl_wall += time.perf_counter() - t0
        self.rtl_cpu += time.process_time() - c0
