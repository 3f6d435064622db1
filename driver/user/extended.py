"""Extended verbs: the ibv_wr_* post-send API (QPEx) and the extended CQ (CQEX).

QPEx builds work requests between wr_start and wr_complete (ibv_qp_ex: wr_id and wr_flags
set before each builder, a builder per WR, then its SGEs, inline data or UD address) and
posts them with one doorbell at wr_complete, through the same provider path as post_send,
so the WQEs in the SQ ring are the same bytes. A QP is created with the operations it will
use (send_ops_flags: SEND, SEND_WITH_IMM, SEND_WITH_INV, RDMA_WRITE[_WITH_IMM], RDMA_READ, the
two atomics, BIND_MW, LOCAL_INV); one nsnic does not have is EOPNOTSUPP at creation, and a
builder for an operation the QP was not created with fails wr_complete with EINVAL (mlx5).

CQEX polls the same CQ ring as CQ: start_poll takes the first completion (ENOENT when there
is none, after letting simulated time run as an empty poll does), next_poll the following
ones, and the read_* methods read the current one. The fields of IBV_WC_STANDARD_FLAGS are
supported; a completion timestamp, CVLAN, flow tag or TM info is EOPNOTSUPP at creation.
"""

from __future__ import annotations

import errno

from nicsim.driver.enums import (
    IBV_WC_STANDARD_FLAGS,
    ibv_cq_init_attr_mask,
    ibv_create_cq_attr_flags,
    ibv_qp_create_send_ops_flags,
    ibv_send_flags,
    ibv_wr_opcode,
)
from nicsim.driver.user import errors
from nicsim.driver.user.errors import PyverbsRDMAError, PyverbsUserError
from nicsim.driver.user.verbs import CQ, QP, SGE, WC, Context, SendWR

_O = ibv_qp_create_send_ops_flags
_OP_FLAG = {
    ibv_wr_opcode.IBV_WR_RDMA_WRITE: _O.IBV_QP_EX_WITH_RDMA_WRITE,
    ibv_wr_opcode.IBV_WR_RDMA_WRITE_WITH_IMM: _O.IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM,
    ibv_wr_opcode.IBV_WR_SEND: _O.IBV_QP_EX_WITH_SEND,
    ibv_wr_opcode.IBV_WR_SEND_WITH_IMM: _O.IBV_QP_EX_WITH_SEND_WITH_IMM,
    ibv_wr_opcode.IBV_WR_RDMA_READ: _O.IBV_QP_EX_WITH_RDMA_READ,
    ibv_wr_opcode.IBV_WR_ATOMIC_CMP_AND_SWP: _O.IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP,
    ibv_wr_opcode.IBV_WR_ATOMIC_FETCH_AND_ADD: _O.IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD,
    ibv_wr_opcode.IBV_WR_SEND_WITH_INV: _O.IBV_QP_EX_WITH_SEND_WITH_INV,
    ibv_wr_opcode.IBV_WR_BIND_MW: _O.IBV_QP_EX_WITH_BIND_MW,
    ibv_wr_opcode.IBV_WR_LOCAL_INV: _O.IBV_QP_EX_WITH_LOCAL_INV,
    ibv_wr_opcode.IBV_WR_FLUSH: _O.IBV_QP_EX_WITH_FLUSH,
    ibv_wr_opcode.IBV_WR_ATOMIC_WRITE: _O.IBV_QP_EX_WITH_ATOMIC_WRITE,
}


def _be32(v: int) -> int:
    """pyverbs passes immediate data through htobe32; the WC gives it back as sent."""
    return int.from_bytes((v & 0xFFFFFFFF).to_bytes(4, "little"), "big")


