/* nsrpc: the wire protocol between nicsim's libibverbs.so.1 and the Python verbs server
 * (nicsim/exec/cserver.py). This file and cserver.py describe the same protocol;
 * tests/test_c_programs.py holds the attribute tables below to cserver's.
 *
 * A program's process opens one SOCK_STREAM Unix socket to the server (its path in
 * $NICSIM_VERBS_SOCKET) and sends requests one at a time, each answered before the next:
 *
 *   request:  u32 len, u32 op,     then len bytes of body
 *   reply:    u32 len, i32 status, then len bytes of body (status: 0, or a positive errno;
 *             a failed request's body is empty)
 *
 * Integers are the machine's byte order (both ends are on one host), strings are NUL-padded
 * fixed fields or the rest of a body. The bodies:
 *
 *   HELLO         u32 version, then the program's name  ->  u32 version, u32 server_pid
 *                 (the library lets that pid trace it: PR_SET_PTRACER, so that under Yama's
 *                 ptrace_scope=1 the server may reach its registered memory)
 *   DEVICES       -                                      ->  u32 n, n x struct nsrpc_device
 *   OPEN          char name[64]                          ->  u32 handle, u32 num_comp_vectors
 *   CLOSE         u32 handle                             ->  -
 *   QUERY_DEVICE  u32 handle                             ->  char fw_ver[64],
 *                                                            u64 x NSRPC_DEVICE_ATTRS
 *   QUERY_PORT    u32 handle, u32 port                   ->  u64 x NSRPC_PORT_ATTRS
 *   QUERY_GID     u32 handle, u32 port, u32 index        ->  u8 gid[16], u32 gid_type
 *                 (enum ibv_gid_type), u32 ndev_ifindex; ENODATA for an empty entry
 *   QUERY_PKEY    u32 handle, u32 port, u32 index        ->  u32 pkey (host order)
 *   READ_SYSFS    the file's path                        ->  its contents; ENOENT when the
 *                                                            file is not a simulated one
 *
 * Objects (phase 2). A handle names an object of the connection (one counter for all kinds);
 * the structs are below, their Python twins in cserver.py (_REG_MR, _WC, ...).
 *
 *   ALLOC_PD      u32 context                            ->  u32 pd
 *   DEALLOC_PD    u32 pd                                 ->  -   (EBUSY while it has objects)
 *   REG_MR        struct nsrpc_reg_mr                    ->  u32 mr, u32 lkey, u32 rkey
 *   DEREG_MR      u32 mr                                 ->  -
 *   CREATE_COMP_CHANNEL  u32 context, and an eventfd passed with SCM_RIGHTS on the request's
 *                 header: the server adds to it when the channel has an event (so the
 *                 program can poll() channel->fd)     ->  u32 channel
 *   DESTROY_COMP_CHANNEL u32 channel                     ->  -   (EBUSY while CQs use it)
 *   CREATE_CQ     struct nsrpc_create_cq                 ->  u32 cq, i32 cqe
 *   DESTROY_CQ    u32 cq                                 ->  -
 *   REQ_NOTIFY_CQ u32 cq, u32 solicited_only             ->  -
 *   POLL_CQ       u32 cq, u32 max                        ->  n x struct nsrpc_wc (n <= max);
 *                 an empty poll lets the world run up to 100 us of simulated time first
 *   GET_CQ_EVENT  u32 channel                            ->  u64 cookie of the CQ (its
 *                 struct ibv_cq *, given at CREATE_CQ); EAGAIN when none came within a
 *                 bounded window of simulated time (the library asks again)
 *   CREATE_QP     struct nsrpc_create_qp                 ->  u32 qp, u32 qpn, struct nsrpc_cap
 *   MODIFY_QP     u32 qp, u32 attr_mask, struct nsrpc_qp_attr  ->  -
 *   QUERY_QP      u32 qp, u32 attr_mask                  ->  struct nsrpc_qp_attr,
 *                                                            u32 qp_type, u32 sq_sig_all
 *   DESTROY_QP    u32 qp                                 ->  -
 *   CREATE_AH     u32 pd, struct nsrpc_ah_attr           ->  u32 ah
 *   DESTROY_AH    u32 ah                                 ->  -
 *   POST_SEND     u32 qp, u32 n, then n x (struct nsrpc_send_wr, num_sge x struct nsrpc_sge,
 *                 inline_len bytes)                      ->  i32 err, u32 posted
 *   POST_RECV     u32 qp, u32 n, then n x (struct nsrpc_recv_wr, num_sge x struct
 *                 nsrpc_sge)                             ->  i32 err, u32 posted
 *
 * POST_SEND and POST_RECV always succeed as requests: their body says how many WRs were
 * posted and the errno of the one after them (ibv_post_send's bad_wr), 0 if all were. An
 * inline WR (IBV_SEND_INLINE) carries its data: the library reads it from the program's
 * memory at the post, as a provider copies it into the WQE there.
 *
 * An op the server does not know is answered EOPNOTSUPP; a malformed body EINVAL. The
 * server runs the verb in the Python driver (nicsim.driver), so every value and every errno
 * is the one a pyverbs program under `nicsim exec` sees.
 */
