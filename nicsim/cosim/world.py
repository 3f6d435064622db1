"""A world in which one host's NIC is RTL: host `a` drives the RTL NIC, host `b` the SimPy model.

Everything but host a's NIC is the ordinary nicsim world: hosts, kernels, drivers, the link
between the NICs with its pcap taps and fault injection, the model NIC of host b. Host a's
kernel must boot in the driver thread (its probe is MMIO to the RTL): `boot_rtl_host`.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from nicsim.cosim.rtl_nic import RtlNic
from nicsim.fabric.faults import FaultConfig
from nicsim.fabric.link import Link, LinkConfig
from nicsim.host.host import Host, NetDev
from nicsim.host.pcie import Pcie, PcieConfig
from nicsim.nic.config import NicConfig
from nicsim.world import World

MAC_A, IP_A = "02:00:00:00:00:0a", "10.0.0.1"
MAC_B, IP_B = "02:00:00:00:00:0b", "10.0.0.2"


def cosim_world(dut, *, seed: int = 0, nic: NicConfig | None = None,  # noqa: ANN001
                link: LinkConfig | None = None, faults: FaultConfig | None = None,
                pcie: PcieConfig | None = None, pcap: str | Path | None = None,
                mem_size: int = 64 << 20, clk_ns: float = 4.0,
                window: float | None = None) -> tuple[World, RtlNic]:
    """Hosts a (10.0.0.1, the RTL `dut`) and b (10.0.0.2, the model with `nic`) and a cable
    between them, as World.two_hosts builds them. Host b's kernel is booted; host a's is not
    (boot_rtl_host, from the driver thread). `pcap`: a capture of both directions."""
    link_cfg = link or LinkConfig()
    pcie_cfg = pcie or (nic.pcie if nic is not None else PcieConfig())
    w = World(seed)
    host_a = Host(w.env, "a", mem_size, seed=seed)
    rtl = RtlNic(dut, host_a.mem, MAC_A, clk_ns=clk_ns, link=link_cfg, pcie=pcie_cfg,
                 window=window)
    host_a.plug("0000:01:00.0", rtl, Pcie(w.env, pcie_cfg), NetDev("eth0", MAC_A, IP_A))
    w.hosts["a"] = host_a
    w.add_host("b", replace(nic or NicConfig(), mac=MAC_B, ip=IP_B, pcie=pcie_cfg), mem_size)
    cable = Link(w.env, link_cfg, "a-b", faults)
    rtl.mac.connect(cable)
    w.nics["b"].port.connect(cable)
    w.ports["a.eth0"], w.ports["b.eth0"] = (cable, 0), (cable, 1)
    host_a.neighbours[IP_B] = MAC_B
    w.hosts["b"].neighbours[IP_A] = MAC_A
    if pcap is not None:
        from nicsim.fabric.pcap import PcapTap

        Path(pcap).parent.mkdir(parents=True, exist_ok=True)
        tap = PcapTap(pcap)
        cable.taps.append(tap)
        w.taps.append(tap)
    w.links.append(cable)
    from nicsim.driver.kernel.ib_core import Kernel

    Kernel(w.hosts["b"])
    return w, rtl


def boot_rtl_host(w: World) -> None:
    """Boot host a's kernel (QUERY_DEVICE, INIT_HCA to the RTL): call from the driver thread."""
    from nicsim.driver.kernel.ib_core import Kernel

    Kernel(w.hosts["a"])
