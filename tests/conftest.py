"""Every test runs under the DMA audit (nicsim/testing/dma_audit.py): any world a test boots has its
NICs' DMA checked against what the drivers have registered, and the test fails if a NIC
reached memory outside a live registration, ring or table, or if a page was freed with a
device write still on its way into it. Tests get the audits through the `dma_audits` fixture.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from nicsim.testing.dma_audit import DmaAudit
from nicsim.world import World


@pytest.fixture(autouse=True)
def dma_audits(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[DmaAudit]]:
    audits: list[DmaAudit] = []
    boot = World.boot

    def audited_boot(self: World) -> None:
        boot(self)
        audits.append(DmaAudit(self))

    monkeypatch.setattr(World, "boot", audited_boot)
    yield audits
    for audit in audits:
        assert not audit.violations, audit.violations[:3]
