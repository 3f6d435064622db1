"""What a program learns about devices (pyverbs.device): the device list, device and port
attributes, GID entries, and the helpers that name their values.

The values come from the kernel (nicsim.driver.kernel.query), which takes them from the
device; this module only gives them pyverbs' shape.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass, fields

from nicsim.driver import enums as e
from nicsim.driver.kernel.query import DeviceAttrs, PortAttrs
from nicsim.driver.user.base import PyverbsObject
from nicsim.driver.user.errors import PyverbsRDMAError
from nicsim.driver.user.process import NoDevicesError, current

NODE_CA = int(e.ibv_node_type.IBV_NODE_CA)
TRANSPORT_IB = int(e.ibv_transport_type.IBV_TRANSPORT_IB)  # RoCE runs the IB transport


class Device(PyverbsObject):
    """One entry of ibv_get_device_list."""

    def __init__(self, name: str | bytes, guid: int, node_type: int, transport_type: int,
                 index: int) -> None:
        self._name = name.encode() if isinstance(name, str) else name
        self._guid = guid
        self._node_type = node_type
        self._transport_type = transport_type
        self._index = index

    @property
    def name(self) -> bytes:
        return self._name

    @property
    def node_type(self) -> int:
        return self._node_type

    @property
    def transport_type(self) -> int:
        return self._transport_type

    @property
    def guid(self) -> int:
        return self._guid

    @property
    def index(self) -> int:
        return self._index

    def __str__(self) -> str:
        return (f"Device {self._name.decode()}, node type {translate_node_type(self._node_type)}"
                f", transport type {translate_transport_type(self._transport_type)}, guid "
                f"{guid_format(self._guid)}")


def get_device_list() -> list[Device]:
    """The RDMA devices of the simulated world (ibv_get_device_list)."""
    from nicsim.driver.kernel.query import guid_from_mac

    try:
        devs = current().devices
    except NoDevicesError:
        return []
    out = []
    for d in devs:
        kernel = d.host.kernel
        ib = kernel.devices[d.name]  # type: ignore[attr-defined]
        out.append(Device(d.name, guid_from_mac(ib.hw.fn.netdev.mac), NODE_CA, TRANSPORT_IB,
                          d.index))
    return out


class _Attrs(PyverbsObject):
    """Read-only attributes copied from a kernel record."""

    _src: type

    def __init__(self, rec: object = None) -> None:
        for f in fields(self._src):
            setattr(self, "_" + f.name, getattr(rec, f.name) if rec is not None else 0)

    def __getattr__(self, name: str) -> object:
        if not name.startswith("_") and "_" + name in self.__dict__:
            return self.__dict__["_" + name]
        raise AttributeError(name)


class DeviceAttr(_Attrs):
    """ibv_device_attr."""

    _src = DeviceAttrs

    def __str__(self) -> str:
        rows = [("FW version", self.fw_ver), ("Node guid", guid_format(self.node_guid)),
                ("Sys image GUID", guid_format(self.sys_image_guid)),
                ("Max MR size", hex(self.max_mr_size)),
                ("Page size cap", hex(self.page_size_cap)),
                ("Vendor ID", hex(self.vendor_id)), ("Vendor part ID", self.vendor_part_id),
                ("HW version", self.hw_ver), ("Max QP", self.max_qp),
                ("Max QP WR", self.max_qp_wr),
                ("Device cap flags", translate_device_caps(self.device_cap_flags)),
                ("Max SGE", self.max_sge), ("Max SGE RD", self.max_sge_rd),
                ("MAX CQ", self.max_cq), ("Max CQE", self.max_cqe), ("Max MR", self.max_mr),
                ("Max PD", self.max_pd), ("Max QP RD atom", self.max_qp_rd_atom),
                ("Max res RD atom", self.max_res_rd_atom),
                ("Max QP init RD atom", self.max_qp_init_rd_atom),
                ("Atomic caps", self.atomic_caps), ("Max MW", self.max_mw),
                ("Max AH", self.max_ah), ("Max SRQ", self.max_srq),
                ("Max PKeys", self.max_pkeys), ("Local CA ack delay", self.local_ca_ack_delay),
                ("Phys port count", self.phys_port_cnt)]
        return "".join(f"{k:<22}: {v}\n" for k, v in rows)


@dataclass
class ODPCaps(PyverbsObject):
    """On-demand paging capabilities (ibv_odp_caps), as the device reports them."""

    general_caps: int = 0
    rc_odp_caps: int = 0
    uc_odp_caps: int = 0
    ud_odp_caps: int = 0
    xrc_odp_caps: int = 0


@dataclass
class PCIAtomicCaps(PyverbsObject):
    """PCIe AtomicOp capabilities: none (the NIC executes atomics itself)."""

    fetch_add: int = 0
    swap: int = 0
    compare_swap: int = 0


@dataclass
class TSOCaps(PyverbsObject):
    max_tso: int = 0
    supported_qpts: int = 0


@dataclass
class RSSCaps(PyverbsObject):
    supported_qpts: int = 0
    max_rwq_indirection_tables: int = 0
    rx_hash_fields_mask: int = 0
    rx_hash_function: int = 0
    max_rwq_indirection_table_size: int = 0


@dataclass
class PacketPacingCaps(PyverbsObject):
    qp_rate_limit_min: int = 0
    qp_rate_limit_max: int = 0
    supported_qpts: int = 0


@dataclass
class TMCaps(PyverbsObject):
    max_rndv_hdr_size: int = 0
    max_num_tags: int = 0
    flags: int = 0
    max_ops: int = 0
    max_sge: int = 0


@dataclass
class CQModerationCaps(PyverbsObject):
    max_cq_count: int = 0
    max_cq_period: int = 0


class QueryDeviceExInput(PyverbsObject):
    def __init__(self, comp_mask: int) -> None:
        self.comp_mask = comp_mask


class DeviceAttrEx(PyverbsObject):
    """ibv_device_attr_ex: the basic attributes and the extended capabilities, every one of
    them zero (not supported) for nsnic except the port count and on-demand paging."""

    def __init__(self, orig: DeviceAttr, odp: ODPCaps | None = None) -> None:
        self._orig = orig
        self.comp_mask = 0
        self._odp = odp or ODPCaps()

    @property
    def orig_attr(self) -> DeviceAttr:
        return self._orig

    odp_caps = property(lambda self: self._odp)
    completion_timestamp_mask = property(lambda self: 0)
    hca_core_clock = property(lambda self: 0)
    device_cap_flags_ex = property(lambda self: self._orig.device_cap_flags_ex)
    tso_caps = property(lambda self: TSOCaps())
    pci_atomic_caps = property(lambda self: PCIAtomicCaps())
    rss_caps = property(lambda self: RSSCaps())
    max_wq_type_rq = property(lambda self: 0)
    packet_pacing_caps = property(lambda self: PacketPacingCaps())
    raw_packet_caps = property(lambda self: 0)
    tm_caps = property(lambda self: TMCaps())
    cq_mod_caps = property(lambda self: CQModerationCaps())
    max_dm_size = property(lambda self: 0)
    phys_port_cnt_ex = property(lambda self: self._orig.phys_port_cnt)


class PortAttr(_Attrs):
    """ibv_port_attr."""

    _src = PortAttrs

    def __str__(self) -> str:
        rows = [("Port state", port_state_to_str(self.state)),
                ("Max MTU", translate_mtu(self.max_mtu)),
                ("Active MTU", translate_mtu(self.active_mtu)),
                ("SM lid", self.sm_lid), ("Port lid", self.lid), ("lmc", hex(self.lmc)),
                ("Link layer", translate_link_layer(self.link_layer)),
                ("Max message size", hex(self.max_msg_sz)),
                ("Port cap flags", translate_port_cap_flags(self.port_cap_flags)),
                ("Max VL num", self.max_vl_num), ("Bad Pkey counter", self.bad_pkey_cntr),
                ("Qkey violations counter", self.qkey_viol_cntr),
                ("Gid table len", self.gid_tbl_len), ("Pkey table len", self.pkey_tbl_len),
                ("Active width", width_to_str(self.active_width)),
                ("Active speed", speed_to_str(self.active_speed, self.active_speed_ex)),
                ("Phys state", phys_state_to_str(self.phys_state))]
        return "".join(f"{k:<22}: {v}\n" for k, v in rows)


class GIDEntry(PyverbsObject):
    """ibv_gid_entry: a GID table entry with its index, port, type and netdev."""

    def __init__(self, subnet_prefix: int = 0, interface_id: int = 0, gid_index: int = 0,
                 port_num: int = 0, gid_type: int = 0, ndev_ifindex: int = 0) -> None:
        self.gid_subnet_prefix = subnet_prefix
        self.gid_interface_id = interface_id
        self.gid_index = gid_index
        self.port_num = port_num
        self.gid_type = gid_type
        self.ndev_ifindex = ndev_ifindex

    def gid_str(self) -> str:
        return _gid_str(self.gid_subnet_prefix.to_bytes(8, "big")
                        + self.gid_interface_id.to_bytes(8, "big"))

    def __str__(self) -> str:
        return (f"GID: {self.gid_str()}, GID index: {self.gid_index}, port: {self.port_num}, "
                f"type: {translate_gid_type(self.gid_type)}, netdev index: "
                f"{self.ndev_ifindex}")


def _gid_str(raw: bytes) -> str:
    h = raw.hex()
    return ":".join(h[i:i + 4] for i in range(0, 32, 4))


class AsyncEvent(PyverbsObject):
    """An asynchronous event (ibv_async_event): its type and the object it is about
    (`element`: the CQ, QP or SRQ). ack() is ibv_ack_async_event, which has nothing to
    release here."""

    def __init__(self, event_type: int = 0, element: object = None) -> None:
        self.event_type = event_type
        self.element = element

    def ack(self) -> None:
        """Nothing to release: the event holds no reference the kernel waits on."""

    def __str__(self) -> str:
        return f"{'Event Type':<24}: {translate_event_type(self.event_type):<20}\n"


class FdArr(PyverbsObject):
    def __init__(self, arr: list[int] | None = None, count: int = 0) -> None:
        self.arr = list(arr or [])
        self.count = count

    def close(self) -> None:
        pass


# -- names of values (pyverbs.device's helpers) ---------------------------------------------


def _named(table: dict[int, str], v: int, bad: str) -> str:
    return f"{table[v]} ({v})" if v in table else bad


def translate_gid_type(gid_type: int) -> str:
    return {0: "IB", 1: "RoCEv1", 2: "RoCEv2"}.get(gid_type, f"Unknown gid_type ({gid_type})")


def guid_format(num: int) -> str:
    h = f"{num & (1 << 64) - 1:016x}"
    return ":".join(h[i:i + 4] for i in range(0, 16, 4))


def guid_to_hex(node_guid: int) -> str:
    return f"{node_guid:x}"


def translate_transport_type(t: int) -> str:
    return {0: "IB", 1: "IWARP", 2: "USNIC", 3: "USNIC UDP"}.get(t, "Unknown")


def translate_node_type(t: int) -> str:
    return {1: "CA", 2: "Switch", 3: "Router", 4: "RNIC", 5: "USNIC",
            6: "USNIC UDP"}.get(t, "Unknown")


def port_state_to_str(s: int) -> str:
    return _named({0: "NOP", 1: "Down", 2: "Init", 3: "Armed", 4: "Active", 5: "Defer"}, s,
                  f"Invalid state ({s})")


def translate_mtu(mtu: int) -> str:
    return _named({1: "256", 2: "512", 3: "1024", 4: "2048", 5: "4096"}, mtu,
                  f"Invalid MTU ({mtu})")


def translate_link_layer(ll: int) -> str:
    return {0: "Unspecified", 1: "InfiniBand", 2: "Ethernet"}.get(
        ll, f"Invalid link layer ({ll})")


def phys_state_to_str(p: int) -> str:
    return _named({1: "Sleep", 2: "Polling", 3: "Disabled", 4: "Port configuration training",
                   5: "Link up", 6: "Link error recovery", 7: "Phy test"}, p,
                  "Invalid physical state")


def width_to_str(w: int) -> str:
    return _named({1: "1X", 2: "4X", 4: "8X", 8: "12X", 16: "2X"}, w, "Invalid width")


def speed_to_str(active_speed: int, active_speed_ex: int = 0) -> str:
    s = active_speed_ex or active_speed
    return _named({0: "0.0 Gbps", 1: "2.5 Gbps", 2: "5.0 Gbps", 4: "5.0 Gbps", 8: "10.0 Gbps",
                   16: "14.0 Gbps", 32: "25.0 Gbps", 64: "50.0 Gbps", 128: "100.0 Gbps",
                   256: "200.0 Gbps"}, s, "Invalid speed")


def _flag_names(flags: int, cls: type) -> str:
    return "".join(f"\n  {m.name}" for m in cls if m.value and flags & m.value == m.value)


def translate_port_cap_flags(flags: int) -> str:
    return _flag_names(flags, e.ibv_port_cap_flags)


def translate_port_cap_flags2(flags: int) -> str:
    return _flag_names(flags, e.ibv_port_cap_flags2)


def translate_device_caps(flags: int) -> str:
    return _flag_names(flags, e.ibv_device_cap_flags)


def translate_event_type(event_type: int) -> str:
    try:
        return e.ibv_event_type(event_type).name
    except ValueError:
        return f"Unknown event ({event_type})"


def no_such_port(port: int) -> PyverbsRDMAError:
    return PyverbsRDMAError(f"Failed to query port {port}", errno.EINVAL)
