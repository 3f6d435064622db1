"""Co-simulation: host a's NIC is the RTL (hdl_tb/rtl/roce_nic.v), host b's the SimPy model, one
nicsim world (nicsim.cosim): the unchanged driver and verbs on both hosts, a 100 Gb/s cable
with a pcap tap between the RTL's MAC streams and the model's port, the RTL's DMA served from
host a's memory with PCIe timing, the two simulators coupled by nicsim.cosim.clock.

test_rtl_to_model: RDMA WRITE (one packet, many packets, many pages, several SGEs), RDMA WRITE
with immediate, SEND and SEND with immediate from the RTL to the model: host b's memory must
hold the bytes exactly, its receive completions must say what was sent, host a's send
completions (the RTL's completer, from the model's ACKs) must come in order with the right
opcodes and lengths, the pcap must hold the frames, and nothing may have crossed between the
simulators late. test_loss_recovery, test_retry_exhausted, test_remote_access_nak: the RTL's
requester and completer against loss, a dead link and a NAK from the model.

test_model_to_rtl*: the model as requester towards the RTL's responder: WRITEs, WRITE with
immediate and SENDs (scattered over receive buffers) byte-exact in host a's memory with the
right receive completions; the same over a lossy link; a SEND too long for its buffers; a
hostile WRITE (valid ICRC, bad rkey or out of bounds): NAK, nothing written.
"""

from __future__ import annotations

import json
import os
import random
import time

import cocotb
import pytest
from cocotb.task import bridge

from hdl_tb.cosim_bench import (
    Side,
    ack_timeout,
    assert_mac_ok,
    run_program,
    seed_offset,
    speed_line,
    stress,
)
from hdl_tb.nic_bench import TOPLEVEL
from nicsim import hwif
from nicsim.cosim.build import PARAMS_ENV
from nicsim.cosim.build import roce_nic_params as bench_params
from nicsim.cosim.rtl_nic import rtl_counters as counters

SEED = 11 + seed_offset()  # (NICSIM_SEED)
SPOOF_AT = 15 * 4096 + 3000   # a's MR: no job writes here


