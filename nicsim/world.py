"""A simulated world: hosts with NICs, links between them, pcap taps, booted kernels."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import simpy

from nicsim.fabric.faults import FaultConfig
from nicsim.fabric.link import Link, LinkConfig
from nicsim.host.host import CpuCosts, Host, NetDev
from nicsim.nic.config import NicConfig
from nicsim.nic.nic import Nic


class World:
    def __init__(self, seed: int = 0) -> None:
        self.env = simpy.Environment()
        self.seed = seed
        self.hosts: dict[str, Host] = {}
        self.nics: dict[str, Nic] = {}
        self.links: list[Link] = []
        self.taps: list[object] = []

    def add_host(self, name: str, nic_cfg: NicConfig, mem_size: int = 64 << 20,
                 costs: CpuCosts | None = None) -> Host:
        host = Host(self.env, name, mem_size, seed=self.seed + len(self.hosts),
                    costs=costs or CpuCosts())
        nic = Nic(self.env, f"{name}.nic0", nic_cfg, host.mem)
        host.plug("0000:01:00.0", nic, nic.pcie, NetDev("eth0", nic_cfg.mac, nic_cfg.ip))
        self.hosts[name] = host
        self.nics[name] = nic
        return host

    def connect(self, a: str, b: str, cfg: LinkConfig | None = None,
                pcap: str | Path | None = None, faults: FaultConfig | None = None) -> Link:
        """A cable between the NICs of hosts a and b; both learn each other's address."""
        link = Link(self.env, cfg or LinkConfig(), f"{a}-{b}", faults)
        na, nb = self.nics[a], self.nics[b]
        na.port.connect(link)
        nb.port.connect(link)
        self.hosts[a].neighbours[nb.cfg.ip] = nb.cfg.mac
        self.hosts[b].neighbours[na.cfg.ip] = na.cfg.mac
        if pcap is not None:
            from nicsim.fabric.pcap import PcapTap

            Path(pcap).parent.mkdir(parents=True, exist_ok=True)
            tap = PcapTap(pcap)
            link.taps.append(tap)
            self.taps.append(tap)
        self.links.append(link)
        return link

    def boot(self) -> None:
        """Start each host's kernel, which probes its NICs (INIT_HCA, QUERY_DEVICE)."""
        from driver.kernel.ib_core import Kernel

        for host in self.hosts.values():
            Kernel(host)

    def close(self) -> None:
        for link in self.links:
            link.flush_taps()
        for tap in self.taps:
            tap.close()  # type: ignore[attr-defined]

    @staticmethod
    def two_hosts(seed: int = 0, link: LinkConfig | None = None, pcap: str | Path | None = None,
                  nic: NicConfig | None = None, faults: FaultConfig | None = None,
                  mem_size: int = 64 << 20) -> World:
        """Hosts a (10.0.0.1) and b (10.0.0.2), one cable between them, kernels booted."""
        w = World(seed)
        base = nic or NicConfig()
        w.add_host("a", replace(base, mac="02:00:00:00:00:0a", ip="10.0.0.1"), mem_size)
        w.add_host("b", replace(base, mac="02:00:00:00:00:0b", ip="10.0.0.2"), mem_size)
        w.connect("a", "b", link, pcap, faults)
        w.boot()
        return w
