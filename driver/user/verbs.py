"""The verbs library: pyverbs' classes and semantics over the nsnic provider and uverbs.

Control calls (Context, PD, MR, CQ, QP creation, modify/query) go through the uverbs command
file into the kernel; post_send, post_recv and poll go to the provider and never enter the
kernel. Errors raise PyverbsRDMAError carrying the errno pyverbs would report.

Constructors take pyverbs' arguments (Context(name=...), PD(ctx), MR(pd, length, access),
CQ(ctx, cqe), QP(pd or ctx, init_attr, qp_attr)). A device is found by name in the simulated
world the program runs in (nicsim.driver.user.process, set up by `nicsim exec`); a program
that builds its own World passes `host=` to Context instead. Memory a program wants to use
is allocated with `Context.alloc` (or by MR, which allocates its own buffer as pyverbs does).
"""

from __future__ import annotations

import errno
import ipaddress
from dataclasses import dataclass, field

from nicsim.driver import abi
from nicsim.driver.abi import UverbsError
from nicsim.driver.enums import (
    ibv_qp_attr_mask,
    ibv_qp_create_send_ops_flags,
    ibv_qp_init_attr_mask,
    ibv_qp_state,
    ibv_qp_type,
    ibv_query_qp_data_in_order_caps,
    ibv_query_qp_data_in_order_flags,
    ibv_send_flags,
    ibv_srq_attr_mask,
    ibv_srq_init_attr_mask,
    ibv_srq_type,
    ibv_wc_flags,
    ibv_wr_opcode,
)
from nicsim.driver.kernel.query import DeviceCapEx
from nicsim.driver.kernel.uverbs import UverbsFile, open_device
from nicsim.driver.rings import (
    MrInfo,
    MrTable,
    ProviderCq,
    ProviderError,
    ProviderQp,
    ProviderSrq,
)
from nicsim.driver.user import errors, process
from nicsim.driver.user.base import PyverbsCM, PyverbsObject, inc_rkey
from nicsim.driver.user.device import (
    AsyncEvent,
    DeviceAttr,
    DeviceAttrEx,
    GIDEntry,
    ODPCaps,
    PortAttr,
)
from nicsim.driver.user.errors import PyverbsError, PyverbsRDMAError, PyverbsUserError
from nicsim.driver.user.process import NoDevicesError
from nicsim.driver.user.process import current as current_process
from nicsim.driver.user.unsupported import SrqAttr

from nicsim.host.host import Host
from nicsim.host.memory import AddressSpace, MemoryError_
from nicsim.hwif import CqState, GidType, Qpc, UarReg, blank_qpc

__all__ = ["AH", "CQ", "GID", "MR", "MW", "PD", "QP", "SGE", "SRQ", "WC", "AHAttr", "CompChannel",
           "Context", "GlobalRoute", "PyverbsError", "PyverbsRDMAError", "PyverbsUserError",
           "QPAttr", "QPCap", "QPInitAttr", "QPInitAttrEx", "RecvWR", "SendWR"]


def _call(what: str, fn, *a, **kw):  # noqa: ANN001, ANN002, ANN003, ANN202
    """Run a kernel or provider call; its error becomes PyverbsRDMAError('<what>: why', errno)
    ('Failed to ...' as pyverbs words it)."""
    try:
        return fn(*a, **kw)
    except (UverbsError, ProviderError, MemoryError_) as e:
        errors.last_errno = e.errno
        raise PyverbsRDMAError(f"{what}: {e}", e.errno) from None


def _unsupported(what: str, why: str) -> PyverbsRDMAError:
    """What a verb nsnic does not have answers (the kernel's or provider's EOPNOTSUPP)."""
    errors.last_errno = errno.EOPNOTSUPP
    return PyverbsRDMAError(f"{what}: {why}", errno.EOPNOTSUPP)


# Consecutive silent poll windows (each up to 100 us of simulated time with no CQE) after which
# CQ.poll asks the kernel whether the CQ overran.
SILENT_CHECK = 8


# -- addressing ------------------------------------------------------------------------------


def _gid_bytes(val: object) -> bytes:
    if isinstance(val, GID):
        return val.raw
    if isinstance(val, (bytes, bytearray)):
        if len(val) != 16:
            raise PyverbsUserError(f"a GID is 16 bytes, not {len(val)}")
        return bytes(val)
    try:
        return ipaddress.IPv6Address(str(val)).packed
    except ValueError:
        raise PyverbsUserError(f"Invalid GID {val!r}") from None


class GID(PyverbsObject):
    """ibv_gid: 16 bytes, written as eight 4-digit groups ('0000:...:ffff:0a00:0001'); any
    IPv6 notation is accepted too."""

    def __init__(self, val: str | bytes | None = None) -> None:
        self.raw = _gid_bytes(val) if val else bytes(16)

    @property
    def gid(self) -> str:
        h = self.raw.hex()
        return ":".join(h[i:i + 4] for i in range(0, 32, 4))

    @gid.setter
    def gid(self, val: str) -> None:
        self.raw = _gid_bytes(val)

    def __str__(self) -> str:
        return self.gid

    def __repr__(self) -> str:
        return f"GID({self.gid!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GID) and other.raw == self.raw

    def __hash__(self) -> int:
        return hash(self.raw)


@dataclass
class GlobalRoute(PyverbsObject):
    """ibv_global_route (nicsim's default hop limit is 64; pyverbs.addr's is 1)."""

    dgid: GID | None = None
    flow_label: int = 0
    sgid_index: int = 0
    hop_limit: int = 64
    traffic_class: int = 0


class AHAttr(PyverbsObject):
    """ibv_ah_attr. `AHAttr(GlobalRoute(...))`, the form nicsim's own code uses, is a global
    address vector; without `is_global` an AHAttr is global exactly when it has a route."""

    def __init__(self, dlid: object = 0, sl: int = 0, src_path_bits: int = 0,
                 static_rate: int = 0, is_global: int | None = None, port_num: int = 1,
                 gr: GlobalRoute | None = None) -> None:
        if isinstance(dlid, GlobalRoute):
            gr, dlid = dlid, 0
        if is_global is None:
            is_global = 1 if gr is not None else 0
        if is_global and gr is None:
            raise PyverbsUserError("Global AH Attr is created but gr parameter is None")
        self.dlid = dlid
        self.sl = sl
        self.src_path_bits = src_path_bits
        self.static_rate = static_rate
        self.is_global = is_global
        self.port_num = port_num
        self.gr = gr

    def _key(self) -> tuple:
        return (self.dlid, self.sl, self.src_path_bits, self.static_rate, self.is_global,
                self.port_num, self.gr)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AHAttr) and self._key() == other._key()

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value

    def _route(self) -> GlobalRoute:
        if self.gr is None:
            self.gr = GlobalRoute()
        return self.gr

    dgid = property(lambda self: self._route().dgid,
                    lambda self, v: setattr(self._route(), "dgid", v))
    sgid_index = property(lambda self: self._route().sgid_index,
                          lambda self, v: setattr(self._route(), "sgid_index", v))
    hop_limit = property(lambda self: self._route().hop_limit,
                         lambda self, v: setattr(self._route(), "hop_limit", v))
    traffic_class = property(lambda self: self._route().traffic_class,
                             lambda self, v: setattr(self._route(), "traffic_class", v))
    flow_label = property(lambda self: self._route().flow_label,
                          lambda self, v: setattr(self._route(), "flow_label", v))

    def _av(self) -> abi.AddressVector:
        """The address vector as the kernel takes it (CREATE_AH)."""
        gr = self.gr
        dgid = gr.dgid.raw if gr is not None and gr.dgid is not None else None
        return abi.AddressVector(self.port_num, self.is_global, dgid,
                                 gr.sgid_index if gr else 0, gr.traffic_class if gr else 0,
                                 gr.hop_limit if gr else 0, gr.flow_label if gr else 0, self.sl)