def rtl_to_model(w, seed: int, timeout: int = 14, retry_cnt: int = 7,  # noqa: ANN001
                 njobs: int = 99, bad_rkey: int = -1) -> dict:
    """Driver program: WRITE / WRITE_IMM / SEND / SEND_IMM from a (RTL) to b (model). The
    first `njobs` jobs; job `bad_rkey` gets a wrong rkey."""
    from nicsim.driver import enums as e
    from nicsim.driver.user.verbs import SGE, RecvWR, SendWR

    from nicsim.cosim import boot_rtl_host

    boot_rtl_host(w)
    ha, hb = w.hosts["a"], w.hosts["b"]
    rng = random.Random(seed)
    size = 6 * 4096
    acc = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
    a, b = Side(ha, size, acc), Side(hb, 2 * size, acc)
    a.connect(b, "10.0.0.2", e.IBV_MTU_1024, psn=0xFFFFFA, timeout=timeout,
              retry_cnt=retry_cnt)
    b.connect(a, "10.0.0.1", e.IBV_MTU_1024, psn=0xFFFFFA)
    src = rng.randbytes(size)
    a.mr.write(src, size)
    b.mr.write(bytes(2 * size), 2 * size)
    expect: list[tuple[int, bytes]] = []  # (offset in b's MR, bytes)
    recvs: list[tuple[int, int, int]] = []  # (wr_id, byte_len, imm or -1)
    W, WI, S, SI = (e.IBV_WR_RDMA_WRITE, e.IBV_WR_RDMA_WRITE_WITH_IMM, e.IBV_WR_SEND,
                    e.IBV_WR_SEND_WITH_IMM)
    jobs = [  # (opcode, [(offset in a's MR, length)], offset in b's MR)
        (W, [(0, 64)], 0),
        (W, [(100, 3000)], 4096 + 7),
        (W, [(5, 4096 * 3 + 1)], 3 * 4096 + 1),     # many pages on both sides
        (W, [(1, 10), (9000, 700), (20000, 2000)], 8 * 4096 - 3),
        (WI, [(333, 2049)], 9 * 4096),
        (S, [(17, 1500)], 10 * 4096),
        (SI, [(4000, 100), (50, 60)], 11 * 4096 + 100),
        (S, [], 11 * 4096 + 999),                   # an empty SEND
    ][:njobs]
    recv_off = {}
    for i, (op, sges, off) in enumerate(jobs):
        if op != W:  # these consume a receive WQE at b (SEND: its buffer is the target)
            n = sum(ln for _o, ln in sges)
            sg = [SGE(b.mr.buf + off, max(n, 1), b.mr.lkey)] if op in (S, SI) else []
            b.qp.post_recv(RecvWR(wr_id=500 + i, num_sge=len(sg), sg=sg))
            recv_off[i] = off
    for i, (op, sges, off) in enumerate(jobs):
        data = b"".join(src[o:o + ln] for o, ln in sges)
        sg = [SGE(a.mr.buf + o, ln, a.mr.lkey) for o, ln in sges]
        wr = SendWR(wr_id=i, opcode=op, num_sge=len(sg), sg=sg or None, imm_data=0x1000 + i)
        wr.set_wr_rdma(b.mr.rkey ^ (0x80 if i == bad_rkey else 0), b.mr.buf + off)
        a.qp.post_send(wr)
        expect.append((off, data if bad_rkey < 0 else bytes(len(data))))
        if op != W:
            recvs.append((500 + i, len(data) if op != WI else len(data),
                          0x1000 + i if op in (WI, SI) else -1))
    # b's receive completions arrive as the messages land; plain WRITEs complete nothing at b
    got = []
    for _ in range(200):
        _n, wcs = b.cq.poll(16)
        got += [(wc.wr_id, wc.status, wc.opcode, wc.byte_len, wc.imm_data, wc.wc_flags)
                for wc in wcs]
        if len(got) >= len(recvs) or bad_rkey >= 0 or retry_cnt < 7:
            break
    # a's send completions: the RTL's completer turns b's ACKs into CQEs
    sent = []
    for _ in range(400):
        _n, wcs = a.cq.poll(16)
        sent += [(wc.wr_id, wc.status, wc.opcode, wc.byte_len, wc.qp_num, wc.vendor_err)
                 for wc in wcs]
        if len(sent) >= len(jobs):
            break
    hb.spend(20_000.0)  # the last WRITE's data lands
    mem = b.mr.read(2 * size)
    bad = [(off, len(d)) for off, d in expect if mem[off:off + len(d)] != d]
    want_sent = [(i, e.IBV_WC_SUCCESS, e.IBV_WC_RDMA_WRITE if op in (W, WI) else e.IBV_WC_SEND,
                  sum(ln for _o, ln in sges), a.qp.qp_num, 0)
                 for i, (op, sges, _off) in enumerate(jobs)]
    hw_qpc = a.ctx.file.dev.hw.query_qp(a.qp.qp_num)  # QUERY_QP, as the device says
    return {"got": got, "recvs": recvs, "bad": bad, "bytes": sum(len(d) for _o, d in expect),
            "sim_ns": w.env.now, "n_jobs": len(jobs), "sent": sent, "want_sent": want_sent,
            "hw_state": hw_qpc.state, "qpc": hw_qpc}


@cocotb.test(skip=TOPLEVEL != "roce_nic")
async def test_rtl_to_model(dut):
    """WRITEs, WRITE with immediate and SENDs from the RTL land in the model host byte-exact;
    the model judges every frame strictly (nicsim.cosim.strict): none breaks the protocol."""
    from nicsim.cosim import StrictChecker, cosim_world

    pcap = os.path.join(os.environ.get("COSIM_PCAP_DIR", "."), "cosim_rtl_to_model.pcap")
    w, rtl = cosim_world(dut, seed=SEED, pcap=pcap)
    strict = StrictChecker(w.nics["b"])  # raises ProtocolViolation out of the program
    rtl.mac.keep_sent = True
    await rtl.reset()
    stress(rtl, SEED)
    rtl.clock.couple(w.env)
    t0 = time.perf_counter()
    res = await bridge(rtl_to_model)(w, SEED)
    wall = time.perf_counter() - t0
    w.close()
    speed_line(dut, rtl, "clean link", res, wall)
    assert_mac_ok(rtl.mac.counters)
    strict.check()
    assert strict.frames > 0 and not strict.violations, strict.violations

    assert_delivered(res)
    assert rtl.clock.late == 0, f"{rtl.clock.late} effects crossed late"
    from scapy.utils import rdpcap

    frames = [bytes(p) for p in rdpcap(pcap)]
    sent = set(rtl.mac.sent)
    assert sent and sent <= set(frames), "the pcap lacks frames the RTL sent"
    dut._log.info("%d bytes in %d messages RTL -> model, byte-exact; %d frames sent by the "
                  "RTL, %d in the pcap", res["bytes"], res["n_jobs"], len(sent), len(frames))


