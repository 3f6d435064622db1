/* Objects and the data path: PDs, MRs, completion channels, CQs, QPs and AHs, and the
 * context's ops verbs.h's inline ibv_post_send, ibv_post_recv, ibv_poll_cq and
 * ibv_req_notify_cq call through.
 *
 * The program gets the structs of <infiniband/verbs.h> it expects; each keeps the server's
 * name for the object in its `handle` member, where rdma-core keeps the kernel's (a
 * completion channel has none: struct nsv_channel holds it beside). Each verb is one
 * request; the Python driver decides everything (values, limits, errnos), this file only
 * follows libibverbs' calling conventions, cited per function from rdma-core's
 * libibverbs/verbs.c and device.c.
 *
 * Registered memory stays in the program: the server copies what the simulated NIC reads
 * from it and writes what the NIC writes into it (process_vm_readv/writev), see
 * docs/explanation/c-programs.md. A WR's inline data is read here, at the post, as a
 * provider copies it into the WQE.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "nsv.h"

#undef ibv_reg_mr
#undef ibv_reg_mr_iova

static uint32_t ctx_handle(struct ibv_context *context)
{
	return nsv_ctx(context)->handle;
}

/* A request whose reply is nothing: 0 or the errno. */
static int call_u32(uint32_t op, uint32_t handle)
{
	return nsv_call(op, &handle, sizeof(handle), NULL, 0, NULL);
}

/* A request that makes an object in the server, whose reply (`replen` bytes) starts with
 * the object's u32 handle: the program's side of it (`size` zeroed bytes), or NULL with
 * errno; when memory runs out the server's object is destroyed again with `destroy_op`. */
static void *create(uint32_t op, const void *req, uint32_t len, void *rep, uint32_t replen,
		    uint32_t destroy_op, size_t size)
{
	int err = nsv_call_exact(op, req, len, rep, replen);
	uint32_t handle;
	void *obj;

	if (err) {
		errno = err;
		return NULL;
	}
	obj = calloc(1, size);
	if (!obj) {
		memcpy(&handle, rep, sizeof(handle));
		call_u32(destroy_op, handle);
		errno = ENOMEM;
	}
	return obj;
}

/* -- protection domains ------------------------------------------------------------------- */

/* rdma-core verbs.c ibv_alloc_pd: the PD, or NULL with errno. */
struct ibv_pd *ibv_alloc_pd(struct ibv_context *context)
{
	uint32_t h = ctx_handle(context);
	struct ibv_pd *pd = create(NSRPC_ALLOC_PD, &h, sizeof(h), &h, sizeof(h), NSRPC_DEALLOC_PD,
				   sizeof(*pd));

	if (!pd)
		return NULL;
	pd->context = context;
	pd->handle = h;
	return pd;
}

/* Destroy the server's object `handle` with `op`; free the program's side only if that
 * worked (a failed destroy, EBUSY, leaves the object usable, as in libibverbs). */
static int destroy_and_free(uint32_t op, uint32_t handle, void *obj)
{
	int err = call_u32(op, handle);

	if (!err)
		free(obj);
	return err;
}

/* rdma-core verbs.c ibv_dealloc_pd: 0 or the errno (EBUSY while objects use it). */
int ibv_dealloc_pd(struct ibv_pd *pd)
{
	return destroy_and_free(NSRPC_DEALLOC_PD, pd->handle, pd);
}

/* -- memory regions ----------------------------------------------------------------------- */

static struct ibv_mr *reg_mr(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
			     unsigned int access)
{
	struct nsrpc_reg_mr req = {
		.pd = pd->handle,
		.access = access,
		.addr = (uintptr_t)addr,
		.length = length,
		.iova = iova,
	};
	struct {
		uint32_t handle, lkey, rkey;
	} rep;
	struct ibv_mr *mr = create(NSRPC_REG_MR, &req, sizeof(req), &rep, sizeof(rep),
				   NSRPC_DEREG_MR, sizeof(*mr));

	if (!mr)
		return NULL;
	mr->context = pd->context;
	mr->pd = pd;
	mr->addr = addr;
	mr->length = length;
	mr->handle = rep.handle;
	mr->lkey = rep.lkey;
	mr->rkey = rep.rkey;
	return mr;
}