# -- attributes ------------------------------------------------------------------------------


@dataclass
class QPCap(PyverbsObject):
    max_send_wr: int = 1
    max_recv_wr: int = 10
    max_send_sge: int = 1
    max_recv_sge: int = 1
    max_inline_data: int = 0


class _CapFields:
    """pyverbs' init attributes expose the capabilities directly as well (attr.max_send_wr)."""

    cap: QPCap

    max_send_wr = property(lambda self: self.cap.max_send_wr,
                           lambda self, v: setattr(self.cap, "max_send_wr", v))
    max_recv_wr = property(lambda self: self.cap.max_recv_wr,
                           lambda self, v: setattr(self.cap, "max_recv_wr", v))
    max_send_sge = property(lambda self: self.cap.max_send_sge,
                            lambda self, v: setattr(self.cap, "max_send_sge", v))
    max_recv_sge = property(lambda self: self.cap.max_recv_sge,
                            lambda self, v: setattr(self.cap, "max_recv_sge", v))
    max_inline_data = property(lambda self: self.cap.max_inline_data,
                               lambda self, v: setattr(self.cap, "max_inline_data", v))
    send_cq = property(lambda self: self.scq, lambda self, v: setattr(self, "scq", v))
    recv_cq = property(lambda self: self.rcq, lambda self, v: setattr(self, "rcq", v))


@dataclass
class QPInitAttr(_CapFields, PyverbsObject):
    """ibv_qp_init_attr (ibv_create_qp on a PD)."""

    qp_type: int = ibv_qp_type.IBV_QPT_UD
    qp_context: object = None
    scq: object = None
    rcq: object = None
    srq: object = None
    cap: QPCap = field(default_factory=QPCap)
    sq_sig_all: int = 1

    def __post_init__(self) -> None:
        if self.cap is None:
            self.cap = QPCap()


@dataclass
class QPInitAttrEx(_CapFields, PyverbsObject):
    """ibv_qp_init_attr_ex (ibv_create_qp_ex on a Context; the PD in `pd`, named by
    comp_mask)."""

    qp_type: int = ibv_qp_type.IBV_QPT_UD
    qp_context: object = None
    scq: object = None
    rcq: object = None
    srq: object = None
    cap: QPCap = field(default_factory=QPCap)
    sq_sig_all: int = 0
    comp_mask: int = 0
    pd: object = None
    xrcd: object = None
    create_flags: int = 0
    max_tso_header: int = 0
    source_qpn: int = 0
    hash_conf: object = None
    ind_table: object = None
    send_ops_flags: int = 0

    def __post_init__(self) -> None:
        if self.cap is None:
            self.cap = QPCap()


@dataclass
class QPAttr(PyverbsObject):
    """ibv_qp_attr (nicsim's defaults are those of a working RC connection; pyverbs.qp's
    QPAttr starts from zeros)."""

    qp_state: int = ibv_qp_state.IBV_QPS_INIT
    cur_qp_state: int = ibv_qp_state.IBV_QPS_RESET
    path_mtu: int = 3
    qp_access_flags: int = 0
    pkey_index: int = 0
    port_num: int = 1
    qkey: int = 0
    dest_qp_num: int = 0
    rq_psn: int = 0
    sq_psn: int = 0
    max_rd_atomic: int = 1
    max_dest_rd_atomic: int = 1
    min_rnr_timer: int = 12
    timeout: int = 14
    retry_cnt: int = 7
    rnr_retry: int = 7
    ah_attr: AHAttr | None = None
    cap: QPCap = field(default_factory=QPCap)
    path_mig_state: int = 0
    en_sqd_async_notify: int = 0
    sq_draining: int = 0
    alt_ah_attr: AHAttr | None = None
    alt_pkey_index: int = 0
    alt_port_num: int = 0
    alt_timeout: int = 0
    rate_limit: int = 0


@dataclass
class SGE(PyverbsObject):
    addr: int
    length: int
    lkey: int


@dataclass
class SendWR(PyverbsObject):
    """ibv_send_wr. set_wr_rdma / set_wr_atomic / set_wr_ud fill the opcode's part."""

    wr_id: int = 0
    opcode: int = ibv_wr_opcode.IBV_WR_SEND
    num_sge: int = 0
    imm_data: int = 0
    sg: list[SGE] | None = None
    send_flags: int = ibv_send_flags.IBV_SEND_SIGNALED
    next_wr: SendWR | None = None
    remote_addr: int = 0
    rkey: int = 0
    compare_add: int = 0
    swap: int = 0
    invalidate_rkey: int = 0
    ah: object = None  # UD: the address handle, remote QPN and Q_Key
    remote_qpn: int = 0
    remote_qkey: int = 0
    remote_srqn: int = 0  # XRC
    bind_mw: object = None  # BIND_MW: the window and its MWBindInfo (set_bind_wr)
    bind_info: object = None
    # FLUSH and ATOMIC_WRITE (set by QPEx.wr_flush / wr_atomic_write: ibv_send_wr has no
    # fields for them): the length, placement type and selectivity level; the 8 bytes.
    flush_length: int = 0
    flush_type: int = 0
    flush_level: int = 0
    atomic_wr: bytes = b""

    def set_wr_rdma(self, rkey: int, addr: int) -> None:
        self.rkey, self.remote_addr = rkey, addr

    def set_wr_atomic(self, rkey: int, addr: int, compare_add: int, swap: int = 0) -> None:
        self.rkey, self.remote_addr = rkey, addr
        self.compare_add, self.swap = compare_add, swap

    def set_wr_ud(self, ah: object, rqpn: int, rqkey: int) -> None:
        if ah is None:
            raise PyverbsUserError("set_wr_ud needs an AH")
        self.ah, self.remote_qpn, self.remote_qkey = ah, rqpn, rqkey

    def set_bind_wr(self, mw: object, bind_info: object) -> None:
        """A BIND_MW WR: the window gets the next key of its index (rkey, ibv_inc_rkey)."""
        self.bind_mw, self.bind_info = mw, bind_info
        self.rkey = inc_rkey(mw.rkey)  # type: ignore[attr-defined]

    def set_qp_type_xrc(self, remote_srqn: int) -> None:
        self.remote_srqn = remote_srqn

    @property
    def sg_list(self) -> list[SGE]:
        return list(self.sg or [])[:self.num_sge]

    @sg_list.setter
    def sg_list(self, val: SGE) -> None:
        self.sg, self.num_sge = [val], 1

    @property
    def rdma_remote_addr(self) -> int:
        return self.remote_addr

    @property
    def rdma_rkey(self) -> int:
        return self.rkey


@dataclass
class RecvWR(PyverbsObject):
    wr_id: int = 0
    num_sge: int = 0
    sg: list[SGE] | None = None
    next_wr: RecvWR | None = None

    @property
    def sg_list(self) -> list[SGE]:
        return list(self.sg or [])[:self.num_sge]

    @sg_list.setter
    def sg_list(self, val: SGE) -> None:
        self.sg, self.num_sge = [val], 1


@dataclass
class WC(PyverbsObject):
    wr_id: int = 0
    status: int = 0
    opcode: int = 0
    vendor_err: int = 0
    byte_len: int = 0
    qp_num: int = 0
    src_qp: int = 0
    imm_data: int = 0
    wc_flags: int = 0
    pkey_index: int = 0
    slid: int = 0
    sl: int = 0
    dlid_path_bits: int = 0


# -- objects ---------------------------------------------------------------------------------


