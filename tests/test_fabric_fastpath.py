"""The fabric's fast paths give what the general paths give: the same frames at the same
times, the same counters (docs/explanation/fast-paths.md).

- A switch's ingress takes a direct entry per frame from its links (nicsim.fabric.link,
  `attach(direct=True)`); the general path keeps frames in the link's own queue and delivers
  them from its entries. Both must deliver each frame at its place in the event order.
- Timers without a Timeout object (nicsim.sim's entries: the NIC's queued port, pacing holds,
  switch transmitters, DCQCN's increase timers) must fire where the Timeout they stand for
  would have fired, also when they wait in a queue per QP with one entry in the kernel's
  (the entries themselves: tests/test_sim_kernel.py).
"""

from __future__ import annotations

import hashlib

from nicsim.fabric.switch import PfcConfig, SwitchConfig
from nicsim.fabric.topology import Shape, TopologySpec
from nicsim.nic.cc import cc_from_dict
from nicsim.nic.cc.dcqcn import Dcqcn, DcqcnState
from nicsim.nic.config import NicConfig
from nicsim.nic.qp import QpCtx
from nicsim.nic.scheduler import SendEngine
from nicsim.testing.switch_world import World as Tiny
from nicsim.testing.switch_world import small_cfg, write
from nicsim.workloads.bulk import incast, run_streams
from nicsim.world import World


class Digest:
    """Everything a run shows: frames (bytes and the exact time) each NIC received, every
    counter of every switch and NIC, the final time."""

    def __init__(self, w: World) -> None:
        self.w = w
        self.rx = hashlib.sha256()
        hosts = set(w.nics)
        for name, (link, end) in w.ports.items():
            if name.split(".")[0] in hosts:
                recv = link.ends[end]
                link.ends[end] = self._recorder(name, recv)

    def _recorder(self, name: str, recv):  # noqa: ANN001, ANN202
        env = self.w.env

        def record(frame: bytes) -> None:
            self.rx.update(f"{name} {env.now!r} ".encode() + frame)
            recv(frame)

        return record

    def result(self) -> tuple:
        w = self.w
        return (self.rx.hexdigest(), w.env.now,
                {n: s.counters() for n, s in w.switches.items()},
                {n: nic.counters() for n, nic in w.nics.items()})


def general_links(w: World) -> None:
    """Make every link deliver through its own queue (the general path)."""
    for link in w.links:
        link.general_path()


def leaf_spine(general: bool) -> tuple:
    spec = TopologySpec(Shape.LEAF_SPINE, leaves=2, spines=2, hosts_per_leaf=3)
    w = World.from_topology(spec, nic=NicConfig(cc=cc_from_dict("dcqcn_mlx")))
    if general:
        general_links(w)
    d = Digest(w)
    pairs = [(f"h{i}", f"h{(i + 3) % 6}") for i in range(6)]
    r = run_streams(w, pairs, msgs=6, bin_ns=20_000, dscp=26)
    assert r.ok, r.errors
    return d.result() + (r.times, r.sent, r.goodput, r.queue)


def pfc_incast(general: bool) -> tuple:
    """8:1 without congestion control on a small buffer: the senders are paused, frames of
    one size at one rate, so many things happen at the same instant."""
    w = World.from_topology(TopologySpec(Shape.STAR, hosts=9),
                            switch=SwitchConfig(buffer_bytes=1 << 20, pfc=PfcConfig()))
    if general:
        general_links(w)
    d = Digest(w)
    r = incast(w, [f"h{i}" for i in range(1, 9)], "h0", msgs=6, dscp=26)
    assert r.ok, r.errors
    assert r.counters["sw0.p1.pause_sent"] > 0
    return d.result() + (r.times, r.sent, r.queue)


def test_direct_switch_entries_give_what_the_link_queue_gives():
    assert leaf_spine(general=False) == leaf_spine(general=True)


def test_direct_entries_keep_the_order_of_simultaneous_events():
    assert pfc_incast(general=False) == pfc_incast(general=True)


def tie(general: bool) -> tuple[dict[str, int], list[tuple[float, bytes]]]:
    """Frame A (host 1 -> host 0) becomes ready to leave the switch at the instant frame B
    (host 2 -> host 0, on a longer cable) arrives. B was carried (its place in the event
    order taken) before A's arrival set the transmitter's timer, so B is enqueued first and
    finds A still queued; the other way round it would find the queue empty."""
    w = Tiny(small_cfg(fwd_latency_ns=500.0), [100.0] * 3, prop_ns=[100.0, 100.0, 600.0])
    if general:
        for link in w.links:
            link.general_path()
    a, b = write(w.builder(1, 0), 998), write(w.builder(2, 0, sport=0xC001), 998)
    w.hosts[1].send(a)
    w.hosts[2].send(b)
    w.env.run()
    last_bit = (998 + 12) * 8 / 100.0
    assert len(w.hosts[0].rx) == 2
    assert (0 + last_bit) + 100.0 + 500.0 == (0 + last_bit) + 600.0  # a tie
    return w.sw.counters(), w.hosts[0].rx


