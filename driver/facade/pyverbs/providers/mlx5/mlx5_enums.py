"""pyverbs.providers.mlx5.mlx5_enums: the values of infiniband/mlx5dv.h's enumerations (a
program compares with them; nsnic is not an MLX5 device)."""

from __future__ import annotations

from enum import IntEnum, IntFlag

# ruff: noqa: E501
MLX5_OPCODE_NOP = 0
MLX5_OPCODE_SEND_INVAL = 1
MLX5_OPCODE_RDMA_WRITE = 8
MLX5_OPCODE_RDMA_WRITE_IMM = 9
MLX5_OPCODE_SEND = 10
MLX5_OPCODE_SEND_IMM = 11
MLX5_OPCODE_TSO = 14
MLX5_OPCODE_RDMA_READ = 16
MLX5_OPCODE_ATOMIC_CS = 17
MLX5_OPCODE_ATOMIC_FA = 18
MLX5_OPCODE_ATOMIC_MASKED_CS = 20
MLX5_OPCODE_ATOMIC_MASKED_FA = 21
MLX5_OPCODE_FMR = 25
MLX5_OPCODE_LOCAL_INVAL = 27
MLX5_OPCODE_CONFIG_CMD = 31
MLX5_OPCODE_UMR = 37
MLX5_OPCODE_TAG_MATCHING = 40
MLX5_OPCODE_MMO = 47

MLX5_WQE_CTRL_CQ_UPDATE = 8
MLX5_WQE_CTRL_SOLICITED = 2
MLX5_WQE_CTRL_FENCE = 128
MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE = 32



class mlx5dv_context_attr_flags(IntEnum):  # noqa: N801
    MLX5DV_CONTEXT_FLAGS_DEVX = 1


class mlx5dv_context_attr_comp_mask(IntEnum):  # noqa: N801
    MLX5DV_CONTEXT_ATTR_MASK_FD_ARRAY = 1


class mlx5dv_context_comp_mask(IntFlag):  # noqa: N801
    MLX5DV_CONTEXT_MASK_CQE_COMPRESION = 1
    MLX5DV_CONTEXT_MASK_SWP = 2
    MLX5DV_CONTEXT_MASK_STRIDING_RQ = 4
    MLX5DV_CONTEXT_MASK_TUNNEL_OFFLOADS = 8
    MLX5DV_CONTEXT_MASK_DYN_BFREGS = 16
    MLX5DV_CONTEXT_MASK_CLOCK_INFO_UPDATE = 32
    MLX5DV_CONTEXT_MASK_FLOW_ACTION_FLAGS = 64
    MLX5DV_CONTEXT_MASK_DC_ODP_CAPS = 128
    MLX5DV_CONTEXT_MASK_NUM_LAG_PORTS = 512
    MLX5DV_CONTEXT_MASK_SIGNATURE_OFFLOAD = 1024
    MLX5DV_CONTEXT_MASK_DCI_STREAMS = 2048
    MLX5DV_CONTEXT_MASK_WR_MEMCPY_LENGTH = 4096
    MLX5DV_CONTEXT_MASK_CRYPTO_OFFLOAD = 8192
    MLX5DV_CONTEXT_MASK_MAX_DC_RD_ATOM = 16384
    MLX5DV_CONTEXT_MASK_OOO_RECV_WRS = 65536


class mlx5dv_context_flags(IntFlag):  # noqa: N801
    MLX5DV_CONTEXT_FLAGS_CQE_V1 = 1
    MLX5DV_CONTEXT_FLAGS_MPW_ALLOWED = 4
    MLX5DV_CONTEXT_FLAGS_ENHANCED_MPW = 8
    MLX5DV_CONTEXT_FLAGS_CQE_128B_COMP = 16
    MLX5DV_CONTEXT_FLAGS_CQE_128B_PAD = 32
    MLX5DV_CONTEXT_FLAGS_PACKET_BASED_CREDIT_MODE = 64
    MLX5DV_CONTEXT_FLAGS_REAL_TIME_TS = 128
    MLX5DV_CONTEXT_FLAGS_BLUEFLAME = 256


