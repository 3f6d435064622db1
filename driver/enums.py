"""libibverbs' enumerations with pyverbs' names (pyverbs.libibverbs_enums), every one of them.

The values are libibverbs' (infiniband/verbs.h and the headers it includes, driver.h's
ibv_gid_type_sysfs, tm_types.h's ibv_tmh_op): a program passes them to the verbs and compares
what comes back with them, so they are part of the interface. Enumerations of bits are IntFlag,
the others IntEnum; every member is also a module-level name, as in pyverbs.
"""

from __future__ import annotations

from enum import IntEnum, IntFlag

# ruff: noqa: E501


class ibv_transport_type(IntEnum):  # noqa: N801
    IBV_TRANSPORT_UNKNOWN = -1
    IBV_TRANSPORT_IB = 0
    IBV_TRANSPORT_IWARP = 1
    IBV_TRANSPORT_USNIC = 2
    IBV_TRANSPORT_USNIC_UDP = 3


class ibv_node_type(IntEnum):  # noqa: N801
    IBV_NODE_UNKNOWN = -1
    IBV_NODE_CA = 1
    IBV_NODE_SWITCH = 2
    IBV_NODE_ROUTER = 3
    IBV_NODE_RNIC = 4
    IBV_NODE_USNIC = 5
    IBV_NODE_USNIC_UDP = 6
    IBV_NODE_UNSPECIFIED = 7
IBV_LINK_LAYER_UNSPECIFIED = 0
IBV_LINK_LAYER_INFINIBAND = 1
IBV_LINK_LAYER_ETHERNET = 2



class ibv_atomic_cap(IntEnum):  # noqa: N801
    IBV_ATOMIC_NONE = 0
    IBV_ATOMIC_HCA = 1
    IBV_ATOMIC_GLOB = 2


class ibv_port_state(IntEnum):  # noqa: N801
    IBV_PORT_NOP = 0
    IBV_PORT_DOWN = 1
    IBV_PORT_INIT = 2
    IBV_PORT_ARMED = 3
    IBV_PORT_ACTIVE = 4
    IBV_PORT_ACTIVE_DEFER = 5


class ibv_port_cap_flags(IntFlag):  # noqa: N801
    IBV_PORT_SM = 2
    IBV_PORT_NOTICE_SUP = 4
    IBV_PORT_TRAP_SUP = 8
    IBV_PORT_OPT_IPD_SUP = 16
    IBV_PORT_AUTO_MIGR_SUP = 32
    IBV_PORT_SL_MAP_SUP = 64
    IBV_PORT_MKEY_NVRAM = 128
    IBV_PORT_PKEY_NVRAM = 256
    IBV_PORT_LED_INFO_SUP = 512
    IBV_PORT_SYS_IMAGE_GUID_SUP = 2048
    IBV_PORT_PKEY_SW_EXT_PORT_TRAP_SUP = 4096
    IBV_PORT_EXTENDED_SPEEDS_SUP = 16384
    IBV_PORT_CAP_MASK2_SUP = 32768
    IBV_PORT_CM_SUP = 65536
    IBV_PORT_SNMP_TUNNEL_SUP = 131072
    IBV_PORT_REINIT_SUP = 262144
    IBV_PORT_DEVICE_MGMT_SUP = 524288
    IBV_PORT_VENDOR_CLASS_SUP = 1048576
    IBV_PORT_DR_NOTICE_SUP = 2097152
    IBV_PORT_CAP_MASK_NOTICE_SUP = 4194304
    IBV_PORT_BOOT_MGMT_SUP = 8388608
    IBV_PORT_LINK_LATENCY_SUP = 16777216
    IBV_PORT_CLIENT_REG_SUP = 33554432
    IBV_PORT_IP_BASED_GIDS = 67108864


