"""An echo service over RDMA and over TCP sockets, on the same simulated hosts.

The client keeps `depth` requests of `size` bytes outstanding and the server sends each one
back; the result is the requests per second and the latency of each request (send to the
reply's arrival in the client's program). Both transports pay the same application cost per
request on the server (`app_ns`).

RDMA runs through the whole model: verbs, the provider, the NIC, PCIe and the link. Client
and server are programs on their own CPUs (nicsim.host.cpus); each has one RC QP, one CQ for
sends and receives, `depth` receives posted, and a request or reply is one SEND.

TCP is a **cost model**, not a TCP implementation: a message costs the documented kinds of
work on each side, with the parameters of the profile's `cpu` section (`sock_*`, `tcp_*`):

  send():  syscall entry and exit + copy of the bytes into the kernel + per-segment TCP/IP
           transmit work (tcp_sendmsg .. driver xmit) + the doorbell's MMIO store;
  NIC:     a DMA read of each segment (the host's PCIe model), then the frames on the wire
           (Ethernet + IPv4 + TCP with timestamps, MSS 1448) at the link's rate and delay;
  receive: a DMA write per segment (PCIe model), one interrupt for the burst, per-segment
           softirq work (NAPI, IP, TCP, socket queue), the wakeup of the blocked reader if it
           sleeps, and recv(): syscall entry and exit + copy out of the kernel.

Each host's kernel work and its program share one CPU (a SimPy resource), so a softirq
delays the program on that core as it would. The model has no congestion window, no delayed
ACKs (an echo's reply carries the ACK), no loss and no interrupt moderation; its frames are
timed on the link's parameters but do not appear on the simulated link or in its pcap.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import numpy as np
import simpy

from nicsim.driver import enums as e
from nicsim.driver.user.verbs import SGE, QPCap, RecvWR, SendWR
from nicsim.host.cpus import Cpus
from nicsim.workloads.endpoint import ALL_ACCESS, Side, connect_qp, make_side, roce_v2_gid
from nicsim.world import World

MSS = 1448  # a 1500-byte MTU less IPv4, TCP and the timestamp option
TCP_FRAME_OVERHEAD = 14 + 20 + 20 + 12 + 4  # Ethernet, IPv4, TCP, timestamps, FCS
WIRE_EXTRA = 8 + 12  # preamble+SFD and the inter-frame gap
ETH_MIN = 64


@dataclass
class EchoResult:
    transport: str
    size: int
    depth: int
    requests: int
    seconds: float  # simulated time from the first request to the last reply
    latencies_ns: np.ndarray

    @property
    def qps(self) -> float:
        return self.requests / self.seconds

    def json(self) -> dict[str, Any]:
        lat = self.latencies_ns
        return {"transport": self.transport, "size": self.size, "depth": self.depth,
                "requests": self.requests, "qps": self.qps,
                "p50_us": float(np.percentile(lat, 50)) / 1000,
                "p99_us": float(np.percentile(lat, 99)) / 1000,
                "mean_us": float(lat.mean()) / 1000}


# -- RDMA ------------------------------------------------------------------------------------


def _side(w: World, host: str, size: int, depth: int) -> Side:
    return make_side(w, host, 2 * depth * max(size, 64), QPCap(depth + 1, depth + 1, 1, 1, 0),
                     ALL_ACCESS, 4 * depth + 4, sq_sig_all=1)


def rdma_echo(w: World, size: int, requests: int, depth: int = 1, app_ns: float = 0.0
              ) -> EchoResult:
    """`requests` echoes of `size` bytes, `depth` outstanding, over one RC QP pair."""
    c, s = _side(w, "a", size, depth), _side(w, "b", size, depth)
    for x, y in ((c, s), (s, c)):
        connect_qp(x.qp, y.qp.qp_num, roce_v2_gid(y.ctx)[1], e.IBV_MTU_4096)
    slot = max(size, 64)
    env = w.env

    def recv(side: Side, k: int) -> None:  # receives land in the second half
        side.qp.post_recv(RecvWR(wr_id=k, num_sge=1, sg=[SGE(
            side.mr.buf + (depth + k) * slot, size, side.mr.lkey)]))

    def send(side: Side, k: int) -> None:
        side.qp.post_send(SendWR(wr_id=k, opcode=e.IBV_WR_SEND, num_sge=1,
                                 sg=[SGE(side.mr.buf + k * slot, size, side.mr.lkey)]))

    for k in range(depth):
        recv(c, k)
        recv(s, k)
    sent_at = [0.0] * depth
    lat: list[float] = []

    def client() -> None:
        sent = 0
        for k in range(min(depth, requests)):
            sent_at[k] = env.now
            send(c, k)
            sent += 1
        while len(lat) < requests:
            for wc in c.cq.poll(16)[1]:
                _ok(wc)
                if wc.opcode != e.IBV_WC_RECV:
                    continue
                k = wc.wr_id
                lat.append(env.now - sent_at[k])
                recv(c, k)
                if sent < requests:
                    sent_at[k] = env.now
                    send(c, k)
                    sent += 1

    def server() -> None:
        done = 0
        while done < requests:
            for wc in s.cq.poll(16)[1]:
                _ok(wc)
                if wc.opcode != e.IBV_WC_RECV:
                    continue
                done += 1
                s.ctx.host.spend(app_ns)
                recv(s, wc.wr_id)
                send(s, wc.wr_id)

    t0 = env.now
    Cpus(env).run([("client", c.ctx.host, client), ("server", s.ctx.host, server)])
    return EchoResult("rdma", size, depth, requests, (env.now - t0) * 1e-9, np.array(lat))


def _ok(wc: Any) -> None:
    if wc.status != e.IBV_WC_SUCCESS:
        raise RuntimeError(f"echo: completion with status {wc.status} (wr_id {wc.wr_id})")


# -- TCP sockets (a cost model) ----------------------------------------------------------------


@dataclass(frozen=True)
class SocketCosts:
    """The socket path's per-call and per-segment costs (the profile's `cpu` section)."""

    syscall_ns: float
    copy_gbps: float
    tx_seg_ns: float
    rx_seg_ns: float
    irq_ns: float
    wakeup_ns: float
    mmio_ns: float

    def copy_ns(self, n: int) -> float:
        return n * 8 / self.copy_gbps


class _Host:
    """One host of the model: its CPU (one core), its NIC's PCIe, its wire direction out."""

    def __init__(self, env: simpy.Environment, pcie: Any, rate_gbps: float) -> None:
        self.cpu = simpy.Resource(env, 1)
        self.pcie = pcie
        self.wire_free = 0.0
        self.ns_per_byte = 8 / rate_gbps
        self.inbox: simpy.Store = simpy.Store(env)  # messages the socket holds for recv()
        self.sleeping: simpy.Event | None = None


