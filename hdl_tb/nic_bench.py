"""The harness of the benches that run nicsim's unchanged kernel driver and verbs library
against hdl_tb/rtl/roce_nic.v: `NicTB` (clock, reset, bus models, time coupling) and the
devices it gives a nicsim host (`RtlBar`, `PhysMemTarget`).

How the driver reaches the RTL:

- The driver is synchronous Python that talks to a `nicsim.host.pcie.MmioDevice` plugged into a
  `nicsim.host.host.Host`. `RtlBar` is such a device: each `mmio_write`/`mmio_read` is a
  `cocotb.task.resume`-wrapped coroutine that performs one 64-bit AXI4-Lite transaction on the
  RTL's BAR0 (cocotbext-axi AxiLiteMaster). The driver runs in a thread started with
  `cocotb.task.bridge`: while it runs, the simulator is stopped; when it makes an MMIO access it
  blocks and the simulator runs the transaction, then hands control back (one thread runs at a
  time, so the driver, the bus models and host memory never race).
- The RTL's DMA master is served by cocotbext-axi's AxiSlave with a target that reads and writes
  the host's `PhysMem` (the same numpy memory the driver allocates rings and pins pages in),
  with random pauses on every AXI channel.
- Time: the RTL follows the host's SimPy clock. A SimPy process in the RTL host's environment
  wakes every QUANTUM_NS of simulated time and runs the RTL until its time (since the driver
  started) has caught up with SimPy's; each MMIO access catches up first as well. So whatever
  the driver spends (a 500 ns CMD_STATUS poll, a syscall, an empty CQ poll waiting for a CQE)
  lets about that much RTL time pass. The RTL is never more than a quantum behind; it runs
  ahead by the length of an AXI-Lite transaction (the MMIO's own time on the RTL side, not the
  PCIe latency the model charges). RTL DMA writes land in PhysMem at the current SimPy time via
  PhysMem.post, so a CPU waiting on a CQ ring (Host.poll_wait) is woken as by the model NIC;
  RTL DMA reads see memory as of the current SimPy time. SimPy waits for nothing on the RTL
  side: what a full co-simulation with the model's PCIe timing still needs is in the report.
"""

from __future__ import annotations

import json
import logging
import os
import random

import cocotb
import simpy
from cocotb.clock import Clock
from cocotb.simtime import get_sim_time
from cocotb.task import resume
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge
from cocotbext.axi import (
    AxiBus,
    AxiLiteBus,
    AxiLiteMaster,
    AxiSlave,
    AxiStreamBus,
    AxiStreamSink,
)

from hdl_tb.streams import (
    CqeInBus,
    CqeInSource,
    CqeInTransaction,
    MrReqBus,
    MrReqSource,
    MrReqTransaction,
    MrRspBus,
    MrRspSink,
    WqeBus,
    WqeMonitor,
)
from nicsim import hwif
from nicsim.cosim.build import PARAMS_ENV

# the toplevel being simulated, read on import: the benches' @cocotb.test(skip=...) need it
TOPLEVEL = os.environ.get("COCOTB_TOPLEVEL", "")
CLK_NS = 4
QUANTUM_NS = 1000.0  # the RTL catches up with SimPy time at least this often
CATCHUP_MAX = 50_000  # RTL cycles run per catch-up at most (a guard against runaway waits)
MEM_SIZE = 64 << 20
SEED = 3
MAC = "02:00:00:00:00:0a"
IP = "10.0.0.1"
PEER_IP = "10.0.0.2"
PEER_MAC = "02:00:00:00:00:0b"


def pauses(rng: random.Random, p: float, hold: list[bool] | None = None):
    """True (pause) with probability p each cycle, and always while hold[0] is set."""
    while True:
        yield (hold is not None and hold[0]) or rng.random() < p


def default_params() -> dict[str, int]:
    return json.loads(os.environ.get(PARAMS_ENV, "{}"))


class PhysMemTarget:
    """cocotbext-axi slave target over nicsim's PhysMem: what the RTL's DMA reaches is the
    driver's host memory. A write is a device write landing now in SimPy time (PhysMem.post:
    it wakes CPUs waiting on that memory). Accesses outside memory fail (SLVERR)."""

    def __init__(self, mem) -> None:  # noqa: ANN001
        self.mem = mem
        self.writes = 0

    def _check(self, address: int, n: int) -> None:
        if address < 0 or address + n > self.mem.size:
            raise ValueError(f"DMA outside host memory: {address:#x}+{n}")

    async def read(self, address: int, length: int) -> bytes:
        self._check(address, length)
        return self.mem.read(address, length)

    async def write(self, address: int, data: bytes) -> None:
        self._check(address, len(data))
        mem = self.mem
        mem.post(mem.env.now if mem.env is not None else 0.0, [(address, bytes(data))])
        self.writes += 1