class ibv_port_cap_flags2(IntFlag):  # noqa: N801
    IBV_PORT_SET_NODE_DESC_SUP = 1
    IBV_PORT_INFO_EXT_SUP = 2
    IBV_PORT_VIRT_SUP = 4
    IBV_PORT_SWITCH_PORT_STATE_TABLE_SUP = 8
    IBV_PORT_LINK_WIDTH_2X_SUP = 16
    IBV_PORT_LINK_SPEED_HDR_SUP = 32
    IBV_PORT_LINK_SPEED_NDR_SUP = 1024


class ibv_mtu(IntEnum):  # noqa: N801
    IBV_MTU_256 = 1
    IBV_MTU_512 = 2
    IBV_MTU_1024 = 3
    IBV_MTU_2048 = 4
    IBV_MTU_4096 = 5


class ibv_event_type(IntEnum):  # noqa: N801
    IBV_EVENT_CQ_ERR = 0
    IBV_EVENT_QP_FATAL = 1
    IBV_EVENT_QP_REQ_ERR = 2
    IBV_EVENT_QP_ACCESS_ERR = 3
    IBV_EVENT_COMM_EST = 4
    IBV_EVENT_SQ_DRAINED = 5
    IBV_EVENT_PATH_MIG = 6
    IBV_EVENT_PATH_MIG_ERR = 7
    IBV_EVENT_DEVICE_FATAL = 8
    IBV_EVENT_PORT_ACTIVE = 9
    IBV_EVENT_PORT_ERR = 10
    IBV_EVENT_LID_CHANGE = 11
    IBV_EVENT_PKEY_CHANGE = 12
    IBV_EVENT_SM_CHANGE = 13
    IBV_EVENT_SRQ_ERR = 14
    IBV_EVENT_SRQ_LIMIT_REACHED = 15
    IBV_EVENT_QP_LAST_WQE_REACHED = 16
    IBV_EVENT_CLIENT_REREGISTER = 17
    IBV_EVENT_GID_CHANGE = 18
    IBV_EVENT_WQ_FATAL = 19
    IBV_EVENT_DEVICE_SPEED_CHANGE = 20


class ibv_access_flags(IntFlag):  # noqa: N801
    IBV_ACCESS_LOCAL_WRITE = 1
    IBV_ACCESS_REMOTE_WRITE = 2
    IBV_ACCESS_REMOTE_READ = 4
    IBV_ACCESS_REMOTE_ATOMIC = 8
    IBV_ACCESS_MW_BIND = 16
    IBV_ACCESS_ZERO_BASED = 32
    IBV_ACCESS_ON_DEMAND = 64
    IBV_ACCESS_HUGETLB = 128
    IBV_ACCESS_FLUSH_GLOBAL = 256
    IBV_ACCESS_FLUSH_PERSISTENT = 512
    IBV_ACCESS_RELAXED_ORDERING = 1048576


class ibv_rereg_mr_flags(IntFlag):  # noqa: N801
    IBV_REREG_MR_CHANGE_TRANSLATION = 1
    IBV_REREG_MR_CHANGE_PD = 2
    IBV_REREG_MR_CHANGE_ACCESS = 4


class ibv_rereg_mr_err_code(IntEnum):  # noqa: N801
    IBV_REREG_MR_ERR_INPUT = -1
    IBV_REREG_MR_ERR_DONT_FORK_NEW = -2
    IBV_REREG_MR_ERR_DO_FORK_OLD = -3
    IBV_REREG_MR_ERR_CMD = -4
    IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW = -5


class ibv_wr_opcode(IntEnum):  # noqa: N801
    IBV_WR_RDMA_WRITE = 0
    IBV_WR_RDMA_WRITE_WITH_IMM = 1
    IBV_WR_SEND = 2
    IBV_WR_SEND_WITH_IMM = 3
    IBV_WR_RDMA_READ = 4
    IBV_WR_ATOMIC_CMP_AND_SWP = 5
    IBV_WR_ATOMIC_FETCH_AND_ADD = 6
    IBV_WR_LOCAL_INV = 7
    IBV_WR_BIND_MW = 8
    IBV_WR_SEND_WITH_INV = 9
    IBV_WR_TSO = 10
    IBV_WR_FLUSH = 14
    IBV_WR_ATOMIC_WRITE = 15


