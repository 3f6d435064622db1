"""A progress bar on a terminal: simulated time reached against the end, events per second,
ETA. Shown only on a TTY, only once a run has taken `after_s` of wall time, and never with
--quiet: piped output and short runs stay clean."""

from __future__ import annotations

import sys
import time
from typing import TextIO


def _fmt_time(ns: float) -> str:
    for unit, k in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if ns >= k:
            return f"{ns / k:.3g} {unit}"
    return f"{ns:.0f} ns"


def _fmt_eta(s: float) -> str:
    if s >= 3600:
        return f"{s / 3600:.1f} h"
    if s >= 60:
        return f"{int(s // 60)}m{int(s % 60):02d}s"
    return f"{s:.0f}s"


class Progress:
    def __init__(self, stream: TextIO | None = None, enabled: bool | None = None,
                 after_s: float = 2.0, every_s: float = 0.25, width: int = 30) -> None:
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.after_s = after_s
        self.every_s = every_s
        self.width = width
        self._t0 = time.monotonic()
        self._last = 0.0
        self._shown = False
        self._events0 = 0
        self._lines = 0

    def update(self, sim_ns: float, end_ns: float | None, events: int,
               done: int = 0, total: int | None = None) -> None:
        """`end_ns`: the simulated time the run is bound to reach, if known; `total`: WRs
        it will complete, if known. The fraction shown is the larger of the two measures."""
        if not self.enabled:
            return
        now = time.monotonic()
        wall = now - self._t0
        if wall < self.after_s or now - self._last < self.every_s:
            return
        self._last = now
        self._shown = True
        fracs = []
        if end_ns:
            fracs.append(min(1.0, sim_ns / end_ns))
        if total:
            fracs.append(min(1.0, done / total))
        rate = events / wall if wall > 0 else 0.0
        line = f"sim {_fmt_time(sim_ns)}"
        if end_ns:
            line += f" / {_fmt_time(end_ns)}"
        if total:
            line += f", {done:,}/{total:,} WRs"
        line += f", {rate / 1000:.0f}k events/s"
        if fracs:
            f = max(fracs)
            bar = "#" * int(f * self.width)
            eta = wall * (1 - f) / f if f > 0 else None
            line = f"[{bar:<{self.width}}] {f * 100:5.1f}% {line}" + \
                (f", ETA {_fmt_eta(eta)}" if eta is not None else "")
        self.stream.write("\r" + line + "\x1b[K")
        self.stream.flush()

    def close(self) -> None:
        if self._shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._shown = False
