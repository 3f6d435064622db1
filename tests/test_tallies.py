"""Counters the hot path keeps as tallies (PCIe transfers per size, frames sent per length)
add up to what counting every event gives, and posted device writes, one queue entry per
piece, land whole, in time order, and are seen by device reads before they land
(nicsim.host.pcie, nicsim.nic.port, nicsim.host.memory)."""

from __future__ import annotations

import random

import simpy
from nicsim.driver import enums as e
from nicsim.driver.user.verbs import SGE, RecvWR, SendWR

from nicsim.fabric.link import Link, LinkConfig
from nicsim.host.memory import LAND_AT, PhysMem
from nicsim.host.pcie import Pcie, PcieConfig
from nicsim.nic.port import Port
from nicsim.sim import Sim
from nicsim.testing.rdma import pair, settle, wait
from nicsim.wire.packet import wire_bytes


def _ceil(n: int, d: int) -> int:
    return max(1, -(-n // d))


def test_pcie_counters_add_up_per_transfer():
    env = Sim()
    cfg = PcieConfig()
    pcie = Pcie(env, cfg)
    rng = random.Random(7)
    want = dict.fromkeys(pcie.counters, 0)
    for _ in range(500):
        n = rng.choice([0, 1, 64, 256, 257, 512, 4096, rng.randrange(1, 9000)])
        kind = rng.randrange(4)
        if kind == 0:
            pcie.dma_write(n)
            want["dma_writes"] += 1
            want["dma_write_bytes"] += n
            want["tlps_up"] += _ceil(n, cfg.mps)
        elif kind == 1:
            pcie.dma_read(n)
            want["dma_reads"] += 1
            want["dma_read_bytes"] += n
            want["tlps_up"] += _ceil(n, cfg.mrrs)
            want["tlps_down"] += _ceil(n, cfg.mps)
        elif kind == 2:
            pcie.mmio_write_arrival()
            want["mmio_writes"] += 1
            want["tlps_down"] += 1
        else:
            pcie.mmio_read_roundtrip()
            want["mmio_reads"] += 1
    assert pcie.counters == want


def _port(pfc: tuple[int, ...]) -> tuple[simpy.Environment, Port, list]:
    env = Sim()
    got: list = []
    link = Link(env, LinkConfig(rate_gbps=25.0))
    port = Port(env, lambda f: None, pfc)
    port.mac = b"\x02\0\0\0\0\x01"
    port.connect(link)
    link.attach(got.append)
    return env, port, got


def test_port_counters_add_up_per_frame():
    """Plain and PFC-queued transmitters: frames, bytes and time on the wire as the sum over
    every frame sent."""
    for pfc in ((), (3,)):
        env, port, got = _port(pfc)
        rng = random.Random(3)
        lens = [rng.choice([42, 60, 61, 1078, 4154, rng.randrange(14, 9000)]) for _ in range(300)]
        for n in lens:
            port.send(b"\x02\0\0\0\0\x02" + port.mac + bytes([0x08, 0]) + bytes(n - 14))
        env.run()
        c = port.counters
        assert len(got) == len(lens)
        assert (c["tx_frames"], c["tx_bytes"]) == (len(lens), sum(lens))
        busy = sum(wire_bytes(n) * 8 / 25.0 for n in lens)
        assert abs(c["tx_busy_ns"] - busy) < 1e-6 * busy
        if not pfc:  # back to back from time 0: free when the last frame's time is over
            assert port.free == c["tx_busy_ns"]


def test_traffic_counters_match_what_was_sent():
    """WRITEs and SENDs of 1 byte to 5 MTUs + 3 (most of their packets on the receive fast
    path, counted as tallies; the requester counts per run of packets): what the counters say
    against what was posted, and one NIC's receive counters against the other's port."""
    w, a, b = pair(mtu=e.IBV_MTU_1024, mr_len=64 << 10)
    sizes = [1, 1024, 1025, 3 * 1024, 5 * 1024 + 3, 4096]
    pkts = [max(1, -(-n // 1024)) for n in sizes]
    for i, n in enumerate(sizes):
        b.qp.post_recv(RecvWR(wr_id=i, num_sge=1, sg=[SGE(b.mr.buf + 32768, n, b.mr.lkey)]))
    for op in (e.IBV_WR_RDMA_WRITE, e.IBV_WR_SEND):
        for i, n in enumerate(sizes):
            wr = SendWR(wr_id=i, opcode=op, num_sge=1, sg=[SGE(a.mr.buf, n, a.mr.lkey)],
                        send_flags=e.IBV_SEND_SIGNALED)
            if op == e.IBV_WR_RDMA_WRITE:
                wr.set_wr_rdma(b.mr.rkey, b.mr.buf)
            a.qp.post_send(wr)
        assert all(wc.status == e.IBV_WC_SUCCESS for wc in wait(a, len(sizes)))
    assert len(wait(b, len(sizes))) == len(sizes)
    settle(w)
    ca, cb = w.nics["a"].counters(), w.nics["b"].counters()
    assert ca["requester.data_packets"] == 2 * sum(pkts)
    assert ca["requester.data_bytes"] == 2 * sum(sizes)
    assert cb["responder.write_packets"] == cb["responder.send_packets"] == sum(pkts)
    assert cb["responder.requests"] == 2 * sum(pkts)
    assert cb["responder.bytes_placed"] == 2 * sum(sizes)
    for x, y in ((ca, cb), (cb, ca)):
        assert y["rx.packets"] == y["rx.roce_packets"] == x["port.tx_frames"]
        assert y["rx.bytes"] == x["port.tx_bytes"]


def test_posted_writes_land_in_time_order_and_reads_see_them_first():
    env = Sim()
    mem = PhysMem(1 << 20, env=env)
    base = 16 * 4096
    # A transfer of three pieces lands at 100; one posted after it lands earlier (50) and
    # takes its place ahead in the queue; a later write to the same bytes lands at 200.
    mem.post(100.0, [(base, b"A" * 8), (base + 100, b"B" * 8), (base + 4000, b"C" * 200)])
    mem.post1(50.0, base + 8, b"D" * 8)
    mem.post1(200.0, base, b"E" * 4)
    assert [t for t, _, _ in mem.posted] == [50.0, 100.0, 100.0, 100.0, 200.0]
    # Not landed: the CPU sees zeros, a device read sees every posted write, in order.
    assert mem.read(base, 16) == bytes(16)
    assert mem.overlay(base, mem.read(base, 16)) == b"EEEE" + b"A" * 4 + b"D" * 8
    woke: list[float] = []
    mem.watch(base + 4100, base + 4108, lambda: woke.append(env.now))  # the third piece's
    env.run(until=150.0)
    mem.post1(150.0, base + 300, b"G")  # landed already: queued, seen by the next look
    assert [t for t, _, _ in mem.posted] == [150.0, 200.0]
    assert mem.read(base + 100, 8) == b"B" * 8 and mem.read(base + 4000, 200) == b"C" * 200
    assert mem.read(base + 300, 1) == b"G"
    assert [t for t, _, _ in mem.posted] == [200.0]
    assert woke == [100.0]
    # A CPU waiting on a range is woken when a write posted later lands there.
    mem.watch(base + 600, base + 608, lambda: woke.append(env.now))
    mem.post1(260.0, base + 604, b"H" * 8)
    env.run(until=300.0)
    assert woke == [100.0, 260.0]
    assert mem.read(base, 4) == b"EEEE" and mem.read(base + 604, 8) == b"H" * 8
    assert not mem.posted
    # Nothing looks for a while: the queue is landed in bulk once it passes LAND_AT entries,
    # those due and only those, the last word written to each byte winning.
    for i in range(LAND_AT):
        mem.post1(310.0 + i, base + 800 + i % 8, bytes([i]))
    env.run(until=350.0)
    mem.post1(500.0, base + 900, b"Z")
    assert [t for t, _, _ in mem.posted] == [310.0 + i for i in range(41, LAND_AT)] + [500.0]
    assert mem.mv[base + 800:base + 808].tobytes() == bytes([40, *range(33, 40)])  # i <= 40
    assert mem.mv[base + 900] == 0


def test_free_bytes_comes_back_when_pages_are_freed() -> None:
    """free_bytes counts each page once: a page taken from a fresh 2 MiB block and given back
    leaves it where it started (it counted the block's pages twice, so `mmap` refused a
    mapping that fit)."""
    mem = PhysMem(64 << 20, seed=3)
    before = mem.free_bytes
    pages = [mem.alloc_page() for _ in range(5)]
    assert mem.free_bytes == before - 5 * 4096
    for pa in pages:
        mem.free_page(pa)
    assert mem.free_bytes == before