class ibv_ops_wr_opcode(IntEnum):  # noqa: N801
    IBV_WR_TAG_ADD = 0
    IBV_WR_TAG_DEL = 1
    IBV_WR_TAG_SYNC = 2


class ibv_ops_flags(IntFlag):  # noqa: N801
    IBV_OPS_SIGNALED = 1
    IBV_OPS_TM_SYNC = 2


class ibv_send_flags(IntFlag):  # noqa: N801
    IBV_SEND_FENCE = 1
    IBV_SEND_SIGNALED = 2
    IBV_SEND_SOLICITED = 4
    IBV_SEND_INLINE = 8
    IBV_SEND_IP_CSUM = 16


class ibv_tm_cap_flags(IntEnum):  # noqa: N801
    IBV_TM_CAP_RC = 1


class ibv_qp_type(IntEnum):  # noqa: N801
    IBV_QPT_RC = 2
    IBV_QPT_UC = 3
    IBV_QPT_UD = 4
    IBV_QPT_RAW_PACKET = 8
    IBV_QPT_XRC_SEND = 9
    IBV_QPT_XRC_RECV = 10
    IBV_QPT_DRIVER = 255


class ibv_qp_state(IntEnum):  # noqa: N801
    IBV_QPS_RESET = 0
    IBV_QPS_INIT = 1
    IBV_QPS_RTR = 2
    IBV_QPS_RTS = 3
    IBV_QPS_SQD = 4
    IBV_QPS_SQE = 5
    IBV_QPS_ERR = 6
    IBV_QPS_UNKNOWN = 7


class ibv_mw_type(IntEnum):  # noqa: N801
    IBV_MW_TYPE_1 = 1
    IBV_MW_TYPE_2 = 2


class ibv_wc_status(IntEnum):  # noqa: N801
    IBV_WC_SUCCESS = 0
    IBV_WC_LOC_LEN_ERR = 1
    IBV_WC_LOC_QP_OP_ERR = 2
    IBV_WC_LOC_EEC_OP_ERR = 3
    IBV_WC_LOC_PROT_ERR = 4
    IBV_WC_WR_FLUSH_ERR = 5
    IBV_WC_MW_BIND_ERR = 6
    IBV_WC_BAD_RESP_ERR = 7
    IBV_WC_LOC_ACCESS_ERR = 8
    IBV_WC_REM_INV_REQ_ERR = 9
    IBV_WC_REM_ACCESS_ERR = 10
    IBV_WC_REM_OP_ERR = 11
    IBV_WC_RETRY_EXC_ERR = 12
    IBV_WC_RNR_RETRY_EXC_ERR = 13
    IBV_WC_LOC_RDD_VIOL_ERR = 14
    IBV_WC_REM_INV_RD_REQ_ERR = 15
    IBV_WC_REM_ABORT_ERR = 16
    IBV_WC_INV_EECN_ERR = 17
    IBV_WC_INV_EEC_STATE_ERR = 18
    IBV_WC_FATAL_ERR = 19
    IBV_WC_RESP_TIMEOUT_ERR = 20
    IBV_WC_GENERAL_ERR = 21
    IBV_WC_TM_ERR = 22
    IBV_WC_TM_RNDV_INCOMPLETE = 23


class ibv_wc_opcode(IntEnum):  # noqa: N801
    IBV_WC_SEND = 0
    IBV_WC_RDMA_WRITE = 1
    IBV_WC_RDMA_READ = 2
    IBV_WC_COMP_SWAP = 3
    IBV_WC_FETCH_ADD = 4
    IBV_WC_BIND_MW = 5
    IBV_WC_LOCAL_INV = 6
    IBV_WC_TSO = 7
    IBV_WC_FLUSH = 8
    IBV_WC_ATOMIC_WRITE = 9
    IBV_WC_RECV = 128
    IBV_WC_RECV_RDMA_WITH_IMM = 129
    IBV_WC_TM_ADD = 130
    IBV_WC_TM_DEL = 131
    IBV_WC_TM_SYNC = 132
    IBV_WC_TM_RECV = 133
    IBV_WC_TM_NO_TAG = 134
    IBV_WC_DRIVER2 = 136
    IBV_WC_DRIVER3 = 137


