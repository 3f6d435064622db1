"""cocotb bench for benchmarks/hdl_cosim_throughput.py: roce_nic's requester in co-simulation.

Host a's NIC is the RTL, host b's the SimPy model (nicsim.cosim.cosim_world, a clean cable of
400 Gb/s: faster than the design's port, so its MAC never holds the RTL back and the figures
are the design's own; only ACKs come back, which the port takes at any rate). For each
message size the driver on host a posts a few RDMA WRITEs back to back (all outstanding at
once) to host b and waits for their completions; the next size starts after.
The MAC records the RTL time of the first beat of every frame the RTL sends on m_axis_tx, so
per size the bench knows each data frame's start cycle, its length and its payload.

The packet accounting is checked here (a wrong count fails the cocotb test): every message is
ceil(size / MTU) frames, FIRST / MIDDLE / LAST or ONLY opcodes with consecutive PSNs, MTU-sized
payloads but the last, RETH length = size; every WR completes SUCCESS; host b's memory holds
the bytes. The figures (cycles per packet, Gb/s) are computed by the benchmark from the JSON
line written to HDL_BENCH_OUT. Not collected by pytest (no test_ prefix);
test_cosim_throughput.py runs it on one size in CI.

Environment: BENCH_SIZES "size:messages,..." (default below), BENCH_MTU (256..4096),
BENCH_CLK_NS (the RTL clock period), BENCH_PCIE_GEN (the hosts' PCIe generation, x16; default
3), BENCH_POST_NS (the CPU's cost of a post_send, ns; default CpuCosts'): the host's two
rates, to see how fast the NIC goes when the host feeds it faster.
"""

from __future__ import annotations

import json
import os
import random
import time
from dataclasses import replace

import cocotb
from cocotb.task import bridge

from hdl_tb.cosim_bench import Side
from hdl_tb.nic_bench import TOPLEVEL
from nicsim.cosim.build import PARAMS_ENV
from nicsim.testing.cosim_throughput import DEFAULT_SIZES, MTU_ENUM, parse_sizes
from nicsim.wire import Opcode
from nicsim.wire.packet import parse


