"""Named stage events of a NIC, for whoever observes it (`--breakdown`, a user's probe).

A block holds `tracer = None` and, at each stage it owns, does
`if self.tracer is not None: self.tracer.emit(Stage.X, ...)`: a run that observes nothing
pays one attribute test per stage, and observers never wrap or replace a block's methods.
One Tracer observes one NIC (`Nic.observe`; observers of one NIC share its tracer); the
arguments of each stage are listed beside it. Frames on a cable are observed by the link's
taps (nicsim.fabric.link), as the pcap is; the
host program's posts and polls by the provider's `on_post` and `on_cqe` slots
(nicsim.driver.rings), since the driver knows nothing of the model.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import Any


class Stage(StrEnum):
    DOORBELL = "doorbell"  # (qpn, sq_pi): an SQ doorbell (or BlueFlame write) reached the NIC
    WQE_FETCHED = "wqe_fetched"  # (qpn, wqe_index, t): the WQE was in the NIC at t
    TRANSLATED = "translated"  # (qpn, wqe_index, t, first_psn, last_psn, dest_qpn): started,
    #   buffer translated at t, its packets numbered, to the QP dest_qpn (UD: the WQE's)
    FRAME_IN = "frame_in"  # (frame,): a frame reached the NIC (bytes, or an Unbuilt packet)
    PLACED = "placed"  # (dest_qpn, psn, t): the responder finished the packet `psn` of the
    #   requester's QP `dest_qpn`; its payload's last write lands at t
    CQE_WRITTEN = "cqe_written"  # (cqn, qpn, wqe_index, opcode, status, t): lands at t
    QP_STATE = "qp_state"  # (qpn, old, new): a QP changed state (names of nicsim.hwif.QpState)
    COMMAND_DONE = "command_done"  # (status,): a mailbox command finished (its status name)
    RX_VIOLATION = "rx_violation"  # (rule, qpn, expected, actual): the receive path refused
    #   or ignored the packet of the last FRAME_IN because its sender broke `rule`
    #   (nicsim.nic.violations.Rule) for the NIC's QP `qpn` (the BTH's DestQP if there is no
    #   such QP, -1 if the frame did not parse that far); `expected` and `actual` are text


class Tracer:
    """Subscribers per stage; `emit` calls them in the order they subscribed."""

    __slots__ = ("_subscribers",)

    def __init__(self) -> None:
        self._subscribers: dict[Stage, list[Callable[..., None]]] = {}

    def subscribe(self, stage: Stage, fn: Callable[..., None]) -> None:
        self._subscribers.setdefault(stage, []).append(fn)

    def emit(self, stage: Stage, *args: Any) -> None:
        for fn in self._subscribers.get(stage, ()):
            fn(*args)


class Recorder:
    """Every event of the stages asked for (all if none), with its time: a trace to read."""

    def __init__(self, tracer: Tracer, now: Callable[[], float],
                 stages: tuple[Stage, ...] = tuple(Stage)) -> None:
        self.events: list[tuple[float, Stage, tuple[Any, ...]]] = []
        for s in stages:
            tracer.subscribe(s, lambda *a, s=s: self.events.append((now(), s, a)))
