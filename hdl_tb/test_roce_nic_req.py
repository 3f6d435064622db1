"""cocotb testbench for the requester of hdl_tb/rtl/roce_nic.v: the unchanged driver posts the
same work requests to the RTL and to the SimPy model, and the frames the two NICs send must be
the same, byte for byte (Ethernet, IP, UDP, BTH, RETH, ImmDt, payload, pad, ICRC).

The driver program (`post_program`) builds QPs with different path MTUs (256, 1024, 4096),
IPv4 and IPv6 destinations, traffic classes and hop limits, start PSNs near the 24-bit wrap,
registers MRs holding random bytes, and posts RDMA WRITE, RDMA WRITE with immediate, SEND and
SEND with immediate: empty, one packet, many packets, many pages, unaligned, several SGEs
across MRs, solicited or not. On one more QP a WR with a bad lkey fails (LOC_PROT_ERR) and the
WR after it is flushed: the completions must be the same too. No peer answers, so nothing is
acknowledged and nothing completes but these two.

The model NIC's frames are taken at its port (a tap on its link); the RTL's at m_axis_tx (with
random backpressure). Frames are compared per destination QP, in order: the model interleaves
the QPs packet by packet, the RTL sends one message at a time (see roce_req.v).

The harness (NicTB: AXI4-Lite BAR, AXI4 DMA slave over the host's memory, time coupling) is
hdl_tb/nic_bench.py's.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field

import cocotb
import pytest
from cocotb.task import bridge, resume
from cocotb.triggers import ClockCycles

from hdl_tb.nic_bench import IP, MAC, MEM_SIZE, PEER_IP, PEER_MAC, SEED, TOPLEVEL, NicTB, RtlBar
from nicsim import hwif
from nicsim.cosim.build import PARAMS_ENV
from nicsim.cosim.build import roce_nic_params as bench_params
from nicsim.sim import Sim

PEER_IP6 = "fd00::2"


@dataclass
class QpSpec:
    path_mtu: int  # ibv_mtu: 2 = 512 ... 5 = 4096
    dest_qpn: int
    dgid: str
    traffic_class: int
    hop_limit: int
    sq_psn: int


@dataclass
class WrSpec:
    qp: int
    opcode: int
    sges: list[tuple[int, int, int]]  # (MR, offset, length)
    raddr: int
    rkey: int
    imm: int = 0
    flags: int = 0
    bad_lkey: bool = False


@dataclass
class Plan:
    qps: list[QpSpec]
    mr_sizes: list[int]
    wrs: list[WrSpec]
    fail_qp: int  # the QP whose first WR has a bad lkey
    expected_frames: int = 0
    seed: int = 0
    extra: dict = field(default_factory=dict)


def make_plan(seed: int, small: bool) -> Plan:
    """The work requests both NICs are given (deterministic in `seed`)."""
    from nicsim.driver import enums as e

    rng = random.Random(seed)
    qps = [
        QpSpec(3, 0x12345, "::ffff:" + PEER_IP, 0x2e << 2, 33, 0xFFFFF0),   # 1024, PSN wraps
        QpSpec(1, 0x00777, "::ffff:" + PEER_IP, 0, 0, 17),                  # 256
        QpSpec(5, 0xABCDE, PEER_IP6, 0x0B << 2, 7, 0x800000),               # 4096, IPv6
        QpSpec(3, 0x00999, "::ffff:" + PEER_IP, 0, 0, 5),                   # the failing QP
    ]
    mr_sizes = [5 * 4096 + 300, 3 * 4096, 4096]
    W, WI, S, SI = (e.IBV_WR_RDMA_WRITE, e.IBV_WR_RDMA_WRITE_WITH_IMM, e.IBV_WR_SEND,
                    e.IBV_WR_SEND_WITH_IMM)
    sol = e.IBV_SEND_SOLICITED
    sig = e.IBV_SEND_SIGNALED
    big = 3 * 4096 + 777 if not small else 2 * 4096 + 5
    wrs = [
        WrSpec(0, W, [(0, 0, 64)], 0x1000_0000, 0x1234),                      # one packet
        WrSpec(0, W, [(0, 5, big)], 0x7F00_0000_0003, 0x55AA01, flags=sig),   # many pages
        WrSpec(1, S, [(1, 100, 1000)], 0, 0, flags=sol),                      # 4 packets
        WrSpec(2, WI, [(0, 4000, 5000)], 0xFFFF_FFFF_F000, 0xDEAD, imm=0xC0FFEE),
        WrSpec(0, SI, [(0, 1, 3), (1, 4095, 2), (2, 0, 1030)], 0, 0, imm=0x01020304),
        WrSpec(1, W, [], 0x4242, 0x77),                                        # empty WRITE
        WrSpec(2, S, [(2, 0, 0), (1, 3, 4096)], 0, 0, flags=sol | sig),        # empty SGE
        WrSpec(1, WI, [(1, 7, 513)], 0x10, 0x99, imm=7, flags=sol),            # 3 packets
        WrSpec(0, S, [], 0, 0),                                                # empty SEND
        WrSpec(3, W, [(0, 0, 100)], 0x2000, 0x5, bad_lkey=True),               # LOC_PROT_ERR
        WrSpec(3, S, [(0, 0, 10)], 0, 0),                                      # flushed
    ]
    if not small:
        for _ in range(6):
            mr = rng.randrange(3)
            off = rng.randrange(0, mr_sizes[mr] - 1)
            n = rng.randrange(0, min(mr_sizes[mr] - off, 6000))
            wrs.append(WrSpec(rng.randrange(3), rng.choice((W, WI, S, SI)), [(mr, off, n)],
                              rng.getrandbits(64), rng.getrandbits(32), rng.getrandbits(32),
                              rng.choice((0, sol))))
    expected = 0
    for w in wrs:
        if w.qp == 3:
            continue
        total = sum(n for _m, _o, n in w.sges)
        mtu = 128 << qps[w.qp].path_mtu
        expected += max(1, -(-total // mtu))
    return Plan(qps, mr_sizes, wrs, 3, expected, seed)


def post_program(host, plan: Plan, wait_frames) -> dict:  # noqa: ANN001
    """The driver program: returns the QP numbers and the completions of the failing QP."""
    from nicsim.driver import enums as e
    from nicsim.driver.kernel.ib_core import Kernel
    from nicsim.driver.user.verbs import (
        CQ,
        GID,
        MR,
        PD,
        QP,
        SGE,
        AHAttr,
        Context,
        GlobalRoute,
        QPAttr,
        QPCap,
        QPInitAttr,
        SendWR,
    )

    from nicsim.workloads.endpoint import roce_v2_gid

    Kernel(host)
    ctx = Context("nsnic0", host=host)
    pd = PD(ctx)
    cq = CQ(ctx, 64)
    rng = random.Random(plan.seed + 1)
    mrs = []
    for size in plan.mr_sizes:
        mr = MR(pd, size, e.IBV_ACCESS_LOCAL_WRITE)
        mr.write(rng.randbytes(size), size)
        mrs.append(mr)
    qps = []
    for q in plan.qps:
        qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=QPCap(32, 4, 4, 1)))
        qp.to_init(QPAttr(qp_access_flags=e.IBV_ACCESS_LOCAL_WRITE))
        av = AHAttr(gr=GlobalRoute(dgid=GID(q.dgid), traffic_class=q.traffic_class,
                                   hop_limit=q.hop_limit, sgid_index=roce_v2_gid(ctx)[0]))
        qp.to_rtr(QPAttr(path_mtu=q.path_mtu, dest_qp_num=q.dest_qpn, rq_psn=0,
                         max_dest_rd_atomic=1, min_rnr_timer=1, ah_attr=av))
        qp.to_rts(QPAttr(sq_psn=q.sq_psn, timeout=14, retry_cnt=7, rnr_retry=7,
                         max_rd_atomic=1))
        qps.append(qp)
    for i, w in enumerate(plan.wrs):
        sg = [SGE(mrs[m].buf + off, n, mrs[m].lkey ^ (0x80 if w.bad_lkey else 0))
              for m, off, n in w.sges]
        wr = SendWR(wr_id=1000 + i, opcode=w.opcode, num_sge=len(sg), sg=sg or None,
                    imm_data=w.imm, send_flags=w.flags)
        wr.set_wr_rdma(w.rkey, w.raddr)
        qps[w.qp].post_send(wr)
    wait_frames(plan.expected_frames)
    wcs = []
    for _ in range(50):
        _n, got = cq.poll(8)
        wcs += [(wc.wr_id, wc.status, wc.opcode, wc.vendor_err, wc.qp_num) for wc in got]
        if len(wcs) >= 2:
            break
    return {"qpns": [qp.qp_num for qp in qps], "wcs": wcs}


# ================================================================ the two NICs


class FrameTap:
    """A link tap that keeps the frames (nicsim.fabric.link.Tap)."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []

    def write(self, frame: bytes, t_ns: int) -> None:
        self.frames.append(bytes(frame))


