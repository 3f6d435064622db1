"""cocotb testbench for roce_rx_parser (the RoCEv2 RX parser) and roce_rx (roce_icrc_check ->
roce_rx_parser, the complete receive path).

Frames are built with nicsim.wire.FrameBuilder (and scapy for non-RoCE traffic); the expected
fate of every frame comes from nicsim.wire.parse on the same bytes:
- parse returns a Packet: one metadata record equal to the Packet's fields and its payload
  bytes on m_axis (nothing on m_axis when the payload is empty); counted in stat_rx_packets;
- parse raises NOT_IP / NOT_UDP / NOT_ROCE: the frame, unchanged, on m_bypass; stat_bypass;
- parse raises another reason: nothing out, stat_drop_<reason.value> counts it.
Two documented hardware rules come on top of parse (see roce_rx_parser.v): IPv4 frames with
options (IHL > 5) go to the bypass port, and frames longer than a FIFO can hold are dropped
as oversize (the limits are computed from the FIFO depth parameters).

The same cocotb tests run on both toplevels. roce_rx_parser alone gets the ICRC verdict on
s_axis_tuser from the testbench: 1 exactly when parse raises BAD_ICRC, random on frames that
parse rejects earlier (the verdict must then be ignored), 0 on good frames. roce_rx computes it
with roce_icrc_check. pytest entry points are at the bottom.
"""

from __future__ import annotations

import json
import logging
import os
import random
from dataclasses import dataclass
from pathlib import Path as FsPath

import cocotb
import pytest
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource
from cocotbext.axi.stream import define_stream

from hdl_tb.gen_opcode_table import RTL_EXT_FIELDS as EXT_FIELDS
from hdl_tb.gen_opcode_table import RTL_OPCODES as OPCODES
from hdl_tb.gen_opcode_table import flags_of
from nicsim.wire import OPCODES as MODEL_OPCODES
from nicsim.wire import (
    Ecn,
    FrameBuilder,
    Opcode,
    Packet,
    ParseError,
    Path,
    WireError,
    pack_ext,
    parse,
)
from nicsim.wire.packet import ipv4_checksum

# Metadata ports m_meta_<name>: name -> width in bits.
META_FIELDS = {
    "dmac": 48, "smac": 48, "ipv6": 1, "sip": 128, "dip": 128, "tos": 8, "udp_sport": 16,
    "opcode": 8, "solicited": 1, "migreq": 1, "padcount": 2, "pkey": 16, "fecn": 1, "becn": 1,
    "dqpn": 24, "ackreq": 1, "psn": 24, "flags": 10, "payload_len": 16,
    "reth_va": 64, "reth_rkey": 32, "reth_len": 32, "aeth_syndrome": 8, "aeth_msn": 24,
    "imm": 32, "ieth_rkey": 32, "atomic_va": 64, "atomic_rkey": 32, "atomic_swap_add": 64,
    "atomic_compare": 64, "atomic_orig": 64, "deth_qkey": 32, "deth_src_qp": 24,
}
# Extension header fields of nicsim.wire.Packet (None there when absent, 0 on the port).
EXT_NAMES = tuple(name for fields in EXT_FIELDS.values() for name, _ in fields)

MetaBus, MetaTransaction, MetaSource, MetaSink, MetaMonitor = define_stream(
    "RoceRxMeta", signals=["valid", "ready", *META_FIELDS])

STATS = ("stat_rx_packets", "stat_bypass", *(f"stat_drop_{r.value}" for r in ParseError
                                             if r not in (ParseError.NOT_IP, ParseError.NOT_UDP,
                                                          ParseError.NOT_ROCE,
                                                          ParseError.BAD_UDP_CHECKSUM)),
         "stat_drop_oversize")
BYPASS_REASONS = (ParseError.NOT_IP, ParseError.NOT_UDP, ParseError.NOT_ROCE)

