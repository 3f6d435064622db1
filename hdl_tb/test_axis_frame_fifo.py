"""cocotb testbench for axis_frame_fifo, the frame FIFOs between roce_nic and its MAC.

Transmit mode (DROP_WHEN_FULL=0): frames go in with random idles inside them and come out
whole, in order, each one's beats back to back (a CMAC would abort a frame with a tvalid gap:
the sink here fails the test on one), with random backpressure at the output; a frame longer
than the FIFO is dropped and counted instead of locking it up.

Receive mode (DROP_WHEN_FULL=1): the source drives beats without looking at tready, as a MAC
does (a beat offered while tready is low would be lost: the test fails on one); while the
output is stalled, frames that find no room are dropped whole and counted, and every frame
that comes out is one of those sent, byte for byte, in order.
"""

from __future__ import annotations

import os
import random

import cocotb
import pytest
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge, with_timeout

from hdl_tb.cocotb_run import run

TOPLEVEL = "axis_frame_fifo"
SEED = int(os.environ.get("NICSIM_SEED", "7"))


def beats(frame: bytes, width: int) -> list[tuple[int, int, bool]]:
    """(tdata, tkeep, tlast) of each beat of `frame`, packed."""
    nb = width // 8
    out = []
    for i in range(0, len(frame), nb):
        chunk = frame[i:i + nb]
        out.append((int.from_bytes(chunk, "little"), (1 << len(chunk)) - 1,
                    i + nb >= len(frame)))
    return out


class Bench:
    def __init__(self, dut) -> None:  # noqa: ANN001
        self.dut = dut
        self.width = len(dut.s_axis_tdata)
        self.depth = int(dut.DEPTH.value)
        self.got: list[bytes] = []
        self.gaps = 0  # output beats missing inside a frame (tvalid low after its first beat)
        self.lost = 0  # input beats offered while tready was low (receive mode)
        cocotb.start_soon(Clock(dut.clk, 4, unit="ns").start())

    async def reset(self) -> None:
        d = self.dut
        d.rst.value = 1
        d.s_axis_tvalid.value = 0
        d.s_axis_tlast.value = 0
        d.s_axis_tuser.value = 0
        d.s_axis_tdata.value = 0
        d.s_axis_tkeep.value = 0
        d.m_axis_tready.value = 0
        await ClockCycles(d.clk, 3)
        d.rst.value = 0
        await RisingEdge(d.clk)

    async def send(self, frames: list[bytes], rng: random.Random, idle: float,
                   blind: bool) -> None:
        """Drive `frames`; `idle`: chance of a cycle without a beat (inside frames too);
        `blind`: do not wait for tready (a MAC's receive side)."""
        d = self.dut
        for frame in frames:
            for data, keep, last in beats(frame, self.width):
                while rng.random() < idle:
                    d.s_axis_tvalid.value = 0
                    await RisingEdge(d.clk)
                d.s_axis_tvalid.value = 1
                d.s_axis_tdata.value = data
                d.s_axis_tkeep.value = keep
                d.s_axis_tlast.value = int(last)
                while True:
                    await ReadOnly()
                    ready = int(d.s_axis_tready.value)
                    await RisingEdge(d.clk)
                    if ready:
                        break
                    if blind:
                        self.lost += 1
                        break
            d.s_axis_tvalid.value = 0
        d.s_axis_tvalid.value = 0

    async def receive(self, rng: random.Random, stall: float, stop_after: int) -> None:
        """Take frames with random backpressure (`stall`: chance tready is low in a cycle)
        until `stop_after` frames are in; count tvalid gaps inside frames."""
        d = self.dut
        cur = bytearray()
        while len(self.got) < stop_after:
            d.m_axis_tready.value = int(rng.random() >= stall)
            await ReadOnly()
            valid, ready = int(d.m_axis_tvalid.value), int(d.m_axis_tready.value)
            if cur and not valid:
                self.gaps += 1
            if valid and ready:
                keep = int(d.m_axis_tkeep.value)
                n = bin(keep).count("1")
                cur += int(d.m_axis_tdata.value).to_bytes(self.width // 8, "little")[:n]
                if int(d.m_axis_tlast.value):
                    self.got.append(bytes(cur))
                    cur = bytearray()
            await RisingEdge(d.clk)


def random_frames(rng: random.Random, n: int, longest: int) -> list[bytes]:
    return [rng.randbytes(rng.randint(1, longest)) for _ in range(n)]


@cocotb.test()
async def transmit_frames_leave_whole_and_back_to_back(dut) -> None:  # noqa: ANN001
    if int(dut.DROP_WHEN_FULL.value):
        return
    b = Bench(dut)
    await b.reset()
    rng = random.Random(SEED)
    nb = b.width // 8
    frames = random_frames(rng, 60, b.depth * nb)
    frames.insert(7, rng.randbytes(b.depth * nb + 5))  # one beat too long: dropped
    sent = cocotb.start_soon(b.send(frames, rng, idle=0.3, blind=False))
    await with_timeout(b.receive(rng, stall=0.2, stop_after=len(frames) - 1), 2, "ms")
    await with_timeout(sent, 100, "us")
    assert b.gaps == 0, f"{b.gaps} tvalid gaps inside frames (a MAC would abort them)"
    assert b.got == frames[:7] + frames[8:]
    assert int(dut.drops.value) == 1


@cocotb.test()
async def receive_drops_whole_frames_that_find_no_room(dut) -> None:  # noqa: ANN001
    if not int(dut.DROP_WHEN_FULL.value):
        return
    b = Bench(dut)
    await b.reset()
    rng = random.Random(SEED)
    nb = b.width // 8
    frames = random_frames(rng, 80, b.depth * nb // 3)
    # The reader takes nothing for a while, then takes everything with some backpressure.
    await with_timeout(b.send(frames[:40], rng, idle=0.0, blind=True), 2, "ms")
    dropped = int(dut.drops.value)
    assert dropped > 0, "the FIFO never filled: the test does not test overflow"
    reader = cocotb.start_soon(b.receive(rng, stall=0.5, stop_after=len(frames)))
    await with_timeout(b.send(frames[40:], rng, idle=0.1, blind=True), 2, "ms")
    await ClockCycles(dut.clk, b.depth * 4)
    reader.cancel()
    assert b.lost == 0, f"{b.lost} beats offered while tready was low"
    assert b.gaps == 0
    # What came out is what went in, in order, minus whole frames (and the count says how many)
    it = iter(frames)
    assert all(any(g == f for f in it) for g in b.got), "a frame came out that was not sent whole"
    assert len(b.got) + int(dut.drops.value) == len(frames)
    assert int(dut.drops.value) >= dropped


@pytest.mark.parametrize("width", [64, 512])
@pytest.mark.parametrize("drop", [0, 1])
def test_axis_frame_fifo(width: int, drop: int) -> None:
    depth = 64 if width == 64 else 16
    run(TOPLEVEL, ["axis_frame_fifo.v"], "test_axis_frame_fifo",
        {"DATA_WIDTH": width, "DEPTH": depth, "DROP_WHEN_FULL": drop})
