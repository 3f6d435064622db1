"""Fault injection on a link: loss, bit corruption, duplication and bounded reordering.

Every decision comes from one seeded generator per link direction, drawn in a fixed order per
frame, so a run with the same seed loses, corrupts, duplicates and delays the same frames.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class FaultConfig:
    loss: float = 0.0  # probability a frame is dropped
    corrupt: float = 0.0  # probability one random bit of a frame is flipped
    duplicate: float = 0.0  # probability a frame is delivered twice
    reorder: float = 0.0  # probability a frame is held back by up to reorder_ns
    reorder_ns: float = 2000.0  # the bound on that extra delay
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("loss", "corrupt", "duplicate", "reorder"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"{name} must be a probability in [0, 1], not {v}")
        if self.reorder_ns < 0:
            raise ValueError("reorder_ns must be >= 0")

    @property
    def active(self) -> bool:
        return bool(self.loss or self.corrupt or self.duplicate or self.reorder)


class FaultInjector:
    """Decides the fate of each frame crossing one direction of a link."""

    def __init__(self, cfg: FaultConfig, stream: int) -> None:
        self.cfg = cfg
        self.rng = np.random.default_rng([cfg.seed, stream])
        self.counters = {"lost": 0, "corrupted": 0, "duplicated": 0, "reordered": 0}
        self._buf = self.rng.random(4096)
        self._i = 0

    def _u(self) -> float:
        if self._i == len(self._buf):
            self._buf = self.rng.random(4096)
            self._i = 0
        v = self._buf[self._i]
        self._i += 1
        return float(v)

    def apply(self, frame: bytes) -> list[tuple[bytes, float]]:
        """The copies of `frame` to deliver and the extra delay of each (empty: lost)."""
        cfg = self.cfg
        c = self.counters
        # Draw all four decisions for every frame, so one fault's setting does not shift
        # the random stream seen by the others.
        lost = self._u() < cfg.loss
        corrupt = self._u() < cfg.corrupt
        dup = self._u() < cfg.duplicate
        delay_u = self._u()
        if lost:
            c["lost"] += 1
            return []
        if corrupt and frame:
            bit = int(self._u() * len(frame) * 8)
            b = bytearray(frame)
            b[bit >> 3] ^= 1 << (bit & 7)
            frame = bytes(b)
            c["corrupted"] += 1
        delay = 0.0
        if delay_u < cfg.reorder:
            delay = self._u() * cfg.reorder_ns
            c["reordered"] += 1
        out = [(frame, delay)]
        if dup:
            c["duplicated"] += 1
            out.append((frame, delay + self._u() * cfg.reorder_ns))
        return out