def expected_meta(p: Packet) -> dict[str, int]:
    d = {
        "dmac": int.from_bytes(p.dmac, "big"), "smac": int.from_bytes(p.smac, "big"),
        "ipv6": int(p.ipv6), "sip": int.from_bytes(p.sip, "big"),
        "dip": int.from_bytes(p.dip, "big"), "tos": p.tos, "udp_sport": p.sport,
        "opcode": p.opcode, "solicited": int(p.solicited), "migreq": int(p.migreq),
        "padcount": p.pad, "pkey": p.pkey, "fecn": int(p.fecn), "becn": int(p.becn),
        "dqpn": p.dqpn, "ackreq": int(p.ackreq), "psn": p.psn,
        "flags": flags_of(p.opcode), "payload_len": p.payload_len,
    }
    for name in EXT_NAMES:
        v = getattr(p, name)
        d[name] = 0 if v is None else v
    return d


# --- frames ------------------------------------------------------------------------------------


def rand_path(rng: random.Random, v6: bool) -> Path:
    n = 16 if v6 else 4
    return Path(smac=rng.randbytes(6), dmac=rng.randbytes(6), sip=rng.randbytes(n),
                dip=rng.randbytes(n), sport=rng.randrange(0xC000, 0x10000),
                dscp=rng.randrange(64), ecn=rng.choice(list(Ecn)), ttl=rng.randrange(1, 256),
                flow_label=rng.getrandbits(20))


def rand_payload_len(rng: random.Random, top: int = 2100) -> int:
    k = rng.random()
    if k < 0.25:
        return rng.randrange(0, 9)
    if k < 0.5:
        return rng.randrange(0, 130)
    if k < 0.6:
        return rng.choice((255, 256, 257, 1023, 1024, 1025, 2047, 2048, top))
    return rng.randrange(0, top + 1)


def roce_frame(rng: random.Random, opcode: int | None = None, v6: bool | None = None,
               plen: int | None = None, ext: bytes | None = None,
               payload: bytes | None = None) -> bytes:
    """A RoCEv2 frame from FrameBuilder with random header fields; the extension headers are
    the opcode's (unless `ext` is given), the payload random (if the opcode carries one)."""
    if opcode is None:
        opcode = rng.choice(list(OPCODES))
    info = OPCODES[opcode]
    if v6 is None:
        v6 = rng.random() < 0.5
    if ext is None:
        ext = b"".join(pack_ext(e, {name: rng.getrandbits(bits) for name, bits in EXT_FIELDS[e]})
                      for e in info.exts)
    if payload is None:
        if not info.has_payload:
            plen = 0
        elif plen is None:
            plen = rand_payload_len(rng)
        payload = rng.randbytes(plen)
    fb = FrameBuilder(rand_path(rng, v6))
    return fb.build(opcode, rng.getrandbits(24), rng.getrandbits(24), ext, payload,
                    ackreq=rng.random() < 0.5, solicited=rng.random() < 0.5,
                    becn=rng.random() < 0.5, fecn=rng.random() < 0.5, pkey=rng.getrandbits(16),
                    migreq=rng.random() < 0.5)


def bth_off(frame: bytes) -> int:
    return 62 if frame[12:14] == b"\x86\xdd" else 42


def with_ipv4_checksum(frame: bytes) -> bytes:
    """Recompute the IPv4 header checksum (nicsim's ipv4_checksum) of an IHL-5 frame."""
    hdr = frame[14:24] + b"\0\0" + frame[26:34]
    return frame[:24] + ipv4_checksum(hdr).to_bytes(2, "big") + frame[26:]


def flip_bit(rng: random.Random, frame: bytes, lo: int, hi: int) -> bytes:
    b = bytearray(frame)
    i = rng.randrange(lo, hi)
    b[i] ^= 1 << rng.randrange(8)
    return bytes(b)


MALFORMED_KINDS = ("truncate_headers", "truncate", "ip_version", "ip_checksum", "ihl",
                   "ip_length", "l4_length", "udp_length", "opcode", "tver", "icrc",
                   "payload_no_payload", "short_headers")


