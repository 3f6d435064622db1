"""Co-simulation: nicsim's SimPy world with RTL under cocotb.

- `RtlNic` (rtl_nic): an nsnic RTL NIC as the NIC of a nicsim host: MMIO becomes AXI4-Lite,
  its AXI4 DMA is served from the host's memory with PCIe timing (`PcieDmaSlave`), its
  Ethernet AXI-Stream ports meet a nicsim Link (`EthMac`).
- `ModelPeer` (peer): nicsim as the link partner of any design with Ethernet AXI-Stream ports:
  a simulated host with the model NIC, its driver and verbs, a cable with taps and faults.
- `cosim_world` (world): hosts a (nsnic's RTL, `RtlNic`) and b (a `ModelPeer`).
- `TimeCoupler` (clock): the conservative time-window synchronisation of the two simulators
  (see its module for the scheme and what it guarantees).

Needs cocotb and cocotbext-axi (the hdl test tools); nothing else in nicsim imports this.
"""

from nicsim.cosim.clock import TimeCoupler
from nicsim.cosim.dma import PcieDmaSlave
from nicsim.cosim.mac import EthMac
from nicsim.cosim.peer import ModelPeer, link_window_ns
from nicsim.cosim.rtl_nic import RtlNic, window_ns
from nicsim.cosim.world import boot_rtl_host, cosim_world

__all__ = ["EthMac", "ModelPeer", "PcieDmaSlave", "RtlNic", "TimeCoupler", "boot_rtl_host",
           "cosim_world", "link_window_ns", "window_ns"]