class RtlBar:
    """The RTL's BAR0 as a nicsim MmioDevice: one AXI4-Lite transaction per access, run from
    the driver's bridge thread through cocotb.task.resume."""

    def __init__(self, tb: NicTB) -> None:
        self.tb = tb
        self._write = resume(self._awrite)
        self._read = resume(self._aread)

    def mmio_write(self, offset: int, value: int) -> None:
        self._write(offset, value)

    def mmio_read(self, offset: int) -> int:
        return self._read(offset)

    async def _awrite(self, offset: int, value: int) -> None:
        await self.tb.catch_up()
        await self.tb.axil.write(offset, (value & (2**64 - 1)).to_bytes(8, "little"))

    async def _aread(self, offset: int) -> int:
        await self.tb.catch_up()
        r = await self.tb.axil.read(offset, 8)
        return int.from_bytes(r.data, "little")


class NicTB:
    def __init__(self, dut, seed: int) -> None:
        self.dut = dut
        self.rng = random.Random(seed)
        self.params = default_params()
        self.width = len(dut.m_axi_wdata)
        # The bus models stay idle until reset is released. (Not Immediate: an Icarus net
        # assigned from rst can stay X after a time-0 vpiNoDelay put, as roce_rx_parser's
        # tready did, which the protocol checkers stop at.)
        dut.rst.value = 1
        dut.s_axis_rx_tvalid.value = 0
        Clock(dut.clk, CLK_NS, unit="ns").start()
        self.axil = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axil"), dut.clk, dut.rst)
        self.hold_b = [False]
        self.mem = None
        self.slave: AxiSlave | None = None
        # the WQEs wqe_fetch hands to the requester (a monitor inside the NIC)
        self.wqes = WqeMonitor(WqeBus.from_prefix(dut.u_wqe, "m_wqe"), dut.clk, dut.rst)
        # the Ethernet frames the NIC sends
        self.tx = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_axis_tx"), dut.clk, dut.rst)
        self.cqe_src = CqeInSource(CqeInBus.from_prefix(dut, "s_cqe"), dut.clk, dut.rst)
        self.mr_req = MrReqSource(MrReqBus.from_prefix(dut, "mr_req"), dut.clk, dut.rst)
        self.mr_rsp = MrRspSink(MrRspBus.from_prefix(dut, "mr_rsp"), dut.clk, dut.rst)
        self.db_events: list[tuple[int, int, int]] = []  # (rq, qpn, pi)
        self.arm_events: list[tuple[int, int]] = []  # (cqn, solicited)
        self.env: simpy.Environment | None = None
        self.t_sim0 = 0.0
        self.t_rtl0 = 0.0
        self.max_lag_ns = 0.0
        for log in (self.axil.write_if.log, self.axil.read_if.log):
            log.setLevel(logging.WARNING)
        for m in (self.wqes, self.cqe_src, self.mr_req, self.mr_rsp, self.tx):
            m.log.setLevel(logging.WARNING)

    def attach_memory(self, mem) -> None:  # noqa: ANN001
        """Serve the RTL's DMA from `mem` with random AXI latency and backpressure."""
        dut, rng = self.dut, self.rng
        self.mem = mem
        self.slave = AxiSlave(AxiBus.from_prefix(dut, "m_axi"), dut.clk, dut.rst,
                              target=PhysMemTarget(mem))
        w, r = self.slave.write_if, self.slave.read_if
        for log in (w.log, r.log):
            log.setLevel(logging.WARNING)
        r.ar_channel.set_pause_generator(pauses(rng, 0.2))
        r.r_channel.set_pause_generator(pauses(rng, 0.2))
        w.aw_channel.set_pause_generator(pauses(rng, 0.2))
        w.w_channel.set_pause_generator(pauses(rng, 0.2))
        w.b_channel.set_pause_generator(pauses(rng, 0.2, self.hold_b))
        self.axil.write_if.aw_channel.set_pause_generator(pauses(rng, 0.2))
        self.axil.write_if.w_channel.set_pause_generator(pauses(rng, 0.2))
        self.axil.write_if.b_channel.set_pause_generator(pauses(rng, 0.2))
        self.axil.read_if.ar_channel.set_pause_generator(pauses(rng, 0.2))
        self.axil.read_if.r_channel.set_pause_generator(pauses(rng, 0.2))
        self.tx.set_pause_generator(pauses(rng, 0.3))
        self.mr_rsp.set_pause_generator(pauses(rng, 0.3))

    async def reset(self) -> None:
        d = self.dut
        d.rst.value = 1
        d.cq_overrun_valid.value = 0
        d.port_up.value = 0  # the model hosts of these benches have no link either
        d.port_speed_mbps.value = 0
        d.s_axis_rx_tvalid.value = 0
        d.mac_addr.value = int(MAC.replace(":", ""), 16)
        d.cq_overrun_cqn.value = 0
        await ClockCycles(d.clk, 4)
        d.rst.value = 0
        # mr_translate clears its MPT after reset (MPT_DEPTH cycles); commands wait for it
        await ClockCycles(d.clk, 2)
        cocotb.start_soon(self._watch_db())
        cocotb.start_soon(self._watch_arm())

    async def _watch_db(self) -> None:
        d = self.dut
        while True:
            await RisingEdge(d.db_valid)
            await ReadOnly()
            self.db_events.append((int(d.db_rq.value), int(d.db_qpn.value), int(d.db_pi.value)))

    async def _watch_arm(self) -> None:
        d = self.dut
        while True:
            await RisingEdge(d.arm_valid)
            await ReadOnly()
            self.arm_events.append((int(d.arm_cqn.value), int(d.arm_solicited.value)))

    # -- time coupling ---------------------------------------------------------------------

    def couple(self, env: simpy.Environment) -> None:
        """From now on the RTL follows `env`'s time (see the module docstring). Call before
        the driver thread starts; `env` must be stepped only by that thread."""
        self.env = env
        self.t_sim0 = env.now
        self.t_rtl0 = get_sim_time("ns")
        sync = resume(self.catch_up)

        def ticker():  # noqa: ANN202 - a SimPy process
            while True:
                yield env.timeout(QUANTUM_NS)
                sync()

        env.process(ticker())

    async def catch_up(self) -> None:
        """Run the RTL until its time since anchor() reaches the SimPy time since anchor()."""
        if self.env is None:
            return
        lag = (self.env.now - self.t_sim0) - (get_sim_time("ns") - self.t_rtl0)
        self.max_lag_ns = max(self.max_lag_ns, lag)
        cycles = min(int(lag // CLK_NS), CATCHUP_MAX)
        if cycles > 0:
            await ClockCycles(self.dut.clk, cycles)

    # -- RTL-side helpers the driver thread calls ------------------------------------------

    async def _counters(self) -> dict[str, int]:
        await ClockCycles(self.dut.clk, 8)  # doorbell events leave 2 cycles after the B
        d = self.dut
        return {k: int(getattr(d, f"cnt_{k}").value)
                for k in ("db_sq", "db_rq", "arm", "db_drop", "cmds", "cmd_errors")}

    async def _push_cqe(self, cqn: int, cqe: hwif.Cqe) -> None:
        await self.cqe_src.send(CqeInTransaction(
            cqn=cqn, qpn=cqe.qpn, wqe_index=cqe.wqe_index, opcode=cqe.opcode,
            status=cqe.status, byte_len=cqe.byte_len, imm_inv=cqe.imm_inv, src_qp=cqe.src_qp,
            flags=cqe.flags, vendor_err=cqe.vendor_err))
        await self.cqe_src.wait()

    async def _next_wqe(self, timeout_cycles: int = 5000):
        for _ in range(timeout_cycles):
            if not self.wqes.empty():
                return self.wqes.recv_nowait()
            await RisingEdge(self.dut.clk)
        return None

    async def _cycles(self, n: int) -> None:
        await ClockCycles(self.dut.clk, n)

    async def _xlate(self, key: int, pd: int, access: int, va: int,
                     length: int) -> tuple[int, list[tuple[int, int]]]:
        """One lookup through mr_translate's request port: (status, per-page segments)."""
        await self.mr_req.send(MrReqTransaction(key=key, pd=pd, access=access, va=va,
                                                len=length, tag=0x5a))
        segs = []
        while True:
            r = await self.mr_rsp.recv()
            assert int(r.tag) == 0x5a
            if int(r.len):
                segs.append((int(r.pa), int(r.len)))
            if int(r.last):
                return int(r.status), segs