/* rdma-core verbs.c ibv_reg_mr (the symbol verbs.h's ibv_reg_mr calls when the access flags
 * are constant and have no optional bit): the MR, or NULL with errno. */
struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	return reg_mr(pd, addr, length, (uintptr_t)addr, (unsigned int)access);
}

struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
			       int access)
{
	return reg_mr(pd, addr, length, iova, (unsigned int)access);
}

/* What verbs.h's inline ibv_reg_mr calls otherwise (rdma-core 44), with iova = addr. The
 * optional access bits are dropped when the device does not know them (rdma-core masks
 * IBV_ACCESS_OPTIONAL_RANGE for a kernel without them); nsnic knows relaxed ordering. */
struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
				unsigned int access)
{
	return reg_mr(pd, addr, length, iova, access);
}

/* rdma-core verbs.c ibv_dereg_mr: 0 or the errno. */
int ibv_dereg_mr(struct ibv_mr *mr)
{
	return destroy_and_free(NSRPC_DEREG_MR, mr->handle, mr);
}

/* -- completion channels and events ------------------------------------------------------- */

/* rdma-core device.c ibv_create_comp_channel: the channel, or NULL with errno. Its fd is an
 * eventfd the server adds to when the channel has an event, so poll() on it works; the
 * event itself is taken by ibv_get_cq_event. */
struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *context)
{
	uint32_t h = ctx_handle(context);
	struct nsv_channel *ch;
	int fd, err;

	fd = eventfd(0, EFD_CLOEXEC);
	if (fd < 0)
		return NULL;
	err = nsv_call_fd(NSRPC_CREATE_COMP_CHANNEL, &h, sizeof(h), fd, &h, sizeof(h), NULL);
	if (err) {
		close(fd);
		errno = err;
		return NULL;
	}
	ch = calloc(1, sizeof(*ch));
	if (!ch) {
		call_u32(NSRPC_DESTROY_COMP_CHANNEL, h);
		close(fd);
		errno = ENOMEM;
		return NULL;
	}
	ch->ch.context = context;
	ch->ch.fd = fd;
	ch->handle = h;
	return &ch->ch;
}

/* rdma-core device.c ibv_destroy_comp_channel: EBUSY while a CQ uses it, else 0 or the
 * errno. */
int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
	struct nsv_channel *ch = (struct nsv_channel *)channel;
	int err;

	if (channel->refcnt)
		return EBUSY;
	err = call_u32(NSRPC_DESTROY_COMP_CHANNEL, ch->handle);
	if (err)
		return err;
	close(channel->fd);
	free(ch);
	return 0;
}

/* Take what the server has added to the channel's eventfd (it adds again after a request
 * if events are still pending), without blocking however the program set the fd. */
static void drain(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	uint64_t n;

	if (poll(&p, 1, 0) == 1 && (p.revents & POLLIN))
		(void)!read(fd, &n, sizeof(n));
}

/* rdma-core verbs.c ibv_get_cq_event: 0 with the CQ and its context, or -1. Each request
 * lets the world run for a bounded window of simulated time, so a wait ends as soon as the
 * event comes and never holds the world from the other programs; a blocking channel asks
 * again until an event comes, a non-blocking one (O_NONBLOCK on channel->fd) fails with
 * EAGAIN, as a read of the real channel would. */
int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq, void **cq_context)
{
	struct nsv_channel *ch = (struct nsv_channel *)channel;
	int nonblock = fcntl(channel->fd, F_GETFL) & O_NONBLOCK;
	uint64_t cookie;
	int err;

	for (;;) {
		drain(channel->fd);
		err = nsv_call_exact(NSRPC_GET_CQ_EVENT, &ch->handle, sizeof(ch->handle), &cookie,
				     sizeof(cookie));
		if (!err)
			break;
		if (err != EAGAIN || nonblock) {
			if (err != EAGAIN)
				nsv_debug("ibv_get_cq_event: %s", strerror(err));
			errno = err;
			return -1;
		}
	}
	*cq = (struct ibv_cq *)(uintptr_t)cookie;
	*cq_context = (*cq)->cq_context;
	return 0;
}

