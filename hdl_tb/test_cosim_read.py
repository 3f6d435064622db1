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

The RTL's own requester does not send READs yet (README, "What it does not do").
"""

from __future__ import annotations

import json
import os
import random

import cocotb
import pytest

from hdl_tb.test_cosim import Side, counters, run_model_to_rtl
from hdl_tb.test_roce_nic_cmd import PARAMS_ENV, TOPLEVEL, bench_params
from nicsim import hwif

SEED = 31
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


def model_reads_rtl(w, seed: int, bad: str = "", rtl: bool = True) -> dict:  # noqa: ANN001
    """Driver program: b (model) READs JOBS from a's MR (a: the RTL unless `rtl` is False).
    `bad` "rkey": job 1 with a wrong rkey."""
    from nicsim.driver.user import enums as e
    from nicsim.driver.user.verbs import SGE, SendWR

    from nicsim.cosim import boot_rtl_host

    if rtl:
        boot_rtl_host(w)
    ha, hb = w.hosts["a"], w.hosts["b"]
    rng = random.Random(seed)
    acc = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
    a, b = Side(ha, SIZE, acc), Side(hb, SIZE, acc)
    a.connect(b, "10.0.0.2", e.IBV_MTU_1024, psn=0xFFFFFA)
    b.connect(a, "10.0.0.1", e.IBV_MTU_1024, psn=0xFFFFFA, timeout=1)
    src = rng.randbytes(SIZE)
    a.mr.write(src, SIZE)
    before = rng.randbytes(SIZE)       # b's MR starts with noise: untouched bytes must stay
    b.mr.write(before, SIZE)
    expect = bytearray(before)
    for i, (off, n, sges) in enumerate(JOBS):
        sg = [SGE(b.mr.buf + o, ln, b.mr.lkey) for o, ln in sges]
        wr = SendWR(wr_id=i, opcode=e.IBV_WR_RDMA_READ, num_sge=len(sg), sg=sg or None)
        wr.set_wr_rdma(a.mr.rkey ^ (0x80 if bad == "rkey" and i == 1 else 0), a.mr.buf + off)
        b.qp.post_send(wr)
        if bad and i >= 1:
            continue
        rest = src[off:off + n]
        for o, ln in sges:
            expect[o:o + ln] = rest[:ln]
            rest = rest[ln:]
    sent = []
    for _ in range(400):
        _n, wcs = b.cq.poll(16)
        sent += [(wc.wr_id, wc.status, wc.opcode if wc.status == e.IBV_WC_SUCCESS else -1,
                  wc.byte_len if wc.status == e.IBV_WC_SUCCESS else -1, wc.vendor_err)
                 for wc in wcs]
        if len(sent) >= len(JOBS):
            break
        hb.spend(5_000.0)
    mem = b.mr.read(SIZE)
    bad_at = [i for i in range(0, SIZE, 64) if mem[i:i + 64] != expect[i:i + 64]]
    hw_qpc = a.ctx.file.dev.hw.query_qp(a.qp.qp_num)
    return {"sent": sent, "bad_at": bad_at, "a_changed": a.mr.read(SIZE) != src,
            "n_jobs": len(JOBS), "bytes": sum(n for _o, n, _s in JOBS), "sim_ns": w.env.now,
            "hw_state": hw_qpc.state,
            "want": [(i, e.IBV_WC_SUCCESS, e.IBV_WC_RDMA_READ, n, 0)
                     for i, (_o, n, _s) in enumerate(JOBS)]}


async def run_reads(dut, what: str, seed: int, bad: str = "",  # noqa: ANN001
                    faults=None, pcap: str | None = None) -> dict:  # noqa: ANN001
    return await run_model_to_rtl(dut, what, seed, bad, faults, pcap, program=model_reads_rtl)


@cocotb.test(skip=TOPLEVEL != "roce_nic")
async def test_read_from_rtl(dut):
    """READs from the model answered by the RTL: b's memory byte-exact, b's completions
    RDMA_READ SUCCESS, a's memory unchanged, the RTL's frames byte for byte the model's."""
    pcap = os.path.join(os.environ.get("COSIM_PCAP_DIR", "."), "cosim_read.pcap")
    res = await run_reads(dut, "model READs RTL", SEED, pcap=pcap)
    assert res["sent"] == res["want"], (res["sent"], res["want"])
    assert not res["bad_at"], f"b's memory differs at {res['bad_at'][:8]}"
    assert not res["a_changed"], "the READs changed a's memory"
    assert res["late"] == 0
    c = counters(dut)
    assert c["resp_naks"] == 0 and c["resp_duplicates"] == 0, c
    from scapy.utils import rdpcap

    from nicsim.wire.packet import parse

    frames = [bytes(p) for p in rdpcap(pcap)]
    ops = [parse(f).opcode for f in frames]  # raises WireError on a bad ICRC or header
    rtl_ops = [parse(f).opcode for f in res["rtl_sent"]]
    assert {0x0D, 0x0E, 0x0F, 0x10} <= set(rtl_ops) and 0x0C in ops, (rtl_ops, ops)
    # the reference: the same program with the model as host a's NIC
    from nicsim.cosim.world import MAC_A
    from nicsim.world import World

    mpcap = os.path.join(os.path.dirname(pcap), "model_read.pcap")
    mw = World.two_hosts(SEED, pcap=mpcap)
    ref = model_reads_rtl(mw, SEED, rtl=False)
    mw.close()
    assert ref["sent"] == res["sent"] and not ref["bad_at"], ref
    mac_a = bytes.fromhex(MAC_A.replace(":", ""))
    model_rsp = [bytes(p) for p in rdpcap(mpcap) if bytes(p)[6:12] == mac_a]
    assert model_rsp and res["rtl_sent"] == model_rsp, (len(res["rtl_sent"]), len(model_rsp))
    dut._log.info("%d bytes in %d READs served by the RTL, byte-exact; %d response frames "
                  "identical to the model's", res["bytes"], res["n_jobs"], len(model_rsp))


@cocotb.test(skip=TOPLEVEL != "roce_nic")
async def test_read_bad_rkey(dut):
    """A READ with a wrong rkey: NAK remote access, b's WR REM_ACCESS_ERR, the rest flushed,
    a's QP in ERR, nothing of it in b's memory."""
    from nicsim.driver.user import enums as e

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


PARTS = [
    (64, "test_read_"),
    (512, "test_read_from_rtl$"),
]


@pytest.mark.parametrize(("data_width", "tests"), PARTS, ids=["read-64", "read-512"])
def test_cosim_read(data_width, tests, tmp_path):
    from hdl_tb.cocotb_run import roce_nic_sources, run

    params = bench_params(data_width)
    run("roce_nic", roce_nic_sources(), "test_cosim_read", params,
        extra_env={PARAMS_ENV: json.dumps(params), "COSIM_PCAP_DIR": str(tmp_path)},
        test_filter=tests)
