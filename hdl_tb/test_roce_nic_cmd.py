"""cocotb testbench for hdl_tb/rtl/roce_nic.v: nicsim's unchanged kernel driver and verbs library
run against the RTL, and the same program against the SimPy model, with the results compared.
How the driver reaches the RTL (NicTB: AXI4-Lite BAR, AXI4 DMA slave over the host's memory,
time coupling) is told in hdl_tb/nic_bench.py.

The comparison: `scenario()` is one driver program (boot with QUERY_DEVICE and INIT_HCA, verbs
Context/PD/CQ/QP/MR, RESET->INIT->RTR->RTS->SQD->RTS, bad transitions at the verbs and at the
device level, QUERY_QP, multi-page MRs written in several WRITE_MTT commands, doorbells through
the owner's and another process's page, every CmdStatus the device can return, destroy and
close). It runs on a model host (nicsim.nic.Nic with a NicConfig of the RTL's capacities) and on
the RTL host. Every mailbox command's (opcode, modifier, status) is recorded at the MMIO level
(`CmdRecorder`) and must be identical, as must every result the program notes (DeviceCaps, the
QUERY_QP and QUERY_CQ records field by field, keys, the errno of each failure, doorbell
counters). The RTL's doorbell event outputs are checked too (test_driver_vs_model). The
model is configured as the RTL reports itself (QUERY_DEVICE, FEATURES: no event queues, SRQs,
ODP, multicast or BlueFlame); the program also tries each of those (EOPNOTSUPP with no
command sent: the command streams hold every command hwif.device_commands gives for the
device and no other) and resizes a CQ holding completions written through the datapath's
ports (Probe.complete), polling them in order across the moves.

test_datapath_hooks (RTL only, same driver): a posted send is fetched by wqe_fetch from the SQ
ring the provider wrote; a completion pushed into cqe_write is polled by verbs; DESTROY_CQ is held
by the fence until a CQE write's B response (held back) arrives; and an MR registered with three
WRITE_MTT commands is looked up through mr_translate's request port, every result equal to
nicsim.nic.translation's for the pages the driver pinned (then refused after deregistration).

test_raw_mailbox: the mailbox without the driver, against the model: input and output blocks
at every byte alignment and across 4 KiB boundaries, random records with bits the driver never
sets, all attr_mask bits, GO while busy, every opcode the device lacks, RESIZE_CQ of rings
holding datapath-written CQEs (refused, moved, wrapped, 1 and 2 entries); statuses, register
reads and every byte of the memory the outputs went to must be equal (so the RTL writes exactly
the model's bytes, nothing more).
"""

from __future__ import annotations

import errno
import json
import random
from dataclasses import dataclass
from enum import IntEnum

import cocotb
import pytest
from cocotb.simtime import get_sim_time
from cocotb.task import bridge, resume
from cocotb.triggers import ClockCycles, RisingEdge

from hdl_tb.nic_bench import (
    CLK_NS,
    IP,
    MAC,
    MEM_SIZE,
    PEER_IP,
    PEER_MAC,
    SEED,
    TOPLEVEL,
    NicTB,
    RtlBar,
)
from nicsim import hwif
from nicsim.cosim.build import PARAMS_ENV
from nicsim.cosim.build import roce_nic_params as bench_params
from nicsim.sim import Sim

COMPLETE_NS = 2000.0  # a completion the program has the datapath write lands within this


# ================================================================ the device side


class CmdRecorder:
    """An MmioDevice in front of another: notes every mailbox command as (opcode, modifier,
    status) when the driver reads its completion, so two devices can be compared command by
    command."""

    def __init__(self, dev) -> None:  # noqa: ANN001
        self.dev = dev
        self.regs: dict[int, int] = {}
        self.pending: tuple[int, int] | None = None
        self.log: list[tuple[str, int, str]] = []

    def mmio_write(self, offset: int, value: int) -> None:
        if offset < hwif.UAR_BASE:
            self.regs[offset] = value
            if offset == hwif.Reg.CMD_GO:
                self.pending = (self.regs.get(hwif.Reg.CMD_OPCODE, 0),
                                self.regs.get(hwif.Reg.CMD_MOD, 0))
        self.dev.mmio_write(offset, value)

    def mmio_read(self, offset: int) -> int:
        v = self.dev.mmio_read(offset)
        if offset == hwif.Reg.CMD_STATUS and self.pending and not v & hwif.CMD_BUSY:
            op, mod = self.pending
            try:
                name = hwif.CmdOpcode(op).name
            except ValueError:
                name = hex(op)
            self.log.append((name, mod, hwif.CmdStatus(v & 0xFF).name))
            self.pending = None
        return v


# ================================================================ the program


@dataclass
class Probe:
    """What the program may ask of the device besides the driver: its doorbell counters, and
    completions written as the datapath writes them (the model's CqWriter.post, the RTL's
    cqe_write s_cqe port), so both devices hold the same CQEs."""

    doorbells: object  # () -> {"sq": accepted SQ doorbells, "drop": dropped, "armed": [cqn]}
    complete: object  # (cqn, hwif.Cqe) -> None, the CQE in host memory when it returns


class Bogus(IntEnum):
    """An opcode hwif does not define (the driver's cmd() wants an enum member)."""

    BOGUS = 0x77