def assert_delivered(res: dict) -> None:
    """rtl_to_model's result: b's memory holds every message, b's receive completions and a's
    send completions are the ones expected."""
    from nicsim.driver import enums as e

    assert not res["bad"], f"regions of b's memory differ: {res['bad']}"
    want = sorted((wr_id, e.IBV_WC_SUCCESS, n, imm) for wr_id, n, imm in res["recvs"])
    got = sorted((wr_id, st, n, imm if flags & e.IBV_WC_WITH_IMM else -1)
                 for wr_id, st, _op, n, imm, flags in res["got"])
    assert got == want, (got, want)
    assert res["sent"] == res["want_sent"], (res["sent"], res["want_sent"])


# Built with BUG_TX_CUT_THROUGH (test_strict_mac_sees_an_underrun): roce_nic without its
# transmit FIFO, its frames straight from the framer to the MAC.
CUT_THROUGH = os.environ.get("COSIM_BUG") == "BUG_TX_CUT_THROUGH"


@cocotb.test(skip=TOPLEVEL != "roce_nic")
async def test_rtl_to_model_dma_stalls(dut):
    """The DMA's read data stalls at random, half the cycles, while the RTL sends: its frames
    still leave back to back (the transmit FIFO has each one whole before it starts), so the
    strict MAC sees no underrun, and every message lands as on a clean link. Without the
    FIFO (CUT_THROUGH) the same stalls leave gaps inside frames: the MAC aborts them."""

    def program(w, seed, _bad):  # noqa: ANN001, ANN202
        if CUT_THROUGH:  # (aborted frames are lost: fail fast)
            return rtl_to_model(w, seed, timeout=1, retry_cnt=1, njobs=3)
        return rtl_to_model(w, seed)

    res = await run_program(dut, program, "RTL -> model, DMA read stalls", SEED + 20,
                            stall=("R", 0.5), mac_ok=not CUT_THROUGH)
    if CUT_THROUGH:
        assert res["mac"]["tx_underrun"] > 0, res["mac"]
        return
    assert_delivered(res)


@cocotb.test(skip=TOPLEVEL != "roce_nic")
async def test_loss_recovery(dut):
    """Loss and corruption on the link both ways: the RTL's go-back-N (NAKs, transport timer)
    gets every message through; b's memory exact, a's completions all SUCCESS, in order."""
    from nicsim.cosim import cosim_world
    from nicsim.fabric.faults import FaultConfig

    faults = FaultConfig(loss=0.06, corrupt=0.04, seed=5)
    w, rtl = cosim_world(dut, seed=SEED + 1, faults=faults)
    await rtl.reset()
    stress(rtl, SEED)
    rtl.clock.couple(w.env)
    t0 = time.perf_counter()
    res = await bridge(rtl_to_model)(w, SEED + 1, 1, 7)   # timeout 1: 8.2 us
    wall = time.perf_counter() - t0
    w.close()
    speed_line(dut, rtl, "lossy link", res, wall)
    assert not res["bad"], f"regions of b's memory differ: {res['bad']}"
    assert res["sent"] == res["want_sent"], (res["sent"], res["want_sent"])
    faults_seen = w.links[0].fault_counters()
    c = counters(dut)
    dut._log.info("faults %s", faults_seen)
    assert faults_seen["lost"] + faults_seen["corrupted"] > 0
    assert c["req_resent"] > 0 and c["comp_resends"] > 0, c


@cocotb.test(skip=TOPLEVEL != "roce_nic")
async def test_retry_exhausted(dut):
    """Nothing gets through: after retry_cnt resends the oldest WR completes RETRY_EXC_ERR,
    the next is flushed, the QP is in ERR."""
    from nicsim.driver import enums as e

    from nicsim.cosim import cosim_world
    from nicsim.fabric.faults import FaultConfig

    w, rtl = cosim_world(dut, seed=SEED + 2, faults=FaultConfig(loss=1.0, seed=1))
    await rtl.reset()
    stress(rtl, SEED)
    rtl.clock.couple(w.env)
    t0 = time.perf_counter()
    res = await bridge(rtl_to_model)(w, SEED + 2, 1, 2, 2)   # timeout 1, retry_cnt 2, 2 WRs
    wall = time.perf_counter() - t0
    w.close()
    speed_line(dut, rtl, "dead link", res, wall)
    st = [(x[0], x[1], x[5]) for x in res["sent"]]
    assert st == [(0, e.IBV_WC_RETRY_EXC_ERR, 0x40), (1, e.IBV_WC_WR_FLUSH_ERR, 0x50)], st
    assert res["hw_state"] == hwif.QpState.ERR, res["qpc"]
    assert counters(dut)["comp_timeouts"] == 3


