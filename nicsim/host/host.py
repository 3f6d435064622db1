"""A host: physical memory, CPU time, and the PCIe functions (BARs) plugged into it.

Host software is ordinary sequential Python. Every call it makes costs modelled CPU time,
and spending that time runs the shared simulation forward: this is the synchronous facade
that lets a pyverbs-style program drive a discrete-event world. Nothing uses wall-clock time.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from nicsim.host.cpus import Cpus
from nicsim.host.memory import AddressSpace, PhysMem
from nicsim.host.pcie import Bar, MmioDevice, Pcie
from nicsim.sim import Sim, WakeFlag


@dataclass(frozen=True)
class CpuCosts:
    """CPU time of host operations, in ns (rough figures for a modern x86 core)."""

    post_send: float = 80.0  # build a WQE and ring the doorbell (the MMIO write included)
    post_recv: float = 30.0
    poll_empty: float = 20.0
    poll_cqe: float = 40.0
    syscall: float = 700.0  # a uverbs command's user/kernel crossing
    mmio_write: float = 20.0
    # An interrupt: entry, the handler taking EQEs, waking the thread blocked on the event.
    interrupt: float = 2000.0
    # An on-demand paging fault in the driver's handler (a kernel worker): finding the
    # region and the range, the MMU-notifier sequence, per fault; and per page resolved
    # (hmm_range_fault's page-table walk, a zeroed page where the process has none yet,
    # the DMA mapping). Rough figures: ConnectX ODP faults are reported at tens of us.
    odp_fault: float = 4000.0
    odp_page: float = 300.0
    # Variation of every CPU cost: each is drawn from [c, c * (1 + spread)] by the host's
    # seeded generator (cache and TLB misses, branch mispredictions, frequency steps make the
    # same call cost more some of the time). 0: every call costs exactly its figure.
    spread: float = 0.0


@dataclass
class NetDev:
    """What the kernel knows of a NIC's Ethernet side (its netdev): addresses for GIDs."""

    name: str
    mac: str
    ip: str
    mtu: int = 9000  # jumbo frames: a RoCE path MTU of 4096 fits (iboe_get_mtu)


@dataclass
class PciFunction:
    bar: Bar
    pcie: Pcie
    netdev: NetDev


@dataclass
class Host:
    env: Sim
    name: str
    mem_size: int = 64 << 20
    seed: int = 0
    costs: CpuCosts = field(default_factory=CpuCosts)

    def __post_init__(self) -> None:
        self.mem = PhysMem(self.mem_size, seed=self.seed, env=self.env)
        # Set while this host's program runs together with others (nicsim.host.cpus): its
        # CPU time then passes on that scheduler, not by running the world directly.
        self.cpu: Cpus | None = None
        self._spread = random.Random(self.seed ^ 0x5EED_C0DE).random if self.costs.spread \
            else None
        self.functions: dict[str, PciFunction] = {}
        self.neighbours: dict[str, str] = {}  # IP -> MAC (static ARP/ND table)
        self.kernel: object | None = None  # set by nicsim.driver.kernel when it boots on this host

    def spend(self, ns: float) -> None:
        """The CPU is busy for `ns`: the rest of the world runs meanwhile."""
        if ns > 0:
            if self._spread is not None:
                ns *= 1.0 + self.costs.spread * self._spread()
            if self.cpu is not None:
                self.cpu.sleep(ns)
            else:
                self.env.advance(self.env.now + ns)

    def poll_wait(self, cost: float, lo: int, hi: int, cap_ns: float = 100_000.0) -> bool:
        """An empty poll of host memory [lo, hi) (physical). A polling CPU can observe nothing
        new there until a device write lands in it, so time runs until the first such write
        (as MONITOR/MWAIT would wake), at least `cost`, at most `cap_ns`, so callers with a
        deadline in simulated time still get control back. Returns whether a write woke it."""
        if self.cpu is not None:
            return self.cpu.wait_write(self.mem, lo, hi, cost, cap_ns)
        return poll_alone(self.env, self.mem, lo, hi, cost, cap_ns)

    def plug(self, name: str, device: MmioDevice, pcie: Pcie, netdev: NetDev) -> None:
        """Plug a PCIe device in: the host gets a BAR mapping of it."""
        bar = Bar(self.env, pcie, device, self.spend, self.costs.mmio_write)
        self.functions[name] = PciFunction(bar, pcie, netdev)

    def new_address_space(self) -> AddressSpace:
        return AddressSpace(self.mem)


def poll_alone(env: Sim, mem: PhysMem, lo: int, hi: int, cost: float, cap_ns: float) -> bool:
    """Host.poll_wait of a CPU that has the world to itself: the world runs until a device
    write to [lo, hi) lands (then at least `cost` after the poll began) or `cap_ns` pass."""
    start = env.now
    flag = WakeFlag()

    def wake() -> None:
        flag.woke = True

    entry = mem.watch(lo, hi, wake)
    deadline = start + cap_ns
    env.run_until_woken(deadline, flag)
    mem.unwatch(entry)
    env.advance(max(start + cost, env.now) if flag.woke else deadline)
    return flag.woke
