"""UD multicast (IBA 10.5.2.5, RoCEv2 Annex A17.4.5): the NIC's group table and its fan-out.

A group is a multicast GID; UD QPs attach to it (ATTACH_MCAST) and detach (DETACH_MCAST). The
port's receive filter passes the Ethernet group addresses of the joined groups
(`Port.mcast_macs`, as a NIC programs its MAC filter when a group is joined); a packet that
passes, whose destination QPN is 0xFFFFFF and whose destination IP is a group, goes to every
QP attached to the group, each taking it as a datagram of its own (Q_Key, receive WQE and
completion per QP: datagram.Datagram.receive). A frame the port sends to a joined group's
address is also turned around to the device's own members, the sending QP included if it is
attached (as NICs loop multicast back unless IBV_QP_CREATE_BLOCK_SELF_MCAST_LB, which nsnic
does not offer).
"""

from __future__ import annotations

from nicsim.hwif import MCAST_MAX_GROUPS, MCAST_MAX_QP_ATTACH, CmdStatus, QpType
from nicsim.nic.counters import Counters, bump, new_counters
from nicsim.nic.datagram import Datagram
from nicsim.nic.port import Port
from nicsim.nic.qp import QpCtx
from nicsim.wire import MCAST_QPN, Packet, Transport, is_multicast_ip, multicast_mac


class McastError(Exception):
    def __init__(self, status: CmdStatus) -> None:
        super().__init__(status.name)
        self.status = status


def _ip(gid: bytes) -> bytes:
    return gid[12:] if gid[:12] == bytes(10) + b"\xff\xff" else gid


class Multicast:
    def __init__(self, qps: dict[int, QpCtx], port: Port, rx: Counters,
                 datagram: Datagram) -> None:
        self.qps = qps
        self.port = port
        self.rx = rx  # the NIC's receive counters
        self.datagram = datagram
        # Destination IP (4 or 16 bytes, as the packet carries it) -> attached QPNs in
        # attach order.
        self.groups: dict[bytes, list[int]] = {}
        self.counters = new_counters()

    # -- commands ---------------------------------------------------------------------------

    def attach(self, qpn: int, gid: bytes) -> None:
        qp = self.qps.get(qpn)
        if qp is None:
            raise McastError(CmdStatus.BAD_RESOURCE)
        if qp.type is not QpType.UD or not is_multicast_ip(gid):
            raise McastError(CmdStatus.BAD_PARAM)
        ip = _ip(gid)
        members = self.groups.get(ip)
        if members is None:
            if len(self.groups) >= MCAST_MAX_GROUPS:
                raise McastError(CmdStatus.EXCEED_LIM)
            members = self.groups[ip] = []
            self.port.mcast_macs.add(multicast_mac(ip))
        if qpn in members:
            return  # attaching twice is attaching once
        if len(members) >= MCAST_MAX_QP_ATTACH:
            raise McastError(CmdStatus.EXCEED_LIM)
        members.append(qpn)

    def detach(self, qpn: int, gid: bytes) -> None:
        ip = _ip(gid)
        members = self.groups.get(ip)
        if members is None or qpn not in members:
            raise McastError(CmdStatus.BAD_RESOURCE)
        members.remove(qpn)
        if not members:
            self._drop_group(ip)

    def forget_qp(self, qpn: int) -> None:
        """A destroyed QP leaves every group (the kernel detaches first; this keeps a stale
        QPN from ever receiving)."""
        for ip in [ip for ip, m in self.groups.items() if qpn in m]:
            self.groups[ip].remove(qpn)
            if not self.groups[ip]:
                self._drop_group(ip)

    def _drop_group(self, ip: bytes) -> None:
        del self.groups[ip]
        mac = multicast_mac(ip)
        if not any(multicast_mac(other) == mac for other in self.groups):
            self.port.mcast_macs.discard(mac)

    # -- receive ----------------------------------------------------------------------------

    def receive(self, p: Packet) -> None:
        """A packet to an Ethernet group address: every attached UD QP gets a copy."""
        c = self.counters
        group = _ip(p.dip)  # (a RoCE v1 frame carries the whole GID)
        members = self.groups.get(group)
        if members is None or p.frame[0:6] != multicast_mac(group):
            bump(c, "drop_not_joined")
            return
        if p.info.transport is not Transport.UD or p.dqpn != MCAST_QPN:
            bump(c, "drop_not_ud")  # only UD is multicast (C10-75)
            return
        bump(c, "received")
        for qpn in members:
            qp = self.qps.get(qpn)
            if qp is None:
                continue
            if p.pkey != qp.pkey:
                self.rx["bad_pkey"] += 1
                continue
            bump(c, "delivered")
            self.datagram.receive(qp, p)