class _Resource(PyverbsCM):
    """Lifetime rules of pyverbs objects: close() is idempotent, closing a parent closes its
    children first (pyverbs' close_weakrefs), and using a closed object raises
    PyverbsUserError instead of reaching freed memory (where pyverbs would pass NULL to
    libibverbs and crash). Children are held strongly, in creation order, so closing is
    deterministic; a closed child leaves its parents."""

    closed = False

    def __init__(self, *parents: _Resource) -> None:
        self._children: dict[_Resource, None] = {}
        self._parents = parents
        for p in parents:
            p._check()

    def _created(self) -> None:
        """The kernel object exists: the parents now close it with themselves."""
        for p in self._parents:
            p._children[self] = None

    def _check(self) -> None:
        if self.closed:
            raise PyverbsUserError(f"this {type(self).__name__} is closed")

    def _close_children(self) -> None:
        # QPs, then windows, before the MRs, AHs and CQs they use (ib_uverbs_cleanup_ucontext's
        # order).
        kids = sorted(self._children, key=lambda k: (not isinstance(k, QP),
                                                     not isinstance(k, MW)))
        for child in kids:
            child.close()

    def _closed_now(self) -> None:
        self.closed = True
        for p in self._parents:
            p._children.pop(self, None)

    def close(self) -> None:  # pragma: no cover - every resource defines it
        raise NotImplementedError


def _find_device(name: str) -> tuple[Host, AddressSpace]:
    """The host of device `name` in the simulated world, and the process's memory there."""
    try:
        proc = current_process()
    except NoDevicesError as e:
        raise PyverbsRDMAError(f"Failed to find device {name}: {e}") from None
    dev = proc.device(name)
    if dev is None:
        raise PyverbsRDMAError(f"Failed to find device {name}")
    return dev.host, proc.aspace(dev.host)


class Context(_Resource):
    """An opened RDMA device (ibv_open_device): Context(name='nsnic0'). nicsim's own code
    that builds a World names the host: Context('nsnic0', host=world.hosts['a'])."""

    def __init__(self, name: str | None = None, *, host: Host | None = None,
                 aspace: AddressSpace | None = None, **kwargs: object) -> None:
        super().__init__()
        if kwargs.get("cmid") is not None or kwargs.get("cmd_fd") is not None:
            raise _unsupported("Failed to import device",
                               "nsnic contexts cannot be shared between files")
        if name is None:
            raise PyverbsUserError("Device name must be provided")
        if host is None:
            host, found = _find_device(name)
            aspace = aspace or found
        self.host = host
        self.aspace = aspace or host.new_address_space()
        self.file: UverbsFile = _call(f"Failed to open device {name}", open_device, host, name,
                                      self.aspace, process.privileged())
        self.name = name
        self.qps: dict[int, ProviderQp] = {}
        # Its MRs by L_Key, as the provider checks a scattered SEND's SGEs (rings.MrInfo).
        self.mrs: MrTable = {}

    @property
    def uverbs_commands(self) -> int:
        """How many commands this context has sent into the kernel."""
        return self.file.commands

    @property
    def num_comp_vectors(self) -> int:
        self._check()
        return self.query_device().num_comp_vectors

    @property
    def cmd_fd(self) -> int:
        self._check()
        return self.file.fd

    def _q(self, what: str, req: abi.Request) -> object:
        self._check()
        return _call(what, self.file.write, req)

    def query_device(self) -> DeviceAttr:
        return DeviceAttr(self._q(f"Failed to query device {self.name}", abi.QueryDevice()))

    def query_device_ex(self, ex_input: object = None) -> DeviceAttrEx:
        c = self._q(f"Failed to query device {self.name}", abi.QueryOdpCaps())
        return DeviceAttrEx(self.query_device(), ODPCaps(
            c.general, c.rc, c.uc, c.ud, 0))  # type: ignore[attr-defined]

    def query_port(self, port_num: int = 1) -> PortAttr:
        return PortAttr(self._q(f"Failed to query port {port_num}",
                                abi.QueryPort(port_num)))

    def query_port_speed(self, port_num: int = 1) -> int:
        """The port's speed in units of 100 Mb/s."""
        return self.query_port(port_num).speed_mbps // 100

    def _gid(self, port_num: int, index: int) -> tuple[bytes, int] | None:
        """A GID table entry and its type, None if the entry is empty."""
        self._check()
        try:
            return self.file.write(abi.QueryGid(port_num, index))
        except UverbsError as e:
            if e.errno == errno.ENODATA:
                return None
            errors.last_errno = e.errno
            raise PyverbsRDMAError(f"Failed to query gid {index} of port {port_num}: {e}",
                                   e.errno) from None

    def query_gid(self, port_num: int = 1, index: int = 0) -> GID:
        """ibv_query_gid: an empty entry reads as the zero GID."""
        ent = self._gid(port_num, index)
        return GID(ent[0] if ent else None)

    def query_gid_type(self, port_num: int, index: int) -> int:
        ent = self._gid(port_num, index)
        if ent is None:
            errors.last_errno = errno.ENODATA
            raise PyverbsRDMAError(f"Failed to query gid type of port {port_num} and gid "
                                   f"index {index}", errno.ENODATA)
        return int(ent[1])

    def _entry(self, port_num: int, index: int, raw: bytes, gid_type: int) -> GIDEntry:
        # ibv_gid_entry.gid_type is ibv_gid_type (IB 0, RoCEv1 1, RoCEv2 2).
        return GIDEntry(int.from_bytes(raw[:8], "big"), int.from_bytes(raw[8:], "big"), index,
                        port_num, gid_type + 1, self.file.dev.hw.ifindex)

    def query_gid_ex(self, port_num: int, gid_index: int, flags: int = 0) -> GIDEntry:
        if flags:
            raise PyverbsRDMAError(f"Failed to query gid table of port {port_num} in index "
                                   f"{gid_index}", errno.EINVAL)
        ent = self._gid(port_num, gid_index)
        if ent is None:
            errors.last_errno = errno.ENODATA
            raise PyverbsRDMAError(f"Failed to query gid table of port {port_num} in index "
                                   f"{gid_index}", errno.ENODATA)
        return self._entry(port_num, gid_index, *ent)

    def query_gid_table(self, max_entries: int, flags: int = 0) -> list[GIDEntry]:
        """Every valid GID entry of every port; -EINVAL if they do not fit in max_entries or
        flags are unknown (ibv_query_gid_table returns a negative errno)."""
        port = self.query_port(1)
        out = []
        for i in range(port.gid_tbl_len):
            ent = self._gid(1, i)
            if ent is not None:
                out.append(self._entry(1, i, *ent))
        if flags or len(out) > max_entries:
            raise PyverbsRDMAError("Failed to query gid tables of the device", -errno.EINVAL)
        return out

    def query_pkey(self, port_num: int, index: int) -> int:
        return self._q(f"Failed to query pkey {index} of port {port_num}",
                       abi.QueryPkey(port_num, index))  # type: ignore[return-value]

    def get_pkey_index(self, port_num: int, pkey: int) -> int:
        for i in range(self.query_port(port_num).pkey_tbl_len):
            if self.query_pkey(port_num, i) == pkey:
                return i
        raise PyverbsRDMAError(f"Failed to get pkey index of pkey = {pkey} of port {port_num}")

    def query_rt_values_ex(self, comp_mask: int = 1) -> tuple[int, int]:
        raise _unsupported("Failed to query real time values",
                           "nsnic has no hardware clock a program can read")

    def get_async_event(self) -> AsyncEvent:
        """ibv_get_async_event: the next asynchronous event of this context (CQ overrun, SRQ
        limit, ...), waiting for it in simulated time."""
        ev = self._q("Failed to get async event", abi.GetAsyncEvent())
        return AsyncEvent(ev.event_type, self._element(ev.obj))  # type: ignore[attr-defined]

    def _element(self, kernel_obj: object) -> object:
        """The verbs object a kernel object belongs to (the event's element)."""
        for child in self._all():
            if getattr(child, "handle", None) == getattr(kernel_obj, "handle", -1) and \
                    not isinstance(child, (PD, MR, AH)):
                return child
        return None

    def _all(self) -> list[_Resource]:
        out, todo = [], list(self._children)
        while todo:
            c = todo.pop()
            if c not in out:
                out.append(c)
                todo.extend(c._children)
        return out

    def query_comp_cntr_caps(self) -> object:
        raise _unsupported("Failed to query comp_cntr caps", "nsnic has no completion counters")

    def alloc(self, size: int) -> int:
        """Anonymous process memory (malloc/mmap): returns its virtual address."""
        return _call("Failed to allocate memory", self.aspace.mmap, size)

    def write_mem(self, va: int, data: bytes) -> None:
        self.host.spend(len(data) / 10.0)  # memcpy at ~10 GB/s
        _call("Failed to write memory", self.aspace.write, va, data)

    def read_mem(self, va: int, n: int) -> bytes:
        self.host.spend(n / 10.0)
        return _call("Failed to read memory", self.aspace.read, va, n)

    def close(self) -> None:
        if self.closed:
            return
        self._close_children()
        self._closed_now()
        _call(f"Failed to close device {self.name}", self.file.close)


