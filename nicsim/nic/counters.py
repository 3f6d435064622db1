"""Named counters of one block: a dict the hot path increments directly."""

from __future__ import annotations


class Counters(dict[str, int]):
    """Counter values by name; `bump` for rare paths, `c["x"] += 1` on hot paths."""

    def __init__(self, *names: str) -> None:
        super().__init__((n, 0) for n in names)

    def bump(self, name: str, n: int = 1) -> None:
        self[name] = self.get(name, 0) + n
