"""The protocol checkers that every bench runs on its top's ports (hdl_tb/rtl/axis_check.v,
axi4_check.v, axil_check.v, instantiated by the modules through nic_common.vh): each one, as
its own top with FATAL=0, counts no violation on legal traffic (pauses, write data before its
address, read beats of different IDs interleaved) and exactly one for each broken rule."""

from __future__ import annotations

import cocotb
import pytest
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge

from hdl_tb.nic_bench import TOPLEVEL


async def start(dut, idle: dict[str, int]) -> None:  # noqa: ANN001
    """Clock, every input at its `idle` value, reset."""
    Clock(dut.clk, 4, unit="ns").start()
    drive(dut, rst=1, **idle)
    await ClockCycles(dut.clk, 3)
    dut.rst.value = 0
    await RisingEdge(dut.clk)


def drive(dut, **values: int) -> None:  # noqa: ANN001
    for k, v in values.items():
        getattr(dut, k).value = v


async def cycle(dut, **values: int) -> None:  # noqa: ANN001
    """Drive `values` for the next clock edge (the checker samples them there)."""
    drive(dut, **values)
    await RisingEdge(dut.clk)


async def expect(dut, n: int, what: str) -> None:  # noqa: ANN001
    await RisingEdge(dut.clk)
    assert int(dut.errors.value) == n, f"{what}: {int(dut.errors.value)} violations, want {n}"


# -- AXI-Stream ------------------------------------------------------------------------------

AXIS_IDLE = {"tdata": 0, "tkeep": 0, "tvalid": 0, "tready": 1, "tlast": 0, "tuser": 0}


@cocotb.test(skip=TOPLEVEL != "axis_check")
async def test_axis(dut):
    """Legal: a frame with waits, a short last beat. Each of S1, S2, S3 (twice) once."""
    await start(dut, AXIS_IDLE)
    await cycle(dut, tvalid=1, tdata=1, tkeep=0xFF, tready=0)
    await cycle(dut)  # waits, unchanged
    await cycle(dut, tready=1)
    await cycle(dut, tdata=2, tkeep=0x07, tlast=1)
    await cycle(dut, tvalid=0, tlast=0)
    await expect(dut, 0, "legal frame")
    await cycle(dut, tvalid=1, tdata=3, tkeep=0xFF, tready=0)
    await cycle(dut, tvalid=0)  # S1: dropped while waiting
    await expect(dut, 1, "S1")
    await cycle(dut, tvalid=1, tdata=4, tready=0)
    await cycle(dut, tdata=5)  # S2: changed while waiting
    await cycle(dut, tready=1)
    drive(dut, tvalid=0)
    await expect(dut, 2, "S2")
    await cycle(dut, tvalid=1, tkeep=0x7F, tlast=0)  # S3: a hole before the last beat
    await cycle(dut, tvalid=0)
    await expect(dut, 3, "S3 before the last beat")
    await cycle(dut, tvalid=1, tkeep=0x0D, tlast=1)  # S3: a last beat not packed low
    await cycle(dut, tvalid=0, tlast=0)
    await expect(dut, 4, "S3 last beat")


# -- AXI4 -------------------------------------------------------------------------------------

AXI_IDLE = {"awid": 0, "awaddr": 0, "awlen": 0, "awsize": 3, "awburst": 1, "awvalid": 0,
            "awready": 1, "wdata": 0, "wstrb": 0xFF, "wlast": 0, "wvalid": 0, "wready": 1,
            "bid": 0, "bresp": 0, "bvalid": 0, "bready": 1, "arid": 0, "araddr": 0, "arlen": 0,
            "arsize": 3, "arburst": 1, "arvalid": 0, "arready": 1, "rid": 0, "rdata": 0,
            "rresp": 0, "rlast": 0, "rvalid": 0, "rready": 1}


async def write(dut, wid: int, beats: int, data_first: bool = False) -> None:  # noqa: ANN001
    """A legal write burst of `beats` beats, its data before its address if `data_first`."""
    if not data_first:
        await cycle(dut, awvalid=1, awid=wid, awlen=beats - 1)
        drive(dut, awvalid=0)
    for i in range(beats):
        await cycle(dut, wvalid=1, wlast=int(i == beats - 1))
    drive(dut, wvalid=0, wlast=0)
    if data_first:
        await cycle(dut, awvalid=1, awid=wid, awlen=beats - 1)
        drive(dut, awvalid=0)


