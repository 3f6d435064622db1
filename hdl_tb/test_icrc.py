"""cocotb testbench for roce_icrc_insert and roce_icrc_check (RoCEv2 ICRC append / verify).

Expected values come from nicsim.wire: frames from FrameBuilder.build (which appends the ICRC),
ICRC verdicts from compute_icrc, field offsets from parse; scapy's RoCE layer recomputes the
ICRC of a few output frames as an independent oracle. Input streams use random sparse tkeep
patterns (null bytes, whole null beats, null last beats), random source idles and sink
backpressure; outputs must be packed. A back-to-back test checks one beat per cycle with no
bubble between frames and, when HDL_BENCH_OUT is set, appends its figures there as JSON lines.
"""

from __future__ import annotations

import json
import logging
import os
import random
from dataclasses import dataclass

import cocotb
import pytest
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource

from hdl_tb.cocotb_run import run
from hdl_tb.gen_crc32_matrix import render as render_crc32_matrix
from nicsim.cosim.dma import pauses
from nicsim.wire import (
    EXT_FIELDS,
    OPCODES,
    Ecn,
    Ext,
    FrameBuilder,
    Opcode,
    Path,
    compute_icrc,
    pack_ext,
    parse,
    roce_udp_sport,
)
from nicsim.wire.packet import ETH_HLEN, ETH_P_IPV4, ETH_P_IPV6, ICRC_LEN

INSERT = "roce_icrc_insert"
CHECK = "roce_icrc_check"
SOURCES = {
    INSERT: ["roce_icrc_insert.v", "axis_keep_packer.v", "crc32_roce_icrc.v", "crc32_beat.v",
             "crc32_unshift.v"],
    CHECK: ["roce_icrc_check.v", "axis_keep_packer.v", "crc32_roce_icrc.v", "crc32_beat.v",
            "crc32_unshift.v"],
}
TOPLEVEL = os.environ.get("COCOTB_TOPLEVEL", "")

# Payload lengths every random run includes (tiny, pad-count edge cases, path MTUs).
SPECIAL_PAYLOADS = [0, 1, 2, 3, 4, 5, 1024, 2048]
MAX_PAYLOAD = 2100


# --- frames -----------------------------------------------------------------------------------


def ext_bytes(rng: random.Random, ext: Ext) -> bytes:
    """Random contents for one extension header, packed by nicsim.wire."""
    return pack_ext(ext, {name: rng.getrandbits(bits) for name, bits in EXT_FIELDS[ext]})


def random_path(rng: random.Random, ipv6: bool) -> Path:
    n = 16 if ipv6 else 4
    return Path(smac=rng.randbytes(6), dmac=rng.randbytes(6), sip=rng.randbytes(n),
                dip=rng.randbytes(n), sport=roce_udp_sport(rng.getrandbits(24),
                                                           rng.getrandbits(24)),
                dscp=rng.randrange(64), ecn=rng.choice(list(Ecn)), ttl=rng.randrange(1, 256),
                flow_label=rng.getrandbits(20))


def random_payload_len(rng: random.Random, index: int) -> int:
    if index < len(SPECIAL_PAYLOADS):
        return SPECIAL_PAYLOADS[index]
    r = rng.random()
    if r < 0.65:
        return rng.randrange(0, 160)
    if r < 0.9:
        return rng.randrange(0, MAX_PAYLOAD + 1)
    return rng.choice([256, 512, 1024, 2048])


PAYLOAD_OPCODES = sorted(op for op, info in OPCODES.items() if info.has_payload)


def random_roce_frame(rng: random.Random, builders: list[FrameBuilder], payload_len: int,
                      opcode: int | None = None, need_payload: bool = False) -> bytes:
    """A complete frame (with ICRC) for a random opcode with its extension headers; with
    need_payload, an opcode that carries payload_len bytes of payload."""
    if opcode is None:
        opcode = rng.choice(PAYLOAD_OPCODES if need_payload else sorted(OPCODES))
    op = opcode
    info = OPCODES[op]
    ext = b"".join(ext_bytes(rng, e) for e in info.exts)
    payload = rng.randbytes(payload_len) if info.has_payload else b""
    return rng.choice(builders).build(
        op, rng.getrandbits(24), rng.getrandbits(24), ext, payload,
        ackreq=rng.random() < 0.5, solicited=rng.random() < 0.5, becn=rng.random() < 0.5,
        fecn=rng.random() < 0.5, pkey=rng.getrandbits(16), migreq=rng.random() < 0.5)