class mlx5dv_sw_parsing_offloads(IntEnum):  # noqa: N801
    MLX5DV_SW_PARSING = 1
    MLX5DV_SW_PARSING_CSUM = 2
    MLX5DV_SW_PARSING_LSO = 4


class mlx5dv_cqe_comp_res_format(IntEnum):  # noqa: N801
    MLX5DV_CQE_RES_FORMAT_HASH = 1
    MLX5DV_CQE_RES_FORMAT_CSUM = 2
    MLX5DV_CQE_RES_FORMAT_CSUM_STRIDX = 4


class mlx5dv_sched_elem_attr_flags(IntFlag):  # noqa: N801
    MLX5DV_SCHED_ELEM_ATTR_FLAGS_BW_SHARE = 1
    MLX5DV_SCHED_ELEM_ATTR_FLAGS_MAX_AVG_BW = 2


class mlx5dv_tunnel_offloads(IntEnum):  # noqa: N801
    MLX5DV_RAW_PACKET_CAP_TUNNELED_OFFLOAD_VXLAN = 1
    MLX5DV_RAW_PACKET_CAP_TUNNELED_OFFLOAD_GRE = 2
    MLX5DV_RAW_PACKET_CAP_TUNNELED_OFFLOAD_GENEVE = 4
    MLX5DV_RAW_PACKET_CAP_TUNNELED_OFFLOAD_CW_MPLS_OVER_GRE = 8
    MLX5DV_RAW_PACKET_CAP_TUNNELED_OFFLOAD_CW_MPLS_OVER_UDP = 16


class mlx5dv_flow_action_cap_flags(IntFlag):  # noqa: N801
    MLX5DV_FLOW_ACTION_FLAGS_ESP_AES_GCM = 1
    MLX5DV_FLOW_ACTION_FLAGS_ESP_AES_GCM_REQ_METADATA = 2
    MLX5DV_FLOW_ACTION_FLAGS_ESP_AES_GCM_SPI_STEERING = 4
    MLX5DV_FLOW_ACTION_FLAGS_ESP_AES_GCM_FULL_OFFLOAD = 8
    MLX5DV_FLOW_ACTION_FLAGS_ESP_AES_GCM_TX_IV_IS_ESN = 16


class mlx5dv_qp_init_attr_mask(IntFlag):  # noqa: N801
    MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS = 1
    MLX5DV_QP_INIT_ATTR_MASK_DC = 2
    MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS = 4
    MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS = 8


class mlx5dv_qp_create_flags(IntFlag):  # noqa: N801
    MLX5DV_QP_CREATE_TUNNEL_OFFLOADS = 1
    MLX5DV_QP_CREATE_TIR_ALLOW_SELF_LOOPBACK_UC = 2
    MLX5DV_QP_CREATE_TIR_ALLOW_SELF_LOOPBACK_MC = 4
    MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE = 8
    MLX5DV_QP_CREATE_ALLOW_SCATTER_TO_CQE = 16
    MLX5DV_QP_CREATE_PACKET_BASED_CREDIT_MODE = 32
    MLX5DV_QP_CREATE_SIG_PIPELINING = 64
    MLX5DV_QP_CREATE_OOO_DP = 128


class mlx5dv_dc_type(IntEnum):  # noqa: N801
    MLX5DV_DCTYPE_DCT = 1
    MLX5DV_DCTYPE_DCI = 2


class mlx5dv_mkey_init_attr_flags(IntFlag):  # noqa: N801
    MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT = 1
    MLX5DV_MKEY_INIT_ATTR_FLAGS_BLOCK_SIGNATURE = 2
    MLX5DV_MKEY_INIT_ATTR_FLAGS_CRYPTO = 4
    MLX5DV_MKEY_INIT_ATTR_FLAGS_REMOTE_INVALIDATE = 16


