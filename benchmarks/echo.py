"""Echo over RDMA against echo over TCP sockets, on the same simulated hosts.

The claim under test (the bRPC article on RDMA): for messages under 2 KB, RDMA raises an echo
service's QPS by about 50% and lowers its latency by about 50%. RDMA goes through the whole
model (verbs, NIC, PCIe, link); TCP is the cost model of nicsim.apps.echo with the socket
parameters of the profile's `cpu` section. Latency is the median at one request in flight,
QPS is measured with `--depth` requests in flight; both transports pay the same server-side
application cost (`--app-ns`).

    python benchmarks/echo.py [--json] [--profile cx4lx-25g] [--depth 8] [--requests 2000]
"""

from __future__ import annotations

import argparse
import json
import sys

from nicsim.apps.echo import SocketCosts, rdma_echo, tcp_echo
from nicsim.scenario.build import build_world
from nicsim.scenario.schema import Scenario, validate
from nicsim.world import World

SIZES = [32, 128, 512, 1024, 2048, 4096, 16384]
COLUMNS = [("size", "size", 1), ("RDMA p50 us", "rdma_p50_us", 1), ("TCP p50 us", "tcp_p50_us", 1),
           ("lat ratio", "latency_ratio", 1), ("RDMA kQPS", "rdma_qps", 1e-3),
           ("TCP kQPS", "tcp_qps", 1e-3), ("QPS ratio", "qps_ratio", 1)]


def scenario(profile: str | None) -> Scenario:
    data: dict = {"name": "echo", "pcap": None, "ops": [{"op": "write"}]}
    if profile:
        data["profile"] = profile
    return validate(data, "echo")


def world(sc: Scenario) -> World:
    return build_world(sc, None, 64 << 20)


def socket_costs(sc: Scenario) -> SocketCosts:
    c = sc.cpu
    return SocketCosts(c.sock_syscall_ns, c.sock_copy_gbps, c.tcp_tx_seg_ns, c.tcp_rx_seg_ns,
                       c.irq_ns, c.wakeup_ns, c.mmio_write_ns)


def measure(sc: Scenario, size: int, requests: int, depth: int, app_ns: float) -> dict:
    costs = socket_costs(sc)
    lat_r = rdma_echo(world(sc), size, requests, 1, app_ns)
    lat_t = tcp_echo(world(sc), size, requests, costs, 1, app_ns)
    qps_r = rdma_echo(world(sc), size, requests, depth, app_ns)
    qps_t = tcp_echo(world(sc), size, requests, costs, depth, app_ns)
    r50, t50 = lat_r.json()["p50_us"], lat_t.json()["p50_us"]
    return {"size": size, "rdma_p50_us": r50, "tcp_p50_us": t50,
            "latency_ratio": r50 / t50, "rdma_qps": qps_r.qps, "tcp_qps": qps_t.qps,
            "qps_ratio": qps_r.qps / qps_t.qps}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--profile", default="cx4lx-25g", help="NIC and host profile")
    ap.add_argument("--depth", type=int, default=8, help="requests in flight for QPS")
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--app-ns", type=float, default=1000.0,
                    help="server-side work per request, the same for both transports")
    args = ap.parse_args()
    sc = scenario(args.profile)
    rows = [measure(sc, s, args.requests, args.depth, args.app_ns) for s in SIZES]
    if args.json:
        print(json.dumps({"profile": args.profile, "depth": args.depth,
                          "app_ns": args.app_ns, "socket_costs": socket_costs(sc).__dict__,
                          "rows": rows}, indent=2))
        return 0
    print(f"profile {args.profile}, QPS at {args.depth} in flight, latency at 1, "
          f"{args.app_ns:g} ns of server work per request")
    print(" ".join(f"{title:>12}" for title, _, _ in COLUMNS))
    for r in rows:
        print(" ".join(f"{r[key] * scale:>12.{0 if key == 'size' else 2}f}"
                       for _, key, scale in COLUMNS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