@cocotb.test(skip=TOPLEVEL != "roce_nic")
async def test_remote_access_nak(dut):
    """A WRITE from the RTL with a bad rkey: the model NAKs it (remote access error), the WR
    completes REM_ACCESS_ERR, the one after it is flushed, b's memory is untouched."""
    from nicsim.driver import enums as e

    from nicsim.cosim import cosim_world

    w, rtl = cosim_world(dut, seed=SEED + 3)
    await rtl.reset()
    stress(rtl, SEED)
    rtl.clock.couple(w.env)
    t0 = time.perf_counter()
    res = await bridge(rtl_to_model)(w, SEED + 3, 14, 7, 3, 1)  # job 1 (of 3): bad rkey
    wall = time.perf_counter() - t0
    w.close()
    speed_line(dut, rtl, "bad rkey", res, wall)
    st = [(x[0], x[1], x[5]) for x in res["sent"]]
    assert st == [(0, e.IBV_WC_SUCCESS, 0), (1, e.IBV_WC_REM_ACCESS_ERR, 0x30),
                  (2, e.IBV_WC_WR_FLUSH_ERR, 0x50)], st
    assert res["bad"] == [(0, 64)], res["bad"]  # job 0 landed; jobs 1, 2 did not
    assert res["hw_state"] == hwif.QpState.ERR, res["qpc"]


