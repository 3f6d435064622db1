"""The verbs library: pyverbs' classes and semantics over the nsnic provider and uverbs.

Control calls (Context, PD, MR, CQ, QP creation, modify/query) go through the uverbs command
file into the kernel; post_send, post_recv and poll go to the provider and never enter the
kernel. Errors raise PyverbsRDMAError carrying the errno pyverbs would report.

Differences from pyverbs, all because there is no real OS underneath: Context takes the
simulated `host` to open the device on; memory a program wants to use is allocated with
`Context.alloc` (or by MR, which allocates its own buffer as pyverbs does).
"""

from __future__ import annotations

import errno
import ipaddress
from dataclasses import dataclass, field

from nicsim.driver.kernel.uverbs import Cmd, UverbsError, UverbsFile, open_device
from nicsim.driver.user.enums import (
    ibv_qp_attr_mask,
    ibv_qp_state,
    ibv_qp_type,
    ibv_send_flags,
    ibv_wr_opcode,
)
from nicsim.driver.user.provider import ProviderCq, ProviderError, ProviderQp

from nicsim.host.host import Host
from nicsim.host.memory import AddressSpace, MemoryError_
from nicsim.hwif import CqState, Qpc, blank_qpc


class PyverbsError(Exception):
    pass


class PyverbsUserError(PyverbsError):
    """A misuse pyverbs itself catches, with no errno: e.g. using an object after close()."""


class PyverbsRDMAError(PyverbsError):
    """Raised when a verbs call fails; `error_code` is the errno (as in pyverbs)."""

    def __init__(self, msg: str, error_code: int = -1) -> None:
        name = errno.errorcode.get(error_code, str(error_code))
        super().__init__(f"{msg}. Errno: {error_code}, {name}")
        self.error_code = error_code


def _call(what: str, fn, *a, **kw):  # noqa: ANN001, ANN002, ANN003, ANN202
    try:
        return fn(*a, **kw)
    except (UverbsError, ProviderError, MemoryError_) as e:
        raise PyverbsRDMAError(f"{what} failed: {e}", e.errno) from None


# -- addressing ------------------------------------------------------------------------------


class GID:
    def __init__(self, val: str | bytes | None = None) -> None:
        if isinstance(val, bytes):
            self.raw = val
        elif val:
            self.raw = ipaddress.IPv6Address(val).packed
        else:
            self.raw = bytes(16)

    @property
    def gid(self) -> str:
        h = self.raw.hex()
        return ":".join(h[i:i + 4] for i in range(0, 32, 4))

    def __str__(self) -> str:
        return self.gid

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GID) and other.raw == self.raw


@dataclass
class GlobalRoute:
    dgid: GID | None = None
    flow_label: int = 0
    sgid_index: int = 0
    hop_limit: int = 64
    traffic_class: int = 0


@dataclass
class AHAttr:
    gr: GlobalRoute | None = None
    is_global: int = 1
    dlid: int = 0
    sl: int = 0
    src_path_bits: int = 0
    static_rate: int = 0
    port_num: int = 1


# -- attributes ------------------------------------------------------------------------------


@dataclass
class QPCap:
    max_send_wr: int = 1
    max_recv_wr: int = 10
    max_send_sge: int = 1
    max_recv_sge: int = 1
    max_inline_data: int = 0


@dataclass
class QPInitAttr:
    qp_type: int = ibv_qp_type.IBV_QPT_UD
    qp_context: object = None
    scq: CQ | None = None
    rcq: CQ | None = None
    srq: object = None
    cap: QPCap = field(default_factory=QPCap)
    sq_sig_all: int = 1


@dataclass
class QPAttr:
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


@dataclass
class SGE:
    addr: int
    length: int
    lkey: int


@dataclass
class SendWR:
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

    def set_wr_rdma(self, rkey: int, addr: int) -> None:
        self.rkey, self.remote_addr = rkey, addr

    def set_wr_atomic(self, rkey: int, addr: int, compare_add: int, swap: int = 0) -> None:
        self.rkey, self.remote_addr = rkey, addr
        self.compare_add, self.swap = compare_add, swap