/* rdma-core verbs.c ibv_ack_cq_events: counted in the CQ, under its mutex. */
void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
	pthread_mutex_lock(&cq->mutex);
	cq->comp_events_completed += nevents;
	pthread_cond_signal(&cq->cond);
	pthread_mutex_unlock(&cq->mutex);
}

/* -- completion queues -------------------------------------------------------------------- */

/* rdma-core verbs.c ibv_create_cq: the CQ, or NULL with errno; cq->cqe is what the CQ
 * holds (at least what was asked for). */
struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe, void *cq_context,
			     struct ibv_comp_channel *channel, int comp_vector)
{
	struct nsrpc_create_cq req = {
		.context = ctx_handle(context),
		.cqe = cqe,
		.channel = channel ? ((struct nsv_channel *)channel)->handle : 0,
		.comp_vector = comp_vector,
	};
	struct {
		uint32_t handle;
		int32_t cqe;
	} rep;
	struct ibv_cq *cq;
	int err;

	cq = calloc(1, sizeof(*cq));
	if (!cq) {
		errno = ENOMEM;
		return NULL;
	}
	req.cookie = (uintptr_t)cq;
	err = nsv_call_exact(NSRPC_CREATE_CQ, &req, sizeof(req), &rep, sizeof(rep));
	if (err) {
		free(cq);
		errno = err;
		return NULL;
	}
	cq->context = context;
	cq->channel = channel;
	cq->cq_context = cq_context;
	cq->handle = rep.handle;
	cq->cqe = rep.cqe;
	pthread_mutex_init(&cq->mutex, NULL);
	pthread_cond_init(&cq->cond, NULL);
	if (channel) {
		pthread_mutex_lock(&context->mutex);
		++channel->refcnt;
		pthread_mutex_unlock(&context->mutex);
	}
	return cq;
}

/* rdma-core verbs.c ibv_destroy_cq: 0 or the errno (EBUSY while a QP uses it). */
int ibv_destroy_cq(struct ibv_cq *cq)
{
	struct ibv_comp_channel *channel = cq->channel;
	struct ibv_context *context = cq->context;
	int err = call_u32(NSRPC_DESTROY_CQ, cq->handle);

	if (err)
		return err;
	if (channel) {
		pthread_mutex_lock(&context->mutex);
		--channel->refcnt;
		pthread_mutex_unlock(&context->mutex);
	}
	pthread_mutex_destroy(&cq->mutex);
	pthread_cond_destroy(&cq->cond);
	free(cq);
	return 0;
}

/* ibv_req_notify_cq (verbs.h calls cq->context->ops.req_notify_cq): 0 or the errno. */
static int op_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	uint32_t req[2] = { cq->handle, solicited_only ? 1 : 0 };

	return nsv_call(NSRPC_REQ_NOTIFY_CQ, req, sizeof(req), NULL, 0, NULL);
}

/* ibv_poll_cq (verbs.h calls cq->context->ops.poll_cq): the completions taken, or a
 * negative errno (a CQ that overran, a server that went away). */
static int op_poll_cq(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc)
{
	uint32_t req[2] = { cq->handle, 0 };
	struct nsrpc_wc rep[NSRPC_POLL_MAX];
	uint32_t got = 0, i, n;
	int err;

	if (num_entries <= 0)
		return 0;
	req[1] = num_entries < NSRPC_POLL_MAX ? (uint32_t)num_entries : NSRPC_POLL_MAX;
	err = nsv_call(NSRPC_POLL_CQ, req, sizeof(req), rep, sizeof(rep), &got);
	if (err)
		return -err;
	n = got / sizeof(rep[0]);
	for (i = 0; i < n; i++) {
		const struct nsrpc_wc *r = &rep[i];

		memset(&wc[i], 0, sizeof(wc[i]));
		wc[i].wr_id = r->wr_id;
		wc[i].status = (enum ibv_wc_status)r->status;
		wc[i].opcode = (enum ibv_wc_opcode)r->opcode;
		wc[i].vendor_err = r->vendor_err;
		wc[i].byte_len = r->byte_len;
		wc[i].imm_data = r->imm_data;
		wc[i].qp_num = r->qp_num;
		wc[i].src_qp = r->src_qp;
		wc[i].wc_flags = r->wc_flags;
		wc[i].pkey_index = r->pkey_index;
		wc[i].slid = r->slid;
		wc[i].sl = r->sl;
		wc[i].dlid_path_bits = r->dlid_path_bits;
	}
	return (int)n;
}

