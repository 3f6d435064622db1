"""Device, port and GID queries: what ib_core reports for an nsnic device (ib_device_attr,
ib_port_attr, the GID table), each value taken from the device (QUERY_DEVICE's DeviceCaps,
QUERY_PORT's PortInfo, the DEV_ID register) or from a limit the driver itself sets, as
mlx5_ib_query_device and rxe_query_device do.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass
from enum import IntEnum, IntFlag

from nicsim.hwif import (
    MCAST_MAX_GROUPS,
    MCAST_MAX_QP_ATTACH,
    PAGE_SIZE,
    DevCap,
    DevFeature,
    PathMtu,
    PortInfo,
    PortPhysState,
    PortState,
)

GID_TABLE_LEN = 16  # entries per port (hwif.gid_table fills the first four, or two)
# Address handles are the provider's (the WQE carries the address vector, hwif.UdAv): no
# device table bounds them, and the device says so as mlx5 does (max_ah = INT_MAX).
MAX_AH = (1 << 31) - 1
PKEY_DEFAULT = 0xFFFF  # RoCE: one P_Key, the default full-membership one (Annex A17.4.2)
MAX_MSG_SZ = 1 << 31  # the largest message (IBA 9.4.1)
FIRST_QPN = 0x11  # QPNs below are special (IBA 10.2.4) or kept back by the driver
MAX_PD = 1 << 24  # PD numbers are the driver's own (the NIC compares them, 32 bits wide)
LINK_LAYER_ETHERNET = 2  # IBV_LINK_LAYER_ETHERNET


class DeviceCap(IntFlag):
    """The ibv_device_cap_flags bits nsnic reports."""

    RC_RNR_NAK_GEN = 1 << 12  # the responder sends RNR NAKs when it has no receive WQE
    SYS_IMAGE_GUID = 1 << 11
    MEM_WINDOW = 1 << 17  # type 1 memory windows
    MEM_WINDOW_TYPE_2B = 1 << 24  # type 2 windows bound to a QP by a BIND_MW WQE
    SRQ_RESIZE = 1 << 13  # ibv_modify_srq with IBV_SRQ_MAX_WR (RESIZE_SRQ)


class DeviceCapEx(IntFlag):
    """Bits of device_cap_flags_ex above the 32 of ibv_device_cap_flags (ib_user_verbs.h
    IB_UVERBS_DEVICE_*)."""

    FLUSH_GLOBAL = 1 << 38  # FLUSH with placement type global visibility
    FLUSH_PERSISTENT = 1 << 39  # FLUSH with placement type persistence (not on nsnic: no pmem)
    ATOMIC_WRITE = 1 << 40


class AtomicCap(IntEnum):
    """ibv_atomic_cap."""

    NONE = 0
    HCA = 1  # atomic among the accesses of this device (IBA 10.2.4.8.1): the NIC executes
    GLOB = 2  # them in one event, not atomic with the host CPU's own accesses


@dataclass
class DeviceAttrs:
    """ib_device_attr (the fields libibverbs' ibv_device_attr carries)."""

    fw_ver: str
    node_guid: int
    sys_image_guid: int
    max_mr_size: int
    page_size_cap: int
    vendor_id: int
    vendor_part_id: int
    hw_ver: int
    max_qp: int
    max_qp_wr: int
    device_cap_flags: int
    max_sge: int
    max_sge_rd: int
    max_cq: int
    max_cqe: int
    max_mr: int
    max_pd: int
    max_qp_rd_atom: int
    max_ee_rd_atom: int
    max_res_rd_atom: int
    max_qp_init_rd_atom: int
    max_ee_init_rd_atom: int
    atomic_caps: int
    max_ee: int
    max_rdd: int
    max_mw: int
    max_raw_ipv6_qp: int
    max_raw_ethy_qp: int
    max_mcast_grp: int
    max_mcast_qp_attach: int
    max_total_mcast_qp_attach: int
    max_ah: int
    max_fmr: int
    max_map_per_fmr: int
    max_srq: int
    max_srq_wr: int
    max_srq_sge: int
    max_pkeys: int
    local_ca_ack_delay: int
    phys_port_cnt: int
    num_comp_vectors: int
    device_cap_flags_ex: int = 0  # ibv_device_attr_ex's 64-bit flags (DeviceCapEx above bit 31)


@dataclass
class PortAttrs:
    """ib_port_attr of an Ethernet (RoCE) port."""

    state: int
    max_mtu: int
    active_mtu: int
    gid_tbl_len: int
    port_cap_flags: int
    max_msg_sz: int
    bad_pkey_cntr: int
    qkey_viol_cntr: int
    pkey_tbl_len: int
    lid: int
    sm_lid: int
    lmc: int
    max_vl_num: int
    sm_sl: int
    subnet_timeout: int
    init_type_reply: int
    active_width: int
    active_speed: int
    phys_state: int
    link_layer: int
    flags: int
    port_cap_flags2: int
    active_speed_ex: int
    speed_mbps: int


def guid_from_mac(mac: str) -> int:
    """The node GUID of an Ethernet RDMA device: the MAC as a modified EUI-64 (RFC 4291
    appendix A, as mlx5 and rxe derive it)."""
    b = bytes(int(x, 16) for x in mac.split(":"))
    return int.from_bytes(bytes([b[0] ^ 2]) + b[1:3] + b"\xff\xfe" + b[3:6], "big")


# IB link widths and lane speeds whose product gives a rate (IBA 14.2.5.6 PortInfo:
# LinkWidthActive and LinkSpeedActive, in ibv_port_attr's encodings), widest lanes first.
_WIDTHS = ((2, 4), (16, 2), (1, 1))  # (encoding, lanes): 4x, 2x, 1x
_SPEEDS = ((128, 100_000), (64, 50_000), (32, 25_000), (16, 14_000), (4, 10_000),
           (2, 5_000), (1, 2_500))  # (encoding, Mb/s per lane): NDR .. SDR


def width_speed(speed_mbps: int) -> tuple[int, int]:
    """The (active_width, active_speed) pair that names a link of `speed_mbps`, as an
    Ethernet RDMA driver reports its netdev's speed (ib_get_eth_speed): the widest width
    whose lanes run at a standard speed, else the closest rate not above it."""
    best = (1, 1, 0)
    for w, lanes in _WIDTHS:
        for s, per_lane in _SPEEDS:
            rate = lanes * per_lane
            if rate == speed_mbps:
                return w, s
            if best[2] < rate <= speed_mbps:
                best = (w, s, rate)
    return best[0], best[1]


def active_mtu(max_mtu: int, netdev_mtu: int) -> int:
    """The IB MTU a RoCE port uses: the largest that fits the netdev's MTU with the RoCEv2
    headers (iboe_get_mtu: IPv6 40 + UDP 8 + BTH 12 + the largest extension 28 + ICRC 4)."""
    room = netdev_mtu - 40 - 8 - 12 - 28 - 4
    best = PathMtu.MTU_256
    for m in PathMtu:
        if m.bytes <= room and m <= max_mtu:
            best = m
    return int(best)


def port_attrs(info: PortInfo, netdev_mtu: int) -> PortAttrs:
    w, s = width_speed(info.speed_mbps) if info.state == PortState.ACTIVE else (1, 1)
    return PortAttrs(
        state=info.state, max_mtu=info.max_mtu, active_mtu=active_mtu(info.max_mtu, netdev_mtu),
        gid_tbl_len=GID_TABLE_LEN, port_cap_flags=0, max_msg_sz=MAX_MSG_SZ, bad_pkey_cntr=0,
        qkey_viol_cntr=0, pkey_tbl_len=1, lid=0, sm_lid=0, lmc=0, max_vl_num=1, sm_sl=0,
        subnet_timeout=0, init_type_reply=0, active_width=w, active_speed=s,
        phys_state=info.phys_state, link_layer=LINK_LAYER_ETHERNET, flags=0, port_cap_flags2=0,
        active_speed_ex=0, speed_mbps=info.speed_mbps)


def down_port() -> PortInfo:
    """What a port that cannot be asked reports (a device without QUERY_PORT)."""
    return PortInfo(PortState.DOWN, PortPhysState.DISABLED, PathMtu.MTU_1024, 0)


def check_port(port: int) -> None:
    if port != 1:
        raise QueryError(f"no port {port}", errno.EINVAL)


class QueryError(Exception):
    def __init__(self, msg: str, errno_: int) -> None:
        super().__init__(msg)
        self.errno = errno_


def device_attrs(caps: object, dev_id: int, mac: str, log_mtt: int,
                 num_comp_vectors: int, features: DevFeature) -> DeviceAttrs:
    """ib_device_attr from the device's DeviceCaps (QUERY_DEVICE), its DEV_ID and FEATURES
    registers and what the driver set up (the MTT it gave the NIC bounds the largest MR)."""
    c = caps
    mc = DevFeature.MULTICAST in features
    groups, per_group = (MCAST_MAX_GROUPS, MCAST_MAX_QP_ATTACH) if mc else (0, 0)
    # SRQs: SRQNs 1..max_srq-1; none (and no SRQ_RESIZE) on a device that reports 0
    srqs = max(c.max_srq - 1, 0)  # type: ignore[attr-defined]
    caps_word = int(DeviceCap.RC_RNR_NAK_GEN | DeviceCap.SYS_IMAGE_GUID | DeviceCap.MEM_WINDOW
                    | DeviceCap.MEM_WINDOW_TYPE_2B
                    | (DeviceCap.SRQ_RESIZE if srqs else DeviceCap(0)))
    guid = guid_from_mac(mac)
    max_mpt = c.max_mpt  # type: ignore[attr-defined]
    return DeviceAttrs(
        fw_ver=f"{dev_id & 0xFFFFFFFF}.0.0", node_guid=guid, sys_image_guid=guid,
        max_mr_size=(1 << log_mtt) * PAGE_SIZE, page_size_cap=PAGE_SIZE,
        vendor_id=(dev_id >> 48) & 0xFFFF, vendor_part_id=(dev_id >> 32) & 0xFFFF,
        hw_ver=dev_id & 0xFFFFFFFF,
        max_qp=c.max_qp - FIRST_QPN,  # type: ignore[attr-defined]
        max_qp_wr=c.max_qp_wr,  # type: ignore[attr-defined]
        device_cap_flags=caps_word,
        max_sge=c.max_sge, max_sge_rd=c.max_sge,  # type: ignore[attr-defined]
        max_cq=c.max_cq - 1, max_cqe=c.max_cqe,  # type: ignore[attr-defined]
        max_mr=max_mpt - 1, max_pd=MAX_PD,
        max_qp_rd_atom=c.max_qp_rd_atom, max_ee_rd_atom=0,  # type: ignore[attr-defined]
        max_res_rd_atom=c.max_qp * c.max_qp_rd_atom,  # type: ignore[attr-defined]
        max_qp_init_rd_atom=c.max_qp_rd_atom, max_ee_init_rd_atom=0,  # type: ignore
        atomic_caps=int(AtomicCap.NONE if c.flags & DevCap.NO_ATOMICS  # type: ignore
                        else AtomicCap.HCA),
        max_ee=0, max_rdd=0, max_mw=max_mpt - 1, max_raw_ipv6_qp=0,
        max_raw_ethy_qp=0, max_mcast_grp=groups, max_mcast_qp_attach=per_group,
        max_total_mcast_qp_attach=groups * per_group, max_ah=MAX_AH, max_fmr=0, max_map_per_fmr=0,
        max_srq=srqs, max_srq_wr=c.max_qp_wr - 1 if srqs else 0,  # type: ignore[attr-defined]
        max_srq_sge=c.max_sge if srqs else 0, max_pkeys=1,  # type: ignore[attr-defined]
        local_ca_ack_delay=0, phys_port_cnt=1, num_comp_vectors=num_comp_vectors,
        device_cap_flags_ex=caps_word | int(
            (DeviceCapEx.FLUSH_GLOBAL if DevFeature.FLUSH in features else DeviceCapEx(0))
            | (DeviceCapEx.ATOMIC_WRITE if DevFeature.ATOMIC_WRITE in features
               else DeviceCapEx(0))))
