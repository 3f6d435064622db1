"""Co-simulation of atomics (as hdl_tb/test_cosim.py: host a's NIC is the RTL, host b's the
SimPy model, one nicsim world): the model's requester sends FETCH_ADD and CMP_SWAP to host a
and the RTL's responder executes them on host a's memory (IBA 9.4.5: read the 8 bytes over its
AXI4 master, add or compare-and-swap, write the result back) and answers with ATOMIC
ACKNOWLEDGE carrying the original value.

test_atomic_to_rtl: fetch-and-add (with the 64-bit carry and wrap), compare-and-swap that hits
and that misses, an atomic on bytes a WRITE just placed, a compare-and-swap on a value earlier
atomics made, and a READ of what the atomics wrote: host a's memory byte-exact (nothing else
changed), b's completions FETCH_ADD / COMP_SWAP SUCCESS with the original values in b's
buffers, and the RTL's frames (ACKs, ATOMIC ACKNOWLEDGEs, READ RESPONSE) byte for byte those
host a sends when its NIC is the model.
test_atomic_loss: the first request and a later ATOMIC ACKNOWLEDGE are lost: the model sends
the requests again, the RTL executes the lost one once and answers the duplicate of the
executed one from its remembered original value (the same value in both ACKNOWLEDGEs),
memory changed once per atomic.
test_atomic_refused: the second atomic has a wrong rkey, targets an MR without REMOTE_ATOMIC,
an address that is not 8-byte aligned, or the QP has no REMOTE_ATOMIC right: the model's NAK
(remote access; invalid request when misaligned), b's WR completes with the model's status
and the rest are flushed, a's memory holds only what came before, the RTL's frames are the
model's.
"""

from __future__ import annotations

import json
import os
import random
import struct

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

SEED = 41 + seed_offset()  # (NICSIM_SEED)
PG = 4096
SIZE = 4 * PG
RES = 3 * PG        # b's MR: the original values, 8 bytes per job
READ_AT = 3 * PG + 1024     # b's MR: the READ's bytes
MASK = (1 << 64) - 1
FA, CS, WR, RD = "fetch_add", "cmp_swap", "write", "read"
_Q = struct.Struct("<Q")


def jobs_for(init: bytes) -> list[tuple[str, int, int, int]]:
    """(kind, offset in a's MR, compare or add (WRITE, READ: length), swap) from a's first
    bytes: every operand that must hit or miss is taken from what the memory will hold."""
    def q(off: int) -> int:
        return _Q.unpack_from(init, off)[0]
    after01 = (q(0) + 5 + MASK) & MASK          # jobs 0 and 1 on offset 0
    return [
        (FA, 0, 5, 0),
        (FA, 0, MASK, 0),                       # adds -1: carries through all 64 bits
        (CS, 8, q(8), 0x0123456789ABCDEF),      # hits: swapped
        (CS, 16, q(16) ^ 1, 0x5555AAAA5555AAAA),  # misses: unchanged, the value returned
        (WR, 24, 8, 0),                         # b's bytes placed at 24 ...
        (FA, 24, 0x8000_0000_0000_0001, 0),     # ... seen by the atomic after it
        (FA, PG + 56, 0xFFFF_FFFF, 0),          # another page; the beat's last lane at 512
        (CS, 0, after01, 0xFEEDFACECAFEBEEF),   # hits the value jobs 0 and 1 left
        (RD, 0, 64, 0),                         # the READ sees what the atomics wrote
        (FA, 2 * PG - 8, 1, 0),                 # the last 8 bytes of a page
    ]