/* -- queue pairs -------------------------------------------------------------------------- */

static void cap_to(struct nsrpc_cap *out, const struct ibv_qp_cap *in)
{
	out->max_send_wr = in->max_send_wr;
	out->max_recv_wr = in->max_recv_wr;
	out->max_send_sge = in->max_send_sge;
	out->max_recv_sge = in->max_recv_sge;
	out->max_inline_data = in->max_inline_data;
}

static void cap_from(struct ibv_qp_cap *out, const struct nsrpc_cap *in)
{
	out->max_send_wr = in->max_send_wr;
	out->max_recv_wr = in->max_recv_wr;
	out->max_send_sge = in->max_send_sge;
	out->max_recv_sge = in->max_recv_sge;
	out->max_inline_data = in->max_inline_data;
}

/* rdma-core verbs.c ibv_create_qp: the QP in RESET, or NULL with errno; the caller's caps
 * become what the QP holds, as a provider writes them back (mlx5 does). */
struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	struct nsrpc_create_qp req = {
		.pd = pd->handle,
		.send_cq = attr->send_cq ? attr->send_cq->handle : 0,
		.recv_cq = attr->recv_cq ? attr->recv_cq->handle : 0,
		.srq = attr->srq ? attr->srq->handle : 0,
		.qp_type = attr->qp_type,
		.sq_sig_all = (uint32_t)attr->sq_sig_all,
	};
	struct {
		uint32_t handle, qpn;
		struct nsrpc_cap cap;
	} __attribute__((packed)) rep;
	struct ibv_qp *qp;

	if (!attr->send_cq || !attr->recv_cq) {
		errno = EINVAL;
		return NULL;
	}
	cap_to(&req.cap, &attr->cap);
	qp = create(NSRPC_CREATE_QP, &req, sizeof(req), &rep, sizeof(rep), NSRPC_DESTROY_QP,
		    sizeof(*qp));
	if (!qp)
		return NULL;
	qp->context = pd->context;
	qp->qp_context = attr->qp_context;
	qp->pd = pd;
	qp->send_cq = attr->send_cq;
	qp->recv_cq = attr->recv_cq;
	qp->srq = attr->srq;
	qp->handle = rep.handle;
	qp->qp_num = rep.qpn;
	qp->state = IBV_QPS_RESET;
	qp->qp_type = attr->qp_type;
	pthread_mutex_init(&qp->mutex, NULL);
	pthread_cond_init(&qp->cond, NULL);
	cap_from(&attr->cap, &rep.cap);
	return qp;
}

static void ah_to(struct nsrpc_ah_attr *out, const struct ibv_ah_attr *in)
{
	memcpy(out->dgid, in->grh.dgid.raw, sizeof(out->dgid));
	out->flow_label = in->grh.flow_label;
	out->sgid_index = in->grh.sgid_index;
	out->hop_limit = in->grh.hop_limit;
	out->traffic_class = in->grh.traffic_class;
	out->is_global = in->is_global;
	out->dlid = in->dlid;
	out->sl = in->sl;
	out->src_path_bits = in->src_path_bits;
	out->static_rate = in->static_rate;
	out->port_num = in->port_num;
}