def random_non_ip_frame(rng: random.Random) -> bytes:
    """A frame whose EtherType is neither IPv4 nor IPv6 (or too short to have one)."""
    if rng.random() < 0.2:
        return rng.randbytes(rng.randrange(1, ETH_HLEN))
    while True:
        etype = rng.getrandbits(16)
        if etype not in (ETH_P_IPV4, ETH_P_IPV6):
            break
    return rng.randbytes(12) + etype.to_bytes(2, "big") + rng.randbytes(rng.randrange(0, 300))


def ip_end(frame: bytes) -> int | None:
    """Where the IP packet ends by its own length field; None when the EtherType is not IP."""
    if len(frame) < ETH_HLEN:
        return None
    etype = int.from_bytes(frame[12:14], "big")
    if etype == ETH_P_IPV4:
        return ETH_HLEN + int.from_bytes(frame[16:18], "big")
    if etype == ETH_P_IPV6:
        return ETH_HLEN + 40 + int.from_bytes(frame[18:20], "big")
    return None


def icrc_wrong(frame: bytes) -> bool:
    """The check block's verdict, with the ICRC itself from nicsim's compute_icrc.

    Non-IP EtherTypes (and frames too short to carry one) pass. For IPv4/IPv6 the ICRC covers
    the IP packet by its length field (Ethernet padding after it is ignored); it is wrong if
    compute_icrc disagrees with the stored value, or if the frame cannot hold a right one: the
    block supports 20-byte IPv4 headers only (nicsim would also accept options), needs an
    IPv6 version nibble of 6, and an IP packet at least as long as UDP + BTH + ICRC.
    """
    end = ip_end(frame)
    if end is None:
        return False
    if len(frame) < 20:
        return True
    ipv6 = int.from_bytes(frame[12:14], "big") == ETH_P_IPV6
    shortest = SHORTEST_FRAME[ipv6]
    if ipv6 and frame[ETH_HLEN] >> 4 != shortest[ETH_HLEN] >> 4:
        return True
    if not ipv6 and frame[ETH_HLEN] != shortest[ETH_HLEN]:  # version 4, IHL 5
        return True
    if end < len(shortest) or end > len(frame):
        return True
    return compute_icrc(frame, ETH_HLEN, end) != int.from_bytes(frame[end - ICRC_LEN:end],
                                                                "little")


def _shortest(ipv6: bool) -> bytes:
    """The shortest RoCEv2 frame nicsim builds (an opcode with no headers or payload)."""
    rng = random.Random(0)
    return FrameBuilder(random_path(rng, ipv6)).build(Opcode.RC_SEND_MIDDLE, 1, 1)


SHORTEST_FRAME = {False: _shortest(False), True: _shortest(True)}


def masked_bits(frame: bytes) -> list[tuple[int, int]]:
    """(offset, bit) of every header bit whose value does not change compute_icrc: the fields
    the ICRC replaces by ones. Found by flipping each bit of the IP..BTH headers."""
    p = parse(frame)
    end = ip_end(frame)
    ref = compute_icrc(frame, ETH_HLEN, end)
    out = []
    buf = bytearray(frame)
    for off in range(ETH_HLEN, p.bth_off + 12):
        for bit in range(8):
            buf[off] ^= 1 << bit
            if compute_icrc(bytes(buf), ETH_HLEN, end) == ref:
                out.append((off, bit))
            buf[off] ^= 1 << bit
    return out


def flip(frame: bytes, off: int, bit: int) -> bytes:
    b = bytearray(frame)
    b[off] ^= 1 << bit
    return bytes(b)


def scapy_icrc_ok(frame: bytes) -> bool:
    """Independent oracle: scapy's RoCE layer recomputes the ICRC of `frame` (with ICRC)."""
    from scapy.contrib.roce import BTH
    from scapy.layers.l2 import Ether

    pkt = Ether(frame)
    pkt[BTH].icrc = None
    return bytes(pkt) == frame


# --- stream shaping ---------------------------------------------------------------------------


