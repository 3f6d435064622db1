/* The verbs this library does not carry to the server yet (SRQs, memory windows, rereg,
 * dma-buf, imported objects, ...).
 *
 * Each fails as it does under rdma-core's libibverbs with a provider that lacks it
 * (libibverbs/dummy_ops.c): a verb that returns an object returns NULL with errno
 * EOPNOTSUPP, one that returns an int returns EOPNOTSUPP, and nothing is printed. As none
 * of them can make an object, the verbs that take one can only be reached with a pointer
 * the program did not get from this library; they fail the same way rather than look at
 * it.
 *
 * The verbs of verbs.h that are static inline functions calling through verbs_context
 * (ibv_create_cq_ex, ibv_open_xrcd, ibv_create_flow, ...) need nothing here: their
 * verbs_context member is NULL, and verbs.h's accessors then answer EOPNOTSUPP themselves.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

#include "nsv.h"

#undef ibv_reg_mr
#undef ibv_reg_mr_iova

#define NONE_PTR                                                                           \
	do {                                                                               \
		errno = EOPNOTSUPP;                                                        \
		return NULL;                                                               \
	} while (0)

/* -- the context's ops (struct ibv_context_ops: verbs.h's inline ibv_post_send,
 *    ibv_poll_cq, ... call through them) -------------------------------------------------- */

static struct ibv_mw *op_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type)
{
	(void)pd;
	(void)type;
	NONE_PTR;
}

static int op_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *mw_bind)
{
	(void)qp;
	(void)mw;
	(void)mw_bind;
	return EOPNOTSUPP;
}

static int op_dealloc_mw(struct ibv_mw *mw)
{
	(void)mw;
	return EOPNOTSUPP;
}

static int op_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr,
			    struct ibv_recv_wr **bad_wr)
{
	(void)srq;
	*bad_wr = wr;
	return EOPNOTSUPP;
}

void nsv_fill_unsupported_ops(struct ibv_context_ops *ops)
{
	ops->alloc_mw = op_alloc_mw;
	ops->bind_mw = op_bind_mw;
	ops->dealloc_mw = op_dealloc_mw;
	ops->post_srq_recv = op_post_srq_recv;
}

/* -- objects -------------------------------------------------------------------------------- */

struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length,
				 uint64_t iova, int fd, int access)
{
	(void)pd;
	(void)offset;
	(void)length;
	(void)iova;
	(void)fd;
	(void)access;
	NONE_PTR;
}

int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t length,
		 int access)
{
	(void)mr;
	(void)flags;
	(void)pd;
	(void)addr;
	(void)length;
	(void)access;
	errno = EOPNOTSUPP;
	return IBV_REREG_MR_ERR_CMD; /* (what rdma-core returns when the provider fails) */
}

int ibv_resize_cq(struct ibv_cq *cq, int cqe)
{
	(void)cq;
	(void)cqe;
	return EOPNOTSUPP;
}

/* rdma-core reads the next event from context->async_fd: with no event, a blocking read
 * waits (for ever, as on an idle device) and a non-blocking one fails with EAGAIN. Nothing
 * writes events there yet. */
int ibv_get_async_event(struct ibv_context *context, struct ibv_async_event *event)
{
	uint64_t n;

	(void)event;
	if (read(context->async_fd, &n, sizeof(n)) != (ssize_t)sizeof(n))
		return -1;
	errno = EIO;
	return -1;
}

void ibv_ack_async_event(struct ibv_async_event *event)
{
	(void)event;
}

struct ibv_srq *ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *srq_init_attr)
{
	(void)pd;
	(void)srq_init_attr;
	NONE_PTR;
}

int ibv_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *srq_attr, int srq_attr_mask)
{
	(void)srq;
	(void)srq_attr;
	(void)srq_attr_mask;
	return EOPNOTSUPP;
}

int ibv_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *srq_attr)
{
	(void)srq;
	(void)srq_attr;
	return EOPNOTSUPP;
}

int ibv_destroy_srq(struct ibv_srq *srq)
{
	(void)srq;
	return EOPNOTSUPP;
}

struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
	(void)qp;
	NONE_PTR;
}

/* dummy_ops.c's answer: the device does not promise in-order data placement. */
int ibv_query_qp_data_in_order(struct ibv_qp *qp, enum ibv_wr_opcode op, uint32_t flags)
{
	(void)qp;
	(void)op;
	(void)flags;
	return 0;
}

int ibv_query_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	(void)qp;
	(void)ece;
	return EOPNOTSUPP;
}

int ibv_set_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	(void)qp;
	(void)ece;
	return EOPNOTSUPP;
}

int ibv_init_ah_from_wc(struct ibv_context *context, uint8_t port_num, struct ibv_wc *wc,
			struct ibv_grh *grh, struct ibv_ah_attr *ah_attr)
{
	(void)context;
	(void)port_num;
	(void)wc;
	(void)grh;
	(void)ah_attr;
	errno = EOPNOTSUPP;
	return -1;
}

struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc, struct ibv_grh *grh,
				     uint8_t port_num)
{
	(void)pd;
	(void)wc;
	(void)grh;
	(void)port_num;
	NONE_PTR;
}

int ibv_resolve_eth_l2_from_gid(struct ibv_context *context, struct ibv_ah_attr *attr,
				uint8_t eth_mac[ETHERNET_LL_SIZE], uint16_t *vid)
{
	(void)context;
	(void)attr;
	(void)eth_mac;
	(void)vid;
	return EOPNOTSUPP;
}

int ibv_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	(void)qp;
	(void)gid;
	(void)lid;
	return EOPNOTSUPP;
}

int ibv_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	(void)qp;
	(void)gid;
	(void)lid;
	return EOPNOTSUPP;
}

/* -- sharing objects between processes (ibv_import_*): not on nsnic ------------------------ */

struct ibv_context *ibv_import_device(int cmd_fd)
{
	(void)cmd_fd;
	NONE_PTR;
}

struct ibv_pd *ibv_import_pd(struct ibv_context *context, uint32_t pd_handle)
{
	(void)context;
	(void)pd_handle;
	NONE_PTR;
}

void ibv_unimport_pd(struct ibv_pd *pd)
{
	(void)pd;
}

struct ibv_mr *ibv_import_mr(struct ibv_pd *pd, uint32_t mr_handle)
{
	(void)pd;
	(void)mr_handle;
	NONE_PTR;
}

void ibv_unimport_mr(struct ibv_mr *mr)
{
	(void)mr;
}

struct ibv_dm *ibv_import_dm(struct ibv_context *context, uint32_t dm_handle)
{
	(void)context;
	(void)dm_handle;
	NONE_PTR;
}

void ibv_unimport_dm(struct ibv_dm *dm)
{
	(void)dm;
}

/* -- fork support. The simulated NIC reaches a registered buffer through the process at
 *    each access (the server copies from and to the process's memory), never through pinned
 *    pages, so a fork cannot take a page from under it: rdma-core's IBV_FORK_UNNEEDED, the
 *    answer of a kernel that copes with fork by itself ------------------------------------ */

int ibv_fork_init(void)
{
	return 0;
}

enum ibv_fork_status ibv_is_fork_initialized(void)
{
	return IBV_FORK_UNNEEDED;
}

int ibv_dontfork_range(void *base, size_t size);
int ibv_dontfork_range(void *base, size_t size)
{
	(void)base;
	(void)size;
	return 0;
}

int ibv_dofork_range(void *base, size_t size);
int ibv_dofork_range(void *base, size_t size)
{
	(void)base;
	(void)size;
	return 0;
}