def atomic_program(w, seed: int, bad: str = "", rtl: bool = True,  # noqa: ANN001
                   rtl_sends: bool = False) -> dict:
    """Driver program: b (model) sends jobs_for(...) to a (the RTL unless `rtl` is False), or
    with `rtl_sends` a to b (the RTL's requester and completer, the model's responder).
    `bad`: the second atomic (job 1) with a wrong rkey ("rkey"), at an MR without
    REMOTE_ATOMIC ("mr_access"), 4 bytes off alignment ("misaligned"); "qp_access": the
    target's QP grants no REMOTE_ATOMIC (the first atomic fails)."""
    from nicsim.driver import enums as e
    from nicsim.driver.user.verbs import MR, SGE, SendWR

    from nicsim.cosim import boot_rtl_host

    if rtl:
        boot_rtl_host(w)
    rng = random.Random(seed)
    acc = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
    ha, hb = (w.hosts["b"], w.hosts["a"]) if rtl_sends else (w.hosts["a"], w.hosts["b"])
    tgt = Side(ha, SIZE, acc | e.IBV_ACCESS_REMOTE_ATOMIC)
    req = Side(hb, SIZE, acc)
    plain = MR(tgt.pd, PG, acc)   # the target's MR without REMOTE_ATOMIC
    a, b = (req, tgt) if rtl_sends else (tgt, req)
    t_acc = acc | (0 if bad == "qp_access" else e.IBV_ACCESS_REMOTE_ATOMIC)
    a.connect(b, "10.0.0.2", e.IBV_MTU_1024, psn=0xFFFFFA, timeout=ack_timeout(w),
              access=t_acc if tgt is a else acc)
    b.connect(a, "10.0.0.1", e.IBV_MTU_1024, psn=0xFFFFFA, timeout=ack_timeout(w),
              access=t_acc if tgt is b else acc)
    init = rng.randbytes(SIZE)
    tgt.mr.write(init, SIZE)
    plain.write(init[:PG], PG)
    bsrc = rng.randbytes(SIZE)
    req.mr.write(bsrc, SIZE)
    jobs = jobs_for(init)
    fail_at = {"": len(jobs), "qp_access": 0}.get(bad, 1)
    t_exp, r_exp = bytearray(init), bytearray(bsrc)
    want = []
    for i, (kind, off, arg, swap) in enumerate(jobs):
        atomic = kind in (FA, CS)
        if kind == WR:
            sg = [SGE(req.mr.buf + RES + 8 * i, arg, req.mr.lkey)]
            op, wc_op, n = e.IBV_WR_RDMA_WRITE, e.IBV_WC_RDMA_WRITE, arg
        elif kind == RD:
            sg = [SGE(req.mr.buf + READ_AT, arg, req.mr.lkey)]
            op, wc_op, n = e.IBV_WR_RDMA_READ, e.IBV_WC_RDMA_READ, arg
        else:
            sg = [SGE(req.mr.buf + RES + 8 * i, 8, req.mr.lkey)]
            op, wc_op, n = ((e.IBV_WR_ATOMIC_FETCH_AND_ADD, e.IBV_WC_FETCH_ADD, 8) if kind == FA
                            else (e.IBV_WR_ATOMIC_CMP_AND_SWP, e.IBV_WC_COMP_SWAP, 8))
        wr = SendWR(wr_id=i, opcode=op, num_sge=1, sg=sg)
        rkey, addr = tgt.mr.rkey, tgt.mr.buf + off
        if i == fail_at and bad == "rkey":
            rkey ^= 0x80
        if i == fail_at and bad == "mr_access":
            rkey, addr = plain.rkey, plain.buf + off
        if i == fail_at and bad == "misaligned":
            addr += 4
        if atomic:
            wr.set_wr_atomic(rkey, addr, arg, swap)
        else:
            wr.set_wr_rdma(rkey, addr)
        req.qp.post_send(wr)
        if i > fail_at:
            want.append((i, e.IBV_WC_WR_FLUSH_ERR, -1, -1, 0x50))
            continue
        if i == fail_at:
            st = e.IBV_WC_REM_INV_REQ_ERR if bad == "misaligned" else e.IBV_WC_REM_ACCESS_ERR
            want.append((i, st, -1, -1, 0x30))
            continue
        want.append((i, e.IBV_WC_SUCCESS, wc_op, n, 0))
        if kind == WR:
            t_exp[off:off + n] = bsrc[RES + 8 * i:RES + 8 * i + n]
        elif kind == RD:
            r_exp[READ_AT:READ_AT + n] = t_exp[off:off + n]
        else:
            (orig,) = _Q.unpack_from(t_exp, off)
            new = (orig + arg) & MASK if kind == FA else (swap if orig == arg else orig)
            t_exp[off:off + 8] = _Q.pack(new)
            r_exp[RES + 8 * i:RES + 8 * i + 8] = _Q.pack(orig)
    sent = poll_wcs(req, len(jobs))
    req.host.spend(20_000.0)  # a WRITE's data lands at the target after its completion
    tm, rm = tgt.mr.read(SIZE), req.mr.read(SIZE)
    hw_qpc = a.ctx.file.dev.hw.query_qp(a.qp.qp_num)
    return {"sent": sent, "want": want, "n_jobs": len(jobs), "sim_ns": w.env.now,
            "bytes": 8 * sum(k in (FA, CS) for k, *_r in jobs),
            "n_atomics": sum(k in (FA, CS) for k, *_r in jobs[:fail_at]),
            # offsets of 8-byte words that differ: the target's, negative the requester's
            "bad_at": [i for i in range(0, SIZE, 8) if tm[i:i + 8] != t_exp[i:i + 8]] +
                      [-i for i in range(0, SIZE, 8) if rm[i:i + 8] != r_exp[i:i + 8]],
            "plain_changed": plain.read(PG) != init[:PG], "hw_state": hw_qpc.state}