def model_to_rtl(w, seed: int, bad: str = "", rtl: bool = True) -> dict:  # noqa: ANN001
    """Driver program: RDMA WRITEs, WRITE with immediate and SENDs from b (model) to a (RTL).
    `bad`: "rkey" (job 1 with a wrong rkey) or "bounds" (job 1 one byte past a's MR): the
    RTL must NAK it (remote access error) and write nothing; "short" (the first SEND's receive
    buffer 10 bytes short): NAK invalid request, the receive WQE completes LOC_LEN_ERR; "rnr":
    a posts its receive WQEs 30 us after b's WRs (RNR NAKs, b retries after the timer);
    "spoof": before b's WRs, a WRITE at the expected PSN with a valid ICRC and rkey but from
    another IP address (the RTL must drop it: nothing written, nothing answered).
    `rtl` False: host a is the model too (the reference run)."""
    from nicsim.driver import enums as e
    from nicsim.driver.user.verbs import SGE, RecvWR, SendWR

    from nicsim.cosim import boot_rtl_host

    if rtl:
        boot_rtl_host(w)
    ha, hb = w.hosts["a"], w.hosts["b"]
    rng = random.Random(seed)
    size = 16 * 4096
    acc = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
    a, b = Side(ha, size, acc), Side(hb, size, acc)
    a.connect(b, "10.0.0.2", e.IBV_MTU_1024, psn=0xFFFFFA)
    b.connect(a, "10.0.0.1", e.IBV_MTU_1024, psn=0xFFFFFA, timeout=ack_timeout(w))
    src = rng.randbytes(size)
    b.mr.write(src, size)
    before = rng.randbytes(size)       # a's MR starts with noise: untouched bytes must stay
    a.mr.write(before, size)
    W, WI, S, SI = (e.IBV_WR_RDMA_WRITE, e.IBV_WR_RDMA_WRITE_WITH_IMM, e.IBV_WR_SEND,
                    e.IBV_WR_SEND_WITH_IMM)
    pg = 4096
    jobs = [  # (opcode, [(offset in b's MR, length)], WRITE: offset in a's MR, SEND: a's
        #        receive buffers [(offset in a's MR, length)])
        (W, [(0, 64)], 0),
        (W, [(100, 3000)], pg + 7),                 # three packets, unaligned
        (W, [(5, pg * 3 + 1)], 3 * pg + 1),         # many pages on both sides
        (W, [(1, 10), (9000, 700), (20000, 2000)], 8 * pg - 3),
        (WI, [(333, 2049)], 9 * pg),
        (W, [(7, 1)], 10 * pg + 3),                 # one byte
        (WI, [], 10 * pg + 100),                    # immediate only, nothing placed
        (W, [(pg, 1024)], 11 * pg),                 # exactly one MTU
        (S, [(17, 1500)], [(12 * pg + 5, 1600)]),   # two packets into one buffer
        (SI, [(4000, 100), (50, 60)],               # scattered over three buffers, one empty
         [(13 * pg, 50), (13 * pg + 100, 0), (13 * pg + 200, 30), (13 * pg + 1000, 500)]),
        (S, [(6000, 5000)],                         # five packets, a buffer ends mid-packet
         [(14 * pg - 100, 3000), (15 * pg + 10, 2500)]),
        (S, [], [(13 * pg + 3000, 8)]),             # an empty SEND
    ]
    first_send = next(i for i, j in enumerate(jobs) if j[0] in (S, SI))
    late_recvs: list = []  # "rnr": posted only once the SENDs have been NAKed RNR
    expect = bytearray(before)
    recvs: list[tuple[int, int, int, int]] = []  # (wr_id, status, byte_len, imm)
    for i, (op, sges, tgt) in enumerate(jobs):
        data = b"".join(src[o:o + ln] for o, ln in sges)
        if op in (S, SI):
            bufs = list(tgt)
            if bad == "short" and i == first_send:
                bufs[-1] = (bufs[-1][0], bufs[-1][1] - (sum(ln for _o, ln in bufs) - len(data))
                            - 10)
            sg = [SGE(a.mr.buf + o, ln, a.mr.lkey) for o, ln in bufs]
            late_recvs.append(RecvWR(wr_id=700 + i, num_sge=len(sg), sg=sg))
        elif op == WI:
            late_recvs.append(RecvWR(wr_id=700 + i, num_sge=0, sg=[]))
        if bad != "rnr":
            for r in late_recvs:
                a.qp.post_recv(r)
            late_recvs.clear()
        if bad == "short" and i == first_send:  # its first packet lands, the second fails
            expect[tgt[0][0]:tgt[0][0] + 1024] = data[:1024]
        if bad in ("rkey", "bounds", "short") and i >= (1 if bad != "short" else first_send):
            continue
        if op in (S, SI):
            rest = data
            for o, ln in tgt:
                expect[o:o + min(ln, len(rest))] = rest[:ln]
                rest = rest[ln:]
        else:
            expect[tgt:tgt + len(data)] = data
        if op != W:
            recvs.append((700 + i, e.IBV_WC_SUCCESS, len(data),
                          0x2000 + i if op in (WI, SI) else -1))
    if bad == "spoof":
        from nicsim.wire import FrameBuilder, Opcode, Path, reth, roce_udp_sport

        cable, end_b = w.ports["b.eth0"]
        fb = FrameBuilder(Path(bytes.fromhex("02000000000b"), bytes.fromhex("02000000000a"),
                               bytes([10, 0, 0, 99]), bytes([10, 0, 0, 1]),
                               roce_udp_sport(b.qp.qp_num, a.qp.qp_num)))
        frame = fb.build(Opcode.RC_RDMA_WRITE_ONLY, a.qp.qp_num, 0xFFFFFA,
                         reth(a.mr.buf + SPOOF_AT, a.mr.rkey, 64), b"\xee" * 64, ackreq=True)
        cable.carry(frame, end_b, w.env.now)
        hb.spend(5_000.0)
    for i, (op, sges, tgt) in enumerate(jobs):
        sg = [SGE(b.mr.buf + o, ln, b.mr.lkey) for o, ln in sges]
        wr = SendWR(wr_id=i, opcode=op, num_sge=len(sg), sg=sg or None, imm_data=0x2000 + i)
        if op in (W, WI):
            n = sum(ln for _o, ln in sges)
            rkey, addr = a.mr.rkey, a.mr.buf + tgt
            if i == 1 and bad == "rkey":
                rkey ^= 0x80
            if i == 1 and bad == "bounds":
                addr = a.mr.buf + size - n + 1
            wr.set_wr_rdma(rkey, addr)
        b.qp.post_send(wr)
    if late_recvs:
        ha.spend(30_000.0)  # the WRITE with immediate meets an empty RQ: RNR NAK, retries
        for r in late_recvs:
            a.qp.post_recv(r)
    sent = []
    for _ in range(400):
        _n, wcs = b.cq.poll(16)
        sent += [(wc.wr_id, wc.status, wc.vendor_err) for wc in wcs]
        if len(sent) >= len(jobs):
            break
    got = []
    nrecv = sum(op != W for op, _s, _t in jobs)
    for _ in range(200):
        _n, wcs = a.cq.poll(16)
        got += [(wc.wr_id, wc.status, wc.byte_len,
                 wc.imm_data if wc.wc_flags & e.IBV_WC_WITH_IMM else -1, wc.opcode)
                for wc in wcs]
        if len(got) >= nrecv:
            break
        ha.spend(5_000.0)
    mem = a.mr.read(size)
    bad_at = [(i, sum(x != y for x, y in zip(mem[i:i + 64], expect[i:i + 64], strict=True)),
               next(j for j in range(64) if mem[i + j] != expect[i + j]))
              for i in range(0, size, 64) if mem[i:i + 64] != expect[i:i + 64]]
    hw_qpc = a.ctx.file.dev.hw.query_qp(a.qp.qp_num)
    want_op = [e.IBV_WC_RECV_RDMA_WITH_IMM if op == WI else e.IBV_WC_RECV
               for op, _s, _t in jobs if op != W]
    return {"sent": sent, "got": got, "recvs": recvs, "bad_at": bad_at, "n_jobs": len(jobs),
            "bytes": sum(ln for _op, s, _o in jobs for _x, ln in s), "sim_ns": w.env.now,
            "hw_state": hw_qpc.state, "want_op": want_op, "first_send": first_send}


