"""The verbs nsnic does not have, and the attribute objects a program builds before it asks
for them.

Asking for a verb nsnic lacks fails the way the kernel or provider of a device without it
answers: PyverbsRDMAError with EOPNOTSUPP (ib_uverbs returns EOPNOTSUPP for a verb its device
does not implement), which programs and rdma-core's tests take as "not supported here".
Attribute objects are plain data (they are built before any verb is called); they keep what
they are given, with pyverbs' argument order and defaults.
"""

from __future__ import annotations

import errno
from typing import Any

from nicsim.driver.user import errors
from nicsim.driver.user.base import PyverbsCM, PyverbsObject
from nicsim.driver.user.errors import PyverbsRDMAError, PyverbsUserError


def unsupported(what: str, why: str) -> PyverbsRDMAError:
    errors.last_errno = errno.EOPNOTSUPP
    return PyverbsRDMAError(f"{what}: {why}", errno.EOPNOTSUPP)


def verb(name: str, what: str, why: str, base: type = PyverbsCM) -> type:
    """A pyverbs object class whose creation is a verb nsnic lacks."""

    def __init__(self: Any, *args: object, **kwargs: object) -> None:
        raise unsupported(what, why)

    return type(name, (base,), {"__init__": __init__, "__doc__": f"{what}: {why} (EOPNOTSUPP)."})


def attrs(name: str, *params: tuple[str, object], doc: str = "") -> type:
    """A pyverbs attribute class taking `params` ((name, default), in pyverbs' order)."""
    names = [p for p, _ in params]
    defaults = dict(params)

    def __init__(self: Any, *args: object, **kwargs: object) -> None:
        if len(args) > len(names):
            raise TypeError(f"{name}() takes at most {len(names)} positional arguments")
        vals = dict(defaults)
        vals.update(zip(names, args, strict=False))
        for k, v in kwargs.items():
            if k not in defaults:
                raise TypeError(f"{name}() got an unexpected keyword argument {k!r}")
            vals[k] = v
        for k, v in vals.items():
            setattr(self, k, list(v) if isinstance(v, list) else v)

    def __repr__(self: Any) -> str:
        return f"{name}({', '.join(f'{k}={getattr(self, k)!r}' for k in names)})"

    return type(name, (PyverbsObject,), {"__init__": __init__, "__repr__": __repr__,
                                         "__doc__": doc or f"{name}: attributes."})


# -- attribute objects ------------------------------------------------------------------------

AllocDmAttr = attrs("AllocDmAttr", ("length", 0), ("log_align_req", 0), ("comp_mask", 0))
CqInitAttrEx = attrs("CqInitAttrEx", ("cqe", 100), ("channel", None), ("comp_vector", 0),
                     ("wc_flags", 0), ("comp_mask", 0), ("flags", 0), ("parent_domain", None))
PollCqAttr = attrs("PollCqAttr", ("comp_mask", 0))
SrqAttr = attrs("SrqAttr", ("max_wr", 100), ("max_sge", 1), ("srq_limit", 0))


class SrqInitAttr(PyverbsObject):
    """ibv_srq_init_attr: SrqInitAttr(SrqAttr(...))."""

    def __init__(self, attr: object = None) -> None:
        self.attr = attr if attr is not None else SrqAttr()
        self.srq_context = None

    max_wr = property(lambda self: self.attr.max_wr)
    max_sge = property(lambda self: self.attr.max_sge)
    srq_limit = property(lambda self: self.attr.srq_limit)


class SrqInitAttrEx(PyverbsObject):
    """ibv_srq_init_attr_ex."""

    def __init__(self, max_wr: int = 100, max_sge: int = 1, srq_limit: int = 0) -> None:
        self.attr = SrqAttr(max_wr, max_sge, srq_limit)
        self.srq_context = None
        self.comp_mask = 0
        self.srq_type = 0
        self.pd = None
        self.xrcd = None
        self.cq = None
        self.tm_cap = None
        self.max_num_tags = 0
        self.max_ops = 0


OpsWr = attrs("OpsWr", ("wr_id", 0), ("opcode", 0), ("flags", 1), ("unexpected_cnt", 0),
              ("recv_wr_id", 0), ("num_sge", None), ("tag", 0), ("mask", 0), ("sg_list", None))
XRCDInitAttr = attrs("XRCDInitAttr", ("comp_mask", 0), ("oflags", 0), ("fd", -1))
WQInitAttr = attrs("WQInitAttr", ("wq_context", None), ("wq_pd", None), ("wq_cq", None),
                   ("wq_type", 0), ("max_wr", 100), ("max_sge", 1), ("comp_mask", 0),
                   ("create_flags", 0))
WQAttr = attrs("WQAttr", ("attr_mask", 0), ("wq_state", 0), ("curr_wq_state", 0), ("flags", 0),
               ("flags_mask", 0))
RwqIndTableInitAttr = attrs("RwqIndTableInitAttr", ("log_ind_tbl_size", 5), ("wqs_list", None),
                            ("comp_mask", 0))
RxHashConf = attrs("RxHashConf", ("rx_hash_function", 0), ("rx_hash_key_len", 0),
                   ("rx_hash_key", None), ("rx_hash_fields_mask", 0))
FlowAttr = attrs("FlowAttr", ("num_of_specs", 0), ("flow_type", 0), ("priority", 0),
                 ("port", 1), ("flags", 0))
