"""RDMA WRITE a buffer into the peer's memory over RC, RDMA READ it back, check the bytes.

One RC QP on each of two devices, both ends in this one process (as rdma-core's pyverbs tests
do it), connected by handing each QP the other's number and GID (a real program sends them
over a socket). Under nicsim the devices are nsnic0 and nsnic1, on two hosts joined by a cable:

    nicsim exec -- python examples/pyverbs/rc_write_read.py

On real hardware, name two RoCE devices that reach each other and their RoCEv2 GID index:

    python rc_write_read.py --devices mlx5_0 mlx5_1 --gid-index 3
"""

import argparse
import sys
import time

from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.libibverbs_enums import ibv_access_flags, ibv_qp_type, ibv_wc_status, ibv_wr_opcode
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, SendWR

SIZE = 4096
ACCESS = (ibv_access_flags.IBV_ACCESS_LOCAL_WRITE | ibv_access_flags.IBV_ACCESS_REMOTE_WRITE
          | ibv_access_flags.IBV_ACCESS_REMOTE_READ)


class End:
    """One end: a device's context, a PD, a CQ, a registered buffer, an RC QP (INIT)."""

    def __init__(self, name, gid_index):
        self.ctx = Context(name=name)
        self.pd, self.cq = PD(self.ctx), CQ(self.ctx, 16)
        self.mr = MR(self.pd, SIZE, ACCESS)
        attr = QPAttr(port_num=1)
        attr.qp_access_flags = ACCESS
        cap = QPCap(max_send_wr=4, max_recv_wr=4)
        init = QPInitAttr(qp_type=ibv_qp_type.IBV_QPT_RC, scq=self.cq, rcq=self.cq, cap=cap)
        self.qp = QP(self.pd, init, attr)  # given a QPAttr, QP() takes it to INIT
        self.gid_index, self.gid = gid_index, self.ctx.query_gid(1, gid_index)

    def connect(self, peer):
        """INIT -> RTR -> RTS, towards the peer's QP."""
        attr = QPAttr(port_num=1)
        attr.dest_qp_num = peer.qp.qp_num
        attr.max_rd_atomic = attr.max_dest_rd_atomic = 1
        attr.min_rnr_timer, attr.timeout, attr.retry_cnt, attr.rnr_retry = 12, 14, 7, 7
        # RoCE always has a global route; pyverbs' default hop limit (1) crosses no router
        gr = GlobalRoute(dgid=peer.gid, sgid_index=self.gid_index, hop_limit=64)
        attr.ah_attr = AHAttr(port_num=1, is_global=1, gr=gr)
        self.qp.to_rts(attr)

    def post(self, opcode, offset, length, peer):
        """An RDMA WRITE or READ between our buffer at `offset` and the peer's buffer."""
        wr = SendWR(opcode=opcode, num_sge=1,
                    sg=[SGE(self.mr.buf + offset, length, self.mr.lkey)])
        wr.set_wr_rdma(peer.mr.rkey, peer.mr.buf)
        self.qp.post_send(wr)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            n, wcs = self.cq.poll()
            if n:
                if wcs[0].status != ibv_wc_status.IBV_WC_SUCCESS:
                    sys.exit(f"rc_write_read: completion status {wcs[0].status}")
                return
        sys.exit("rc_write_read: no completion within 10 s")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--devices", nargs=2, default=["nsnic0", "nsnic1"], metavar="DEV")
    p.add_argument("--gid-index", type=int, default=0)
    args = p.parse_args()
    a, b = (End(name, args.gid_index) for name in args.devices)
    a.connect(b)
    b.connect(a)

    data = bytes(range(256)) * (SIZE // 2 // 256)
    n = len(data)
    a.mr.write(data, n)
    a.post(ibv_wr_opcode.IBV_WR_RDMA_WRITE, 0, n, b)  # a[0:n] -> b[0:n]
    if b.mr.read(n, 0) != data:
        sys.exit("rc_write_read: the WRITE did not land in the peer's buffer")
    a.post(ibv_wr_opcode.IBV_WR_RDMA_READ, n, n, b)  # b[0:n] -> a[n:2n]
    if a.mr.read(n, n) != data:
        sys.exit("rc_write_read: the READ did not bring the bytes back")
    print(f"rc_write_read: wrote {n} bytes {args.devices[0]} -> {args.devices[1]} "
          f"and read them back: OK")


if __name__ == "__main__":
    main()