@dataclass
class RecvWR:
    wr_id: int = 0
    num_sge: int = 0
    sg: list[SGE] | None = None
    next_wr: RecvWR | None = None


@dataclass
class WC:
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


class _Resource:
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
        # QPs before the MRs and CQs they use (ib_uverbs_cleanup_ucontext's order).
        kids = sorted(self._children, key=lambda k: not isinstance(k, QP))
        for child in kids:
            child.close()

    def _closed_now(self) -> None:
        self.closed = True
        for p in self._parents:
            p._children.pop(self, None)

    def __enter__(self):  # noqa: ANN204
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:  # pragma: no cover - every resource defines it
        raise NotImplementedError


class Context(_Resource):
    """An opened RDMA device (ibv_open_device + ibv_get_context)."""

    def __init__(self, name: str = "nsnic0", *, host: Host,
                 aspace: AddressSpace | None = None) -> None:
        super().__init__()
        self.host = host
        self.aspace = aspace or host.new_address_space()
        self.file: UverbsFile = _call("open_device", open_device, host, name, self.aspace)
        self.name = name
        self.qps: dict[int, ProviderQp] = {}

    @property
    def uverbs_commands(self) -> int:
        """How many commands this context has sent into the kernel."""
        return self.file.commands

    def query_device(self):  # noqa: ANN201
        self._check()
        return _call("query_device", self.file.write, Cmd.QUERY_DEVICE)

    def query_gid(self, port_num: int = 1, index: int = 0) -> GID:
        self._check()
        if port_num != 1:
            raise PyverbsRDMAError(f"no port {port_num}", errno.EINVAL)
        return GID(_call("query_gid", self.file.write, Cmd.QUERY_PORT, gid_index=index))

    def alloc(self, size: int) -> int:
        """Anonymous process memory (malloc/mmap): returns its virtual address."""
        return _call("alloc", self.aspace.mmap, size)

    def write_mem(self, va: int, data: bytes) -> None:
        self.host.spend(len(data) / 10.0)  # memcpy at ~10 GB/s
        _call("write_mem", self.aspace.write, va, data)

    def read_mem(self, va: int, n: int) -> bytes:
        self.host.spend(n / 10.0)
        return _call("read_mem", self.aspace.read, va, n)

    def close(self) -> None:
        if self.closed:
            return
        self._close_children()
        self._closed_now()
        _call("close", self.file.close)


class PD(_Resource):
    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.ctx = ctx
        self.handle: int = _call("alloc_pd", ctx.file.write, Cmd.ALLOC_PD)
        self._created()

    def close(self) -> None:
        if self.closed:
            return
        self._close_children()
        _call("dealloc_pd", self.ctx.file.write, Cmd.DEALLOC_PD, pd=self.handle)
        self._closed_now()


class MR(_Resource):
    """ibv_reg_mr. Without `address`, allocates its own buffer of `length` bytes, which
    close() frees (as pyverbs does), so its pages go back to the host."""

    def __init__(self, pd: PD, length: int, access: int, address: int | None = None) -> None:
        super().__init__(pd)
        self.pd = pd
        self.ctx = pd.ctx
        self.length = length
        self._own_buf = address is None
        self.buf = address if address is not None else self.ctx.alloc(length)
        try:
            self.handle, self.lkey = _call("reg_mr", self.ctx.file.write, Cmd.REG_MR,
                                           pd=pd.handle, va=self.buf, length=length,
                                           access=int(access))
        except PyverbsError:
            if self._own_buf:
                self.ctx.aspace.munmap(self.buf, length)
            raise
        self.rkey = self.lkey
        self._created()

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

    def close(self) -> None:
        if self.closed:
            return
        _call("dereg_mr", self.ctx.file.write, Cmd.DEREG_MR, mr=self.handle)
        self._closed_now()
        if self._own_buf:
            self.ctx.aspace.munmap(self.buf, self.length)


