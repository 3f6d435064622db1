"""Co-simulation of RDMA READ (as hdl_tb/test_cosim.py: host a's NIC is the RTL, host b's the
SimPy model, one nicsim world): the model's requester READs from host a's memory and the RTL's
responder answers with READ RESPONSE packets it reads from host memory over its AXI4 master.

test_read_from_rtl: READs of one packet, several packets (unaligned), many pages, one byte,
exactly one MTU, zero bytes and into several SGEs: host b's memory holds exactly the bytes of
host a's MR (and nothing else changed), b's completions are RDMA_READ SUCCESS with the lengths,
host a's memory is unchanged, every frame parses with a valid ICRC, and the frames the RTL
sent are byte for byte those host a sends when its NIC is the model (a reference run of the
same program: opcodes, PSNs across the 24-bit wrap, AETH and MSN, payloads, pad, ICRC).
test_read_bad_rkey: the second READ carries a wrong rkey: the RTL NAKs it (remote access
error), b's WR completes REM_ACCESS_ERR and the rest are flushed, a's QP is in ERR.
test_read_loss: loss and corruption both ways: b re-requests from the missing PSN, the RTL
executes the duplicate READs again from that PSN, and every READ completes byte-exact.

test_rtl_reads*, test_rtl_write_read*: the RTL's requester READs from the model (with WRITEs
between the READs on one QP), clean, with a bad rkey and over a lossy link.
"""

from __future__ import annotations

import json
import os
import random

import cocotb
import pytest

from hdl_tb.cosim_bench import (
    Side,
    ack_timeout,
    poll_wcs,
    reference_frames,
    run_program,
    seed_offset,
)
from hdl_tb.nic_bench import TOPLEVEL
from nicsim import hwif
from nicsim.cosim.build import PARAMS_ENV
from nicsim.cosim.build import roce_nic_params as bench_params
from nicsim.cosim.rtl_nic import rtl_counters as counters

SEED = 31 + seed_offset()  # (NICSIM_SEED)
PG = 4096
SIZE = 16 * PG
# (offset in a's MR, length, b's SGEs [(offset in b's MR, length)])
JOBS = [
    (0, 64, [(0, 64)]),                              # one packet
    (100, 3000, [(PG + 7, 3000)]),                   # three packets, unaligned
    (5, 3 * PG + 1, [(3 * PG + 1, 3 * PG + 1)]),     # many pages on both sides, 13 packets
    (7, 1, [(8 * PG - 3, 1)]),                       # one byte (pad 3)
    (PG, 1024, [(9 * PG, 1024)]),                    # exactly one MTU
    (0, 0, []),                                      # zero bytes (C9-88: nothing checked)
    (9000, 2000, [(10 * PG + 1, 500), (11 * PG - 100, 1500)]),   # into two SGEs
]


def read_program(w, seed: int, bad: str = "", rtl: bool = True,  # noqa: ANN001
                 rtl_reads: bool = False) -> dict:
    """Driver program: the reader READs JOBS from the other host's MR: b (model) from a (the
    RTL unless `rtl` is False), or with `rtl_reads` a from b. `bad` "rkey": job 1 with a
    wrong rkey."""
    from nicsim.driver import enums as e
    from nicsim.driver.user.verbs import SGE, SendWR

    from nicsim.cosim import boot_rtl_host

    if rtl:
        boot_rtl_host(w)
    ha, hb = w.hosts["a"], w.hosts["b"]
    rng = random.Random(seed)
    acc = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
    a, b = Side(ha, SIZE, acc), Side(hb, SIZE, acc)
    a.connect(b, "10.0.0.2", e.IBV_MTU_1024, psn=0xFFFFFA, timeout=ack_timeout(w))
    b.connect(a, "10.0.0.1", e.IBV_MTU_1024, psn=0xFFFFFA, timeout=ack_timeout(w))
    reader, target = (a, b) if rtl_reads else (b, a)
    src = rng.randbytes(SIZE)
    target.mr.write(src, SIZE)
    before = rng.randbytes(SIZE)   # the reader's MR starts with noise: untouched bytes stay
    reader.mr.write(before, SIZE)
    expect = bytearray(before)
    for i, (off, n, sges) in enumerate(JOBS):
        sg = [SGE(reader.mr.buf + o, ln, reader.mr.lkey) for o, ln in sges]
        wr = SendWR(wr_id=i, opcode=e.IBV_WR_RDMA_READ, num_sge=len(sg), sg=sg or None)
        wr.set_wr_rdma(target.mr.rkey ^ (0x80 if bad == "rkey" and i == 1 else 0),
                       target.mr.buf + off)
        reader.qp.post_send(wr)
        if bad and i >= 1:
            continue
        rest = src[off:off + n]
        for o, ln in sges:
            expect[o:o + ln] = rest[:ln]
            rest = rest[ln:]
    sent = poll_wcs(reader, len(JOBS))
    mem = reader.mr.read(SIZE)
    bad_at = [i for i in range(0, SIZE, 64) if mem[i:i + 64] != expect[i:i + 64]]
    hw_qpc = a.ctx.file.dev.hw.query_qp(a.qp.qp_num)
    return {"sent": sent, "bad_at": bad_at, "target_changed": target.mr.read(SIZE) != src,
            "n_jobs": len(JOBS), "bytes": sum(n for _o, n, _s in JOBS), "sim_ns": w.env.now,
            "hw_state": hw_qpc.state,
            "want": [(i, e.IBV_WC_SUCCESS, e.IBV_WC_RDMA_READ, n, 0)
                     for i, (_o, n, _s) in enumerate(JOBS)]}


