"""Topologies: a world's hosts, switches and links, from a shape and a few numbers.

A topology is a graph: hosts (one NIC port each), switches, and links between them, each link
with its rate, propagation delay and faults. Shapes build the graph:

- `back_to_back`: hosts a and b on one cable (nicsim's original world, the same addresses,
  bytes and times);
- `star`: N hosts on one switch `sw0`;
- `leaf_spine`: `leaves` leaf switches, each with `hosts_per_leaf` hosts, every leaf linked to
  each of `spines` spine switches; oversubscription = hosts_per_leaf x host rate /
  (spines x fabric rate);
- `fat_tree`: the k-ary fat tree of Al-Fares et al. (SIGCOMM 2008): k pods of k/2 edge and
  k/2 aggregation switches, (k/2)^2 core switches, k^3/4 hosts.

Addresses are assigned in order: host i is 10.x.y.z = 10.0.0.0 + i + 1 with MAC
02:00:00:xx:xx:xx (its number), switch s's port p has MAC 06:00:ss:ss:pp:pp (back_to_back keeps
10.0.0.1/.2 and 02:00:00:00:00:0a/0b). Routing is by shortest path: each switch gets a host
route to every host whose next hops are all its neighbours one hop closer (an ECMP group
where there are several), which switches choose between by the hash of the 5-tuple. A host's
neighbour (ARP) table maps every other host's IP to the MAC of the switch port it is cabled
to, its gateway, as in a routed (L3) fabric.
"""

from __future__ import annotations

import ipaddress
from collections import deque
from dataclasses import dataclass, field
from enum import StrEnum

from nicsim.fabric.faults import FaultConfig
from nicsim.fabric.link import LinkConfig


class Shape(StrEnum):
    BACK_TO_BACK = "back_to_back"
    STAR = "star"
    LEAF_SPINE = "leaf_spine"
    FAT_TREE = "fat_tree"


class TopologyError(ValueError):
    """A topology that cannot be built; the message is one line naming the field."""


@dataclass(frozen=True)
class Cable:
    a: str
    b: str
    cfg: LinkConfig = field(default_factory=LinkConfig)
    faults: FaultConfig | None = None

    @property
    def name(self) -> str:
        return f"{self.a}-{self.b}"


@dataclass
class Graph:
    """Hosts, switches and the cables between them, in the order they are built."""

    hosts: list[str] = field(default_factory=list)
    switches: list[str] = field(default_factory=list)
    cables: list[Cable] = field(default_factory=list)

    def check(self) -> None:
        """Every name unique, every cable between known nodes, each host on exactly one
        cable, every host able to reach every other."""
        names = self.hosts + self.switches
        seen: set[str] = set()
        for n in names:
            if n in seen:
                raise TopologyError(f"topology: node name {n!r} is used twice")
            seen.add(n)
        if len(self.hosts) < 2:
            raise TopologyError(f"topology: needs at least 2 hosts, has {len(self.hosts)}")
        hosts = set(self.hosts)
        ports: dict[str, int] = dict.fromkeys(self.hosts, 0)
        for c in self.cables:
            for end in (c.a, c.b):
                if end not in seen:
                    raise TopologyError(f"topology.links: {c.name} names unknown node {end!r}")
                if end in hosts:
                    ports[end] += 1
            if c.a == c.b:
                raise TopologyError(f"topology.links: {c.name} connects {c.a} to itself")
        for h, n in ports.items():
            if n != 1:
                raise TopologyError(f"topology.links: host {h} has {n} cables (a host has "
                                    "one NIC port: exactly one)")
        dist = self.distances(self.hosts[0])
        lost = [h for h in self.hosts if h not in dist]
        if lost:
            raise TopologyError(f"topology: not connected: {self.hosts[0]} cannot reach "
                                f"{', '.join(lost[:5])}{' ...' if len(lost) > 5 else ''}")

    def neighbours(self) -> dict[str, list[tuple[str, int]]]:
        """node -> [(neighbour, cable index)], in cable order."""
        out: dict[str, list[tuple[str, int]]] = {n: [] for n in self.hosts + self.switches}
        for i, c in enumerate(self.cables):
            out[c.a].append((c.b, i))
            out[c.b].append((c.a, i))
        return out

    def distances(self, src: str) -> dict[str, int]:
        """Hop counts from `src` to every node it reaches, through switches only (a host
        does not forward)."""
        nb = self.neighbours()
        hosts = set(self.hosts)
        dist = {src: 0}
        todo = deque([src])
        while todo:
            n = todo.popleft()
            if n != src and n in hosts:
                continue
            for m, _ in nb[n]:
                if m not in dist:
                    dist[m] = dist[n] + 1
                    todo.append(m)
        return dist


