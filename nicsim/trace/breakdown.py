"""Where a work request's time goes: a time stamp per stage of every WR, from the post to
the poll that returns its completion.

Stages of a WR posted on host a towards host b (the requester's QP and WQE index name it):

    post          the application calls ibv_post_send (the host program stamps it)
    doorbell      the doorbell's MMIO write reaches the NIC
    wqe_fetched   the WQE is in the NIC (its DMA read, or its BlueFlame write, decoded)
    translated    its local buffer is translated (lkey -> MPT -> MTT); inline WQEs skip it
    first_out     the first bit of its first packet leaves host a's port
    last_out      the last bit of its last packet leaves host a's port
    arrived       that last bit reaches host b's port
    placed        its last payload write lands in host b's memory (WRITE, SEND)
    ack_sent      the first bit of the ACK (or response) covering it leaves host b
    ack_received  that ACK's last bit reaches host a
    cqe_written   its CQE lands in host a's memory (signalled WRs)
    polled        the application's poll returns that CQE

A breakdown listens to the two NICs' stage events (nicsim.sim.tracer), taps the cable at
each end and sets the provider's post and poll hooks; it changes nothing the model does. The
stamps are the model's own times: when each WQE is in the NIC (its prefetch read or BlueFlame
write decoded), the time its buffer is translated, the link's start-of-frame times, the
responder's last write landing, the CQE write's landing time.
"""

from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np

from nicsim.hwif import WQE_INDEX_MASK, CqeOpcode
from nicsim.sim.tracer import Stage as EventStage
from nicsim.wire.packet import ETH_MIN_FRAME


class Stage(StrEnum):
    POST = "post"
    DOORBELL = "doorbell"
    WQE_FETCHED = "wqe_fetched"
    TRANSLATED = "translated"
    FIRST_OUT = "first_out"
    LAST_OUT = "last_out"
    ARRIVED = "arrived"
    PLACED = "placed"
    ACK_SENT = "ack_sent"
    ACK_RECEIVED = "ack_received"
    CQE_WRITTEN = "cqe_written"
    POLLED = "polled"


STAGES = list(Stage)
_BTH = 14 + 20 + 8  # Ethernet, IPv4, UDP: where the BTH starts in a RoCEv2 frame
_SOF_EXTRA = 8 + 12  # preamble+SFD and the inter-frame gap around a frame on the wire
_ACK, _READ_RESP_LAST, _READ_RESP_ONLY, _ATOMIC_ACK = 0x11, 0x0F, 0x10, 0x12
_RESP_FIRST = 0x0D  # RC RDMA READ response first (IBA 9.2, table 35)
_READ_REQ = 0x0C  # RC RDMA READ request: one packet however many responses it asks for


@dataclass
class Wr:
    qpn: int
    index: int
    t: dict[Stage, float] = field(default_factory=dict)
    first_psn: int | None = None
    last_psn: int | None = None


class _Tap:
    """A link tap for one direction: the frames one end sends, with their start times."""

    def __init__(self, fn: Any) -> None:
        self.write = fn