def model_reads_rtl(w, seed: int, bad: str = "", rtl: bool = True) -> dict:  # noqa: ANN001
    return read_program(w, seed, bad, rtl)


def rtl_reads_model(w, seed: int, bad: str = "", rtl: bool = True) -> dict:  # noqa: ANN001
    return read_program(w, seed, bad, rtl, rtl_reads=True)


def rtl_write_read(w, seed: int, bad: str = "", rtl: bool = True) -> dict:  # noqa: ANN001
    """Driver program: a (the RTL unless `rtl` is False) WRITEs to b and READs back what it
    wrote, WRITE, READ, WRITE, READ, WRITE on one QP: each READ must see the WRITE before it
    (the responder executes in order), a's completions come in order."""
    from nicsim.driver import enums as e
    from nicsim.driver.user.verbs import SGE, SendWR

    from nicsim.cosim import boot_rtl_host

    if rtl:
        boot_rtl_host(w)
    rng = random.Random(seed)
    acc = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
    a, b = Side(w.hosts["a"], SIZE, acc), Side(w.hosts["b"], SIZE, acc)
    a.connect(b, "10.0.0.2", e.IBV_MTU_1024, psn=0xFFFFFA, timeout=ack_timeout(w))
    b.connect(a, "10.0.0.1", e.IBV_MTU_1024, psn=0xFFFFFA, timeout=ack_timeout(w))
    src = rng.randbytes(SIZE)
    a.mr.write(src, SIZE)
    b.mr.write(bytes(SIZE), SIZE)
    W, R = e.IBV_WR_RDMA_WRITE, e.IBV_WR_RDMA_READ
    jobs = [  # (opcode, offset in a's MR, length, offset in b's MR)
        (W, 0, 5000, 0),
        (R, 8 * PG + 3, 5000, 0),
        (W, 7000, 100, 6001),
        (R, 12 * PG, 100, 6001),
        (W, 200, 2048, 9000),
    ]
    a_exp, b_exp = bytearray(src), bytearray(SIZE)
    for i, (op, aoff, n, boff) in enumerate(jobs):
        wr = SendWR(wr_id=i, opcode=op, num_sge=1, sg=[SGE(a.mr.buf + aoff, n, a.mr.lkey)])
        wr.set_wr_rdma(b.mr.rkey, b.mr.buf + boff)
        a.qp.post_send(wr)
        if op == W:
            b_exp[boff:boff + n] = src[aoff:aoff + n]
        else:
            a_exp[aoff:aoff + n] = b_exp[boff:boff + n]
    sent = []
    for _ in range(400):
        _n, wcs = a.cq.poll(16)
        sent += [(wc.wr_id, wc.status, wc.opcode, wc.byte_len, wc.vendor_err) for wc in wcs]
        if len(sent) >= len(jobs):
            break
        a.host.spend(5_000.0)
    a.host.spend(20_000.0)  # the last WRITE's data lands at b
    am, bm = a.mr.read(SIZE), b.mr.read(SIZE)
    return {"sent": sent, "sim_ns": w.env.now, "n_jobs": len(jobs),
            "bytes": sum(n for _op, _a, n, _b in jobs),
            "bad_at": [i for i in range(0, SIZE, 64) if am[i:i + 64] != a_exp[i:i + 64]] +
                      [-i for i in range(0, SIZE, 64) if bm[i:i + 64] != b_exp[i:i + 64]],
            "want": [(i, e.IBV_WC_SUCCESS,
                      e.IBV_WC_RDMA_WRITE if op == W else e.IBV_WC_RDMA_READ, n, 0)
                     for i, (op, _a, n, _b) in enumerate(jobs)]}