QPRateLimitAttr = attrs("QPRateLimitAttr", ("rate_limit", 0), ("max_burst_sz", 0),
                        ("typical_pkt_sz", 0), ("comp_mask", 0))
QPAttachCompCntrAttr = attrs("QPAttachCompCntrAttr", ("op_mask", 0))
ECE = attrs("ECE", ("vendor_id", 0), ("options", 0), ("comp_mask", 0))
DmaHandleInitAttr = attrs("DmaHandleInitAttr", ("comp_mask", 0), ("cpu_id", 0), ("ph", 0),
                          ("tph_mem_type", 0))
ParentDomainContext = attrs("ParentDomainContext", ("pd", None), ("alloc_func", None),
                            ("free_func", None), ("user_data", None))
ParentDomainInitAttr = attrs("ParentDomainInitAttr", ("pd", None), ("pd_context", None),
                             ("comp_mask", 0))
MWBindInfo = attrs("MWBindInfo", ("mr", None), ("addr", 0), ("length", 0),
                   ("mw_access_flags", 0))
MWBind = attrs("MWBind", ("info", None), ("send_flags", 0), ("wr_id", 0))
CompCntrInitAttr = attrs("CompCntrInitAttr", ("comp_mask", 0), ("cntr_type", 0), ("flags", 0))
GRH = attrs("GRH", ("sgid", None), ("dgid", None), ("version_tclass_flow", 0), ("paylen", 0),
            ("next_hdr", 0), ("hop_limit", 1))
DataBuffer = attrs("DataBuffer", ("addr", 0), ("length", 0))
Spec = attrs("Spec")
EthSpec = attrs("EthSpec", ("dst_mac", None), ("dst_mac_mask", None), ("src_mac", None),
                ("src_mac_mask", None), ("ether_type", None), ("ether_type_mask", None),
                ("vlan_tag", None), ("vlan_tag_mask", None))
Ipv4ExtSpec = attrs("Ipv4ExtSpec", ("dst_ip", None), ("dst_ip_mask", None), ("src_ip", None),
                    ("src_ip_mask", None), ("proto", None), ("proto_mask", None), ("tos", None),
                    ("tos_mask", None), ("ttl", None), ("ttl_mask", None), ("flags", None),
                    ("flags_mask", None))
Ipv6Spec = attrs("Ipv6Spec", ("dst_ip", None), ("dst_ip_mask", None), ("src_ip", None),
                 ("src_ip_mask", None), ("flow_label", None), ("flow_label_mask", None),
                 ("next_hdr", None), ("next_hdr_mask", None), ("traffic_class", None),
                 ("traffic_class_mask", None), ("hop_limit", None), ("hop_limit_mask", None))
TcpUdpSpec = attrs("TcpUdpSpec", ("spec_type", 0), ("dst_port", None), ("dst_port_mask", None),
                   ("src_port", None), ("src_port_mask", None))

# -- verbs nsnic lacks ------------------------------------------------------------------------

DM = verb("DM", "Failed to allocate device memory", "nsnic has no on-device memory")
DMMR = verb("DMMR", "Failed to register a DM MR", "nsnic has no on-device memory")
XRCD = verb("XRCD", "Failed to create XRCD", "nsnic has no XRC domains")
WQ = verb("WQ", "Failed to create WQ", "nsnic has no work queues (RSS)")
RwqIndTable = verb("RwqIndTable", "Failed to create RWQ indirection table",
                   "nsnic has no RSS")
Flow = verb("Flow", "Failed to create flow", "nsnic has no flow steering (raw packet QPs)")
FlowAction = verb("FlowAction", "Failed to create flow action", "nsnic has no flow steering")
ParentDomain = verb("ParentDomain", "Failed to allocate parent domain",
                    "nsnic has no parent domains")
DMAHandle = verb("DMAHandle", "Failed to allocate DMA handle", "nsnic has no TPH DMA handles")
DmaBufMR = verb("DmaBufMR", "Failed to register a dma-buf MR", "nsnic has no dma-buf import")
DmaBuf = verb("DmaBuf", "Failed to allocate dma-buf", "there is no GPU in the simulated host")
Buf = verb("Buf", "Failed to allocate a buffer", "nsnic has no parent-domain buffers")
BufMR = verb("BufMR", "Failed to register a buffer MR", "nsnic has no parent-domain buffers")
CompCntr = verb("CompCntr", "Failed to create completion counter",
                "nsnic has no completion counters")
WcTmInfo = attrs("WcTmInfo", ("tag", 0), ("priv", 0))


def other_vendor(name: str, vendor: str) -> type:
    """A vendor's direct-verbs class (pyverbs.providers): nsnic is not that vendor's device,
    which the vendor's own classes report as a user error, as pyverbs' do on other devices.
    Its attribute classes (...Attr) are data, built before any device is asked."""
    if name.endswith("Attr"):
        def init(self: Any, *args: object, **kwargs: object) -> None:
            self.args = args
            vars(self).update(kwargs)

        return type(name, (PyverbsObject,), {"__init__": init,
                                             "__doc__": f"{vendor} direct verbs attributes."})

    def __init__(self: Any, *args: object, **kwargs: object) -> None:
        raise PyverbsUserError(f"This is not an {vendor} device")

    return type(name, (PyverbsCM,), {"__init__": __init__,
                                     "__doc__": f"{vendor} direct verbs: not on nsnic."})
