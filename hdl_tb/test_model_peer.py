"""nicsim as the link partner of a design that is not nsnic's NIC (nicsim.cosim.ModelPeer).

The design under test is `roce_tx` alone (a RoCEv2 framer with ICRC: header descriptor and
payload in, Ethernet frames out): the shape of a third party's transmit path. The test drives
it by hand to send an RC SEND ONLY and an RDMA WRITE ONLY to a QP of the simulated host on
the other end of the cable, and checks with the verbs API on that host that the model took
them: the SEND's bytes in the posted receive buffer with its completion, the WRITE's bytes in
the MR, and the model's ACKs (to the design's MAC, which has no receive port here: the MAC
counts them dropped) in the pcap with MSN 2; the bytes around the targets stay untouched.

The peer is strict (ModelPeer(strict=True), nicsim.cosim.strict): the correct design passes
with both packets logged `ok`, and three broken ones raise ProtocolViolation naming the rule:
a frame whose ICRC is corrupted between the design and the peer (a mutator on the cable's
design end), a WRITE sent two PSNs on instead of one, and roce_tx built with the test-only
BUG_PAD_REMAINDER define (roce_tx_framer's pad count as the remainder of the length, the
bug docs/tutorials/strict-peer.md shows).
"""

from __future__ import annotations

import ipaddress
import os
import random
from collections.abc import Callable

import cocotb
import pytest
from cocotb.task import resume
from cocotb.triggers import ClockCycles
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSource

from hdl_tb.streams import HdrBus, HdrSource, HdrTransaction

DUT_MAC, DUT_IP = "02:00:00:00:00:0a", "10.0.0.1"
PEER_MAC, PEER_IP = "02:00:00:00:00:0b", "10.0.0.2"
DUT_QPN, PSN0 = 0x11, 0xFFFFFE


def mapped(ip: str) -> int:
    return int(ipaddress.IPv6Address("::ffff:" + ip))


class Driver:
    """Drives roce_tx: one packet per call, from the driver thread (resume)."""

    def __init__(self, dut, peer) -> None:  # noqa: ANN001
        self.peer = peer
        self.hdr = HdrSource(HdrBus.from_prefix(dut, "s_hdr"), dut.clk, dut.rst)
        self.pay = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis"), dut.clk, dut.rst)
        self.send = resume(self._send)

    async def _send(self, desc: dict[str, int], payload: bytes, tuser: int = 0) -> None:
        await self.peer.clock.catch_up()   # the design is at SimPy's time
        base = {"dmac": int(PEER_MAC.replace(":", ""), 16),
                "smac": int(DUT_MAC.replace(":", ""), 16), "ipv6": 0, "sip": mapped(DUT_IP),
                "dip": mapped(PEER_IP), "tos": 0x02, "ttl": 64, "flow_label": 0,
                "udp_sport": 0xC011, "solicited": 0, "migreq": 1, "pkey": 0xFFFF, "fecn": 0,
                "becn": 0, "ackreq": 1, "reth_va": 0, "reth_rkey": 0, "reth_len": 0,
                "aeth_syndrome": 0, "aeth_msn": 0, "imm": 0, "ieth_rkey": 0, "atomic_va": 0,
                "atomic_rkey": 0, "atomic_swap_add": 0, "atomic_compare": 0,
                "atomic_orig": 0, "deth_qkey": 0, "deth_src_qp": 0,
                "payload_len": len(payload)}
        base.update(desc)
        await self.hdr.send(HdrTransaction(**base))
        if payload:
            await self.pay.send(AxiStreamFrame(payload, tuser=tuser))


class Mutator:
    """Stands in for the cable at the design's end: each frame the design sends passes
    through `fn` (its number from 0, its bytes -> the bytes the cable carries)."""

    def __init__(self, link, fn: Callable[[int, bytes], bytes]) -> None:  # noqa: ANN001
        self.link, self.fn, self.n = link, fn, 0

    def carry(self, frame: bytes, from_end: int, t: float) -> None:
        self.n += 1
        self.link.carry(self.fn(self.n - 1, frame), from_end, t)

    def __getattr__(self, name: str):  # noqa: ANN204 - the cable's other attributes
        return getattr(self.link, name)