class PD(_Resource):
    """ibv_alloc_pd: PD(ctx)."""

    def __init__(self, creator: Context, **kwargs: object) -> None:
        if kwargs.get("handle") is not None:
            raise _unsupported("Failed to import PD", "nsnic objects cannot be imported")
        if not isinstance(creator, Context):
            raise PyverbsUserError(f"a PD is allocated on a Context, not {type(creator)}")
        super().__init__(creator)
        self.ctx = creator
        self.handle: int = _call("Failed to allocate PD", creator.file.write, abi.AllocPd())
        self._created()

    def advise_mr(self, advise: int, flags: int, sg_list: list[SGE]) -> None:
        """ibv_advise_mr: prefetch ranges of on-demand paging MRs of this PD (advise: an
        ibv_advise_mr_advice; flags: IBV_ADVISE_MR_FLAG_FLUSH waits for the prefetch)."""
        self._check()
        sges = [(int(s.addr), int(s.length), int(s.lkey)) for s in sg_list]
        _call("Failed to advise MR", self.ctx.file.write,
              abi.AdviseMr(self.handle, int(advise), int(flags), sges))

    def close(self) -> None:
        if self.closed:
            return
        self._close_children()
        _call("Failed to dealloc PD", self.ctx.file.write, abi.DeallocPd(self.handle))
        self._closed_now()


class AH(_Resource):
    """ibv_create_ah: AH(pd, attr=AHAttr(...)). The kernel checks the address vector and
    resolves its Ethernet destination (RoCE)."""

    def __init__(self, pd: PD, **kwargs: object) -> None:
        super().__init__(pd)
        self.pd = pd
        attr = kwargs.get("attr")
        if attr is None and kwargs.get("wc") is not None:
            attr = _ah_from_wc(pd.ctx, kwargs["wc"], int(kwargs.get("port_num", 1)),  # type: ignore
                               kwargs.get("grh"))
        if attr is None:
            raise PyverbsUserError("An AH is created from an AHAttr (attr=) or a work "
                                   "completion (wc=, port_num=, grh=)")
        if not isinstance(attr, AHAttr):
            raise PyverbsUserError(f"attr must be an AHAttr, not {type(attr)}")
        self.ah_attr = attr
        self.handle, self.av = _call("Failed to create AH", pd.ctx.file.write,
                                     abi.CreateAh(pd.handle, attr._av()))
        self._created()

    def close(self) -> None:
        if self.closed:
            return
        _call("Failed to destroy AH", self.pd.ctx.file.write, abi.DestroyAh(self.handle))
        self._closed_now()


_IPPROTO_UDP = 17  # an IPv6 GRH's next header for RoCE v2
_GRH_NXT_BTH = 0x1B  # and for RoCE v1 (IBA 8.3.1)


def _ah_from_wc(ctx: Context, wc: WC, port_num: int, grh: object) -> AHAttr:
    """ibv_init_ah_from_wc: the way back to a datagram's sender, from the GRH at the head of
    its receive buffer (RoCEv2 over IPv4: 20 reserved bytes, then the IPv4 header, its
    addresses IPv4-mapped GIDs; over IPv6: the IPv6 header; RoCE v1: the GRH, next header
    0x1B). The source GID index is the entry holding the datagram's destination GID with
    its RoCE version; the hop limit is 0xFF, as libibverbs sets it."""
    if not int(wc.wc_flags) & int(ibv_wc_flags.IBV_WC_GRH) or not isinstance(grh, int):
        errors.last_errno = errno.EINVAL
        raise PyverbsRDMAError("Failed to create AH: a RoCE completion without its GRH",
                               errno.EINVAL)
    g = ctx.read_mem(grh, 40)
    kind = GidType.ROCE_V2
    if g[:20] == bytes(20) and g[20] >> 4 == 4:
        sgid, dgid = bytes(10) + b"\xff\xff" + g[32:36], bytes(10) + b"\xff\xff" + g[36:40]
        tclass, flow = g[21], 0
    else:
        if g[6] not in (_IPPROTO_UDP, _GRH_NXT_BTH):
            errors.last_errno = errno.EPROTONOSUPPORT
            raise PyverbsRDMAError("Failed to create AH: the GRH's next header is neither UDP "
                                   "nor BTH", errno.EPROTONOSUPPORT)
        if g[6] == _GRH_NXT_BTH:
            kind = GidType.ROCE_V1
        sgid, dgid = g[8:24], g[24:40]
        tclass, flow = (g[0] & 0xF) << 4 | g[1] >> 4, int.from_bytes(g[1:4], "big") & 0xFFFFF
    index = next((i for i in range(ctx.query_port(port_num).gid_tbl_len)
                  if ctx._gid(port_num, i) == (dgid, kind)), None)
    if index is None:
        errors.last_errno = errno.EINVAL
        raise PyverbsRDMAError("Failed to create AH: the datagram's destination GID is not in "
                               "the GID table", errno.EINVAL)
    return AHAttr(is_global=1, port_num=port_num, sl=int(getattr(wc, "sl", 0)),
                  gr=GlobalRoute(dgid=GID(sgid), sgid_index=index, hop_limit=0xFF,
                                 traffic_class=tclass, flow_label=flow))