class mlx5dv_mkey_err_type(IntEnum):  # noqa: N801
    MLX5DV_MKEY_NO_ERR = 0
    MLX5DV_MKEY_SIG_BLOCK_BAD_GUARD = 1
    MLX5DV_MKEY_SIG_BLOCK_BAD_REFTAG = 2
    MLX5DV_MKEY_SIG_BLOCK_BAD_APPTAG = 3


class mlx5dv_sig_type(IntEnum):  # noqa: N801
    MLX5DV_SIG_TYPE_T10DIF = 0
    MLX5DV_SIG_TYPE_CRC = 1


class mlx5dv_sig_t10dif_bg_type(IntEnum):  # noqa: N801
    MLX5DV_SIG_T10DIF_CRC = 0
    MLX5DV_SIG_T10DIF_CSUM = 1


class mlx5dv_sig_t10dif_flags(IntFlag):  # noqa: N801
    MLX5DV_SIG_T10DIF_FLAG_REF_REMAP = 1
    MLX5DV_SIG_T10DIF_FLAG_APP_ESCAPE = 2
    MLX5DV_SIG_T10DIF_FLAG_APP_REF_ESCAPE = 4


class mlx5dv_sig_crc_type(IntEnum):  # noqa: N801
    MLX5DV_SIG_CRC_TYPE_CRC32 = 0
    MLX5DV_SIG_CRC_TYPE_CRC32C = 1
    MLX5DV_SIG_CRC_TYPE_CRC64_XP10 = 2


class mlx5dv_block_size(IntEnum):  # noqa: N801
    MLX5DV_BLOCK_SIZE_512 = 0
    MLX5DV_BLOCK_SIZE_520 = 1
    MLX5DV_BLOCK_SIZE_4048 = 2
    MLX5DV_BLOCK_SIZE_4096 = 3
    MLX5DV_BLOCK_SIZE_4160 = 4


class mlx5dv_sig_mask(IntEnum):  # noqa: N801
    MLX5DV_SIG_MASK_T10DIF_GUARD = 192
    MLX5DV_SIG_MASK_T10DIF_APPTAG = 48
    MLX5DV_SIG_MASK_T10DIF_REFTAG = 15
    MLX5DV_SIG_MASK_CRC32 = 240
    MLX5DV_SIG_MASK_CRC32C = 240
    MLX5DV_SIG_MASK_CRC64_XP10 = 255


class mlx5dv_sig_block_attr_flags(IntEnum):  # noqa: N801
    MLX5DV_SIG_BLOCK_ATTR_FLAG_COPY_MASK = 1


class mlx5dv_qp_create_send_ops_flags(IntFlag):  # noqa: N801
    MLX5DV_QP_EX_WITH_MR_INTERLEAVED = 1
    MLX5DV_QP_EX_WITH_MR_LIST = 2
    MLX5DV_QP_EX_WITH_MKEY_CONFIGURE = 4
    MLX5DV_QP_EX_WITH_RAW_WQE = 8
    MLX5DV_QP_EX_WITH_MEMCPY = 16


class mlx5dv_cq_init_attr_mask(IntFlag):  # noqa: N801
    MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE = 1
    MLX5DV_CQ_INIT_ATTR_MASK_FLAGS = 2
    MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE = 4


class mlx5dv_cq_init_attr_flags(IntFlag):  # noqa: N801
    MLX5DV_CQ_INIT_ATTR_FLAGS_CQE_PAD = 1
    MLX5DV_CQ_INIT_ATTR_FLAGS_RESERVED = 2


