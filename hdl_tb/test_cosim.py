"""Co-simulation: host a's NIC is the RTL (hdl_tb/rtl/roce_nic.v), host b's the SimPy model, one
nicsim world (nicsim.cosim): the unchanged driver and verbs on both hosts, a 100 Gb/s cable
with a pcap tap between the RTL's MAC streams and the model's port, the RTL's DMA served from
host a's memory with PCIe timing, the two simulators coupled by nicsim.cosim.clock.

test_rtl_to_model: RDMA WRITE (one packet, many packets, many pages, several SGEs), RDMA WRITE
with immediate, SEND and SEND with immediate from the RTL to the model: host b's memory must
hold the bytes exactly, its receive completions must say what was sent, host a's send
completions (the RTL's completer, from the model's ACKs) must come in order with the right
opcodes and lengths, the pcap must hold the frames, and nothing may have crossed between the
simulators late.
"""

from __future__ import annotations

import json
import os
import random
import time

import cocotb
import pytest
from cocotb.task import bridge

from hdl_tb.test_roce_nic_cmd import PARAMS_ENV, TOPLEVEL, bench_params, roce_nic_sources
from nicsim import hwif

SEED = 11


class Side:
    """One end of an RC connection: context, PD, CQ, QP, one MR."""

    def __init__(self, host, mr_len: int, access: int) -> None:  # noqa: ANN001
        from nicsim.driver.user import enums as e
        from nicsim.driver.user.verbs import CQ, MR, PD, QP, Context, QPCap, QPInitAttr

        self.host = host
        self.ctx = Context("nsnic0", host=host)
        self.pd = PD(self.ctx)
        self.cq = CQ(self.ctx, 256)
        self.qp = QP(self.pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq,
                                         cap=QPCap(64, 64, 4, 4)))
        self.mr = MR(self.pd, mr_len, access)

    def connect(self, peer: Side, ip: str, mtu: int, **qp: int) -> None:
        from nicsim.driver.user import enums as e
        from nicsim.driver.user.verbs import GID, AHAttr, GlobalRoute, QPAttr

        acc = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
        self.qp.to_init(QPAttr(qp_access_flags=acc))
        av = AHAttr(gr=GlobalRoute(dgid=GID("::ffff:" + ip)))
        self.qp.to_rtr(QPAttr(path_mtu=mtu, dest_qp_num=peer.qp.qp_num, rq_psn=qp.get("psn", 0),
                              max_dest_rd_atomic=4, min_rnr_timer=1, ah_attr=av))
        self.qp.to_rts(QPAttr(sq_psn=peer_psn(peer, qp), timeout=qp.get("timeout", 14),
                              retry_cnt=qp.get("retry_cnt", 7), rnr_retry=7, max_rd_atomic=4))


def peer_psn(_peer: Side, qp: dict) -> int:
    return qp.get("psn", 0)


def rtl_to_model(w, seed: int, timeout: int = 14, retry_cnt: int = 7,  # noqa: ANN001
                 njobs: int = 99, bad_rkey: int = -1) -> dict:
    """Driver program: WRITE / WRITE_IMM / SEND / SEND_IMM from a (RTL) to b (model). The
    first `njobs` jobs; job `bad_rkey` gets a wrong rkey."""
    from nicsim.driver.user import enums as e
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
    """WRITEs, WRITE with immediate and SENDs from the RTL land in the model host byte-exact."""
    from nicsim.driver.user import enums as e

    from nicsim.cosim import cosim_world

    pcap = os.path.join(os.environ.get("COSIM_PCAP_DIR", "."), "cosim_rtl_to_model.pcap")
    w, rtl = cosim_world(dut, seed=SEED, pcap=pcap)
    rtl.mac.keep_sent = True
    await rtl.reset()
    rtl.clock.couple(w.env)
    t0 = time.perf_counter()
    res = await bridge(rtl_to_model)(w, SEED)
    wall = time.perf_counter() - t0
    w.close()
    speed_line(dut, rtl, "clean link", res, wall)

    assert not res["bad"], f"regions of b's memory differ: {res['bad']}"
    want = sorted((wr_id, e.IBV_WC_SUCCESS, n, imm) for wr_id, n, imm in res["recvs"])
    got = sorted((wr_id, st, n, imm if flags & e.IBV_WC_WITH_IMM else -1)
                 for wr_id, st, _op, n, imm, flags in res["got"])
    assert got == want, (got, want)
    assert res["sent"] == res["want_sent"], (res["sent"], res["want_sent"])
    assert rtl.clock.late == 0, f"{rtl.clock.late} effects crossed late"
    from scapy.utils import rdpcap

    frames = [bytes(p) for p in rdpcap(pcap)]
    sent = set(rtl.mac.sent)
    assert sent and sent <= set(frames), "the pcap lacks frames the RTL sent"
    dut._log.info("%d bytes in %d messages RTL -> model, byte-exact; %d frames sent by the "
                  "RTL, %d in the pcap", res["bytes"], res["n_jobs"], len(sent), len(frames))


def counters(dut) -> dict[str, int]:  # noqa: ANN001
    return {k: int(getattr(dut, f"cnt_{k}").value)
            for k in ("req_pkts", "req_resent", "comp_acks", "comp_naks", "comp_timeouts",
                      "comp_resends", "comp_cqes", "rx_packets", "rx_drops")}


def speed_line(dut, rtl, what: str, res: dict, wall: float) -> None:  # noqa: ANN001
    c = rtl.clock
    cyc = c.now() * 1.0 / rtl.clk_ns
    dut._log.info(
        "%s: simulated %.1f us, %d RTL cycles in %.1f s (%.0f cycles/s); window %.0f ns, "
        "%d catch-ups, %.0f%% of the wall time in the RTL simulator; late %d; DMA %s; MAC %s; "
        "RTL %s", what, res["sim_ns"] / 1000, cyc, wall, cyc / wall, c.window_ns, c.catchups,
        100 * c.rtl_wall / wall, c.late, rtl.dma.counters, rtl.mac.counters, counters(dut))


@cocotb.test(skip=TOPLEVEL != "roce_nic")
async def test_loss_recovery(dut):
    """Loss and corruption on the link both ways: the RTL's go-back-N (NAKs, transport timer)
    gets every message through; b's memory exact, a's completions all SUCCESS, in order."""
    from nicsim.cosim import cosim_world
    from nicsim.fabric.faults import FaultConfig

    faults = FaultConfig(loss=0.06, corrupt=0.04, seed=5)
    w, rtl = cosim_world(dut, seed=SEED + 1, faults=faults)
    await rtl.reset()
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
    from nicsim.driver.user import enums as e

    from nicsim.cosim import cosim_world
    from nicsim.fabric.faults import FaultConfig

    w, rtl = cosim_world(dut, seed=SEED + 2, faults=FaultConfig(loss=1.0, seed=1))
    await rtl.reset()
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
    from nicsim.driver.user import enums as e

    from nicsim.cosim import cosim_world

    w, rtl = cosim_world(dut, seed=SEED + 3)
    await rtl.reset()
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


@pytest.mark.parametrize("data_width", [64])
def test_cosim(data_width, tmp_path):
    from hdl_tb.cocotb_run import run

    params = bench_params(data_width)
    run("roce_nic", roce_nic_sources(), "test_cosim", params,
        extra_env={PARAMS_ENV: json.dumps(params), "COSIM_PCAP_DIR": str(tmp_path)})
