"""Communication patterns over a list of hosts: who sends to whom in one round.

Each function returns (source, destination) pairs; with fewer hosts than the pattern wants it
uses what there is (an incast on two hosts is 1 -> 1), and never pairs a host with itself.
"""

from __future__ import annotations

import numpy as np


def incast(hosts: list[str], dst: str, fan_in: int | None, rng: np.random.Generator
           ) -> list[tuple[str, str]]:
    """`fan_in` senders (all the others when None or more than there are) drawn from
    `hosts`, each sending to `dst`."""
    others = [h for h in hosts if h != dst]
    if fan_in is not None and fan_in < len(others):
        pick = sorted(rng.choice(len(others), size=fan_in, replace=False))
        others = [others[i] for i in pick]
    return [(h, dst) for h in others]


def permutation(hosts: list[str], rng: np.random.Generator) -> list[tuple[str, str]]:
    """A random derangement: every host sends to exactly one other and receives from
    exactly one (a random cyclic order of the hosts, each sending to the next)."""
    order = [hosts[i] for i in rng.permutation(len(hosts))]
    return [(order[i], order[(i + 1) % len(order)]) for i in range(len(order))]


def all_to_all(hosts: list[str]) -> list[tuple[str, str]]:
    """Every ordered pair of distinct hosts."""
    return [(s, d) for s in hosts for d in hosts if s != d]
