"""The headers of this NIC's frames: each QP's path (MAC and IP addresses, UDP source port,
DSCP, ECN, hop limit), as a template that builds its packets (nicsim.wire.FrameBuilder)."""

from __future__ import annotations

import ipaddress

from nicsim.nic.qp import QpCtx
from nicsim.wire import Ecn, FrameBuilder, Path, roce_udp_sport


def gid_to_ip(gid: bytes) -> bytes:
    """The IP address a RoCEv2 GID stands for: IPv4-mapped GIDs give 4 bytes."""
    if gid[:12] == b"\0" * 10 + b"\xff\xff":
        return gid[12:]
    return gid


class Framing:
    def __init__(self, mac: bytes, ip: ipaddress.IPv4Address | ipaddress.IPv6Address,
                 ecn_capable: bool) -> None:
        self.mac = mac
        self.ip = ip
        self.ecn = Ecn.ECT0 if ecn_capable else Ecn.NOT_ECT

    def builder_for(self, qp: QpCtx, dscp: int | None = None) -> FrameBuilder:
        """Frames of `qp`'s path; `dscp` overrides the QP's traffic class (CNPs)."""
        tc = qp.traffic_class
        if dscp is None:
            dscp = (tc & 0xFF) >> 2
        sip = self.ip.packed
        dip = gid_to_ip(qp.dgid)
        if len(dip) != len(sip):
            dip = ipaddress.IPv6Address(bytes(10) + b"\xff\xff" + dip).packed \
                if len(dip) == 4 else dip
            sip = ipaddress.IPv6Address(bytes(10) + b"\xff\xff" + sip).packed \
                if len(sip) == 4 else sip
        return FrameBuilder(Path(self.mac, qp.dmac, sip, dip,
                                 roce_udp_sport(qp.qpn, qp.dest_qpn), dscp, self.ecn,
                                 (tc >> 8) or 64))
