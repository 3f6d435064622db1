"""One switch that turns every fast path off, to check them against the general path.

The model takes shortcuts where a stream of packets repeats itself, each written to give
exactly what the general path gives (docs/explanation/fast-paths.md):

- frames between two NICs travel unbuilt (nicsim.wire.packet.Unbuilt);
- the parser remembers each flow's Ethernet, IP and UDP checks (nicsim.wire.packet.L3_CACHE);
- the NIC's receive fast path and the responder's `middle` take the packets of a message
  after its first;
- a link hands frames straight to a receiver (direct entries) or delivers a stream of them
  from one entry in the event queue (nicsim.sim.Sim.deliver);
- a switch remembers each flow's forwarding decision;
- host memory lands device writes in bulk when something looks.

With the general path (`NICSIM_GENERAL_PATH=1` in the environment, or `general_path()`
around the building of a world) none of these is taken: every frame is built, parsed and
checked in full, each frame is one entry of the event queue, every switch lookup is made
again and each posted write lands by an event of its own. Objects read the switch when they
are built. tests/test_general_path.py runs a corpus both ways and compares the results byte
for byte.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

_general = os.environ.get("NICSIM_GENERAL_PATH", "0") not in ("", "0")


def general() -> bool:
    """Whether objects built now take the general path only."""
    return _general


@contextmanager
def general_path(on: bool = True) -> Iterator[None]:
    """Objects built inside take the general path only (`on`) or their fast paths too."""
    global _general
    old, _general = _general, on
    try:
        yield
    finally:
        _general = old