def rtl_atomics(w, seed: int, bad: str = "", rtl: bool = True) -> dict:  # noqa: ANN001
    return atomic_program(w, seed, bad, rtl, rtl_sends=True)


class LoseNth:
    """Link faults for both directions: lose the n-th frame (counting from 0, resends
    included) of each (BTH opcode, n) given; everything else passes untouched."""

    def __init__(self, *which: tuple[int, int]) -> None:
        self.which = set(which)
        self.seen: dict[int, int] = {}
        self.counters = {"lost": 0, "corrupted": 0, "duplicated": 0, "reordered": 0}

    def apply(self, frame: bytes) -> list[tuple[bytes, float]]:
        from nicsim.wire.packet import parse

        op = parse(frame).opcode
        n = self.seen.get(op, 0)
        self.seen[op] = n + 1
        if (op, n) in self.which:
            self.counters["lost"] += 1
            return []
        return [(frame, 0.0)]


def atomic_acks(frames: list[bytes]) -> dict[int, list[int]]:
    """PSN -> the original values of the ATOMIC ACKNOWLEDGEs among `frames`, in order."""
    from nicsim.wire.packet import parse

    out: dict[int, list[int]] = {}
    for f in frames:
        p = parse(f)
        if p.opcode == 0x12:
            out.setdefault(p.psn, []).append(p.atomic_orig)
    return out


async def run_atomics(dut, what: str, bad: str = "", injector=None,  # noqa: ANN001
                      pcap: str | None = None, program=atomic_program) -> dict:  # noqa: ANN001
    return await run_program(dut, program, what, SEED, bad, pcap=pcap, injector=injector)


def check_frames_as_model(res: dict, bad: str, name: str, rtl_sends: bool = False,
                          prefix: bool = False) -> int:
    """The RTL's frames byte for byte those of host a's model NIC for the same program (with
    `prefix`, the first of them: the model's requester has up to max_rd_atomic 4 atomics
    out where the RTL's has one, so after a fatal NAK it has sent more)."""
    pcap = os.path.join(os.environ.get("COSIM_PCAP_DIR", "."), name)

    def program(w, seed: int, rtl: bool = True) -> dict:  # noqa: ANN001
        return atomic_program(w, seed, bad, rtl, rtl_sends)

    model_frames = reference_frames(pcap, program, SEED)
    if prefix:
        model_frames = model_frames[:len(res["rtl_sent"])]
    assert res["rtl_sent"] == model_frames, (len(res["rtl_sent"]), len(model_frames))
    return len(model_frames)