@cocotb.test(skip=TOPLEVEL != "axi4_check")
async def test_axi4_legal(dut):
    """Writes with their data before, with and after the address, B the cycle after; reads
    of two IDs answered out of order with their beats interleaved; a burst ending exactly
    at a 4 KiB boundary: no violation."""
    await start(dut, AXI_IDLE)
    await write(dut, 1, 2)
    await write(dut, 2, 1, data_first=True)
    await cycle(dut, awvalid=1, awid=3, awlen=0, wvalid=1, wlast=1)  # together
    drive(dut, awvalid=0, wvalid=0, wlast=0)
    for b in (1, 3, 2):  # any order across IDs
        await cycle(dut, bvalid=1, bid=b)
    drive(dut, bvalid=0)
    await cycle(dut, arvalid=1, arid=4, arlen=1, araddr=0x1FF0)  # ends at 0x2000
    await cycle(dut, arid=5, arlen=2, araddr=0x100)
    drive(dut, arvalid=0)
    for rid, last in ((5, 0), (4, 0), (5, 0), (4, 1), (5, 1)):
        await cycle(dut, rvalid=1, rid=rid, rlast=last)
    drive(dut, rvalid=0, rlast=0)
    await expect(dut, 0, "legal traffic")


@cocotb.test(skip=TOPLEVEL != "axi4_check")
async def test_axi4_violations(dut):
    """A3 (4 KiB), A4 (early and missing WLAST), A5 (R for nothing, early RLAST), A6 (B for
    nothing), A1 and A2: one violation each."""
    await start(dut, AXI_IDLE)
    n = 0

    async def broke(what: str) -> None:
        nonlocal n
        n += 1
        await expect(dut, n, what)

    await cycle(dut, arvalid=1, arid=1, arlen=2, araddr=0xFF0)  # 24 bytes over 0x1000
    drive(dut, arvalid=0)
    await broke("A3: 4 KiB")
    for i in range(3):  # (answer it, legally)
        await cycle(dut, rvalid=1, rid=1, rlast=int(i == 2))
    drive(dut, rvalid=0, rlast=0)
    await cycle(dut, awvalid=1, awid=1, awlen=2)
    drive(dut, awvalid=0)
    await cycle(dut, wvalid=1, wlast=1)  # the first of three beats
    drive(dut, wvalid=0, wlast=0)
    await broke("A4: early WLAST")
    await cycle(dut, awvalid=1, awid=2, awlen=0)
    drive(dut, awvalid=0)
    await cycle(dut, wvalid=1, wlast=0)  # its only beat, without WLAST
    drive(dut, wvalid=0)
    await broke("A4: no WLAST")
    await cycle(dut, wvalid=1, wlast=1)  # (end that burst)
    drive(dut, wvalid=0, wlast=0)
    await broke("A4: the burst's late WLAST")
    await cycle(dut, rvalid=1, rid=7, rlast=1)
    drive(dut, rvalid=0, rlast=0)
    await broke("A5: R for nothing")
    await cycle(dut, arvalid=1, arid=2, arlen=1, araddr=0)
    drive(dut, arvalid=0)
    await cycle(dut, rvalid=1, rid=2, rlast=1)
    drive(dut, rvalid=0, rlast=0)
    await broke("A5: early RLAST")
    await cycle(dut, bvalid=1, bid=9)
    drive(dut, bvalid=0)
    await broke("A6: B for nothing")
    await cycle(dut, arvalid=1, arid=3, araddr=0x40, arready=0)
    await cycle(dut, arvalid=0)
    await broke("A1: ARVALID dropped")
    await cycle(dut, arvalid=1, arid=3, araddr=0x40, arready=0)
    await cycle(dut, araddr=0x80)
    await cycle(dut, arready=1)
    drive(dut, arvalid=0)
    await broke("A2: AR changed")


# -- AXI4-Lite --------------------------------------------------------------------------------

AXIL_IDLE = {"awaddr": 0, "awvalid": 0, "awready": 1, "wdata": 0, "wstrb": 0xF, "wvalid": 0,
             "wready": 1, "bresp": 0, "bvalid": 0, "bready": 1, "araddr": 0, "arvalid": 0,
             "arready": 1, "rdata": 0, "rresp": 0, "rvalid": 0, "rready": 1}


@cocotb.test(skip=TOPLEVEL != "axil_check")
async def test_axil(dut):
    """Legal: a write (address and data apart), its B; a read, its R. Then a B with no
    write, an R with no read, AWVALID dropped: one violation each."""
    await start(dut, AXIL_IDLE)
    await cycle(dut, awvalid=1, awaddr=8)
    await cycle(dut, awvalid=0, wvalid=1, wdata=5)
    await cycle(dut, wvalid=0, bvalid=1)
    await cycle(dut, bvalid=0, arvalid=1, araddr=8)
    await cycle(dut, arvalid=0, rvalid=1, rdata=5)
    drive(dut, rvalid=0)
    await expect(dut, 0, "legal accesses")
    await cycle(dut, bvalid=1)
    drive(dut, bvalid=0)
    await expect(dut, 1, "L3: B for nothing")
    await cycle(dut, rvalid=1)
    drive(dut, rvalid=0)
    await expect(dut, 2, "L3: R for nothing")
    await cycle(dut, awvalid=1, awready=0)
    await cycle(dut, awvalid=0)
    await expect(dut, 3, "L1: AWVALID dropped")


@pytest.mark.parametrize("top", ["axis_check", "axi4_check", "axil_check"])
def test_protocol_checker(top: str) -> None:
    from hdl_tb.cocotb_run import run

    run(top, [], "test_protocol_checks", {"FATAL": 0})