class ibv_create_cq_wc_flags(IntFlag):  # noqa: N801
    IBV_WC_EX_WITH_BYTE_LEN = 1
    IBV_WC_EX_WITH_IMM = 2
    IBV_WC_EX_WITH_QP_NUM = 4
    IBV_WC_EX_WITH_SRC_QP = 8
    IBV_WC_EX_WITH_SLID = 16
    IBV_WC_EX_WITH_SL = 32
    IBV_WC_EX_WITH_DLID_PATH_BITS = 64
    IBV_WC_EX_WITH_COMPLETION_TIMESTAMP = 128
    IBV_WC_EX_WITH_CVLAN = 256
    IBV_WC_EX_WITH_FLOW_TAG = 512
    IBV_WC_EX_WITH_TM_INFO = 1024
    IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK = 2048


class ibv_wc_flags(IntFlag):  # noqa: N801
    IBV_WC_GRH = 1
    IBV_WC_WITH_IMM = 2
    IBV_WC_IP_CSUM_OK = 4
    IBV_WC_WITH_INV = 8
    IBV_WC_TM_SYNC_REQ = 16
    IBV_WC_TM_MATCH = 32
    IBV_WC_TM_DATA_VALID = 64


class ibv_srq_attr_mask(IntFlag):  # noqa: N801
    IBV_SRQ_MAX_WR = 1
    IBV_SRQ_LIMIT = 2


class ibv_srq_type(IntEnum):  # noqa: N801
    IBV_SRQT_BASIC = 0
    IBV_SRQT_XRC = 1
    IBV_SRQT_TM = 2


class ibv_srq_init_attr_mask(IntFlag):  # noqa: N801
    IBV_SRQ_INIT_ATTR_TYPE = 1
    IBV_SRQ_INIT_ATTR_PD = 2
    IBV_SRQ_INIT_ATTR_XRCD = 4
    IBV_SRQ_INIT_ATTR_CQ = 8
    IBV_SRQ_INIT_ATTR_TM = 16


class ibv_mig_state(IntEnum):  # noqa: N801
    IBV_MIG_MIGRATED = 0
    IBV_MIG_REARM = 1
    IBV_MIG_ARMED = 2


class ibv_qp_init_attr_mask(IntFlag):  # noqa: N801
    IBV_QP_INIT_ATTR_PD = 1
    IBV_QP_INIT_ATTR_XRCD = 2
    IBV_QP_INIT_ATTR_CREATE_FLAGS = 4
    IBV_QP_INIT_ATTR_MAX_TSO_HEADER = 8
    IBV_QP_INIT_ATTR_IND_TABLE = 16
    IBV_QP_INIT_ATTR_RX_HASH = 32
    IBV_QP_INIT_ATTR_SEND_OPS_FLAGS = 64


class ibv_qp_create_flags(IntFlag):  # noqa: N801
    IBV_QP_CREATE_BLOCK_SELF_MCAST_LB = 2
    IBV_QP_CREATE_SCATTER_FCS = 256
    IBV_QP_CREATE_CVLAN_STRIPPING = 512
    IBV_QP_CREATE_SOURCE_QPN = 1024
    IBV_QP_CREATE_PCI_WRITE_END_PADDING = 2048


