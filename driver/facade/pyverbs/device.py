"""pyverbs.device: the device list, Context, and device and port attributes."""

from nicsim.driver.user.device import (
    AsyncEvent,
    Device,
    DeviceAttr,
    DeviceAttrEx,
    FdArr,
    GIDEntry,
    PortAttr,
    QueryDeviceExInput,
    get_device_list,
    guid_format,
    guid_to_hex,
    phys_state_to_str,
    port_state_to_str,
    speed_to_str,
    translate_device_caps,
    translate_event_type,
    translate_gid_type,
    translate_link_layer,
    translate_mtu,
    translate_node_type,
    translate_port_cap_flags,
    translate_port_cap_flags2,
    translate_transport_type,
    width_to_str,
)
from nicsim.driver.user.unsupported import DM, AllocDmAttr
from nicsim.driver.user.verbs import Context

rdma_get_devices = get_device_list

__all__ = ["DM", "AllocDmAttr", "AsyncEvent", "Context", "Device", "DeviceAttr", "DeviceAttrEx",
           "FdArr", "GIDEntry", "PortAttr", "QueryDeviceExInput", "get_device_list",
           "guid_format", "guid_to_hex", "phys_state_to_str", "port_state_to_str",
           "rdma_get_devices", "speed_to_str", "translate_device_caps",
           "translate_event_type", "translate_gid_type", "translate_link_layer",
           "translate_mtu", "translate_node_type", "translate_port_cap_flags",
           "translate_port_cap_flags2", "translate_transport_type", "width_to_str"]