@cocotb.test(skip=TOPLEVEL != "roce_nic")
async def test_model_to_rtl(dut):
    """WRITEs, WRITEs with immediate and SENDs from the model land in the RTL host's memory
    byte-exact (nothing else changes; SENDs scattered over the receive WQE's buffers), the
    RTL's responder ACKs them (b's completions all SUCCESS), WRITE with immediate and SEND
    consume receive WQEs in order with the right opcode, length and immediate in the CQE,
    every frame in the pcap has a valid ICRC, and the RTL's ACKs are byte for byte those the
    model sends for the same traffic."""
    from nicsim.driver import enums as e

    pcap = os.path.join(os.environ.get("COSIM_PCAP_DIR", "."), "cosim_model_to_rtl.pcap")
    res = await run_program(dut, model_to_rtl, "model -> RTL", SEED + 4, pcap=pcap)
    assert not res["bad_at"], f"a's memory differs at {res['bad_at'][:8]}"
    assert res["sent"] == [(i, e.IBV_WC_SUCCESS, 0) for i in range(res["n_jobs"])], res["sent"]
    assert [g[:4] for g in res["got"]] == res["recvs"], (res["got"], res["recvs"])
    assert [g[4] for g in res["got"]] == res["want_op"], res["got"]
    assert res["late"] == 0
    c = counters(dut)
    assert c["resp_naks"] == 0 and c["resp_acks"] > 0, c
    from scapy.utils import rdpcap

    from nicsim.wire.packet import parse

    frames = [bytes(p) for p in rdpcap(pcap)]
    ops = [parse(f).opcode for f in frames]  # raises WireError on a bad ICRC or header
    assert 0x11 in ops and 0x0A in ops, ops  # the RTL's ACKs, the model's WRITE ONLYs
    # The same program with the model as host a's NIC: a's ACKs byte for byte the same
    # (headers, PSNs, MSNs, credit counts, coalescing points, ICRC)
    from nicsim.cosim.world import MAC_A
    from nicsim.world import World

    mpcap = os.path.join(os.path.dirname(pcap), "model_model_to_rtl.pcap")
    mw = World.two_hosts(SEED + 4, pcap=mpcap)
    ref = model_to_rtl(mw, SEED + 4, rtl=False)
    mw.close()
    assert not ref["bad_at"] and ref["got"] == res["got"], (ref["got"], res["got"])
    mac_a = bytes.fromhex(MAC_A.replace(":", ""))
    model_acks = [bytes(p) for p in rdpcap(mpcap) if bytes(p)[6:12] == mac_a]
    assert model_acks and res["rtl_sent"] == model_acks, (len(res["rtl_sent"]), len(model_acks))
    dut._log.info("%d bytes in %d messages model -> RTL, byte-exact; %d frames",
                  res["bytes"], res["n_jobs"], len(frames))


@cocotb.test(skip=TOPLEVEL != "roce_nic")
async def test_model_to_rtl_loss(dut):
    """Loss and corruption both ways while the model WRITEs into the RTL: the RTL's sequence
    NAKs and duplicate ACKs let the model's go-back-N finish every WRITE, byte-exact."""
    from nicsim.driver import enums as e

    from nicsim.fabric.faults import FaultConfig

    res = await run_program(dut, model_to_rtl, "model -> RTL, lossy", SEED + 5,
                            faults=FaultConfig(loss=0.06, corrupt=0.04, seed=9))
    assert not res["bad_at"], f"a's memory differs at {res['bad_at'][:8]}"
    assert res["sent"] == [(i, e.IBV_WC_SUCCESS, 0) for i in range(res["n_jobs"])], res["sent"]
    assert [g[:4] for g in res["got"]] == res["recvs"], (res["got"], res["recvs"])
    assert res["faults"]["lost"] + res["faults"]["corrupted"] > 0, res["faults"]


