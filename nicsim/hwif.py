"""The hardware/software contract of the nsnic device: BAR registers, WQE/CQE layouts, commands.

Defined once and used by the NIC model, the driver and the RTL testbenches. All multi-byte
fields in host memory are little-endian. Nothing here knows about SimPy or the driver.

BAR0 register map (every register 64 bits wide, at 8-byte aligned offsets). Page 0 holds the
device's control registers, for the kernel driver only:

    0x000 DEV_ID        RO  0x6e736e69 ("nsni") << 32 | HWIF_VERSION
    0x008 CMD_OPCODE    RW  CmdOpcode of the next command
    0x010 CMD_IN        RW  physical address of the command's input block
    0x018 CMD_OUT       RW  physical address of the command's output block
    0x020 CMD_MOD       RW  command modifier (e.g. MTT start index, target QP state)
    0x028 CMD_GO        WO  write 1: run the command
    0x030 CMD_STATUS    RO  bit 63 busy; bits 7:0 CmdStatus of the last command
    0x058 INT_STATUS    RC  bit n set: EQ n has new entries
    0x060 EQ_DB         WO  (eqn << 32) | (arm << 31) | consumer index (31 bits): software
                            has taken the EQEs before the index; arm: the next EQE raises
                            the EQ's interrupt (its MSI-X write)
    0x068 FEATURES      RO  DevFeature bits 15:0; bits 31:16 the BlueFlame buffer size in
                            bytes (0, 64, 128 or 256). A device without the register reads
                            0 there (no optional feature): the driver then uses none.

Pages 1 to max_uar are the doorbell pages (UARs, user access regions), one per process that
opened the device, at uar_offset(uar, reg):

    0x000 SQ_DB         WO  (qpn << 32) | sq producer index (16 bits, wraps)
    0x008 RQ_DB         WO  (qpn << 32) | rq producer index
    0x010 CQ_ARM        WO  (cqn << 32) | (solicited_only << 31): request one completion event
    0x018 SRQ_DB        WO  (srqn << 32) | srq producer index (16 bits, wraps)
    0x100 BF            WO  BlueFlame (WQE by MMIO), if FEATURES says so: one write-combined
                            burst of 8 + n bytes (n <= the buffer size - 8, a multiple of 8):
                            bytes 0..7 the SQ_DB word that announces the WQE, bytes 8.. the
                            WQE itself (its first n bytes, as in the SQ ring: control segment,
                            then the UD address vector, then inline data or SGEs). The
                            provider still writes the WQE to the ring, so the device may
                            take the burst as a plain SQ doorbell at any time (and must when
                            the WQE is not the only one the doorbell announces); when it
                            uses the burst's copy it does not fetch that WQE by DMA.

Every QP and CQ is created with the UAR of the process that owns it (Qpc.uar, Cqc.uar), and
the device takes a doorbell for it only through that page: another process, which can map
only its own UAR, cannot move this QP's producer index or arm this CQ (mlx5 binds QPs to UARs
the same way). The SQ and RQ doorbells are on the data path: the user-space provider writes
them directly through its mmap of the doorbell page, never through the kernel. The CQ consumer
index is kept by software in a doorbell record in host memory (the CQC names its address); the
NIC reads it by DMA only when its own count says the CQ may be full.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, fields
from enum import IntEnum, IntFlag
from operator import attrgetter

HWIF_VERSION = 2  # 2: doorbells moved to per-process UAR pages
DEV_ID = (0x6E736E69 << 32) | HWIF_VERSION
PAGE_SHIFT = 12
PAGE_SIZE = 1 << PAGE_SHIFT


class Reg(IntEnum):
    DEV_ID = 0x000
    CMD_OPCODE = 0x008
    CMD_IN = 0x010
    CMD_OUT = 0x018
    CMD_MOD = 0x020
    CMD_GO = 0x028
    CMD_STATUS = 0x030
    INT_STATUS = 0x058
    EQ_DB = 0x060
    FEATURES = 0x068


class UarReg(IntEnum):
    """Registers of a doorbell page (UAR), at uar_offset(uar, reg)."""

    SQ_DB = 0x000
    RQ_DB = 0x008
    CQ_ARM = 0x010
    SRQ_DB = 0x018
    BF = 0x100


class DevFeature(IntFlag):
    """Optional features a device advertises in Reg.FEATURES (bits 15:0)."""

    BLUEFLAME = 1 << 0  # UarReg.BF takes a WQE with its doorbell
    MULTICAST = 1 << 1  # ATTACH_MCAST / DETACH_MCAST: UD multicast groups (MCAST_* limits)
    FLUSH = 1 << 2  # WqeOpcode.FLUSH and its responder side (global visibility only)
    ATOMIC_WRITE = 1 << 3  # WqeOpcode.ATOMIC_WRITE and its responder side
    ROCE_V1 = 1 << 4  # RoCE v1 framing (a GRH on Ethernet, Annex A16) beside RoCE v2: the
    #                   GID table has a v1 entry for each address (gid_table)


class GidType(IntEnum):
    """How a GID table entry is used on the wire (ibv_gid_type_sysfs: what sysfs gid_attrs
    and ibv_query_gid_type report)."""

    ROCE_V1 = 0  # IB_ROCE_V1: the GID in a GRH, Ethernet type 0x8915 (Annex A16)
    ROCE_V2 = 1  # ROCE_V2: the GID as an IP address, UDP port 4791 (Annex A17)


def link_local_gid(mac: bytes) -> bytes:
    """The port's default GID: fe80::/64 with the interface identifier made from the MAC
    (modified EUI-64, RFC 4291 appendix A: the universal/local bit flipped, ff:fe in the
    middle), as Linux gives the netdev's IPv6 link-local address."""
    return b"\xfe\x80" + bytes(6) + bytes((mac[0] ^ 2,)) + mac[1:3] + b"\xff\xfe" + mac[3:6]