def write_stream(w, rtl, sizes: list[tuple[int, int]], mtu: int) -> dict:  # noqa: ANN001
    """Driver program: per (size, n), n RDMA WRITEs of `size` bytes from a (RTL) to b (model),
    posted back to back, then polled to completion. Returns per size the index range of the
    frames the RTL sent for it and the completions."""
    from nicsim.driver import enums as e
    from nicsim.driver.user.verbs import SGE, SendWR

    from nicsim.cosim import boot_rtl_host

    boot_rtl_host(w)
    ha, hb = w.hosts["a"], w.hosts["b"]
    mr_len = sum(-(-size * n // 4096) * 4096 for size, n in sizes)
    acc = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
    a, b = Side(ha, mr_len, acc), Side(hb, mr_len, acc)
    a.connect(b, "10.0.0.2", MTU_ENUM[mtu])
    b.connect(a, "10.0.0.1", MTU_ENUM[mtu])
    src = random.Random(5).randbytes(mr_len)
    a.mr.write(src, mr_len)
    b.mr.write(bytes(mr_len), mr_len)
    mac = rtl.mac
    pc = rtl.dma.pcie.counters   # the DMA's PCIe link: read completions come down it
    groups = []
    off = 0
    wr_id = 0
    for size, n in sizes:
        first_frame = len(mac.sent)
        t_post = w.env.now
        wall0, rtl_wall0 = time.perf_counter(), rtl.clock.rtl_wall
        cpu0, rtl_cpu0 = time.process_time(), rtl.clock.rtl_cpu
        rd0, tlp0 = pc["dma_read_bytes"], pc["tlps_down"]
        posted = []
        for k in range(n):
            o = off + k * size
            wr = SendWR(wr_id=wr_id + k, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1,
                        sg=[SGE(a.mr.buf + o, size, a.mr.lkey)])
            wr.set_wr_rdma(b.mr.rkey, b.mr.buf + o)
            a.qp.post_send(wr)
            posted.append(w.env.now)
        done = []
        give_up = w.env.now + 1e6   # 1 ms: a stuck NIC ends the run with what completed
        while len(done) < n and w.env.now < give_up:
            _c, wcs = a.cq.poll(16)
            done += [(wc.wr_id, wc.status, wc.byte_len) for wc in wcs]
        groups.append({"size": size, "messages": n, "offset": off,
                       "frames": (first_frame, len(mac.sent)), "post_ns": t_post,
                       "posted_ns": posted, "done_ns": w.env.now,
                       "wall_s": time.perf_counter() - wall0,
                       "rtl_wall_s": rtl.clock.rtl_wall - rtl_wall0,
                       "cpu_s": time.process_time() - cpu0,
                       "rtl_cpu_s": rtl.clock.rtl_cpu - rtl_cpu0,
                       "read_bytes": pc["dma_read_bytes"] - rd0,
                       "read_tlps": pc["tlps_down"] - tlp0,
                       "completions": done,
                       "want": [(wr_id + k, e.IBV_WC_SUCCESS, size) for k in range(n)]})
        off += -(-n * size // 4096) * 4096   # each size's buffers start on a page
        wr_id += n
    hb.spend(20_000.0)  # the last WRITE's data lands
    mem = b.mr.read(mr_len)
    return {"groups": groups, "bad": [g["size"] for g in groups
                                      if mem[g["offset"]:g["offset"] + g["size"] * g["messages"]]
                                      != src[g["offset"]:g["offset"] + g["size"] * g["messages"]]]}


def check_frames(size: int, n: int, mtu: int, frames: list[bytes]) -> list[dict]:
    """The frames of n WRITEs of `size` bytes, as the wire must carry them; one record each:
    frame length, payload length, the message it belongs to."""
    per = max(1, -(-size // mtu))
    assert len(frames) == n * per, f"{size} B x {n}: {len(frames)} frames, want {n * per}"
    out = []
    psn = None
    for i, f in enumerate(frames):
        p = parse(f)
        k = i % per
        want_op = (Opcode.RC_RDMA_WRITE_ONLY if per == 1 else
                   Opcode.RC_RDMA_WRITE_FIRST if k == 0 else
                   Opcode.RC_RDMA_WRITE_LAST if k == per - 1 else Opcode.RC_RDMA_WRITE_MIDDLE)
        want_len = mtu if k < per - 1 else size - (per - 1) * mtu
        assert p.opcode == want_op and p.payload_len == want_len, \
            (size, i, Opcode(p.opcode).name, p.payload_len, want_op.name, want_len)
        if k == 0:
            assert p.reth_len == size, (size, i, p.reth_len)
        assert psn is None or p.psn == (psn + 1) & 0xFFFFFF, (size, i, p.psn, psn)
        psn = p.psn
        out.append({"bytes": len(f), "payload": p.payload_len, "message": i // per})
    return out


# BENCH_TRACE=1: the handshakes along the requester's path, each cycle (slows the simulation;
# for finding which stage holds the packets back, not for the speed figures)
TRACED = {
    "doorbell": ("db_valid", None),                                  # SQ doorbell taken (+RQ)
    "wqe_ar": ("u_wqe.m_axi_arvalid", "u_wqe.m_axi_arready"),         # WQE read issued
    "wqe": ("m_wqe_valid", "m_wqe_ready"),                            # WQE into the requester
    "xlate": ("u_req.mr_req_valid", "u_req.mr_req_ready"),          # lkey lookup issued
    "xlate_rsp": ("u_req.mr_rsp_valid", None),                       # its answer
    "pay_ar": ("u_req.m_axi_arvalid", "u_req.m_axi_arready"),        # payload read issued
    "pay_r": ("u_req.m_axi_rvalid", "u_req.m_axi_rready"),           # payload beat in
    "hdr": ("u_req.tx_hdr_valid", "u_req.tx_hdr_ready"),             # descriptor to framer
}


def _handle(dut, path: str):  # noqa: ANN001, ANN202
    h = dut
    for part in path.split("."):
        h = getattr(h, part)
    return h


async def watch(dut, clock, trace: dict[str, list]) -> None:  # noqa: ANN001
    from cocotb.triggers import RisingEdge

    sigs = [(name, _handle(dut, v), _handle(dut, r) if r else None)
            for name, (v, r) in TRACED.items()]
    for name, *_ in sigs:
        trace[name] = []
    state = dut.u_req.state
    trace["req_state"] = []   # [time, state] at each change of roce_req's state register
    last = -1
    while True:
        await RisingEdge(dut.clk)   # (values read here are those the edge sampled)
        now = clock.now()
        for name, v, r in sigs:
            if v.value == 1 and (r is None or r.value == 1):
                trace[name].append(now)
        st = int(state.value)
        if st != last:
            trace["req_state"].append([now, st])
            last = st


@cocotb.test(skip=TOPLEVEL != "roce_nic")
async def cosim_throughput(dut) -> None:
    """RDMA WRITEs of each size, back to back, RTL -> model: frame start cycles per size."""
    from nicsim.cosim import cosim_world
    from nicsim.fabric.link import LinkConfig
    from nicsim.host.host import CpuCosts
    from nicsim.host.pcie import PcieConfig

    sizes = parse_sizes(os.environ.get("BENCH_SIZES", DEFAULT_SIZES))
    mtu = int(os.environ.get("BENCH_MTU", "4096"))
    clk_ns = float(os.environ.get("BENCH_CLK_NS", "4"))
    pcie = PcieConfig(gen=int(os.environ.get("BENCH_PCIE_GEN", "3")))
    costs = CpuCosts()
    if os.environ.get("BENCH_POST_NS"):
        costs = replace(costs, post_send=float(os.environ["BENCH_POST_NS"]))
    w, rtl = cosim_world(dut, seed=7, clk_ns=clk_ns, pcie=pcie, costs=costs,
                         link=LinkConfig(rate_gbps=400))
    rtl.mac.keep_sent = True
    await rtl.reset()
    rtl.clock.couple(w.env)
    trace: dict[str, list] = {}
    if os.environ.get("BENCH_TRACE") == "1":
        cocotb.start_soon(watch(dut, rtl.clock, trace))
    c0 = rtl.clock.catchups
    t0, cpu0 = time.perf_counter(), time.process_time()
    res = await bridge(write_stream)(w, rtl, sizes, mtu)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    w.close()
    assert not res["bad"], f"host b's memory differs for sizes {res['bad']}"
    assert rtl.clock.late == 0, f"{rtl.clock.late} effects crossed late"
    mac = rtl.mac
    out = []
    for g in res["groups"]:
        assert g["completions"] == [tuple(x) for x in g["want"]], (g["size"], g["completions"])
        i0, i1 = g["frames"]
        recs = check_frames(g["size"], g["messages"], mtu, mac.sent[i0:i1])
        start = [(t - rtl.clock.offset_ps) / 1000.0
                 for t in mac.sent_at[i0:i1]]
        for r, t in zip(recs, start, strict=True):
            r["start_ns"] = t
        out.append({k: g[k] for k in ("size", "messages", "post_ns", "posted_ns", "done_ns",
                                      "wall_s", "rtl_wall_s", "cpu_s", "rtl_cpu_s",
                                      "read_bytes", "read_tlps")}
                   | {"frames": recs})
    data_frames = sum(len(g["frames"]) for g in out)
    line = {"simulator": cocotb.SIM_NAME, "data_width": len(dut.m_axis_tx_tdata), "mtu": mtu,
            "clk_ns": clk_ns, "params": json.loads(os.environ.get(PARAMS_ENV, "{}")),
            "groups": out, "wall_s": wall, "rtl_wall_s": rtl.clock.rtl_wall,
            "cpu_s": cpu, "rtl_cpu_s": rtl.clock.rtl_cpu, "trace": trace,
            "sim_ns": w.env.now, "rtl_cycles": rtl.clock.now() / clk_ns,
            "catchups": rtl.clock.catchups - c0, "window_ns": rtl.clock.window_ns,
            "data_frames": data_frames, "dma": rtl.dma.counters,
            "pcie_gen": pcie.gen, "post_ns": costs.post_send,
            "pcie_bytes_per_ns": rtl.dma.pcie.cfg.bytes_per_ns,
            "tlp_overhead": rtl.dma.pcie.cfg.tlp_overhead}
    dut._log.info("%d data frames in %d sizes; %.0f RTL cycles in %.1f s wall (%.0f%% in the "
                  "RTL simulator)", data_frames, len(out), line["rtl_cycles"], wall,
                  100 * rtl.clock.rtl_wall / wall)
    path = os.environ.get("HDL_BENCH_OUT")
    if path:
        with open(path, "a") as fh:
            fh.write(json.dumps(line) + "\n")