@cocotb.test(skip=TOPLEVEL != "roce_nic")
async def test_model_to_rtl_spoofed_source(dut):
    """A WRITE with a valid ICRC, rkey and PSN from an IP address that is not the QP's peer:
    the RTL drops it without a word (nothing written, no ACK, the expected PSN unchanged), and
    the peer's own traffic then completes as on a clean run."""
    from nicsim.driver import enums as e

    res = await run_program(dut, model_to_rtl, "model -> RTL, spoofed source", SEED + 10,
                            bad="spoof")
    assert not res["bad_at"], f"a's memory differs at {res['bad_at'][:8]}"
    assert res["sent"] == [(i, e.IBV_WC_SUCCESS, 0) for i in range(res["n_jobs"])], res["sent"]
    c = counters(dut)
    assert c["resp_dropped"] == 1 and c["resp_naks"] == 0, c
    assert res["rtl_sent"] and all(f[6:12] == bytes.fromhex("02000000000a")
                                   for f in res["rtl_sent"])
    # the first frame the RTL sent acknowledges b's first WRITE
    from nicsim.wire.packet import parse

    first = parse(res["rtl_sent"][0])
    assert first.opcode == 0x11 and first.psn == 0xFFFFFA and first.aeth_msn == 1, first


@cocotb.test(skip=TOPLEVEL != "roce_nic")
async def test_model_to_rtl_rnr(dut):
    """The RTL host posts its receive WQEs late: the RTL answers the WRITE with immediate with
    RNR NAKs (its min_rnr_timer) until they are there, the model retries after the timer, and
    everything completes as on a clean run."""
    from nicsim.driver import enums as e

    res = await run_program(dut, model_to_rtl, "model -> RTL, RNR", SEED + 9, bad="rnr")
    assert not res["bad_at"], f"a's memory differs at {res['bad_at'][:8]}"
    assert res["sent"] == [(i, e.IBV_WC_SUCCESS, 0) for i in range(res["n_jobs"])], res["sent"]
    assert [g[:4] for g in res["got"]] == res["recvs"], (res["got"], res["recvs"])
    c = counters(dut)
    assert c["resp_naks"] > 0 and c["resp_duplicates"] == 0, c


async def hostile_write(dut, bad: str, seed: int) -> None:  # noqa: ANN001
    """b's second WRITE carries a valid ICRC but `bad` target: the RTL NAKs it (remote access
    error): b's WR completes REM_ACCESS_ERR, the rest are flushed, a's memory holds only the
    first WRITE, a's QP is in ERR."""
    from nicsim.driver import enums as e

    res = await run_program(dut, model_to_rtl, f"model -> RTL, bad {bad}", seed, bad=bad)
    st = res["sent"]
    assert st[:2] == [(0, e.IBV_WC_SUCCESS, 0), (1, e.IBV_WC_REM_ACCESS_ERR, 0x30)], st
    assert all(s[1] == e.IBV_WC_WR_FLUSH_ERR for s in st[2:]) and len(st) == res["n_jobs"], st
    assert not res["bad_at"], f"a's memory changed at {res['bad_at'][:8]}"
    assert res["hw_state"] == hwif.QpState.ERR
    # a's receive WQEs (for the immediates) are flushed
    assert res["got"] and all(g[1] == e.IBV_WC_WR_FLUSH_ERR for g in res["got"]), res["got"]
    assert counters(dut)["resp_naks"] == 1


@cocotb.test(skip=TOPLEVEL != "roce_nic")
async def test_model_to_rtl_send_too_long(dut):
    """A SEND longer than the RTL host's receive buffers: the RTL NAKs it (invalid request):
    b's WR completes REM_INV_REQ_ERR, a's receive WQE LOC_LEN_ERR with the bytes placed (one
    MTU), the WQEs after it are flushed on both sides, a's QP is in ERR."""
    from nicsim.driver import enums as e

    res = await run_program(dut, model_to_rtl, "model -> RTL, SEND too long", SEED + 8, bad="short")
    k = res["first_send"]
    st = res["sent"]
    assert st[:k] == [(i, e.IBV_WC_SUCCESS, 0) for i in range(k)], st
    assert st[k] == (k, e.IBV_WC_REM_INV_REQ_ERR, 0x30), st
    assert all(x[1] == e.IBV_WC_WR_FLUSH_ERR for x in st[k + 1:]), st
    got = [g[:3] for g in res["got"]]
    assert got[:3] == [(704, e.IBV_WC_SUCCESS, 2049), (706, e.IBV_WC_SUCCESS, 0),
                       (700 + k, e.IBV_WC_LOC_LEN_ERR, 1024)], got
    assert all(g[1] == e.IBV_WC_WR_FLUSH_ERR for g in got[3:]) and len(got) == 6, got
    assert not res["bad_at"], f"a's memory differs at {res['bad_at'][:8]}"
    assert res["hw_state"] == hwif.QpState.ERR


