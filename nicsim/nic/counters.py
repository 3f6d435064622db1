"""Named counters of one block: a plain dict the hot path increments directly (`c["x"] += 1`).
A plain dict, not a subclass: CPython specialises subscripts of exact dicts only, and a packet
passes a dozen counters."""

from __future__ import annotations

Counters = dict[str, int]


def new_counters(*names: str) -> Counters:
    """Counters that are always reported, from zero."""
    return dict.fromkeys(names, 0)


def bump(c: Counters, name: str, n: int = 1) -> None:
    """Count `n` under `name`, which need not exist yet (rare paths)."""
    c[name] = c.get(name, 0) + n