def shaped(rng: random.Random, data: bytes, lanes: int, mode: str) -> tuple[AxiStreamFrame, int]:
    """An AxiStreamFrame carrying `data` with null bytes inserted per `mode`, random tuser on
    every byte; returns it and the tuser of its last beat (that of its last entry)."""
    if mode == "packed":
        tdata, tkeep = list(data), [1] * len(data)
    else:
        p_null = {"sparse": rng.choice([0.05, 0.3, 0.7]), "beats": 0.02}[mode]
        p_beat = 0.05 if mode == "beats" else 0.01
        tdata, tkeep = [], []
        for byte in data:
            while rng.random() < p_null:
                tdata.append(rng.getrandbits(8))
                tkeep.append(0)
            if rng.random() < p_beat:
                tdata += rng.randbytes(lanes)
                tkeep += [0] * lanes
            tdata.append(byte)
            tkeep.append(1)
        if rng.random() < 0.4:  # trailing null bytes, often a whole null last beat
            n = rng.randrange(1, 2 * lanes)
            tdata += rng.randbytes(n)
            tkeep += [0] * n
    tuser = [rng.getrandbits(1) for _ in tdata]
    return AxiStreamFrame(bytes(tdata), tkeep=tkeep, tuser=tuser), tuser[-1]



# --- testbench --------------------------------------------------------------------------------


def high(signal) -> bool:
    """A 1-bit signal is 1 (X/Z before reset count as 0)."""
    return str(signal.value) == "1"


@dataclass
class Expect:
    data: bytes
    tuser: int
    scapy: bool = False  # also check the frame's ICRC with scapy


class TB:
    def __init__(self, dut) -> None:
        self.dut = dut
        self.width = len(dut.s_axis_tdata)
        self.lanes = self.width // 8
        self.log = logging.getLogger("cocotb.tb")
        self.log.setLevel(logging.INFO)
        cocotb.start_soon(Clock(dut.clk, 4, unit="ns").start())
        self.source = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis"), dut.clk, dut.rst)
        self.sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_axis"), dut.clk, dut.rst)
        self.source.log.setLevel(logging.WARNING)
        self.sink.log.setLevel(logging.WARNING)
        self.cycle = 0
        self.out_beats: list[int] = []  # cycles in which an output beat was taken
        self.stat_pulses = 0
        cocotb.start_soon(self._watch())

    async def _watch(self) -> None:
        dut = self.dut
        has_stat = hasattr(dut, "stat_bad_icrc")
        while True:
            await RisingEdge(dut.clk)
            self.cycle += 1
            if high(dut.m_axis_tvalid) and high(dut.m_axis_tready):
                self.out_beats.append(self.cycle)
            if has_stat and high(dut.stat_bad_icrc):
                # the pulse comes with the bad frame's last beat, flagged
                assert high(dut.m_axis_tvalid) and high(dut.m_axis_tlast)
                assert high(dut.m_axis_tuser)
                self.stat_pulses += 1

    async def reset(self) -> None:
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, 4)
        self.dut.rst.value = 0
        await ClockCycles(self.dut.clk, 2)

    def backpressure(self, rng: random.Random | None) -> None:
        if rng is None:
            self.source.clear_pause_generator()
            self.sink.clear_pause_generator()
            self.source.pause = False  # clearing the generator keeps its last value
            self.sink.pause = False
        else:
            self.source.set_pause_generator(pauses(rng, rng.choice([0.1, 0.3])))
            self.sink.set_pause_generator(pauses(rng, rng.choice([0.1, 0.3, 0.6])))

    async def recv_packed(self) -> tuple[bytes, int]:
        """One output frame; asserts it is packed. Returns its bytes and last-beat tuser."""
        frame = await self.sink.recv(compact=False)
        n = sum(frame.tkeep)
        assert n > 0, "empty output frame"
        assert frame.tkeep == [1] * n + [0] * (len(frame.tkeep) - n), "output not packed"
        assert len(frame.tkeep) - n < self.lanes
        return bytes(frame.tdata[:n]), frame.tuser[-1]

    async def run_frames(self, items: list[tuple[AxiStreamFrame, Expect | None]]) -> None:
        """Send every frame, then compare the outputs in order (None: frame is dropped)."""
        for frame, _ in items:
            await self.source.send(frame)
        expected = [e for _, e in items if e is not None]
        for i, exp in enumerate(expected):
            data, tuser = await self.recv_packed()
            if data != exp.data:
                self.log.error("frame %d: got %s expected %s", i, data.hex(), exp.data.hex())
            assert data == exp.data, f"frame {i}: data differs"
            assert tuser == exp.tuser, f"frame {i}: tuser {tuser}, expected {exp.tuser}"
            if exp.scapy:
                assert scapy_icrc_ok(data), f"frame {i}: scapy disagrees with the ICRC"
        await ClockCycles(self.dut.clk, 10)
        assert self.sink.empty(), "unexpected extra output frames"