@cocotb.test(skip=TOPLEVEL != "roce_nic")
async def test_model_to_rtl_rx_overrun(dut):
    """Host a's memory takes write data only one cycle in twenty: the RTL's receive path
    backs up behind its DMA writes, and its receive FIFO, which the MAC cannot hold off, drops
    whole frames and counts them (no beat is lost at the MAC); the model sends them again and
    everything lands as on a clean link."""
    from nicsim.driver import enums as e

    res = await run_program(dut, model_to_rtl, "model -> RTL, receive overrun", SEED + 21,
                            stall=("W", 0.95))
    c = counters(dut)
    assert c["rx_fifo_drops"] > 0, c
    assert not res["bad_at"], f"a's memory differs at {res['bad_at'][:8]}"
    assert res["sent"] == [(i, e.IBV_WC_SUCCESS, 0) for i in range(res["n_jobs"])], res["sent"]
    assert [g[:4] for g in res["got"]] == res["recvs"], (res["got"], res["recvs"])


@cocotb.test(skip=TOPLEVEL != "roce_nic")
async def test_model_to_rtl_bad_rkey(dut):
    """A WRITE with a wrong rkey into the RTL: NAK remote access, nothing written."""
    await hostile_write(dut, "rkey", SEED + 6)


@cocotb.test(skip=TOPLEVEL != "roce_nic")
async def test_model_to_rtl_out_of_bounds(dut):
    """A WRITE one byte past the end of the RTL host's MR: NAK remote access, nothing
    written."""
    await hostile_write(dut, "bounds", SEED + 7)


# (data width, the cocotb tests): separate pytest tests, so pytest-xdist runs them side by side
PARTS = [
    (64, "test_rtl_to_model$|test_rtl_to_model_dma_stalls$|test_loss_recovery$|"
         "test_retry_exhausted$|test_remote_access_nak$"),
    (64, "test_model_to_rtl"),
    # the other width: both directions' traffic (the 64-bit parts cover the protocol cases)
    (512, "test_model_to_rtl$|test_rtl_to_model$"),
]


@pytest.mark.parametrize(("data_width", "tests"), PARTS,
                         ids=["rtl_to_model-64", "model_to_rtl-64", "traffic-512"])
def test_cosim(data_width, tests, tmp_path):
    from hdl_tb.cocotb_run import roce_nic_sources, run

    params = bench_params(data_width)
    run("roce_nic", roce_nic_sources(), "test_cosim", params,
        extra_env={PARAMS_ENV: json.dumps(params), "COSIM_PCAP_DIR": str(tmp_path)},
        test_filter=tests)


@pytest.mark.parametrize("seed", [1, 2])
def test_cosim_seeds(seed, tmp_path):
    """Both directions' traffic at 64 bits under other seeds (NICSIM_SEED): other traffic,
    other stalls, another order of the DMA's answers (cosim_bench.stress); BAR0 on a 32-bit
    AXI4-Lite bus, every doorbell as two words."""
    from hdl_tb.cocotb_run import roce_nic_sources, run

    params = bench_params(64, 32)
    run("roce_nic", roce_nic_sources(), "test_cosim", params,
        extra_env={PARAMS_ENV: json.dumps(params), "COSIM_PCAP_DIR": str(tmp_path),
                   "NICSIM_SEED": str(seed)},
        test_filter="test_model_to_rtl$|test_rtl_to_model$", build_dir=tmp_path / "build")


def test_strict_mac_sees_an_underrun(tmp_path):
    """roce_nic built without its transmit FIFO (BUG_TX_CUT_THROUGH): with the DMA's read
    data stalling, the strict MAC counts underruns (so the bench above can fail)."""
    from hdl_tb.cocotb_run import roce_nic_sources, run

    params = bench_params(64)
    run("roce_nic", roce_nic_sources(), "test_cosim", params,
        extra_env={PARAMS_ENV: json.dumps(params), "COSIM_PCAP_DIR": str(tmp_path),
                   "COSIM_BUG": "BUG_TX_CUT_THROUGH"},
        test_filter="test_rtl_to_model_dma_stalls$", defines={"BUG_TX_CUT_THROUGH": 1})