static void ah_from(struct ibv_ah_attr *out, const struct nsrpc_ah_attr *in)
{
	memcpy(out->grh.dgid.raw, in->dgid, sizeof(in->dgid));
	out->grh.flow_label = in->flow_label;
	out->grh.sgid_index = in->sgid_index;
	out->grh.hop_limit = in->hop_limit;
	out->grh.traffic_class = in->traffic_class;
	out->is_global = in->is_global;
	out->dlid = in->dlid;
	out->sl = in->sl;
	out->src_path_bits = in->src_path_bits;
	out->static_rate = in->static_rate;
	out->port_num = in->port_num;
}

/* Every field of struct ibv_qp_attr, in both directions (X: the members of the same name). */
#define QP_ATTR_FIELDS(X)                                                                  \
	X(qp_state) X(cur_qp_state) X(path_mtu) X(path_mig_state) X(qkey) X(rq_psn)        \
	X(sq_psn) X(dest_qp_num) X(qp_access_flags) X(pkey_index) X(alt_pkey_index)         \
	X(en_sqd_async_notify) X(sq_draining) X(max_rd_atomic) X(max_dest_rd_atomic)        \
	X(min_rnr_timer) X(port_num) X(timeout) X(retry_cnt) X(rnr_retry) X(alt_port_num)   \
	X(alt_timeout) X(rate_limit)

static void qp_attr_to(struct nsrpc_qp_attr *out, const struct ibv_qp_attr *in)
{
#define TO(f) out->f = in->f;
	QP_ATTR_FIELDS(TO)
#undef TO
	cap_to(&out->cap, &in->cap);
	ah_to(&out->ah_attr, &in->ah_attr);
	ah_to(&out->alt_ah_attr, &in->alt_ah_attr);
}

static void qp_attr_from(struct ibv_qp_attr *out, const struct nsrpc_qp_attr *in)
{
#define FROM(f) out->f = in->f;
	QP_ATTR_FIELDS(FROM)
#undef FROM
	cap_from(&out->cap, &in->cap);
	ah_from(&out->ah_attr, &in->ah_attr);
	ah_from(&out->alt_ah_attr, &in->alt_ah_attr);
}

/* rdma-core verbs.c ibv_modify_qp: 0 or the errno; qp->state follows a state change. */
int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask)
{
	struct {
		uint32_t handle, mask;
		struct nsrpc_qp_attr attr;
	} __attribute__((packed)) req = { .handle = qp->handle, .mask = (uint32_t)attr_mask };
	int err;

	qp_attr_to(&req.attr, attr);
	err = nsv_call(NSRPC_MODIFY_QP, &req, sizeof(req), NULL, 0, NULL);
	if (!err && (attr_mask & IBV_QP_STATE))
		qp->state = attr->qp_state;
	return err;
}

/* rdma-core verbs.c ibv_query_qp: 0 or the errno; init_attr's objects are the QP's own. */
int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask,
		 struct ibv_qp_init_attr *init_attr)
{
	uint32_t req[2] = { qp->handle, (uint32_t)attr_mask };
	struct {
		struct nsrpc_qp_attr attr;
		uint32_t qp_type, sq_sig_all;
	} __attribute__((packed)) rep;
	int err = nsv_call_exact(NSRPC_QUERY_QP, req, sizeof(req), &rep, sizeof(rep));

	if (err)
		return err;
	memset(attr, 0, sizeof(*attr));
	qp_attr_from(attr, &rep.attr);
	memset(init_attr, 0, sizeof(*init_attr));
	init_attr->qp_context = qp->qp_context;
	init_attr->send_cq = qp->send_cq;
	init_attr->recv_cq = qp->recv_cq;
	init_attr->srq = qp->srq;
	init_attr->qp_type = (enum ibv_qp_type)rep.qp_type;
	init_attr->cap = attr->cap;
	init_attr->sq_sig_all = (int)rep.sq_sig_all;
	qp->state = attr->qp_state;
	return 0;
}

/* rdma-core verbs.c ibv_destroy_qp: 0 or the errno. */
int ibv_destroy_qp(struct ibv_qp *qp)
{
	int err = call_u32(NSRPC_DESTROY_QP, qp->handle);

	if (err)
		return err;
	pthread_mutex_destroy(&qp->mutex);
	pthread_cond_destroy(&qp->cond);
	free(qp);
	return 0;
}