def program(w, drv: Driver, seed: int, gap: int = 0) -> dict:  # noqa: ANN001
    """Verbs on the peer host; the design's packets are sent through `drv` (the WRITE `gap`
    PSNs past the one after the SEND's)."""
    from nicsim.driver import enums as e
    from nicsim.driver.user import verbs as v

    from nicsim.workloads.endpoint import roce_v2_gid

    host = w.hosts["b"]
    rng = random.Random(seed)
    ctx = v.Context("nsnic0", host=host)
    pd = v.PD(ctx)
    cq = v.CQ(ctx, 16)
    qp = v.QP(pd, v.QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=v.QPCap(4, 4, 1, 1)))
    acc = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
    mr = v.MR(pd, 8192, acc)
    mr.write(bytes(8192), 8192)
    qp.to_init(v.QPAttr(qp_access_flags=acc))
    qp.to_rtr(v.QPAttr(path_mtu=e.IBV_MTU_1024, dest_qp_num=DUT_QPN, rq_psn=PSN0,
                       max_dest_rd_atomic=1, min_rnr_timer=1,
                       ah_attr=v.AHAttr(gr=v.GlobalRoute(dgid=v.GID("::ffff:" + DUT_IP),
                                                         sgid_index=roce_v2_gid(ctx)[0]))))
    qp.to_rts(v.QPAttr(sq_psn=0, timeout=14, retry_cnt=7, rnr_retry=7, max_rd_atomic=1))
    qp.post_recv(v.RecvWR(wr_id=9, num_sge=1, sg=[v.SGE(mr.buf + 100, 1000, mr.lkey)]))
    send_data, write_data = rng.randbytes(777), rng.randbytes(1024)
    drv.send({"opcode": 0x04, "dqpn": qp.qp_num, "psn": PSN0}, send_data)
    drv.send({"opcode": 0x0A, "dqpn": qp.qp_num, "psn": (PSN0 + 1 + gap) & 0xFFFFFF,
              "reth_va": mr.buf + 4096, "reth_rkey": mr.rkey, "reth_len": len(write_data)},
             write_data)
    wcs: list = []
    for _ in range(100):
        _n, got = cq.poll(4)
        wcs += got
        if wcs:
            break
    host.spend(5_000.0)  # the WRITE lands and its ACK leaves
    mem = mr.read(8192)
    return {"wcs": [(wc.wr_id, wc.status, wc.opcode, wc.byte_len, wc.qp_num) for wc in wcs],
            "send_ok": mem[100:100 + len(send_data)] == send_data,
            "write_ok": mem[4096:4096 + len(write_data)] == write_data,
            "untouched": mem[:100] == bytes(100) and mem[877:4096] == bytes(4096 - 877),
            "qpn": qp.qp_num, "recv_opcode": e.IBV_WC_RECV}


async def strict_peer(dut, pcap: str | None = None):  # noqa: ANN001, ANN201
    """A strict ModelPeer on roce_tx, the design out of reset and SimPy coupled; and its
    driver."""
    from nicsim.cosim import ModelPeer

    dut.rst.value = 1
    peer = ModelPeer(dut, dut.clk, dut.rst, tx="m_axis", rx=None, dut_mac=DUT_MAC,
                     dut_ip=DUT_IP, mac=PEER_MAC, ip=PEER_IP, pcap=pcap, seed=3, strict=True)
    drv = Driver(dut, peer)
    await ClockCycles(dut.clk, 4)
    dut.rst.value = 0
    await ClockCycles(dut.clk, 2)
    peer.start()
    return peer, drv


async def violation(dut, peer, drv, gap: int = 0):  # noqa: ANN001, ANN201
    """Run the program expecting the strict peer to stop it: the ProtocolViolation."""
    from nicsim.cosim import ProtocolViolation

    with pytest.raises(ProtocolViolation) as ei:
        await peer.run(program, drv, 3, gap)
    peer.close()
    dut._log.info("the strict peer raised:\n%s", ei.value)
    return ei.value


