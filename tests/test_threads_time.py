"""Simulated time in programs with several flows of control (fork-context children run as
threads under `nicsim exec`, scheduled by nicsim.driver.sched): a run is bit-for-bit
repeatable, and a wait returns when the world has something for it, not when another
flow's empty polls have pushed the clock far past it."""

from __future__ import annotations

import queue
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from nicsim.driver import enums as e
from nicsim.driver import sched
from nicsim.driver.cm_enums import RAI_PASSIVE
from nicsim.driver.kernel.cm import mad as m
from nicsim.driver.user.process import Process, attach
from nicsim.driver.user.rdma_addrinfo import AddrInfo
from nicsim.driver.user.rdmacm import CMID
from nicsim.driver.user.verbs import QPCap, QPInitAttr

from nicsim.exec.spec import WorldSpec
from nicsim.exec.threads import ThreadContext
from nicsim.exec.world import build, devices
from nicsim.testing.exec_world import attached_world, host_ips
from nicsim.wire import parse
from nicsim.world import World

ROOT = Path(__file__).resolve().parents[1]

# A CM server in a forked child (a thread under nicsim exec) and a client in the main thread
# that polls its CQ while the server waits in accept(): the shape of the examples' CM program,
# with empty polls on both sides of the RTU. Before the scheduler it returned 20 to 70 ms of
# simulated time after the RTU, differently in every run (the client's empty polls each moved
# the clock 100 us while the server slept on the wall clock in its wait).
POLLER = '''\
"""A CM server in a forked child; the client polls its CQ while the server waits in accept()."""
import multiprocessing
import sys

from pyverbs.cmid import CMID, AddrInfo, CMEvent, CMEventChannel, ConnParam
from pyverbs.cq import CQ
from pyverbs.libibverbs_enums import ibv_qp_type, ibv_wc_status
from pyverbs.librdmacm_enums import RAI_PASSIVE, rdma_cm_event_type, rdma_port_space
from pyverbs.qp import QPCap, QPInitAttr

from nicsim.driver.user.process import current

SRV, CLI, PORT, SIZE, POLLS = "10.0.0.2", "10.0.0.1", "7471", 64, 20
TCP = rdma_port_space.RDMA_PS_TCP
EV = rdma_cm_event_type


def now():
    return current().home.env.now


def ok(wc):
    assert wc.status == ibv_wc_status.IBV_WC_SUCCESS, wc.status


def server(listening):
    lid = CMID(creator=AddrInfo(src=SRV, src_service=PORT, port_space=TCP, flags=RAI_PASSIVE),
               qp_init_attr=QPInitAttr(qp_type=ibv_qp_type.IBV_QPT_RC,
                                       cap=QPCap(max_send_wr=1, max_recv_wr=1)))
    lid.listen()
    listening.set()
    conn = lid.get_request()
    mr = conn.reg_msgs(SIZE)
    conn.post_recv(mr, SIZE)
    conn.accept()
    print(f"accept returned at {now()!r} ns", file=sys.stderr)
    ok(conn.get_recv_comp())
    conn.post_send(mr, length=8)
    ok(conn.get_send_comp())
    conn.disconnect()
    conn.close()
    lid.close()


def client():
    ch = CMEventChannel()
    cid = CMID(ch, port_space=TCP)
    cid.resolve_addr(AddrInfo(src=CLI, dst=SRV, dst_service=PORT, port_space=TCP))
    assert CMEvent(ch).event_type == EV.RDMA_CM_EVENT_ADDR_RESOLVED
    cid.resolve_route()
    assert CMEvent(ch).event_type == EV.RDMA_CM_EVENT_ROUTE_RESOLVED
    cq = CQ(cid.ctx, 8)
    cid.create_qp(QPInitAttr(qp_type=ibv_qp_type.IBV_QPT_RC, scq=cq, rcq=cq,
                             cap=QPCap(max_send_wr=1, max_recv_wr=1)))
    mr = cid.reg_msgs(SIZE)
    cid.post_recv(mr, SIZE)
    cid.connect(ConnParam())
    for _ in range(POLLS):  # empty polls while the REQ and the REP cross
        assert cq.poll(1)[0] == 0
    assert CMEvent(ch).event_type == EV.RDMA_CM_EVENT_ESTABLISHED  # the RTU goes out
    cid.post_send(mr, length=8)
    got = 0
    while got < 2:  # the SEND's completion, then the server's answer: after its accept()
        n, wcs = cq.poll(1)
        for wc in wcs:
            ok(wc)
        got += n
    cid.disconnect()
    cid.close()


if __name__ == "__main__":
    mp = multiprocessing.get_context("fork")
    listening = mp.Event()
    srv = mp.Process(target=server, args=(listening,))
    srv.start()
    assert listening.wait(10)
    client()
    srv.join()
    assert srv.exitcode == 0, srv.exitcode
    print("poller: OK")
'''