def gid_table(mac: bytes, ip: bytes, roce_v1: bool) -> tuple[tuple[bytes, GidType], ...]:
    """A port's GID table, as Linux's roce_gid_mgmt fills it for a netdev with MAC `mac`
    and address `ip` (4 bytes IPv4, 16 IPv6): the link-local GID first, then the address
    (IPv4-mapped ::ffff:a.b.c.d, or the IPv6 address), each once per RoCE version the device
    has (v1 before v2). A ConnectX port reads 0 fe80::..v1, 1 fe80::..v2, 2 ::ffff:a.b.c.d v1,
    3 ::ffff:a.b.c.d v2 (so `-x 3` is RoCE v2 over IPv4); a v2-only device (rxe) 0 fe80::,
    1 ::ffff:a.b.c.d. Device and driver both derive it from the netdev's addresses."""
    addrs = [link_local_gid(mac), bytes(10) + b"\xff\xff" + ip if len(ip) == 4 else ip]
    kinds = (GidType.ROCE_V1, GidType.ROCE_V2) if roce_v1 else (GidType.ROCE_V2,)
    return tuple((a, k) for a in dict.fromkeys(addrs) for k in kinds)


BF_MAX = 256  # the largest BlueFlame buffer (doorbell word and WQE) the layout allows
FEATURES_BF_SHIFT = 16  # Reg.FEATURES bits 31:16: the BlueFlame buffer size in bytes


def bf_burst_len(wqe_len: int, bf_size: int) -> int:
    """Bytes of the BlueFlame write (UarReg.BF) that carries a WQE of `wqe_len` bytes: the
    doorbell word and the WQE, padded to 8 bytes; 0 if it does not fit a `bf_size` buffer."""
    n = 8 + ((wqe_len + 7) & ~7)
    return n if n <= bf_size else 0


def features_word(features: DevFeature, bf_size: int) -> int:
    """Reg.FEATURES for a device with `features` and a BlueFlame buffer of `bf_size` bytes."""
    return int(features) | (bf_size << FEATURES_BF_SHIFT)


UAR_BASE = PAGE_SIZE  # UAR n (n >= 1) is BAR0 page n
MAX_UAR = 1024
BAR0_SIZE = UAR_BASE + MAX_UAR * PAGE_SIZE
CMD_BUSY = 1 << 63


def uar_offset(uar: int, reg: UarReg) -> int:
    """BAR0 offset of `reg` in doorbell page `uar` (1..MAX_UAR)."""
    return uar * PAGE_SIZE + reg


class CmdOpcode(IntEnum):
    QUERY_DEVICE = 0x01  # output: DeviceCaps
    INIT_HCA = 0x02  # input: HcaInit (where the MPT and MTT tables live in host memory)
    QUERY_PORT = 0x03  # CMD_MOD = port number (1); output: PortInfo
    QUERY_ODP = 0x04  # output: OdpCaps (DevCap.ODP devices; see device_commands)
    CREATE_CQ = 0x10
    DESTROY_CQ = 0x11
    QUERY_CQ = 0x12  # CMD_MOD = CQN; output: the Cqc, with its state
    # CMD_MOD = CQN; input: a Cqc whose base and log_size are the new ring. The NIC moves the
    # CQEs software has not polled (from the doorbell record's consumer index on, its own
    # CQE writes still in flight included) to the front of the new ring, restarts its counts
    # there and zeroes the doorbell record;
    # BAD_PARAM if they do not fit. Fenced: the old ring is no longer touched when it is done.
    RESIZE_CQ = 0x13
    CREATE_QP = 0x20  # CMD_MOD = the SRQN the QP receives from (0: its own RQ)
    MODIFY_QP = 0x21
    QUERY_QP = 0x22
    DESTROY_QP = 0x23
    WRITE_MPT = 0x30  # CMD_MOD = MPT index; input: an Mpt's first MPT_SW_SIZE bytes (sw_part)
    INVALIDATE_MPT = 0x31  # CMD_MOD = MPT index
    WRITE_MTT = 0x32  # CMD_MOD = first MTT index; input: count u32, pad u32, count x u64 PA
    # On-demand paging (MptFlags.ODP regions). RESUME_PAGE_FAULT: CMD_MOD = MPT index, bit 31
    # set when the driver could not make the pages present; the work waiting on the region
    # retries. ODP_INVALIDATE: CMD_MOD = MPT index; input: OdpRange; the entries become not
    # present and every translation held through the region is revoked (fenced, as
    # INVALIDATE_MPT).
    RESUME_PAGE_FAULT = 0x33
    ODP_INVALIDATE = 0x34
    CREATE_EQ = 0x40  # input: an Eqc (devices with DeviceCaps.max_eq > 0)
    DESTROY_EQ = 0x41  # CMD_MOD = EQN
    CREATE_SRQ = 0x50  # input: an Srqc (devices with DeviceCaps.max_srq > 0)
    MODIFY_SRQ = 0x51  # CMD_MOD = SRQN; input: an Srqc, of which only `limit` is applied
    QUERY_SRQ = 0x52  # CMD_MOD = SRQN; output: the Srqc, `wqes` filled in
    DESTROY_SRQ = 0x53  # CMD_MOD = SRQN
    # CMD_MOD = SRQN; input: an Srqc whose base and log_size are the new ring (same stride,
    # no smaller). The NIC copies the WQEs it has not taken yet to their slots in the new ring
    # (a WQE's index, and so its completion, does not change); BAD_PARAM if they do not fit.
    # Fenced like RESIZE_CQ.
    RESIZE_SRQ = 0x54
    # CMD_MOD = QPN (a UD QP); input: the 16-byte multicast GID (DevFeature.MULTICAST).
    # BAD_PARAM: not a UD QP or not a multicast GID; EXCEED_LIM: MCAST_MAX_GROUPS groups or
    # MCAST_MAX_QP_ATTACH QPs in the group already; BAD_RESOURCE: detaching what is not there.
    ATTACH_MCAST = 0x60
    DETACH_MCAST = 0x61


