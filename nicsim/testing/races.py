"""Racing a transfer: step the world to the moment a condition holds, and another process
(a bystander) whose memory no transfer may reach."""

from __future__ import annotations

from collections.abc import Callable

from nicsim.driver.user.verbs import Context
from nicsim.world import World

PATTERN = b"\xee\x5a"


class Bystander:
    """Another process on a host: it allocates memory (getting the pages freed last) and fills
    it with a pattern no transfer carries."""

    def __init__(self, w: World, host: str, nbytes: int) -> None:
        self.ctx = Context("nsnic0", host=w.hosts[host])
        self.n = nbytes
        self.va = self.ctx.alloc(nbytes)
        self.data = (PATTERN * (nbytes // 2 + 1))[:nbytes]
        self.ctx.aspace.write(self.va, self.data)
        self.pages = {self.ctx.aspace.translate(self.va + i) >> 12
                      for i in range(0, nbytes, 4096)}

    def intact(self) -> bool:
        """Its memory still holds the pattern, every byte."""
        return self.ctx.aspace.read(self.va, self.n) == self.data


def step_until(w: World, cond: Callable[[], bool], limit_ns: float = 5e6) -> None:
    """Step the world one event at a time until `cond()` holds (failing after `limit_ns` of
    simulated time)."""
    env = w.env
    end = env.now + limit_ns
    while not cond():
        assert env.now < end, "condition never held"
        env.step()