class MR(_Resource):
    """ibv_reg_mr: MR(pd, length, access[, address]). Without `address`, allocates its own
    buffer of `length` bytes, which close() frees (as pyverbs does), so its pages go back to
    the host."""

    def __init__(self, creator: PD, length: int = 0, access: int = 0,
                 address: int | None = None, implicit: bool = False,
                 **kwargs: object) -> None:
        if kwargs.get("handle") is not None:
            raise _unsupported("Failed to import MR", "nsnic objects cannot be imported")
        if not isinstance(creator, PD):
            raise PyverbsUserError(f"an MR is registered on a PD, not {type(creator)}")
        pd = creator
        super().__init__(pd)
        self.pd = pd
        self.ctx = pd.ctx
        self._own_buf = not address and length > 0 and not implicit
        if implicit:  # the whole address space, which needs on-demand paging
            self.buf, length = 0, (1 << 64) - 1
        elif address:
            self.buf = address
        elif length > 0:
            self.buf = self.ctx.alloc(length)
        else:
            self.buf = 0
        self.length = length
        try:
            self.handle, self.lkey = _call(
                f"Failed to register a MR. length: {length}, access flags: {access}",
                self.ctx.file.write, abi.RegMr(pd.handle, self.buf, length, int(access)))
        except PyverbsError:
            if self._own_buf:
                self.ctx.aspace.munmap(self.buf, length)
            raise
        self.rkey = self.lkey
        self._access = int(access)
        self._record()
        self._created()

    def _record(self) -> None:
        """Tell the provider what the MR's L_Key covers (rings.MrInfo)."""
        self.ctx.mrs[self.lkey] = MrInfo(self.pd.handle, self.buf, self.length, self._access)

    def write(self, data: bytes | str, length: int, offset: int = 0) -> None:
        if self.closed or length < 0:
            raise PyverbsUserError(f"The MR buffer isn't allocated or length {length} is "
                                   "invalid")
        b = data.encode() if isinstance(data, str) else bytes(data)
        self.ctx.write_mem(self.buf + offset, b[:length])

    def read(self, length: int, offset: int = 0) -> bytes:
        if offset < 0:
            raise PyverbsUserError(f"Invalid offset {offset}")
        if self.closed or length < 0:
            raise PyverbsUserError(f"The MR buffer isn't allocated or length {length} is "
                                   "invalid")
        return self.ctx.read_mem(self.buf + offset, length)

    def rereg(self, flags: int, pd: PD | None = None, addr: int = 0, length: int = 0,
              access: int = 0) -> None:
        """ibv_rereg_mr: a new address range, PD or access (flags: ibv_rereg_mr_flags), the
        keys unchanged; a buffer the MR allocated itself is freed when the translation
        changes, as pyverbs does."""
        self._check()
        f = int(flags)
        if f & 2 and not isinstance(pd, PD):  # IBV_REREG_MR_CHANGE_PD
            raise PyverbsUserError("IBV_REREG_MR_CHANGE_PD needs a PD")
        key = _call("Failed to rereg MR", self.ctx.file.write, abi.ReregMr(
            self.handle, f, pd.handle if f & 2 else None, int(addr),  # type: ignore[union-attr]
            int(length), int(access)))
        self.ctx.mrs.pop(self.lkey, None)
        self.lkey = self.rkey = key
        if f & 4:  # IBV_REREG_MR_CHANGE_ACCESS
            self._access = int(access)
        if f & 1:  # IBV_REREG_MR_CHANGE_TRANSLATION
            if self._own_buf:
                self.ctx.aspace.munmap(self.buf, self.length)
                self._own_buf = False
            self.buf, self.length = int(addr), int(length)
        if f & 2 and pd is not self.pd:
            self.pd._children.pop(self, None)
            self._parents = tuple(pd if p is self.pd else p for p in self._parents)
            self.pd = pd  # type: ignore[assignment]
            pd._children[self] = None  # type: ignore[union-attr]
        self._record()

    def close(self) -> None:
        if self.closed:
            return
        _call("Failed to dereg MR", self.ctx.file.write, abi.DeregMr(self.handle))
        self.ctx.mrs.pop(self.lkey, None)
        self._closed_now()
        if self._own_buf:
            self.ctx.aspace.munmap(self.buf, self.length)


class MREx(MR):
    """ibv_reg_mr_ex. A device without its own extended registration (nsnic) gets
    libibverbs' translation to ibv_reg_mr: an address range, with an IOVA equal to it;
    dma-buf, DMA handles and parent-domain buffers are not supported."""

    def __init__(self, pd: PD, length: int = 0, access: int = 0, address: int | None = None,
                 iova: int | None = None, fd: int | None = None, fd_offset: int = 0,
                 dmah: object = None, implicit: bool = False, buf: object = None,
                 **kwargs: object) -> None:
        what = "Failed to register MR using extended API"
        if buf is not None or dmah is not None:
            raise _unsupported(what, "nsnic has no parent-domain buffers or DMA handles")
        if fd is not None:
            if implicit or address:
                errors.last_errno = errno.EINVAL
                raise PyverbsRDMAError(f"{what}: an address and a dma-buf fd", errno.EINVAL)
            raise _unsupported(what, "nsnic has no dma-buf import")
        base = address or 0
        if iova is not None and iova != base:
            raise _unsupported(what, "nsnic registers MRs at their virtual address")
        try:
            super().__init__(pd, length, access, address, implicit)
        except PyverbsRDMAError as e:
            raise PyverbsRDMAError(what, e.error_code) from e


class CompChannel(_Resource):
    """ibv_create_comp_channel: CompChannel(ctx). CQs created with it queue a completion event
    on it each time they are armed (CQ.req_notify) and get a CQE; get_cq_event(cq) waits for
    one (in simulated time: the interrupt wakes the process) and counts it on the CQ, which
    acknowledges it with ack_events. Closing the channel closes its CQs first."""

    def __init__(self, context: Context) -> None:
        super().__init__(context)
        self.ctx = context
        self.handle, self.fd = _call("Failed to create a completion channel",
                                     context.file.write, abi.CreateCompChannel())
        self._created()

    def get_cq_event(self, expected_cq: CQ) -> None:
        """ibv_get_cq_event: the next completion event, which must be `expected_cq`'s."""
        self._check()
        h = _call("Failed to get CQ event", self.ctx.file.write, abi.GetCqEvent(self.handle))
        if h != expected_cq.handle:
            errors.last_errno = errno.EINVAL
            raise PyverbsRDMAError("Received event on an unexpected CQ", errno.EINVAL)
        expected_cq.num_events += 1

    def close(self) -> None:
        if self.closed:
            return
        self._close_children()
        _call("Failed to destroy a completion channel", self.ctx.file.write,
              abi.DestroyCompChannel(self.handle))
        self._closed_now()


class CQ(_Resource):
    """ibv_create_cq: CQ(ctx, cqe, cq_context=None, channel=None, comp_vector=0)."""

    def __init__(self, context: Context, cqe: int, cq_context: object = None,
                 channel: CompChannel | None = None, comp_vector: int = 0) -> None:
        if channel is not None and not isinstance(channel, CompChannel):
            raise PyverbsUserError(f"channel must be a CompChannel, not {type(channel)}")
        super().__init__(*((context,) if channel is None else (context, channel)))
        self.ctx = context
        if not isinstance(comp_vector, int) or \
                not 0 <= comp_vector < context.num_comp_vectors:
            errors.last_errno = errno.EINVAL
            raise PyverbsRDMAError(f"Failed to create a CQ: comp_vector {comp_vector} is not "
                                   f"below num_comp_vectors {context.num_comp_vectors}",
                                   errno.EINVAL)
        if isinstance(cqe, float) and cqe.is_integer():
            cqe = int(cqe)  # a C int parameter: pyverbs converts a whole float silently
        r = _call("Failed to create a CQ", context.file.write,
                  abi.CreateCq(cqe, None if channel is None else channel.handle))
        self.handle = r.handle
        self.cqn = r.cqn
        self.cq_context = cq_context
        self.channel = channel
        self.num_events = 0
        self._p = ProviderCq(context.host, context.aspace, r, context.qps, context.mrs)
        self._created()

    @property
    def cqe(self) -> int:
        """The entries the CQ holds (at least what was asked for)."""
        return self._p.size

    @property
    def comp_channel(self) -> object:
        return self.channel

    def poll(self, num_entries: int = 1) -> tuple[int, list[WC]]:
        """Polls for up to `num_entries` completions. An empty poll lets simulated time run
        until the NIC writes the CQ (or 100 us pass). When SILENT_CHECK whole windows in a row
        pass with no CQE, the CQ's state is checked: a CQ that overran is in error and will
        never complete anything again, which the device reports by an asynchronous event
        (IBV_EVENT_CQ_ERR, Context.get_async_event); a polling caller gets an error too
        rather than waiting forever. (Not at every window: the check is a system call, and
        a bulk sender that asks for a completion every 100 WRs has several silent windows
        between completions.)"""
        self._check()
        p = self._p
        wcs = [WC(w.wr_id, w.status, w.opcode, w.vendor_err, w.byte_len, w.qp_num, w.src_qp,
                  w.imm_data, w.wc_flags) for w in p.poll(num_entries)]
        if not wcs and p.silent and p.silent % SILENT_CHECK == 0:
            st = _call("Failed to poll CQ", self.ctx.file.write, abi.QueryCq(self.handle))
            if st.state == CqState.OVERRUN:
                raise PyverbsRDMAError(
                    f"poll_cq: CQ {self.cqn} overran (a completion found all {p.size} entries "
                    "full): completions were lost, the CQ and the QPs that use it are in error "
                    "(IBV_EVENT_CQ_ERR)", errno.EOVERFLOW)
        return len(wcs), wcs

    def req_notify(self, solicited_only: bool = False) -> None:
        """ibv_req_notify_cq: arm the CQ for one completion event (a doorbell write, no
        system call); with solicited_only, for its next solicited or failed completion."""
        self._check()
        self.ctx.file.doorbells.write64(
            UarReg.CQ_ARM, (self.cqn << 32) | (int(bool(solicited_only)) << 31))

    def ack_events(self, num_events: int) -> None:
        """ibv_ack_cq_events: the events taken by get_cq_event are acknowledged."""
        self._check()
        self.num_events -= num_events

    def resize(self, cqe: int) -> None:
        """ibv_resize_cq: the CQ holds at least `cqe` entries from now on, and the
        completions not polled yet are still there, in order (EINVAL if they do not fit)."""
        self._check()
        if isinstance(cqe, float) and cqe.is_integer():
            cqe = int(cqe)
        ring_va, log_size = _call("Failed to resize CQ", self.ctx.file.write,
                                  abi.ResizeCq(self.handle, cqe))
        self._p.resized(ring_va, log_size)

    def close(self) -> None:
        if self.closed:
            return
        self._close_children()  # the QPs that use it
        if self.num_events:
            self.ack_events(self.num_events)  # as pyverbs does before ibv_destroy_cq
        _call("Failed to close CQ", self.ctx.file.write, abi.DestroyCq(self.handle))
        self._closed_now()