MCAST_GID_SIZE = 16
MCAST_MAX_GROUPS = 8192  # groups a DevFeature.MULTICAST device holds (rxe's number)
MCAST_MAX_QP_ATTACH = 56  # QPs attached to one group


class CmdStatus(IntEnum):
    OK = 0x00
    BAD_OPCODE = 0x01
    BAD_PARAM = 0x02
    BAD_RESOURCE = 0x03  # no such QP/CQ/MPT index
    BAD_STATE = 0x04  # QP transition the hardware does not allow
    BUSY = 0x05  # resource in use (e.g. destroying a CQ that a QP still uses)
    EXCEED_LIM = 0x06  # index or size beyond the device's capacity


class PortState(IntEnum):
    """Logical port state (IBA 14.2.5.6, PortInfo:PortState; ibv_port_state)."""

    DOWN = 1
    INIT = 2
    ARMED = 3
    ACTIVE = 4


class PortPhysState(IntEnum):
    """Physical port state (IBA 14.2.5.6, PortInfo:PortPhysicalState)."""

    SLEEP = 1
    POLLING = 2
    DISABLED = 3
    LINK_UP = 5


class CqState(IntEnum):
    OK = 0
    OVERRUN = 1  # a completion found the CQ full: the CQ is in error (IBA 11.6.2)


class QpState(IntEnum):
    """QP states as the hardware stores them (IBA 10.3.1)."""

    RESET = 0
    INIT = 1
    RTR = 2
    RTS = 3
    SQD = 4
    SQE = 5
    ERR = 6


class QpType(IntEnum):
    RC = 2
    UC = 3
    UD = 4


class Access(IntFlag):
    """MR / QP access rights, one byte (Mpt.access, Qpc.access). Bits 0-4 have the values of
    ibv_access_flags; the flush rights (ibv_access_flags bits 8 and 9) are kept in bits 6 and
    7 (the driver translates)."""

    LOCAL_WRITE = 1
    REMOTE_WRITE = 2
    REMOTE_READ = 4
    REMOTE_ATOMIC = 8
    MW_BIND = 0x10  # (MRs) memory windows may be bound to it
    FLUSH_GLOBAL = 0x40  # FLUSH with placement type global visibility may target it
    FLUSH_PERSISTENT = 0x80  # FLUSH with placement type persistence may target it


class WqeOpcode(IntEnum):
    RDMA_WRITE = 0x00
    RDMA_WRITE_WITH_IMM = 0x01
    SEND = 0x02
    SEND_WITH_IMM = 0x03
    RDMA_READ = 0x04
    ATOMIC_CMP_AND_SWP = 0x05
    ATOMIC_FETCH_AND_ADD = 0x06
    LOCAL_INV = 0x07  # imm_inv: the memory window key to invalidate
    BIND_MW = 0x08  # see the bind fields of SendWqeCtrl
    SEND_WITH_INV = 0x09
    # Memory Placement Extensions (DevFeature.FLUSH / ATOMIC_WRITE), no SGEs:
    # FLUSH: remote_addr, rkey, compare_add the length, swap the FETH's placement type (bits
    # 3:0) and selectivity level (bits 5:4); ATOMIC_WRITE: remote_addr, rkey, swap the 8
    # bytes to write (little-endian: the bytes in memory order).
    FLUSH = 0x0E
    ATOMIC_WRITE = 0x0F


class WqeFlags(IntFlag):
    SIGNALED = 0x01
    FENCE = 0x02
    SOLICITED = 0x04
    INLINE = 0x08


class CqeOpcode(IntEnum):
    """Completion opcodes (values of ibv_wc_opcode)."""

    SEND = 0
    RDMA_WRITE = 1
    RDMA_READ = 2
    COMP_SWAP = 3
    FETCH_ADD = 4
    BIND_MW = 5
    LOCAL_INV = 6
    FLUSH = 8
    ATOMIC_WRITE = 9
    RECV = 128
    RECV_RDMA_WITH_IMM = 129