# The longest the server's accept() may take, in simulated time, after the RTU (the last
# MAD of the connection's setup) leaves the client: the RTU crosses the wire and the NIC
# (a few us), the server's CM wait looks at QP1 every 20 us of simulated time
# (rdmacm._WAIT_NS), then takes the MAD and returns (kernel and library CPU time, a few us).
# The passive side's answer to a MAD is of the same kind: REQ to REP takes about 60 us here.
ACCEPT_AFTER_RTU_NS = 200_000.0


def _pcap_frames(path: Path) -> list[tuple[float, bytes]]:
    """(time in ns, frame) of a nanosecond-resolution pcap."""
    data = path.read_bytes()
    assert struct.unpack_from("<I", data)[0] == 0xA1B23C4D
    out, off = [], 24
    while off < len(data):
        sec, frac, incl, _orig = struct.unpack_from("<IIII", data, off)
        off += 16
        out.append((sec * 1e9 + frac, data[off:off + incl]))
        off += incl
    return out


def _exec(prog: Path, cap: Path) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-m", "nicsim.cli", "exec", "--pcap", str(cap), "--",
                        "python", str(prog)], cwd=ROOT, capture_output=True, text=True,
                       timeout=300, check=False)
    assert r.returncode == 0, r.stderr
    return r


def _captures(cap: Path) -> dict[str, bytes]:
    """The captures of a run, by host (the file names carry the process ID)."""
    return {p.stem.rsplit("-", 1)[1]: p.read_bytes() for p in cap.glob("*.pcap")}


def _mads(cap: Path) -> list[tuple[float, str]]:
    """The CM MADs on the wire: (time, attribute), in time order."""
    out = []
    for p in cap.glob("*.pcap"):
        for t, frame in _pcap_frames(p):
            pkt = parse(frame)
            if pkt.dqpn == m.GSI_QPN:
                out.append((t, m.parse(bytes(pkt.payload)).attr.name))
    return sorted(out)


@pytest.fixture(scope="module")
def poller_runs(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[Path, float]]:
    """Two runs of POLLER: (capture directory, simulated time accept() returned at)."""
    tmp = tmp_path_factory.mktemp("poller")
    prog = tmp / "poller.py"
    prog.write_text(POLLER)
    out = []
    for i in range(2):
        r = _exec(prog, tmp / f"run{i}")
        assert r.stdout.strip() == "poller: OK", r.stdout
        accepted = [float(line.split()[3]) for line in r.stderr.splitlines()
                    if line.startswith("accept returned at")]
        assert len(accepted) == 1, r.stderr
        out.append((tmp / f"run{i}", accepted[0]))
    return out


def test_a_threaded_cm_program_gives_the_same_pcaps_every_run(
        poller_runs: list[tuple[Path, float]]) -> None:
    """The captures of two runs, timestamps included, are the same bytes."""
    (cap1, acc1), (cap2, acc2) = poller_runs
    pcaps1, pcaps2 = _captures(cap1), _captures(cap2)
    assert sorted(pcaps1) == sorted(pcaps2) == ["a", "b"]
    for host in pcaps1:
        assert pcaps1[host] == pcaps2[host], f"host {host}: the captures differ"
    assert acc1 == acc2


def test_accept_returns_soon_after_the_connections_last_cm_mad(
        poller_runs: list[tuple[Path, float]]) -> None:
    """While the server waits in accept(), the client polls its CQ: its empty polls do not
    move simulated time past the server's wake-ups."""
    cap, accepted = poller_runs[0]
    mads = _mads(cap)
    assert [attr for _t, attr in mads][:3] == ["REQ", "REP", "RTU"], mads
    rtu = mads[2][0]
    assert rtu < accepted <= rtu + ACCEPT_AFTER_RTU_NS, (rtu, accepted)


def test_the_cm_example_gives_the_same_pcaps_every_run(tmp_path: Path) -> None:
    """examples/pyverbs/rdma_cm_client_server.py, unmodified, twice: the same captures."""
    prog = ROOT / "examples" / "pyverbs" / "rdma_cm_client_server.py"
    runs = []
    for i in range(2):
        _exec(prog, tmp_path / f"run{i}")
        runs.append(_captures(tmp_path / f"run{i}"))
    assert sorted(runs[0]) == ["a", "b"] and runs[0] == runs[1]


# -- the scheduler in-process ---------------------------------------------------------------


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    with attached_world(WorldSpec(hosts=2, mem_mib=128)) as w:
        yield w


