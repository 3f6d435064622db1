"""The one place a scenario becomes a World.

Everything else in the runner addresses hosts by name (`world.hosts[name]`) and asks this
module about the network (which hosts there are, each host's link rate, the path between two
hosts for the ideal flow completion time). The world's shape is the scenario's `topology`
(nicsim.fabric.topology): two hosts `a` and `b` on one cable by default, or a star,
leaf-spine or fat tree of switches (`switch`), with congestion control in the NICs (`cc`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

from nicsim.fabric.faults import FaultConfig
from nicsim.fabric.link import LinkConfig
from nicsim.fabric.pfc import PfcStorm, PfcWatchdog
from nicsim.fabric.switch import (
    Classify,
    PfcConfig,
    PortSpec,
    RedConfig,
    Scheduler,
    SwitchConfig,
    check_switch_config,
)
from nicsim.fabric.topology import Graph, Shape, TopologyError
from nicsim.fabric.topology import TopologySpec as Shaped
from nicsim.host.host import CpuCosts
from nicsim.host.pcie import PcieConfig
from nicsim.nic.cc import ALGORITHMS, CcAlgorithm, Signal, cc_from_dict
from nicsim.nic.config import NicConfig
from nicsim.scenario.schema import FaultSpec, LinkSpec, Scenario, ScenarioError, WatchdogSpec
from nicsim.trace.timeseries import Probe
from nicsim.world import World


def _faults(f: FaultSpec, seed: int) -> FaultConfig:
    return FaultConfig(f.loss, f.corrupt, f.duplicate, f.reorder, f.reorder_ns, seed)


def _link(spec: LinkSpec) -> LinkConfig:
    return LinkConfig(spec.rate_gbps, spec.prop_ns)


def shaped(sc: Scenario) -> Shaped:
    """The scenario's topology as nicsim.fabric.topology describes it."""
    t = sc.topology
    fabric = t.fabric_link or sc.link
    return Shaped(Shape(t.shape), t.hosts, t.leaves, t.spines, t.hosts_per_leaf, t.k,
                  _link(sc.link), _link(fabric),
                  _faults(sc.link.faults, sc.seed) if sc.link.faults != FaultSpec() else None,
                  tuple((name, _faults(f, sc.seed)) for name, f in t.link_faults.items()))


@cache
def _graph(spec: Shaped) -> Graph:
    return spec.graph()


def graph(sc: Scenario) -> Graph:
    try:
        return _graph(shaped(sc))
    except TopologyError as e:
        raise ScenarioError(str(e)) from None


def host_names(sc: Scenario) -> list[str]:
    """The hosts of the scenario's world, in order (traffic defaults: the first sends to the
    second)."""
    return list(graph(sc).hosts)


def switch_config(sc: Scenario) -> SwitchConfig:
    s = sc.switch
    p = s.pfc
    red = None if s.red is None else RedConfig(s.red.kmin_bytes, s.red.kmax_bytes, s.red.pmax)
    try:
        return SwitchConfig(
            buffer_bytes=s.buffer_bytes, alpha=s.alpha, mtu_bytes=s.mtu_bytes,
            fwd_latency_ns=s.fwd_latency_ns, classify=Classify(s.classify),
            scheduler=Scheduler(s.scheduler), dwrr_weights=tuple(s.dwrr_weights),
            red=(red,) * 8,
            pfc=PfcConfig(p.enabled, tuple(p.classes), p.xoff_bytes, p.alpha,
                          p.xon_offset_bytes, p.headroom_bytes, p.response_ns,
                          watchdog(p.watchdog)),
            int_telemetry=uses_int(sc) if s.int_telemetry is None else s.int_telemetry)
    except ValueError as e:
        raise ScenarioError(f"switch.{e}") from None


def uses_int(sc: Scenario) -> bool:
    """Whether the scenario's congestion control reads INT (switches then add it)."""
    cc = cc_from_dict(sc.cc)
    rc = cc.impl if cc.algorithm is CcAlgorithm.CUSTOM else ALGORITHMS.get(cc.algorithm)
    return rc is not None and bool(rc.signals & Signal.INT)


def check(sc: Scenario) -> None:
    """Everything about the network that can be wrong, before anything is built: the shape,
    the switch settings, and each switch's buffer against the PFC headroom its ports need."""
    g = graph(sc)
    if not g.switches:
        if sc.topology.taps is not None:
            raise ScenarioError("topology.taps: back_to_back has one capture of its cable "
                                "(`pcap`); taps name the ports of a fabric")
        return
    cfg = switch_config(sc)
    nb = g.neighbours()
    ports = {f"{h}.eth0" for h in g.hosts} | {f"{s}.p{i}" for s in g.switches
                                              for i in range(len(nb[s]))}
    for i, port in enumerate(sc.topology.taps or ()):
        if port not in ports:
            raise ScenarioError(f"topology.taps[{i}]: no port {port!r} (ports are named "
                                f"host.eth0 or switch.pN, e.g. {g.hosts[0]}.eth0, "
                                f"{g.switches[0]}.p0)")
    for s in g.switches:
        ports = [PortSpec(g.cables[ci].cfg.rate_gbps, g.cables[ci].cfg.prop_ns)
                 for _, ci in nb[s]]
        try:
            check_switch_config(cfg, ports)
        except ValueError as e:
            raise ScenarioError(f"switch.{e} (switch {s})") from None


def watchdog(w: WatchdogSpec) -> PfcWatchdog:
    return PfcWatchdog(w.enabled, w.detect_ms * 1e6, w.restore_ms * 1e6)


