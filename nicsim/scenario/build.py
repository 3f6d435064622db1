"""The one place a scenario becomes a World.

Everything else in the runner addresses hosts by name (`world.hosts[name]`) and asks this
module about the network (which hosts there are, each host's link rate, the path between two
hosts for the ideal flow completion time). Today a world is two hosts `a` and `b` on one
cable; topologies plug in here.
"""

from __future__ import annotations

from dataclasses import dataclass

from nicsim.fabric.faults import FaultConfig
from nicsim.fabric.link import LinkConfig
from nicsim.host.pcie import PcieConfig
from nicsim.nic.config import NicConfig
from nicsim.scenario.schema import Scenario
from nicsim.world import World


def host_names(sc: Scenario) -> list[str]:
    """The hosts of the scenario's world, in order (traffic defaults: the first sends to the
    second)."""
    return ["a", "b"]


def nic_config(sc: Scenario) -> NicConfig:
    p = sc.pcie
    return NicConfig(pcie=PcieConfig(p.gen, p.lanes, p.mps, p.mrrs, latency_ns=p.latency_ns),
                     **sc.nic.model_dump())


def build_world(sc: Scenario, pcap: str | None, mem_size: int) -> World:
    """The world the scenario runs in, kernels booted; `pcap` captures its link(s)."""
    f = sc.link.faults
    return World.two_hosts(sc.seed, LinkConfig(sc.link.rate_gbps, sc.link.prop_ns), pcap,
                           nic_config(sc), FaultConfig(f.loss, f.corrupt, f.duplicate,
                                                       f.reorder, f.reorder_ns, sc.seed),
                           mem_size)


@dataclass(frozen=True)
class Hop:
    """One link of a path: its rate and propagation delay, and the forwarding latency of the
    switch at its far end (0 for the last hop, into the NIC)."""

    rate_gbps: float
    prop_ns: float
    switch_ns: float = 0.0


def path(sc: Scenario, src: str, dst: str) -> list[Hop]:
    """The links a frame from `src` to `dst` crosses, in order."""
    return [Hop(sc.link.rate_gbps, sc.link.prop_ns)]


def host_rate_gbps(sc: Scenario, host: str) -> float:
    """The rate of a host's own link (what flow `load` is a fraction of)."""
    return sc.link.rate_gbps
