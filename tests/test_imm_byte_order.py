"""Immediate data keeps its bytes: ibv_send_wr's and ibv_wc's imm_data are __be32, so a program
that posts imm_data=htonl(x) puts x on the wire big-endian (ImmDt 00 c0 ff ee for 0xC0FFEE)
and its peer reads x back as ntohl(wc.imm_data). Over RC, UC and UD, through ibv_post_send and
the extended API (QPEx's wr_*_imm take the host value, as pyverbs passes it through htobe32;
CQEX's read_imm_data gives the __be32), and a scenario's `imm` is the ImmDt on the wire."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from scapy.utils import RawPcapReader

from nicsim.cli import main
from nicsim.wire import parse

IMM = 0xC0FFEE
WIRE = bytes.fromhex("00c0ffee")

# A pyverbs program: nsnic0 sends to nsnic1 SEND and RDMA WRITE with immediate on an RC and a
# UC pair, SEND with immediate on UD, and both through QPEx to a receiver polled by CQEX.
PROGRAM = """
import json, socket, sys, time
from pyverbs.addr import AH, AHAttr, GlobalRoute
from pyverbs.cq import CQ, CQEX, CqInitAttrEx, PollCqAttr
from pyverbs.device import Context
from pyverbs.libibverbs_enums import (ibv_access_flags as a, ibv_qp_create_send_ops_flags as o,
                                      ibv_create_cq_wc_flags as cw, ibv_qp_init_attr_mask as m,
                                      ibv_qp_type as t, ibv_wc_flags, ibv_wr_opcode as op)
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPEx, QPInitAttr, QPInitAttrEx
from pyverbs.wr import SGE, RecvWR, SendWR

IMM, QKEY, ACC = 0xC0FFEE, 0x11111111, a.IBV_ACCESS_LOCAL_WRITE | a.IBV_ACCESS_REMOTE_WRITE
ctx = [Context(name=n) for n in ("nsnic0", "nsnic1")]
pd = [PD(c) for c in ctx]
cq = [CQ(c, 64) for c in ctx]
cqex = CQEX(ctx[1], CqInitAttrEx(cqe=64, wc_flags=cw.IBV_WC_EX_WITH_BYTE_LEN
                                  | cw.IBV_WC_EX_WITH_IMM | cw.IBV_WC_EX_WITH_QP_NUM))
mr = [MR(p, 1 << 16, ACC) for p in pd]
gid = [c.query_gid(1, 0) for c in ctx]
cap = QPCap(max_send_wr=8, max_recv_wr=8)


def qp(i, qpt, rcq=None):
    attr = QPAttr(port_num=1)
    if qpt == t.IBV_QPT_UD:
        attr.qkey = QKEY
    else:
        attr.qp_access_flags = ACC
    return QP(pd[i], QPInitAttr(qp_type=qpt, scq=cq[i], rcq=rcq or cq[i], cap=cap), attr)


def connect(x, i, y):
    attr = QPAttr(port_num=1)
    attr.qp_access_flags = ACC
    attr.dest_qp_num, attr.max_dest_rd_atomic, attr.max_rd_atomic = y.qp_num, 1, 1
    attr.min_rnr_timer, attr.timeout, attr.retry_cnt, attr.rnr_retry = 12, 14, 7, 7
    gr = GlobalRoute(dgid=gid[1 - i], sgid_index=0, hop_limit=64)
    attr.ah_attr = AHAttr(port_num=1, is_global=1, gr=gr)
    x.to_rts(attr)


def pair(qpt, ex=False):
    if ex:
        init = QPInitAttrEx(qp_type=qpt, scq=cq[0], rcq=cq[0], cap=cap, pd=pd[0],
                            comp_mask=m.IBV_QP_INIT_ATTR_PD | m.IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
                            send_ops_flags=o.IBV_QP_EX_WITH_SEND_WITH_IMM
                            | o.IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM)
        attr = QPAttr(port_num=1)
        attr.qp_access_flags = ACC
        x = QPEx(ctx[0], init, attr)
    else:
        x = qp(0, qpt)
    y = qp(1, qpt, cqex if ex else None)
    connect(x, 0, y)
    connect(y, 1, x)
    return x, y


def wait(c, n):
    out, end = [], time.monotonic() + 20
    while len(out) < n and time.monotonic() < end:
        out += c.poll(n - len(out))[1]
    assert len(out) == n and all(w.status == 0 for w in out), out
    return out


sge = [SGE(mr[0].buf, 8, mr[0].lkey)]
mr[0].write(b"8 bytes!", 8)
got = []
for qpt in (t.IBV_QPT_RC, t.IBV_QPT_UC):
    x, y = pair(qpt)
    for _ in range(2):
        y.post_recv(RecvWR(num_sge=1, sg=[SGE(mr[1].buf, 64, mr[1].lkey)]))
    x.post_send(SendWR(opcode=op.IBV_WR_SEND_WITH_IMM, num_sge=1, sg=sge,
                       imm_data=socket.htonl(IMM)))
    wr = SendWR(opcode=op.IBV_WR_RDMA_WRITE_WITH_IMM, num_sge=1, sg=sge,
                imm_data=socket.htonl(IMM))
    wr.set_wr_rdma(mr[1].rkey, mr[1].buf + 1024)
    x.post_send(wr)
    wait(cq[0], 2)
    got += [(y.qp_num, w.opcode, w.wc_flags & ibv_wc_flags.IBV_WC_WITH_IMM,
             socket.ntohl(w.imm_data)) for w in wait(cq[1], 2)]