def scenario(host, probe: Probe, mtt_chunk: int) -> list[tuple[str, object]]:  # noqa: ANN001, C901
    """One driver program; returns what it observed, in order."""
    from nicsim.driver import enums as e
    from nicsim.driver.abi import DeregMr, DestroyCq, UverbsError
    from nicsim.driver.kernel.hw.objects import HwError
    from nicsim.driver.kernel.ib_core import Kernel
    from nicsim.driver.user.unsupported import SrqAttr, SrqInitAttr
    from nicsim.driver.user.verbs import (
        CQ,
        GID,
        MR,
        PD,
        QP,
        SRQ,
        AHAttr,
        CompChannel,
        Context,
        GlobalRoute,
        PyverbsRDMAError,
        QPAttr,
        QPCap,
        QPInitAttr,
        RecvWR,
    )

    from nicsim.workloads.endpoint import roce_v2_gid

    out: list[tuple[str, object]] = []

    def note(label: str, value: object) -> None:
        out.append((label, value))

    def attempt(label: str, fn):  # noqa: ANN001, ANN202
        try:
            r = fn()
        except PyverbsRDMAError as x:
            note(label, ("errno", errno.errorcode.get(x.error_code, x.error_code)))
            return None
        except (HwError, UverbsError) as x:
            note(label, ("errno", errno.errorcode.get(x.errno, x.errno)))
            return None
        note(label, "ok")
        return r

    kernel = Kernel(host)
    hw = kernel.devices["nsnic0"].hw
    caps = hw.caps
    note("caps", caps)
    note("multicast", hwif.DevFeature.MULTICAST in hw.features)
    # the commands the device says it has: the program must issue every one of them
    note("device commands", sorted(o.name for o in hwif.device_commands(caps, hw.features)))

    ctx = Context("nsnic0", host=host)
    pd = PD(ctx)
    cq_a = CQ(ctx, 64)
    cq_b = CQ(ctx, 20)
    note("cqns", (cq_a.cqn, cq_b.cqn))
    qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq_a, rcq=cq_b,
                           cap=QPCap(16, 16, min(4, caps.max_sge), 2, 64)))
    qpn = qp.qp_num
    note("qpn", qpn)
    note("query new", hw.query_qp(qpn))

    acc = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
    attempt("to_init", lambda: qp.to_init(QPAttr(qp_access_flags=acc)))
    note("query init", hw.query_qp(qpn))
    # verbs: INIT -> RTS is no transition (ib_core refuses it; the device never sees it)
    attempt("verbs INIT->RTS", lambda: qp.modify(QPAttr(qp_state=e.IBV_QPS_RTS),
                                                 e.IBV_QP_STATE))
    # device: the same transition sent by the driver directly -> BAD_STATE (EINVAL)
    bad = hwif.blank_qpc(qpn)
    bad.state, bad.attr_mask = hwif.QpState.RTS, hwif.QpAttrMask.STATE
    attempt("hw INIT->RTS", lambda: hw.modify_qp(bad))
    note("query after bad", hw.query_qp(qpn))

    av = AHAttr(gr=GlobalRoute(dgid=GID("::ffff:" + PEER_IP), traffic_class=0x2e,
                               hop_limit=33, sgid_index=roce_v2_gid(ctx)[0]))
    attempt("to_rtr", lambda: qp.to_rtr(QPAttr(path_mtu=4, dest_qp_num=0x12345,
                                               rq_psn=0x1abcdef, max_dest_rd_atomic=3,
                                               min_rnr_timer=5, ah_attr=av)))
    note("query rtr", hw.query_qp(qpn))
    attempt("to_rts", lambda: qp.to_rts(QPAttr(sq_psn=0xfedcba, timeout=18, retry_cnt=6,
                                               rnr_retry=5, max_rd_atomic=2)))
    note("query rts", hw.query_qp(qpn))
    attr, _ = qp.query()
    note("verbs query", (attr.qp_state, attr.path_mtu, attr.qp_access_flags, attr.dest_qp_num,
                         attr.rq_psn, attr.sq_psn, attr.timeout, attr.retry_cnt, attr.rnr_retry,
                         attr.min_rnr_timer, attr.max_rd_atomic, attr.max_dest_rd_atomic,
                         attr.ah_attr.gr.dgid.raw, attr.ah_attr.gr.hop_limit,
                         attr.ah_attr.gr.traffic_class))
    attempt("RTS->SQD", lambda: qp.modify(QPAttr(qp_state=e.IBV_QPS_SQD), e.IBV_QP_STATE))
    attempt("SQD->RTS", lambda: qp.modify(QPAttr(qp_state=e.IBV_QPS_RTS, min_rnr_timer=9),
                                          e.IBV_QP_STATE | e.IBV_QP_MIN_RNR_TIMER))
    attempt("RTS->RTS access", lambda: qp.modify(QPAttr(qp_access_flags=e.IBV_ACCESS_LOCAL_WRITE),
                                                 e.IBV_QP_ACCESS_FLAGS))
    note("query rts2", hw.query_qp(qpn))
    attempt("verbs RTS->RTR", lambda: qp.modify(QPAttr(qp_state=e.IBV_QPS_RTR), e.IBV_QP_STATE))

    # doorbells: the owner's page (pi 0: nothing to fetch), another process's page, a QP that
    # does not exist, an arm through each page
    ctx2 = Context("nsnic0", host=host)
    note("uars", (ctx.file.uctx.uar, ctx2.file.uctx.uar))
    db, db2 = ctx.file.doorbells, ctx2.file.doorbells
    db.write64(hwif.UarReg.SQ_DB, qpn << 32)
    db.write64(hwif.UarReg.RQ_DB, qpn << 32)
    db.write64(hwif.UarReg.CQ_ARM, cq_a.cqn << 32)
    db2.write64(hwif.UarReg.SQ_DB, (qpn << 32) | 3)  # another process: dropped
    db2.write64(hwif.UarReg.RQ_DB, (qpn << 32) | 3)
    db2.write64(hwif.UarReg.CQ_ARM, (cq_b.cqn << 32) | (1 << 31))
    db.write64(hwif.UarReg.SQ_DB, ((qpn + 1) << 32) | 1)  # no such QP
    db.write64(hwif.UarReg.CQ_ARM, (cq_b.cqn << 32) | (1 << 31))
    host.spend(3000.0)  # the posted writes reach the device
    note("doorbells", probe.doorbells())

    # memory registration: small, unaligned, and one written in three WRITE_MTT commands
    mr1 = attempt("reg small", lambda: MR(pd, 3 * hwif.PAGE_SIZE + 100, acc))
    buf = ctx.alloc(5 * hwif.PAGE_SIZE)
    mr2 = attempt("reg unaligned", lambda: MR(pd, 2 * hwif.PAGE_SIZE, e.IBV_ACCESS_LOCAL_WRITE,
                                              address=buf + 0x123))
    big_pages = 2 * mtt_chunk + 5
    mr3 = attempt("reg big", lambda: MR(pd, big_pages * hwif.PAGE_SIZE,
                                        e.IBV_ACCESS_LOCAL_WRITE))
    note("keys", tuple(m.lkey for m in (mr1, mr2, mr3) if m is not None))
    note("mr3 mtt", (hw.mrs[mr3.lkey >> 8].mtt_start, hw.mrs[mr3.lkey >> 8].npages))

    # the port (QUERY_PORT, where hwif has it): no link on either device here
    if hasattr(hwif.CmdOpcode, "QUERY_PORT"):
        qport = hwif.CmdOpcode["QUERY_PORT"]
        note("port", attempt("QUERY_PORT", lambda: hw.cmd(qport, mod=1, out_size=8)))
        attempt("QUERY_PORT 2", lambda: hw.cmd(qport, mod=2, out_size=8))

    # every status the device can give, through the driver's own mailbox routine
    attempt("bogus opcode", lambda: hw.cmd(Bogus.BOGUS))
    attempt("INIT_HCA too big", lambda: hw.cmd(hwif.CmdOpcode.INIT_HCA, hwif.HcaInit(
        hw.mpt_pa, hw.mtt_pa, 40, 2).pack()))
    attempt("WRITE_MPT beyond", lambda: hw.cmd(hwif.CmdOpcode.WRITE_MPT, hwif.Mpt(
        caps.max_mpt << 8, 1, 0, 1, 0, 0, 1).sw_part(), mod=caps.max_mpt))
    attempt("INVALIDATE_MPT beyond", lambda: hw.cmd(hwif.CmdOpcode.INVALIDATE_MPT,
                                                    mod=caps.max_mpt))
    attempt("WRITE_MTT beyond", lambda: hw.cmd(hwif.CmdOpcode.WRITE_MTT,
                                               hwif.pack_mtt([0x1000, 0x2000]),
                                               mod=caps.max_mtt - 1))
    attempt("WRITE_MTT empty", lambda: hw.cmd(hwif.CmdOpcode.WRITE_MTT, hwif.pack_mtt([]),
                                              mod=0))
    free_cqn = caps.max_cq - 1
    uar = ctx.file.uctx.uar
    ring = hw.cqs[cq_a.cqn].ring_pa
    def cqc(cqn: int, log: int, u: int) -> hwif.Cqc:
        return hwif.Cqc(cqn=cqn, log_size=log, state=0, base=ring, dbrec=ring, eqn=0, uar=u)

    for label, c in (
        ("CREATE_CQ cqn beyond", cqc(caps.max_cq, 3, uar)),
        ("CREATE_CQ exists", cqc(cq_a.cqn, 3, uar)),
        ("CREATE_CQ uar 0", cqc(free_cqn, 3, 0)),
        ("CREATE_CQ uar beyond", cqc(free_cqn, 3, caps.max_uar + 1)),
        ("CREATE_CQ too big", cqc(free_cqn, 40, uar)),
        ("CREATE_CQ > max_cqe", cqc(free_cqn, (caps.max_cqe * 2 - 1).bit_length(), uar)),
    ):
        attempt(label, lambda c=c: hw.cmd(hwif.CmdOpcode.CREATE_CQ, c.pack()))
    note("QUERY_CQ", (hw.query_cq(cq_a.cqn), hw.query_cq(cq_b.cqn)))
    attempt("QUERY_CQ none", lambda: hw.query_cq(free_cqn))
    attempt("QUERY_CQ beyond", lambda: hw.query_cq(caps.max_cq + 1))
    base = hw.query_qp(qpn)
    for label, change in (
        ("CREATE_QP qpn 0", {"qpn": 0}),
        ("CREATE_QP qpn beyond", {"qpn": caps.max_qp}),
        ("CREATE_QP exists", {}),
        ("CREATE_QP bad type", {"qpn": caps.max_qp - 1, "type": 9}),
        ("CREATE_QP uar 0", {"qpn": caps.max_qp - 1, "uar": 0}),
        ("CREATE_QP no CQ", {"qpn": caps.max_qp - 1, "send_cqn": free_cqn}),
        ("CREATE_QP CQ beyond", {"qpn": caps.max_qp - 1, "recv_cqn": caps.max_cq + 3}),
    ):
        c = hwif.Qpc.unpack(base.pack())
        for k, v in change.items():
            setattr(c, k, v)
        attempt(label, lambda c=c: hw.cmd(hwif.CmdOpcode.CREATE_QP, c.pack()))
    attempt("QUERY_QP none", lambda: hw.query_qp(qpn + 1))
    attempt("QUERY_QP beyond", lambda: hw.query_qp(caps.max_qp + 5))
    ghost = hwif.blank_qpc(qpn + 1)
    ghost.attr_mask = hwif.QpAttrMask.STATE
    attempt("MODIFY_QP none", lambda: hw.modify_qp(ghost))
    attempt("DESTROY_QP none", lambda: hw.cmd(hwif.CmdOpcode.DESTROY_QP, mod=qpn + 1))
    attempt("DESTROY_CQ none", lambda: hw.cmd(hwif.CmdOpcode.DESTROY_CQ, mod=free_cqn))
    # destroying a CQ a QP uses: the kernel refuses (EBUSY), and so does the device (BUSY)
    attempt("verbs destroy busy CQ", lambda: ctx.file.write(DestroyCq(cq_a.handle)))
    attempt("hw destroy busy CQ", lambda: hw.cmd(hwif.CmdOpcode.DESTROY_CQ, mod=cq_a.cqn))
    # a modify without STATE keeps the state: RTS -> RTS is allowed
    nostate = hwif.Qpc.unpack(base.pack())
    nostate.attr_mask, nostate.timeout = hwif.QpAttrMask.TIMEOUT, 3
    attempt("hw RTS modify without STATE", lambda: hw.modify_qp(nostate))
    note("query nostate", hw.query_qp(qpn))

    # to ERR behind the kernel's back (as an error completion would), then RESET and up again
    err = hwif.blank_qpc(qpn)
    err.state, err.attr_mask = hwif.QpState.ERR, hwif.QpAttrMask.STATE
    attempt("hw ->ERR", lambda: hw.modify_qp(err))
    note("query err", hw.query_qp(qpn))
    attempt("verbs ->RESET", lambda: qp.modify(QPAttr(qp_state=e.IBV_QPS_RESET), e.IBV_QP_STATE))
    note("query reset", hw.query_qp(qpn))
    attempt("to_init 2", lambda: qp.to_init(QPAttr(qp_access_flags=acc)))
    attempt("to_rtr 2", lambda: qp.to_rtr(QPAttr(path_mtu=5, dest_qp_num=0x77, rq_psn=1,
                                                 max_dest_rd_atomic=1, min_rnr_timer=1,
                                                 ah_attr=av)))
    # RTR -> RTR is not (BAD_STATE), with or without STATE in the mask
    attempt("hw RTR modify without STATE", lambda: hw.modify_qp(nostate))
    rtr = hwif.Qpc.unpack(nostate.pack())
    rtr.state, rtr.attr_mask = hwif.QpState.RTR, hwif.QpAttrMask.STATE
    attempt("hw RTR->RTR", lambda: hw.modify_qp(rtr))
    attempt("to_rts 2", lambda: qp.to_rts(QPAttr(sq_psn=2, timeout=1, retry_cnt=1,
                                                 rnr_retry=7, max_rd_atomic=1)))
    note("query rts3", hw.query_qp(qpn))

    # What the device lacks (no event queues, SRQs, ODP or multicast in DeviceCaps / FEATURES):
    # each verb fails with EOPNOTSUPP, as Linux answers for an op a device does not have, and
    # not one command reaches the device (the command streams are compared)
    da = ctx.query_device()
    note("device attrs", (da.max_srq, da.max_srq_wr, da.max_srq_sge, da.max_mcast_grp,
                          da.max_mcast_qp_attach, da.max_total_mcast_qp_attach,
                          da.num_comp_vectors, da.device_cap_flags))
    note("odp caps", ctx.query_device_ex().odp_caps.general_caps)
    before = hw.lim.commands
    attempt("reg ODP MR", lambda: MR(pd, hwif.PAGE_SIZE,
                                     e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_ON_DEMAND))
    attempt("comp channel", lambda: CompChannel(ctx))
    attempt("async event", ctx.get_async_event)
    attempt("create SRQ", lambda: SRQ(pd, SrqInitAttr(SrqAttr(16, 1))))
    ud = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_UD, scq=cq_a, rcq=cq_a, cap=QPCap(4, 4, 1, 1)))
    before += 1  # (its CREATE_QP)
    attempt("attach mcast", lambda: ud.attach_mcast(GID("ff0e::1:2")))
    note("commands for what the device lacks", hw.lim.commands - before)
    attempt("close UD", ud.close)

    # RESIZE_CQ: completions written by the datapath, some polled, the rest moved in order
    rcq = CQ(ctx, 8)
    rqp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=rcq, rcq=rcq, cap=QPCap(1, 32, 1, 1)))
    attempt("rqp to_init", lambda: rqp.to_init(QPAttr(qp_access_flags=acc)))
    note("rqp", rqp.qp_num)
    for i in range(20):
        rqp.post_recv(RecvWR(wr_id=700 + i))
    made = 0

    def complete(k: int) -> None:
        nonlocal made
        for _ in range(k):
            probe.complete(rcq.cqn, hwif.Cqe(rqp.qp_num, made, hwif.CqeOpcode.RECV,
                                             hwif.CqeStatus.SUCCESS, 100 + made))
            made += 1

    def poll(k: int) -> list[tuple[int, int, int]]:
        got: list[tuple[int, int, int]] = []
        for _ in range(4 * k + 2):
            if len(got) >= k:
                break
            got += [(w.wr_id, w.status, w.byte_len) for w in rcq.poll(k - len(got))[1]]
        return got

    complete(6)
    note("poll 2", poll(2))
    attempt("resize 8 -> 32", lambda: rcq.resize(20))  # 4 unpolled CQEs move
    note("rcq", (rcq.cqe, hw.query_cq(rcq.cqn).log_size))
    note("poll 3", poll(3))
    complete(5)  # 6 unpolled now
    attempt("resize 32 -> 4 (6 unpolled)", lambda: rcq.resize(4))  # EINVAL, CQ unchanged
    attempt("resize 32 -> 8", lambda: rcq.resize(8))
    note("poll 1", poll(1))
    complete(3)  # 8 unpolled: the ring is full
    attempt("resize 8 -> 8", lambda: rcq.resize(7))  # same size: no command
    attempt("resize 8 -> 2 (8 unpolled)", lambda: rcq.resize(2))
    note("poll all", poll(8))
    attempt("resize 8 -> 2", lambda: rcq.resize(2))
    complete(2)
    note("poll after", poll(2))
    note("rcq end", (rcq.cqe, hw.query_cq(rcq.cqn)))
    rcqc = hwif.Cqc(rcq.cqn, 1, 0, hw.cqs[rcq.cqn].ring_pa, hw.cqs[rcq.cqn].dbrec_pa, 0, 0)
    attempt("hw RESIZE_CQ none", lambda: hw.cmd(hwif.CmdOpcode.RESIZE_CQ, rcqc.pack(),
                                                 mod=free_cqn))
    big = hwif.Cqc.unpack(rcqc.pack())
    big.log_size = (caps.max_cqe * 2 - 1).bit_length()
    attempt("hw RESIZE_CQ > max_cqe", lambda: hw.cmd(hwif.CmdOpcode.RESIZE_CQ, big.pack(),
                                                     mod=rcq.cqn))
    attempt("close rqp", rqp.close)
    attempt("close rcq", rcq.close)

    # a second QP using one CQ both ways (two references), destroyed before that CQ
    qp2 = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq_b, rcq=cq_b, cap=QPCap(4, 4, 1, 1)))
    note("qp2", (qp2.qp_num, hw.query_qp(qp2.qp_num)))
    attempt("hw destroy CQ of qp2", lambda: hw.cmd(hwif.CmdOpcode.DESTROY_CQ, mod=cq_b.cqn))
    attempt("close qp2", qp2.close)
    attempt("hw destroy CQ still used by qp", lambda: hw.cmd(hwif.CmdOpcode.DESTROY_CQ,
                                                              mod=cq_b.cqn))
    attempt("close qp", qp.close)
    attempt("QUERY_QP destroyed", lambda: hw.query_qp(qpn))
    attempt("close cq_b", cq_b.close)

    # deregistration: INVALIDATE_MPT (fenced); a stale index invalidated again is accepted,
    # a stale handle is refused by the kernel
    mr1_handle, mr1_index = mr1.handle, mr1.lkey >> 8
    attempt("dereg small", mr1.close)
    attempt("INVALIDATE_MPT stale", lambda: hw.cmd(hwif.CmdOpcode.INVALIDATE_MPT,
                                                   mod=mr1_index))
    attempt("dereg stale handle", lambda: ctx.file.write(DeregMr(mr1_handle)))
    attempt("dereg big", mr3.close)
    attempt("close pd", pd.close)  # closes mr2 first
    attempt("close ctx", ctx.close)  # destroys cq_a
    attempt("close ctx2", ctx2.close)
    attempt("DESTROY_CQ gone", lambda: hw.cmd(hwif.CmdOpcode.DESTROY_CQ, mod=cq_a.cqn))
    note("command count", hw.lim.commands)
    return out


