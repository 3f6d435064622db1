"""A UD datagram from one device to another, addressed by an address handle.

On RoCE an address handle always has a global route (the GID of the destination), and every
datagram arrives behind a 40-byte GRH: the receive buffer must have room for it, the payload
starts at offset 40, and byte_len counts the GRH too. Both QPs are in this one process (as
rdma-core's pyverbs tests do it); under nicsim they are on nsnic0 and nsnic1, two hosts:

    nicsim exec -- python examples/pyverbs/ud_send_recv.py

On real hardware, name two RoCE devices that reach each other and their RoCEv2 GID index:

    python ud_send_recv.py --devices mlx5_0 mlx5_1 --gid-index 3
"""

import argparse
import sys
import time

from pyverbs.addr import AH, AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.libibverbs_enums import ibv_access_flags, ibv_qp_type, ibv_wc_flags, ibv_wc_status
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR

GRH = 40  # bytes ahead of every received datagram's payload
SIZE = 1024
QKEY = 0x11111111


def ud_end(name):
    """A device's context, PD and CQ, a buffer with room for a GRH, and a UD QP in RTS."""
    ctx = Context(name=name)
    pd, cq = PD(ctx), CQ(ctx, 16)
    mr = MR(pd, GRH + SIZE, ibv_access_flags.IBV_ACCESS_LOCAL_WRITE)
    init = QPInitAttr(qp_type=ibv_qp_type.IBV_QPT_UD, scq=cq, rcq=cq,
                      cap=QPCap(max_send_wr=4, max_recv_wr=4))
    attr = QPAttr(port_num=1)
    attr.qkey = QKEY
    qp = QP(pd, init, attr)  # with a QPAttr, a UD QP goes all the way to RTS
    return ctx, pd, cq, mr, qp


def completion(cq):
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        n, wcs = cq.poll()
        if n:
            if wcs[0].status != ibv_wc_status.IBV_WC_SUCCESS:
                sys.exit(f"ud_send_recv: completion status {wcs[0].status}")
            return wcs[0]
    sys.exit("ud_send_recv: no completion within 10 s")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--devices", nargs=2, default=["nsnic0", "nsnic1"], metavar="DEV")
    p.add_argument("--gid-index", type=int, default=0)
    args = p.parse_args()
    _, a_pd, a_cq, a_mr, a_qp = ud_end(args.devices[0])
    b_ctx, _, b_cq, b_mr, b_qp = ud_end(args.devices[1])

    # b posts a receive with room for the GRH, then a sends to b's QP through an AH
    b_qp.post_recv(RecvWR(num_sge=1, sg=[SGE(b_mr.buf, GRH + SIZE, b_mr.lkey)]))
    # RoCE always has a global route; pyverbs' default hop limit (1) crosses no router
    gid = b_ctx.query_gid(1, args.gid_index)
    gr = GlobalRoute(dgid=gid, sgid_index=args.gid_index, hop_limit=64)
    ah = AH(a_pd, attr=AHAttr(port_num=1, is_global=1, gr=gr))
    msg = b"a datagram, no connection needed"
    a_mr.write(msg, len(msg))
    wr = SendWR(num_sge=1, sg=[SGE(a_mr.buf, len(msg), a_mr.lkey)])
    wr.set_wr_ud(ah, b_qp.qp_num, QKEY)
    a_qp.post_send(wr)
    completion(a_cq)

    wc = completion(b_cq)
    if not wc.wc_flags & ibv_wc_flags.IBV_WC_GRH or wc.byte_len != GRH + len(msg):
        sys.exit(f"ud_send_recv: expected a GRH and {len(msg)} bytes behind it: {wc}")
    if wc.src_qp != a_qp.qp_num:
        sys.exit(f"ud_send_recv: the datagram names QP {wc.src_qp} as its sender")
    # (the first 40 bytes hold the GRH; RoCEv2 over IPv4 puts the packet's IPv4 header in
    # its last 20, so the sender's address is at bytes 32-35)
    if b_mr.read(len(msg), GRH) != msg:
        sys.exit("ud_send_recv: the payload differs")
    print(f"ud_send_recv: {len(msg)} bytes from QP {a_qp.qp_num} ({args.devices[0]}) to "
          f"QP {b_qp.qp_num} ({args.devices[1]}), behind a {GRH}-byte GRH: OK")


if __name__ == "__main__":
    main()
