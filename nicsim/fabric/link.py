"""Ethernet links: serialization at the line rate, propagation delay, faults, pcap taps.

Serialization is charged at the sending port (see nicsim.nic.port); the link carries the frame
for its propagation delay and hands it to the port at the far end when its last bit arrives.
That moment is also when the tap records the frame, so a capture's timestamps are the times of
reception and always in order; a frame the link loses is not in the capture, a corrupted one
is there as it arrived (the receiver's checks drop it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import simpy

from nicsim.fabric.faults import FaultConfig, FaultInjector


@dataclass(frozen=True)
class LinkConfig:
    rate_gbps: float = 100.0
    prop_ns: float = 50.0  # about 10 m of fibre


class Tap(Protocol):
    def write(self, frame: bytes, t_ns: int) -> None: ...


class Link:
    """A full-duplex point-to-point link between two receivers (ports)."""

    def __init__(self, env: simpy.Environment, cfg: LinkConfig, name: str = "link",
                 faults: FaultConfig | None = None) -> None:
        self.env = env
        self.cfg = cfg
        self.name = name
        # One injector per direction, with its own random stream.
        self.faults = [FaultInjector(faults, i) for i in range(2)] if faults and \
            faults.active else None
        self.ends: list[Callable[[bytes], None]] = []
        self.taps: list[Tap] = []
        self._arrive: list[Callable[[simpy.Event], None]] = []

    def attach(self, receive: Callable[[bytes], None]) -> int:
        """Attach a receiver; returns the end index that the sender passes to `carry`."""
        if len(self.ends) == 2:
            raise ValueError(f"{self.name} already has two ends")
        self.ends.append(receive)
        self._bind()
        return len(self.ends) - 1

    def carry(self, frame: bytes, from_end: int, t_last_bit_out: float) -> None:
        """Deliver `frame`, whose last bit leaves end `from_end` at `t_last_bit_out`."""
        env = self.env
        delay = t_last_bit_out + self.cfg.prop_ns - env._now  # (per packet: no property)
        arrive = self._arrive[1 - from_end]
        if self.faults is None:
            # The frame rides on the timeout as its value; the far end's handler is bound once.
            env.timeout(delay, frame).callbacks.append(arrive)
            return
        for f, extra in self.faults[from_end].apply(frame):
            env.timeout(delay + extra, f).callbacks.append(arrive)

    def fault_counters(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for inj in self.faults or ():
            for k, v in inj.counters.items():
                out[k] = out.get(k, 0) + v
        return out

    def _bind(self) -> None:
        self._arrive = [self._arrival(r) for r in self.ends]

    def _arrival(self, receive: Callable[[bytes], None]) -> Callable[[simpy.Event], None]:
        taps = self.taps
        env = self.env

        def arrive(ev: simpy.Event) -> None:
            frame = ev._value  # the frame carry() put on the timeout (no property per packet)
            if taps:
                t = int(round(env.now))
                for tap in taps:
                    tap.write(frame, t)
            receive(frame)

        return arrive