class SRQ(_Resource):
    """ibv_create_srq: SRQ(pd, SrqInitAttr(SrqAttr(max_wr, max_sge))) or, extended,
    SRQ(ctx, SrqInitAttrEx(...)) with a basic SRQ type and its PD. QPs created with it
    receive from it; its WQEs are checked against its PD. modify(SrqAttr(srq_limit=n),
    IBV_SRQ_LIMIT) arms the limit event (Context.get_async_event gives
    IBV_EVENT_SRQ_LIMIT_REACHED once fewer than n WQEs are left)."""

    def __init__(self, creator: PD | Context, attr: object) -> None:
        what = "Failed to create SRQ"
        if isinstance(creator, Context):
            mask = int(getattr(attr, "comp_mask", 0))
            t = int(getattr(attr, "srq_type", 0)) \
                if mask & ibv_srq_init_attr_mask.IBV_SRQ_INIT_ATTR_TYPE else 0
            if t != ibv_srq_type.IBV_SRQT_BASIC or mask & ~int(
                    ibv_srq_init_attr_mask.IBV_SRQ_INIT_ATTR_TYPE
                    | ibv_srq_init_attr_mask.IBV_SRQ_INIT_ATTR_PD):
                raise _unsupported(what, f"SRQ type {t} / init mask 0x{mask:x}: nsnic has "
                                   "basic SRQs only (no XRC, no tag matching)")
            pd = getattr(attr, "pd", None)
            if not mask & ibv_srq_init_attr_mask.IBV_SRQ_INIT_ATTR_PD or \
                    not isinstance(pd, PD):
                errors.last_errno = errno.EINVAL
                raise PyverbsRDMAError(f"{what}: no PD", errno.EINVAL)
        elif isinstance(creator, PD):
            pd = creator
        else:
            raise PyverbsUserError(f"an SRQ is created on a PD or a Context, not {type(creator)}")
        a = getattr(attr, "attr", attr)
        super().__init__(pd)
        self.pd = pd
        self.ctx = ctx = pd.ctx
        r = _call(what, ctx.file.write, abi.CreateSrq(pd.handle, a.max_wr, a.max_sge,
                                                      a.srq_limit))
        self.handle = r.handle
        self.srqn = r.srqn
        self._max_sge = a.max_sge
        self._p = ProviderSrq(ctx.host, ctx.aspace, ctx.file.doorbells, r, a.max_sge)
        self._created()

    def get_srq_num(self) -> int:
        self._check()
        return self.srqn

    def post_recv(self, wr: RecvWR, bad_wr: object = None) -> None:
        self._check()
        _call("Failed to post receive to SRQ", self._p.post_recv, wr)

    def modify(self, attr: object, attr_mask: int) -> None:
        self._check()
        m = int(attr_mask)
        if m & ~int(ibv_srq_attr_mask.IBV_SRQ_MAX_WR | ibv_srq_attr_mask.IBV_SRQ_LIMIT):
            errors.last_errno = errno.EINVAL
            raise PyverbsRDMAError(f"Failed to modify SRQ: attr_mask 0x{m:x}", errno.EINVAL)
        ring_va, log_size, _max_wr = _call(
            "Failed to modify SRQ", self.ctx.file.write, abi.ModifySrq(
                self.handle, attr.max_wr if m & ibv_srq_attr_mask.IBV_SRQ_MAX_WR else None,
                attr.srq_limit if m & ibv_srq_attr_mask.IBV_SRQ_LIMIT else None))
        self._p.resized(ring_va, log_size)

    def query(self) -> object:
        self._check()
        srq, srqc = _call("Failed to query SRQ", self.ctx.file.write,
                          abi.QuerySrq(self.handle))
        return SrqAttr(srq.max_wr, srq.max_sge, srqc.limit)

    def close(self) -> None:
        if self.closed:
            return
        self._close_children()  # the QPs that receive from it
        _call("Failed to destroy SRQ", self.ctx.file.write, abi.DestroySrq(self.handle))
        self._closed_now()


class MW(_Resource):
    """ibv_alloc_mw: MW(pd, mw_type) with IBV_MW_TYPE_1 or IBV_MW_TYPE_2."""

    def __init__(self, pd: PD, mw_type: int) -> None:
        super().__init__(pd)
        self.pd = pd
        self.ctx = pd.ctx
        self.handle, self.rkey = _call("Failed to allocate MW", pd.ctx.file.write,
                                       abi.AllocMw(pd.handle, mw_type))
        self.mw_type = int(mw_type)
        self._created()

    def close(self) -> None:
        if self.closed:
            return
        _call("Failed to dealloc MW", self.ctx.file.write, abi.DeallocMw(self.handle))
        self._closed_now()


_M = ibv_qp_attr_mask
_INIT = _M.IBV_QP_PKEY_INDEX | _M.IBV_QP_PORT | _M.IBV_QP_ACCESS_FLAGS
# The attributes of each transition by QP type (what pyverbs' to_init/to_rtr/to_rts pass).
_TRANSITION_MASKS = {
    ibv_qp_type.IBV_QPT_RC: {
        "INIT": _INIT,
        "RTR": _M.IBV_QP_AV | _M.IBV_QP_PATH_MTU | _M.IBV_QP_DEST_QPN | _M.IBV_QP_RQ_PSN
        | _M.IBV_QP_MAX_DEST_RD_ATOMIC | _M.IBV_QP_MIN_RNR_TIMER,
        "RTS": _M.IBV_QP_TIMEOUT | _M.IBV_QP_RETRY_CNT | _M.IBV_QP_RNR_RETRY
        | _M.IBV_QP_SQ_PSN | _M.IBV_QP_MAX_QP_RD_ATOMIC},
    ibv_qp_type.IBV_QPT_UC: {
        "INIT": _INIT,
        "RTR": _M.IBV_QP_AV | _M.IBV_QP_PATH_MTU | _M.IBV_QP_DEST_QPN | _M.IBV_QP_RQ_PSN,
        "RTS": _M.IBV_QP_SQ_PSN},
    ibv_qp_type.IBV_QPT_UD: {
        "INIT": _M.IBV_QP_PKEY_INDEX | _M.IBV_QP_PORT | _M.IBV_QP_QKEY, "RTR": 0,
        "RTS": _M.IBV_QP_SQ_PSN},
}
_TO_INIT = _M.IBV_QP_STATE | _TRANSITION_MASKS[ibv_qp_type.IBV_QPT_RC]["INIT"]
_TO_RTR = _M.IBV_QP_STATE | _TRANSITION_MASKS[ibv_qp_type.IBV_QPT_RC]["RTR"]
_TO_RTS = _M.IBV_QP_STATE | _TRANSITION_MASKS[ibv_qp_type.IBV_QPT_RC]["RTS"]
# The init-attribute bits ibv_create_qp_ex takes on nsnic: the PD, the send operations and
# creation flags, as long as there are none (the other bits name XRC domains, TSO or RSS,
# which nsnic has not; rxe refuses any creation flag with EOPNOTSUPP the same way).
_INIT_ATTR_SUPPORTED = int(ibv_qp_init_attr_mask.IBV_QP_INIT_ATTR_PD
                           | ibv_qp_init_attr_mask.IBV_QP_INIT_ATTR_SEND_OPS_FLAGS
                           | ibv_qp_init_attr_mask.IBV_QP_INIT_ATTR_CREATE_FLAGS)