class QPEx(QP):
    """ibv_qp_ex: QPEx(ctx, QPInitAttrEx(..., send_ops_flags=..., comp_mask=PD |
    SEND_OPS_FLAGS), qp_attr)."""

    def __init__(self, creator: object, init_attr: object, qp_attr: object = None) -> None:
        super().__init__(creator, init_attr, qp_attr)  # type: ignore[arg-type]
        self.wr_id = 0
        self.wr_flags = 0
        self.comp_mask = 0
        self._ops = int(getattr(init_attr, "send_ops_flags", 0))
        self._batch: list[SendWR] | None = None
        self._err = 0

    @property
    def ind_table(self) -> None:
        return None

    # -- the batch ----------------------------------------------------------------------------

    def wr_start(self) -> None:
        self._check()
        self._batch, self._err = [], 0

    def wr_abort(self) -> None:
        self._batch, self._err = None, 0

    def wr_complete(self) -> None:
        """Post the batch with one doorbell. A bad WR fails it with its errno; the WRs before
        it stay posted (nsnic writes WQEs in order, as ibv_post_send does)."""
        self._check()
        batch, err = self._batch, self._err
        self._batch, self._err = None, 0
        if batch is None:
            raise PyverbsRDMAError("ibv_wr_complete failed.", errno.EINVAL)
        if err:
            errors.last_errno = err
            raise PyverbsRDMAError("ibv_wr_complete failed.", err)
        if not batch:
            return
        for a, b in zip(batch, batch[1:], strict=False):
            a.next_wr = b
        try:
            self.post_send(batch[0])
        except PyverbsRDMAError as e:
            raise PyverbsRDMAError("ibv_wr_complete failed.", e.error_code) from None

    def _new(self, opcode: int, **kw: object) -> None:
        if self._batch is None:
            raise PyverbsUserError("wr_start was not called")
        if not self._ops & int(_OP_FLAG.get(opcode, 0)):
            self._err = self._err or errno.EINVAL  # not among the QP's send_ops_flags
        self._batch.append(SendWR(wr_id=self.wr_id, opcode=opcode, send_flags=self.wr_flags,
                                  **kw))

    def _last(self) -> SendWR:
        if not self._batch:
            raise PyverbsUserError("no work request to set: call a wr_* builder first")
        return self._batch[-1]

    # -- builders -----------------------------------------------------------------------------

    def wr_send(self) -> None:
        self._new(ibv_wr_opcode.IBV_WR_SEND)

    def wr_send_imm(self, data: int) -> None:
        self._new(ibv_wr_opcode.IBV_WR_SEND_WITH_IMM, imm_data=_be32(data))

    def wr_send_inv(self, invalidate_rkey: int) -> None:
        self._new(ibv_wr_opcode.IBV_WR_SEND_WITH_INV, invalidate_rkey=invalidate_rkey)

    def wr_rdma_write(self, rkey: int, remote_addr: int) -> None:
        self._new(ibv_wr_opcode.IBV_WR_RDMA_WRITE, rkey=rkey, remote_addr=remote_addr)

    def wr_rdma_write_imm(self, rkey: int, remote_addr: int, data: int) -> None:
        self._new(ibv_wr_opcode.IBV_WR_RDMA_WRITE_WITH_IMM, rkey=rkey,
                  remote_addr=remote_addr, imm_data=_be32(data))

    def wr_rdma_read(self, rkey: int, remote_addr: int) -> None:
        self._new(ibv_wr_opcode.IBV_WR_RDMA_READ, rkey=rkey, remote_addr=remote_addr)

    def wr_atomic_cmp_swp(self, rkey: int, remote_addr: int, compare: int, swap: int) -> None:
        self._new(ibv_wr_opcode.IBV_WR_ATOMIC_CMP_AND_SWP, rkey=rkey, remote_addr=remote_addr,
                  compare_add=compare, swap=swap)

    def wr_atomic_fetch_add(self, rkey: int, remote_addr: int, add: int) -> None:
        self._new(ibv_wr_opcode.IBV_WR_ATOMIC_FETCH_AND_ADD, rkey=rkey,
                  remote_addr=remote_addr, compare_add=add)

    def _lacks(self, what: str) -> None:
        """A builder for an operation nsnic has not: the batch fails with EOPNOTSUPP."""
        if self._batch is None:
            raise PyverbsUserError("wr_start was not called")
        self._err = self._err or errno.EOPNOTSUPP
        self._batch.append(SendWR(wr_id=self.wr_id))

    def wr_atomic_write(self, rkey: int, remote_addr: int, atomic_wr: bytes) -> None:
        """ibv_wr_atomic_write: the 8 bytes at atomic_wr written at remote_addr in one
        access (the responder needs REMOTE_WRITE and an 8-byte aligned address)."""
        data = atomic_wr.encode() if isinstance(atomic_wr, str) else bytes(atomic_wr)
        if len(data) < 8:
            raise PyverbsUserError(f"atomic_wr must hold 8 bytes, has {len(data)}")
        self._new(ibv_wr_opcode.IBV_WR_ATOMIC_WRITE, rkey=rkey, remote_addr=remote_addr,
                  atomic_wr=data[:8])

    def wr_flush(self, rkey: int, remote_addr: int, length: int, ptype: int,
                 level: int) -> None:
        """ibv_wr_flush: make what was written to [remote_addr, +length) (or the whole MR,
        level IBV_FLUSH_MR) visible (ptype IBV_FLUSH_GLOBAL) or persistent
        (IBV_FLUSH_PERSISTENT) at the responder before this completes."""
        self._new(ibv_wr_opcode.IBV_WR_FLUSH, rkey=rkey, remote_addr=remote_addr,
                  flush_length=length, flush_type=ptype, flush_level=level)

    def wr_send_tso(self, hdr: bytes, hdr_sz: int, mss: int) -> None:
        self._lacks("TSO")

    def wr_local_inv(self, invalidate_rkey: int) -> None:
        self._new(ibv_wr_opcode.IBV_WR_LOCAL_INV, invalidate_rkey=invalidate_rkey)

    def wr_bind_mw(self, mw: object, rkey: int, bind_info: object) -> None:
        """Bind a type 2 window `mw` under the new key `rkey` (ibv_wr_bind_mw)."""
        self._new(ibv_wr_opcode.IBV_WR_BIND_MW, rkey=rkey)
        w = self._last()
        w.bind_mw, w.bind_info = mw, bind_info

    # -- what the last WR carries -------------------------------------------------------------

    def wr_set_sge(self, sge: SGE) -> None:
        w = self._last()
        w.sg, w.num_sge = [SGE(sge.addr, sge.length, sge.lkey)], 1

    def wr_set_sge_list(self, num_sge: int, sg_list: list) -> None:
        w = self._last()
        w.sg = [SGE(s.addr, s.length, s.lkey) for s in sg_list[:num_sge]]
        w.num_sge = len(w.sg)

    def wr_set_inline_data(self, addr: int, length: int) -> None:
        """Inline data from the process's memory at `addr` (the provider copies it into
        the WQE)."""
        w = self._last()
        w.sg, w.num_sge = [SGE(addr, length, 0)], 1
        w.send_flags |= int(ibv_send_flags.IBV_SEND_INLINE)

    def wr_set_inline_data_list(self, num_buf: int, buf_list: list) -> None:
        w = self._last()
        w.sg = [SGE(b.addr, b.length, 0) for b in buf_list[:num_buf]]
        w.num_sge = len(w.sg)
        w.send_flags |= int(ibv_send_flags.IBV_SEND_INLINE)

    def wr_set_ud_addr(self, ah: object, remote_qpn: int, remote_qkey: int) -> None:
        self._last().set_wr_ud(ah, remote_qpn, remote_qkey)

    def wr_set_xrc_srqn(self, remote_srqn: int) -> None:
        self._err = self._err or errno.EOPNOTSUPP  # nsnic has no XRC