#ifndef NSRPC_H
#define NSRPC_H

#include <stdint.h>

#define NSRPC_VERSION 2 /* 2: objects and the data path; HELLO answers the server's pid */
#define NSRPC_SOCKET_ENV "NICSIM_VERBS_SOCKET"
#define NSRPC_DEBUG_ENV "NICSIM_VERBS_DEBUG"
#define NSRPC_NAME_MAX 64

enum nsrpc_op {
	NSRPC_HELLO = 1,
	NSRPC_DEVICES = 2,
	NSRPC_OPEN = 3,
	NSRPC_CLOSE = 4,
	NSRPC_QUERY_DEVICE = 5,
	NSRPC_QUERY_PORT = 6,
	NSRPC_QUERY_GID = 7,
	NSRPC_QUERY_PKEY = 8,
	NSRPC_READ_SYSFS = 9,
	NSRPC_ALLOC_PD = 10,
	NSRPC_DEALLOC_PD = 11,
	NSRPC_REG_MR = 12,
	NSRPC_DEREG_MR = 13,
	NSRPC_CREATE_COMP_CHANNEL = 14,
	NSRPC_DESTROY_COMP_CHANNEL = 15,
	NSRPC_CREATE_CQ = 16,
	NSRPC_DESTROY_CQ = 17,
	NSRPC_REQ_NOTIFY_CQ = 18,
	NSRPC_POLL_CQ = 19,
	NSRPC_GET_CQ_EVENT = 20,
	NSRPC_CREATE_QP = 21,
	NSRPC_MODIFY_QP = 22,
	NSRPC_QUERY_QP = 23,
	NSRPC_DESTROY_QP = 24,
	NSRPC_CREATE_AH = 25,
	NSRPC_DESTROY_AH = 26,
	NSRPC_POST_SEND = 27,
	NSRPC_POST_RECV = 28,
};

/* At most this many completions per POLL_CQ (a longer poll is answered in pieces). */
#define NSRPC_POLL_MAX 256

/* The bodies of the object requests. Every struct is packed, its fields in the machine's
 * order; cserver.py states each as a struct format beside its name. */
struct nsrpc_reg_mr {
	uint32_t pd;
	uint32_t access; /* ibv_access_flags */
	uint64_t addr; /* the program's buffer: the server reaches it there */
	uint64_t length;
	uint64_t iova;
} __attribute__((packed));

struct nsrpc_create_cq {
	uint32_t context;
	int32_t cqe;
	uint32_t channel; /* 0: none */
	int32_t comp_vector;
	uint64_t cookie; /* the struct ibv_cq * GET_CQ_EVENT answers (as the kernel's user_handle) */
} __attribute__((packed));

struct nsrpc_cap {
	uint32_t max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data;
} __attribute__((packed));