async def run_reads(dut, what: str, seed: int, bad: str = "",  # noqa: ANN001
                    faults=None, pcap: str | None = None,  # noqa: ANN001
                    program=model_reads_rtl) -> dict:  # noqa: ANN001
    return await run_program(dut, program, what, seed, bad, faults, pcap)


@cocotb.test(skip=TOPLEVEL != "roce_nic")
async def test_read_from_rtl(dut):
    """READs from the model answered by the RTL: b's memory byte-exact, b's completions
    RDMA_READ SUCCESS, a's memory unchanged, the RTL's frames byte for byte the model's."""
    pcap = os.path.join(os.environ.get("COSIM_PCAP_DIR", "."), "cosim_read.pcap")
    res = await run_reads(dut, "model READs RTL", SEED, pcap=pcap)
    assert res["sent"] == res["want"], (res["sent"], res["want"])
    assert not res["bad_at"], f"b's memory differs at {res['bad_at'][:8]}"
    assert not res["target_changed"], "the READs changed a's memory"
    assert res["late"] == 0
    c = counters(dut)
    assert c["resp_naks"] == 0 and c["resp_duplicates"] == 0, c
    from scapy.utils import rdpcap

    from nicsim.wire.packet import parse

    frames = [bytes(p) for p in rdpcap(pcap)]
    ops = [parse(f).opcode for f in frames]  # raises WireError on a bad ICRC or header
    rtl_ops = [parse(f).opcode for f in res["rtl_sent"]]
    assert {0x0D, 0x0E, 0x0F, 0x10} <= set(rtl_ops) and 0x0C in ops, (rtl_ops, ops)
    model_frames = reference_frames(pcap, model_reads_rtl, SEED)
    assert res["rtl_sent"] == model_frames, (len(res["rtl_sent"]), len(model_frames))
    dut._log.info("%d bytes in %d READs served by the RTL, byte-exact; %d response frames "
                  "identical to the model's", res["bytes"], res["n_jobs"], len(model_frames))


@cocotb.test(skip=TOPLEVEL != "roce_nic")
async def test_read_bad_rkey(dut):
    """A READ with a wrong rkey: NAK remote access, b's WR REM_ACCESS_ERR, the rest flushed,
    a's QP in ERR, nothing of it in b's memory."""
    from nicsim.driver import enums as e

    res = await run_reads(dut, "model READs RTL, bad rkey", SEED + 1, bad="rkey")
    st = [(s[0], s[1], s[4]) for s in res["sent"]]
    assert st[:2] == [(0, e.IBV_WC_SUCCESS, 0), (1, e.IBV_WC_REM_ACCESS_ERR, 0x30)], st
    assert all(s[1] == e.IBV_WC_WR_FLUSH_ERR for s in st[2:]) and len(st) == len(JOBS), st
    assert not res["bad_at"], f"b's memory differs at {res['bad_at'][:8]}"
    assert res["hw_state"] == hwif.QpState.ERR
    assert counters(dut)["resp_naks"] == 1


@cocotb.test(skip=TOPLEVEL != "roce_nic")
async def test_read_loss(dut):
    """Loss and corruption both ways: lost READ responses are requested again from the
    missing PSN and the RTL answers the duplicate READ from there; every READ byte-exact."""
    from nicsim.fabric.faults import FaultConfig

    res = await run_reads(dut, "model READs RTL, lossy", SEED + 2,
                          faults=FaultConfig(loss=0.06, corrupt=0.04, seed=3))
    assert res["sent"] == res["want"], (res["sent"], res["want"])
    assert not res["bad_at"], f"b's memory differs at {res['bad_at'][:8]}"
    assert res["faults"]["lost"] + res["faults"]["corrupted"] > 0, res["faults"]
    assert counters(dut)["resp_duplicates"] > 0    # READs re-requested and answered again


@cocotb.test(skip=TOPLEVEL != "roce_nic")
async def test_rtl_reads(dut):
    """READs from the RTL's requester, answered by the model: a's memory byte-exact, a's
    completions (the RTL's completer) RDMA_READ SUCCESS in order, b's memory unchanged, the
    RTL's READ requests byte for byte the model's."""
    pcap = os.path.join(os.environ.get("COSIM_PCAP_DIR", "."), "cosim_rtl_reads.pcap")
    res = await run_reads(dut, "RTL READs model", SEED, pcap=pcap, program=rtl_reads_model)
    assert res["sent"] == res["want"], (res["sent"], res["want"])
    assert not res["bad_at"], f"a's memory differs at {res['bad_at'][:8]}"
    assert not res["target_changed"], "the READs changed b's memory"
    assert res["late"] == 0
    from nicsim.wire.packet import parse

    assert {parse(f).opcode for f in res["rtl_sent"]} == {0x0C}, res["rtl_sent"]
    model_frames = reference_frames(pcap, rtl_reads_model, SEED)
    assert res["rtl_sent"] == model_frames, (len(res["rtl_sent"]), len(model_frames))
    dut._log.info("%d bytes in %d READs by the RTL, byte-exact; %d READ requests identical to "
                  "the model's", res["bytes"], res["n_jobs"], len(model_frames))