@cocotb.test(skip=TOPLEVEL != "roce_nic")
async def test_atomic_to_rtl(dut):
    """FETCH_ADD and CMP_SWAP (hit and miss) from the model executed by the RTL: a's memory
    byte-exact, b's completions and original values right, the RTL's frames the model's."""
    from nicsim.driver import enums as e

    res = await run_atomics(dut, "model atomics to RTL")
    assert res["sent"] == res["want"], (res["sent"], res["want"])
    assert {s[2] for s in res["sent"]} >= {e.IBV_WC_FETCH_ADD, e.IBV_WC_COMP_SWAP}
    assert not res["bad_at"], f"memory differs at {res['bad_at'][:8]} (negative: b's)"
    assert not res["plain_changed"] and res["late"] == 0
    c = counters(dut)
    assert c["resp_atomics"] == res["n_atomics"] and c["resp_naks"] == 0, c
    acks = atomic_acks(res["rtl_sent"])
    assert len(acks) == res["n_atomics"] and all(len(v) == 1 for v in acks.values()), acks
    n = check_frames_as_model(res, "", "cosim_atomic.pcap")
    dut._log.info("%d atomics executed by the RTL, memory byte-exact; %d frames identical to "
                  "the model's", res["n_atomics"], n)


@cocotb.test(skip=TOPLEVEL != "roce_nic")
async def test_atomic_loss(dut):
    """The first FETCH_ADD request and the third ATOMIC ACKNOWLEDGE are lost: the lost request
    is executed when it comes again, the duplicate of an executed atomic is answered from the
    remembered original value; every atomic changes memory once."""
    inj = LoseNth((0x14, 0), (0x12, 2))
    res = await run_atomics(dut, "model atomics to RTL, request and ACK lost", injector=inj)
    assert res["sent"] == res["want"], (res["sent"], res["want"])
    assert not res["bad_at"], f"memory differs at {res['bad_at'][:8]} (negative: b's)"
    assert inj.counters["lost"] == 2, inj.counters   # (the link counts it per direction)
    c = counters(dut)
    assert c["resp_atomics"] == res["n_atomics"], c   # none executed twice
    assert c["resp_duplicates"] > 0, c
    acks = atomic_acks(res["rtl_sent"])
    replayed = {psn: v for psn, v in acks.items() if len(v) > 1}
    assert replayed and all(len(set(v)) == 1 for v in acks.values()), acks
    assert len(acks) == res["n_atomics"], acks


@cocotb.test(skip=TOPLEVEL != "roce_nic")
@cocotb.parametrize(bad=["rkey", "mr_access", "qp_access", "misaligned"])
async def test_atomic_refused(dut, bad: str) -> None:  # noqa: ANN001
    """The second atomic with a wrong rkey, at an MR without REMOTE_ATOMIC or 4 bytes off
    alignment, or a QP without REMOTE_ATOMIC (the first atomic): the model's NAK (remote
    access; invalid request when misaligned) and statuses, memory untouched, a's QP in ERR,
    the RTL's frames the model's."""
    res = await run_atomics(dut, f"model atomics to RTL, {bad}", bad=bad)
    assert res["sent"] == res["want"], (res["sent"], res["want"])
    assert not res["bad_at"], f"memory differs at {res['bad_at'][:8]} (negative: b's)"
    assert not res["plain_changed"]
    assert res["hw_state"] == hwif.QpState.ERR
    c = counters(dut)
    assert c["resp_naks"] == 1 and c["resp_atomics"] == res["n_atomics"] + 1, c
    check_frames_as_model(res, bad, f"cosim_atomic_{bad}.pcap")


def request_copies(frames: list[bytes], opcodes: set[int]) -> dict[int, list[bytes]]:
    """PSN -> the request frames with those BTH opcodes among `frames`, in order."""
    from nicsim.wire.packet import parse

    out: dict[int, list[bytes]] = {}
    for f in frames:
        p = parse(f)
        if p.opcode in opcodes:
            out.setdefault(p.psn, []).append(f)
    return out


