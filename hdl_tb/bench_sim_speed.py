"""cocotb bench for benchmarks/hdl_sim_speed.py: one DUT, the same stimulus on every simulator.

roce_icrc_check receives back-to-back RoCEv2 frames (built by nicsim's FrameBuilder, sink
always ready) while the bench counts clock cycles and wall-clock time; the result goes to the
JSON-lines file named by HDL_BENCH_OUT. Not collected by pytest (no test_ prefix).
"""

from __future__ import annotations

import json
import os
import random
import time

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource

from nicsim.wire import FrameBuilder, Opcode, Path, mac_bytes, reth, roce_udp_sport


@cocotb.test()
async def sim_speed(dut) -> None:
    frames_n = int(os.environ.get("BENCH_FRAMES", "200"))
    cocotb.start_soon(Clock(dut.clk, 4, unit="ns").start())
    source = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis"), dut.clk, dut.rst)
    sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_axis"), dut.clk, dut.rst)
    dut.rst.value = 1
    await ClockCycles(dut.clk, 4)
    dut.rst.value = 0
    await ClockCycles(dut.clk, 4)
    rng = random.Random(1)
    b = FrameBuilder(Path(mac_bytes("02:00:00:00:00:01"), mac_bytes("02:00:00:00:00:02"),
                          bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2]), roce_udp_sport(1, 2)))
    frames = [b.build(Opcode.RC_RDMA_WRITE_ONLY, 17, i, reth(0x1000, 0x100, 1024),
                      rng.randbytes(1024)) for i in range(frames_n)]
    cycles = [0]

    async def count() -> None:
        while True:
            await RisingEdge(dut.clk)
            cycles[0] += 1

    t = time.perf_counter()
    cocotb.start_soon(count())
    for f in frames:
        await source.send(AxiStreamFrame(f))
    for f in frames:
        got = await sink.recv()
        assert bytes(got.tdata) == f
    wall = time.perf_counter() - t
    out = os.environ.get("HDL_BENCH_OUT")
    if out:
        with open(out, "a") as fh:
            fh.write(json.dumps({"simulator": cocotb.SIM_NAME, "cycles": cycles[0],
                                 "wall_s": wall, "frames": frames_n,
                                 "data_width": len(dut.s_axis_tdata)}) + "\n")