class ibv_qp_attr_mask(IntFlag):  # noqa: N801
    IBV_QP_STATE = 1
    IBV_QP_CUR_STATE = 2
    IBV_QP_EN_SQD_ASYNC_NOTIFY = 4
    IBV_QP_ACCESS_FLAGS = 8
    IBV_QP_PKEY_INDEX = 16
    IBV_QP_PORT = 32
    IBV_QP_QKEY = 64
    IBV_QP_AV = 128
    IBV_QP_PATH_MTU = 256
    IBV_QP_TIMEOUT = 512
    IBV_QP_RETRY_CNT = 1024
    IBV_QP_RNR_RETRY = 2048
    IBV_QP_RQ_PSN = 4096
    IBV_QP_MAX_QP_RD_ATOMIC = 8192
    IBV_QP_ALT_PATH = 16384
    IBV_QP_MIN_RNR_TIMER = 32768
    IBV_QP_SQ_PSN = 65536
    IBV_QP_MAX_DEST_RD_ATOMIC = 131072
    IBV_QP_PATH_MIG_STATE = 262144
    IBV_QP_CAP = 524288
    IBV_QP_DEST_QPN = 1048576
    IBV_QP_RATE_LIMIT = 33554432


class ibv_query_qp_data_in_order_flags(IntEnum):  # noqa: N801
    IBV_QUERY_QP_DATA_IN_ORDER_RETURN_CAPS = 1


class ibv_query_qp_data_in_order_caps(IntFlag):  # noqa: N801
    IBV_QUERY_QP_DATA_IN_ORDER_WHOLE_MSG = 1
    IBV_QUERY_QP_DATA_IN_ORDER_ALIGNED_128_BYTES = 2


class ibv_wq_type(IntEnum):  # noqa: N801
    IBV_WQT_RQ = 0


class ibv_wq_init_attr_mask(IntEnum):  # noqa: N801
    IBV_WQ_INIT_ATTR_FLAGS = 1


class ibv_wq_flags(IntFlag):  # noqa: N801
    IBV_WQ_FLAGS_CVLAN_STRIPPING = 1
    IBV_WQ_FLAGS_SCATTER_FCS = 2
    IBV_WQ_FLAGS_DELAY_DROP = 4
    IBV_WQ_FLAGS_PCI_WRITE_END_PADDING = 8


class ibv_wq_state(IntEnum):  # noqa: N801
    IBV_WQS_RESET = 0
    IBV_WQS_RDY = 1
    IBV_WQS_ERR = 2
    IBV_WQS_UNKNOWN = 3


class ibv_wq_attr_mask(IntFlag):  # noqa: N801
    IBV_WQ_ATTR_STATE = 1
    IBV_WQ_ATTR_CURR_STATE = 2
    IBV_WQ_ATTR_FLAGS = 4


class ibv_rx_hash_function_flags(IntEnum):  # noqa: N801
    IBV_RX_HASH_FUNC_TOEPLITZ = 1


class ibv_rx_hash_fields(IntFlag):  # noqa: N801
    IBV_RX_HASH_SRC_IPV4 = 1
    IBV_RX_HASH_DST_IPV4 = 2
    IBV_RX_HASH_SRC_IPV6 = 4
    IBV_RX_HASH_DST_IPV6 = 8
    IBV_RX_HASH_SRC_PORT_TCP = 16
    IBV_RX_HASH_DST_PORT_TCP = 32
    IBV_RX_HASH_SRC_PORT_UDP = 64
    IBV_RX_HASH_DST_PORT_UDP = 128


class ibv_flow_flags(IntFlag):  # noqa: N801
    IBV_FLOW_ATTR_FLAGS_DONT_TRAP = 2
    IBV_FLOW_ATTR_FLAGS_EGRESS = 4


class ibv_flow_attr_type(IntEnum):  # noqa: N801
    IBV_FLOW_ATTR_NORMAL = 0
    IBV_FLOW_ATTR_ALL_DEFAULT = 1
    IBV_FLOW_ATTR_MC_DEFAULT = 2
    IBV_FLOW_ATTR_SNIFFER = 3