x, y = qp(0, t.IBV_QPT_UD), qp(1, t.IBV_QPT_UD)
y.post_recv(RecvWR(num_sge=1, sg=[SGE(mr[1].buf, 64, mr[1].lkey)]))
wr = SendWR(opcode=op.IBV_WR_SEND_WITH_IMM, num_sge=1, sg=sge, imm_data=socket.htonl(IMM))
ah = AH(pd[0], attr=AHAttr(port_num=1, is_global=1,
                           gr=GlobalRoute(dgid=gid[1], sgid_index=0, hop_limit=64)))
wr.set_wr_ud(ah, y.qp_num, QKEY)
x.post_send(wr)
wait(cq[0], 1)
got += [(y.qp_num, w.opcode, w.wc_flags & ibv_wc_flags.IBV_WC_WITH_IMM,
         socket.ntohl(w.imm_data)) for w in wait(cq[1], 1)]

x, y = pair(t.IBV_QPT_RC, ex=True)
for _ in range(2):
    y.post_recv(RecvWR(num_sge=1, sg=[SGE(mr[1].buf, 64, mr[1].lkey)]))
x.wr_start()
x.wr_id, x.wr_flags = 1, 2  # IBV_SEND_SIGNALED
x.wr_send_imm(IMM)  # pyverbs: htobe32(data)
x.wr_set_sge(sge[0])
x.wr_rdma_write_imm(mr[1].rkey, mr[1].buf + 2048, IMM)
x.wr_set_sge(sge[0])
x.wr_complete()
wait(cq[0], 2)
end = time.monotonic() + 20
while cqex.start_poll(PollCqAttr()) != 0 and time.monotonic() < end:
    pass
for i in range(2):
    if i:
        assert cqex.poll_next() == 0
    got.append((y.qp_num, cqex.read_opcode(),
                cqex.read_wc_flags() & ibv_wc_flags.IBV_WC_WITH_IMM,
                socket.ntohl(cqex.read_imm_data())))
cqex.end_poll()
print(json.dumps(got))
"""

# Where a message's ImmDt starts, after the BTH, by opcode (IBA 9.2): the single-packet SEND
# and RDMA WRITE with immediate on RC and UC, and the UD SEND.
_EXT_BEFORE_IMMDT = {0x05: 0, 0x0B: 16, 0x25: 0, 0x2B: 16, 0x65: 8}  # RETH 16, DETH 8


def _immdts(pcap: Path) -> list[tuple[int, int, bytes]]:
    """(BTH opcode, destination QPN, ImmDt bytes) of each frame that carries an ImmDt."""
    out = []
    for f, _ in RawPcapReader(str(pcap)):
        f = bytes(f)
        # RoCEv2 over IPv4 or IPv6 (IP, UDP), or RoCE v1 (a GRH): where the BTH starts
        bth = {b"\x08\x00": 14 + 20 + 8, b"\x86\xdd": 14 + 40 + 8, b"\x89\x15": 14 + 40}[f[12:14]]
        opcode = f[bth]
        if opcode in _EXT_BEFORE_IMMDT:
            at = bth + 12 + _EXT_BEFORE_IMMDT[opcode]
            out.append((opcode, int.from_bytes(f[bth + 5:bth + 8], "big"), f[at:at + 4]))
            assert parse(f).imm == IMM  # and the wire's parser reads the same
    return out


def test_pyverbs_program_puts_the_imm_bytes_on_the_wire_as_they_are(tmp_path: Path) -> None:
    prog = tmp_path / "imm.py"
    prog.write_text(PROGRAM)
    r = subprocess.run([sys.executable, "-m", "nicsim.cli", "exec", "--pcap",
                        str(tmp_path / "caps"), "--", sys.executable, str(prog)],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.strip().splitlines()[-1])
    recv, recv_rdma_with_imm, with_imm = 128, 129, 2  # ibv_wc_opcode, IBV_WC_WITH_IMM
    assert [(op, flags, imm) for _qpn, op, flags, imm in got] == \
        [(recv, with_imm, IMM), (recv_rdma_with_imm, with_imm, IMM)] * 2 \
        + [(recv, with_imm, IMM)] + [(recv, with_imm, IMM), (recv_rdma_with_imm, with_imm, IMM)]
    (cap,) = [p for p in (tmp_path / "caps").iterdir() if p.name.endswith("-a.pcap")]
    frames = _immdts(cap)
    qpns = [qpn for qpn, *_ in got]
    assert [(op, qpn) for op, qpn, _ in frames] == list(zip(
        [0x05, 0x0B, 0x25, 0x2B, 0x65, 0x05, 0x0B], qpns, strict=True))
    assert all(imm == WIRE for *_, imm in frames), [imm.hex(" ") for *_, imm in frames]


def test_scenario_imm_is_the_immdt_on_the_wire(tmp_path: Path, capsys) -> None:
    s = tmp_path / "s.yaml"
    s.write_text("ops:\n  - {op: write_imm, bytes: 8, imm: 0xC0FFEE}\n"
                 "  - {op: send_imm, bytes: 8, imm: 0xC0FFEE}\n")
    pcap = tmp_path / "s.pcap"
    assert main(["run", str(s), "--pcap", str(pcap), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    # (the run's check: the receiver's ntohl(wc.imm_data) is the scenario's imm)
    assert [w["integrity"] for w in d["wrs_detail"]] == ["ok", "ok"]
    assert [(op, imm) for op, _qpn, imm in _immdts(pcap)] == [(0x0B, WIRE), (0x05, WIRE)]