def tcp_echo(w: World, size: int, requests: int, costs: SocketCosts, depth: int = 1,
             app_ns: float = 0.0) -> EchoResult:
    """The same echo over one TCP connection, by the cost model of the module docstring."""
    env = w.env
    link = w.links[0].cfg
    hosts = {n: _Host(env, w.nics[n].pcie, link.rate_gbps) for n in ("a", "b")}
    nseg = max(1, -(-size // MSS))

    def work(h: _Host, ns: float) -> Generator[simpy.Event, None, None]:
        with h.cpu.request() as req:
            yield req
            yield env.timeout(ns)

    def transmit(src: _Host, dst: _Host, tag: int) -> Generator[simpy.Event, None, None]:
        """From the doorbell to the bytes in the receiver's socket."""
        t = src.pcie.mmio_write_arrival()  # the doorbell reaches the NIC
        arrive = t
        for i in range(nseg):
            n = min(MSS, size - i * MSS) if size else 0
            frame = max(n + TCP_FRAME_OVERHEAD, ETH_MIN)
            ready = src.pcie.dma_read(n + 16, t)  # the segment and its descriptor
            start = max(ready, src.wire_free)
            src.wire_free = start + (frame + WIRE_EXTRA) * src.ns_per_byte
            arrive = dst.pcie.dma_write(n, src.wire_free + link.prop_ns)
        yield env.timeout(max(0.0, arrive - env.now))
        yield from work(dst, costs.irq_ns + nseg * costs.rx_seg_ns)
        yield dst.inbox.put(tag)
        ev = dst.sleeping
        if ev is not None:
            dst.sleeping = None  # one wakeup for a sleeping reader, whoever brings data
            yield from work(dst, costs.wakeup_ns)
            ev.succeed()

    def send(src: _Host, dst: _Host, tag: int) -> Generator[simpy.Event, None, None]:
        yield from work(src, costs.syscall_ns + costs.copy_ns(size) + nseg * costs.tx_seg_ns
                        + costs.mmio_ns)
        env.process(transmit(src, dst, tag))

    def recv(h: _Host) -> Generator[simpy.Event, None, int]:
        while not h.inbox.items:
            h.sleeping = env.event()
            yield h.sleeping
        tag = yield h.inbox.get()
        yield from work(h, costs.syscall_ns + costs.copy_ns(size))
        return tag  # type: ignore[no-any-return]

    a, b = hosts["a"], hosts["b"]
    sent_at = [0.0] * depth
    lat: list[float] = []

    def client() -> Generator[simpy.Event, None, None]:
        sent = 0
        for k in range(min(depth, requests)):
            sent_at[k] = env.now
            yield from send(a, b, k)
            sent += 1
        while len(lat) < requests:
            k = yield from recv(a)
            lat.append(env.now - sent_at[k])
            if sent < requests:
                sent_at[k] = env.now
                yield from send(a, b, k)
                sent += 1

    def server() -> Generator[simpy.Event, None, None]:
        for _ in range(requests):
            k = yield from recv(b)
            yield from work(b, app_ns)
            yield from send(b, a, k)

    t0 = env.now
    done = env.process(client())
    env.process(server())
    env.run(until=done)
    return EchoResult("tcp", size, depth, requests, (env.now - t0) * 1e-9, np.array(lat))