@cocotb.test(skip=TOPLEVEL != "roce_nic")
async def test_rtl_atomic_requests(dut):
    """The RTL's requester sends FETCH_ADD and CMP_SWAP (hit and miss; WRITE and READ
    between them on the QP) to the model: b's memory byte-exact, the original values in a's
    SGEs (little-endian, as the model writes them), a's completions the model's (FETCH_ADD /
    COMP_SWAP, 8 bytes), the RTL's requests byte for byte the model requester's."""
    from nicsim.driver import enums as e

    res = await run_atomics(dut, "RTL atomics to model", program=rtl_atomics)
    assert res["sent"] == res["want"], (res["sent"], res["want"])
    assert {s[2] for s in res["sent"]} >= {e.IBV_WC_FETCH_ADD, e.IBV_WC_COMP_SWAP}
    assert not res["bad_at"], f"memory differs at {res['bad_at'][:8]} (negative: a's)"
    assert not res["plain_changed"] and res["late"] == 0
    c = counters(dut)
    assert c["req_resent"] == 0 and c["comp_naks"] == 0 and c["resp_atomics"] == 0, c
    reqs = request_copies(res["rtl_sent"], {0x13, 0x14})
    assert len(reqs) == res["n_atomics"] and all(len(v) == 1 for v in reqs.values()), reqs
    n = check_frames_as_model(res, "", "cosim_rtl_atomic.pcap", rtl_sends=True)
    dut._log.info("%d atomics sent by the RTL, memory byte-exact; %d frames identical to the "
                  "model's", res["n_atomics"], n)


@cocotb.test(skip=TOPLEVEL != "roce_nic")
async def test_rtl_atomic_loss(dut):
    """The RTL's first FETCH_ADD request and the model's third ATOMIC ACKNOWLEDGE are lost:
    the RTL sends the same request again (same PSN, same bytes), the model executes the lost
    one once and answers the duplicate of the executed one from its remembered value; every
    atomic changes b's memory once and puts the original value in a's SGE once."""
    inj = LoseNth((0x14, 0), (0x12, 2))
    res = await run_atomics(dut, "RTL atomics to model, request and ACK lost", injector=inj,
                            program=rtl_atomics)
    assert res["sent"] == res["want"], (res["sent"], res["want"])
    assert not res["bad_at"], f"memory differs at {res['bad_at'][:8]} (negative: a's)"
    assert inj.counters["lost"] == 2, inj.counters
    c = counters(dut)
    assert c["req_resent"] >= 2 and c["comp_timeouts"] + c["comp_resends"] >= 2, c
    reqs = request_copies(res["rtl_sent"], {0x13, 0x14})
    again = {psn: v for psn, v in reqs.items() if len(v) > 1}
    assert len(again) >= 2 and all(len(set(v)) == 1 for v in again.values()), reqs
    assert len(reqs) == res["n_atomics"], reqs


@cocotb.test(skip=TOPLEVEL != "roce_nic")
@cocotb.parametrize(bad=["rkey", "mr_access", "qp_access", "misaligned"])
async def test_rtl_atomic_refused(dut, bad: str) -> None:  # noqa: ANN001
    """The RTL's second atomic with a wrong rkey, at an MR without REMOTE_ATOMIC or 4 bytes
    off alignment, or b's QP without REMOTE_ATOMIC (the first atomic): the model's NAK, a's
    completions the model's statuses (REM_ACCESS_ERR; REM_INV_REQ_ERR when misaligned) and
    the rest flushed, b's memory and a's SGEs untouched past it, a's QP in ERR."""
    res = await run_atomics(dut, f"RTL atomics to model, {bad}", bad=bad, program=rtl_atomics)
    assert res["sent"] == res["want"], (res["sent"], res["want"])
    assert not res["bad_at"], f"memory differs at {res['bad_at'][:8]} (negative: a's)"
    assert not res["plain_changed"]
    assert res["hw_state"] == hwif.QpState.ERR
    c = counters(dut)
    assert c["comp_naks"] == 1 and c["req_resent"] == 0, c
    check_frames_as_model(res, bad, f"cosim_rtl_atomic_{bad}.pcap", rtl_sends=True,
                          prefix=True)


PARTS = [
    (64, "test_atomic_"),
    (512, "test_atomic_"),
    (64, "test_rtl_atomic_"),
    (512, "test_rtl_atomic_"),
]


@pytest.mark.parametrize(("data_width", "tests"), PARTS,
                         ids=["atomics-64", "atomics-512", "rtl_atomics-64", "rtl_atomics-512"])
def test_cosim_atomic(data_width, tests, tmp_path):
    from hdl_tb.cocotb_run import roce_nic_sources, run

    params = bench_params(data_width)
    run("roce_nic", roce_nic_sources(), "test_cosim_atomic", params,
        extra_env={PARAMS_ENV: json.dumps(params), "COSIM_PCAP_DIR": str(tmp_path)},
        test_filter=tests)