@cocotb.test(skip=TOPLEVEL != "roce_nic")
async def test_rtl_reads_bad_rkey(dut):
    """The RTL's second READ carries a wrong rkey: the model NAKs it (remote access error),
    the RTL completes it REM_ACCESS_ERR and flushes the rest, a's QP is in ERR."""
    from nicsim.driver import enums as e

    res = await run_reads(dut, "RTL READs model, bad rkey", SEED + 3, bad="rkey",
                          program=rtl_reads_model)
    st = [(s[0], s[1], s[4]) for s in res["sent"]]
    assert st[:2] == [(0, e.IBV_WC_SUCCESS, 0), (1, e.IBV_WC_REM_ACCESS_ERR, 0x30)], st
    assert all(s[1] == e.IBV_WC_WR_FLUSH_ERR for s in st[2:]) and len(st) == len(JOBS), st
    assert not res["bad_at"], f"a's memory differs at {res['bad_at'][:8]}"
    assert res["hw_state"] == hwif.QpState.ERR


@cocotb.test(skip=TOPLEVEL != "roce_nic")
async def test_rtl_reads_loss(dut):
    """Loss and corruption both ways while the RTL READs: a missing response makes the RTL
    ask again from it (go-back-N, or its transport timer), every READ completes byte-exact."""
    from nicsim.fabric.faults import FaultConfig

    res = await run_reads(dut, "RTL READs model, lossy", SEED + 4, program=rtl_reads_model,
                          faults=FaultConfig(loss=0.06, corrupt=0.04, seed=4))
    assert res["sent"] == res["want"], (res["sent"], res["want"])
    assert not res["bad_at"], f"a's memory differs at {res['bad_at'][:8]}"
    assert res["faults"]["lost"] + res["faults"]["corrupted"] > 0, res["faults"]
    c = counters(dut)
    assert c["req_resent"] > 0 and c["comp_resends"] > 0, c


@cocotb.test(skip=TOPLEVEL != "roce_nic")
async def test_rtl_write_read(dut):
    """The RTL WRITEs and READs back on one QP: every READ sees the WRITE before it, both
    hosts' memories byte-exact, a's completions in order, the RTL's frames (WRITEs and READ
    requests) byte for byte the model's."""
    pcap = os.path.join(os.environ.get("COSIM_PCAP_DIR", "."), "cosim_rtl_write_read.pcap")
    res = await run_reads(dut, "RTL WRITE + READ", SEED, pcap=pcap, program=rtl_write_read)
    assert res["sent"] == res["want"], (res["sent"], res["want"])
    assert not res["bad_at"], f"memory differs at {res['bad_at'][:8]} (negative: b's)"
    model_frames = reference_frames(pcap, rtl_write_read, SEED)
    assert res["rtl_sent"] == model_frames, (len(res["rtl_sent"]), len(model_frames))


@cocotb.test(skip=TOPLEVEL != "roce_nic")
async def test_rtl_write_read_loss(dut):
    """The same over a lossy link: go-back-N across WRITEs and READs, byte-exact."""
    from nicsim.fabric.faults import FaultConfig

    res = await run_reads(dut, "RTL WRITE + READ, lossy", SEED + 5, program=rtl_write_read,
                          faults=FaultConfig(loss=0.08, corrupt=0.04, seed=6))
    assert res["sent"] == res["want"], (res["sent"], res["want"])
    assert not res["bad_at"], f"memory differs at {res['bad_at'][:8]} (negative: b's)"
    assert res["faults"]["lost"] + res["faults"]["corrupted"] > 0, res["faults"]


PARTS = [
    (64, "test_read_"),
    (64, "test_rtl_reads"),
    (512, "test_read_from_rtl$|test_rtl_reads$"),
]


@pytest.mark.parametrize(("data_width", "tests"), PARTS,
                         ids=["model_reads-64", "rtl_reads-64", "reads-512"])
def test_cosim_read(data_width, tests, tmp_path):
    from hdl_tb.cocotb_run import roce_nic_sources, run

    params = bench_params(data_width)
    run("roce_nic", roce_nic_sources(), "test_cosim_read", params,
        extra_env={PARAMS_ENV: json.dumps(params), "COSIM_PCAP_DIR": str(tmp_path)},
        test_filter=tests)