class mlx5dv_flow_action_type(IntEnum):  # noqa: N801
    MLX5DV_FLOW_ACTION_DEST_IBV_QP = 0
    MLX5DV_FLOW_ACTION_DROP = 1
    MLX5DV_FLOW_ACTION_IBV_COUNTER = 2
    MLX5DV_FLOW_ACTION_IBV_FLOW_ACTION = 3
    MLX5DV_FLOW_ACTION_TAG = 4
    MLX5DV_FLOW_ACTION_DEST_DEVX = 5
    MLX5DV_FLOW_ACTION_COUNTERS_DEVX = 6
    MLX5DV_FLOW_ACTION_DEFAULT_MISS = 7
    MLX5DV_FLOW_ACTION_COUNTERS_DEVX_WITH_OFFSET = 8


class mlx5dv_dr_domain_type(IntEnum):  # noqa: N801
    MLX5DV_DR_DOMAIN_TYPE_NIC_RX = 0
    MLX5DV_DR_DOMAIN_TYPE_NIC_TX = 1
    MLX5DV_DR_DOMAIN_TYPE_FDB = 2


class mlx5dv_qp_comp_mask(IntFlag):  # noqa: N801
    MLX5DV_QP_MASK_UAR_MMAP_OFFSET = 1
    MLX5DV_QP_MASK_RAW_QP_HANDLES = 2
    MLX5DV_QP_MASK_RAW_QP_TIR_ADDR = 4


class mlx5dv_srq_comp_mask(IntEnum):  # noqa: N801
    MLX5DV_SRQ_MASK_SRQN = 1


class mlx5dv_obj_type(IntEnum):  # noqa: N801
    MLX5DV_OBJ_QP = 1
    MLX5DV_OBJ_CQ = 2
    MLX5DV_OBJ_SRQ = 4
    MLX5DV_OBJ_RWQ = 8
    MLX5DV_OBJ_DM = 16
    MLX5DV_OBJ_AH = 32
    MLX5DV_OBJ_PD = 64
MLX5_RCV_DBR = 0
MLX5_SND_DBR = 1

MLX5_CQE_OWNER_MASK = 1
MLX5_CQE_REQ = 0
MLX5_CQE_RESP_WR_IMM = 1
MLX5_CQE_RESP_SEND = 2
MLX5_CQE_RESP_SEND_IMM = 3
MLX5_CQE_RESP_SEND_INV = 4
MLX5_CQE_RESIZE_CQ = 5
MLX5_CQE_NO_PACKET = 6
MLX5_CQE_SIG_ERR = 12
MLX5_CQE_REQ_ERR = 13
MLX5_CQE_RESP_ERR = 14
MLX5_CQE_INVALID = 15

MLX5_SEND_WQE_BB = 64
MLX5_SEND_WQE_SHIFT = 6



class mlx5dv_vfio_context_attr_flags(IntEnum):  # noqa: N801
    MLX5DV_VFIO_CTX_FLAGS_INIT_LINK_DOWN = 1


class mlx5dv_wc_opcode(IntEnum):  # noqa: N801
    MLX5DV_WC_UMR = 135
    MLX5DV_WC_RAW_WQE = 136
    MLX5DV_WC_MEMCPY = 137


class mlx5dv_crypto_standard(IntEnum):  # noqa: N801
    MLX5DV_CRYPTO_STANDARD_AES_XTS = 0


class mlx5dv_signature_crypto_order(IntEnum):  # noqa: N801
    MLX5DV_SIGNATURE_CRYPTO_ORDER_SIGNATURE_AFTER_CRYPTO_ON_TX = 0
    MLX5DV_SIGNATURE_CRYPTO_ORDER_SIGNATURE_BEFORE_CRYPTO_ON_TX = 1


class mlx5dv_crypto_login_state(IntEnum):  # noqa: N801
    MLX5DV_CRYPTO_LOGIN_STATE_VALID = 0
    MLX5DV_CRYPTO_LOGIN_STATE_NO_LOGIN = 1
    MLX5DV_CRYPTO_LOGIN_STATE_INVALID = 2


