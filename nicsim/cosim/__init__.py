"""Co-simulation: nicsim's SimPy world with RTL under cocotb.

- `RtlNic` (rtl_nic): an nsnic RTL NIC as the NIC of a nicsim host: MMIO becomes AXI4-Lite,
  its AXI4 DMA is served from the host's memory with PCIe timing (`PcieDmaSlave`), its
  Ethernet AXI-Stream ports meet a nicsim Link (`EthMac`).
- `ModelPeer` (peer): nicsim as the link partner of any design with Ethernet AXI-Stream ports:
  a simulated host with the model NIC, its driver and verbs, a cable with taps and faults.
- `ProtocolViolation`, `StrictChecker` (strict): ModelPeer(strict=True)'s scoreboard, the
  model NIC's own receive decisions raised as a failing assertion, with a per-QP log.
- `cosim_world` (world): hosts a (nsnic's RTL, `RtlNic`) and b (a `ModelPeer`).
- `TimeCoupler` (clock): the conservative time-window synchronisation of the two simulators
  (see its module for the scheme and what it guarantees).
- `build`: the RTL's files and the NIC's source lists, the simulators, one build-and-run
  (the cocotb side of `nicsim run --rtl` is nicsim.apps.rtl_scenario).

All but `build` and `strict` need cocotb and cocotbext-axi (the hdl extra); they load when
first used.
"""

from importlib import import_module
from typing import Any

# Names -> their modules, imported when first used: those modules need cocotb (the hdl extra),
# and nicsim.cosim.build (the RTL's files, the simulators) must load without it.
_LAZY = {"TimeCoupler": "clock", "PcieDmaSlave": "dma", "EthMac": "mac", "ModelPeer": "peer",
         "link_window_ns": "peer", "RtlNic": "rtl_nic", "window_ns": "rtl_nic",
         "boot_rtl_host": "world", "cosim_world": "world", "ProtocolViolation": "strict",
         "StrictChecker": "strict"}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'nicsim.cosim' has no attribute {name!r}")
    return getattr(import_module(f"nicsim.cosim.{_LAZY[name]}"), name)


__all__ = sorted(_LAZY)