# -- CQEX --------------------------------------------------------------------------------------

_CQ_FLAGS_OK = int(ibv_create_cq_attr_flags.IBV_CREATE_CQ_ATTR_SINGLE_THREADED)


class CQEX(CQ):
    """ibv_create_cq_ex: CQEX(ctx, CqInitAttrEx(cqe, channel, comp_vector, wc_flags,
    comp_mask, flags))."""

    def __init__(self, context: Context, init_attr: object) -> None:
        what = "Failed to create extended CQ"
        a = init_attr
        wc_flags = int(getattr(a, "wc_flags", 0))
        mask = int(getattr(a, "comp_mask", 0))
        flags = int(getattr(a, "flags", 0)) \
            if mask & ibv_cq_init_attr_mask.IBV_CQ_INIT_ATTR_MASK_FLAGS else 0
        if wc_flags & ~IBV_WC_STANDARD_FLAGS:
            errors.last_errno = errno.EOPNOTSUPP
            raise PyverbsRDMAError(f"{what}: wc_flags 0x{wc_flags:x}: nsnic completions carry "
                                   "no timestamp, VLAN, flow tag or TM info", errno.EOPNOTSUPP)
        if mask & ibv_cq_init_attr_mask.IBV_CQ_INIT_ATTR_MASK_PD or flags & ~_CQ_FLAGS_OK:
            errors.last_errno = errno.EOPNOTSUPP
            raise PyverbsRDMAError(f"{what}: comp_mask 0x{mask:x} flags 0x{flags:x}: nsnic "
                                   "has no parent domains and cannot ignore overruns",
                                   errno.EOPNOTSUPP)
        try:
            super().__init__(context, a.cqe, None, a.channel, a.comp_vector)
        except PyverbsRDMAError as e:
            raise PyverbsRDMAError(f"{what}: {e}", e.error_code) from None
        self.wc_flags = wc_flags
        self._cur: WC | None = None

    def _take(self) -> int:
        n, wcs = self.poll(1)
        if not n:
            self._cur = None
            return errno.ENOENT
        self._cur = wcs[0]
        return 0

    def start_poll(self, attr: object = None) -> int:
        """ibv_start_poll: 0 with the first completion current, ENOENT if there is none."""
        return self._take()

    def poll_next(self) -> int:
        return self._take()

    def end_poll(self) -> None:
        self._cur = None

    def _wc(self) -> WC:
        if self._cur is None:
            raise PyverbsUserError("no current completion: start_poll first")
        return self._cur

    @property
    def status(self) -> int:
        return self._wc().status

    @status.setter
    def status(self, val: int) -> None:
        self._wc().status = val

    @property
    def wr_id(self) -> int:
        return self._wc().wr_id

    @wr_id.setter
    def wr_id(self, val: int) -> None:
        self._wc().wr_id = val


def _reader(name: str):  # noqa: ANN202
    def read(self: CQEX) -> int:
        return getattr(self._wc(), name)

    read.__name__ = read.__qualname__ = f"read_{name}"
    read.__doc__ = f"ibv_wc_read_{name}: the current completion's {name}."
    return read


for _name in ("opcode", "vendor_err", "byte_len", "imm_data", "qp_num", "src_qp", "wc_flags",
              "slid", "sl", "dlid_path_bits"):
    setattr(CQEX, f"read_{_name}", _reader(_name))