def nic_config(sc: Scenario) -> NicConfig:
    return NicConfig(pcie=PcieConfig(**sc.pcie.model_dump()), cc=cc_from_dict(sc.cc),
                     pfc_watchdog=watchdog(sc.nic.pfc_watchdog), **sc.nic.config())


def start_pfc_storms(sc: Scenario, w: World, t0: float) -> list[PfcStorm]:
    """The scenario's PFC storms (`pfc_storms`), timed from the traffic's start `t0`."""
    out = []
    for st in sc.pfc_storms:
        nic = w.nics[st.host]
        out.append(PfcStorm(w.env, nic.port.send_control, nic.mac, tuple(st.priorities),
                            nic.port.rate_gbps, t0 + st.start_us * 1000.0,
                            None if st.stop_us is None else t0 + st.stop_us * 1000.0))
    return out


def cpu_costs(sc: Scenario) -> CpuCosts:
    """The hosts' CPU time for verbs calls (the scenario's `cpu`, or its profile's)."""
    c = sc.cpu
    return CpuCosts(post_send=c.post_send_ns, post_recv=c.post_recv_ns,
                    poll_empty=c.poll_empty_ns, poll_cqe=c.poll_cqe_ns, syscall=c.syscall_ns,
                    mmio_write=c.mmio_write_ns, odp_fault=c.odp_fault_ns,
                    odp_page=c.odp_page_ns, spread=c.spread)


def tap_path(pcap: str, port: str) -> str:
    """The capture of one port of a fabric: the scenario's pcap path with the port's name
    before the extension (traces/incast.pcap -> traces/incast.h0.eth0.pcap)."""
    p = Path(pcap)
    return str(p.with_name(f"{p.stem}.{port}{p.suffix or '.pcap'}"))


def build_world(sc: Scenario, pcap: str | None, mem_size: int) -> World:
    """The world the scenario runs in, kernels booted; `pcap` captures its link (two hosts)
    or names the per-port captures of a fabric (`tap_path`)."""
    spec = shaped(sc)
    if spec.shape is Shape.BACK_TO_BACK:
        return World.from_topology(spec, sc.seed, nic_config(sc), mem_size=mem_size, pcap=pcap,
                                   costs=cpu_costs(sc))
    sw = switch_config(sc)
    try:
        w = World.from_topology(spec, sc.seed, nic_config(sc), sw, mem_size,
                                costs=cpu_costs(sc))
    except (TopologyError, ValueError) as e:
        raise ScenarioError(str(e)) from None
    if pcap is not None:
        taps = sc.topology.taps
        for port in [f"{h}.eth0" for h in w.hosts] if taps is None else taps:
            w.tap(port, tap_path(pcap, port))  # (names checked by `check`)
    w.probes = _probes(w)  # type: ignore[attr-defined]
    return w


def _probes(w: World) -> list[Probe]:
    """Time series of the fabric: each switch port's queued bytes, the time each port spent
    paused, and every rate-limited QP's rate (congestion control)."""
    switches = w.switches

    def depth() -> dict[str, float]:
        return {f"{n}.p{p.idx}": float(sum(p.depth)) for n, sw in switches.items()
                for p in sw.ports}

    def paused() -> dict[str, float]:
        out: dict[str, float] = {}
        for n, sw in switches.items():
            c = sw.counters()
            for p in sw.ports:
                out[f"{n}.p{p.idx}"] = float(sum(c[f"p{p.idx}.q{k}.paused_ns"]
                                                 for k in range(8)))
        for h, nic in w.nics.items():
            out[f"{h}.eth0"] = float(sum(nic.port.paused_ns()))
        return out

    def rates() -> dict[str, float]:
        return {f"{h}#{qpn}": (qp.rate if qp.rate is not None else nic.port.rate_gbps)
                for h, nic in w.nics.items() if nic.cc is not None
                for qpn, qp in nic.qps.items() if qp.ccs is not None or qp.rate is not None}

    return [
        Probe("switch_queue", "port", "depth_bytes", depth, "level", 1.0,
              "Bytes queued at each switch port (all classes)"),
        Probe("pause", "port", "paused_fraction", paused, "rate", 1e-9,
              "Share of time each port was paused by PFC"),
        Probe("cc_rate", "qp", "rate_gbps", rates, "level", 1.0,
              "Rate of each rate-limited QP (congestion control)"),
    ]


@dataclass(frozen=True)
class Hop:
    """One link of a path: its rate and propagation delay, and the forwarding latency of the
    switch at its far end (0 for the last hop, into the NIC)."""

    rate_gbps: float
    prop_ns: float
    switch_ns: float = 0.0


def path(sc: Scenario, src: str, dst: str) -> list[Hop]:
    """The links a frame from `src` to `dst` crosses, in order (one shortest path: ECMP's
    choices are all as long)."""
    g = graph(sc)
    if not g.switches:
        return [Hop(sc.link.rate_gbps, sc.link.prop_ns)]
    dist = g.distances(dst)
    nb = g.neighbours()
    fwd = sc.switch.fwd_latency_ns
    hops: list[Hop] = []
    node = src
    while node != dst:
        nxt, ci = min(((n, c) for n, c in nb[node] if n in dist and (n == dst or n in
                                                                      g.switches)),
                      key=lambda x: dist[x[0]])
        cfg = g.cables[ci].cfg
        hops.append(Hop(cfg.rate_gbps, cfg.prop_ns, 0.0 if nxt == dst else fwd))
        node = nxt
    return hops


def host_rate_gbps(sc: Scenario, host: str) -> float:
    """The rate of a host's own link (what flow `load` is a fraction of)."""
    return sc.link.rate_gbps