def malformed_frame(rng: random.Random, kind: str | None = None) -> bytes:
    """A frame broken in one of the ways the brief lists (or a close variant); which error
    parse reports is up to parse."""
    if kind is None:
        kind = rng.choice(MALFORMED_KINDS)
    if kind == "payload_no_payload":
        op = rng.choice([o for o, i in OPCODES.items() if not i.has_payload])
        return roce_frame(rng, op, payload=rng.randbytes(rng.randrange(1, 40)))
    if kind == "short_headers":
        op = rng.choice([o for o, i in OPCODES.items() if i.ext_len >= 8])
        info = OPCODES[op]
        return roce_frame(rng, op, ext=b"", payload=rng.randbytes(
            rng.randrange(0, info.ext_len - 4) if info.has_payload else 0))
    v6 = rng.random() < 0.5
    if kind in ("ip_checksum", "ihl"):
        v6 = False
    frame = roce_frame(rng, v6=v6)
    b = bytearray(frame)
    bo = bth_off(frame)
    if kind == "truncate_headers":
        # shorter than the Ethernet or the IP header
        return frame[:rng.randrange(1, 34 if not v6 else 54)]
    if kind == "truncate":
        cut = rng.choice((rng.randrange(1, bo + 16), rng.randrange(len(frame) - 8, len(frame)),
                          rng.randrange(1, len(frame))))
        return frame[:cut]
    if kind == "ip_version":
        b[14] = (rng.choice([v for v in range(16) if v != b[14] >> 4]) << 4) | (b[14] & 0xF)
        return bytes(b)
    if kind == "ip_checksum":
        # either the checksum itself or the TTL (masked in the ICRC, so only the checksum fails)
        return flip_bit(rng, frame, *rng.choice(((24, 26), (22, 23))))
    if kind == "ihl":
        b[14] = 0x40 | rng.randrange(5)
        return with_ipv4_checksum(bytes(b))
    if kind == "ip_length":
        # below the minimum, or longer than the frame
        if v6:
            v = rng.choice((rng.randrange(0, 8), rng.randrange(len(frame) - 54 + 1, 0x10000)))
            b[18:20] = v.to_bytes(2, "big")
            return bytes(b)
        v = rng.choice((rng.randrange(0, 28), rng.randrange(len(frame) - 14 + 1, 0x10000)))
        b[16:18] = v.to_bytes(2, "big")
        return with_ipv4_checksum(bytes(b))
    if kind == "l4_length":
        # IP and UDP lengths shortened consistently: too short for BTH + ICRC, or cutting
        # into the packet (what follows looks like Ethernet padding)
        lo = 34 if not v6 else 54
        old_len = int.from_bytes(b[lo + 4:lo + 6], "big")
        new_len = rng.choice((rng.randrange(8, 24), rng.randrange(8, old_len)))
        b[lo + 4:lo + 6] = new_len.to_bytes(2, "big")
        if v6:
            b[18:20] = new_len.to_bytes(2, "big")
            return bytes(b)
        b[16:18] = (new_len + 20).to_bytes(2, "big")
        return with_ipv4_checksum(bytes(b))
    if kind == "udp_length":
        lo = 38 if not v6 else 58
        old = int.from_bytes(b[lo:lo + 2], "big")
        b[lo:lo + 2] = rng.choice([v for v in (rng.getrandbits(16), old ^ (1 << rng.randrange(16)))
                                   if v != old] or [old ^ 1]).to_bytes(2, "big")
        return bytes(b)
    if kind == "opcode":
        # An opcode neither the RTL nor the model knows (the model parses FLUSH and ATOMIC
        # WRITE, which the RTL drops: not a corruption both agree on).
        unknown = [o for o in range(256) if o not in MODEL_OPCODES]
        b[bo] = rng.choice((rng.choice([o for o in unknown if 0x18 <= o < 0x20]),
                            rng.choice(unknown)))
        return bytes(b)
    if kind == "tver":
        b[bo + 1] = (b[bo + 1] & 0xF0) | rng.randrange(1, 16)
        return bytes(b)
    # icrc: a bit of the extension headers, payload, pad or the ICRC itself
    return flip_bit(rng, frame, bo + 12, len(frame))