def _cm_pair(w: World, port: str) -> list[float]:
    """A passive child that accepts and receives, an active child that connects and sends
    while the main thread polls nothing: the simulated times the sides reach their steps."""
    cip, sip = host_ips(w)
    ctx = ThreadContext()
    bar = ctx.Barrier(2, timeout=5)
    init = QPInitAttr(qp_type=e.IBV_QPT_RC, cap=QPCap(max_recv_wr=2))
    times: list[float] = []

    def passive() -> None:
        ep = CMID(AddrInfo(src=sip, src_service=port, flags=RAI_PASSIVE), qp_init_attr=init)
        ep.listen()
        bar.wait()
        conn = ep.get_request()
        mr = conn.reg_msgs(32)
        conn.post_recv(mr)
        conn.accept()
        times.append(w.env.now)
        assert conn.get_recv_comp().byte_len == 32
        times.append(w.env.now)
        conn.disconnect()

    def active() -> None:
        ep = CMID(AddrInfo(src=cip, dst=sip, dst_service=port), qp_init_attr=init)
        bar.wait()
        times.append(w.env.now)
        ep.connect()
        mr = ep.reg_msgs(32)
        ep.post_send(mr)
        assert ep.get_send_comp().status == e.IBV_WC_SUCCESS
        times.append(w.env.now)

    ps = [ctx.Process(target=passive), ctx.Process(target=active)]
    for p in ps:
        p.start()
    for p in ps:
        p.join(10)
    assert [p.exitcode for p in ps] == [0, 0]
    assert sched.scheduler() is None  # back to a sequential program
    return times


def test_threaded_cm_timing_repeats_in_process(tmp_path: Path) -> None:
    runs = []
    for _ in range(2):
        w = build(WorldSpec(hosts=2, mem_mib=128))
        attach(Process(devices(w)))
        try:
            runs.append(_cm_pair(w, "9100"))
        finally:
            attach(None)
    assert runs[0] == runs[1]
    assert all(h.cpu is None for h in w.hosts.values())


def test_a_side_released_by_a_barrier_acts_before_time_passes(world: World) -> None:
    """The side that reaches the barrier last spends CPU time and polls an empty CQ right
    after: the side it released runs at the time of its release."""
    ctx = ThreadContext()
    bar = ctx.Barrier(2)
    seen: dict[str, float] = {}
    host = world.hosts["a"]

    def first() -> None:
        bar.wait()
        seen["first"] = world.env.now

    def last() -> None:
        host.spend(5000.0)
        seen["arrived"] = world.env.now
        bar.wait()
        host.poll_wait(20.0, 0, 0, 50_000.0)  # an empty poll: 50 us with nothing written
        seen["polled"] = world.env.now

    ps = [ctx.Process(target=first), ctx.Process(target=last)]
    for p in ps:
        p.start()
    for p in ps:
        p.join()
    assert seen["first"] == seen["arrived"]
    assert seen["polled"] == seen["arrived"] + 50_000.0


def test_an_empty_poll_does_not_run_past_another_sides_wake_up(world: World) -> None:
    """Two sides poll empty memory with different caps: each wakes at its own time, the
    world's clock never passes the earlier one's."""
    ctx = ThreadContext()
    host = world.hosts["a"]
    woke: list[tuple[str, float]] = []

    def poller(name: str, cap: float, n: int) -> None:
        for _ in range(n):
            host.poll_wait(20.0, 0, 0, cap)
            woke.append((name, world.env.now))

    t0 = world.env.now
    ps = [ctx.Process(target=poller, args=("slow", 100_000.0, 2)),
          ctx.Process(target=poller, args=("fast", 30_000.0, 5))]
    for p in ps:
        p.start()
    for p in ps:
        p.join()
    assert [(n, t - t0) for n, t in woke] == [
        ("fast", 30_000.0), ("fast", 60_000.0), ("fast", 90_000.0), ("slow", 100_000.0),
        ("fast", 120_000.0), ("fast", 150_000.0), ("slow", 200_000.0)]


def test_waits_no_side_can_end_end_at_once() -> None:
    """A barrier no other side reaches breaks, a get from a queue nobody fills raises Empty,
    an event nobody sets is not set: at once, in no wall-clock time, not after a timeout."""
    ctx = ThreadContext()
    bar, q, ev = ctx.Barrier(3), ctx.Queue(), ctx.Event()
    got: list[object] = []

    def side() -> None:
        try:
            bar.wait()
        except threading.BrokenBarrierError:
            got.append("broken")
        try:
            q.get()
        except queue.Empty:
            got.append("empty")
        got.append(ev.wait())

    p = ctx.Process(target=side)
    p.start()
    p.join()
    assert p.exitcode == 0 and got == ["broken", "empty", False]
    assert sched.scheduler() is None


def test_terminate_stops_a_side_that_waits(world: World) -> None:
    ctx = ThreadContext()
    host = world.hosts["a"]

    def forever() -> None:
        while True:
            host.poll_wait(20.0, 0, 0, 100_000.0)

    t0 = world.env.now
    p = ctx.Process(target=forever)
    p.start()
    p.join(0.001)  # 1 ms of simulated time
    assert p.is_alive()
    assert world.env.now == t0 + 1e6
    p.terminate()
    p.join()
    assert p.exitcode == -15 and not p.is_alive()
