"""Open-loop flows: Poisson arrivals of flows whose sizes follow a CDF, at a target load.

Each sending host offers `load` x its link rate of payload on average (the definition of load
in the HPCC and DCTCP evaluations): the superposition over the senders is one Poisson process
of rate senders x load x rate / mean size, each arrival from a sender drawn uniformly, to a
destination drawn uniformly among the other hosts (or a fixed one).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from nicsim.workloads.cdf import Cdf


@dataclass(frozen=True, slots=True)
class Flow:
    t_ns: float  # arrival, relative to the start of the flows
    src: str
    dst: str
    size: int


def poisson_flows(cdf: Cdf, hosts: list[str], load: float, rate_gbps: float,
                  rng: np.random.Generator, dst: str | None = None, count: int | None = None,
                  duration_ns: float | None = None, batch: int = 4096) -> Iterator[Flow]:
    """Flows in arrival order, `count` of them or those arriving within `duration_ns`.
    Drawn in batches (bounded memory whatever the count)."""
    senders = [h for h in hosts if h != dst] if dst is not None else list(hosts)
    if not senders or (dst is None and len(hosts) < 2):
        return
    bytes_per_ns = load * rate_gbps / 8.0
    mean_gap = cdf.mean / (bytes_per_ns * len(senders))
    t = 0.0
    made = 0
    while True:
        n = batch if count is None else min(batch, count - made)
        if n <= 0:
            return
        gaps = rng.exponential(mean_gap, n)
        sizes = cdf.sample(rng, n)
        src_i = rng.integers(0, len(senders), n)
        dst_i = rng.integers(0, len(hosts) - 1, n)  # among the hosts other than the source
        for k in range(n):
            t += float(gaps[k])
            if duration_ns is not None and t >= duration_ns:
                return
            s = senders[int(src_i[k])]
            if dst is None:
                others = hosts.index(s)
                j = int(dst_i[k])
                d = hosts[j + 1 if j >= others else j]
            else:
                d = dst
            yield Flow(t, s, d, int(sizes[k]))
        made += n