class CqeStatus(IntEnum):
    """Completion status (values of ibv_wc_status)."""

    SUCCESS = 0
    LOC_LEN_ERR = 1
    LOC_QP_OP_ERR = 2
    LOC_EEC_OP_ERR = 3
    LOC_PROT_ERR = 4
    WR_FLUSH_ERR = 5
    MW_BIND_ERR = 6
    BAD_RESP_ERR = 7
    LOC_ACCESS_ERR = 8
    REM_INV_REQ_ERR = 9
    REM_ACCESS_ERR = 10
    REM_OP_ERR = 11
    RETRY_EXC_ERR = 12
    RNR_RETRY_EXC_ERR = 13
    LOC_RDD_VIOL_ERR = 14
    REM_INV_RD_REQ_ERR = 15
    REM_ABORT_ERR = 16
    INV_EECN_ERR = 17
    INV_EEC_STATE_ERR = 18
    FATAL_ERR = 19
    RESP_TIMEOUT_ERR = 20
    GENERAL_ERR = 21


class CqeFlags(IntFlag):
    WITH_IMM = 0x01
    WITH_INV = 0x02
    GRH = 0x04
    # Scatter to CQE (DeviceCaps.cqe_inline): the received SEND's byte_len bytes are in the
    # CQE's inline area (cqe_inline_offset), not in the receive buffer; the provider copies
    # them into the receive WQE's buffers when it polls (mlx5's MLX5_INLINE_SCATTER_32 op_own
    # bit, which libmlx5's handle_responder answers with mlx5_copy_to_recv_wqe).
    SCATTERED = 0x08


class PathMtu(IntEnum):
    """IBA path MTU enumeration (ibv_mtu)."""

    MTU_256 = 1
    MTU_512 = 2
    MTU_1024 = 3
    MTU_2048 = 4
    MTU_4096 = 5

    @property
    def bytes(self) -> int:
        return 128 << self.value


# --- fixed-layout records -----------------------------------------------------------------------


class Record:
    """A dataclass with a fixed little-endian layout given by the class attribute FMT."""

    FMT: struct.Struct
    _getter: Callable[[Record], tuple]

    def pack(self) -> bytes:
        cls = type(self)
        g = cls.__dict__.get("_getter")
        if g is None:
            names = [f.name for f in fields(self)]  # type: ignore[arg-type]
            g = attrgetter(*names) if len(names) > 1 else (lambda r, n=names[0]: (getattr(r, n),))
            cls._getter = g
        return self.FMT.pack(*g(self))

    @classmethod
    def unpack(cls, buf: bytes | memoryview, offset: int = 0):  # noqa: ANN206
        return cls(*cls.FMT.unpack_from(buf, offset))

    @classmethod
    def size(cls) -> int:
        return cls.FMT.size


@dataclass(slots=True)
class Sge(Record):
    """Scatter/gather element, 16 bytes, in send and receive WQEs."""

    FMT = struct.Struct("<QII")
    addr: int
    length: int
    lkey: int


SGE_SIZE = Sge.FMT.size


@dataclass(slots=True)
class SendWqeCtrl(Record):
    """The first 48 bytes of a send WQE; `num_sge` SGEs follow (or inline data, INLINE flag).

    offset size field
      0     1   opcode (WqeOpcode)
      1     1   flags (WqeFlags)
      2     1   num_sge
      3     1   reserved
      4     4   imm_data (SEND/WRITE with immediate) or rkey to invalidate (SEND_WITH_INV)
      8     8   remote_addr (RDMA and atomics)
     16     4   rkey
     20     4   inline_len (INLINE: bytes of data following the control segment)
     24     8   compare_add (atomics: compare for CMP_SWAP, add for FETCH_ADD)
     32     8   swap
     40     4   dest_qpn (UD)
     44     4   qkey (UD)

    BIND_MW (no SGEs) uses the fields as: imm_inv the MR's L_Key, remote_addr the window's
    start, rkey the window's new R_Key (its index is the window's MPT index), compare_add
    the window's length (0: unbind), swap the window's Access rights | MW type << 8.
    """

    FMT = struct.Struct("<BBBxIQIIQQII")
    opcode: int
    flags: int
    num_sge: int
    imm_inv: int = 0
    remote_addr: int = 0
    rkey: int = 0
    inline_len: int = 0
    compare_add: int = 0
    swap: int = 0
    dest_qpn: int = 0
    qkey: int = 0


SEND_WQE_CTRL_SIZE = SendWqeCtrl.FMT.size  # 48


@dataclass(slots=True)
class RecvWqeCtrl(Record):
    """The first 16 bytes of a receive WQE; `num_sge` SGEs follow."""

    FMT = struct.Struct("<B15x")
    num_sge: int


RECV_WQE_CTRL_SIZE = RecvWqeCtrl.FMT.size  # 16


@dataclass(slots=True)
class UdAv(Record):
    """The address vector of a UD send WQE, 32 bytes, right after the control segment (UD
    QPs only; SGEs or inline data follow it). The control segment's dest_qpn and qkey name
    the remote QP and the Q_Key (a Q_Key with bit 31 set means the QP's own, IBA 10.2.5).

    offset size field
      0     6   dmac
      6     1   traffic_class (DSCP << 2 | ECN of the IP header)
      7     1   hop_limit (IP TTL / hop limit)
      8    16   dgid (IPv6, or IPv4-mapped ::ffff:a.b.c.d)
     24     4   flow_label (20 bits)
     28     1   sgid_index (the source GID and RoCE version: the port's gid_table entry)
     29     3   reserved
    """

    FMT = struct.Struct("<6sBB16sIB3x")
    dmac: bytes
    traffic_class: int
    hop_limit: int
    dgid: bytes
    flow_label: int
    sgid_index: int = 0