def flood_tree(g: Graph) -> dict[str, list[int]]:
    """switch -> the cables it floods multicast frames on: every host cable, and the
    switch-to-switch cables of a breadth-first spanning tree from the first switch (the
    tree STP would leave unblocked with that switch as root), so a flood reaches every host
    once and never loops."""
    nb = g.neighbours()
    switches = set(g.switches)
    out: dict[str, list[int]] = {s: [ci for n, ci in nb[s] if n not in switches]
                                 for s in g.switches}
    if not g.switches:
        return out
    seen = {g.switches[0]}
    todo = deque([g.switches[0]])
    while todo:
        s = todo.popleft()
        for n, ci in nb[s]:
            if n in switches and n not in seen:
                seen.add(n)
                out[s].append(ci)
                out[n].append(ci)
                todo.append(n)
    return out


@dataclass(frozen=True)
class TopologySpec:
    """A shape and its numbers (the scenario's `topology:` section)."""

    shape: Shape = Shape.BACK_TO_BACK
    hosts: int = 2  # star
    leaves: int = 2  # leaf_spine
    spines: int = 2
    hosts_per_leaf: int = 2
    k: int = 4  # fat_tree
    host_link: LinkConfig = field(default_factory=LinkConfig)  # host to switch
    fabric_link: LinkConfig = field(default_factory=LinkConfig)  # switch to switch
    faults: FaultConfig | None = None  # on every link
    link_faults: tuple[tuple[str, FaultConfig], ...] = ()  # (link name, faults) overrides

    def graph(self) -> Graph:
        g = Graph()
        hl, fl = self.host_link, self.fabric_link
        s = self.shape
        if s is Shape.BACK_TO_BACK:
            g.hosts = ["a", "b"]
            g.cables = [Cable("a", "b", hl)]
        elif s is Shape.STAR:
            _need(self.hosts >= 2, "topology.hosts", f"a star needs 2 or more hosts, not "
                  f"{self.hosts}")
            g.switches = ["sw0"]
            g.hosts = [f"h{i}" for i in range(self.hosts)]
            g.cables = [Cable(h, "sw0", hl) for h in g.hosts]
        elif s is Shape.LEAF_SPINE:
            _need(self.leaves >= 1, "topology.leaves", f"{self.leaves} must be >= 1")
            _need(self.spines >= 1, "topology.spines", f"{self.spines} must be >= 1")
            _need(self.hosts_per_leaf >= 1, "topology.hosts_per_leaf",
                  f"{self.hosts_per_leaf} must be >= 1")
            _need(self.leaves * self.hosts_per_leaf >= 2, "topology.hosts_per_leaf",
                  "a fabric needs 2 or more hosts")
            leaves = [f"leaf{i}" for i in range(self.leaves)]
            spines = [f"spine{j}" for j in range(self.spines)]
            g.switches = leaves + spines
            for i, leaf in enumerate(leaves):
                for x in range(self.hosts_per_leaf):
                    h = f"h{i * self.hosts_per_leaf + x}"
                    g.hosts.append(h)
                    g.cables.append(Cable(h, leaf, hl))
            for leaf in leaves:
                for spine in spines:
                    g.cables.append(Cable(leaf, spine, fl))
        elif s is Shape.FAT_TREE:
            k = self.k
            _need(k >= 2 and k % 2 == 0, "topology.k", f"{k} must be an even number >= 2")
            half = k // 2
            cores = [f"core{i}" for i in range(half * half)]
            n = 0
            for p in range(k):
                edges = [f"edge{p}_{i}" for i in range(half)]
                aggs = [f"agg{p}_{i}" for i in range(half)]
                g.switches += edges + aggs
                for e in edges:
                    for _ in range(half):
                        h = f"h{n}"
                        n += 1
                        g.hosts.append(h)
                        g.cables.append(Cable(h, e, hl))
                for e in edges:
                    for a in aggs:
                        g.cables.append(Cable(e, a, fl))
                for i, a in enumerate(aggs):
                    for j in range(half):
                        g.cables.append(Cable(a, cores[i * half + j], fl))
            g.switches += cores
        else:  # pragma: no cover - the enum is closed
            raise TopologyError(f"topology.shape: unknown {s!r}")
        faults = dict(self.link_faults)
        names = {c.name for c in g.cables}
        for name in faults:
            if name not in names:
                raise TopologyError(f"topology.link_faults: no link named {name!r} (links "
                                    f"are named node-node, e.g. {g.cables[0].name})")
        g.cables = [Cable(c.a, c.b, c.cfg, faults.get(c.name, self.faults)) for c in g.cables]
        g.check()
        return g


def _need(ok: bool, name: str, why: str) -> None:
    if not ok:
        raise TopologyError(f"{name}: {why}")


def host_ip(i: int) -> str:
    return str(ipaddress.IPv4Address("10.0.0.0") + i + 1)


def host_mac(i: int) -> str:
    n = i + 1
    return f"02:00:00:{n >> 16 & 0xFF:02x}:{n >> 8 & 0xFF:02x}:{n & 0xFF:02x}"


def switch_port_mac(s: int, p: int) -> bytes:
    # Locally administered, and outside 02-01..02-0f, which Wireshark names MS-NLB servers.
    return bytes([0x06, 0x00, s >> 8 & 0xFF, s & 0xFF, p >> 8 & 0xFF, p & 0xFF])