class CQ(_Resource):
    def __init__(self, ctx: Context, cqe: int, cq_context: object = None,
                 channel: object = None, comp_vector: int = 0) -> None:
        super().__init__(ctx)
        self.ctx = ctx
        r = _call("create_cq", ctx.file.write, Cmd.CREATE_CQ, cqe=cqe)
        self.handle = r.handle
        self.cqn = r.cqn
        self._p = ProviderCq(ctx.host, ctx.aspace, r, ctx.qps)
        self._created()

    def poll(self, num_entries: int = 1) -> tuple[int, list[WC]]:
        """Polls for up to `num_entries` completions. An empty poll lets simulated time run
        until the NIC writes the CQ (or 100 us pass). When a whole window passes with no
        CQE, the CQ's state is checked: a CQ that overran is in error and will never complete
        anything again, which the device reports by an asynchronous event (IBV_EVENT_CQ_ERR);
        until nicsim has event queues, this facade raises instead of letting the caller wait
        forever."""
        self._check()
        p = self._p
        wcs = [WC(w.wr_id, w.status, w.opcode, w.vendor_err, w.byte_len, w.qp_num, 0,
                  w.imm_data, w.wc_flags) for w in p.poll(num_entries)]
        if not wcs and p.silent:
            st = _call("poll_cq", self.ctx.file.write, Cmd.QUERY_CQ, cq=self.handle)
            if st.state == CqState.OVERRUN:
                raise PyverbsRDMAError(
                    f"poll_cq: CQ {self.cqn} overran (a completion found all {p.size} entries "
                    "full): completions were lost, the CQ and the QPs that use it are in error "
                    "(IBV_EVENT_CQ_ERR)", errno.EOVERFLOW)
        return len(wcs), wcs

    def close(self) -> None:
        if self.closed:
            return
        self._close_children()  # the QPs that use it
        _call("destroy_cq", self.ctx.file.write, Cmd.DESTROY_CQ, cq=self.handle)
        self._closed_now()


_M = ibv_qp_attr_mask
_TO_INIT = _M.IBV_QP_STATE | _M.IBV_QP_PKEY_INDEX | _M.IBV_QP_PORT | _M.IBV_QP_ACCESS_FLAGS
_TO_RTR = (_M.IBV_QP_STATE | _M.IBV_QP_AV | _M.IBV_QP_PATH_MTU | _M.IBV_QP_DEST_QPN
           | _M.IBV_QP_RQ_PSN | _M.IBV_QP_MAX_DEST_RD_ATOMIC | _M.IBV_QP_MIN_RNR_TIMER)
_TO_RTS = (_M.IBV_QP_STATE | _M.IBV_QP_TIMEOUT | _M.IBV_QP_RETRY_CNT | _M.IBV_QP_RNR_RETRY
           | _M.IBV_QP_SQ_PSN | _M.IBV_QP_MAX_QP_RD_ATOMIC)


