"""The IOMMU of a host profile (nicsim.host.pcie): an IO-TLB of 4 KiB translations in the
root complex; a DMA that touches a page not in it waits for a page walk. Posted writes stay
in order across walks and a read does not pass the writes before it (PCIe base spec
2.4.1); end to end, a small IO-TLB makes every round trip of an RDMA READ slower, and one
that holds the working set costs nothing."""

from __future__ import annotations

import io

from nicsim.apps.perftest import run as perftest_run
from nicsim.apps.perftest.params import parse as perftest_parse
from nicsim.host.pcie import Pcie, PcieConfig
from nicsim.sim import Sim

MISS = 280.0
PAGE = 4096


def _pcie(entries: int) -> Pcie:
    return Pcie(Sim(), PcieConfig(iotlb_entries=entries, iotlb_miss_ns=MISS))


def test_a_read_of_a_page_not_in_the_iotlb_waits_for_one_walk():
    base = Pcie(Sim(), PcieConfig()).dma_read(64)
    p = _pcie(2)
    assert p.dma_read(64, addr=0) == base + MISS  # cold: a walk
    p.up_free = p.down_free = 0.0  # (the next read measured alone)
    assert p.dma_read(64, addr=8) == base  # the same page: a hit
    # One walk however many pages one DMA spans (their walks overlap).
    big = Pcie(Sim(), PcieConfig()).dma_read(3 * PAGE)
    assert _pcie(8).dma_read(3 * PAGE, addr=5 * PAGE) == big + MISS
    c = p.counters
    assert (c["iotlb_hits"], c["iotlb_misses"]) == (1, 1)
    assert "iotlb_hits" not in Pcie(Sim(), PcieConfig()).counters  # (no IOMMU: no counter)


def test_page_walkers_bound_the_rate_of_missing_dmas():
    """Reads that all miss, issued together: with one walker each waits for the walk before
    it; without a limit their walks overlap."""
    one = Pcie(Sim(), PcieConfig(iotlb_entries=4, iotlb_miss_ns=MISS, iotlb_walkers=1))
    many = Pcie(Sim(), PcieConfig(iotlb_entries=4, iotlb_miss_ns=MISS))
    t1 = [one.dma_read(64, addr=i * PAGE) for i in range(4)]
    tn = [many.dma_read(64, addr=i * PAGE) for i in range(4)]
    assert t1[3] - t1[0] >= 3 * MISS
    assert tn[3] - tn[0] < MISS
    assert t1[0] == tn[0]  # the first walk waits for no one


def test_the_iotlb_keeps_the_most_recently_used_pages():
    p = _pcie(2)
    for page in (0, 1, 0, 2):  # 1 is the least recently used when 2 comes in
        p.dma_read(64, addr=page * PAGE)
    misses = p.counters["iotlb_misses"]
    p.dma_read(64, addr=0)
    assert p.counters["iotlb_misses"] == misses  # 0 stayed
    p.dma_read(64, addr=1 * PAGE)
    assert p.counters["iotlb_misses"] == misses + 1  # 1 was evicted


def test_posted_writes_land_in_order_across_a_walk_and_reads_do_not_pass_them():
    p = _pcie(4)
    p.dma_write(64, addr=0)  # warm page 0
    w1 = p.dma_write(64, addr=7 * PAGE)  # a miss: its walk delays it
    w2 = p.dma_write(64, addr=0)  # a hit, issued after it
    assert w2 >= w1
    assert p.writes_landed_by() >= w1
    # A read behind those writes reaches memory after them, even on a warm page.
    plain = Pcie(Sim(), PcieConfig())
    plain.dma_write(64)
    plain.dma_write(64)
    plain.dma_write(64)
    assert p.dma_read(64, addr=0) >= w1 + PcieConfig().host_mem_ns + PcieConfig().latency_ns
    assert p.dma_read(64, addr=0) > plain.dma_read(64)


def _read_lat_on(host: str | None) -> float:
    args = ["-s", "2", "-n", "300", "--profile", "cx5-100g"]
    if host is not None:
        args += ["--host-profile", host]
    res = perftest_run(perftest_parse("ib_read_lat", args), io.StringIO(), io.StringIO())
    return float(res["results"][-1].t_typical)


def test_a_small_iotlb_slows_every_rdma_read_round_trip(tmp_path):
    """ib_read_lat touches a few pages per iteration (the WQE, the doorbell record, the CQ,
    the buffers): an IO-TLB of one entry misses on most DMAs and the round trip grows by at
    least one walk; an IO-TLB that holds them all costs nothing after the first touch."""
    def host(entries: int) -> str:
        f = tmp_path / f"iommu{entries}.yaml"
        f.write_text(f"name: t\ntitle: t\npcie: {{iotlb_entries: {entries}, "
                     f"iotlb_miss_ns: {MISS}}}\n")
        return str(f)

    plain = _read_lat_on(None)
    roomy = _read_lat_on(host(4096))
    tiny = _read_lat_on(host(1))
    assert abs(roomy - plain) < 0.005
    assert tiny > plain + MISS / 1000