def builders(rng: random.Random) -> list[FrameBuilder]:
    return [FrameBuilder(random_path(rng, ipv6)) for ipv6 in (False, True, False, True)]


def frame_count(tb: TB, at64: int, at512: int) -> int:
    return at64 if tb.lanes <= 8 else at512


# --- insert -----------------------------------------------------------------------------------


@cocotb.test(skip=TOPLEVEL != INSERT)
async def insert_random(dut):
    """Random RoCEv2 frames (and non-IP frames): output == FrameBuilder's frame with ICRC."""
    tb = TB(dut)
    rng = random.Random(0x1C2C)
    fbs = builders(rng)
    await tb.reset()
    count = frame_count(tb, 220, 220)
    for phase in ("backpressure", "free"):
        tb.backpressure(rng if phase == "backpressure" else None)
        items: list[tuple[AxiStreamFrame, Expect | None]] = []
        n_scapy = 0
        for i in range(count):
            mode = rng.choice(["packed", "sparse", "beats"])
            special = i < len(SPECIAL_PAYLOADS)  # a RoCEv2 frame with that payload
            r = 1.0 if special else rng.random()
            if r < 0.06:
                # not IPv4/IPv6: passes unchanged
                data = random_non_ip_frame(rng)
                frame, user = shaped(rng, data, tb.lanes, mode)
                items.append((frame, Expect(data, user)))
                continue
            if r < 0.08:
                # a packet of null bytes only: dropped
                items.append((AxiStreamFrame(bytes(rng.randrange(1, 3 * tb.lanes)),
                                             tkeep=[0]), None))
                continue
            full = random_roce_frame(rng, fbs, random_payload_len(rng, i), need_payload=special)
            frame, user = shaped(rng, full[:-ICRC_LEN], tb.lanes, mode)
            check_scapy = n_scapy < 6
            n_scapy += check_scapy
            items.append((frame, Expect(full, user, scapy=check_scapy)))
        await tb.run_frames(items)
        tb.log.info("%s: %d frames OK", phase, len(items))


@cocotb.test(skip=TOPLEVEL != INSERT)
async def insert_throughput(dut):
    """Back to back, packed input, no backpressure: one output beat per cycle, no bubble."""
    await throughput(dut, INSERT)


# --- check ------------------------------------------------------------------------------------