/* -- address handles ---------------------------------------------------------------------- */

/* rdma-core verbs.c ibv_create_ah: the AH, or NULL with errno. */
struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	struct {
		uint32_t pd;
		struct nsrpc_ah_attr attr;
	} __attribute__((packed)) req = { .pd = pd->handle };
	struct ibv_ah *ah;
	uint32_t h;

	ah_to(&req.attr, attr);
	ah = create(NSRPC_CREATE_AH, &req, sizeof(req), &h, sizeof(h), NSRPC_DESTROY_AH,
		    sizeof(*ah));
	if (!ah)
		return NULL;
	ah->context = pd->context;
	ah->pd = pd;
	ah->handle = h;
	return ah;
}

/* rdma-core verbs.c ibv_destroy_ah: 0 or the errno. */
int ibv_destroy_ah(struct ibv_ah *ah)
{
	return destroy_and_free(NSRPC_DESTROY_AH, ah->handle, ah);
}

/* -- posting ------------------------------------------------------------------------------ */

/* A request body being built: a buffer on the stack for the usual post of a few WRs, the
 * heap for a long chain. */
struct body {
	char *p;
	size_t len, cap;
	char stack[4096];
};

static int body_put(struct body *b, const void *data, size_t n)
{
	if (b->len + n > b->cap) {
		size_t cap = (b->len + n) * 2;
		char *p = b->p == b->stack ? malloc(cap) : realloc(b->p, cap);

		if (!p)
			return ENOMEM;
		if (b->p == b->stack)
			memcpy(p, b->stack, b->len);
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->len, data, n);
	b->len += n;
	return 0;
}

static void body_init(struct body *b, uint32_t handle)
{
	uint32_t hdr[2] = { handle, 0 };

	b->p = b->stack;
	b->cap = sizeof(b->stack);
	b->len = 0;
	body_put(b, hdr, sizeof(hdr));
}

static void body_free(struct body *b)
{
	if (b->p != b->stack)
		free(b->p);
}

/* The most a post carries in one request (the server's limit is 1 MiB): a longer chain
 * goes in several, in order. */
#define POST_MAX (512u << 10)

/* Send one batch: the number of WRs of it posted, the errno of the first that was not. */
static int send_batch(uint32_t op, struct body *b, uint32_t n, uint32_t *posted)
{
	struct {
		int32_t err;
		uint32_t posted;
	} rep;
	int err;

	memcpy(b->p + sizeof(uint32_t), &n, sizeof(n));
	err = nsv_call_exact(op, b->p, (uint32_t)b->len, &rep, sizeof(rep));
	if (err) {
		*posted = 0;
		return err;
	}
	*posted = rep.posted;
	return rep.err;
}

static int is_atomic(enum ibv_wr_opcode op)
{
	return op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD;
}

static int put_send_wr(struct body *b, struct ibv_qp *qp, struct ibv_send_wr *wr)
{
	struct nsrpc_send_wr w = {
		.wr_id = wr->wr_id,
		.opcode = wr->opcode,
		.send_flags = wr->send_flags,
		.imm_data = wr->imm_data, /* (the union with invalidate_rkey) */
		.num_sge = (uint32_t)wr->num_sge,
	};
	int i, err;

	if (wr->num_sge < 0)
		return EINVAL;
	if (qp->qp_type == IBV_QPT_UD) {
		w.ah = wr->wr.ud.ah ? wr->wr.ud.ah->handle : 0;
		w.remote_qpn = wr->wr.ud.remote_qpn;
		w.remote_qkey = wr->wr.ud.remote_qkey;
	} else if (is_atomic(wr->opcode)) {
		w.remote_addr = wr->wr.atomic.remote_addr;
		w.rkey = wr->wr.atomic.rkey;
		w.compare_add = wr->wr.atomic.compare_add;
		w.swap = wr->wr.atomic.swap;
	} else {
		w.remote_addr = wr->wr.rdma.remote_addr;
		w.rkey = wr->wr.rdma.rkey;
	}
	if (wr->send_flags & IBV_SEND_INLINE)
		for (i = 0; i < wr->num_sge; i++)
			w.inline_len += wr->sg_list[i].length;
	err = body_put(b, &w, sizeof(w));
	for (i = 0; !err && i < wr->num_sge; i++) {
		struct nsrpc_sge s = { wr->sg_list[i].addr, wr->sg_list[i].length,
				       wr->sg_list[i].lkey };

		err = body_put(b, &s, sizeof(s));
	}
	/* inline data: read from the program's memory now (it may reuse the buffer as soon
	 * as ibv_post_send returns) */
	for (i = 0; !err && w.inline_len && i < wr->num_sge; i++)
		err = body_put(b, (const void *)(uintptr_t)wr->sg_list[i].addr,
			       wr->sg_list[i].length);
	return err;
}

