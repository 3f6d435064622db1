"""The echo service over RDMA (the model) and over TCP (the stated cost model)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from nicsim.apps.echo import MSS, SocketCosts, rdma_echo, tcp_echo
from nicsim.world import World

COSTS = SocketCosts(syscall_ns=300, copy_gbps=80, tx_seg_ns=700, rx_seg_ns=900, irq_ns=1000,
                    wakeup_ns=2500, mmio_ns=20)


def _rtt(size: int, costs: SocketCosts = COSTS, app_ns: float = 0.0) -> float:
    r = tcp_echo(World.two_hosts(), size, 50, costs, 1, app_ns)
    assert len(r.latencies_ns) == 50
    return float(np.median(r.latencies_ns))


@pytest.mark.parametrize("field,per_echo", [
    ("wakeup_ns", 2),  # the server's reader and the client's reader each sleep once
    ("irq_ns", 2),  # one interrupt per message, a request and a reply
    ("syscall_ns", 4),  # send and recv on each side
    ("app_ns", 1),
])
def test_tcp_rtt_moves_by_each_cost_as_the_model_says(field: str, per_echo: int) -> None:
    base = _rtt(512)
    if field == "app_ns":
        assert _rtt(512, app_ns=1000) - base == pytest.approx(1000 * per_echo)
    else:
        more = replace(COSTS, **{field: getattr(COSTS, field) + 1000})
        assert _rtt(512, more) - base == pytest.approx(1000 * per_echo)


def test_tcp_per_segment_work_counts_segments() -> None:
    more = replace(COSTS, tx_seg_ns=COSTS.tx_seg_ns + 1000, rx_seg_ns=COSTS.rx_seg_ns + 1000)
    one, three = MSS, 3 * MSS
    # 2 messages per echo, each paying tx and rx work per segment
    assert _rtt(one, more) - _rtt(one) == pytest.approx(2 * 2 * 1000)
    assert _rtt(three, more) - _rtt(three) == pytest.approx(2 * 2 * 3 * 1000)


def test_tcp_server_cpu_bounds_the_request_rate() -> None:
    r = tcp_echo(World.two_hosts(), 64, 400, COSTS, 8, 0.0)
    # Per request the server's one core at least receives (interrupt, softirq, recv) and
    # sends: nothing can make it answer faster than that.
    per_req = (COSTS.irq_ns + COSTS.rx_seg_ns + 2 * COSTS.syscall_ns + COSTS.tx_seg_ns
               + COSTS.mmio_ns + 2 * COSTS.copy_ns(64))
    assert r.qps <= 1e9 / per_req * 1.001
    assert r.qps > tcp_echo(World.two_hosts(), 64, 400, COSTS, 1, 0.0).qps


def test_rdma_echo_round_trips_through_the_model() -> None:
    w = World.two_hosts()
    r = rdma_echo(w, 256, 100, 1)
    assert len(r.latencies_ns) == 100
    # At least twice the frame on a 100 Gb/s wire, the cable and a PCIe write at the receiver.
    assert r.latencies_ns.min() > 2 * (50 + 200)
    c = w.nics["a"].counters()
    assert c["requester.data_packets"] == 100  # one SEND per request
    deeper = rdma_echo(World.two_hosts(), 256, 400, 8)
    assert deeper.qps > r.qps
