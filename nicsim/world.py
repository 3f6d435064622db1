"""A simulated world: hosts with NICs, links between them, pcap taps, booted kernels."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from nicsim.fabric.faults import FaultConfig
from nicsim.fabric.link import Link, LinkConfig
from nicsim.fabric.switch import Switch, SwitchConfig
from nicsim.fabric.topology import (
    Shape,
    TopologySpec,
    flood_tree,
    host_ip,
    host_mac,
    switch_port_mac,
)
from nicsim.host.host import CpuCosts, Host, NetDev
from nicsim.nic.config import NicConfig
from nicsim.nic.nic import Nic
from nicsim.sim import Sim


class World:
    # Called with every world once it has booted (a checker that watches every run, such as
    # nicsim.checks.physics when enabled); a hook may append to the world's `closing`.
    boot_hooks: list[Callable[[World], None]] = []

    def __init__(self, seed: int = 0) -> None:
        self.env = Sim()
        self.seed = seed
        self.hosts: dict[str, Host] = {}
        self.nics: dict[str, Nic] = {}
        self.links: list[Link] = []
        self.taps: list[object] = []
        self.switches: dict[str, Switch] = {}
        # Every port by name ("h0.eth0", "sw0.p3"): the link it transmits on and its end.
        self.ports: dict[str, tuple[Link, int]] = {}
        self.closing: list[Callable[[], None]] = []  # run by close(), after the taps

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
        self.ports[f"{a}.eth0"], self.ports[f"{b}.eth0"] = (link, 0), (link, 1)
        self.hosts[a].neighbours[nb.cfg.ip] = nb.cfg.mac
        self.hosts[b].neighbours[na.cfg.ip] = na.cfg.mac
        if pcap is not None:
            from nicsim.fabric.pcap import PcapTap

            Path(pcap).parent.mkdir(parents=True, exist_ok=True)
            tap = PcapTap(pcap)
            link.taps.append(tap)
            na.port.loop_taps.append(tap)  # what each NIC loops back to itself, too
            nb.port.loop_taps.append(tap)
            self.taps.append(tap)
        self.links.append(link)
        return link

    def tap(self, port: str, path: str | Path) -> None:
        """A pcap tap on `port` (a name in self.ports): the frames it sends, as sent (and,
        on a host's port, the frames its NIC loops back to itself)."""
        from nicsim.fabric.pcap import PcapTap

        if port not in self.ports:
            raise KeyError(port)
        link, end = self.ports[port]
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        t = PcapTap(path)
        link.end_taps[end].append(t)
        host = port.removesuffix(".eth0")
        if host in self.nics:  # a host's port: the frames its NIC loops back are sent too
            self.nics[host].port.loop_taps.append(t)
        self.taps.append(t)

    @staticmethod
    def from_topology(spec: TopologySpec, seed: int = 0, nic: NicConfig | None = None,
                      switch: SwitchConfig | None = None, mem_size: int = 64 << 20,
                      pcap: str | Path | None = None, costs: CpuCosts | None = None) -> World:
        """A booted world of the topology's shape (see nicsim.fabric.topology). For
        back_to_back, `pcap` is one capture of both directions (as World.two_hosts);
        other shapes take taps per port (World.tap). `costs`: every host's CPU."""
        base = nic or NicConfig()
        if spec.shape is Shape.BACK_TO_BACK:
            return World.two_hosts(seed, spec.host_link, pcap, base, spec.faults, mem_size,
                                   costs)
        g = spec.graph()
        sw_cfg = switch or SwitchConfig()
        w = World(seed)
        pfc = base.pfc_classes or sw_cfg.pfc.lossless
        for i, h in enumerate(g.hosts):
            w.add_host(h, replace(base, mac=host_mac(i), ip=host_ip(i), pfc_classes=pfc),
                       mem_size, costs)
        for i, s in enumerate(g.switches):
            w.switches[s] = Switch(w.env, s, sw_cfg, seed + 10_000 + i)
        s_index = {s: i for i, s in enumerate(g.switches)}
        mac_on: dict[tuple[str, int], bytes] = {}  # (node, cable) -> its port's MAC
        port_on: dict[tuple[str, int], int] = {}  # (switch, cable) -> its port number
        for ci, c in enumerate(g.cables):
            link = Link(w.env, c.cfg, c.name, c.faults)
            w.links.append(link)
            for end, node in enumerate((c.a, c.b)):
                if node in w.nics:
                    # A host's frames interleave with the whole fabric's: one entry each.
                    w.nics[node].port.connect(link, direct=True)
                    mac_on[node, ci] = w.nics[node].mac
                    w.ports[f"{node}.eth0"] = (link, end)
                else:
                    sw = w.switches[node]
                    mac = switch_port_mac(s_index[node], len(sw.ports))
                    try:
                        p = sw.add_port(link, mac)
                    except ValueError as e:
                        raise ValueError(f"switch.{e}") from None
                    mac_on[node, ci], port_on[node, ci] = mac, p
                    w.ports[f"{node}.p{p}"] = (link, end)
        nb = g.neighbours()
        for h in g.hosts:
            dist = g.distances(h)
            ip = w.nics[h].ip.packed
            for s in g.switches:
                if s not in dist:
                    continue
                hops = [(port_on[s, ci], mac_on[n, ci]) for n, ci in nb[s]
                        if dist.get(n) == dist[s] - 1 and (n == h or n in w.switches)]
                w.switches[s].add_route(ip, hops)
        for s, ports in flood_tree(g).items():
            w.switches[s].set_flood_ports([port_on[s, ci] for ci in ports])
        for h in g.hosts:
            ((gw, ci),) = nb[h]
            gw_mac = mac_on[gw, ci].hex(":")
            table = w.hosts[h].neighbours
            for other in g.hosts:
                if other != h:
                    table[w.nics[other].cfg.ip] = gw_mac
        w.boot()
        return w

    def boot(self) -> None:
        """Start each host's kernel, which probes its NICs (INIT_HCA, QUERY_DEVICE)."""
        from nicsim.driver.kernel.ib_core import Kernel

        for host in self.hosts.values():
            Kernel(host)
        for hook in World.boot_hooks:
            hook(self)

    def close(self) -> None:
        for link in self.links:
            link.flush_taps()
        for nic in self.nics.values():
            nic.port.flush_taps()
        for tap in self.taps:
            tap.close()  # type: ignore[attr-defined]
        closing, self.closing = self.closing, []
        for fn in closing:
            fn()

    @staticmethod
    def two_hosts(seed: int = 0, link: LinkConfig | None = None, pcap: str | Path | None = None,
                  nic: NicConfig | None = None, faults: FaultConfig | None = None,
                  mem_size: int = 64 << 20, costs: CpuCosts | None = None) -> World:
        """Hosts a (10.0.0.1) and b (10.0.0.2), one cable between them, kernels booted."""
        w = World(seed)
        base = nic or NicConfig()
        w.add_host("a", replace(base, mac="02:00:00:00:00:0a", ip="10.0.0.1"), mem_size, costs)
        w.add_host("b", replace(base, mac="02:00:00:00:00:0b", ip="10.0.0.2"), mem_size, costs)
        w.connect("a", "b", link, pcap, faults)
        w.boot()
        return w