def test_a_direct_entry_keeps_its_place_among_events_at_the_same_instant():
    c, rx = tie(general=False)
    assert (c, rx) == tie(general=True)
    assert c["p0.q3.max_depth_bytes"] == 2 * 998  # B found A queued


def test_a_tap_takes_the_general_path_and_changes_nothing():
    class Count:
        n = 0

        def write(self, frame: bytes, t_ns: int) -> None:
            self.n += 1

    spec = TopologySpec(Shape.LEAF_SPINE, leaves=2, spines=2, hosts_per_leaf=3)
    w = World.from_topology(spec, nic=NicConfig(cc=cc_from_dict("dcqcn_mlx")))
    taps = []
    for link in w.links:  # every frame toward a switch, and every one toward a host
        for end in (0, 1):
            taps.append(Count())
            link.end_taps[end].append(taps[-1])
    d = Digest(w)
    pairs = [(f"h{i}", f"h{(i + 3) % 6}") for i in range(6)]
    r = run_streams(w, pairs, msgs=6, bin_ns=20_000, dscp=26)
    for link in w.links:
        link.flush_taps()
    tapped = d.result() + (r.times, r.sent, r.goodput, r.queue)
    assert tapped == leaf_spine(general=False)
    sent = sum(v for s in w.switches.values() for k, v in s.counters().items()
               if k.endswith(".tx_frames")) + \
        sum(n.port.counters["tx_frames"] for n in w.nics.values())
    assert sum(t.n for t in taps) == sent


def reference_timers(monkeypatch, voided: list[int]) -> None:  # noqa: ANN001
    """DCQCN's increase timers and the send engine's pacing holds as one Timeout each, the
    obvious way; counts the timers that fire voided (restarted or re-held since)."""

    def arm(self: Dcqcn, qp: QpCtx, s: DcqcnState) -> None:
        gen = s.gen
        self.env.timeout(self.t_ns).callbacks.append(lambda _e: fire(self, qp, s, gen))

    def fire(self: Dcqcn, qp: QpCtx, s: DcqcnState, gen: int) -> None:
        if qp.ccs is not s or s.gen != gen:
            voided[0] += 1
        self._timer(qp, s, gen)

    def hold(self: SendEngine, qp: QpCtx) -> None:
        qp.held = True
        qp.pace_gen += 1
        gen = qp.pace_gen
        self.env.timeout(qp.next_tx - self.env.now).callbacks.append(
            lambda _e: unhold(self, qp, gen))

    def unhold(self: SendEngine, qp: QpCtx, gen: int) -> None:
        if qp.pace_gen == gen and qp.held:
            qp.held = False
            self.kick(qp)
        else:
            voided[1] += 1

    monkeypatch.setattr(Dcqcn, "_arm_timer", arm)
    monkeypatch.setattr(SendEngine, "hold", hold)


def congested_leaf_spine() -> tuple:
    """Six streams on a 2:1 oversubscribed leaf-spine (one spine) with DCQCN: rates are cut
    and raised all the time, so timers are restarted and holds renewed."""
    spec = TopologySpec(Shape.LEAF_SPINE, leaves=2, spines=1, hosts_per_leaf=3)
    w = World.from_topology(spec, nic=NicConfig(cc=cc_from_dict("dcqcn_mlx")))
    d = Digest(w)
    pairs = [(f"h{i}", f"h{(i + 3) % 6}") for i in range(6)]
    r = run_streams(w, pairs, msgs=8, bin_ns=20_000, dscp=26)
    assert r.ok, r.errors
    return d.result() + (r.times, r.sent, r.goodput, r.queue)


def test_timer_queues_per_qp_fire_where_timeouts_would(monkeypatch):  # noqa: ANN001
    """DCQCN's increase timers and pacing holds keep one entry per QP in SimPy's queue (the
    others wait in the QP's own queue, each with the key its Timeout would have): the same
    run as with a Timeout per timer, in a fabric where many of them are voided."""
    fast = congested_leaf_spine()
    voided = [0, 0]
    reference_timers(monkeypatch, voided)
    assert congested_leaf_spine() == fast
    assert voided[0] > 0 and voided[1] > 0
