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
 *   HELLO         u32 version, then the program's name  ->  u32 version
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
 * An op the server does not know is answered EOPNOTSUPP; a malformed body EINVAL. The
 * server runs the verb in the Python driver (nicsim.driver), so every value and every errno
 * is the one a pyverbs program under `nicsim exec` sees.
 */
#ifndef NSRPC_H
#define NSRPC_H

#include <stdint.h>

#define NSRPC_VERSION 1
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
};

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
