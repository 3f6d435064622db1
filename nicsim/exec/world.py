"""The simulated world of a process under `nicsim exec`, built from its WorldSpec.

Devices are named across the whole world in host order (nsnic0 on the first host, nsnic1 on
the second, ...), as `rdma dev set NAME name NEW` would rename them, and each device's netdev
is named after its place too (eth0, eth1, ...), so `rdma link` and `ip addr` name every one
of them unambiguously. The program is one process that can open any of them
(nicsim.driver.user.process).
"""

from __future__ import annotations

import atexit
import os
from dataclasses import replace
from pathlib import Path

from nicsim.driver.user.process import DeviceEntry, Process, attach, set_factory
from nicsim.exec.spec import Netdev, SpecError, WorldSpec, from_env
from nicsim.fabric.faults import FaultConfig
from nicsim.fabric.link import LinkConfig
from nicsim.fabric.topology import Shape, TopologySpec, host_ip, host_mac
from nicsim.host.host import CpuCosts
from nicsim.hwif import DevFeature, PortState
from nicsim.nic.config import NicConfig
from nicsim.world import World


def _hardware(spec: WorldSpec) -> tuple[NicConfig, LinkConfig, CpuCosts, FaultConfig | None]:
    """The NIC, cable and host CPU of spec.profile and spec.host_profile (as `nicsim run`'s
    --profile and --host-profile build them), or nicsim's defaults; spec.rate_gbps and
    spec.loss over them."""
    nic, link, costs = NicConfig(), LinkConfig(), CpuCosts()
    if spec.profile is not None or spec.host_profile is not None:
        from nicsim.scenario import build as scenario
        from nicsim.scenario.schema import ScenarioError, validate

        # (a scenario carries the profile's merge and checks; its one op is never run)
        try:
            sc = validate({"name": "exec", "pcap": None, "ops": [{"op": "write"}],
                           "profile": spec.profile, "host": {"profile": spec.host_profile}},
                          "profile")
        except ScenarioError as e:  # ("profile: ..." already)
            raise SpecError(str(e).removeprefix("profile: ")) from None
        nic, link = scenario.nic_config(sc), scenario.shaped(sc).host_link
        costs = scenario.cpu_costs(sc)
    if spec.rate_gbps is not None:
        link = replace(link, rate_gbps=spec.rate_gbps)
    faults = FaultConfig(loss=spec.loss, seed=spec.seed) if spec.loss else None
    return nic, link, costs, faults


def build(spec: WorldSpec, pcap: bool = True) -> World:
    """The booted world `spec` describes, devices and netdevs named world-wide, with a pcap
    tap on every host port when spec.pcap names a directory (and `pcap`)."""
    mem = spec.mem_mib << 20
    nic, link, costs, faults = _hardware(spec)
    if spec.hosts == 1:
        w = World(spec.seed)
        w.add_host("a", replace(nic, mac=host_mac(0), ip=host_ip(0)), mem, costs)
        w.boot()
    elif spec.hosts == 2:
        w = World.two_hosts(spec.seed, link, nic=nic, faults=faults, mem_size=mem,
                            costs=costs)
    else:
        w = World.from_topology(TopologySpec(shape=Shape.STAR, hosts=spec.hosts, host_link=link,
                                             faults=faults),
                                spec.seed, nic=nic, mem_size=mem, costs=costs)
    k = 0
    for host in w.hosts.values():
        kernel = host.kernel
        for old in sorted(kernel.devices):  # type: ignore[attr-defined]
            new = f"nsnic{k}"
            kernel.rename_device(old, new)  # type: ignore[attr-defined]
            kernel.devices[new].hw.fn.netdev.name = f"eth{k}"  # type: ignore[attr-defined]
            k += 1
    if pcap and spec.pcap:
        _taps(w, Path(spec.pcap))
    return w


def _taps(w: World, where: Path) -> None:
    from nicsim.fabric.pcap import PcapTap

    where.mkdir(exist_ok=True)  # (not its parents: see nicsim.exec.launch)
    pid = os.getpid()
    for name, nic in w.nics.items():
        path = where / f"nicsim-{pid}-{name}.pcap"
        if f"{name}.eth0" in w.ports:
            w.tap(f"{name}.eth0", path)
        else:  # an unconnected port: only what its NIC loops back
            tap = PcapTap(path)
            nic.port.loop_taps.append(tap)
            w.taps.append(tap)


def devices(w: World) -> list[DeviceEntry]:
    out = []
    for host in w.hosts.values():
        for name in host.kernel.devices:  # type: ignore[attr-defined]
            out.append(DeviceEntry(name, host, int(name.removeprefix("nsnic"))))
    return sorted(out, key=lambda d: d.index)


def netdevs(w: World) -> list[Netdev]:
    out = []
    for d in devices(w):
        hw = d.host.kernel.devices[d.name].hw  # type: ignore[attr-defined]
        nd = hw.fn.netdev
        up = hw.query_port(1).state == PortState.ACTIVE  # the link is up
        v1 = DevFeature.ROCE_V1 in hw.features
        out.append(Netdev(d.name, nd.name, 2 + d.index, nd.mac, nd.ip, nd.mtu, up, v1))
    return out


_world: World | None = None


def process_from_env() -> Process:
    """The process factory nicsim's pyverbs installs: the world of NICSIM_WORLD, closed (its
    captures flushed) when the program exits."""
    global _world
    _world = build(from_env())
    atexit.register(_world.close)
    return Process(devices(_world))


def install() -> None:
    set_factory(process_from_env)


def current_world() -> World | None:
    """The world this process built (None before the first device was looked for)."""
    return _world


def reset() -> None:
    """Forget the process's world (tests)."""
    global _world
    _world = None
    attach(None)