def model_run(params: dict[str, int], plan: Plan) -> tuple[dict, list[bytes]]:
    from nicsim.fabric.link import Link, LinkConfig
    from nicsim.host.host import Host, NetDev
    from nicsim.nic.config import NicConfig
    from nicsim.nic.nic import Nic

    env = Sim()
    host = Host(env, "model", MEM_SIZE, seed=SEED)
    cfg = NicConfig(mac=MAC, ip=IP, max_qp=params["NUM_QP"], max_cq=params["NUM_CQ"],
                    log_mpt_entries=(params["MPT_DEPTH"] - 1).bit_length(),
                    log_mtt_entries=(params["MTT_DEPTH"] - 1).bit_length(),
                    max_qp_wr=params["MAX_QP_WR"], max_sge=params["MAX_SGE"],
                    max_cqe=params["MAX_CQE"], max_qp_rd_atom=params["MAX_QP_RD_ATOM"],
                    max_inline=params["MAX_INLINE"], max_uar=params["MAX_UAR"])
    nic = Nic(env, "model.nic0", cfg, host.mem)
    link = Link(env, LinkConfig(), "model-void")
    nic.port.connect(link)
    link.attach(lambda frame: None)  # nobody answers
    tap = FrameTap()
    link.end_taps[0].append(tap)
    host.plug("0000:01:00.0", nic, nic.pcie, NetDev("eth0", MAC, IP))
    host.neighbours[PEER_IP] = PEER_MAC
    host.neighbours[PEER_IP6] = PEER_MAC
    res = post_program(host, plan, lambda n: host.spend(300_000.0))
    link.flush_taps()
    return res, tap.frames


