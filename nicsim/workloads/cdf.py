"""Flow-size distributions given as a CDF: lines of "<bytes> <cumulative percent>", sizes
drawn by inverting the piecewise linear CDF (the format of the HPCC simulator's traffic
generator, so its files and ours are interchangeable).

`websearch` and `fb_hadoop` ship with the package (nicsim/apps/data, each naming its source);
any other name is a path to a file in the same format.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

DATA = Path(__file__).with_name("data")
BUILTIN = {"websearch": DATA / "websearch.cdf", "fb_hadoop": DATA / "fb_hadoop.cdf"}


class CdfError(ValueError):
    """A CDF that cannot be used; the message is one line saying where and why."""


@dataclass(frozen=True)
class Cdf:
    name: str
    sizes: tuple[float, ...]  # bytes, increasing
    percent: tuple[float, ...]  # cumulative, increasing from 0 to 100

    @property
    def mean(self) -> float:
        """The mean of the piecewise linear distribution (trapezoids between points)."""
        x, y = np.asarray(self.sizes), np.asarray(self.percent)
        return float(np.sum((x[1:] + x[:-1]) / 2 * np.diff(y)) / 100.0)

    @property
    def max(self) -> int:
        return int(self.sizes[-1])

    def sample(self, rng: np.random.Generator, n: int | None = None) -> np.ndarray | int:
        """Sizes in bytes (at least 1: a flow carries something)."""
        u = rng.random(n) * 100.0
        v = np.maximum(1, np.rint(np.interp(u, self.percent, self.sizes))).astype(np.int64)
        return int(v) if n is None else v

    def cdf_at(self, size: float) -> float:
        """The fraction of flows of at most `size` bytes."""
        return float(np.interp(size, self.sizes, self.percent)) / 100.0


def parse_cdf(text: str, name: str) -> Cdf:
    sizes: list[float] = []
    pct: list[float] = []
    for n, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) != 2:
            raise CdfError(f"{name} line {n}: expected '<bytes> <cumulative percent>'")
        try:
            x, y = float(parts[0]), float(parts[1])
        except ValueError:
            raise CdfError(f"{name} line {n}: not numbers: {line!r}") from None
        if not (np.isfinite(x) and np.isfinite(y)) or x < 0 or not 0 <= y <= 100:
            raise CdfError(f"{name} line {n}: bytes >= 0 and a percent in [0, 100]")
        if sizes and (x <= sizes[-1] or y <= pct[-1]):
            raise CdfError(f"{name} line {n}: sizes and percents must both increase")
        sizes.append(x)
        pct.append(y)
    if len(sizes) < 2:
        raise CdfError(f"{name}: a CDF needs at least two points")
    if pct[0] != 0 or pct[-1] != 100:
        raise CdfError(f"{name}: the percents must start at 0 and end at 100")
    return Cdf(name, tuple(sizes), tuple(pct))


def load_cdf(name_or_path: str, base: Path | None = None) -> Cdf:
    """A built-in CDF by name, or a file (relative paths from `base`, the scenario's
    directory, when given)."""
    path = BUILTIN.get(name_or_path)
    if path is None:
        path = Path(name_or_path)
        if base is not None and not path.is_absolute():
            path = base / path
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        known = ", ".join(BUILTIN)
        raise CdfError(f"{name_or_path}: no such CDF ({known}, or a file)") from None
    except OSError as e:
        raise CdfError(f"{name_or_path}: {e.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise CdfError(f"{name_or_path}: not a text file") from None
    return parse_cdf(text, name_or_path)
