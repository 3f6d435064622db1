/* libibverbs' provider interface (version IBVERBS_PRIVATE_34): what rdma-core's provider
 * libraries (libmlx5, libefa, ...) import from libibverbs.
 *
 * Debian's perftest links libmlx5.so.1 and libefa.so.1 directly, and they, like the
 * programs, are linked with BIND_NOW: the dynamic loader refuses to start the program
 * unless every symbol they import is here, at this version. So this library defines them
 * all. None is ever used for a device: a provider registers itself from its constructor
 * (verbs_register_driver_34), and nicsim's devices are served by this library itself, so
 * the registration is ignored, no provider ever gets a device, and a provider's direct
 * verbs (mlx5dv_*) find no device of theirs (they fail as on another vendor's device).
 *
 * The prototypes of these are in rdma-core's private infiniband/driver.h, which Debian
 * does not install; the signatures below keep only what the return needs. Every command
 * (ibv_cmd_*) fails with EOPNOTSUPP, and every constructor returns NULL with errno
 * EOPNOTSUPP.
 */
#include <errno.h>
#include <stddef.h>

#include "nsv.h"

#define CMD(name)                                                                          \
	int name(void);                                                                    \
	int name(void)                                                                     \
	{                                                                                  \
		return EOPNOTSUPP;                                                         \
	}

CMD(ibv_cmd_advise_mr)
CMD(ibv_cmd_alloc_dm)
CMD(ibv_cmd_alloc_mw)
CMD(ibv_cmd_alloc_pd)
CMD(ibv_cmd_attach_mcast)
CMD(ibv_cmd_close_xrcd)
CMD(ibv_cmd_create_ah)
CMD(ibv_cmd_create_counters)
CMD(ibv_cmd_create_cq)
CMD(ibv_cmd_create_cq_ex)
CMD(ibv_cmd_create_flow)
CMD(ibv_cmd_create_flow_action_esp)
CMD(ibv_cmd_create_qp)
CMD(ibv_cmd_create_qp_ex)
CMD(ibv_cmd_create_qp_ex2)
CMD(ibv_cmd_create_rwq_ind_table)
CMD(ibv_cmd_create_srq)
CMD(ibv_cmd_create_srq_ex)
CMD(ibv_cmd_create_wq)
CMD(ibv_cmd_dealloc_mw)
CMD(ibv_cmd_dealloc_pd)
CMD(ibv_cmd_dereg_mr)
CMD(ibv_cmd_destroy_ah)
CMD(ibv_cmd_destroy_counters)
CMD(ibv_cmd_destroy_cq)
CMD(ibv_cmd_destroy_flow)
CMD(ibv_cmd_destroy_flow_action)
CMD(ibv_cmd_destroy_qp)
CMD(ibv_cmd_destroy_rwq_ind_table)
CMD(ibv_cmd_destroy_srq)
CMD(ibv_cmd_destroy_wq)
CMD(ibv_cmd_detach_mcast)
CMD(ibv_cmd_free_dm)
CMD(ibv_cmd_get_context)
CMD(ibv_cmd_modify_cq)
CMD(ibv_cmd_modify_flow_action_esp)
CMD(ibv_cmd_modify_qp)
CMD(ibv_cmd_modify_qp_ex)
CMD(ibv_cmd_modify_srq)
CMD(ibv_cmd_modify_wq)
CMD(ibv_cmd_open_qp)
CMD(ibv_cmd_open_xrcd)
CMD(ibv_cmd_poll_cq)
CMD(ibv_cmd_post_recv)
CMD(ibv_cmd_post_send)
CMD(ibv_cmd_post_srq_recv)
CMD(ibv_cmd_query_context)
CMD(ibv_cmd_query_device_any)
CMD(ibv_cmd_query_mr)
CMD(ibv_cmd_query_port)
CMD(ibv_cmd_query_qp)
CMD(ibv_cmd_query_srq)
CMD(ibv_cmd_read_counters)
CMD(ibv_cmd_reg_dm_mr)
CMD(ibv_cmd_reg_dmabuf_mr)
CMD(ibv_cmd_reg_mr)
CMD(ibv_cmd_req_notify_cq)
CMD(ibv_cmd_rereg_mr)
CMD(ibv_cmd_resize_cq)
CMD(execute_ioctl)

/* rdma-core: whether destroying an object of a disassociated device succeeds. */
int verbs_allow_disassociate_destroy;

void *_verbs_init_and_alloc_context(void);
void *_verbs_init_and_alloc_context(void)
{
	errno = EOPNOTSUPP;
	return NULL;
}

void *verbs_open_device(void);
void *verbs_open_device(void)
{
	errno = EOPNOTSUPP;
	return NULL;
}

void verbs_register_driver_34(void);
void verbs_register_driver_34(void)
{
	/* (ignored: see the top of the file) */
}

void verbs_set_ops(void);
void verbs_set_ops(void)
{
}

void verbs_uninit_context(void);
void verbs_uninit_context(void)
{
}

void verbs_init_cq(void);
void verbs_init_cq(void)
{
}

void __verbs_log(void);
void __verbs_log(void)
{
}

/* rdma-core's ioctl attribute builder; a provider only calls it on a device it opened. */
void *__ioctl_final_num_attrs(void);
void *__ioctl_final_num_attrs(void)
{
	return NULL;
}

/* Conversions from the kernel's ABI structs that librdmacm uses after its own commands to
 * the kernel's RDMA CM (libibverbs' historical IBVERBS_1.0/1.1 exports). They are reached
 * only with answers of a kernel RDMA CM about a kernel device, which a nicsim device never
 * has; they leave the destination as it is. */
#define COPY(name)                                                                         \
	void name(void *dst, const void *src);                                             \
	void name(void *dst, const void *src)                                              \
	{                                                                                  \
		(void)dst;                                                                 \
		(void)src;                                                                 \
	}

COPY(ibv_copy_qp_attr_from_kern)
COPY(ibv_copy_ah_attr_from_kern)
COPY(ibv_copy_path_rec_from_kern)
COPY(ibv_copy_path_rec_to_kern)