# ================================================================ cocotb tests


def _model_host(params: dict[str, int]):  # noqa: ANN202
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
                    max_inline=params["MAX_INLINE"], max_uar=params["MAX_UAR"],
                    # what the RTL lacks (its QUERY_DEVICE and FEATURES say so): on-demand
                    # paging, event queues, SRQs, multicast, BlueFlame, RoCE v1
                    odp=False, max_eq=0, max_srq=0, multicast=False, bf_size=0,
                    roce_v1=False)
    nic = Nic(env, "model.nic0", cfg, host.mem)
    rec = CmdRecorder(nic)
    host.plug("0000:01:00.0", rec, nic.pcie, NetDev("eth0", MAC, IP))
    host.neighbours[PEER_IP] = PEER_MAC

    def doorbells() -> dict[str, object]:
        c = nic.engine.counters
        return {"sq": c["doorbells"], "drop": c["doorbell_bad_target"],
                "armed": sorted(n for n, q in nic.cq.cqs.items() if q.armed)}

    def complete(cqn: int, c: hwif.Cqe) -> None:
        nic.cq.post(cqn, c.qpn, c.wqe_index, c.opcode, c.status, c.byte_len, c.imm_inv,
                    c.src_qp, c.flags, c.vendor_err)
        host.spend(COMPLETE_NS)

    return host, rec, Probe(doorbells, complete), nic