def bypass_frame(rng: random.Random) -> bytes:
    """Non-RoCE traffic, built with scapy (or a RoCE frame sent to another UDP port)."""
    from scapy.all import ARP, ICMP, IP, TCP, UDP, Ether, IPOption, IPv6, Raw

    eth = Ether(src=rng.randbytes(6).hex(":"), dst=rng.randbytes(6).hex(":"))
    data = Raw(rng.randbytes(rng.randrange(0, 300)))
    kind = rng.choice(("arp", "udp4", "udp6", "tcp4", "tcp6", "icmp", "other", "port",
                       "options"))
    if kind == "arp":
        pkt = eth / ARP(op=rng.choice((1, 2)), psrc="10.0.0.1", pdst="10.0.0.2")
    elif kind == "udp4":
        pkt = eth / IP(src="10.1.2.3", dst="10.3.2.1") / UDP(
            sport=rng.getrandbits(16), dport=rng.choice((53, 4790, 4792, 319))) / data
    elif kind == "udp6":
        pkt = eth / IPv6(src="fe80::1", dst="fe80::2") / UDP(dport=rng.choice((53, 4790))) / data
    elif kind == "tcp4":
        pkt = eth / IP(src="10.1.2.3", dst="10.3.2.1") / TCP(dport=4791) / data
    elif kind == "tcp6":
        pkt = eth / IPv6(src="fe80::1", dst="fe80::2") / TCP(dport=4791) / data
    elif kind == "icmp":
        pkt = eth / IP(src="10.1.2.3", dst="10.3.2.1") / ICMP() / data
    elif kind == "other":
        pkt = Ether(src=rng.randbytes(6).hex(":"), dst=rng.randbytes(6).hex(":"),
                    type=rng.choice((0x88CC, 0x8100, 0x88F7, 0x0807))) / data
    elif kind == "options":
        # IPv4 with options: parse would look inside; the hardware passes it to the host
        opt = IPOption(b"\x01" * rng.choice((3, 4, 8)) + b"\x00")
        pkt = eth / IP(src="10.1.2.3", dst="10.3.2.1", options=[opt]) / UDP(dport=4791) / data
    else:
        frame = bytearray(roce_frame(rng))
        lo = 36 if frame[12:14] == b"\x08\x00" else 56
        frame[lo:lo + 2] = rng.choice([p for p in (rng.getrandbits(16), 4790, 4792)
                                       if p != 4791]).to_bytes(2, "big")
        return bytes(frame)
    return bytes(pkt)


def ipv4_options(frame: bytes) -> bool:
    """The hardware rule on top of parse: IPv4 with IHL > 5 goes to the bypass port."""
    return (len(frame) >= 34 and frame[12:14] == b"\x08\x00" and frame[14] >> 4 == 4
            and frame[14] & 0xF > 5)


@dataclass
class Case:
    frame: bytes
    fate: str                   # "rx", "bypass" or a stat_drop_* counter name
    pkt: Packet | None = None
    tuser: int = 0


