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
from cocotb.simtime import get_sim_time
from cocotb.task import bridge

from hdl_tb.test_roce_nic_cmd import PARAMS_ENV, TOPLEVEL, bench_params, roce_nic_sources

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
                              retry_cnt=7, rnr_retry=7, max_rd_atomic=4))


def peer_psn(_peer: Side, qp: dict) -> int:
    return qp.get("psn", 0)


def rtl_to_model(w, seed: int) -> dict:  # noqa: ANN001
    """Driver program: WRITE / WRITE_IMM / SEND / SEND_IMM from a (RTL) to b (model)."""
    from nicsim.driver.user import enums as e
    from nicsim.driver.user.verbs import SGE, RecvWR, SendWR

    from nicsim.cosim import boot_rtl_host

    boot_rtl_host(w)
    ha, hb = w.hosts["a"], w.hosts["b"]
    rng = random.Random(seed)
    size = 6 * 4096
    acc = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
    a, b = Side(ha, size, acc), Side(hb, 2 * size, acc)
    a.connect(b, "10.0.0.2", e.IBV_MTU_1024, psn=0xFFFFFA)
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
    ]
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
        wr.set_wr_rdma(b.mr.rkey, b.mr.buf + off)
        a.qp.post_send(wr)
        expect.append((off, data))
        if op != W:
            recvs.append((500 + i, len(data) if op != WI else len(data),
                          0x1000 + i if op in (WI, SI) else -1))
    # b's receive completions arrive as the messages land; plain WRITEs complete nothing at b
    got = []
    for _ in range(200):
        _n, wcs = b.cq.poll(16)
        got += [(wc.wr_id, wc.status, wc.opcode, wc.byte_len, wc.imm_data, wc.wc_flags)
                for wc in wcs]
        if len(got) >= len(recvs):
            break
    # a's send completions: the RTL's completer turns b's ACKs into CQEs
    sent = []
    for _ in range(200):
        _n, wcs = a.cq.poll(16)
        sent += [(wc.wr_id, wc.status, wc.opcode, wc.byte_len, wc.qp_num) for wc in wcs]
        if len(sent) >= len(jobs):
            break
    hb.spend(20_000.0)  # the last WRITE's data lands
    mem = b.mr.read(2 * size)
    bad = [(off, len(d)) for off, d in expect if mem[off:off + len(d)] != d]
    want_sent = [(i, e.IBV_WC_SUCCESS, e.IBV_WC_RDMA_WRITE if op in (W, WI) else e.IBV_WC_SEND,
                  sum(ln for _o, ln in sges), a.qp.qp_num)
                 for i, (op, sges, _off) in enumerate(jobs)]
    return {"got": got, "recvs": recvs, "bad": bad, "bytes": sum(len(d) for _o, d in expect),
            "sim_ns": w.env.now, "n_jobs": len(jobs), "sent": sent, "want_sent": want_sent}


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
    cyc = get_sim_time("ns") / rtl.clk_ns
    c = rtl.clock
    dut._log.info(
        "%d bytes in %d messages RTL -> model, byte-exact; %d frames sent by the RTL, %d in the "
        "pcap; simulated %.1f us, %d RTL cycles in %.1f s (%.0f cycles/s); window %.0f ns, "
        "%d catch-ups, %.0f%% of the wall time in the RTL simulator; DMA %s; MAC %s",
        res["bytes"], res["n_jobs"], len(sent), len(frames), res["sim_ns"] / 1000, cyc, wall,
        cyc / wall, c.window_ns, c.catchups, 100 * c.rtl_wall / wall, rtl.dma.counters,
        rtl.mac.counters)


@pytest.mark.parametrize("data_width", [64])
def test_cosim(data_width, tmp_path):
    from hdl_tb.cocotb_run import run

    params = bench_params(data_width)
    run("roce_nic", roce_nic_sources(), "test_cosim", params,
        extra_env={PARAMS_ENV: json.dumps(params), "COSIM_PCAP_DIR": str(tmp_path)})