struct nsrpc_create_qp {
	uint32_t pd;
	uint32_t send_cq;
	uint32_t recv_cq;
	uint32_t srq; /* 0: none */
	uint32_t qp_type; /* enum ibv_qp_type */
	uint32_t sq_sig_all;
	struct nsrpc_cap cap;
} __attribute__((packed));

struct nsrpc_ah_attr {
	uint8_t dgid[16];
	uint32_t flow_label;
	uint8_t sgid_index, hop_limit, traffic_class, is_global;
	uint16_t dlid;
	uint8_t sl, src_path_bits, static_rate, port_num;
} __attribute__((packed));

/* struct ibv_qp_attr, field by field. */
struct nsrpc_qp_attr {
	uint32_t qp_state, cur_qp_state, path_mtu, path_mig_state;
	uint32_t qkey, rq_psn, sq_psn, dest_qp_num, qp_access_flags;
	struct nsrpc_cap cap;
	struct nsrpc_ah_attr ah_attr, alt_ah_attr;
	uint16_t pkey_index, alt_pkey_index;
	uint8_t en_sqd_async_notify, sq_draining, max_rd_atomic, max_dest_rd_atomic;
	uint8_t min_rnr_timer, port_num, timeout, retry_cnt, rnr_retry, alt_port_num;
	uint8_t alt_timeout, reserved;
	uint32_t rate_limit;
} __attribute__((packed));

struct nsrpc_sge {
	uint64_t addr;
	uint32_t length;
	uint32_t lkey;
} __attribute__((packed));

struct nsrpc_send_wr {
	uint64_t wr_id;
	uint32_t opcode; /* enum ibv_wr_opcode */
	uint32_t send_flags;
	uint32_t imm_data; /* as the program stored it (a __be32), or invalidate_rkey */
	uint32_t num_sge;
	uint64_t remote_addr; /* RDMA and atomics */
	uint32_t rkey;
	uint32_t ah; /* UD: the address handle's handle */
	uint32_t remote_qpn;
	uint32_t remote_qkey;
	uint64_t compare_add;
	uint64_t swap;
	uint32_t inline_len; /* IBV_SEND_INLINE: the bytes that follow the SGEs */
	uint32_t reserved;
} __attribute__((packed));

struct nsrpc_recv_wr {
	uint64_t wr_id;
	uint32_t num_sge;
	uint32_t reserved;
} __attribute__((packed));

/* struct ibv_wc, field by field. */
struct nsrpc_wc {
	uint64_t wr_id;
	uint32_t status, opcode, vendor_err, byte_len;
	uint32_t imm_data; /* a __be32, or the invalidated rkey */
	uint32_t qp_num, src_qp, wc_flags;
	uint16_t pkey_index, slid;
	uint8_t sl, dlid_path_bits;
	uint8_t reserved[2];
} __attribute__((packed));

struct nsrpc_hdr {
	uint32_t len;
	uint32_t op; /* in a reply: the status (0 or an errno) */
};

struct nsrpc_device {
	char name[NSRPC_NAME_MAX];
	uint64_t node_guid; /* host order (ibv_get_device_guid turns it big-endian) */
	uint32_t node_type; /* enum ibv_node_type */
	uint32_t transport_type; /* enum ibv_transport_type */
	uint32_t index; /* ibv_get_device_index */
} __attribute__((packed));

/* The values QUERY_DEVICE carries, in order: X(conversion, member of struct
 * ibv_device_attr_ex, attribute of pyverbs' DeviceAttrEx). GUIDs travel in host order and
 * are big-endian in the struct (__be64). */
