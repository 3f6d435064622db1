"""Every test runs under the DMA audit (nicsim/testing/dma_audit.py) and the physics checker
(nicsim.checks.physics): any world a test boots has its NICs' DMA checked against what the
drivers have registered, and its wires, completions and counters against physics; the test
fails if a NIC reached memory outside a live registration, ring or table, if a page was freed
with a device write still on its way into it, or if the run broke a physical invariant. Tests
get the audits through the `dma_audits` fixture; a test of the checker itself, which breaks
physics on purpose, is marked `breaks_physics`.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from nicsim.checks.physics import PhysicsChecker
from nicsim.testing.dma_audit import DmaAudit
from nicsim.world import World


@pytest.fixture(autouse=True)
def dma_audits(monkeypatch: pytest.MonkeyPatch,
               request: pytest.FixtureRequest) -> Iterator[list[DmaAudit]]:
    audits: list[DmaAudit] = []
    checkers: list[PhysicsChecker] = []
    boot = World.boot

    def audited_boot(self: World) -> None:
        boot(self)
        audits.append(DmaAudit(self))
        checkers.append(PhysicsChecker(self))

    monkeypatch.setattr(World, "boot", audited_boot)
    yield audits
    for audit in audits:
        assert not audit.violations, audit.violations[:3]
    if request.node.get_closest_marker("breaks_physics"):
        return  # (a test of the checker itself: it breaks physics on purpose)
    for checker in checkers:
        checker.world.close()
        found = checker.finish()
        assert not found, "\n".join(found)
