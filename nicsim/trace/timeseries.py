"""Time series sampled at a fixed interval of simulated time, from named probes.

A probe reads something of the world (a counter or a level) for each of its series; the
sampler runs as a SimPy process and writes one CSV per probe as it goes (long format:
`time_us,<series label>,<value with unit>`, one row per series per sample), so memory does
not grow with the run. Sampling only reads: a run samples the same events with or without it
(a test holds it to that).

Probes register by name. The runner adds its own (per-QP goodput, per-host port throughput
and transmit backlog); the world may offer more as `world.probes` (switch queue depths, PFC
pauses, congestion-control rates), each a `Probe`.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import simpy


@dataclass
class Probe:
    """`read()` returns the current value of each series. For kind "rate" the values are
    cumulative counts and the series is their increase per second of simulated time times
    `scale` (bytes x 8e-9 gives Gb/s); for "level" the value itself, times `scale`."""

    name: str  # the file: timeseries/<name>.csv
    label: str  # the column that names a series: "qp", "host", "queue"
    value: str  # the value column, with its unit: "goodput_gbps", "depth_bytes"
    read: Callable[[], Mapping[str, float]]
    kind: str = "level"  # or "rate"
    scale: float = 1.0
    title: str = ""  # for plots: "Goodput per QP"


class Sampler:
    def __init__(self, env: simpy.Environment, interval_ns: float, directory: Path) -> None:
        self.env = env
        self.interval = interval_ns
        self.dir = directory
        self.probes: list[Probe] = []
        self._files: list[IO[str]] = []
        self._writers: list[csv.writer] = []  # type: ignore[valid-type]
        self._last: list[dict[str, float]] = []
        self._t0 = 0.0
        self.samples = 0

    def register(self, probe: Probe) -> None:
        if any(p.name == probe.name for p in self.probes):
            raise ValueError(f"probe {probe.name!r} registered twice")
        self.probes.append(probe)

    def start(self) -> None:
        self.dir.mkdir(exist_ok=True)
        self._t0 = self.env.now
        for p in self.probes:
            f = (self.dir / f"{p.name}.csv").open("w", newline="")
            w = csv.writer(f)
            w.writerow(("time_us", p.label, p.value))
            self._files.append(f)
            self._writers.append(w)
            self._last.append(dict(p.read()) if p.kind == "rate" else {})
        self.env.process(self._run())

    def _run(self) -> Generator[simpy.Event, None, None]:
        while True:
            yield self.env.timeout(self.interval)
            self.sample()

    def sample(self) -> None:
        t = (self.env.now - self._t0) / 1000.0
        self.samples += 1
        for i, p in enumerate(self.probes):
            vals = p.read()
            w = self._writers[i]
            if p.kind == "rate":
                last = self._last[i]
                k = p.scale * 1e9 / self.interval
                for s, v in vals.items():
                    w.writerow((f"{t:.3f}", s, f"{(v - last.get(s, 0.0)) * k:.6g}"))
                self._last[i] = dict(vals)
            else:
                for s, v in vals.items():
                    w.writerow((f"{t:.3f}", s, f"{v * p.scale:.6g}"))

    def close(self) -> None:
        for f in self._files:
            f.close()
        self._files = []
