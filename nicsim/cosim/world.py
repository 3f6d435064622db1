"""A world in which one host's NIC is RTL: host `a` drives the RTL NIC, host `b` the SimPy model.

Everything but host a's NIC is the ordinary nicsim world: hosts, kernels, drivers, the link
between the NICs with its pcap taps and fault injection, the model NIC of host b. Host a's
kernel must boot in the driver thread (its probe is MMIO to the RTL): `boot_rtl_host`.
"""

from __future__ import annotations

from pathlib import Path

from nicsim.cosim.peer import ModelPeer
from nicsim.cosim.rates import CLK_NS, port_rate_gbps
from nicsim.cosim.rtl_nic import RtlNic
from nicsim.fabric.faults import FaultConfig
from nicsim.fabric.link import LinkConfig
from nicsim.host.host import CpuCosts, Host, NetDev
from nicsim.host.pcie import Pcie, PcieConfig
from nicsim.nic.config import NicConfig
from nicsim.world import World

MAC_A, IP_A = "02:00:00:00:00:0a", "10.0.0.1"
MAC_B, IP_B = "02:00:00:00:00:0b", "10.0.0.2"


def cosim_world(dut, *, seed: int = 0, nic: NicConfig | None = None,  # noqa: ANN001
                link: LinkConfig | None = None, faults: FaultConfig | None = None,
                pcie: PcieConfig | None = None, pcap: str | Path | None = None,
                mem_size: int = 64 << 20, clk_ns: float = CLK_NS,
                window: float | None = None, costs: CpuCosts | None = None
                ) -> tuple[World, RtlNic]:
    """Hosts a (10.0.0.1, the RTL `dut`) and b (10.0.0.2, the model with `nic`) and a cable
    between them, as World.two_hosts builds them. Host b's kernel is booted; host a's is not
    (boot_rtl_host, from the driver thread). `pcap`: a capture of both directions; `costs`:
    both hosts' CPU costs (a scenario's `cpu` section). The cable's rate is by default the
    fastest Ethernet rate the design's stream ports carry at `clk_ns` (port_rate_gbps)."""
    link_cfg = link or LinkConfig(rate_gbps=port_rate_gbps(len(dut.m_axis_tx_tdata), clk_ns))
    pcie_cfg = pcie or (nic.pcie if nic is not None else PcieConfig())
    w = World(seed)
    host_a = Host(w.env, "a", mem_size, seed=seed, costs=costs or CpuCosts())
    rtl = RtlNic(dut, host_a.mem, MAC_A, clk_ns=clk_ns, link=link_cfg, pcie=pcie_cfg,
                 window=window)
    host_a.plug("0000:01:00.0", rtl, Pcie(w.env, pcie_cfg), NetDev("eth0", MAC_A, IP_A))
    w.hosts["a"] = host_a
    host_a.neighbours[IP_B] = MAC_B
    # host b, the model, is nicsim's peer for the RTL on the other end of the cable
    ModelPeer(eth=rtl.mac, clock=rtl.clock, world=w, name="b", dut_name="a", mac=MAC_B,
              ip=IP_B, dut_mac=MAC_A, dut_ip=IP_A, nic=nic, pcie=pcie_cfg, link=link_cfg,
              faults=faults, pcap=pcap, mem_size=mem_size, costs=costs)
    return w, rtl


def boot_rtl_host(w: World) -> None:
    """Boot host a's kernel (QUERY_DEVICE, INIT_HCA to the RTL): call from the driver thread."""
    from nicsim.driver.kernel.ib_core import Kernel

    Kernel(w.hosts["a"])