class mlx5dv_crypto_key_size(IntEnum):  # noqa: N801
    MLX5DV_CRYPTO_KEY_SIZE_128 = 0
    MLX5DV_CRYPTO_KEY_SIZE_256 = 1


class mlx5dv_crypto_key_purpose(IntEnum):  # noqa: N801
    MLX5DV_CRYPTO_KEY_PURPOSE_AES_XTS = 0


class mlx5dv_dek_state(IntEnum):  # noqa: N801
    MLX5DV_DEK_STATE_READY = 0
    MLX5DV_DEK_STATE_ERROR = 1


class mlx5dv_dek_init_attr_mask(IntEnum):  # noqa: N801
    MLX5DV_DEK_INIT_ATTR_CRYPTO_LOGIN = 1


class mlx5dv_crypto_engines_caps(IntFlag):  # noqa: N801
    MLX5DV_CRYPTO_ENGINES_CAP_AES_XTS = 1
    MLX5DV_CRYPTO_ENGINES_CAP_AES_XTS_SINGLE_BLOCK = 2
    MLX5DV_CRYPTO_ENGINES_CAP_AES_XTS_MULTI_BLOCK = 4


class mlx5dv_crypto_wrapped_import_method_caps(IntEnum):  # noqa: N801
    MLX5DV_CRYPTO_WRAPPED_IMPORT_METHOD_CAP_AES_XTS = 1


class mlx5dv_crypto_caps_flags(IntFlag):  # noqa: N801
    MLX5DV_CRYPTO_CAPS_CRYPTO = 1
    MLX5DV_CRYPTO_CAPS_WRAPPED_CRYPTO_OPERATIONAL = 2
    MLX5DV_CRYPTO_CAPS_WRAPPED_CRYPTO_GOING_TO_COMMISSIONING = 4


class mlx5dv_dr_action_flags(IntEnum):  # noqa: N801
    MLX5DV_DR_ACTION_FLAGS_ROOT_LEVEL = 1


class mlx5dv_dr_domain_sync_flags(IntFlag):  # noqa: N801
    MLX5DV_DR_DOMAIN_SYNC_FLAGS_SW = 1
    MLX5DV_DR_DOMAIN_SYNC_FLAGS_HW = 2
    MLX5DV_DR_DOMAIN_SYNC_FLAGS_MEM = 4


class mlx5dv_dr_matcher_layout_flags(IntFlag):  # noqa: N801
    MLX5DV_DR_MATCHER_LAYOUT_RESIZABLE = 1
    MLX5DV_DR_MATCHER_LAYOUT_NUM_RULE = 2


class mlx5dv_dr_action_dest_type(IntEnum):  # noqa: N801
    MLX5DV_DR_ACTION_DEST = 0
    MLX5DV_DR_ACTION_DEST_REFORMAT = 1
MLX5DV_UMEM_MASK_DMABUF = 1



class mlx5dv_flow_matcher_attr_mask(IntFlag):  # noqa: N801
    MLX5DV_FLOW_MATCHER_MASK_FT_TYPE = 1
    MLX5DV_FLOW_MATCHER_MASK_IB_PORT = 2


class mlx5dv_devx_create_event_channel_flags(IntEnum):  # noqa: N801
    MLX5DV_DEVX_CREATE_EVENT_CHANNEL_FLAGS_OMIT_EV_DATA = 1