#define NSRPC_DEVICE_ATTRS(X)                                                                \
	X(BE64, orig_attr.node_guid, "orig_attr.node_guid")                                  \
	X(BE64, orig_attr.sys_image_guid, "orig_attr.sys_image_guid")                        \
	X(U, orig_attr.max_mr_size, "orig_attr.max_mr_size")                                 \
	X(U, orig_attr.page_size_cap, "orig_attr.page_size_cap")                             \
	X(U, orig_attr.vendor_id, "orig_attr.vendor_id")                                     \
	X(U, orig_attr.vendor_part_id, "orig_attr.vendor_part_id")                           \
	X(U, orig_attr.hw_ver, "orig_attr.hw_ver")                                           \
	X(U, orig_attr.max_qp, "orig_attr.max_qp")                                           \
	X(U, orig_attr.max_qp_wr, "orig_attr.max_qp_wr")                                     \
	X(U, orig_attr.device_cap_flags, "orig_attr.device_cap_flags")                       \
	X(U, orig_attr.max_sge, "orig_attr.max_sge")                                         \
	X(U, orig_attr.max_sge_rd, "orig_attr.max_sge_rd")                                   \
	X(U, orig_attr.max_cq, "orig_attr.max_cq")                                           \
	X(U, orig_attr.max_cqe, "orig_attr.max_cqe")                                         \
	X(U, orig_attr.max_mr, "orig_attr.max_mr")                                           \
	X(U, orig_attr.max_pd, "orig_attr.max_pd")                                           \
	X(U, orig_attr.max_qp_rd_atom, "orig_attr.max_qp_rd_atom")                           \
	X(U, orig_attr.max_ee_rd_atom, "orig_attr.max_ee_rd_atom")                           \
	X(U, orig_attr.max_res_rd_atom, "orig_attr.max_res_rd_atom")                         \
	X(U, orig_attr.max_qp_init_rd_atom, "orig_attr.max_qp_init_rd_atom")                 \
	X(U, orig_attr.max_ee_init_rd_atom, "orig_attr.max_ee_init_rd_atom")                 \
	X(U, orig_attr.atomic_cap, "orig_attr.atomic_caps")                                  \
	X(U, orig_attr.max_ee, "orig_attr.max_ee")                                           \
	X(U, orig_attr.max_rdd, "orig_attr.max_rdd")                                         \
	X(U, orig_attr.max_mw, "orig_attr.max_mw")                                           \
	X(U, orig_attr.max_raw_ipv6_qp, "orig_attr.max_raw_ipv6_qp")                         \
	X(U, orig_attr.max_raw_ethy_qp, "orig_attr.max_raw_ethy_qp")                         \
	X(U, orig_attr.max_mcast_grp, "orig_attr.max_mcast_grp")                             \
	X(U, orig_attr.max_mcast_qp_attach, "orig_attr.max_mcast_qp_attach")                 \
	X(U, orig_attr.max_total_mcast_qp_attach, "orig_attr.max_total_mcast_qp_attach")     \
	X(U, orig_attr.max_ah, "orig_attr.max_ah")                                           \
	X(U, orig_attr.max_fmr, "orig_attr.max_fmr")                                         \
	X(U, orig_attr.max_map_per_fmr, "orig_attr.max_map_per_fmr")                         \
	X(U, orig_attr.max_srq, "orig_attr.max_srq")                                         \
	X(U, orig_attr.max_srq_wr, "orig_attr.max_srq_wr")                                   \
	X(U, orig_attr.max_srq_sge, "orig_attr.max_srq_sge")                                 \
	X(U, orig_attr.max_pkeys, "orig_attr.max_pkeys")                                     \
	X(U, orig_attr.local_ca_ack_delay, "orig_attr.local_ca_ack_delay")                   \
	X(U, orig_attr.phys_port_cnt, "orig_attr.phys_port_cnt")                             \
	X(U, odp_caps.general_caps, "odp_caps.general_caps")                                 \
	X(U, odp_caps.per_transport_caps.rc_odp_caps, "odp_caps.rc_odp_caps")                \
	X(U, odp_caps.per_transport_caps.uc_odp_caps, "odp_caps.uc_odp_caps")                \
	X(U, odp_caps.per_transport_caps.ud_odp_caps, "odp_caps.ud_odp_caps")                \
	X(U, completion_timestamp_mask, "completion_timestamp_mask")                         \
	X(U, hca_core_clock, "hca_core_clock")                                               \
	X(U, device_cap_flags_ex, "device_cap_flags_ex")                                     \
	X(U, tso_caps.max_tso, "tso_caps.max_tso")                                           \
	X(U, tso_caps.supported_qpts, "tso_caps.supported_qpts")                             \
	X(U, rss_caps.supported_qpts, "rss_caps.supported_qpts")                             \
	X(U, rss_caps.max_rwq_indirection_tables, "rss_caps.max_rwq_indirection_tables")     \
	X(U, rss_caps.max_rwq_indirection_table_size,                                        \
	  "rss_caps.max_rwq_indirection_table_size")                                         \
	X(U, rss_caps.rx_hash_fields_mask, "rss_caps.rx_hash_fields_mask")                   \
	X(U, rss_caps.rx_hash_function, "rss_caps.rx_hash_function")                         \
	X(U, max_wq_type_rq, "max_wq_type_rq")                                               \
	X(U, packet_pacing_caps.qp_rate_limit_min, "packet_pacing_caps.qp_rate_limit_min")   \
	X(U, packet_pacing_caps.qp_rate_limit_max, "packet_pacing_caps.qp_rate_limit_max")   \
	X(U, packet_pacing_caps.supported_qpts, "packet_pacing_caps.supported_qpts")         \
	X(U, raw_packet_caps, "raw_packet_caps")                                             \
	X(U, tm_caps.max_rndv_hdr_size, "tm_caps.max_rndv_hdr_size")                         \
	X(U, tm_caps.max_num_tags, "tm_caps.max_num_tags")                                   \
	X(U, tm_caps.flags, "tm_caps.flags")                                                 \
	X(U, tm_caps.max_ops, "tm_caps.max_ops")                                             \
	X(U, tm_caps.max_sge, "tm_caps.max_sge")                                             \
	X(U, cq_mod_caps.max_cq_count, "cq_mod_caps.max_cq_count")                           \
	X(U, cq_mod_caps.max_cq_period, "cq_mod_caps.max_cq_period")                         \
	X(U, max_dm_size, "max_dm_size")                                                     \
	X(U, pci_atomic_caps.fetch_add, "pci_atomic_caps.fetch_add")                         \
	X(U, pci_atomic_caps.swap, "pci_atomic_caps.swap")                                   \
	X(U, pci_atomic_caps.compare_swap, "pci_atomic_caps.compare_swap")                   \
	X(U, xrc_odp_caps, "odp_caps.xrc_odp_caps")                                          \
	X(U, phys_port_cnt_ex, "phys_port_cnt_ex")