def _rtl_host(tb: NicTB):  # noqa: ANN202
    from nicsim.host.host import Host, NetDev
    from nicsim.host.pcie import Pcie, PcieConfig

    env = Sim()
    host = Host(env, "rtl", MEM_SIZE, seed=SEED)
    rec = CmdRecorder(RtlBar(tb))
    host.plug("0000:01:00.0", rec, Pcie(env, PcieConfig()), NetDev("eth0", MAC, IP))
    host.neighbours[PEER_IP] = PEER_MAC
    counters = resume(tb._counters)
    push = resume(tb._push_cqe)

    def doorbells() -> dict[str, object]:
        c = counters()
        return {"sq": c["db_sq"], "drop": c["db_drop"],
                "armed": sorted({n for n, _s in tb.arm_events})}

    def complete(cqn: int, c: hwif.Cqe) -> None:
        push(cqn, c)
        host.spend(COMPLETE_NS)

    return host, rec, Probe(doorbells, complete)


def mtt_chunk() -> int:
    """MTT entries per WRITE_MTT command of the driver under test."""
    from nicsim.driver.kernel.hw.objects import MTT_PER_CMD

    return MTT_PER_CMD


def compare(model: list, rtl: list, what: str) -> None:
    for i, (m, r) in enumerate(zip(model, rtl, strict=False)):
        assert m == r, f"{what} #{i} differs:\n  model {m}\n  rtl   {r}"
    assert len(model) == len(rtl), f"{what}: model {len(model)} entries, rtl {len(rtl)}"


@cocotb.test(skip=TOPLEVEL != "roce_nic")
async def test_driver_vs_model(dut):
    """The kernel driver and verbs against the RTL and against the model: every command's
    status, every query and every errno identical."""
    tb = NicTB(dut, seed=SEED)
    params = tb.params
    chunk = mtt_chunk()

    host_m, rec_m, probe_m, _nic = _model_host(params)
    model = scenario(host_m, probe_m, chunk)

    host_r, rec_r, probe_r = _rtl_host(tb)
    tb.attach_memory(host_r.mem)
    await tb.reset()
    tb.couple(host_r.env)
    rtl = await bridge(scenario)(host_r, probe_r, chunk)

    dut._log.info("%d commands, %d observations; statuses: %s", len(rec_r.log), len(rtl),
                  sorted({s for _o, _m, s in rec_r.log}))
    compare(rec_m.log, rec_r.log, "command (opcode, mod, status)")
    compare(model, rtl, "observation")
    statuses = {s for _o, _m, s in rec_r.log}
    assert statuses == {s.name for s in hwif.CmdStatus}, f"statuses covered: {statuses}"
    # every command the device reports having was issued; none of those it lacks (the one
    # BAD_OPCODE is the program's own undefined opcode)
    ops = {o for o, _m, _s in rec_r.log}
    have = set(dict(rtl)["device commands"])
    assert ops - {Bogus.BOGUS.name, hex(Bogus.BOGUS)} == have, f"opcodes: {ops} vs {have}"
    assert [x for x in rec_r.log if x[2] == "BAD_OPCODE"] == [(hex(Bogus.BOGUS), 0,
                                                                "BAD_OPCODE")], rec_r.log
    assert dict(rtl)["commands for what the device lacks"] == 0
    lacks = {o.name for o in hwif.CmdOpcode} - have
    assert lacks >= {"CREATE_EQ", "CREATE_SRQ", "QUERY_ODP", "ATTACH_MCAST"}, lacks
    # the completions moved by RESIZE_CQ come out in order, each once, with their bytes
    r = dict(rtl)
    assert r["poll 2"] + r["poll 3"] + r["poll 1"] + r["poll all"] + r["poll after"] == \
        [(700 + i, 0, 100 + i) for i in range(16)], r
    assert sum(1 for o, _m, s in rec_r.log if o == "RESIZE_CQ" and s == "OK") == 3
    assert sum(1 for o, _m, s in rec_r.log if o == "WRITE_MTT" and s == "OK") >= 3 + 2
    # doorbell events on the RTL's outputs: the owner's SQ and RQ doorbells and one arm
    qpn = dict(model)["qpn"]
    cqa, cqb = dict(model)["cqns"]
    rqp = dict(model)["rqp"]  # (and the RESIZE_CQ part's receives: one doorbell each)
    assert tb.db_events == [(0, qpn, 0), (1, qpn, 0)] + [(1, rqp, i) for i in range(1, 21)], \
        tb.db_events
    assert tb.arm_events == [(cqa, 0), (cqb, 1)], tb.arm_events
    c = await tb._counters()
    assert c["db_rq"] == 21 and c["arm"] == 2 and c["cmds"] == len(rec_r.log)
    assert c["cmd_errors"] == sum(1 for _o, _m, s in rec_r.log if s != "OK")
    assert tb.wqes.empty(), "a WQE was fetched for a doorbell that was dropped"
    dut._log.info("RTL time %.1f us, SimPy time %.1f us, largest RTL lag %.1f us",
                  get_sim_time("us"), host_r.env.now / 1000, tb.max_lag_ns / 1000)