class ibv_flow_spec_type(IntEnum):  # noqa: N801
    IBV_FLOW_SPEC_ETH = 32
    IBV_FLOW_SPEC_IPV4 = 48
    IBV_FLOW_SPEC_IPV6 = 49
    IBV_FLOW_SPEC_IPV4_EXT = 50
    IBV_FLOW_SPEC_ESP = 52
    IBV_FLOW_SPEC_TCP = 64
    IBV_FLOW_SPEC_UDP = 65
    IBV_FLOW_SPEC_VXLAN_TUNNEL = 80
    IBV_FLOW_SPEC_GRE = 81
    IBV_FLOW_SPEC_MPLS = 96
    IBV_FLOW_SPEC_INNER = 256
    IBV_FLOW_SPEC_ACTION_TAG = 4096
    IBV_FLOW_SPEC_ACTION_DROP = 4097
    IBV_FLOW_SPEC_ACTION_HANDLE = 4098
    IBV_FLOW_SPEC_ACTION_COUNT = 4099
IBV_QPF_GRH_REQUIRED = 1



class ibv_counter_description(IntEnum):  # noqa: N801
    IBV_COUNTER_PACKETS = 0
    IBV_COUNTER_BYTES = 1


class ibv_read_counters_flags(IntEnum):  # noqa: N801
    IBV_READ_COUNTERS_ATTR_PREFER_CACHED = 1


class ibv_cq_init_attr_mask(IntFlag):  # noqa: N801
    IBV_CQ_INIT_ATTR_MASK_FLAGS = 1
    IBV_CQ_INIT_ATTR_MASK_PD = 2


class ibv_create_cq_attr_flags(IntFlag):  # noqa: N801
    IBV_CREATE_CQ_ATTR_SINGLE_THREADED = 1
    IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN = 2


class ibv_odp_general_caps(IntFlag):  # noqa: N801
    IBV_ODP_SUPPORT = 1
    IBV_ODP_SUPPORT_IMPLICIT = 2


class ibv_odp_transport_cap_bits(IntFlag):  # noqa: N801
    IBV_ODP_SUPPORT_SEND = 1
    IBV_ODP_SUPPORT_RECV = 2
    IBV_ODP_SUPPORT_WRITE = 4
    IBV_ODP_SUPPORT_READ = 8
    IBV_ODP_SUPPORT_ATOMIC = 16
    IBV_ODP_SUPPORT_SRQ_RECV = 32
    IBV_ODP_SUPPORT_FLUSH = 64
    IBV_ODP_SUPPORT_ATOMIC_WRITE = 128


class ibv_device_cap_flags(IntFlag):  # noqa: N801
    IBV_DEVICE_RESIZE_MAX_WR = 1
    IBV_DEVICE_BAD_PKEY_CNTR = 2
    IBV_DEVICE_BAD_QKEY_CNTR = 4
    IBV_DEVICE_RAW_MULTI = 8
    IBV_DEVICE_AUTO_PATH_MIG = 16
    IBV_DEVICE_CHANGE_PHY_PORT = 32
    IBV_DEVICE_UD_AV_PORT_ENFORCE = 64
    IBV_DEVICE_CURR_QP_STATE_MOD = 128
    IBV_DEVICE_SHUTDOWN_PORT = 256
    IBV_DEVICE_INIT_TYPE = 512
    IBV_DEVICE_PORT_ACTIVE_EVENT = 1024
    IBV_DEVICE_SYS_IMAGE_GUID = 2048
    IBV_DEVICE_RC_RNR_NAK_GEN = 4096
    IBV_DEVICE_SRQ_RESIZE = 8192
    IBV_DEVICE_N_NOTIFY_CQ = 16384
    IBV_DEVICE_MEM_WINDOW = 131072
    IBV_DEVICE_UD_IP_CSUM = 262144
    IBV_DEVICE_XRC = 1048576
    IBV_DEVICE_MEM_MGT_EXTENSIONS = 2097152
    IBV_DEVICE_MEM_WINDOW_TYPE_2A = 8388608
    IBV_DEVICE_MEM_WINDOW_TYPE_2B = 16777216
    IBV_DEVICE_RC_IP_CSUM = 33554432
    IBV_DEVICE_RAW_IP_CSUM = 67108864
    IBV_DEVICE_MANAGED_FLOW_STEERING = 536870912