def by_dest_qp(frames: list[bytes]) -> dict[int, list[bytes]]:
    from nicsim.wire import parse

    out: dict[int, list[bytes]] = {}
    for f in frames:
        out.setdefault(parse(f).dqpn, []).append(f)
    return out


def describe(f: bytes) -> str:
    from nicsim.wire import parse

    p = parse(f)
    return f"opcode {p.opcode:#04x} psn {p.psn:#08x} len {len(f)}"


@cocotb.test(skip=TOPLEVEL != "roce_nic")
async def test_frames_vs_model(dut):
    """The same WRs to the model and to the RTL: the same frames, per destination QP, byte
    for byte; the same completions for the WR that fails and the one flushed after it."""
    from nicsim.host.host import Host, NetDev
    from nicsim.host.pcie import Pcie, PcieConfig

    tb = NicTB(dut, seed=SEED + 10)
    params = tb.params
    plan = make_plan(SEED, small=tb.width > 64)
    model, model_frames = model_run(params, plan)

    env = Sim()
    host = Host(env, "rtl", MEM_SIZE, seed=SEED)
    host.plug("0000:01:00.0", RtlBar(tb), Pcie(env, PcieConfig()), NetDev("eth0", MAC, IP))
    host.neighbours[PEER_IP] = PEER_MAC
    host.neighbours[PEER_IP6] = PEER_MAC
    tb.attach_memory(host.mem)
    await tb.reset()
    tb.couple(host.env)

    async def frames_sent() -> int:
        return tb.tx.count()

    count = resume(frames_sent)

    def wait_frames(n: int) -> None:
        for _ in range(2000):
            if count() >= n:
                break
            host.spend(2000.0)
        host.spend(5000.0)  # anything beyond the expected frames shows up too

    rtl = await bridge(post_program)(host, plan, wait_frames)
    await ClockCycles(dut.clk, 200)
    rtl_frames = []
    while not tb.tx.empty():
        fr = tb.tx.recv_nowait()
        user = fr.tuser[-1] if isinstance(fr.tuser, list) else fr.tuser
        assert not int(user or 0), "a frame was marked bad (tuser)"
        rtl_frames.append(bytes(fr.tdata))

    assert rtl["qpns"] == model["qpns"]
    assert rtl["wcs"] == model["wcs"], (rtl["wcs"], model["wcs"])
    assert [w[1] for w in model["wcs"]] == [hwif.CqeStatus.LOC_PROT_ERR,
                                            hwif.CqeStatus.WR_FLUSH_ERR], model["wcs"]
    assert len(model_frames) == plan.expected_frames, (len(model_frames), plan.expected_frames)
    m, r = by_dest_qp(model_frames), by_dest_qp(rtl_frames)
    assert sorted(m) == sorted(r), (sorted(m), sorted(r))
    for dq in m:
        for i, (a, b) in enumerate(zip(m[dq], r[dq], strict=False)):
            if a != b:
                bad = next((j for j in range(min(len(a), len(b))) if a[j] != b[j]),
                           min(len(a), len(b)))
                raise AssertionError(
                    f"QP {dq:#x} frame {i} differs at byte {bad}: model {describe(a)} "
                    f"{a[bad:bad + 16].hex()} / rtl {b[bad:bad + 16].hex()} (len {len(b)})")
        assert len(m[dq]) == len(r[dq]), (dq, len(m[dq]), len(r[dq]))
    c = {k: int(getattr(dut, f"cnt_req_{k}").value) for k in ("wqes", "pkts", "bytes", "errors")}
    dut._log.info("%d frames identical over %d QPs; requester counters %s", len(rtl_frames),
                  len(m), c)
    assert c["pkts"] == len(rtl_frames) and c["errors"] == 2


# ================================================================ pytest entry point


# (data width, BAR0's AXI4-Lite width): the 64-bit build takes its doorbells on a 32-bit bus
@pytest.mark.parametrize(("data_width", "axil_width"), [(64, 32), (512, 64)],
                         ids=["64-axil32", "512"])
def test_roce_nic_req(data_width, axil_width):
    from hdl_tb.cocotb_run import roce_nic_sources, run

    params = bench_params(data_width, axil_width)
    run("roce_nic", roce_nic_sources(), "test_roce_nic_req", params,
        extra_env={PARAMS_ENV: json.dumps(params)})