@cocotb.test(skip=TOPLEVEL != CHECK)
async def check_random(dut):
    """Good, corrupted, masked-field-changed, padded, truncated and non-IP frames: the bytes
    pass unchanged and tuser flags exactly the frames whose ICRC is wrong."""
    tb = TB(dut)
    rng = random.Random(0xC4EC)
    fbs = builders(rng)
    await tb.reset()
    count = frame_count(tb, 260, 240)
    kinds = ["good", "covered", "masked", "eth", "pad", "trunc", "nonip"]
    weights = [30, 25, 15, 5, 10, 8, 7]
    total_bad = 0
    seen = dict.fromkeys(kinds, 0)
    for phase in ("backpressure", "free"):
        tb.backpressure(rng if phase == "backpressure" else None)
        items: list[tuple[AxiStreamFrame, Expect | None]] = []
        n_scapy = 0
        for i in range(count):
            special = i < len(SPECIAL_PAYLOADS)  # a RoCEv2 frame with that payload
            kind = rng.choices(kinds, weights)[0]
            if special and kind == "nonip":
                kind = "good"
            seen[kind] += 1
            if kind == "nonip":
                data = random_non_ip_frame(rng)
            else:
                data = random_roce_frame(rng, fbs, random_payload_len(rng, i),
                                         need_payload=special)
                end = len(data)
                if kind == "covered":
                    masked = set(masked_bits(data))
                    while True:
                        off, bit = rng.randrange(ETH_HLEN, end), rng.randrange(8)
                        if (off, bit) not in masked:
                            break
                    data = flip(data, off, bit)
                    assert icrc_wrong(data), f"flip of covered bit {off}.{bit} not seen"
                elif kind == "masked":
                    off, bit = rng.choice(masked_bits(data))
                    data = flip(data, off, bit)
                    assert not icrc_wrong(data), f"flip of masked bit {off}.{bit} seen"
                elif kind == "eth":
                    data = flip(data, rng.randrange(12), rng.randrange(8))
                    assert not icrc_wrong(data)
                elif kind == "pad":
                    # Ethernet padding after the IP packet (to the 60-byte minimum and beyond)
                    data += bytes(max(0, 60 - len(data))) + rng.randbytes(rng.randrange(0, 70))
                    assert not icrc_wrong(data)
                elif kind == "trunc":
                    data = data[:rng.randrange(1, end)]
                elif n_scapy < 6:
                    assert scapy_icrc_ok(data)
                    n_scapy += 1
            frame, user = shaped(rng, data, tb.lanes, rng.choice(["packed", "sparse", "beats"]))
            bad = icrc_wrong(data)
            total_bad += bad
            items.append((frame, Expect(data, user | bad)))
        await tb.run_frames(items)
        assert tb.stat_pulses == total_bad, f"{tb.stat_pulses} stat pulses, {total_bad} bad"
        tb.log.info("%s: %d frames OK (%d bad so far)", phase, len(items), total_bad)
    tb.log.info("kinds: %s", seen)


@cocotb.test(skip=TOPLEVEL != CHECK)
async def check_throughput(dut):
    """Back to back, packed input, no backpressure: one output beat per cycle, no bubble."""
    await throughput(dut, CHECK)


# --- throughput (both blocks) -----------------------------------------------------------------


async def throughput(dut, block: str) -> None:
    tb = TB(dut)
    rng = random.Random(0x7400)
    fbs = builders(rng)
    await tb.reset()
    tb.backpressure(None)
    packets = frame_count(tb, 16, 12)
    # Frames from the smallest to MTU-sized; odd sizes make the ICRC straddle beats.
    for fb in fbs[:2]:  # IPv4, IPv6
        for payload in (0, 1, 6, 40, 61, 256, 1024, 2048):
            frames = [random_roce_frame(rng, [fb], payload, Opcode.RC_SEND_ONLY)
                      for _ in range(packets)]
            size = len(frames[0])
            tb.out_beats.clear()
            for f in frames:
                await tb.source.send(AxiStreamFrame(f[:-ICRC_LEN] if block == INSERT else f))
            for f in frames:
                data, tuser = await tb.recv_packed()
                assert data == f
                assert tuser == 0
            cycles = tb.out_beats[-1] - tb.out_beats[0] + 1
            ideal = packets * -(-size // tb.lanes)
            tb.log.info("%s %d-bit: %d frames of %d bytes in %d cycles (ideal %d)",
                        block, tb.width, packets, size, cycles, ideal)
            assert cycles == ideal, f"{cycles} cycles for {ideal} beats: bubbles in the output"
            out = os.environ.get("HDL_BENCH_OUT")
            if out:
                with open(out, "a") as fh:
                    fh.write(json.dumps({"block": block, "data_width": tb.width,
                                         "frame_bytes": size, "packets": packets,
                                         "cycles": cycles, "ideal_cycles": ideal}) + "\n")
            await ClockCycles(dut.clk, 5)


# --- pytest entry points ----------------------------------------------------------------------


@pytest.mark.parametrize("width", [64, 512])
@pytest.mark.parametrize("top", [INSERT, CHECK])
def test_icrc(top: str, width: int) -> None:
    run(top, SOURCES[top], "test_icrc", {"DATA_WIDTH": width})


def test_icrc_check_verilator() -> None:
    run(CHECK, SOURCES[CHECK], "test_icrc", {"DATA_WIDTH": 64}, sim="verilator")


def test_crc32_matrix_current() -> None:
    """rtl/crc32_beat.v and rtl/crc32_unshift.v are what gen_crc32_matrix.py writes."""
    for path, text in render_crc32_matrix().items():
        assert path.read_text() == text, f"{path.name} is stale: python -m hdl_tb.gen_crc32_matrix"