def classify(frame: bytes, beats_limit: tuple[int, int, int], rng: random.Random,
             tb_icrc: bool) -> Case:
    """Expected fate of `frame` (see the module docstring). beats_limit = (bytes per beat,
    payload FIFO frame limit in beats, bypass FIFO frame limit in beats)."""
    kw, pay_limit, byp_limit = beats_limit
    beats = -(-len(frame) // kw)
    if ipv4_options(frame):
        fate, pkt = "bypass", None
    else:
        try:
            pkt = parse(frame)
            fate = "rx"
        except WireError as e:
            pkt = None
            fate = "bypass" if e.reason in BYPASS_REASONS else f"stat_drop_{e.reason.value}"
    if not tb_icrc:
        tuser = 0
    elif fate == "stat_drop_bad_icrc":
        tuser = 1
    elif fate == "rx":
        tuser = 0
    else:
        tuser = rng.getrandbits(1)
    if fate == "rx" and beats > pay_limit or fate == "bypass" and beats > byp_limit:
        fate, pkt = "stat_drop_oversize", None
    return Case(frame, fate, pkt, tuser)


# --- testbench ---------------------------------------------------------------------------------


class TB:
    def __init__(self, dut, seed: int):
        self.dut = dut
        # RX_PARSER_SEED=<n> runs the same tests on other random frames (default: fixed).
        self.rng = random.Random(seed + 1000 * int(os.environ.get("RX_PARSER_SEED", "0")))
        self.kw = len(dut.s_axis_tkeep)
        self.toplevel = dut._name
        # The parser alone gets the ICRC verdict from the testbench; roce_rx computes it.
        self.tb_icrc = self.toplevel == "roce_rx_parser"
        pay_depth = self._param("PAYLOAD_FIFO_DEPTH", 8192 // self.kw)
        byp_depth = self._param("BYPASS_FIFO_DEPTH", 4096 // self.kw)
        self.limits = (self.kw, pay_depth - 4, byp_depth - 4)
        self.cycle = 0
        self.handshakes: list[int] = []
        self.out_beats = 0
        dut.rst.value = 1
        cocotb.start_soon(Clock(dut.clk, 4, unit="ns").start())

    async def reset(self):
        """Reset the DUT; the bus models are created while reset is asserted (at time 0 the
        handshake signals are still X and the models would sample them)."""
        dut = self.dut
        dut.rst.value = 1
        await ClockCycles(dut.clk, 2)
        self.source = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis"), dut.clk, dut.rst)
        self.sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_axis"), dut.clk, dut.rst)
        self.bypass = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_bypass"), dut.clk, dut.rst)
        self.meta = MetaSink(MetaBus.from_prefix(dut, "m_meta"), dut.clk, dut.rst)
        for m in (self.source, self.sink, self.bypass, self.meta):
            m.log.setLevel(logging.WARNING)
        cocotb.start_soon(self._count())
        await ClockCycles(dut.clk, 4)
        dut.rst.value = 0
        await ClockCycles(dut.clk, 2)

    def _param(self, name: str, default: int) -> int:
        try:
            return int(getattr(self.dut, name).value)
        except (AttributeError, ValueError, TypeError):
            return default

    async def _count(self):
        dut = self.dut
        while True:
            await RisingEdge(dut.clk)
            self.cycle += 1
            if dut.s_axis_tvalid.value == 1 and dut.s_axis_tready.value == 1:
                self.handshakes.append(self.cycle)
            for p in ("m_axis", "m_bypass"):
                if (getattr(dut, f"{p}_tvalid").value == 1
                        and getattr(dut, f"{p}_tready").value == 1):
                    self.out_beats += 1

    def set_backpressure(self, enable: bool, source: float = 0.2, sink: float = 0.3,
                         bypass: float = 0.3, meta: float = 0.3):
        """Random idle cycles on the source and pauses on the outputs (each cycle paused with
        the given probability), or none."""
        def gen(p):
            r = random.Random(self.rng.getrandbits(32))
            while True:
                yield r.random() < p

        models = ((self.source, source), (self.sink, sink), (self.bypass, bypass),
                  (self.meta, meta))
        for m, p in models:
            if enable and p:
                m.set_pause_generator(gen(p))
            else:
                m.clear_pause_generator()
                m.pause = False

    def stats(self) -> dict[str, int]:
        return {s: int(getattr(self.dut, s).value) for s in STATS}

    def case(self, frame: bytes) -> Case:
        return classify(frame, self.limits, self.rng, self.tb_icrc)

    async def run_cases(self, cases: list[Case]):
        """Send the frames, wait for every expected output, compare them and the counters."""
        before = self.stats()
        for c in cases:
            await self.source.send(AxiStreamFrame(c.frame, tuser=c.tuser))
        rx = [c for c in cases if c.fate == "rx"]
        with_payload = [c for c in rx if c.pkt.payload_len]
        byp = [c for c in cases if c.fate == "bypass"]
        idle = 0    # cycles without progress on any port
        last = None
        while (not self.source.idle() or self.meta.count() < len(rx)
               or self.sink.count() < len(with_payload) or self.bypass.count() < len(byp)):
            await RisingEdge(self.dut.clk)
            now = (len(self.handshakes), self.out_beats, self.meta.count())
            idle = idle + 1 if now == last else 0
            last = now
            assert idle < 5000, (f"stalled: input {len(self.handshakes)} beats, meta "
                                 f"{self.meta.count()}/{len(rx)}, payload {self.sink.count()}/"
                                 f"{len(with_payload)}, bypass {self.bypass.count()}/{len(byp)}")
        await ClockCycles(self.dut.clk, 50)
        assert self.meta.empty() or self.meta.count() == len(rx), "extra metadata"
        assert self.meta.count() == len(rx)
        assert self.sink.count() == len(with_payload), "extra payload frames"
        assert self.bypass.count() == len(byp), "extra bypass frames"

        for i, c in enumerate(rx):
            t = self.meta.recv_nowait()
            got = {k: int(getattr(t, k)) for k in META_FIELDS}
            want = expected_meta(c.pkt)
            diff = {k: (hex(got[k]), hex(want[k])) for k in META_FIELDS if got[k] != want[k]}
            assert not diff, f"packet {i} ({c.pkt.name}): metadata (got, want) {diff}"
        for i, c in enumerate(with_payload):
            f = self.sink.recv_nowait()
            want = bytes(c.pkt.payload)
            if f.tdata != want:
                diff = next((j for j, (a, b) in enumerate(zip(f.tdata, want, strict=False))
                             if a != b), None)
                raise AssertionError(f"payload {i} ({c.pkt.name}, {len(want)} bytes): got "
                                     f"{len(f.tdata)} bytes, first difference at byte {diff}")
        for i, c in enumerate(byp):
            f = self.bypass.recv_nowait()
            assert f.tdata == c.frame, f"bypass frame {i} altered"
            if self.tb_icrc:
                last_tuser = f.tuser[-1] if isinstance(f.tuser, list) else f.tuser
                assert last_tuser == c.tuser, f"bypass frame {i}: tuser {last_tuser}"
        after = self.stats()
        want = {s: 0 for s in STATS}
        for c in cases:
            want["stat_rx_packets" if c.fate == "rx" else
                 "stat_bypass" if c.fate == "bypass" else c.fate] += 1
        got = {s: after[s] - before[s] for s in STATS}
        assert got == want, f"counters: got {got}, want {want}"
        self.dut._log.info("%d frames: %s", len(cases), {k: v for k, v in got.items() if v})


def n_scaled(tb: TB, n64: int) -> int:
    """Fewer frames at 512 bits, where Icarus simulates each cycle more slowly."""
    return n64 if tb.kw <= 8 else max(1, n64 * 2 // 3)


@cocotb.test()
async def test_every_opcode(dut):
    """Every opcode, IPv4 and IPv6, random header fields and payload sizes, backpressure."""
    tb = TB(dut, 1)
    await tb.reset()
    tb.set_backpressure(True)
    cases = []
    for op in OPCODES:
        for v6 in (False, True):
            cases.append(tb.case(roce_frame(tb.rng, op, v6)))
    tb.rng.shuffle(cases)
    assert all(c.fate == "rx" for c in cases)
    await tb.run_cases(cases)


@cocotb.test()
async def test_payload_sizes(dut):
    """Payload lengths 0..64 one by one, then random up to 2100, both IP versions."""
    tb = TB(dut, 2)
    await tb.reset()
    tb.set_backpressure(True)
    data_ops = [o for o, i in OPCODES.items() if i.has_payload]
    sizes = list(range(0, 65)) + [tb.rng.randrange(65, 2101) for _ in range(n_scaled(tb, 30))]
    cases = [tb.case(roce_frame(tb.rng, tb.rng.choice(data_ops), plen=n)) for n in sizes]
    # Ethernet padding after the IP packet: parse ignores it, so must the hardware.
    for _ in range(10):
        f = roce_frame(tb.rng, tb.rng.choice(data_ops), plen=tb.rng.randrange(0, 40))
        cases.append(tb.case(f + tb.rng.randbytes(tb.rng.randrange(1, 80))))
    assert all(c.fate == "rx" for c in cases)
    await tb.run_cases(cases)


@cocotb.test()
async def test_malformed(dut):
    """Malformed frames interleaved with good ones: counters by reason, good frames intact."""
    tb = TB(dut, 3)
    await tb.reset()
    tb.set_backpressure(True)
    cases = [tb.case(malformed_frame(tb.rng, kind)) for kind in MALFORMED_KINDS for _ in (0, 1)]
    for _ in range(n_scaled(tb, 220)):
        if tb.rng.random() < 0.4:
            cases.append(tb.case(roce_frame(tb.rng, plen=tb.rng.randrange(0, 300))))
        else:
            cases.append(tb.case(malformed_frame(tb.rng)))
    tb.rng.shuffle(cases)
    fates = {c.fate for c in cases}
    for reason in ("truncated", "bad_ip_version", "bad_ip_checksum", "bad_ip_header",
                   "bad_ip_length", "bad_udp_length", "unknown_opcode", "bad_transport_version",
                   "short_headers", "bad_padcount", "bad_icrc"):
        assert f"stat_drop_{reason}" in fates, f"no frame exercised {reason}"
    await tb.run_cases(cases)


@cocotb.test()
async def test_bypass(dut):
    """Non-RoCE frames (ARP, other UDP ports, TCP, IPv4 options...) on the bypass port,
    interleaved with RoCE frames, with backpressure."""
    tb = TB(dut, 4)
    await tb.reset()
    tb.set_backpressure(True)
    cases = []
    for _ in range(n_scaled(tb, 90)):
        if tb.rng.random() < 0.5:
            cases.append(tb.case(bypass_frame(tb.rng)))
        else:
            cases.append(tb.case(roce_frame(tb.rng, plen=tb.rng.randrange(0, 200))))
    assert sum(c.fate == "bypass" for c in cases) > len(cases) // 3
    await tb.run_cases(cases)


@cocotb.test()
async def test_full_fifos(dut):
    """One output at a time nearly stopped, so that its FIFO fills and s_axis_tready drops:
    nothing is lost or reordered, and the other outputs keep their frames apart."""
    tb = TB(dut, 7)
    await tb.reset()
    kw, pay_limit, byp_limit = tb.limits
    data_ops = [o for o, i in OPCODES.items() if i.has_payload]
    phases = [
        ("meta", dict(meta=0.95), [roce_frame(tb.rng, plen=tb.rng.randrange(0, 20))
                                   for _ in range(40)]),
        # (+ 8: enough to fill the FIFO past what roce_rx's ICRC check pipeline holds in
        # front of it, 13 beats at 512 bits)
        ("payload", dict(sink=0.95), [roce_frame(tb.rng, tb.rng.choice(data_ops), plen=300)
                                      for _ in range(pay_limit * kw // 300 + 8)]),
        ("bypass", dict(bypass=0.95), [bypass_frame(tb.rng) for _ in range(byp_limit * kw // 150
                                                                         + 4)]),
    ]
    for name, pauses, frames in phases:
        tb.set_backpressure(True, **{"source": 0, "sink": 0, "bypass": 0, "meta": 0, **pauses})
        stalls = 0

        async def count_stalls():
            nonlocal stalls
            while True:
                await RisingEdge(dut.clk)
                if dut.s_axis_tvalid.value == 1 and dut.s_axis_tready.value == 0:
                    stalls += 1

        task = cocotb.start_soon(count_stalls())
        await tb.run_cases([tb.case(f) for f in frames])
        task.cancel()
        dut._log.info("%s FIFO full: input stalled for %d cycles", name, stalls)
        assert stalls > 0, f"the {name} FIFO never filled"


@cocotb.test()
async def test_fifo_limits(dut):
    """Frames at and just over the FIFO limits: the longest ones pass, longer ones are
    dropped as oversize (and do not wedge the block)."""
    from scapy.all import UDP, Ether, IPv6, Raw

    tb = TB(dut, 5)
    await tb.reset()
    kw, pay_limit, byp_limit = tb.limits
    cases = []
    # RoCE: RC_SEND_ONLY over IPv4 has 58 bytes of headers + ICRC; a payload multiple of 4.
    for beats in (pay_limit, pay_limit + 1):
        plen = (beats * kw - 58) & ~3 if beats == pay_limit else beats * kw - 58 + 4
        cases.append(tb.case(roce_frame(tb.rng, Opcode.RC_SEND_ONLY, v6=False, plen=plen)))
        cases.append(tb.case(roce_frame(tb.rng, plen=100)))
    for beats in (byp_limit, byp_limit + 1):
        pkt = Ether() / IPv6() / UDP(dport=53) / Raw(bytes(beats * kw - 62))
        cases.append(tb.case(bytes(pkt)))
        cases.append(tb.case(roce_frame(tb.rng, plen=100)))
    assert [c.fate for c in cases] == ["rx", "rx", "stat_drop_oversize", "rx", "bypass", "rx",
                                       "stat_drop_oversize", "rx"]
    tb.set_backpressure(True)
    await tb.run_cases(cases)


@cocotb.test()
async def test_throughput(dut):
    """Back-to-back frames, no backpressure: one beat per cycle with no bubble between
    frames (input handshakes on consecutive cycles), for small to MTU-sized frames."""
    tb = TB(dut, 6)
    await tb.reset()
    bench = os.environ.get("HDL_BENCH_OUT")
    data_ops = [o for o, i in OPCODES.items() if i.has_payload]
    # Fixed sizes (RC_SEND_ONLY over IPv4: the frame is 58 bytes + payload + pad), then every
    # payload length up to two beats and more (random opcodes, both IP versions), then a mix.
    groups = [(f"payload {n}", [n] * (24 if n < 1000 else 6)) for n in (0, 1, 64, 256, 1024, 4096)]
    groups.append(("sweep", list(range(0, 2 * tb.kw + 9))))
    groups.append(("mixed", [tb.rng.choice((0, 1, 3, 60, 200, 1500)) for _ in range(40)]))
    for name, sizes in groups:
        if name.startswith("payload"):
            frames = [roce_frame(tb.rng, Opcode.RC_SEND_ONLY, v6=False, plen=n) for n in sizes]
        else:
            frames = [roce_frame(tb.rng, tb.rng.choice(data_ops), plen=n) for n in sizes]
        cases = [tb.case(f) for f in frames]
        tb.handshakes.clear()
        await tb.run_cases(cases)
        hs = tb.handshakes
        ideal = sum(-(-len(f) // tb.kw) for f in frames)
        cycles = hs[-1] - hs[0] + 1
        dut._log.info("%s: %d frames, %d cycles, ideal %d (%.2f cycles/frame)", name,
                      len(frames), cycles, ideal, cycles / len(frames))
        assert len(hs) == ideal
        assert cycles == ideal, f"{name}: {cycles} cycles for {ideal} beats"
        if bench and name.startswith("payload"):
            with open(bench, "a") as fh:
                fh.write(json.dumps({"block": tb.toplevel, "data_width": tb.kw * 8,
                                     "frame_bytes": len(frames[0]), "packets": len(frames),
                                     "cycles": cycles, "ideal_cycles": ideal}) + "\n")


# --- pytest ------------------------------------------------------------------------------------

RTL = FsPath(__file__).resolve().parent / "rtl"


@pytest.mark.parametrize("data_width", [64, 512])
def test_roce_rx_parser(data_width):
    from hdl_tb.cocotb_run import run

    run("roce_rx_parser", ["roce_rx_parser.v"], "test_rx_parser", {"DATA_WIDTH": data_width})


@pytest.mark.parametrize("data_width", [64, 512])
def test_roce_rx(data_width):
    from hdl_tb.cocotb_run import icrc_helpers, run

    if not (RTL / "roce_icrc_check.v").exists():
        pytest.skip("rtl/roce_icrc_check.v (the ICRC helper's block) is not there yet")
    run("roce_rx", ["roce_icrc_check.v", *icrc_helpers(), "roce_rx_parser.v", "roce_rx.v"],
        "test_rx_parser", {"DATA_WIDTH": data_width})
