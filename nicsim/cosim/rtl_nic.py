"""An nsnic RTL (hdl_tb/rtl/roce_nic.v, or a design with its ports) as the NIC of a nicsim host.

    host (driver, SimPy) --MMIO--> RtlNic.mmio_write/read --AXI4-Lite--> s_axil_*  (BAR0)
    host memory (PhysMem) <--PCIe timing-- PcieDmaSlave <--AXI4-- m_axi_*          (DMA)
    nicsim Link <--> EthMac <--AXI-Stream--> m_axis_tx_* / s_axis_rx_*             (Ethernet)

The driver reaches the RTL exactly as it reaches the model (nicsim.host.pcie.MmioDevice). It
runs in a thread started with cocotb.task.bridge; each MMIO access crosses into cocotb with
cocotb.task.resume. A write is posted (the AXI4-Lite write starts at the time the PCIe model
delivers it and the CPU goes on); a read waits for the writes before it, returns the AXI4-Lite
read data, and reaches the CPU only after the device's DMA writes issued before it have landed
(PCIe ordering both ways). Time: nicsim.cosim.clock.
"""

from __future__ import annotations

import logging

from cocotb.clock import Clock
from cocotb.task import resume
from cocotb.triggers import ClockCycles
from cocotbext.axi import AxiBus, AxiLiteBus, AxiLiteMaster

from nicsim.cosim.clock import TimeCoupler
from nicsim.cosim.dma import PcieDmaSlave
from nicsim.cosim.mac import EthMac
from nicsim.cosim.peer import link_window_ns
from nicsim.cosim.rates import CLK_NS
from nicsim.fabric.link import LinkConfig
from nicsim.host.memory import PhysMem
from nicsim.host.pcie import MmioDevice, PcieConfig


def window_ns(link: LinkConfig, pcie: PcieConfig) -> float:
    """The coupling window: the shortest latency of anything crossing between SimPy and the
    RTL (see nicsim.cosim.clock): a frame's propagation plus the shortest frame's time on the
    wire up to its last bit, and PCIe's one-way latency."""
    return min(link_window_ns(link), pcie.latency_ns)


# roce_nic's counter outputs (cnt_*), as the RTL keeps them.
RTL_COUNTERS = ("req_pkts", "req_resent", "comp_acks", "comp_naks", "comp_timeouts",
                "comp_resends", "comp_cqes", "rx_fifo_drops", "rx_packets", "rx_drops",
                "resp_requests", "resp_bytes", "resp_acks", "resp_naks", "resp_duplicates",
                "resp_dropped", "resp_atomics")


def rtl_counters(dut) -> dict[str, int]:  # noqa: ANN001
    """The values of roce_nic's counters now."""
    return {k: int(getattr(dut, f"cnt_{k}").value) for k in RTL_COUNTERS}


class RtlNic(MmioDevice):
    """The RTL NIC `dut`, its DMA served from `mem`; `connect` attaches its MAC to a link."""

    def __init__(self, dut, mem: PhysMem, mac: str, *, clk_ns: float = CLK_NS,  # noqa: ANN001
                 link: LinkConfig | None = None, pcie: PcieConfig | None = None,
                 window: float | None = None) -> None:
        self.dut = dut
        self.mac_addr = mac
        self.mem = mem
        self.link_cfg = link or LinkConfig()
        self.pcie_cfg = pcie or PcieConfig()
        self.clk_ns = clk_ns
        self.clock = TimeCoupler(window if window is not None else
                                 window_ns(self.link_cfg, self.pcie_cfg), clk_ns)
        # (not Immediate: an Icarus net assigned from rst can stay X after a time-0 vpiNoDelay
        # put; then roce_rx_parser's tready read X)
        dut.rst.value = 1  # bus models stay idle until reset is released
        if hasattr(dut, "s_axis_rx_tvalid"):
            dut.s_axis_rx_tvalid.value = 0  # (its bus model drives it after reset)
        Clock(dut.clk, clk_ns, unit="ns").start()
        self.axil = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axil"), dut.clk, dut.rst)
        self.dma = PcieDmaSlave(AxiBus.from_prefix(dut, "m_axi"), dut.clk, dut.rst, mem,
                                self.clock, self.pcie_cfg)
        rx = "s_axis_rx" if hasattr(dut, "s_axis_rx_tdata") else None
        self.mac = EthMac(dut, dut.clk, dut.rst, self.clock, "m_axis_tx", rx)
        for log in (self.axil.write_if.log, self.axil.read_if.log):
            log.setLevel(logging.WARNING)
        self._write = resume(self._awrite)
        self._read = resume(self._aread)
        self.mmio = {"writes": 0, "reads": 0}

    async def reset(self, link_up: bool = True) -> None:
        d = self.dut
        d.rst.value = 1
        if hasattr(d, "port_up"):
            d.port_up.value = int(link_up)
            d.port_speed_mbps.value = round(self.link_cfg.rate_gbps * 1000) if link_up else 0
        if hasattr(d, "mac_addr"):
            d.mac_addr.value = int(self.mac_addr.replace(":", ""), 16)
        if hasattr(d, "cq_overrun_valid"):
            d.cq_overrun_valid.value = 0
        for name in ("s_cqe_valid", "mr_req_valid"):
            if hasattr(d, name):
                getattr(d, name).value = 0
        await ClockCycles(d.clk, 4)
        d.rst.value = 0
        await ClockCycles(d.clk, 2)

    # -- MmioDevice (called from the SimPy thread) ------------------------------------------

    def mmio_write(self, offset: int, value: int) -> None:
        self.mmio["writes"] += 1
        self._write(offset, value)

    def mmio_read(self, offset: int) -> int:
        self.mmio["reads"] += 1
        v = self._read(offset)
        # The read's completion does not pass the device's earlier posted writes (PCIe
        # ordering): the CPU has the value once they have all landed (a command's output
        # block is in memory when its status says done).
        env = self.clock.env
        if env is not None and self.dma.last_land > env.now:
            env.advance(self.dma.last_land)
        return v

    async def _awrite(self, offset: int, value: int) -> None:
        await self.clock.catch_up()
        self.axil.init_write(offset, (value & (2**64 - 1)).to_bytes(8, "little"))

    async def _aread(self, offset: int) -> int:
        await self.clock.catch_up()
        await self.axil.write_if.wait()  # a read does not pass the writes before it
        r = await self.axil.read(offset, 8)
        return int.from_bytes(r.data, "little")