@cocotb.test()
async def test_model_peer_takes_a_foreign_design(dut):
    """roce_tx's SEND and WRITE land in the model host; the model's ACKs are in the pcap.
    The strict peer finds nothing wrong: both packets are logged ok."""
    from scapy.utils import rdpcap

    from nicsim.wire.packet import parse

    pcap = os.path.join(os.environ.get("COSIM_PCAP_DIR", "."), "model_peer.pcap")
    peer, drv = await strict_peer(dut, pcap)
    res = await peer.run(program, drv, 3)
    peer.close()
    log = peer.log(res["qpn"])
    assert [(e.opcode, e.psn, e.expect_psn, e.verdict) for e in log] == [
        ("SEND_ONLY", PSN0, f"{PSN0:#08x}", "ok"),
        ("RDMA_WRITE_ONLY", (PSN0 + 1) & 0xFFFFFF, f"{(PSN0 + 1) & 0xFFFFFF:#08x}", "ok")], \
        peer.log_text()
    assert [e.length for e in log] == [777, 1024] and peer.checker.violations == []
    assert res["wcs"] == [(9, 0, res["recv_opcode"], 777, res["qpn"])], res["wcs"]
    assert res["send_ok"] and res["write_ok"] and res["untouched"], res
    pkts = [parse(bytes(p)) for p in rdpcap(pcap)]   # every ICRC valid
    ops = [p.opcode for p in pkts]
    assert ops[:2] == [0x04, 0x0A] and 0x11 in ops, ops
    last_ack = [p for p in pkts if p.opcode == 0x11][-1]
    assert last_ack.aeth_syndrome >> 5 == 0 and last_ack.aeth_msn == 2, last_ack
    assert last_ack.psn == (PSN0 + 1) & 0xFFFFFF
    assert peer.eth.counters["rx_dropped"] >= 1      # the ACKs: no receive port on roce_tx
    assert peer.clock.late == 0
    dut._log.info("model peer: %s; MAC %s", ops, peer.eth.counters)


@pytest.mark.parametrize("data_width", [64])
def test_model_peer(data_width, tmp_path):
    from hdl_tb.cocotb_run import roce_tx_sources, run

    run("roce_tx", roce_tx_sources(), "test_model_peer", {"DATA_WIDTH": data_width},
        extra_env={"COSIM_PCAP_DIR": str(tmp_path)}, test_filter=r"\.test_")


def test_model_peer_bug_pad(tmp_path):
    """roce_tx with its test-only pad bug, against the strict peer."""
    from hdl_tb.cocotb_run import roce_tx_sources, run

    run("roce_tx", roce_tx_sources(), "test_model_peer", {"DATA_WIDTH": 64},
        extra_env={"COSIM_PCAP_DIR": str(tmp_path)}, test_filter=r"\.bug_",
        defines={"BUG_PAD_REMAINDER": 1})


@cocotb.test()
async def test_strict_peer_catches_a_corrupted_icrc(dut):
    """The SEND's last ICRC byte flipped on its way to the peer: BAD_ICRC, with the ICRC the
    model computed and the one in the frame."""
    from nicsim.nic.violations import Rule

    peer, drv = await strict_peer(dut)
    peer.eth.link = Mutator(peer.eth.link,
                            lambda n, f: f[:-1] + bytes([f[-1] ^ 0x80]) if n == 0 else f)
    v = await violation(dut, peer, drv)
    assert v.rule is Rule.BAD_ICRC, v
    assert v.expected != v.actual and v.actual.startswith("ICRC 0x")
    assert v.log[-1].opcode == "SEND_ONLY" and v.log[-1].verdict == "bad_icrc"


@cocotb.test()
async def test_strict_peer_catches_a_psn_gap(dut):
    """The WRITE two PSNs after the SEND (PSN0 + 2): PSN_SEQUENCE, PSN0 + 1 expected."""
    from nicsim.nic.violations import Rule

    peer, drv = await strict_peer(dut)
    v = await violation(dut, peer, drv, gap=1)
    assert v.rule is Rule.PSN_SEQUENCE, v
    assert v.expected == f"PSN {(PSN0 + 1) & 0xFFFFFF:#08x}"
    assert v.actual.startswith(f"PSN {(PSN0 + 2) & 0xFFFFFF:#08x}")
    assert [e.verdict for e in v.log] == ["ok", "psn_sequence"]


@cocotb.test()
async def bug_pad_remainder_is_caught(dut):
    """roce_tx built with BUG_PAD_REMAINDER: the 777-byte SEND goes out with pad count 1
    (777 mod 4) instead of 3, and one pad byte; the peer raises BAD_PAD at once (without
    strict the model drops the frame and only rx.bad_padcount moves)."""
    from nicsim.nic.violations import Rule

    peer, drv = await strict_peer(dut)
    v = await violation(dut, peer, drv)
    assert v.rule is Rule.BAD_PAD, v
    assert v.expected == "pad 3 after 777 payload bytes"
    assert v.actual == "pad 1 (778 bytes of payload and pad)"
    assert peer.nic.counters()["rx.bad_padcount"] == 1