_O = ibv_qp_create_send_ops_flags
# The operations an nsnic send WQE carries (hwif.WqeOpcode), as send_ops flags.
SUPPORTED_SEND_OPS = int(_O.IBV_QP_EX_WITH_RDMA_WRITE | _O.IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
                         | _O.IBV_QP_EX_WITH_SEND | _O.IBV_QP_EX_WITH_SEND_WITH_IMM
                         | _O.IBV_QP_EX_WITH_RDMA_READ | _O.IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP
                         | _O.IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD
                         | _O.IBV_QP_EX_WITH_SEND_WITH_INV | _O.IBV_QP_EX_WITH_BIND_MW
                         | _O.IBV_QP_EX_WITH_LOCAL_INV)
# Send operations a device offers only with the matching capability (device_cap_flags_ex).
FEATURE_SEND_OPS = ((int(_O.IBV_QP_EX_WITH_FLUSH), DeviceCapEx.FLUSH_GLOBAL),
                    (int(_O.IBV_QP_EX_WITH_ATOMIC_WRITE), DeviceCapEx.ATOMIC_WRITE))


class QP(_Resource):
    """ibv_create_qp: QP(pd, QPInitAttr(...)) or QP(ctx, QPInitAttrEx(pd=..., ...)), with an
    optional QPAttr that takes the QP as far towards RTS as it can go alone (INIT for
    connected QPs, which need the peer's QPN for RTR; RTS for UD)."""

    def __init__(self, creator: PD | Context, init_attr: QPInitAttr | QPInitAttrEx,
                 qp_attr: QPAttr | None = None) -> None:
        if isinstance(creator, Context):
            if not isinstance(init_attr, QPInitAttrEx):
                raise PyverbsUserError("a QP created on a Context takes a QPInitAttrEx")
            mask = int(init_attr.comp_mask)
            ops = int(init_attr.send_ops_flags) \
                if mask & ibv_qp_init_attr_mask.IBV_QP_INIT_ATTR_SEND_OPS_FLAGS else 0
            flags = int(init_attr.create_flags) \
                if mask & ibv_qp_init_attr_mask.IBV_QP_INIT_ATTR_CREATE_FLAGS else 0
            supported = SUPPORTED_SEND_OPS
            if ops & ~supported:
                caps = creator.query_device_ex().device_cap_flags_ex
                for op, cap in FEATURE_SEND_OPS:
                    if caps & cap:
                        supported |= op
            if mask & ~_INIT_ATTR_SUPPORTED or flags or \
                    ops & ~supported:
                raise _unsupported("Failed to create QP",
                                   f"init attribute mask 0x{mask:x}, create flags "
                                   f"0x{flags:x}, send ops flags "
                                   f"0x{ops:x}: nsnic has the PD and the send operations "
                                   f"0x{supported:x} of ibv_qp_init_attr_ex")
            if not mask & _INIT_ATTR_SUPPORTED or not isinstance(init_attr.pd, PD):
                errors.last_errno = errno.EINVAL
                raise PyverbsRDMAError("Failed to create QP: no PD", errno.EINVAL)
            pd = init_attr.pd
        elif isinstance(creator, PD):
            pd = creator
        else:
            raise PyverbsUserError(f"a QP is created on a PD or a Context, not {type(creator)}")
        srq = init_attr.srq
        if srq is not None and not isinstance(srq, SRQ):
            raise PyverbsUserError(f"srq must be an SRQ, not {type(srq)}")
        if init_attr.scq is None or init_attr.rcq is None:
            errors.last_errno = errno.EINVAL
            raise PyverbsRDMAError("Failed to create QP: a QP needs a send and a receive CQ",
                                   errno.EINVAL)
        cqs = (init_attr.scq,) if init_attr.rcq is init_attr.scq else \
            (init_attr.scq, init_attr.rcq)
        super().__init__(pd, *cqs, *(() if srq is None else (srq,)))
        self.pd = pd
        self.ctx = ctx = pd.ctx
        cap = init_attr.cap
        self.init_attr = init_attr
        r = _call("Failed to create QP", ctx.file.write, abi.CreateQp(
            pd.handle, int(init_attr.qp_type), init_attr.scq.handle, init_attr.rcq.handle,
            (cap.max_send_wr, cap.max_recv_wr, cap.max_send_sge, cap.max_recv_sge,
             cap.max_inline_data), None if srq is None else srq.handle))
        self.handle = r.handle
        self.qp_num: int = r.qpn
        self._type = int(init_attr.qp_type)
        self._p = ProviderQp(ctx.host, ctx.aspace, ctx.file.doorbells, r, cap.max_send_sge,
                             cap.max_recv_sge, cap.max_inline_data, bool(init_attr.sq_sig_all),
                             ud=self._type == ibv_qp_type.IBV_QPT_UD,
                             srq=None if srq is None else srq._p,
                             atomics=ctx.file.context.atomics, pd=pd.handle)
        ctx.qps[r.qpn] = self._p
        self._created()
        if qp_attr is not None:
            if self._type == ibv_qp_type.IBV_QPT_UD:
                self.to_rts(qp_attr)
            else:
                self.to_init(qp_attr)

    @property
    def qp_state(self) -> int:
        return self._p.state

    @property
    def qp_type(self) -> int:
        return self._type

    # -- state changes (kernel) -------------------------------------------------------------

    def modify(self, qp_attr: QPAttr, attr_mask: int) -> None:
        self._check()
        q = blank_qpc(self.qp_num)
        a = qp_attr
        q.state, q.access, q.path_mtu = a.qp_state, a.qp_access_flags, a.path_mtu
        q.dest_qpn, q.rq_psn, q.sq_psn = a.dest_qp_num, a.rq_psn, a.sq_psn
        q.timeout, q.retry_cnt, q.rnr_retry = a.timeout, a.retry_cnt, a.rnr_retry
        q.min_rnr_timer, q.qkey = a.min_rnr_timer, a.qkey
        q.max_rd_atomic, q.max_dest_rd_atomic = a.max_rd_atomic, a.max_dest_rd_atomic
        if attr_mask & _M.IBV_QP_AV:
            ah = a.ah_attr
            if ah is None or ah.gr is None or ah.gr.dgid is None or not ah.is_global:
                errors.last_errno = errno.EINVAL
                raise PyverbsRDMAError("Failed to modify QP: RoCE needs a global route (GRH) "
                                       "in ah_attr", errno.EINVAL)
            gr = ah.gr
            if not (0 <= gr.traffic_class <= 0xFF and 0 <= gr.hop_limit <= 0xFF
                    and 0 <= gr.flow_label <= 0xFFFFF and 0 <= gr.sgid_index <= 0xFF):
                errors.last_errno = errno.EINVAL
                raise PyverbsRDMAError("Failed to modify QP: bad global route in ah_attr",
                                       errno.EINVAL)
            q.dgid, q.sgid_index = gr.dgid.raw, gr.sgid_index
            q.traffic_class = gr.traffic_class | gr.hop_limit << 8
        _call("Failed to modify QP", self.ctx.file.write, abi.ModifyQp(
            self.handle, q, int(attr_mask),
            a.cur_qp_state if attr_mask & _M.IBV_QP_CUR_STATE else None, a.pkey_index,
            a.port_num))
        if attr_mask & _M.IBV_QP_STATE:
            self._p.state = int(a.qp_state)
            if a.qp_state == ibv_qp_state.IBV_QPS_RESET:
                p = self._p
                p.sq_head = p.sq_tail = p.rq_head = p.rq_tail = 0
                for cq in {id(c): c for c in (self.init_attr.scq, self.init_attr.rcq)}.values():
                    cq._p.clean(self.qp_num)

    def _mask(self, step: str) -> int:
        masks = _TRANSITION_MASKS.get(self._type)
        if masks is None:  # pragma: no cover - such QPs cannot be created
            raise _unsupported("Failed to modify QP", f"QP type {self._type}")
        return int(_M.IBV_QP_STATE | masks[step])

    def to_init(self, qp_attr: QPAttr) -> None:
        qp_attr.qp_state = ibv_qp_state.IBV_QPS_INIT
        self.modify(qp_attr, self._mask("INIT"))

    def to_rtr(self, qp_attr: QPAttr) -> None:
        """To RTR, through INIT first if the QP is not there (as pyverbs does)."""
        if self.qp_state != ibv_qp_state.IBV_QPS_INIT:
            self.to_init(qp_attr)
        qp_attr.qp_state = ibv_qp_state.IBV_QPS_RTR
        self.modify(qp_attr, self._mask("RTR"))

    def to_rts(self, qp_attr: QPAttr) -> None:
        """To RTS, through INIT and RTR first if the QP is not in RTR (as pyverbs does)."""
        if self.qp_state != ibv_qp_state.IBV_QPS_RTR:
            self.to_rtr(qp_attr)
        qp_attr.qp_state = ibv_qp_state.IBV_QPS_RTS
        self.modify(qp_attr, self._mask("RTS"))

    def query(self, attr_mask: int = 0) -> tuple[QPAttr, QPInitAttr]:
        self._check()
        q: Qpc = _call("Failed to query QP", self.ctx.file.write, abi.QueryQp(self.handle))
        attr = QPAttr(qp_state=q.state, cur_qp_state=q.state, path_mtu=q.path_mtu,
                      qp_access_flags=q.access, qkey=q.qkey, dest_qp_num=q.dest_qpn,
                      rq_psn=q.rq_psn, sq_psn=q.sq_psn, max_rd_atomic=q.max_rd_atomic,
                      max_dest_rd_atomic=q.max_dest_rd_atomic, min_rnr_timer=q.min_rnr_timer,
                      timeout=q.timeout, retry_cnt=q.retry_cnt, rnr_retry=q.rnr_retry,
                      ah_attr=AHAttr(GlobalRoute(GID(q.dgid), sgid_index=q.sgid_index,
                                                 hop_limit=q.traffic_class >> 8,
                                                 traffic_class=q.traffic_class & 0xFF)),
                      cap=self._actual_caps())
        ia = self.init_attr
        init = QPInitAttr(qp_type=ia.qp_type, qp_context=ia.qp_context, scq=ia.scq, rcq=ia.rcq,
                          srq=ia.srq, cap=ia.cap, sq_sig_all=ia.sq_sig_all)
        return attr, init

    def _actual_caps(self) -> QPCap:
        """What the QP holds: whole rings, which may be more than was asked for (ibv_query_qp
        reports the provider's actual capacities, as mlx5's does)."""
        c, p = self.init_attr.cap, self._p
        return QPCap(p.sq_size, 0 if p.srq is not None else p.rq_size, c.max_send_sge,
                     c.max_recv_sge, c.max_inline_data)

    def modify_rate_limit(self, attr: object) -> None:
        self._check()
        raise _unsupported("Failed to modify QP rate limit", "nsnic has no packet pacing")

    def set_ece(self, ece: object) -> None:
        self._check()
        if getattr(ece, "vendor_id", 0) == 0:
            return
        raise _unsupported("Failed to set ECE", "nsnic has no enhanced connection options")

    def query_ece(self) -> object:
        self._check()
        raise _unsupported("Failed to query ECE", "nsnic has no enhanced connection options")

    def query_data_in_order(self, op: int, flags: int = 0) -> int:
        """Data of a message lands in host memory in order: the NIC places an RC message's
        packets in PSN order and its posted writes reach memory in order (PCIe ordering)."""
        self._check()
        return_caps = int(ibv_query_qp_data_in_order_flags.IBV_QUERY_QP_DATA_IN_ORDER_RETURN_CAPS)
        device_only = 1 << 1  # IBV_QUERY_QP_DATA_IN_ORDER_DEVICE_ONLY (verbs.h)
        if flags & ~(return_caps | device_only):
            return 0  # unknown flags: no answer (libibverbs)
        c = ibv_query_qp_data_in_order_caps
        # Whole messages in order imply every 128-byte block in order (libibverbs adds it).
        caps = int(c.IBV_QUERY_QP_DATA_IN_ORDER_WHOLE_MSG
                   | c.IBV_QUERY_QP_DATA_IN_ORDER_ALIGNED_128_BYTES)
        return caps if flags & return_caps else 1

    # -- data path (provider, no kernel) ----------------------------------------------------

    def post_send(self, wr: SendWR, bad_wr: object = None) -> None:
        self._check()
        _call("Failed to post send", self._p.post_send, wr)

    def post_recv(self, wr: RecvWR, bad_wr: object = None) -> None:
        self._check()
        _call("Failed to post recv", self._p.post_recv, wr)

    # -- multicast (kernel) -----------------------------------------------------------------

    def attach_mcast(self, gid: GID, lid: int = 0) -> None:
        """ibv_attach_mcast: this UD QP receives the group's datagrams (sent to QPN
        0xFFFFFF and the group's GID)."""
        self._mcast("Failed to attach QP to MC group", abi.AttachMcast, gid, lid)

    def detach_mcast(self, gid: GID, lid: int = 0) -> None:
        """ibv_detach_mcast."""
        self._mcast("Failed to detach QP from MC group", abi.DetachMcast, gid, lid)

    def _mcast(self, what: str, req: type[abi.AttachMcast | abi.DetachMcast], gid: GID,
               lid: int) -> None:
        self._check()
        if not isinstance(gid, GID):
            raise PyverbsUserError(f"gid must be a GID, not {type(gid)}")
        _call(what, self.ctx.file.write, req(self.handle, gid.raw, lid))

    def bind_mw(self, mw: MW, mw_bind: object) -> None:
        """ibv_bind_mw: bind a type 1 window through this QP's send queue (a BIND_MW WQE);
        the window's rkey is its next key from now on, the completion says whether the
        NIC bound it (IBV_WC_BIND_MW, or MW_BIND_ERR)."""
        self._check()
        if not isinstance(mw, MW) or mw.mw_type != 1:
            errors.last_errno = errno.EINVAL
            raise PyverbsRDMAError("Failed to Bind MW: ibv_bind_mw binds type 1 windows",
                                   errno.EINVAL)
        wr = SendWR(wr_id=mw_bind.wr_id, opcode=ibv_wr_opcode.IBV_WR_BIND_MW,  # type: ignore
                    send_flags=mw_bind.send_flags)  # type: ignore[attr-defined]
        wr.set_bind_wr(mw, mw_bind.info)  # type: ignore[attr-defined]
        _call("Failed to Bind MW", self._p.post_send, wr)
        mw.rkey = wr.rkey

    def close(self) -> None:
        if self.closed:
            return
        _call("Failed to destroy QP", self.ctx.file.write, abi.DestroyQp(self.handle))
        self._closed_now()
        self.ctx.qps.pop(self.qp_num, None)