static int put_recv_wr(struct body *b, struct ibv_recv_wr *wr)
{
	struct nsrpc_recv_wr w = { .wr_id = wr->wr_id, .num_sge = (uint32_t)wr->num_sge };
	int i, err;

	if (wr->num_sge < 0)
		return EINVAL;
	err = body_put(b, &w, sizeof(w));
	for (i = 0; !err && i < wr->num_sge; i++) {
		struct nsrpc_sge s = { wr->sg_list[i].addr, wr->sg_list[i].length,
				       wr->sg_list[i].lkey };

		err = body_put(b, &s, sizeof(s));
	}
	return err;
}

/* Post a chain: the WRs go in batches of at most POST_MAX bytes, in order. 0, or the errno
 * with *bad the first WR not posted (those before it are posted, as a provider leaves
 * them). One body for both kinds of WR (`put` writes one, `next` follows the chain). */
#define POST_CHAIN(op, wr, bad, put, next_of)                                              \
	do {                                                                               \
		struct body b;                                                             \
		__typeof__(wr) first = (wr), next;                                         \
		uint32_t n = 0, posted = 0, i;                                             \
		int err = 0;                                                               \
                                                                                           \
		body_init(&b, qp->handle);                                                 \
		while (wr) {                                                               \
			err = (put);                                                       \
			if (err) {                                                         \
				int sent = n ? send_batch(op, &b, n, &posted) : 0;         \
                                                                                           \
				if (sent) {                                                \
					err = sent;                                        \
					for (i = 0; i < posted; i++)                       \
						first = next_of(first);                    \
					wr = first;                                        \
				}                                                          \
				break;                                                     \
			}                                                                  \
			n++;                                                               \
			next = next_of(wr);                                                \
			if (!next || b.len >= POST_MAX) {                                  \
				err = send_batch(op, &b, n, &posted);                      \
				if (err) {                                                 \
					for (i = 0; i < posted; i++)                       \
						first = next_of(first);                    \
					wr = first;                                        \
					break;                                             \
				}                                                          \
				first = next;                                              \
				n = 0;                                                     \
				b.len = 2 * sizeof(uint32_t);                              \
			}                                                                  \
			wr = next;                                                         \
		}                                                                          \
		body_free(&b);                                                             \
		if (err)                                                                   \
			*(bad) = wr;                                                       \
		return err;                                                                \
	} while (0)

#define SEND_NEXT(w) ((w)->next)

/* ibv_post_send (verbs.h calls qp->context->ops.post_send). */
static int op_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr)
{
	POST_CHAIN(NSRPC_POST_SEND, wr, bad_wr, put_send_wr(&b, qp, wr), SEND_NEXT);
}

/* ibv_post_recv (verbs.h calls qp->context->ops.post_recv). */
static int op_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr)
{
	POST_CHAIN(NSRPC_POST_RECV, wr, bad_wr, put_recv_wr(&b, wr), SEND_NEXT);
}

void nsv_fill_ops(struct nsv_context *ctx)
{
	struct ibv_context_ops *ops = &ctx->vctx.context.ops;

	nsv_fill_unsupported_ops(ops);
	ops->poll_cq = op_poll_cq;
	ops->req_notify_cq = op_req_notify_cq;
	ops->post_send = op_post_send;
	ops->post_recv = op_post_recv;
}
