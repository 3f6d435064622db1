"""An AXI4 slave that serves an RTL's DMA from a nicsim host's memory with PCIe timing.

Each read burst is a PCIe read: its request reaches host memory after the request TLPs and the
one-way latency, the memory is read there (a SimPy event at that time, so it sees what the CPU
had written by then, and this device's own writes still in flight: a read does not pass a
posted write), and the R beats start when the completions have arrived (the round trip and the
completion TLPs at the link's rate). Each write burst is a posted write that lands in host
memory after its TLPs and the latency (PhysMem.post: a CPU polling that memory wakes then); its
B response is returned at once, as a PCIe endpoint acknowledges a posted write locally. The
timing is nicsim.host.pcie.Pcie's, on the RTL's clock (its own calendar for this device).
Accesses outside host memory get SLVERR / zero data.

Out of the box it answers in order, as fast as that timing allows. `stall` holds any of the
five channels back at random; `reorder` answers out of order across AXI IDs (as a root complex
returns completions of different tags): each read's data and each write's B response comes
after a random extra delay, reads of different IDs overtake each other with their beats
interleaved, and B responses of different IDs come back in any order. One ID's reads and
writes stay in order (AXI A5.3.1, A5.3.2).
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import cocotb
from cocotb.triggers import Event, RisingEdge
from cocotbext.axi import AxiBus
from cocotbext.axi.axi_channels import (
    AxiARSink,
    AxiAWSink,
    AxiBSource,
    AxiBTransaction,
    AxiRSource,
    AxiRTransaction,
    AxiWSink,
)

from nicsim.cosim.clock import TimeCoupler
from nicsim.host.memory import PhysMem
from nicsim.host.pcie import Pcie, PcieConfig


class _Clock:
    """What nicsim.host.pcie.Pcie reads of its environment: the time (set per access)."""

    def __init__(self) -> None:
        self.now = 0.0


CHANNELS = ("AR", "R", "AW", "W", "B")


@dataclass
class _Read:
    rid: int
    addr: int
    beats: int
    ready_at: float  # SimPy time the last completion has arrived
    data: bytes | None = None
    err: bool = False
    sent: int = 0  # beats sent (reorder: a read's beats may interleave with other IDs')


@dataclass
class _Resp:
    bid: int
    bresp: int
    ready_at: float  # SimPy time it may go (reorder)


def pauses(rng: random.Random, p: float, cycles: int | None = None) -> Iterator[bool]:
    """A cocotbext-axi pause generator: True (pause) with probability `p`, for `cycles`."""
    n = 0
    while cycles is None or n < cycles:
        n += 1
        yield rng.random() < p
    while True:
        yield False


class PcieDmaSlave:
    """AXI4 slave (`bus`: an AxiBus) over `mem` with PCIe timing (`cfg`), coupled by `clock`."""

    def __init__(self, bus: AxiBus, clk, rst, mem: PhysMem, clock: TimeCoupler,  # noqa: ANN001
                 cfg: PcieConfig | None = None) -> None:
        self.mem = mem
        self.clock = clock
        self.clk = clk
        self._pc = _Clock()
        self.pcie = Pcie(self._pc, cfg or PcieConfig())  # type: ignore[arg-type]
        self.ar = AxiARSink(bus.read.ar, clk, rst)
        self.r = AxiRSource(bus.read.r, clk, rst)
        self.aw = AxiAWSink(bus.write.aw, clk, rst)
        self.w = AxiWSink(bus.write.w, clk, rst)
        self.b = AxiBSource(bus.write.b, clk, rst)
        self.lanes = len(self.r.bus.rdata) // 8
        self.last_land = 0.0  # when the latest posted write lands (SimPy time)
        self.reads: deque[_Read] = deque()
        self.resps: list[_Resp] = []  # B responses waiting (reorder)
        self._more = Event()  # reads to answer
        self._more_b = Event()  # B responses waiting (reorder)
        self._rng: random.Random | None = None  # reorder's, or None: in order
        self._spread_ns = 0.0
        self.counters = {"reads": 0, "read_bytes": 0, "writes": 0, "write_bytes": 0,
                         "errors": 0}
        cocotb.start_soon(self._ar_loop())
        cocotb.start_soon(self._r_loop())
        cocotb.start_soon(self._w_loop())
        cocotb.start_soon(self._b_loop())

    def stall(self, channels: str, p: float, seed: int = 0, cycles: int | None = None) -> None:
        """Hold channels back at random: each of `channels` (AXI channel names, "AR R AW W
        B", separated by spaces or commas; "all" for the five) pauses in a cycle with
        probability `p` (its own seeded stream), for the first `cycles` cycles from now or for
        good: the slave's ready low on AR, AW and W, its valid withheld on R and B. The RTL
        must keep to AXI and get every byte right whatever the stalls."""
        models = {"AR": self.ar, "R": self.r, "AW": self.aw, "W": self.w, "B": self.b}
        names = CHANNELS if channels == "all" else channels.replace(",", " ").split()
        for ch in names:
            if ch not in models:
                raise ValueError(f"stall: no channel {ch!r} (one of {', '.join(CHANNELS)})")
            i = CHANNELS.index(ch)
            models[ch].set_pause_generator(pauses(random.Random(seed * 7 + i), p, cycles))

    def reorder(self, seed: int, spread_ns: float = 400.0) -> None:
        """From now on answer out of order (see the module): each read's data and each B
        response is held a further uniform 0..`spread_ns` ns, and whatever of different IDs
        is ready goes in a random order, read beats interleaved."""
        self._rng = random.Random(seed)
        self._spread_ns = spread_ns

    def _in_mem(self, addr: int, n: int) -> bool:
        return addr >= 0 and addr + n <= self.mem.size

    # -- reads -------------------------------------------------------------------------------

    async def _ar_loop(self) -> None:
        clock, pc, pcie = self.clock, self._pc, self.pcie
        while True:
            ar = await self.ar.recv()
            beats = int(ar.arlen) + 1
            n = beats * self.lanes
            addr = int(ar.araddr) // self.lanes * self.lanes
            t = clock.now()
            pc.now = t
            done = pcie.dma_read(n)
            # the request is at host memory when its TLPs have gone and the latency passed
            nreq = pcie.tlps(n, pcie.cfg.mrrs)
            at_mem = t + nreq * pcie.cfg.tlp_overhead / pcie._bpns + pcie.cfg.latency_ns \
                + pcie.cfg.host_mem_ns / 2
            if self._rng is not None:
                done += self._rng.random() * self._spread_ns
            rd = _Read(int(ar.arid), addr, beats, done)
            self.reads.append(rd)
            self._more.set()
            self.counters["reads"] += 1
            self.counters["read_bytes"] += n
            env = clock.env
            assert env is not None
            at = clock.sim_time_for(at_mem)
            env.timeout(at - env.now).callbacks.append(lambda _e, r=rd: self._fill(r))

    def _fill(self, rd: _Read) -> None:
        """SimPy side, at the time the request reaches host memory."""
        n = rd.beats * self.lanes
        mem = self.mem
        if not self._in_mem(rd.addr, n):
            rd.err = True
            rd.data = bytes(n)
            return
        if mem.posted:
            mem.sync()
        data = mem.read(rd.addr, n)
        rd.data = mem.overlay(rd.addr, data) if mem.posted else data

    async def _r_loop(self) -> None:
        clock = self.clock
        while True:
            if not self.reads:
                self._more.clear()
                await self._more.wait()
                continue
            if self._rng is not None:
                await self._r_mixed()
                continue
            rd = self.reads[0]
            await clock.until(rd.ready_at)
            while rd.data is None:  # (the request's event is always earlier: a safeguard)
                await RisingEdge(self.clk)
            self.reads.popleft()
            while rd.sent < rd.beats:
                await self.r.send(self._beat(rd))

    async def _r_mixed(self) -> None:
        """reorder: one beat of a random ready read, each the oldest of its ID, per cycle."""
        rd = await self._pick(self.reads, lambda r: r.rid, self.r, lambda r: r.data is not None)
        if rd is not None:
            self.r.send_nowait(self._beat(rd))
            if rd.sent == rd.beats:
                self.reads.remove(rd)
        await RisingEdge(self.clk)

    async def _pick(self, waiting: Iterable[Any], id_of: Callable[[Any], int], source: Any,
                    filled: Callable[[Any], bool] = lambda _x: True) -> Any:  # noqa: ANN401
        """reorder: a random one of `waiting`'s answers that are due (and `filled`), each the
        oldest of its ID (AXI keeps one ID in order), if `source`'s queue is short (the next
        choice stays open); None, after sleeping until the first is due when none is."""
        assert self._rng is not None
        now = self.clock.now()
        heads: dict[int, Any] = {}
        for x in waiting:
            heads.setdefault(id_of(x), x)
        ready = [x for x in heads.values() if x.ready_at <= now and filled(x)]
        if not ready:  # (not cycle by cycle)
            await self.clock.until(min(x.ready_at for x in heads.values()))
            return None
        return self._rng.choice(ready) if source.count() < 2 else None

    def _beat(self, rd: _Read) -> AxiRTransaction:
        """Read `rd`'s next beat."""
        i, lanes = rd.sent, self.lanes
        rd.sent += 1
        if rd.err and i == 0:
            self.counters["errors"] += 1
        assert rd.data is not None
        return AxiRTransaction(rid=rd.rid, rresp=2 if rd.err else 0,
                               rdata=int.from_bytes(rd.data[i * lanes:(i + 1) * lanes],
                                                    "little"),
                               rlast=int(i == rd.beats - 1))

    # -- writes ------------------------------------------------------------------------------

    async def _w_loop(self) -> None:
        clock, pc, pcie, lanes = self.clock, self._pc, self.pcie, self.lanes
        while True:
            aw = await self.aw.recv()
            beats = int(aw.awlen) + 1
            addr = int(aw.awaddr) // lanes * lanes
            parts: list[tuple[int, bytes]] = []
            nbytes = 0
            for i in range(beats):
                w = await self.w.recv()
                data = int(w.wdata).to_bytes(lanes, "little")
                strb = int(w.wstrb)
                base = addr + i * lanes
                j = 0
                while j < lanes:
                    if not strb >> j & 1:
                        j += 1
                        continue
                    k = j
                    while k < lanes and strb >> k & 1:
                        k += 1
                    pa = base + j
                    if parts and parts[-1][0] + len(parts[-1][1]) == pa:
                        parts[-1] = (parts[-1][0], parts[-1][1] + data[j:k])
                    else:
                        parts.append((pa, data[j:k]))
                    nbytes += k - j
                    j = k
            ok = all(self._in_mem(pa, len(d)) for pa, d in parts)
            if ok and parts:
                pc.now = clock.now()
                land = clock.sim_time_for(pcie.dma_write(nbytes))
                self.last_land = max(self.last_land, land)
                self.mem.post(land, parts)
                self.counters["writes"] += 1
                self.counters["write_bytes"] += nbytes
            elif not ok:
                self.counters["errors"] += 1
            if self._rng is None:
                await self.b.send(AxiBTransaction(bid=int(aw.awid), bresp=0 if ok else 2))
            else:
                self.resps.append(_Resp(int(aw.awid), 0 if ok else 2,
                                        clock.now() + self._rng.random() * self._spread_ns))
                self._more_b.set()

    async def _b_loop(self) -> None:
        """reorder: one random ready B response, each the oldest of its ID, per cycle."""
        while True:
            if not self.resps:
                self._more_b.clear()
                await self._more_b.wait()
                continue
            b = await self._pick(self.resps, lambda x: x.bid, self.b)
            if b is not None:
                self.resps.remove(b)
                self.b.send_nowait(AxiBTransaction(bid=b.bid, bresp=b.bresp))
            await RisingEdge(self.clk)
