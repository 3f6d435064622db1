"""Waiting on many completion queues at once by polling them, as perftest does without `-e`:
the scenario runner polls rather than sleeping on completion channels (which the verbs have,
with event queues and interrupts), so no interrupt cost enters its figures.

`CQ.poll` of the verbs facade waits on its own CQ only (an empty poll sleeps until that ring
is written or 100 us pass). A run with many hosts and open-loop arrivals must wake for
whichever CQ is written first, or at the next arrival. The runner keeps a watch on every ring
it cares about and runs the world until one is written or a deadline comes, as
`Host.poll_wait` does for one ring; `ready` tells whether a CQE is waiting, read the way the
provider reads it and without simulated time, so the runner only polls a CQ that has
something (an empty poll would sleep).
"""

from __future__ import annotations

from nicsim.driver.user.verbs import CQ
from nicsim.sim import Sim


class Waiter:
    def __init__(self, env: Sim) -> None:
        self.env = env
        self.woke = False

    def wait(self, deadline: float) -> None:
        """Run the world until a watched ring is written or `deadline` (whichever first)."""
        env = self.env
        if self.woke or deadline <= env.now:
            return
        env.run_until_woken(deadline, self)
        if not self.woke:
            env.advance(deadline)


class CqWatch:
    """A standing watch on one CQ's ring: sets its Waiter's flag whenever the NIC writes it
    (without a waiter, only `ready` is of use: a CQ polled when needed, not waited on)."""

    def __init__(self, cq: CQ, waiter: Waiter | None) -> None:
        p = cq._p
        self.cq = cq
        self._p = p
        self._waiter = waiter
        self._mem = cq.ctx.host.mem
        self._lo = p._ring_pa
        self._hi = p._ring_pa + p.ring_bytes
        self._entry: tuple | None = None
        self._closed = waiter is None
        self._arm()

    def _arm(self) -> None:
        if not self._closed:
            self._entry = self._mem.watch(self._lo, self._hi, self._fire)

    def _fire(self) -> None:
        self._entry = None
        if self._closed:
            return
        self._waiter.woke = True  # type: ignore[union-attr]
        self._arm()  # a watch fires once: keep watching

    def ready(self) -> bool:
        """Whether a CQE is waiting at the consumer index (the owner bit the provider reads)."""
        return self._p.ready()

    def close(self) -> None:
        self._closed = True
        if self._entry is not None:
            self._mem.unwatch(self._entry)
            self._entry = None