class ibv_raw_packet_caps(IntFlag):  # noqa: N801
    IBV_RAW_PACKET_CAP_CVLAN_STRIPPING = 1
    IBV_RAW_PACKET_CAP_SCATTER_FCS = 2
    IBV_RAW_PACKET_CAP_IP_CSUM = 4
    IBV_RAW_PACKET_CAP_DELAY_DROP = 8


class ibv_xrcd_init_attr_mask(IntFlag):  # noqa: N801
    IBV_XRCD_INIT_ATTR_FD = 1
    IBV_XRCD_INIT_ATTR_OFLAGS = 2
    IBV_XRCD_INIT_ATTR_RESERVED = 4
IBV_WC_STANDARD_FLAGS = 127



class ibv_values_mask(IntEnum):  # noqa: N801
    IBV_VALUES_MASK_RAW_CLOCK = 1


class ibv_qp_create_send_ops_flags(IntFlag):  # noqa: N801
    IBV_QP_EX_WITH_RDMA_WRITE = 1
    IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM = 2
    IBV_QP_EX_WITH_SEND = 4
    IBV_QP_EX_WITH_SEND_WITH_IMM = 8
    IBV_QP_EX_WITH_RDMA_READ = 16
    IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP = 32
    IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD = 64
    IBV_QP_EX_WITH_LOCAL_INV = 128
    IBV_QP_EX_WITH_BIND_MW = 256
    IBV_QP_EX_WITH_SEND_WITH_INV = 512
    IBV_QP_EX_WITH_TSO = 1024
    IBV_QP_EX_WITH_FLUSH = 2048
    IBV_QP_EX_WITH_ATOMIC_WRITE = 4096


class ibv_parent_domain_init_attr_mask(IntFlag):  # noqa: N801
    IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS = 1
    IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT = 2
    IBV_PARENT_DOMAIN_INIT_ATTR_ALLOW_CC_UNPROTECTED_ALLOC = 4


class ibv_gid_type(IntEnum):  # noqa: N801
    IBV_GID_TYPE_IB = 0
    IBV_GID_TYPE_ROCE_V1 = 1
    IBV_GID_TYPE_ROCE_V2 = 2


class ibv_fork_status(IntEnum):  # noqa: N801
    IBV_FORK_DISABLED = 0
    IBV_FORK_ENABLED = 1
    IBV_FORK_UNNEEDED = 2


class ibv_placement_type(IntFlag):  # noqa: N801
    IBV_FLUSH_GLOBAL = 1
    IBV_FLUSH_PERSISTENT = 2


class ibv_selectivity_level(IntEnum):  # noqa: N801
    IBV_FLUSH_MR = 1
    IBV_FLUSH_RANGE = 0


class ibv_tph_mem_type(IntEnum):  # noqa: N801
    IBV_TPH_MEM_TYPE_VM = 0
    IBV_TPH_MEM_TYPE_PM = 1


class ibv_dmah_init_attr_mask(IntFlag):  # noqa: N801
    IBV_DMAH_INIT_ATTR_MASK_CPU_ID = 1
    IBV_DMAH_INIT_ATTR_MASK_PH = 2
    IBV_DMAH_INIT_ATTR_MASK_TPH_MEM_TYPE = 4


class ibv_mr_init_attr_mask(IntFlag):  # noqa: N801
    IBV_REG_MR_MASK_IOVA = 1
    IBV_REG_MR_MASK_ADDR = 2
    IBV_REG_MR_MASK_FD = 4
    IBV_REG_MR_MASK_FD_OFFSET = 8
    IBV_REG_MR_MASK_DMAH = 16
    IBV_REG_MR_MASK_BUF = 32


