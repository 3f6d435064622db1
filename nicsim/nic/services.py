"""What a NIC's blocks are built from: PCIe and the DMA engine, the Ethernet port, the
translation cache and the MMU in front of it (with on-demand paging's page faults), the CQ
writer and event queues, shared receive queues, memory windows, WQE fetch, the send engine
and framing. The Nic (nicsim.nic.nic) is these services, the blocks built on them and the
BAR; a unit test builds the services alone and the one block it tests
(nicsim.testing.blocks)."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from zlib import crc32

from nicsim.host.memory import PhysMem
from nicsim.host.pcie import Pcie
from nicsim.nic.config import NicConfig
from nicsim.nic.cq import CqWriter
from nicsim.nic.dma import Dma
from nicsim.nic.engines import Units, cycles_ns
from nicsim.nic.eq import EventQueues
from nicsim.nic.framing import Framing
from nicsim.nic.mmu import Mmu
from nicsim.nic.odp import PageFaults
from nicsim.nic.port import Port
from nicsim.nic.scheduler import SendEngine
from nicsim.nic.srq import SharedReceiveQueues
from nicsim.nic.translation import TranslationCache
from nicsim.nic.windows import MemoryWindows
from nicsim.nic.wqe_fetch import WqeFetch
from nicsim.sim import Sim
from nicsim.wire import mac_bytes


class Services:
    """The services of NIC `name` (its name seeds the send engine's pacing jitter); frames
    arriving at its port go to `receive`."""

    def __init__(self, env: Sim, name: str, cfg: NicConfig, mem: PhysMem,
                 receive: Callable[[bytes], None]) -> None:
        self.env = env
        self.name = name
        self.cfg = cfg
        self.mac = mac_bytes(cfg.mac)
        self.ip = ipaddress.ip_address(cfg.ip)
        self.pcie = Pcie(env, cfg.pcie)
        self.dma = Dma(env, mem, self.pcie)
        self.port = Port(env, receive, cfg.pfc_classes, cfg.pfc_watchdog)
        self.port.mac, self.port.loopback_ns = self.mac, cfg.loopback_ns
        # Table reads see the NIC's own table writes still in flight (an INVALIDATE_MPT's
        # zeroes): a stale entry must not be fetched back into the cache.
        self.xlate = TranslationCache(self.dma.peek, cfg.mpt_cache_entries,
                                      cfg.mtt_cache_entries)
        self.eq = EventQueues(self.dma)
        self.cq = CqWriter(self.dma, self.eq, cycles_ns(cfg.cqe_cycles, cfg.clock_mhz))
        self.srq = SharedReceiveQueues(self.eq)
        self.odp = PageFaults(self.eq, lambda qp: self.engine.kick(qp))
        self.framing = Framing(self.mac, self.ip, cfg.ecn_capable, cfg.roce_v1)
        self.engine = eng = SendEngine(env, self.port, cfg.tx_readahead, cfg.tx_quantum,
                                       cfg.cc.pacing_jitter, crc32(name.encode()))
        eng.units = Units(cfg.send_engines)
        eng.hdr_units = Units(cfg.send_engines)
        eng.wqe_cost = cycles_ns(cfg.sched_cycles + cfg.wqe_parse_cycles, cfg.clock_mhz)
        eng.pkt_cost = cycles_ns(cfg.header_cycles, cfg.clock_mhz)
        self.fetch = WqeFetch(env, cfg, self.dma)
        self.mmu = Mmu(self.xlate, self.pcie, self.odp)
        self.windows = MemoryWindows(self.dma, self.xlate)