class QP(_Resource):
    def __init__(self, pd: PD, init_attr: QPInitAttr, qp_attr: QPAttr | None = None) -> None:
        if init_attr.scq is None or init_attr.rcq is None:
            raise PyverbsRDMAError("a QP needs a send and a receive CQ", errno.EINVAL)
        cqs = (init_attr.scq,) if init_attr.rcq is init_attr.scq else \
            (init_attr.scq, init_attr.rcq)
        super().__init__(pd, *cqs)
        self.pd = pd
        self.ctx = ctx = pd.ctx
        cap = init_attr.cap
        self.init_attr = init_attr
        r = _call("create_qp", ctx.file.write, Cmd.CREATE_QP, pd=pd.handle,
                  qp_type=int(init_attr.qp_type), send_cq=init_attr.scq.handle,
                  recv_cq=init_attr.rcq.handle,
                  cap=(cap.max_send_wr, cap.max_recv_wr, cap.max_send_sge, cap.max_recv_sge,
                       cap.max_inline_data))
        self.handle = r.handle
        self.qp_num: int = r.qpn
        self._p = ProviderQp(ctx.host, ctx.aspace, ctx.file.doorbells, r, cap.max_send_sge,
                             cap.max_recv_sge, cap.max_inline_data, bool(init_attr.sq_sig_all))
        ctx.qps[r.qpn] = self._p
        self._created()
        if qp_attr is not None:
            self.to_init(qp_attr)

    @property
    def qp_state(self) -> int:
        return self._p.state

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
                raise PyverbsRDMAError("RoCE needs a global route (GRH) in ah_attr",
                                       errno.EINVAL)
            gr = ah.gr
            if not (0 <= gr.traffic_class <= 0xFF and 0 <= gr.hop_limit <= 0xFF
                    and 0 <= gr.flow_label <= 0xFFFFF) or gr.sgid_index != 0:
                raise PyverbsRDMAError("bad global route in ah_attr", errno.EINVAL)
            q.dgid = gr.dgid.raw
            q.traffic_class = gr.traffic_class | gr.hop_limit << 8
        _call("modify_qp", self.ctx.file.write, Cmd.MODIFY_QP, qp=self.handle, attrs=q,
              mask=int(attr_mask),
              cur_state=a.cur_qp_state if attr_mask & _M.IBV_QP_CUR_STATE else None,
              pkey_index=a.pkey_index, port=a.port_num)
        if attr_mask & _M.IBV_QP_STATE:
            self._p.state = int(a.qp_state)
            if a.qp_state == ibv_qp_state.IBV_QPS_RESET:
                p = self._p
                p.sq_head = p.sq_tail = p.rq_head = p.rq_tail = 0

    def to_init(self, qp_attr: QPAttr) -> None:
        qp_attr.qp_state = ibv_qp_state.IBV_QPS_INIT
        self.modify(qp_attr, _TO_INIT)

    def to_rtr(self, qp_attr: QPAttr) -> None:
        qp_attr.qp_state = ibv_qp_state.IBV_QPS_RTR
        self.modify(qp_attr, _TO_RTR)

    def to_rts(self, qp_attr: QPAttr) -> None:
        qp_attr.qp_state = ibv_qp_state.IBV_QPS_RTS
        self.modify(qp_attr, _TO_RTS)

    def query(self, attr_mask: int = 0) -> tuple[QPAttr, QPInitAttr]:
        self._check()
        q: Qpc = _call("query_qp", self.ctx.file.write, Cmd.QUERY_QP, qp=self.handle)
        attr = QPAttr(qp_state=q.state, cur_qp_state=q.state, path_mtu=q.path_mtu,
                      qp_access_flags=q.access, dest_qp_num=q.dest_qpn, rq_psn=q.rq_psn,
                      sq_psn=q.sq_psn, max_rd_atomic=q.max_rd_atomic,
                      max_dest_rd_atomic=q.max_dest_rd_atomic, min_rnr_timer=q.min_rnr_timer,
                      timeout=q.timeout, retry_cnt=q.retry_cnt, rnr_retry=q.rnr_retry,
                      ah_attr=AHAttr(GlobalRoute(GID(q.dgid), hop_limit=q.traffic_class >> 8,
                                                 traffic_class=q.traffic_class & 0xFF)),
                      cap=self.init_attr.cap)
        return attr, self.init_attr

    # -- data path (provider, no kernel) ----------------------------------------------------

    def post_send(self, wr: SendWR, bad_wr: object = None) -> None:
        self._check()
        _call("post_send", self._p.post_send, wr)

    def post_recv(self, wr: RecvWR, bad_wr: object = None) -> None:
        self._check()
        _call("post_recv", self._p.post_recv, wr)

    def close(self) -> None:
        if self.closed:
            return
        _call("destroy_qp", self.ctx.file.write, Cmd.DESTROY_QP, qp=self.handle)
        self._closed_now()
        self.ctx.qps.pop(self.qp_num, None)