UD_AV_SIZE = UdAv.FMT.size  # 32


def send_wqe_stride(max_sge: int, max_inline: int = 0, ud: bool = False) -> int:
    """Bytes per send WQE slot: a power of two >= 64 holding the control segment, the UD
    address vector (UD QPs) and the SGEs or inline data."""
    need = SEND_WQE_CTRL_SIZE + (UD_AV_SIZE if ud else 0) + max(max_sge * SGE_SIZE, max_inline)
    return max(64, 1 << (need - 1).bit_length())


def recv_wqe_stride(max_sge: int) -> int:
    need = RECV_WQE_CTRL_SIZE + max_sge * SGE_SIZE
    return max(32, 1 << (need - 1).bit_length())


@dataclass(slots=True)
class Cqe(Record):
    """Completion queue entry, 32 bytes.

    offset size field
      0     4   qpn
      4     2   wqe_index (send: SQ index of the WQE; receive: RQ index)
      6     1   opcode (CqeOpcode)
      7     1   status (CqeStatus)
      8     4   byte_len
     12     4   imm_data or invalidated rkey
     16     4   src_qp (UD)
     20     1   flags (CqeFlags)
     21     1   vendor_err (a VendorErr code; 0 on success)
     22     9   reserved
     31     1   owner: bit 0 is 1 on the ring's first pass, 0 on the second, ...
    """

    FMT = struct.Struct("<IHBBIIIBB9xB")
    qpn: int
    wqe_index: int
    opcode: int
    status: int
    byte_len: int = 0
    imm_inv: int = 0
    src_qp: int = 0
    flags: int = 0
    vendor_err: int = 0
    owner: int = 0


CQE_SIZE = Cqe.FMT.size  # 32
CQE_OWNER_OFFSET = 31
# Scatter to CQE. A device whose DeviceCaps.cqe_inline is n > 0 writes every CQE in a slot of
# CQE_SIZE + n bytes (64 for n = 32): bytes 0..n-1 the inline area, then the Cqe above, so
# the owner bit stays the slot's last byte. A received SEND of at most n bytes on an RC or UC
# QP with its own RQ is written into the inline area with CqeFlags.SCATTERED: one PCIe write,
# no receive WQE scatter list read, no translation of its L_Key (nicsim.nic.responder). This
# is mlx5's scatter to CQE: 64-byte CQEs, 32 bytes of data (MLX5_RES_SCAT_DATA32_CQE, set by
# the kernel's create_user_qp for RC and UC QPs whose receive CQ has 64-byte CQEs; UD never;
# libmlx5 turns it off with MLX5_SCATTER_TO_CQE=0). A device with 0 (the RTL) writes 32-byte
# CQEs and never sets the flag.
SCATTER_CQE_SIZES = (0, 32)


def cqe_stride(cqe_inline: int) -> int:
    """Bytes per CQ ring slot on a device with DeviceCaps.cqe_inline `cqe_inline`."""
    return CQE_SIZE + cqe_inline


def cqe_offset(stride: int) -> int:
    """Where the Cqe starts in a slot of `stride` bytes (its owner bit is the slot's last
    byte); the inline area is the `stride - CQE_SIZE` bytes before it."""
    return stride - CQE_SIZE


def cqe_owner(index: int, log_size: int) -> int:
    """Owner bit the NIC writes in the CQE at producer count `index` (not wrapped)."""
    return ((index >> log_size) & 1) ^ 1


class VendorErr(IntEnum):
    """Why a completion failed, in the CQE's vendor_err byte (ibv_wc.vendor_err)."""

    NONE = 0
    BAD_LKEY = 0x10
    LKEY_PD_MISMATCH = 0x11
    LKEY_ACCESS = 0x12
    LKEY_BOUNDS = 0x13
    MTT_FAULT = 0x14
    ODP_FAULT = 0x15  # an on-demand paging region's page could not be made present
    RECV_TOO_SMALL = 0x20
    REMOTE_NAK = 0x30
    RETRY_EXCEEDED = 0x40
    RNR_EXCEEDED = 0x41
    FLUSHED = 0x50
    BAD_OPCODE = 0x60


# --- translation tables ---------------------------------------------------------------------


class MptFlags(IntFlag):
    VALID = 0x01
    MW = 0x02  # a memory window (IBA 10.6.7): allocated by the driver, bound by a BIND_MW WQE
    MW_TYPE2 = 0x04  # a type 2 window (invalidated by LOCAL_INV or SEND with invalidate)
    # On-demand paging: the region's pages are not pinned; an MTT entry of 0 (physical page
    # 0 is never a process's) is a page not present, whose access raises a page fault
    # (EqeType.PAGE_FAULT) instead of a protection error.
    ODP = 0x08


RESUME_FAILED = 1 << 31  # RESUME_PAGE_FAULT's CMD_MOD bit: the fault could not be resolved


MPT_SW_SIZE = 32  # the part of an MPT entry the driver writes (WRITE_MPT's input)


