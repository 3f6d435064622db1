"""The headers of this NIC's frames: each QP's path (MAC and IP addresses or GIDs, RoCE
version, UDP source port, DSCP, ECN, hop limit), as a template that builds its packets
(nicsim.wire.FrameBuilder), and the port's GID table the paths' sources come from."""

from __future__ import annotations

import ipaddress

from nicsim.hwif import GidType, gid_table
from nicsim.nic.qp import QpCtx
from nicsim.wire import Ecn, FrameBuilder, Path, roce_udp_sport

_MAPPED = bytes(10) + b"\xff\xff"  # the prefix of an IPv4-mapped GID


def gid_to_ip(gid: bytes) -> bytes:
    """The IP address a RoCEv2 GID stands for: IPv4-mapped GIDs give 4 bytes."""
    if gid[:12] == _MAPPED:
        return gid[12:]
    return gid


class Framing:
    def __init__(self, mac: bytes, ip: ipaddress.IPv4Address | ipaddress.IPv6Address,
                 ecn_capable: bool, roce_v1: bool = True) -> None:
        self.mac = mac
        self.ip = ip
        self.ecn = Ecn.ECT0 if ecn_capable else Ecn.NOT_ECT
        # The port's GID table (hwif.gid_table: the driver derives the same from the netdev).
        self.gids = gid_table(mac, ip.packed, roce_v1)

    def addresses(self, sgid_index: int, dgid: bytes) -> tuple[bytes, bytes, bool] | None:
        """The source and destination addresses of frames from GID table entry
        `sgid_index` to `dgid`, and whether they are RoCE v1 (GIDs in a GRH); None for an
        index outside the table. RoCE v2 carries IP addresses: IPv4 when both GIDs are
        IPv4-mapped, otherwise both as IPv6."""
        if not 0 <= sgid_index < len(self.gids):
            return None
        sgid, kind = self.gids[sgid_index]
        if kind is GidType.ROCE_V1:
            return sgid, dgid, True
        sip, dip = gid_to_ip(sgid), gid_to_ip(dgid)
        if len(sip) != len(dip):
            sip, dip = (x if len(x) == 16 else _MAPPED + x for x in (sip, dip))
        return sip, dip, False

    def builder_for(self, qp: QpCtx, dscp: int | None = None) -> FrameBuilder:
        """Frames of `qp`'s path; `dscp` overrides the QP's traffic class (CNPs)."""
        tc = qp.traffic_class
        if dscp is None:
            dscp = (tc & 0xFF) >> 2
        addrs = self.addresses(qp.sgid_index, qp.dgid)
        assert addrs is not None  # (MODIFY_QP refuses an index outside the table)
        sip, dip, v1 = addrs
        return FrameBuilder(Path(self.mac, qp.dmac, sip, dip,
                                 roce_udp_sport(qp.qpn, qp.dest_qpn), dscp, self.ecn,
                                 (tc >> 8) or 64, roce_v1=v1))