ENUMS = (mlx5dv_context_attr_flags, mlx5dv_context_attr_comp_mask, mlx5dv_context_comp_mask, mlx5dv_context_flags, mlx5dv_sw_parsing_offloads, mlx5dv_cqe_comp_res_format, mlx5dv_sched_elem_attr_flags, mlx5dv_tunnel_offloads, mlx5dv_flow_action_cap_flags, mlx5dv_qp_init_attr_mask, mlx5dv_qp_create_flags, mlx5dv_dc_type, mlx5dv_mkey_init_attr_flags, mlx5dv_mkey_err_type, mlx5dv_sig_type, mlx5dv_sig_t10dif_bg_type, mlx5dv_sig_t10dif_flags, mlx5dv_sig_crc_type, mlx5dv_block_size, mlx5dv_sig_mask, mlx5dv_sig_block_attr_flags, mlx5dv_qp_create_send_ops_flags, mlx5dv_cq_init_attr_mask, mlx5dv_cq_init_attr_flags, mlx5dv_flow_action_type, mlx5dv_dr_domain_type, mlx5dv_qp_comp_mask, mlx5dv_srq_comp_mask, mlx5dv_obj_type, mlx5dv_vfio_context_attr_flags, mlx5dv_wc_opcode, mlx5dv_crypto_standard, mlx5dv_signature_crypto_order, mlx5dv_crypto_login_state, mlx5dv_crypto_key_size, mlx5dv_crypto_key_purpose, mlx5dv_dek_state, mlx5dv_dek_init_attr_mask, mlx5dv_crypto_engines_caps, mlx5dv_crypto_wrapped_import_method_caps, mlx5dv_crypto_caps_flags, mlx5dv_dr_action_flags, mlx5dv_dr_domain_sync_flags, mlx5dv_dr_matcher_layout_flags, mlx5dv_dr_action_dest_type, mlx5dv_flow_matcher_attr_mask, mlx5dv_devx_create_event_channel_flags,)

for _cls in ENUMS:
    globals().update(_cls.__members__)
del _cls

# Values pyverbs re-exports under names with a leading or trailing underscore.
_MLX5DV_RES_TYPE_QP = 4294967297
_MLX5DV_RES_TYPE_RWQ = 4294967298
_MLX5DV_RES_TYPE_DBR = 4294967299
_MLX5DV_RES_TYPE_SRQ = 4294967300
_MLX5DV_PP_ALLOC_FLAGS_DEDICATED_INDEX = 1
_MLX5DV_UAR_ALLOC_TYPE_BF = 0
_MLX5DV_UAR_ALLOC_TYPE_NC = 1
MLX5DV_QUERY_PORT_VPORT_ = 1
MLX5DV_QUERY_PORT_VPORT_VHCA_ID_ = 2
MLX5DV_QUERY_PORT_VPORT_STEERING_ICM_RX_ = 4
MLX5DV_QUERY_PORT_VPORT_STEERING_ICM_TX_ = 8
MLX5DV_QUERY_PORT_VPORT_REG_C0_ = 16
MLX5DV_QUERY_PORT_ESW_OWNER_VHCA_ID_ = 32
MLX5DV_FLOW_TABLE_TYPE_RDMA_RX_ = 3
MLX5DV_FLOW_TABLE_TYPE_RDMA_TX_ = 4
MLX5DV_FLOW_TABLE_TYPE_NIC_RX_ = 0
MLX5DV_FLOW_TABLE_TYPE_NIC_TX_ = 1
MLX5DV_FLOW_TABLE_TYPE_FDB_ = 2
MLX5DV_FLOW_TABLE_TYPE_RDMA_TRANSPORT_RX_ = 5
MLX5DV_FLOW_TABLE_TYPE_RDMA_TRANSPORT_TX_ = 6
MLX5DV_FLOW_ACTION_PACKET_REFORMAT_TYPE_L2_TUNNEL_TO_L2_ = 0
MLX5DV_FLOW_ACTION_PACKET_REFORMAT_TYPE_L2_TO_L2_TUNNEL_ = 1
MLX5DV_FLOW_ACTION_PACKET_REFORMAT_TYPE_L3_TUNNEL_TO_L2_ = 2
MLX5DV_FLOW_ACTION_PACKET_REFORMAT_TYPE_L2_TO_L3_TUNNEL_ = 3
MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT_ = 1
MLX5DV_VAR_ALLOC_FLAG_TLP_ = 1
