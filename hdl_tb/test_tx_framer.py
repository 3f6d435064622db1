"""cocotb testbench for roce_tx_framer (RoCEv2 headers + payload + pad, no ICRC) and roce_tx
(roce_tx_framer -> roce_icrc_insert: the complete frame).

Every expected frame comes from nicsim.wire.FrameBuilder, with the extension headers packed by
the nicsim.wire helpers (reth, aeth, ...). The descriptor is driven from the same Path and field
values. roce_tx output is also parsed with nicsim.wire.parse and with scapy (scapy.contrib.roce,
whose ICRC and IPv4 checksum code is independent of nicsim's).

The same cocotb tests run against both toplevels (COCOTB_TOPLEVEL says which one is under
test: roce_tx expects the ICRC appended). pytest entry points at the bottom.
"""

from __future__ import annotations

import ipaddress
import json
import os
import random
from dataclasses import dataclass, field

import cocotb
import pytest
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge, with_timeout
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource

from hdl_tb.gen_opcode_table import RTL_EXT_FIELDS as EXT_FIELDS
from hdl_tb.gen_opcode_table import RTL_OPCODES as OPCODES
from hdl_tb.streams import HDR_FIELDS, HdrBus, HdrSource, HdrTransaction
from nicsim.cosim.dma import pauses
from nicsim.wire import (
    Ecn,
    FrameBuilder,
    Opcode,
    Path,
    pack_ext,
    parse,
)

# Fields drawn at random for every frame (whether or not the opcode uses them).
RANDOM_FIELDS = ("solicited", "migreq", "pkey", "fecn", "becn", "dqpn", "ackreq", "psn",
                 "reth_va", "reth_rkey", "reth_len", "aeth_syndrome", "aeth_msn", "imm",
                 "ieth_rkey", "atomic_va", "atomic_rkey", "atomic_swap_add", "atomic_compare",
                 "atomic_orig", "deth_qkey", "deth_src_qp")

SEED = 0x5EED_7C


@dataclass
class Job:
    """One frame: the descriptor and payload to drive, and the FrameBuilder frame expected."""

    path: Path
    opcode: int
    values: dict[str, int]
    payload: bytes
    frame: bytes  # complete frame, ICRC included
    tuser: int = 0
    desc: dict[str, int] = field(default_factory=dict)


def make_path(rng: random.Random, ipv6: bool) -> Path:
    alen = 16 if ipv6 else 4
    return Path(smac=rng.randbytes(6), dmac=rng.randbytes(6), sip=rng.randbytes(alen),
                dip=rng.randbytes(alen), sport=rng.getrandbits(16), dscp=rng.getrandbits(6),
                ecn=rng.choice(list(Ecn)), ttl=rng.getrandbits(8),
                flow_label=rng.getrandbits(20))


def make_job(rng: random.Random, opcode: int, ipv6: bool, plen: int, tuser: int = 0,
             path: Path | None = None) -> Job:
    """A frame with random header values; `plen` is ignored for opcodes without payload."""
    info = OPCODES[opcode]
    path = path or make_path(rng, ipv6)
    values = {name: rng.getrandbits(HDR_FIELDS[name]) for name in RANDOM_FIELDS}
    payload = rng.randbytes(plen) if info.has_payload else b""
    ext = b"".join(pack_ext(e, values) for e in info.exts)
    frame = FrameBuilder(path).build(
        opcode, values["dqpn"], values["psn"], ext, payload, ackreq=bool(values["ackreq"]),
        solicited=bool(values["solicited"]), becn=bool(values["becn"]),
        fecn=bool(values["fecn"]), pkey=values["pkey"], migreq=bool(values["migreq"]))
    desc = dict(values)
    junk = rng.getrandbits(96) << 32  # IPv4 addresses sit in bits [31:0]; the rest is ignored
    desc.update(
        dmac=int.from_bytes(path.dmac, "big"), smac=int.from_bytes(path.smac, "big"),
        ipv6=int(path.ipv6),
        sip=int.from_bytes(path.sip, "big") | (0 if path.ipv6 else junk),
        dip=int.from_bytes(path.dip, "big") | (0 if path.ipv6 else junk),
        tos=(path.dscp << 2) | path.ecn.value, ttl=path.ttl, flow_label=path.flow_label,
        udp_sport=path.sport, opcode=opcode,
        # payload_len is ignored for opcodes without payload: drive junk there now and then
        payload_len=plen if info.has_payload else rng.choice((0, 0, rng.getrandbits(16))))
    return Job(path, opcode, values, payload, frame, tuser, desc)