@dataclass(slots=True)
class Mpt(Record):
    """Memory protection table entry, 64 bytes, indexed by key >> 8 (the key's low byte is a
    variant that changes on every reuse of the index, so a stale key never matches).

    The first 32 bytes are what the driver writes (WRITE_MPT); the rest the NIC keeps for
    memory windows (IBA 10.6.7), as ConnectX keeps a window's QP in its mkey context:

    offset size field
      0     4   key (lkey == rkey)
      4     4   pd
      8     8   start (virtual address of byte 0 of the region)
     16     8   length
     24     4   mtt_index (first MTT entry: the page containing `start`)
     28     1   access (Access)
     29     1   flags (MptFlags)
     30     1   page_shift
     31     1   reserved
     32     4   qpn (a bound type 2 window: the QP that bound it, the only one it answers on)
     36     4   mr_index (a bound window: the MPT index of the MR it is a view of)
     40     4   windows (an MR: how many windows are bound to it; while any are, the NIC
                refuses to invalidate or rewrite it)
     44    20   reserved
    """

    FMT = struct.Struct("<IIQQIBBBxIII20x")
    key: int
    pd: int
    start: int
    length: int
    mtt_index: int
    access: int
    flags: int
    page_shift: int = PAGE_SHIFT
    qpn: int = 0
    mr_index: int = 0
    windows: int = 0

    def sw_part(self) -> bytes:
        """What WRITE_MPT carries: the driver's 32 bytes (the NIC keeps the rest)."""
        return self.pack()[:MPT_SW_SIZE]

    @classmethod
    def from_sw(cls, raw: bytes) -> Mpt:
        """The entry WRITE_MPT's input describes, with the NIC's own fields clear."""
        return cls.unpack(bytes(raw[:MPT_SW_SIZE]) + bytes(MPT_SW_SIZE))


MPT_SIZE = Mpt.FMT.size  # 64
MTT_ENTRY_SIZE = 8  # one u64 physical page address per entry


def key_index(key: int) -> int:
    return key >> 8


class XlateStatus(IntEnum):
    """Result of an address translation, in the order the checks are made."""

    OK = 0
    BAD_KEY = 1  # MPT entry not valid, or its key's variant byte differs
    PD_MISMATCH = 2
    ACCESS = 3  # the MR does not grant the access asked for
    BOUNDS = 4  # [va, va + length) is not inside [start, start + length)
    MTT_FAULT = 5  # the MPT points at MTT entries beyond the table
    PAGE_FAULT = 6  # an on-demand paging region's page is not present: the work waits
    ODP_ERROR = 7  # ... and the driver could not make it present (RESUME_FAILED)


@dataclass(slots=True)
class HcaInit(Record):
    """Input of INIT_HCA: the host-memory tables the device owns from then on (like ICM)."""

    FMT = struct.Struct("<QQII")
    mpt_base: int
    mtt_base: int
    log_mpt_entries: int
    log_mtt_entries: int


# --- contexts -------------------------------------------------------------------------------


class QpAttrMask(IntFlag):
    """Which fields of a QPC a MODIFY_QP applies (the values of ibv_qp_attr_mask)."""

    STATE = 1 << 0
    CUR_STATE = 1 << 1
    EN_SQD_ASYNC_NOTIFY = 1 << 2
    ACCESS_FLAGS = 1 << 3
    PKEY_INDEX = 1 << 4
    PORT = 1 << 5
    QKEY = 1 << 6
    AV = 1 << 7
    PATH_MTU = 1 << 8
    TIMEOUT = 1 << 9
    RETRY_CNT = 1 << 10
    RNR_RETRY = 1 << 11
    RQ_PSN = 1 << 12
    MAX_QP_RD_ATOMIC = 1 << 13
    ALT_PATH = 1 << 14
    MIN_RNR_TIMER = 1 << 15
    SQ_PSN = 1 << 16
    MAX_DEST_RD_ATOMIC = 1 << 17
    PATH_MIG_STATE = 1 << 18
    CAP = 1 << 19
    DEST_QPN = 1 << 20


@dataclass(slots=True)
class Qpc(Record):
    """QP context, 128 bytes: the input of CREATE_QP and MODIFY_QP, the output of QUERY_QP.

    CREATE_QP uses qpn, type, pd, send_cqn, recv_cqn and the ring fields; MODIFY_QP uses the
    fields named by attr_mask. Addresses: dgid/sgid are IPv6 or IPv4-mapped (::ffff:a.b.c.d).
    """

    FMT = struct.Struct("<IBBBBIIIQQBBBBBBBBIIIII6s6s16s16sHBBIIB7x")
    qpn: int
    state: int
    type: int
    path_mtu: int
    access: int
    pd: int
    send_cqn: int
    recv_cqn: int
    sq_base: int  # physical address of the (physically contiguous) SQ ring
    rq_base: int
    sq_log_size: int
    sq_log_stride: int
    rq_log_size: int
    rq_log_stride: int
    timeout: int
    retry_cnt: int
    rnr_retry: int
    min_rnr_timer: int
    dest_qpn: int
    sq_psn: int
    rq_psn: int
    qkey: int
    attr_mask: int
    dmac: bytes
    smac: bytes
    sgid: bytes
    dgid: bytes
    pkey: int
    max_rd_atomic: int
    max_dest_rd_atomic: int
    traffic_class: int  # DSCP << 2 | ECN, plus hop limit << 8
    uar: int = 0  # the doorbell page this QP's doorbells must come through (CREATE_QP)
    # The port's gid_table entry sgid is (MODIFY_QP with AV): its RoCE version. (A device
    # with v2 only, as the RTL, frames from sgid and dgid alone.)
    sgid_index: int = 0


QPC_SIZE = Qpc.FMT.size