def merge_contiguous(segs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The merge rule of nicsim.nic.translation.split, applied to mr_translate's per-page
    segments."""
    out: list[tuple[int, int]] = []
    for pa, n in segs:
        if out and out[-1][0] + out[-1][1] == pa:
            out[-1] = (out[-1][0], out[-1][1] + n)
        else:
            out.append((pa, n))
    return out


def xlate_probes(mpt: hwif.Mpt, npages: int, chunk: int) -> list[tuple[int, int, int, int, int]]:
    """Lookups (key, pd, access, va, len) over an MR: the first and last page, both sides of
    every WRITE_MTT chunk boundary, page-crossing ranges, and each kind of refusal."""
    base = mpt.start & ~(hwif.PAGE_SIZE - 1)
    out = []
    for page in sorted({0, 1, chunk - 1, chunk, 2 * chunk - 1, 2 * chunk, npages - 2}):
        if 0 <= page < npages - 1:
            va = base + page * hwif.PAGE_SIZE + hwif.PAGE_SIZE - 24
            out.append((mpt.key, mpt.pd, 1, max(va, mpt.start), 64))  # crosses into page+1
    end = mpt.start + mpt.length
    out += [
        (mpt.key, mpt.pd, 0, end - 16, 16),                      # the last bytes
        (mpt.key, mpt.pd, 1, mpt.start, 3 * hwif.PAGE_SIZE),      # three pages and a bit
        (mpt.key, mpt.pd, 1, mpt.start + 5, 0),                   # empty
        (mpt.key, mpt.pd, 1, end - 8, 16),                        # BOUNDS
        (mpt.key, mpt.pd + 1, 1, mpt.start, 8),                   # PD_MISMATCH
        (mpt.key, mpt.pd, hwif.Access.REMOTE_ATOMIC, mpt.start, 8),  # ACCESS
        (mpt.key ^ 0x01, mpt.pd, 1, mpt.start, 8),                # BAD_KEY (stale variant)
    ]
    return out


def xlate_check(xlate, mpt: hwif.Mpt, mtt: dict[int, int],  # noqa: ANN001
                probes: list) -> list[tuple[object, object]]:
    """(expected by nicsim.nic.translation, got from the RTL) for each lookup."""
    from nicsim.nic import translation

    out = []
    for key, pd, access, va, n in probes:
        st, segs = translation.check_and_split(mpt, mtt, key, pd, access, va, n)
        got_st, got = xlate(key, pd, int(access), va, n)
        out.append(((int(st), [tuple(x) for x in segs]), (got_st, merge_contiguous(got))))
    return out


def rtl_only(host, tb_calls: dict) -> dict:  # noqa: ANN001, C901
    """Driver program for the RTL alone: the SQ doorbell reaches wqe_fetch, a completion
    reaches the verbs poll, DESTROY_CQ waits for the fence."""
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
        RecvWR,
        SendWR,
    )

    from nicsim.workloads.endpoint import roce_v2_gid

    res: dict[str, object] = {}
    Kernel(host)
    ctx = Context("nsnic0", host=host)
    pd = PD(ctx)
    scq, rcq = CQ(ctx, 16), CQ(ctx, 16)
    qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=scq, rcq=rcq, cap=QPCap(8, 8, 2, 1)))
    mr = MR(pd, 8192, e.IBV_ACCESS_LOCAL_WRITE)
    av = AHAttr(gr=GlobalRoute(dgid=GID("::ffff:" + PEER_IP), sgid_index=roce_v2_gid(ctx)[0]))
    qp.to_init(QPAttr(qp_access_flags=e.IBV_ACCESS_LOCAL_WRITE))
    qp.to_rtr(QPAttr(path_mtu=3, dest_qp_num=0x99, ah_attr=av))
    qp.to_rts(QPAttr())
    hw = ctx.file.dev.hw
    sq = hw.qps[qp.qp_num]
    wrs = []
    for i in range(3):
        wr = SendWR(wr_id=100 + i, opcode=e.IBV_WR_RDMA_WRITE, num_sge=2,
                    sg=[SGE(mr.buf + 64 * i, 64, mr.lkey), SGE(mr.buf + 4096, 8 + i, mr.lkey)])
        wr.set_wr_rdma(0xabc0 + i, 0x1000_0000 + i)
        wrs.append(wr)
        qp.post_send(wr)
    host.spend(2000.0)  # the doorbells reach the device
    fetched = [tb_calls["next_wqe"]() for _ in wrs]
    ring = [host.mem.read(sq.sq_pa + i * (1 << sq.sq_log_stride), 48 + 32) for i in range(3)]
    res["fetched"] = fetched
    res["ring"] = ring
    res["qpn"] = qp.qp_num
    # the NIC completes WQE 2 (signaled): the CQE lands in the send CQ; verbs polls it
    tb_calls["push_cqe"](scq.cqn, hwif.Cqe(qp.qp_num, 2, hwif.CqeOpcode.RDMA_WRITE,
                                           hwif.CqeStatus.SUCCESS, 72))
    wcs = []
    for _ in range(10):  # an empty poll waits (in SimPy time, the RTL running) for a CQE write
        n, got = scq.poll(4)
        wcs += got
        if n:
            break
    res["poll"] = (len(wcs), [(w.wr_id, w.status, w.opcode, w.byte_len, w.qp_num)
                              for w in wcs])
    # fence: a CQE write whose B response is held back; DESTROY_CQ of another (idle) CQ must
    # not complete before that write has landed
    spare = CQ(ctx, 8)
    tb_calls["hold_b"](True)
    tb_calls["push_cqe"](rcq.cqn, hwif.Cqe(qp.qp_num, 0, hwif.CqeOpcode.RECV,
                                           hwif.CqeStatus.SUCCESS, 5))
    tb_calls["release_b_later"](600)
    spare.close()
    res["fence"] = tb_calls["fence_times"]()
    n = 0
    for _ in range(10):
        n += rcq.poll(2)[0]
        if n:
            break
    res["rpoll"] = n

    # what WRITE_MTT (three commands) and WRITE_MPT put into mr_translate: lookups through its
    # request port against nicsim's translation of the registration the driver made
    chunk = mtt_chunk()
    npages = 2 * chunk + 5
    acc = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_READ
    buf = ctx.alloc((npages + 1) * hwif.PAGE_SIZE)
    big = MR(pd, npages * hwif.PAGE_SIZE - 0x300 - 77, acc, address=buf + 0x300)
    hm = hw.mrs[big.lkey >> 8]
    pdn = ctx.file.uctx.objects[pd.handle].pdn
    mpt = hwif.Mpt(big.lkey, pdn, hm.va, hm.length, hm.mtt_start, acc, hwif.MptFlags.VALID,
                   hwif.PAGE_SHIFT)
    mtt = {hm.mtt_start + i: pa for i, pa in enumerate(hm.pages)}
    res["npages"] = (hm.npages, npages)
    res["xlate"] = xlate_check(tb_calls["xlate"], mpt, mtt, xlate_probes(mpt, npages, chunk))
    big.close()  # INVALIDATE_MPT: the key is refused from now on
    res["xlate_after"] = tb_calls["xlate"](big.lkey, pdn, 1, hm.va, 16)

    # RESIZE_CQ while the datapath writes completions: those cqe_write took before the hold
    # move with the rest, those that come during it wait and land in the new ring
    mcq = CQ(ctx, 64)
    mqp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=mcq, rcq=mcq, cap=QPCap(1, 64, 1, 1)))
    mqp.to_init(QPAttr(qp_access_flags=e.IBV_ACCESS_LOCAL_WRITE))
    for i in range(40):
        mqp.post_recv(RecvWR(wr_id=900 + i))
    tb_calls["push_bg"](mcq.cqn, [hwif.Cqe(mqp.qp_num, i, hwif.CqeOpcode.RECV,
                                           hwif.CqeStatus.SUCCESS, 10 + i) for i in range(40)])
    host.spend(1000.0)  # some are written before the resize
    mcq.resize(128)
    got: list[tuple[int, int]] = []
    for _ in range(12):  # (they all come within some 2000 cycles)
        got += [(w.wr_id, w.byte_len) for w in mcq.poll(16)[1]]
        if len(got) >= 40:
            break
    res["resize_bg"] = (got, mcq.cqe, tb_calls["held"]())
    ctx.close()
    return res


@cocotb.test(skip=TOPLEVEL != "roce_nic")
async def test_datapath_hooks(dut):
    """RTL only, through the driver: post_send -> SQ doorbell -> wqe_fetch reads the WQEs the
    provider wrote; cqe_write -> the CQ ring -> verbs poll; DESTROY_CQ waits for the fence."""
    tb = NicTB(dut, seed=SEED + 1)
    host, _rec, _probe = _rtl_host(tb)
    tb.attach_memory(host.mem)
    await tb.reset()
    tb.couple(host.env)
    fence: dict[str, int] = {}

    def cycle() -> int:
        return int(get_sim_time("ns")) // CLK_NS

    async def release_later(n: int) -> None:
        await ClockCycles(dut.clk, n)
        fence["released"] = cycle()
        tb.hold_b[0] = False

    async def watch_busy() -> None:
        while True:
            await RisingEdge(dut.clk)
            if int(dut.u_cmd.state.value) == 15:  # S_FENCE
                fence.setdefault("fence_entered", cycle())
            if "fence_entered" in fence and int(dut.u_cmd.busy.value) == 0:
                fence["done"] = cycle()
                return

    async def hold(v: bool) -> None:
        tb.hold_b[0] = v

    async def start_release(n: int) -> None:
        cocotb.start_soon(release_later(n))
        cocotb.start_soon(watch_busy())

    async def fence_times() -> dict[str, int]:
        return dict(fence)

    held = {"pushed_before": 0, "waited": 0, "moved": 0}  # completions around the resize

    async def push_all(cqn: int, cqes: list[hwif.Cqe]) -> None:
        for c in cqes:
            await tb._push_cqe(cqn, c)
            await ClockCycles(dut.clk, tb.rng.randrange(8, 40))

    async def watch_hold() -> None:
        while True:
            await RisingEdge(dut.clk)
            if int(dut.u_cmd.cq_hold.value):
                held["waited"] += int(dut.s_cqe_valid.value)  # cycles a completion waited
                if not held["moved"]:
                    held["moved"] = 1
                    held["pushed_before"] = int(dut.cq_pi.value) >> 32 * int(
                        dut.u_cmd.cq_sel.value) & 0xFFFFFFFF

    async def push_bg(cqn: int, cqes: list[hwif.Cqe]) -> None:
        cocotb.start_soon(push_all(cqn, cqes))
        cocotb.start_soon(watch_hold())

    async def held_counts() -> dict[str, int]:
        return dict(held)

    calls = {
        "next_wqe": resume(tb._next_wqe),
        "push_cqe": resume(tb._push_cqe),
        "hold_b": resume(hold),
        "release_b_later": resume(start_release),
        "fence_times": resume(fence_times),
        "xlate": resume(tb._xlate),
        "push_bg": resume(push_bg),
        "held": resume(held_counts),
    }
    res = await bridge(rtl_only)(host, calls)

    qpn = res["qpn"]
    for i, (w, raw) in enumerate(zip(res["fetched"], res["ring"], strict=True)):
        assert w is not None, f"WQE {i} not fetched"
        ctrl = hwif.SendWqeCtrl.unpack(raw)
        assert int(w.qpn) == qpn and int(w.index) == i and int(w.err) == 0
        for name in ("opcode", "flags", "num_sge", "remote_addr", "rkey", "imm_inv"):
            assert int(getattr(w, name)) == getattr(ctrl, name), (i, name)
        for j in range(ctrl.num_sge):
            sge = hwif.Sge.unpack(raw, 48 + 16 * j)
            addr = (int(w.sge_addr) >> 64 * j) & (2**64 - 1)
            ln = (int(w.sge_len) >> 32 * j) & (2**32 - 1)
            key = (int(w.sge_lkey) >> 32 * j) & (2**32 - 1)
            assert (addr, ln, key) == (sge.addr, sge.length, sge.lkey), (i, j)
    assert res["poll"] == (1, [(102, 0, hwif.CqeOpcode.RDMA_WRITE, 72, qpn)]), res["poll"]
    f = res["fence"]
    dut._log.info("fence: entered %s, B released %s, DESTROY_CQ done %s", f.get("fence_entered"),
                  f.get("released"), f.get("done"))
    assert f["fence_entered"] < f["released"] <= f["done"], f
    assert res["rpoll"] == 1
    assert int(dut.cqe_wr_error.value) == 0
    assert res["npages"][0] == res["npages"][1]
    for i, (exp, got) in enumerate(res["xlate"]):
        assert exp == got, f"lookup {i}: expected {exp}, got {got}"
    assert sum(1 for (st, segs), _ in res["xlate"] if st == 0 and segs) >= 8
    assert res["xlate_after"] == (int(hwif.XlateStatus.BAD_KEY), []), res["xlate_after"]
    got, size, held = res["resize_bg"]
    assert size == 128 and got == [(900 + i, 10 + i) for i in range(40)], (size, got)
    # some completions were in the old ring, some waited for the hold to end
    assert 0 < held["pushed_before"] < 40 and held["waited"] > 0, held
    dut._log.info("RESIZE_CQ under load: %d CQEs written before the hold, completions waited "
                  "%d cycles on it, all 40 polled in order", held["pushed_before"],
                  held["waited"])
    dut._log.info("%d translations checked across %d MTT entries", len(res["xlate"]),
                  res["npages"][0])


def raw_mailbox(host, xlate, complete) -> dict:  # noqa: ANN001, C901
    """The mailbox without the driver: input and output blocks at every byte alignment and
    across 4 KiB boundaries, raw records with bits the driver never sets, GO while busy,
    every opcode the device lacks, RESIZE_CQ moving completions the datapath wrote (through
    `complete`). Returns the statuses, register reads and snapshots of the memory the outputs
    went to."""
    from nicsim.nic import translation

    bar = host.functions["0000:01:00.0"].bar
    mem = host.mem
    rng = random.Random(77)
    region = mem.alloc_contig(4 * hwif.PAGE_SIZE)  # outputs and inputs go here
    tables = mem.alloc_contig(16 * hwif.PAGE_SIZE)  # INIT_HCA's (the model writes them)
    mem.write(region, rng.randbytes(4 * hwif.PAGE_SIZE))
    res: dict[str, list] = {"st": [], "snap": [], "regs": [], "xlate": []}

    def run(op: int, data: bytes = b"", pa_in: int = 0, pa_out: int = 0, mod: int = 0,
            twice: bool = False) -> str:
        if data:
            mem.write(pa_in, data)
        bar.write64(hwif.Reg.CMD_OPCODE, op)
        bar.write64(hwif.Reg.CMD_IN, pa_in)
        bar.write64(hwif.Reg.CMD_OUT, pa_out)
        bar.write64(hwif.Reg.CMD_MOD, mod)
        bar.write64(hwif.Reg.CMD_GO, 1)
        if twice:
            bar.write64(hwif.Reg.CMD_GO, 1)  # while busy: ignored
        host.spend(300.0)
        while (st := bar.read64(hwif.Reg.CMD_STATUS)) & hwif.CMD_BUSY:
            host.spend(200.0)
        name = hwif.CmdStatus(st & 0xFF).name
        res["st"].append((op, mod, name))
        res["snap"].append(mem.read(region, 4 * hwif.PAGE_SIZE))
        return name

    page = hwif.PAGE_SIZE
    res["regs"].append(bar.read64(hwif.Reg.DEV_ID))
    C = hwif.CmdOpcode
    run(C.QUERY_DEVICE, pa_out=region + page - 13)  # 56 bytes across a page boundary
    caps = hwif.DeviceCaps.unpack(mem.read(region + page - 13, hwif.DeviceCaps.size()))
    # what the device lacks: BAD_OPCODE, nothing read or written
    lacks = sorted(set(C) - hwif.device_commands(caps, hwif.DevFeature(
        bar.read64(hwif.Reg.FEATURES) & 0xFFFF)))
    res["lacks"] = [op.name for op in lacks]
    for op in lacks:
        run(op, pa_in=region + 2 * page - 8, pa_out=region + page + 40, mod=1)
    hca = hwif.HcaInit(tables, tables + 8 * page, 5, 10).pack()
    run(C.INIT_HCA, hca, pa_in=region + 2 * page - 5)
    for k in range(3):
        res["regs"].append(bar.read64(hwif.Reg.CMD_IN + 8 * k))
    cqc = hwif.Cqc(cqn=3, log_size=4, state=1, base=0x123440, dbrec=0x55500, eqn=7, uar=2)
    run(C.CREATE_CQ, cqc.pack(), pa_in=region + page - 3)
    for s_ in range(8):  # QUERY_CQ to every alignment, across the boundary
        run(C.QUERY_CQ, pa_out=region + 3 * page - 17 + s_, mod=3)
    q = hwif.Qpc.unpack(rng.randbytes(hwif.QPC_SIZE))  # garbage where CREATE_QP does not look
    q.qpn, q.type, q.uar, q.send_cqn, q.recv_cqn = 5, hwif.QpType.RC, 2, 3, 3
    q.sq_log_size, q.sq_log_stride, q.rq_log_size, q.rq_log_stride = 3, 6, 2, 5
    run(C.CREATE_QP, q.pack(), pa_in=region + 2 * page - 61)
    run(C.QUERY_QP, pa_out=region + page + 7, mod=5, twice=True)
    every = (1 << 21) - 1  # every attr_mask bit, also those _apply ignores
    S = hwif.QpState
    for new, mask, pa_off in (
        (S.INIT, every, 2 * page - 3), (S.RTR, every, page - 100),
        (S.RTS, every, 3 * page - 64 + 1), (S.RTR, every, 1),  # RTS -> RTR: BAD_STATE
        (S.RTS, 1 | rng.getrandbits(21), 4 * page - 128),  # RTS -> RTS, some fields
        (S.INIT, rng.getrandbits(21) & ~1, 2 * page - 77),  # no STATE: RTS -> RTS
        (S.SQD, 1 | 1 << 12 | 1 << 16, page + 3), (S.SQD, every, 9),
        (S.ERR, every, 2 * page - 1), (S.RTS, every, 100),  # ERR: nothing applied; ERR -> RTS
        (S.RESET, every, 3 * page - 20), (S.INIT, 1 | 1 << 7, 2 * page - 40),
        (S.INIT, 1 << 7, 50),  # an AV whose sgid_index is outside the GID table: BAD_PARAM
    ):
        m = hwif.Qpc.unpack(rng.randbytes(hwif.QPC_SIZE))  # every field random
        m.qpn, m.state, m.attr_mask = 5, new, mask
        # a source GID in the port's two-entry table, but for the last case
        m.sgid_index = m.sgid_index % 2 if pa_off != 50 else 2 + m.sgid_index % 254
        run(C.MODIFY_QP, m.pack(), pa_in=region + pa_off)
        for s_ in (1, 6):
            run(C.QUERY_QP, pa_out=region + 3 * page - 61 + s_, mod=5)
    # MTT: 700 addresses from an odd address across two page boundaries, then an MPT
    pages = [rng.randrange(1, mem.size >> hwif.PAGE_SHIFT) << hwif.PAGE_SHIFT
             for _ in range(700)]
    run(C.WRITE_MTT, hwif.pack_mtt(pages), pa_in=region + page - 3, mod=100)
    run(C.WRITE_MTT, hwif.pack_mtt([]), mod=1 << 10)  # nothing, at the end of the table
    run(C.WRITE_MTT, hwif.pack_mtt(pages[:3]), pa_in=region + 5, mod=(1 << 10) - 2)  # beyond
    start = 0x7F00_0000_0123
    mpt = hwif.Mpt((3 << 8) | 9, 9, start, 699 * page - 0x200, 100, 7, hwif.MptFlags.VALID)
    run(C.WRITE_MPT, mpt.sw_part(), pa_in=region + 3 * page - 9, mod=3)
    if xlate is not None:
        mtt = {100 + i: pa for i, pa in enumerate(pages)}
        probes = [(mpt.key, 9, 1, start + i * page + 1000, 4000) for i in (0, 1, 63, 64, 697)]
        probes.append((mpt.key, 9, 1, start, 20 * page))
        for key, pd, acc, va, n in probes:
            st, segs = translation.check_and_split(mpt, mtt, key, pd, acc, va, n)
            got_st, got = xlate(key, pd, acc, va, n)
            res["xlate"].append(((int(st), [tuple(x) for x in segs]),
                                 (got_st, merge_contiguous(got))))
    # RESIZE_CQ: CQ 4's rings and doorbell record in the region, CQEs written by the datapath,
    # the consumer index set in the doorbell record as software's polling sets it
    ring0, ring1, ring2 = region + 3 * page, region + 3 * page + 0x400, region + 2 * page + 0x800
    dbrec = region + 3 * page + 0xC04

    def cqes(n: int) -> None:
        for _ in range(n):
            complete(4, hwif.Cqe(rng.getrandbits(24), rng.getrandbits(16),
                                 int(rng.choice(list(hwif.CqeOpcode))),
                                 int(rng.choice(list(hwif.CqeStatus))), rng.getrandbits(32),
                                 rng.getrandbits(32), rng.getrandbits(24), rng.randrange(8),
                                 int(rng.choice(list(hwif.VendorErr)))))

    def resize(base: int, log: int, ci: int | None = None, cqn: int = 4) -> str:
        if ci is not None:
            mem.write(dbrec, ci.to_bytes(4, "little"))
        return run(C.RESIZE_CQ, hwif.Cqc(cqn, log, 0, base, 0, 0, 0).pack(),
                   pa_in=region + page - 7, mod=cqn)

    run(C.CREATE_CQ, hwif.Cqc(4, 3, 0, ring0, dbrec, 1, 2).pack(), pa_in=region + 5)
    cqes(7)
    resize(ring1, 4, 0xFFFF_FFF0)  # 23 unpolled by that count: BAD_PARAM
    resize(ring1, 2, 2)  # 5 unpolled, 4 entries: BAD_PARAM
    resize(ring1, 3)  # 5 move to the front of 8 entries
    mem.write(dbrec, (4).to_bytes(4, "little"))
    cqes(5)  # the ring wraps: 6 unpolled in old slots 4..7, 0, 1
    resize(ring2, 4)
    resize(ring0, 0, 6)  # none unpolled, a ring of 1 entry
    cqes(1)
    resize(ring1, 1)  # 1 moves, a ring of 2
    resize(ring1, 40)  # EXCEED_LIM
    resize(ring1, 1, cqn=6)  # BAD_RESOURCE
    run(C.QUERY_CQ, pa_out=region + page + 100, mod=4)
    run(C.DESTROY_CQ, mod=4)
    run(C.INVALIDATE_MPT, mod=3)
    run(C.INVALIDATE_MPT, mod=1 << 5)
    run(C.DESTROY_CQ, mod=3)
    run(C.DESTROY_QP, mod=5)
    run(C.DESTROY_CQ, mod=3)
    run(C.QUERY_CQ, pa_out=region, mod=3)
    run(0x1_0000_0001)  # only the whole 64-bit opcode names a command
    res["regs"].append(bar.read64(hwif.Reg.INT_STATUS))
    res["regs"].append(bar.read64(hwif.uar_offset(2, hwif.UarReg.SQ_DB)))
    return res


@cocotb.test(skip=TOPLEVEL != "roce_nic")
async def test_raw_mailbox(dut):
    """Mailbox blocks at every alignment and across 4 KiB boundaries, compared with the model:
    statuses, register reads and every byte of the memory the outputs went to."""
    tb = NicTB(dut, seed=SEED + 2)
    host_m, _rec, probe_m, _nic = _model_host(tb.params)
    model = raw_mailbox(host_m, None, probe_m.complete)
    host, _rec, probe = _rtl_host(tb)
    tb.attach_memory(host.mem)
    await tb.reset()
    tb.couple(host.env)
    rtl = await bridge(raw_mailbox)(host, resume(tb._xlate), probe.complete)
    compare(model["st"], rtl["st"], "raw command (opcode, mod, status)")
    assert model["regs"] == rtl["regs"], (model["regs"], rtl["regs"])
    for i, (a, b) in enumerate(zip(model["snap"], rtl["snap"], strict=True)):
        if a != b:
            bad = next(j for j in range(len(a)) if a[j] != b[j])
            raise AssertionError(f"after command {i} {rtl['st'][i]}: memory differs at "
                                 f"region+{bad:#x}: model {a[bad:bad + 16].hex()} "
                                 f"rtl {b[bad:bad + 16].hex()}")
    for i, (exp, got) in enumerate(rtl["xlate"]):
        assert exp == got, f"lookup {i}: expected {exp}, got {got}"
    assert len(rtl["xlate"]) == 6 and all(exp[0] == 0 for exp, _ in rtl["xlate"])
    assert len(rtl["lacks"]) >= 10 and "CREATE_EQ" in rtl["lacks"], rtl["lacks"]
    rz = [s_ for o, _m, s_ in rtl["st"] if o == hwif.CmdOpcode.RESIZE_CQ]
    assert rz == ["BAD_PARAM", "BAD_PARAM", "OK", "OK", "OK", "OK", "EXCEED_LIM",
                  "BAD_RESOURCE"], rz
    c = await tb._counters()
    assert c["cmds"] == len(rtl["st"]), "a GO while busy was not ignored"
    dut._log.info("%d raw commands, statuses %s", len(rtl["st"]),
                  sorted({s_ for _o, _m, s_ in rtl["st"]}))


@cocotb.test(skip=TOPLEVEL != "roce_nic")
async def test_axil32_words(dut):
    """BAR0 on a 32-bit AXI4-Lite bus (nic_bar.v): 64-bit registers as two words. A register
    written word by word reads back whole; a high word alone merges into its half; a read's
    high word comes from the snapshot its low word took; a doorbell's high word without its low
    word is counted as a dropped doorbell, a low word alone is not (the driver's doorbells,
    whole, are test_driver_vs_model's)."""
    if len(dut.s_axil_wdata) != 32:
        return  # (the 64-bit bus takes each register in one transaction)
    tb = NicTB(dut, seed=SEED + 3)
    host, _rec, _probe = _rtl_host(tb)
    tb.attach_memory(host.mem)  # (an idle DMA slave: the NIC's DMA ports driven)
    await tb.reset()
    ax = tb.axil

    async def read64(off: int) -> int:
        lo = int.from_bytes((await ax.read(off, 4)).data, "little")
        hi = int.from_bytes((await ax.read(off + 4, 4)).data, "little")
        return hi << 32 | lo

    in_off, mod_off, op_off = (int(r) for r in (hwif.Reg.CMD_IN, hwif.Reg.CMD_MOD,
                                                hwif.Reg.CMD_OPCODE))
    await ax.write(in_off, (0x1122334455667788).to_bytes(8, "little"))
    assert await read64(in_off) == 0x1122334455667788
    await ax.write(mod_off, (0xA1B2C3D4).to_bytes(4, "little"))  # low word
    await ax.write(mod_off + 4, (0x0BADF00D).to_bytes(4, "little"))  # then high, apart
    assert await read64(mod_off) == 0x0BADF00D_A1B2C3D4
    await ax.write(mod_off + 4, (0x12345678).to_bytes(4, "little"))  # high word alone
    assert await read64(mod_off) == 0x12345678_A1B2C3D4
    await ax.write(op_off, (0x0000_0001_0000_0002).to_bytes(8, "little"))
    lo = int.from_bytes((await ax.read(op_off, 4)).data, "little")  # snapshot taken here
    await ax.write(op_off + 4, (0x77).to_bytes(4, "little"))
    hi = int.from_bytes((await ax.read(op_off + 4, 4)).data, "little")
    assert (hi, lo) == (1, 2), "the high word is not the low word's snapshot"
    assert await read64(op_off) == 0x77_0000_0002

    before = (await tb._counters())["db_drop"]
    sq_db = hwif.uar_offset(1, hwif.UarReg.SQ_DB)
    rq_db = hwif.uar_offset(1, hwif.UarReg.RQ_DB)
    await ax.write(sq_db, (5).to_bytes(4, "little"))  # a low word alone: nothing
    await ClockCycles(dut.clk, 8)
    assert (await tb._counters())["db_drop"] == before
    await ax.write(rq_db + 4, (0).to_bytes(4, "little"))  # a high word alone
    await ClockCycles(dut.clk, 8)
    assert (await tb._counters())["db_drop"] == before + 1

# ================================================================ pytest entry point


# (data width, BAR0's AXI4-Lite width): the 64-bit build takes its registers on a 32-bit bus
@pytest.mark.parametrize(("data_width", "axil_width"), [(64, 32), (512, 64)],
                         ids=["64-axil32", "512"])
def test_roce_nic_cmd(data_width, axil_width):
    from hdl_tb.cocotb_run import roce_nic_sources, run

    params = bench_params(data_width, axil_width)
    run("roce_nic", roce_nic_sources(), "test_roce_nic_cmd", params,
        extra_env={PARAMS_ENV: json.dumps(params)})