class TB:
    def __init__(self, dut) -> None:
        self.dut = dut
        self.toplevel = os.environ.get("COCOTB_TOPLEVEL", "roce_tx_framer")
        self.with_icrc = self.toplevel == "roce_tx"
        self.kw = len(dut.m_axis_tkeep)
        self.log = dut._log
        cocotb.start_soon(Clock(dut.clk, 4, unit="ns").start())
        dut.rst.setimmediatevalue(1)  # the bus models stay idle until reset is released
        self.hdr = HdrSource(HdrBus.from_prefix(dut, "s_hdr"), dut.clk, dut.rst)
        self.src = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis"), dut.clk, dut.rst)
        self.sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_axis"), dut.clk, dut.rst)
        self.cycle = 0
        self.beats: list[tuple[int, bool]] = []  # (cycle, tlast) of every output handshake
        cocotb.start_soon(self._watch())

    async def _watch(self) -> None:
        """Count cycles, log output beats, check the output stream is packed."""
        full = (1 << self.kw) - 1
        dut = self.dut
        while True:
            await RisingEdge(dut.clk)
            self.cycle += 1
            if dut.m_axis_tvalid.value == 1 and dut.m_axis_tready.value == 1:
                last = bool(dut.m_axis_tlast.value)
                keep = int(dut.m_axis_tkeep.value)
                self.beats.append((self.cycle, last))
                if last:
                    assert keep and keep & (keep + 1) == 0, f"last tkeep {keep:#x} not packed"
                else:
                    assert keep == full, f"tkeep {keep:#x} on a beat before tlast"
                    assert not int(dut.m_axis_tuser.value), "tuser before the last beat"

    def set_pauses(self, rng: random.Random | None, hdr: float = 0.0, src: float = 0.0,
                   sink: float = 0.0) -> None:
        for model, prob in ((self.hdr, hdr), (self.src, src), (self.sink, sink)):
            if rng is None or prob == 0:
                model.clear_pause_generator()
                model.pause = False  # clearing the generator leaves the last value in place
            else:
                model.set_pause_generator(pauses(random.Random(rng.getrandbits(32)), prob))

    async def reset(self) -> None:
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, 4)
        self.dut.rst.value = 0
        await ClockCycles(self.dut.clk, 2)

    def expected(self, job: Job) -> bytes:
        return job.frame if self.with_icrc else job.frame[:-4]

    async def send(self, job: Job) -> None:
        await self.hdr.send(HdrTransaction(**job.desc))
        if job.payload:
            await self.src.send(AxiStreamFrame(job.payload, tuser=job.tuser))

    async def recv(self) -> tuple[bytes, int]:
        frame = await with_timeout(self.sink.recv(), 200, "us")
        tuser = frame.tuser
        if isinstance(tuser, list):
            tuser = tuser[-1]
        return bytes(frame.tdata), int(tuser or 0)


def check_parsed(job: Job, out: bytes) -> None:
    """nicsim.wire.parse reads back what the descriptor asked for."""
    p = parse(out)
    v = job.values
    assert p.opcode == job.opcode and p.ipv6 == job.path.ipv6
    assert (p.dmac, p.smac, p.sip, p.dip) == (job.path.dmac, job.path.smac, job.path.sip,
                                              job.path.dip)
    assert p.tos == job.desc["tos"] and p.sport == job.path.sport
    assert (p.solicited, p.migreq, p.pkey, p.fecn, p.becn, p.dqpn, p.ackreq, p.psn) == (
        bool(v["solicited"]), bool(v["migreq"]), v["pkey"], bool(v["fecn"]), bool(v["becn"]),
        v["dqpn"], bool(v["ackreq"]), v["psn"])
    assert bytes(p.payload) == job.payload
    for e in OPCODES[job.opcode].exts:
        for name, _ in EXT_FIELDS[e]:
            assert getattr(p, name) == v[name], name


