"""Statistics that stay small however long the run: quantiles of millions of values.

`Quantiles` keeps every value up to EXACT of them (percentiles are then exact, as numpy
computes them), and beyond that folds them into a histogram with logarithmic bins 0.1% wide:
memory is bounded and a percentile is within 0.1% of the exact one. Min and max stay exact.
"""

from __future__ import annotations

import math
from array import array

import numpy as np

EXACT = 100_000
BINS_PER_OCTAVE = 1024  # 2^(1/1024) - 1 = 0.068% relative bin width
LOW_EXP = -20  # smallest positive value binned: 2^-20 (values below go in bin 0)
OCTAVES = 80


class Quantiles:
    def __init__(self) -> None:
        self._vals: array | None = array("d")
        self._hist: np.ndarray | None = None
        self.n = 0
        self.total = 0.0
        self.min = math.inf
        self.max = -math.inf

    def add(self, v: float) -> None:
        self.n += 1
        self.total += v
        if v < self.min:
            self.min = v
        if v > self.max:
            self.max = v
        if self._vals is not None:
            self._vals.append(v)
            if len(self._vals) > EXACT:
                self._fold()
        else:
            self._hist[self._bin(v)] += 1  # type: ignore[index]

    def _fold(self) -> None:
        self._hist = np.zeros(OCTAVES * BINS_PER_OCTAVE + 1, dtype=np.int64)
        vals, self._vals = self._vals, None
        for v in vals or ():
            self._hist[self._bin(v)] += 1

    @staticmethod
    def _bin(v: float) -> int:
        if v <= 0:
            return 0
        b = int((math.log2(v) - LOW_EXP) * BINS_PER_OCTAVE) + 1
        return min(max(b, 1), OCTAVES * BINS_PER_OCTAVE)

    @staticmethod
    def _value(b: int) -> float:
        """The middle of bin b (geometrically)."""
        if b == 0:
            return 0.0
        return 2.0 ** ((b - 0.5) / BINS_PER_OCTAVE + LOW_EXP)

    @property
    def exact(self) -> bool:
        return self._vals is not None

    @property
    def mean(self) -> float | None:
        return self.total / self.n if self.n else None

    def quantile(self, q: float) -> float | None:
        """The q-quantile (0..1), numpy's default (linear) method while exact."""
        if not self.n:
            return None
        if q <= 0:
            return self.min
        if q >= 1:
            return self.max
        if self._vals is not None:
            return float(np.quantile(np.asarray(self._vals), q))
        assert self._hist is not None
        rank = q * (self.n - 1)
        b = int(np.searchsorted(np.cumsum(self._hist), rank, side="right"))
        return min(max(self._value(b), self.min), self.max)

    def cdf(self, points: int = 200) -> tuple[np.ndarray, np.ndarray]:
        """(values, fraction of values at most each): for a CDF plot."""
        if not self.n:
            return np.array([]), np.array([])
        if self._vals is not None:
            v = np.sort(np.asarray(self._vals))
            step = max(1, len(v) // (points * 10))
            v = v[::step] if step > 1 else v
            return v, np.linspace(1.0 / len(v), 1.0, len(v))
        assert self._hist is not None
        nz = np.nonzero(self._hist)[0]
        c = np.cumsum(self._hist[nz]) / self.n
        return np.array([self._value(int(b)) for b in nz]), c

    def summary(self, qs: tuple[float, ...] = (0.5, 0.99, 0.999)) -> dict[str, float | None]:
        out: dict[str, float | None] = {"count": self.n, "min": self.min if self.n else None}
        for q in qs:
            out[_qname(q)] = self.quantile(q)
        out["max"] = self.max if self.n else None
        out["mean"] = self.mean
        return out


def _qname(q: float) -> str:
    if q == 0.5:
        return "p50"
    return "p" + f"{q * 100:g}"


# Flow-size buckets of the FCT slowdown table: decades from 1 kB (the usual way to read
# WebSearch and Hadoop results: small flows' tails are what congestion control is about).
BUCKETS = (1_000, 10_000, 100_000, 1_000_000, 10_000_000)


def bucket_of(size: int) -> int:
    for i, b in enumerate(BUCKETS):
        if size <= b:
            return i
    return len(BUCKETS)


def bucket_label(i: int) -> str:
    def fmt(n: int) -> str:
        for unit, k in (("MB", 1_000_000), ("kB", 1_000)):
            if n >= k:
                return f"{n // k}{unit}"
        return f"{n}B"

    if i == 0:
        return f"<= {fmt(BUCKETS[0])}"
    if i == len(BUCKETS):
        return f"> {fmt(BUCKETS[-1])}"
    return f"{fmt(BUCKETS[i - 1])}-{fmt(BUCKETS[i])}"


# Finer, logarithmic size bins for the slowdown-vs-size plot (10 per decade from 1 B).
PLOT_BINS_PER_DECADE = 10


def plot_bin(size: int) -> int:
    return int(math.log10(max(1, size)) * PLOT_BINS_PER_DECADE)


def plot_bin_size(b: int) -> float:
    """The geometric middle of plot bin b, in bytes."""
    return 10 ** ((b + 0.5) / PLOT_BINS_PER_DECADE)


# Student's t at 97.5% for n - 1 degrees of freedom (a 95% interval of a mean over n seeds);
# 1.96 (the normal's) from 30 on.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045)


def mean_ci95(values: list[float]) -> tuple[float, float | None]:
    """The mean of `values` and the half-width of its 95% interval (None for one value)."""
    n = len(values)
    m = sum(values) / n
    if n < 2:
        return m, None
    sd = (sum((v - m) ** 2 for v in values) / (n - 1)) ** 0.5
    t = _T975[n - 2] if n - 2 < len(_T975) else 1.96
    return m, t * sd / n ** 0.5
