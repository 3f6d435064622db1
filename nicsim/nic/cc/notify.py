"""DCQCN's notification point: CNPs for CE-marked requests (RoCEv2 Annex A17.9.3).

When a request packet arrives with IP ECN = CE for a connected QP, the NIC sends a CNP to the
QP's peer (the sender's QP number in BTH.DestQP), at most one per QP per `interval_us`, after
the generation delay. The CNP is laid out as a ConnectX sends it: BTH opcode 0x81, BECN set,
PSN 0, the P_Key of the QP, 16 reserved zero bytes, the ICRC; IP DSCP `cnp.dscp` (48 by
default, a high class so that CNPs do not wait behind the congested data), ECT(0), and the
QP's own UDP source port.
"""

from __future__ import annotations

from collections.abc import Callable

import simpy

from nicsim.nic.cc.config import CnpConfig
from nicsim.nic.counters import new_counters
from nicsim.nic.qp import QpCtx
from nicsim.wire import CNP_PAD, FrameBuilder
from nicsim.wire.opcodes import Opcode


class NotificationPoint:
    def __init__(self, env: simpy.Environment, cfg: CnpConfig,
                 builder: Callable[[QpCtx, int], FrameBuilder],
                 send: Callable[[bytes, float], float]) -> None:
        self.env = env
        self.cfg = cfg
        self.interval_ns = cfg.interval_us * 1000.0
        self.builder = builder
        self.send = send
        self.counters = new_counters("ce_marked", "cnp_sent", "cnp_suppressed")
        # Per QP number: the QP's own frame builder when the CNP builder was made, and the
        # CNP builder. A modify that changes the path (AV, destination QP) or a reset gives
        # the QP a new builder (nicsim.nic.command), so the CNP builder follows it; the
        # entry holds the old builder, so `is` cannot match a new object at its address.
        self._builders: dict[int, tuple[FrameBuilder | None, FrameBuilder]] = {}

    def marked(self, qp: QpCtx) -> None:
        """A CE-marked request for `qp` was accepted by the receive path."""
        c = self.counters
        c["ce_marked"] += 1
        if not self.cfg.enabled:
            return
        now = self.env.now
        if now - qp.cnp_at < self.interval_ns:
            c["cnp_suppressed"] += 1
            return
        qp.cnp_at = now
        cached = self._builders.get(qp.qpn)
        if cached is not None and cached[0] is qp.builder and qp.builder is not None:
            b = cached[1]
        else:
            b = self.builder(qp, self.cfg.dscp)
            self._builders[qp.qpn] = (qp.builder, b)
        frame = b.build(Opcode.CNP, qp.dest_qpn, 0, CNP_PAD, becn=True, migreq=False,
                        pkey=qp.pkey)
        c["cnp_sent"] += 1
        self.send(frame, now + self.cfg.delay_ns)