def check_scapy(job: Job, out: bytes) -> None:
    """scapy as an independent oracle: field values, IPv4 checksum, UDP port, ICRC."""
    from scapy.compat import raw
    from scapy.contrib.roce import BTH
    from scapy.layers.inet import IP, UDP
    from scapy.layers.inet6 import IPv6
    from scapy.layers.l2 import Ether

    pkt = Ether(out)
    assert pkt.haslayer(BTH), pkt.summary()
    path, v = job.path, job.values
    ext_len = OPCODES[job.opcode].ext_len
    pad = -len(job.payload) & 3
    udp_len = 8 + 12 + ext_len + len(job.payload) + pad + 4
    if path.ipv6:
        ip = pkt[IPv6]
        assert ip.src == str(ipaddress.IPv6Address(path.sip))
        assert ip.dst == str(ipaddress.IPv6Address(path.dip))
        assert (ip.tc, ip.fl, ip.hlim, ip.nh, ip.plen) == (job.desc["tos"], path.flow_label,
                                                           path.ttl, 17, udp_len)
    else:
        ip = pkt[IP]
        assert ip.src == str(ipaddress.IPv4Address(path.sip))
        assert ip.dst == str(ipaddress.IPv4Address(path.dip))
        assert (ip.version, ip.ihl, ip.tos, ip.ttl, ip.proto, ip.len, ip.flags, ip.frag) == (
            4, 5, job.desc["tos"], path.ttl, 17, 20 + udp_len, "DF", 0)
        fresh = ip.copy()
        fresh.chksum = None
        assert IP(raw(fresh)).chksum == ip.chksum, "IPv4 header checksum"
    udp = pkt[UDP]
    assert (udp.sport, udp.dport, udp.len, udp.chksum) == (path.sport, 4791, udp_len, 0)
    bth = pkt[BTH]
    assert (bth.opcode, bth.solicited, bth.migreq, bth.padcount, bth.version, bth.pkey) == (
        job.opcode, v["solicited"], v["migreq"], pad, 0, v["pkey"])
    assert (bth.fecn, bth.becn, bth.resv6, bth.dqpn, bth.ackreq, bth.resv7, bth.psn) == (
        v["fecn"], v["becn"], 0, v["dqpn"], v["ackreq"], 0, v["psn"])
    if job.opcode == Opcode.RC_ACKNOWLEDGE:
        from scapy.contrib.roce import AETH
        assert (pkt[AETH].syndrome, pkt[AETH].msn) == (v["aeth_syndrome"], v["aeth_msn"])
    # The tail (extension headers, payload, pad) ends with the payload and the pad zeros.
    tail = raw(bth.payload)
    assert len(tail) == ext_len + len(job.payload) + pad
    assert tail[ext_len:] == job.payload + bytes(pad)
    # scapy recomputes the ICRC itself when the field is None.
    again = Ether(out)
    again[BTH].icrc = None
    assert raw(again) == out, "scapy computes a different ICRC"


def jobs_all_opcodes(rng: random.Random, kw: int, rounds: int = 1) -> list[Job]:
    """Every opcode, IPv4 and IPv6, random payload lengths (0..2100) and header values, plus
    lengths around the beat and pad boundaries, and a few frames whose payload has tuser set."""
    jobs = []
    for _ in range(rounds):
        for opcode in sorted(OPCODES):
            for ipv6 in (False, True):
                plen = rng.choice((rng.randrange(0, 2101), rng.randrange(0, 3 * kw + 4)))
                jobs.append(make_job(rng, opcode, ipv6, plen))
    edge = sorted({0, 1, 2, 3, 4, 5, 7, kw - 3, kw - 2, kw - 1, kw, kw + 1, kw + 2, 2 * kw - 1,
                   2 * kw + 3, 1024, 2100})
    payload_ops = [op for op in sorted(OPCODES) if OPCODES[op].has_payload]
    for plen in edge:
        for ipv6 in (False, True):
            jobs.append(make_job(rng, rng.choice(payload_ops), ipv6, plen))
    for _ in range(3):
        jobs.append(make_job(rng, rng.choice(payload_ops), rng.random() < 0.5,
                             rng.randrange(1, 300), tuser=1))
    rng.shuffle(jobs)
    return jobs


async def run_jobs(tb: TB, jobs: list[Job]) -> None:
    for job in jobs:
        await tb.send(job)
    for n, job in enumerate(jobs):
        out, tuser = await tb.recv()
        want = tb.expected(job)
        assert out == want, (f"frame {n} ({Opcode(job.opcode).name}, ipv6={job.path.ipv6}, "
                             f"{len(job.payload)} payload bytes):\n got {out.hex()}\nwant "
                             f"{want.hex()}")
        assert tuser == job.tuser, f"frame {n}: tuser {tuser}, want {job.tuser}"
        if tb.with_icrc:
            check_parsed(job, out)
            check_scapy(job, out)