def blank_qpc(qpn: int = 0) -> Qpc:
    return Qpc(qpn, 0, QpType.RC, PathMtu.MTU_1024, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
               0, 0, 0, 0, bytes(6), bytes(6), bytes(16), bytes(16), 0xFFFF, 0, 0, 64 << 8)


@dataclass(slots=True)
class Cqc(Record):
    """CQ context, 32 bytes: the input of CREATE_CQ (state 0) and the output of QUERY_CQ."""

    FMT = struct.Struct("<IBBxxQQII")
    cqn: int
    log_size: int
    state: int  # CqState
    base: int  # physical address of the CQ ring (physically contiguous)
    dbrec: int  # physical address of the u32 consumer-index doorbell record
    eqn: int
    uar: int = 0  # the doorbell page CQ_ARM for this CQ must come through


CQC_SIZE = Cqc.FMT.size


GSI_QPN = 1  # QP1, the General Services Interface QP (IBA 13.5): a UD QP every device has

class DevCap(IntFlag):
    """DeviceCaps.flags: optional command sets a device has (beside the counts of DeviceCaps).
    A device without one answers its commands BAD_OPCODE; the driver never issues them."""

    ODP = 1 << 0  # on-demand paging: QUERY_ODP, RESUME_PAGE_FAULT, ODP_INVALIDATE
    # What a device lacks that the verbs otherwise assume (set: it lacks it; a device that
    # predates these bits, as the RTL, reads 0 and has them):
    NO_UD = 1 << 1  # no UD QPs but QP1, the CM's (CREATE_QP of another UD QP: BAD_PARAM)
    NO_UC = 1 << 2  # no UC QPs (CREATE_QP: BAD_PARAM)
    NO_ATOMICS = 1 << 3  # no atomics either way: a WQE is a local QP operation error, a
    #                      request gets a NAK invalid request


@dataclass(slots=True)
class DeviceCaps(Record):
    """Output of QUERY_DEVICE, 56 bytes: what the device has. A zero max_eq means no event
    queues (CREATE_EQ and DESTROY_EQ are BAD_OPCODE: no completion or asynchronous events),
    a zero max_srq no SRQs (the SRQ commands are BAD_OPCODE), as mlx5's HCA capabilities
    (log_max_eq, log_max_srq, the pg bit) tell its driver which commands exist.

    offset size field
      0     4   max_qp (QPNs 0..max_qp-1)
      4     4   max_cq (CQNs 0..max_cq-1)
      8     4   max_mpt (MPT entries INIT_HCA may ask for)
     12     4   max_mtt (MTT entries INIT_HCA may ask for)
     16     4   max_qp_wr
     20     4   max_sge
     24     4   max_cqe
     28     4   max_qp_rd_atom
     32     4   max_inline
     36     4   max_uar
     40     4   max_eq (EQNs 0..max_eq-1; 0: no event queues)
     44     4   max_srq (SRQNs 1..max_srq-1; 0: no SRQs)
     48     4   flags (DevCap)
     52     4   cqe_inline: bytes of a received SEND the device writes into the CQE instead
                of the receive buffer (scatter to CQE, CqeFlags.SCATTERED); its CQ ring slots
                are CQE_SIZE + cqe_inline bytes (cqe_stride). 0: none, 32-byte CQEs (a device
                that predates the field, as the RTL, reads 0 here)
    """

    FMT = struct.Struct("<IIIIIIIIIIIIII")
    max_qp: int
    max_cq: int
    max_mpt: int
    max_mtt: int
    max_qp_wr: int
    max_sge: int
    max_cqe: int
    max_qp_rd_atom: int
    max_inline: int
    max_uar: int
    max_eq: int = 0
    max_srq: int = 0
    flags: int = 0  # DevCap
    cqe_inline: int = 0  # scatter to CQE: 0 or 32 (SCATTER_CQE_SIZES)


def device_commands(caps: DeviceCaps, features: DevFeature) -> frozenset[CmdOpcode]:
    """The commands a device with these capabilities (QUERY_DEVICE) and features
    (Reg.FEATURES) executes; it answers every other opcode BAD_OPCODE, and a driver issues
    none of them."""
    C = CmdOpcode
    lacks: set[CmdOpcode] = set()
    if not caps.flags & DevCap.ODP:
        lacks |= {C.QUERY_ODP, C.RESUME_PAGE_FAULT, C.ODP_INVALIDATE}
    if not caps.max_eq:
        lacks |= {C.CREATE_EQ, C.DESTROY_EQ}
    if not caps.max_srq:
        lacks |= {C.CREATE_SRQ, C.MODIFY_SRQ, C.QUERY_SRQ, C.DESTROY_SRQ, C.RESIZE_SRQ}
    if DevFeature.MULTICAST not in features:
        lacks |= {C.ATTACH_MCAST, C.DETACH_MCAST}
    return frozenset(set(C) - lacks)


@dataclass(slots=True)
class PortInfo(Record):
    """Output of QUERY_PORT: what the port's PHY and MAC know (an Ethernet port: RoCE).

    offset size field
      0     1   state (PortState): ACTIVE when the link is up
      1     1   phys_state (PortPhysState)
      2     1   max_mtu (PathMtu): the largest RoCE path MTU the port's frames can carry
      3     1   reserved
      4     4   speed_mbps: the link's rate in Mb/s (0 when down)
    """

    FMT = struct.Struct("<BBBxI")
    state: int
    phys_state: int
    max_mtu: int
    speed_mbps: int