class Breakdown:
    """Stamps for every WR between the NICs of hosts `a` (requester) and `b` of a world, from
    the stage events of the two NICs (nicsim.sim.tracer), the cable's taps and the provider's
    hooks (watch_qp, watch_cq)."""

    def __init__(self, world: Any, a: str = "a", b: str = "b") -> None:
        self.w = world
        self.env = world.env
        self.na, self.nb = world.nics[a], world.nics[b]
        self.wrs: dict[tuple[int, int], Wr] = {}
        self.done: list[Wr] = []  # WRs whose WQE index has come round again
        self._by_psn: dict[int, deque[Wr]] = defaultdict(deque)  # requester qpn -> unacked
        self._rung: dict[int, int] = {}  # requester qpn -> WQEs the doorbells announced
        link, end_a = world.ports[f"{a}.eth0"]
        self._ns_per_byte = 8 / link.cfg.rate_gbps
        self._prop = link.cfg.prop_ns
        link.end_taps[end_a].append(_Tap(self._from_a))
        link.end_taps[1 - end_a].append(_Tap(self._from_b))
        ta, tb = self.na.watch(), self.nb.watch()
        ta.subscribe(EventStage.DOORBELL, self._doorbell)
        ta.subscribe(EventStage.WQE_FETCHED, self._fetched)
        ta.subscribe(EventStage.TRANSLATED, self._started)
        ta.subscribe(EventStage.CQE_WRITTEN, self._cqe)
        tb.subscribe(EventStage.PLACED, self._placed)

    # -- the host program's stamps ------------------------------------------------------------

    def watch_qp(self, pq: Any) -> None:
        """Stamp the post of every send WR on this provider QP (nicsim.driver.rings): the
        time the application calls ibv_post_send, before its CPU cost."""
        pq.on_post = self._post

    def watch_cq(self, pcq: Any) -> None:
        """Stamp the poll that returns each send completion of this provider CQ."""
        pcq.on_cqe = self._polled

    def _post(self, qpn: int, index: int) -> None:
        key = (qpn, index & WQE_INDEX_MASK)
        old = self.wrs.pop(key, None)
        if old is not None:
            self.done.append(old)  # the WQE index came round again
        self._wr(*key).t[Stage.POST] = self.env.now

    def _polled(self, c: Any) -> None:
        if c.opcode < CqeOpcode.RECV:  # a send-side completion
            wr = self.wrs.get((c.qpn, c.wqe_index & WQE_INDEX_MASK))
            if wr is not None:
                wr.t[Stage.POLLED] = self.env.now

    # -- the NICs' stamps -----------------------------------------------------------------------

    def _wr(self, qpn: int, index: int) -> Wr:
        key = (qpn, index & WQE_INDEX_MASK)
        wr = self.wrs.get(key)
        if wr is None:
            wr = self.wrs[key] = Wr(qpn, index & WQE_INDEX_MASK)
        return wr

    def _doorbell(self, qpn: int, head: int) -> None:
        i = self._rung.get(qpn, 0)
        while i != head:
            self._wr(qpn, i).t.setdefault(Stage.DOORBELL, self.env.now)
            i = (i + 1) & WQE_INDEX_MASK
        self._rung[qpn] = head

    def _fetched(self, qpn: int, index: int, t: float) -> None:
        # When the WQE was in the NIC: its prefetch read done and decoded, or its BlueFlame
        # write decoded (nicsim.nic.wqe_fetch).
        self._wr(qpn, index).t[Stage.WQE_FETCHED] = t

    def _started(self, qpn: int, index: int, t: float, first_psn: int, last_psn: int,
                 _dest_qpn: int) -> None:
        wr = self._wr(qpn, index)
        wr.first_psn, wr.last_psn = first_psn, last_psn
        wr.t[Stage.TRANSLATED] = t
        self._by_psn[qpn].append(wr)

    def _cqe(self, cqn: int, qpn: int, wqe_index: int, opcode: int, status: int,
             t: float) -> None:
        key = (qpn, wqe_index & WQE_INDEX_MASK)
        if opcode < CqeOpcode.RECV and key in self.wrs:
            self.wrs[key].t[Stage.CQE_WRITTEN] = t

    def _placed(self, dest_qpn: int, psn: int, t: float) -> None:
        for wr in self._by_psn.get(dest_qpn, ()):
            if wr.last_psn == psn:
                wr.t[Stage.PLACED] = t
                break

    def _times(self, frame: bytes, sof: float) -> tuple[float, float]:
        n = len(frame)
        wire = (max(n, ETH_MIN_FRAME) + _SOF_EXTRA) * self._ns_per_byte
        return sof + wire, sof + wire + self._prop

    def _from_a(self, frame: bytes, sof: float) -> None:
        """A request packet: which WR's first or last packet is it?"""
        if len(frame) < _BTH + 12 or _RESP_FIRST <= frame[_BTH] <= _ATOMIC_ACK:
            return  # (not a request: host a acknowledging or answering host b)
        dqpn = int.from_bytes(frame[_BTH + 5:_BTH + 8], "big")
        psn = int.from_bytes(frame[_BTH + 9:_BTH + 12], "big") & 0xFFFFFF
        peer = self.nb.qps.get(dqpn)
        if peer is None:
            return
        out, arrive = self._times(frame, sof)
        for wr in self._by_psn.get(peer.dest_qpn, ()):
            if wr.first_psn == psn:
                wr.t.setdefault(Stage.FIRST_OUT, sof)
            if wr.last_psn == psn or wr.first_psn == psn and frame[_BTH] == _READ_REQ:
                wr.t.setdefault(Stage.LAST_OUT, out)
                wr.t.setdefault(Stage.ARRIVED, arrive)
                break

    def _from_b(self, frame: bytes, sof: float) -> None:
        """An ACK or response: every WR it covers is acknowledged."""
        if len(frame) < _BTH + 12:
            return
        op = frame[_BTH]
        dqpn = int.from_bytes(frame[_BTH + 5:_BTH + 8], "big")
        psn = int.from_bytes(frame[_BTH + 9:_BTH + 12], "big") & 0xFFFFFF
        q = self._by_psn.get(dqpn)
        if not q:
            return
        _, arrive = self._times(frame, sof)
        if op == _RESP_FIRST:
            for wr in q:
                if wr.first_psn == psn:
                    wr.t.setdefault(Stage.ACK_SENT, sof)
            return
        if op not in (_ACK, _READ_RESP_LAST, _READ_RESP_ONLY, _ATOMIC_ACK):
            return
        if op == _ACK and frame[_BTH + 12] >> 5 != 0:
            return  # a NAK (or RNR NAK): nothing acknowledged by it
        while q and q[0].last_psn is not None and ((psn - q[0].last_psn) & 0xFFFFFF) < 1 << 23:
            wr = q.popleft()
            wr.t.setdefault(Stage.ACK_SENT, sof)
            wr.t[Stage.ACK_RECEIVED] = arrive

    # -- the result -----------------------------------------------------------------------------

    def complete(self) -> list[Wr]:
        """The WRs stamped from their post on."""
        return [w for w in (*self.done, *self.wrs.values()) if Stage.POST in w.t]

    def summary(self) -> dict[str, Any]:
        """Mean and p99 per stage, in ns: since the post and since the stage before it."""
        wrs = self.complete()
        out: dict[str, Any] = {"wrs": len(wrs), "stages": []}
        for s in STAGES:
            since = [w.t[s] - w.t[Stage.POST] for w in wrs if s in w.t]
            step = [w.t[s] - _before(w, s) for w in wrs if s in w.t]
            if not since:
                continue
            out["stages"].append({
                "stage": s.value, "wrs": len(since),
                "since_post_mean_ns": float(np.mean(since)),
                "since_post_p99_ns": float(np.percentile(since, 99)),
                "step_mean_ns": float(np.mean(step)), "step_p99_ns": float(np.percentile(step, 99)),
            })
        return out

    def typical(self) -> Wr | None:
        """The WR with every stage it can have whose post-to-last-stage time is the median."""
        wrs = [w for w in self.complete() if len(w.t) >= 8]
        if not wrs:
            return None
        full = max(len(w.t) for w in wrs)
        wrs = [w for w in wrs if len(w.t) == full]
        wrs.sort(key=lambda w: max(w.t.values()) - w.t[Stage.POST])
        return wrs[len(wrs) // 2]


# What each stage waits for. The responder's ACK does not wait for the payload to land: it
# leaves once the write is posted to PCIe, which orders it (so `placed` can come after
# `ack_sent`), and the completer's CQE follows the ACK.
CAUSE: dict[Stage, Stage] = {
    Stage.DOORBELL: Stage.POST, Stage.WQE_FETCHED: Stage.DOORBELL,
    Stage.TRANSLATED: Stage.WQE_FETCHED, Stage.FIRST_OUT: Stage.TRANSLATED,
    Stage.LAST_OUT: Stage.FIRST_OUT, Stage.ARRIVED: Stage.LAST_OUT,
    Stage.PLACED: Stage.ARRIVED, Stage.ACK_SENT: Stage.ARRIVED,
    Stage.ACK_RECEIVED: Stage.ACK_SENT, Stage.CQE_WRITTEN: Stage.ACK_RECEIVED,
    Stage.POLLED: Stage.CQE_WRITTEN,
}


def _before(w: Wr, s: Stage) -> float:
    """The time of the stage `s` waits for (CAUSE), or of the nearest one before that this
    WR has; its own time for the post."""
    prev = CAUSE.get(s)
    while prev is not None:
        if prev in w.t:
            return w.t[prev]
        prev = CAUSE.get(prev)
    return w.t[s]


def text(summary: dict[str, Any]) -> list[str]:
    lines = [f" Breakdown of {summary['wrs']} WRs (ns; 'step' is from the stage it waits "
             f"for: placed and ack_sent both follow arrived)",
             f" {'stage':<14}{'WRs':>7}{'since post':>13}{'p99':>10}{'step':>10}{'p99':>10}"]
    for s in summary["stages"]:
        lines.append(f" {s['stage']:<14}{s['wrs']:>7}{s['since_post_mean_ns']:>13.1f}"
                     f"{s['since_post_p99_ns']:>10.1f}{s['step_mean_ns']:>10.1f}"
                     f"{s['step_p99_ns']:>10.1f}")
    return lines


def waterfall(wr: Wr, path: str, title: str) -> None:
    """One WR's stages as a waterfall: a bar per stage from the stage before it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t0 = wr.t[Stage.POST]
    stages = [s for s in STAGES if s in wr.t]
    fig, ax = plt.subplots(figsize=(8, 0.42 * len(stages) + 1.2), dpi=120)
    for y, s in enumerate(stages):
        start = _before(wr, s) - t0
        end = wr.t[s] - t0
        ax.barh(y, max(end - start, 0.5), left=start, color="tab:blue" if y % 2 else "tab:cyan")
        ax.text(end + 5, y, f"{end:.0f} ns", va="center", fontsize=8)
    ax.set_yticks(range(len(stages)), [s.value for s in stages])
    ax.invert_yaxis()
    ax.set_xlabel("ns since ibv_post_send")
    ax.set_title(title, fontsize=10)
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


__all__ = ["STAGES", "Breakdown", "Stage", "Wr", "text", "waterfall"]
