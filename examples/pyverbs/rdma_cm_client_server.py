"""rdma_cm: a client connects to a server by IP address, one SEND each way, then disconnect.

The server listens on one host's address, the client connects from another's; rdma_cm sets
up the RC QPs of both (synchronous CMIDs, as librdmacm's rdma_server and rdma_client
examples). The server runs in a child process made by multiprocessing's fork context, as
rdma-core's rdmacm tests do it (under nicsim exec, such a child is a thread that shares the
simulated world). Under nicsim the addresses are 10.0.0.2 (server) and 10.0.0.1 (client):

    nicsim exec -- python examples/pyverbs/rdma_cm_client_server.py

On real hardware, give the IP addresses of two RoCE netdevs that reach each other:

    python rdma_cm_client_server.py --server 192.168.1.2 --client 192.168.1.1
"""

import argparse
import multiprocessing
import sys

from pyverbs.cmid import CMID, AddrInfo
from pyverbs.libibverbs_enums import ibv_qp_type, ibv_wc_status
from pyverbs.librdmacm_enums import RAI_PASSIVE, rdma_port_space
from pyverbs.qp import QPCap, QPInitAttr

PORT = "7471"
SIZE = 64
REQUEST, REPLY = b"ping from the client", b"pong from the server"


def qp_init_attr():
    return QPInitAttr(qp_type=ibv_qp_type.IBV_QPT_RC, cap=QPCap(max_send_wr=1, max_recv_wr=1))


def check(wc, side, what):
    if wc.status != ibv_wc_status.IBV_WC_SUCCESS:
        sys.exit(f"rdma_cm_client_server: {side}: {what} completed with status {wc.status}")


def server(addr, listening):
    ai = AddrInfo(src=addr, src_service=PORT, port_space=rdma_port_space.RDMA_PS_TCP,
                  flags=RAI_PASSIVE)
    listen_id = CMID(creator=ai, qp_init_attr=qp_init_attr())
    listen_id.listen()
    listening.set()
    conn = listen_id.get_request()  # a new CMID with its own QP
    mr = conn.reg_msgs(SIZE)
    conn.post_recv(mr, SIZE)  # before accept(): the client may send as soon as it is connected
    conn.accept()
    wc = conn.get_recv_comp()
    check(wc, "server", "the RECV")
    if mr.read(wc.byte_len, 0) != REQUEST:
        sys.exit(f"rdma_cm_client_server: server got {mr.read(wc.byte_len, 0)!r}")
    mr.write(REPLY, len(REPLY))
    conn.post_send(mr, length=len(REPLY))
    check(conn.get_send_comp(), "server", "the SEND")
    conn.disconnect()
    conn.close()
    listen_id.close()


def client(src, dst):
    ai = AddrInfo(src=src, dst=dst, dst_service=PORT, port_space=rdma_port_space.RDMA_PS_TCP)
    cmid = CMID(creator=ai, qp_init_attr=qp_init_attr())  # address and route resolved
    cmid.connect()  # returns once the connection is established
    mr = cmid.reg_msgs(SIZE)
    cmid.post_recv(mr, SIZE)  # for the reply, before the request goes out
    mr.write(REQUEST, len(REQUEST))
    cmid.post_send(mr, length=len(REQUEST))
    check(cmid.get_send_comp(), "client", "the SEND")
    wc = cmid.get_recv_comp()
    check(wc, "client", "the RECV")
    reply = mr.read(wc.byte_len, 0)
    if reply != REPLY:
        sys.exit(f"rdma_cm_client_server: client got {reply!r}")
    cmid.disconnect()
    cmid.close()
    return reply


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--server", default="10.0.0.2", help="the address the server listens on")
    p.add_argument("--client", default="10.0.0.1", help="the address the client connects from")
    args = p.parse_args()
    mp = multiprocessing.get_context("fork")
    listening = mp.Event()
    srv = mp.Process(target=server, args=(args.server, listening))
    srv.start()
    if not listening.wait(10):
        sys.exit("rdma_cm_client_server: the server did not start listening")
    reply = client(args.client, args.server)
    srv.join()
    if srv.exitcode != 0:
        sys.exit(f"rdma_cm_client_server: the server failed (exit code {srv.exitcode})")
    print(f"rdma_cm_client_server: {args.client} -> {args.server}:{PORT} sent "
          f"{REQUEST.decode()!r}, got {reply.decode()!r}, disconnected: OK")


if __name__ == "__main__":
    main()