def pack_mtt(pas: list[int]) -> bytes:
    return struct.pack(f"<II{len(pas)}Q", len(pas), 0, *pas)


def unpack_mtt(buf: bytes | memoryview) -> list[int]:
    (n,) = struct.unpack_from("<I", buf, 0)
    return list(struct.unpack_from(f"<{n}Q", buf, 8))


WQE_INDEX_MASK = 0xFFFF


@dataclass(slots=True)
class Srqc(Record):
    """SRQ context, 32 bytes: the input of CREATE_SRQ and MODIFY_SRQ, the output of QUERY_SRQ.
    An SRQ is a receive ring (receive WQEs as in an RQ) that several QPs take WQEs from in
    ring order (IBA 10.2.9). Its L_Keys are checked against the SRQ's PD. `limit` arms the
    SRQ limit: when a WQE taken leaves fewer than `limit` WQEs, the device reports
    SRQ_LIMIT_REACHED (an asynchronous event on EQ 0) and disarms it (limit 0)."""

    FMT = struct.Struct("<IIQBBxxIII")
    srqn: int
    pd: int
    base: int  # physical address of the ring (physically contiguous)
    log_size: int
    log_stride: int
    limit: int
    uar: int  # the doorbell page SRQ_DB for this SRQ must come through
    wqes: int = 0  # QUERY_SRQ: WQEs posted and not yet taken


# --- event queues ---------------------------------------------------------------------------


class EqeType(IntEnum):
    """What an event queue entry reports. COMPLETION is a CQ's completion event (IBA 11.4.2.2:
    an armed CQ got a CQE); the others are asynchronous events (IBA 11.6.3) and carry the
    value of ibv_event_type."""

    CQ_ERR = 0  # a CQ overran (IBA 11.6.2); obj = CQN
    QP_FATAL = 1  # a QP went to ERR through a local error; obj = QPN
    PORT_ACTIVE = 9
    PORT_ERR = 10
    SRQ_LIMIT_REACHED = 15  # an SRQ's WQE count fell below its armed limit; obj = SRQN
    COMPLETION = 0x80  # obj = CQN
    # For the driver itself, on ODP_EQN: a page fault (the layout is PageFaultEqe).
    PAGE_FAULT = 0x81


@dataclass(slots=True)
class Eqe(Record):
    """Event queue entry, 16 bytes. The owner bit flips on every pass over the ring, as in a CQE.

    offset size field
      0     1   type (EqeType)
      1     3   reserved
      4     4   obj (CQN, QPN, SRQN or port number, by type)
      8     7   reserved
     15     1   owner: bit 0 is 1 on the ring's first pass, 0 on the second, ...
    """

    FMT = struct.Struct("<B3xI7xB")
    type: int
    obj: int
    owner: int = 0


EQE_SIZE = Eqe.FMT.size  # 16
EQE_OWNER_OFFSET = 15
ODP_EQN = 1  # page faults go to this EQ, which the driver creates when it enables ODP


class FaultFlags(IntFlag):
    WRITE = 0x01  # the access that faulted writes the pages (they must be writable)


@dataclass(slots=True)
class PageFaultEqe(Record):
    """An EQE of type PAGE_FAULT, 16 bytes (type, obj and owner where every EQE has them).

    offset size field
      0     1   type (EqeType.PAGE_FAULT)
      1     1   flags (FaultFlags)
      2     2   npages: pages from `page` on that the access needs
      4     4   obj: the MPT index of the region
      8     4   page: the first page not present, counted from the region's first page
     12     3   reserved
     15     1   owner
    """

    FMT = struct.Struct("<BBHII3xB")
    type: int
    flags: int
    npages: int
    obj: int
    page: int
    owner: int = 0


@dataclass(slots=True)
class OdpRange(Record):
    """Input of ODP_INVALIDATE: MTT entries [first, first + count) of the region."""

    FMT = struct.Struct("<II")
    first: int
    count: int


class OdpGeneral(IntFlag):
    """General on-demand paging capabilities (the values of ibv_odp_general_caps)."""

    SUPPORT = 1  # ODP regions
    SUPPORT_IMPLICIT = 2  # a region for the whole address space


class OdpTransport(IntFlag):
    """What an ODP region may be used for, per transport (ibv_odp_transport_cap_bits)."""

    SEND = 1
    RECV = 2
    WRITE = 4
    READ = 8
    ATOMIC = 16
    SRQ_RECV = 32
    FLUSH = 64
    ATOMIC_WRITE = 128


@dataclass(slots=True)
class OdpCaps(Record):
    """Output of QUERY_ODP: what the device's page-fault handling covers."""

    FMT = struct.Struct("<IIII")
    general: int
    rc: int
    uc: int
    ud: int


@dataclass(slots=True)
class Eqc(Record):
    """EQ context, 32 bytes: the input of CREATE_EQ. Every CQ reports to the EQ its Cqc names;
    asynchronous events go to EQ 0. The interrupt is an MSI-X message: a 4-byte DMA write of
    msi_data to msi_addr (PCIe MSI-X is a posted memory write), raised for the first EQE after
    the EQ is armed (EQ_DB) and at most once per `moderation_ns` (interrupt moderation)."""

    FMT = struct.Struct("<IBxxxQQII")
    eqn: int
    log_size: int
    base: int  # physical address of the EQ ring (physically contiguous)
    msi_addr: int
    msi_data: int
    moderation_ns: int = 0