class ibv_qp_attach_comp_cntr_op(IntFlag):  # noqa: N801
    IBV_QP_ATTACH_COMP_CNTR_OP_SEND = 1
    IBV_QP_ATTACH_COMP_CNTR_OP_RECV = 2
    IBV_QP_ATTACH_COMP_CNTR_OP_RDMA_READ = 4
    IBV_QP_ATTACH_COMP_CNTR_OP_REMOTE_RDMA_READ = 8
    IBV_QP_ATTACH_COMP_CNTR_OP_RDMA_WRITE = 16
    IBV_QP_ATTACH_COMP_CNTR_OP_REMOTE_RDMA_WRITE = 32


class ibv_gid_type_sysfs(IntEnum):  # noqa: N801 - infiniband/driver.h
    IBV_GID_TYPE_SYSFS_IB_ROCE_V1 = 0
    IBV_GID_TYPE_SYSFS_ROCE_V2 = 1


class ibv_tmh_op(IntEnum):  # noqa: N801
    IBV_TMH_NO_TAG = 0
    IBV_TMH_RNDV = 1
    IBV_TMH_FIN = 2
    IBV_TMH_EAGER = 3
_IBV_DEVICE_RAW_SCATTER_FCS = 0x400000000
_IBV_DEVICE_PCI_WRITE_END_PADDING = 0x1000000000
_IBV_DEVICE_CC_DMA_BOUNCE = 0x20000000000
_IBV_ALLOCATOR_USE_DEFAULT = 0xffffffffffffffff
_IBV_ADVISE_MR_ADVICE_PREFETCH = 0
_IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE = 1
_IBV_ADVISE_MR_FLAG_FLUSH = 1
_IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT = 2

ENUMS = (ibv_transport_type, ibv_node_type, ibv_atomic_cap, ibv_port_state, ibv_port_cap_flags, ibv_port_cap_flags2, ibv_mtu, ibv_event_type, ibv_access_flags, ibv_rereg_mr_flags, ibv_rereg_mr_err_code, ibv_wr_opcode, ibv_ops_wr_opcode, ibv_ops_flags, ibv_send_flags, ibv_tm_cap_flags, ibv_qp_type, ibv_qp_state, ibv_mw_type, ibv_wc_status, ibv_wc_opcode, ibv_create_cq_wc_flags, ibv_wc_flags, ibv_srq_attr_mask, ibv_srq_type, ibv_srq_init_attr_mask, ibv_mig_state, ibv_qp_init_attr_mask, ibv_qp_create_flags, ibv_qp_attr_mask, ibv_query_qp_data_in_order_flags, ibv_query_qp_data_in_order_caps, ibv_wq_type, ibv_wq_init_attr_mask, ibv_wq_flags, ibv_wq_state, ibv_wq_attr_mask, ibv_rx_hash_function_flags, ibv_rx_hash_fields, ibv_flow_flags, ibv_flow_attr_type, ibv_flow_spec_type, ibv_counter_description, ibv_read_counters_flags, ibv_cq_init_attr_mask, ibv_create_cq_attr_flags, ibv_odp_general_caps, ibv_odp_transport_cap_bits, ibv_device_cap_flags, ibv_raw_packet_caps, ibv_xrcd_init_attr_mask, ibv_values_mask, ibv_qp_create_send_ops_flags, ibv_parent_domain_init_attr_mask, ibv_gid_type, ibv_fork_status, ibv_placement_type, ibv_selectivity_level, ibv_tph_mem_type, ibv_dmah_init_attr_mask, ibv_mr_init_attr_mask, ibv_qp_attach_comp_cntr_op, ibv_gid_type_sysfs, ibv_tmh_op,)

# Module-level names, as `from pyverbs.libibverbs_enums import IBV_QPS_RTS` expects.
for _cls in ENUMS:
    globals().update(_cls.__members__)
del _cls