/* The values QUERY_PORT carries, in order: X(conversion, member of struct ibv_port_attr,
 * attribute of pyverbs' PortAttr). */
#define NSRPC_PORT_ATTRS(X)                                                                  \
	X(U, state, "state")                                                                 \
	X(U, max_mtu, "max_mtu")                                                             \
	X(U, active_mtu, "active_mtu")                                                       \
	X(U, gid_tbl_len, "gid_tbl_len")                                                     \
	X(U, port_cap_flags, "port_cap_flags")                                               \
	X(U, max_msg_sz, "max_msg_sz")                                                       \
	X(U, bad_pkey_cntr, "bad_pkey_cntr")                                                 \
	X(U, qkey_viol_cntr, "qkey_viol_cntr")                                               \
	X(U, pkey_tbl_len, "pkey_tbl_len")                                                   \
	X(U, lid, "lid")                                                                     \
	X(U, sm_lid, "sm_lid")                                                               \
	X(U, lmc, "lmc")                                                                     \
	X(U, max_vl_num, "max_vl_num")                                                       \
	X(U, sm_sl, "sm_sl")                                                                 \
	X(U, subnet_timeout, "subnet_timeout")                                               \
	X(U, init_type_reply, "init_type_reply")                                             \
	X(U, active_width, "active_width")                                                   \
	X(U, active_speed, "active_speed")                                                   \
	X(U, phys_state, "phys_state")                                                       \
	X(U, link_layer, "link_layer")                                                       \
	X(U, flags, "flags")                                                                 \
	X(U, port_cap_flags2, "port_cap_flags2")

#endif