@cocotb.test()
async def all_opcodes_with_backpressure(dut):
    """Every opcode x IPv4/IPv6 against FrameBuilder, under random backpressure and idle
    cycles on both inputs; then again with no pauses at all."""
    tb = TB(dut)
    rng = random.Random(SEED)
    await tb.reset()
    tb.set_pauses(rng, hdr=0.3, src=0.3, sink=0.4)
    await run_jobs(tb, jobs_all_opcodes(rng, tb.kw, rounds=2))
    tb.set_pauses(rng, hdr=0.6, src=0.1, sink=0.1)
    await run_jobs(tb, jobs_all_opcodes(rng, tb.kw)[:40])
    tb.set_pauses(rng, hdr=0.05, src=0.5, sink=0.05)
    await run_jobs(tb, jobs_all_opcodes(rng, tb.kw)[:40])
    tb.set_pauses(None)
    await run_jobs(tb, jobs_all_opcodes(rng, tb.kw)[:40])
    assert tb.hdr.empty() and tb.src.empty()


@cocotb.test()
async def back_to_back_throughput(dut):
    """No pauses anywhere: the output carries one beat per cycle, with no idle cycle inside a
    frame or between frames, for fixed-size groups and a random mix."""
    tb = TB(dut)
    rng = random.Random(SEED + 1)
    await tb.reset()
    groups: list[tuple[str, list[Job]]] = []
    for opcode, ipv6, plen, count in (
            (Opcode.RC_ACKNOWLEDGE, False, 0, 24),
            (Opcode.RC_RDMA_READ_REQUEST, True, 0, 24),
            (Opcode.RC_SEND_ONLY, False, 63, 16),
            (Opcode.RC_RDMA_WRITE_ONLY, True, 256, 12),
            (Opcode.RC_RDMA_READ_RESPONSE_MIDDLE, False, 1024, 6),
            (Opcode.UD_SEND_ONLY_WITH_IMMEDIATE, True, 2048, 4)):
        path = make_path(rng, ipv6)
        groups.append((Opcode(opcode).name,
                       [make_job(rng, opcode, ipv6, plen, path=path) for _ in range(count)]))
    mixed = [make_job(rng, rng.choice(sorted(OPCODES)), rng.random() < 0.5,
                      rng.randrange(0, 700)) for _ in range(24)]
    groups.append(("mixed", mixed))

    bench = os.environ.get("HDL_BENCH_OUT")
    for name, jobs in groups:
        first = len(tb.beats)
        await run_jobs(tb, jobs)
        beats = tb.beats[first:]
        cycles = beats[-1][0] - beats[0][0] + 1
        sizes = [len(tb.expected(job)) for job in jobs]
        ideal = sum(-(-size // tb.kw) for size in sizes)
        tb.log.info("%s: %d packets, %d cycles, ideal %d, %.2f cycles/packet", name, len(jobs),
                    cycles, ideal, cycles / len(jobs))
        assert len(beats) == ideal, f"{name}: {len(beats)} beats, want {ideal}"
        assert cycles == ideal, f"{name}: {cycles} cycles for {ideal} beats"
        if bench and name != "mixed":
            with open(bench, "a") as f:
                f.write(json.dumps({"block": tb.toplevel, "data_width": tb.kw * 8,
                                    "frame_bytes": sizes[0], "packets": len(jobs),
                                    "cycles": cycles, "ideal_cycles": ideal}) + "\n")


# --- pytest -----------------------------------------------------------------------------------


@pytest.mark.parametrize("data_width", [64, 512])
def test_roce_tx_framer(data_width):
    from hdl_tb.cocotb_run import run

    run("roce_tx_framer", ["roce_tx_framer.v"], "test_tx_framer", {"DATA_WIDTH": data_width})


@pytest.mark.parametrize("data_width", [64, 512])
def test_roce_tx(data_width):
    from hdl_tb.cocotb_run import roce_tx_sources, run

    run("roce_tx", roce_tx_sources(), "test_tx_framer", {"DATA_WIDTH": data_width})
