"""SEND with immediate data over RC: the payload lands in a posted receive, the value in its WC.

One RC QP on each of two devices, both ends in this one process (as rdma-core's pyverbs tests
do it), connected by handing each QP the other's number and GID (a real program sends them
over a socket). Under nicsim the devices are nsnic0 and nsnic1, on two hosts joined by a cable:

    nicsim exec -- python examples/pyverbs/rc_send_recv.py

On real hardware, name two RoCE devices that reach each other and their RoCEv2 GID index:

    python rc_send_recv.py --devices mlx5_0 mlx5_1 --gid-index 3
"""

import argparse
import socket
import sys
import time

from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.libibverbs_enums import (
    ibv_access_flags,
    ibv_qp_type,
    ibv_wc_flags,
    ibv_wc_opcode,
    ibv_wc_status,
    ibv_wr_opcode,
)
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR

SIZE = 1024
IMM = 0xC0FFEE  # the immediate value; ibv_send_wr carries it in network byte order


class End:
    """One end: a device's context, a PD, a CQ, a registered buffer, an RC QP (INIT)."""

    def __init__(self, name, gid_index):
        self.ctx = Context(name=name)
        self.pd, self.cq = PD(self.ctx), CQ(self.ctx, 16)
        self.mr = MR(self.pd, SIZE, ibv_access_flags.IBV_ACCESS_LOCAL_WRITE)
        cap = QPCap(max_send_wr=4, max_recv_wr=4)
        init = QPInitAttr(qp_type=ibv_qp_type.IBV_QPT_RC, scq=self.cq, rcq=self.cq, cap=cap)
        self.qp = QP(self.pd, init, QPAttr(port_num=1))  # given a QPAttr, QP() takes it to INIT
        self.gid_index, self.gid = gid_index, self.ctx.query_gid(1, gid_index)

    def connect(self, peer):
        """INIT -> RTR -> RTS, towards the peer's QP."""
        attr = QPAttr(port_num=1)
        attr.dest_qp_num = peer.qp.qp_num
        attr.min_rnr_timer, attr.timeout, attr.retry_cnt, attr.rnr_retry = 12, 14, 7, 7
        # RoCE always has a global route; pyverbs' default hop limit (1) crosses no router
        gr = GlobalRoute(dgid=peer.gid, sgid_index=self.gid_index, hop_limit=64)
        attr.ah_attr = AHAttr(port_num=1, is_global=1, gr=gr)
        self.qp.to_rts(attr)

    def sge(self, length):
        return [SGE(self.mr.buf, length, self.mr.lkey)]

    def completion(self):
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            n, wcs = self.cq.poll()
            if n:
                if wcs[0].status != ibv_wc_status.IBV_WC_SUCCESS:
                    sys.exit(f"rc_send_recv: completion status {wcs[0].status}")
                return wcs[0]
        sys.exit("rc_send_recv: no completion within 10 s")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--devices", nargs=2, default=["nsnic0", "nsnic1"], metavar="DEV")
    p.add_argument("--gid-index", type=int, default=0)
    args = p.parse_args()
    a, b = (End(name, args.gid_index) for name in args.devices)
    a.connect(b)
    b.connect(a)

    msg = b"hello over RC, with an immediate value"
    b.qp.post_recv(RecvWR(wr_id=7, num_sge=1, sg=b.sge(SIZE)))  # before the SEND can arrive
    a.mr.write(msg, len(msg))
    a.qp.post_send(SendWR(opcode=ibv_wr_opcode.IBV_WR_SEND_WITH_IMM, num_sge=1,
                          sg=a.sge(len(msg)), imm_data=socket.htonl(IMM)))
    a.completion()
    wc = b.completion()
    if wc.opcode != ibv_wc_opcode.IBV_WC_RECV or wc.wr_id != 7 or wc.byte_len != len(msg):
        sys.exit(f"rc_send_recv: unexpected completion {wc}")
    if not wc.wc_flags & ibv_wc_flags.IBV_WC_WITH_IMM or socket.ntohl(wc.imm_data) != IMM:
        sys.exit(f"rc_send_recv: immediate data missing or wrong: {wc}")
    if b.mr.read(len(msg), 0) != msg:
        sys.exit("rc_send_recv: the payload differs")
    print(f"rc_send_recv: {len(msg)} bytes and immediate 0x{IMM:x} "
          f"{args.devices[0]} -> {args.devices[1]}: OK")


if __name__ == "__main__":
    main()
