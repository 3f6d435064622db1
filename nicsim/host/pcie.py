"""PCIe between a host and its NIC: a timing model for DMA and MMIO.

Each direction of the link is a resource busy until a time (a calendar, not a process): a
transfer starts when the direction is free and occupies it for its bytes on the wire, payload
plus per-TLP overhead. Writes are split into MPS-sized TLPs; reads into MRRS-sized requests
whose completions come back in MPS-sized TLPs after the round-trip latency. Posted writes in
one direction complete in order, which is what lets the NIC write data and then the CQE and
know the CQE is seen last (PCIe ordering rules, PCIe base spec 2.4.1).

An IOMMU in the root complex (`iotlb_entries` > 0) translates each DMA's pages through an
IO-TLB of that many 4 KiB entries, least recently used out: a DMA that touches a page not in
it waits for a page walk (`iotlb_miss_ns`; the walks of one DMA's pages overlap, so one walk
per DMA), done by one of `iotlb_walkers` page walkers (0: as many as needed), so misses
also bound the DMA rate. The posted-write order holds across walks, and a read does not
pass the writes before it (2.4.1 again). Huge-page mappings and passthrough are
`iotlb_entries` 0.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Generator
from dataclasses import dataclass
from heapq import heapreplace

import simpy

from nicsim.hwif import PAGE_SHIFT
from nicsim.knobs import knob

_GT_PER_S = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0}
_ENCODING = {1: 8 / 10, 2: 8 / 10, 3: 128 / 130, 4: 128 / 130, 5: 128 / 130}


@dataclass(frozen=True)
class PcieConfig:
    gen: int = knob(3, "PCIe generation (1..5)", ge=1, le=5)
    lanes: int = knob(16, "link width, lanes", ge=1, le=32)
    mps: int = knob(256, "max payload size: writes and read completions split into TLPs of "
                   "at most this, bytes", ge=128, le=4096)
    mrrs: int = knob(512, "max read request size: a DMA read splits into requests of at most "
                    "this, bytes", ge=128, le=4096)
    tlp_overhead: int = knob(24, "bytes around each TLP's payload: framing 2 + sequence 2 + "
                             "4DW header 16 + LCRC 4", ge=0, le=64)
    latency_ns: float = knob(200.0, "one-way latency, device <-> root complex, ns", ge=0)
    host_mem_ns: float = knob(80.0, "root complex to memory and back, for a DMA read, ns",
                              ge=0)
    iotlb_entries: int = knob(0, "IOMMU: 4 KiB translations its IO-TLB holds (0: no "
                              "translation: IOMMU off, passthrough or huge pages)", ge=0,
                              le=1 << 16)
    iotlb_miss_ns: float = knob(0.0, "IOMMU: what an IO-TLB miss (a page walk) adds to a DMA, "
                                "ns", ge=0)
    iotlb_walkers: int = knob(0, "IOMMU: page walks in progress at once (0: no limit)", ge=0,
                              le=1024)

    @property
    def bytes_per_ns(self) -> float:
        """Raw data rate of one direction after line encoding, in bytes per nanosecond."""
        return self.lanes * _GT_PER_S[self.gen] * _ENCODING[self.gen] / 8


class Pcie:
    """One device's PCIe link; `up` is device-to-host, `down` host-to-device."""

    def __init__(self, env: simpy.Environment, cfg: PcieConfig) -> None:
        self.env = env
        self.cfg = cfg
        self._bpns = cfg.bytes_per_ns
        self.up_free = 0.0
        self.down_free = 0.0
        self.mmio_free = 0.0  # when the CPU's last MMIO write has crossed the link
        self.last_write_start = 0.0  # when the most recent posted write began
        self._lat = cfg.latency_ns
        self._rtt = 2 * cfg.latency_ns + cfg.host_mem_ns  # request out, completion back
        # Per transfer size: its TLPs and durations, and how many transfers of that size there
        # were. Counting per size once, instead of four counters per transfer, keeps the
        # per-packet cost down; `counters` adds them up when read.
        self._wcost: dict[int, list] = {}  # [TLPs, duration, count]
        self._rcost: dict[int, list] = {}  # [request TLPs, completion TLPs, their durations, count]
        self._mmio = {"mmio_writes": 0, "mmio_reads": 0}
        # The IOMMU's IO-TLB (page -> None, least recently used first), or None without one.
        self._iotlb: OrderedDict[int, None] | None = \
            OrderedDict() if cfg.iotlb_entries else None
        self._iommu = {"iotlb_hits": 0, "iotlb_misses": 0}
        self._writes_land = 0.0  # (with an IOMMU) when the latest posted write lands
        self._walkers = [0.0] * cfg.iotlb_walkers  # when each page walker is free (a heap)

    @property
    def counters(self) -> dict[str, int]:
        """The counters, tallies added up: a new dict (writing to it counts nothing)."""
        w, r = self._wcost, self._rcost
        return {
            "dma_read_bytes": sum(n * v[4] for n, v in r.items()),
            "dma_reads": sum(v[4] for v in r.values()),
            "dma_write_bytes": sum(n * v[2] for n, v in w.items()),
            "dma_writes": sum(v[2] for v in w.values()),
            "tlps_up": sum(v[0] * v[2] for v in w.values()) + sum(v[0] * v[4] for v in r.values()),
            "tlps_down": sum(v[1] * v[4] for v in r.values()) + self._mmio["mmio_writes"],
            **self._mmio,
            **(self._iommu if self._iotlb is not None else {}),
        }

    def _translated(self, addr: int, nbytes: int, at: float) -> float:
        """When the IOMMU has translated a DMA of `nbytes` at bus address `addr` that reaches
        it at `at`: then, or after a page walk if any page it touches is not in the IO-TLB
        (which then holds them all), on the first page walker free."""
        if not self._walk(addr, nbytes):
            return at
        walkers = self._walkers
        if walkers:
            start = walkers[0] if walkers[0] > at else at
            heapreplace(walkers, start + self.cfg.iotlb_miss_ns)
            at = start
        return at + self.cfg.iotlb_miss_ns

    def _walk(self, addr: int, nbytes: int) -> bool:
        """Whether a DMA of `nbytes` at `addr` misses the IO-TLB (which then holds its
        pages)."""
        tlb = self._iotlb
        assert tlb is not None
        missed = False
        for page in range(addr >> PAGE_SHIFT, ((addr + max(nbytes, 1) - 1) >> PAGE_SHIFT) + 1):
            if page in tlb:
                tlb.move_to_end(page)
                self._iommu["iotlb_hits"] += 1
            else:
                missed = True
                self._iommu["iotlb_misses"] += 1
                tlb[page] = None
                if len(tlb) > self.cfg.iotlb_entries:
                    tlb.popitem(last=False)
        return missed

    def tlps(self, n: int, size: int) -> int:
        return max(1, -(-n // size))

    def _write_cost(self, nbytes: int) -> list:
        c = self.cfg
        ntlp = self.tlps(nbytes, c.mps)
        v = self._wcost[nbytes] = [ntlp, (nbytes + ntlp * c.tlp_overhead) / self._bpns, 0]
        return v

    def _read_cost(self, nbytes: int) -> list:
        c = self.cfg
        nreq, ncpl = self.tlps(nbytes, c.mrrs), self.tlps(nbytes, c.mps)
        v = self._rcost[nbytes] = [nreq, ncpl, nreq * c.tlp_overhead / self._bpns,
                                   (nbytes + ncpl * c.tlp_overhead) / self._bpns, 0]
        return v

    def dma_write(self, nbytes: int, not_before: float = 0.0, addr: int | None = None) -> float:
        """Reserve the upstream link for a posted write; returns when it is in host memory.
        `addr`: its bus address, for the IOMMU (none: a write the IOMMU does not see)."""
        w = self._wcost.get(nbytes) or self._write_cost(nbytes)
        w[2] += 1
        dur = w[1]
        now = self.env.now
        start = self.up_free
        if start < now:
            start = now
        if start < not_before:
            start = not_before
        self.up_free = start + dur
        self.last_write_start = start
        land = start + dur + self._lat
        if self._iotlb is None:
            return land
        if addr is not None:
            land = self._translated(addr, nbytes, land)
        if land < self._writes_land:  # (a walk holds the posted writes behind it)
            land = self._writes_land
        self._writes_land = land
        return land

    def writes_landed_by(self) -> float:
        """When every posted write issued so far is in host memory (a later read request may
        have moved up_free on: the bound is safe, not tight)."""
        t = self.up_free + self._lat
        return t if t > self._writes_land else self._writes_land

    def dma_read(self, nbytes: int, not_before: float = 0.0, addr: int | None = None) -> float:
        """Read requests upstream, completions downstream; returns when the data is in the NIC.
        `addr`: its bus address, for the IOMMU (none: a read the IOMMU does not see)."""
        r = self._rcost.get(nbytes) or self._read_cost(nbytes)
        r[4] += 1
        req_dur = r[2]
        now = self.env.now
        start = self.up_free
        if start < now:
            start = now
        if start < not_before:
            start = not_before
        self.up_free = start + req_dur
        if self._iotlb is None:
            cstart = start + req_dur + self._rtt
        else:
            # The request reaches memory after its walk and after the writes before it.
            at_mem = start + req_dur + self._lat
            if addr is not None:
                at_mem = self._translated(addr, nbytes, at_mem)
            if at_mem < self._writes_land:
                at_mem = self._writes_land
            cstart = at_mem + self.cfg.host_mem_ns + self._lat
        if cstart < self.down_free:
            cstart = self.down_free
        self.down_free = cstart = cstart + r[3]
        return cstart

    def mmio_write_arrival(self, nbytes: int = 8) -> float:
        """A posted MMIO write from the CPU: when it reaches the device."""
        c = self.cfg
        now = self.env.now
        dur = (nbytes + c.tlp_overhead) / self._bpns
        # MMIO writes keep their order among themselves. Read completions the device has
        # reserved on the downstream link ahead of now do not hold a posted write up: the
        # link takes TLPs as they come, so the write goes between them and the completions
        # behind it move by its bytes.
        start = now if now > self.mmio_free else self.mmio_free
        if self.down_free > start:
            self.down_free += dur
        else:
            self.down_free = start + dur
        self.mmio_free = start + dur
        self._mmio["mmio_writes"] += 1
        return start + dur + c.latency_ns

    def mmio_read_roundtrip(self) -> float:
        """A non-posted MMIO read: request down, completion up. Returns the round-trip time."""
        self._mmio["mmio_reads"] += 1
        return 2 * self.cfg.latency_ns + 2 * (8 + self.cfg.tlp_overhead) / self._bpns


class MmioDevice:
    """What a PCIe function exposes on its BAR."""

    def mmio_write(self, offset: int, value: int) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def mmio_read(self, offset: int) -> int:  # pragma: no cover - interface
        raise NotImplementedError

    def mmio_write_block(self, offset: int, data: bytes) -> None:
        """A write-combined burst; only a device that advertises BlueFlame gets one."""
        raise NotImplementedError(f"{type(self).__name__} takes no write-combined bursts")


class Bar:
    """The CPU's view of a device BAR: 64-bit MMIO writes (posted) and reads (non-posted).

    This is all the driver gets of the device, besides host memory. A write reaches the device
    after the PCIe latency, in order; a read stalls the CPU for the round trip.
    """

    def __init__(self, env: simpy.Environment, pcie: Pcie, device: MmioDevice,
                 cpu_spend: Callable[[float], None], write_cost_ns: float = 20.0) -> None:
        self._env = env
        self._pcie = pcie
        self._dev = device
        self._spend = cpu_spend
        self._write_cost = write_cost_ns
        self._last_write_at = 0.0  # when the latest posted write reaches the device

    def write64(self, offset: int, value: int, *, cpu: bool = True) -> None:
        """A posted write. `cpu=False` when the caller has already counted the store's CPU
        time in its own cost (the data path's doorbell)."""
        at = self._pcie.mmio_write_arrival()
        self._last_write_at = at
        dev = self._dev
        ev = self._env.timeout(at - self._env.now)
        ev.callbacks.append(lambda _e: dev.mmio_write(offset, value))
        if cpu:
            self._spend(self._write_cost)

    def write_block(self, offset: int, data: bytes) -> None:
        """A write-combined store of `data` (a BlueFlame WQE): posted, flushed as 64-byte
        TLPs that reach the device in order; the device sees the whole burst when the last
        arrives. The caller counts its CPU time."""
        pcie = self._pcie
        at = 0.0
        for o in range(0, len(data), 64):
            at = pcie.mmio_write_arrival(min(64, len(data) - o))
        self._last_write_at = at
        dev = self._dev
        ev = self._env.timeout(at - self._env.now)
        ev.callbacks.append(lambda _e: dev.mmio_write_block(offset, data))

    def read64(self, offset: int) -> int:
        """A non-posted read: it cannot pass the posted writes issued before it (PCIe
        ordering), so the device answers only after they have all arrived."""
        self._spend(self._read_wait())
        return self._dev.mmio_read(offset)

    def read64_in_process(self, offset: int) -> Generator[simpy.Event, None, int]:
        """read64 from a SimPy process (a kernel worker, not a program): the CPU stall is
        the process waiting the same time."""
        yield self._env.timeout(self._read_wait())
        return self._dev.mmio_read(offset)

    def _read_wait(self) -> float:
        rt = self._pcie.mmio_read_roundtrip()
        behind = self._last_write_at - self._env.now + rt / 2  # behind the last posted write
        return rt if rt > behind else behind
