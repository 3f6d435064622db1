/* nicsim's libibverbs.so.1: what its source files share (not installed, not exported).
 *
 * The library is a thin transport. It gives a C program libibverbs' ABI (the symbols, their
 * versions and the struct layouts of <infiniband/verbs.h>) and carries each verb to the
 * Python verbs server of `nicsim exec` (nicsim/exec/cserver.py) over the protocol of
 * nsrpc.h. It holds no verbs semantics of its own: values, limits and errors are the Python
 * driver's. See docs/explanation/c-programs.md.
 */
#ifndef NSV_H
#define NSV_H

#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#include "nsrpc.h"

/* One device of the simulated world, as ibv_get_device_list hands it out. It lives as long
 * as the process (rdma-core keeps a device while a context holds it; nicsim's are few and
 * never go away, so they are never freed). */
struct nsv_device {
	struct ibv_device dev; /* first: the program holds a struct ibv_device * */
	uint64_t guid; /* host order */
	uint32_t index;
};

/* An opened device. verbs_context must be first and its ibv_context last inside it: the
 * inline accessors of verbs.h (verbs_get_ctx) find the verbs_context from the ibv_context
 * by subtracting its offset, as rdma-core's providers lay theirs out. */
struct nsv_context {
	struct verbs_context vctx;
	uint32_t handle; /* the server's name for this context */
	int phys_port_cnt;
};

static inline struct nsv_context *nsv_ctx(struct ibv_context *c)
{
	return (struct nsv_context *)((char *)c - offsetof(struct nsv_context, vctx.context));
}

/* The GID types of sysfs (gid_attrs/types), which ibv_query_gid_type answers: rdma-core
 * declares them in its private infiniband/driver.h, which Debian does not install. */
enum ibv_gid_type_sysfs {
	IBV_GID_TYPE_SYSFS_IB_ROCE_V1,
	IBV_GID_TYPE_SYSFS_ROCE_V2,
};

/* One request and its reply (rpc.c). Returns 0, or the errno of the failure: the server's
 * status, or the transport's (ENOTCONN when no server can be reached, EPROTO when the reply
 * is malformed). `reply` gets up to `cap` bytes; *got (if not NULL) how many came. */
int nsv_call(uint32_t op, const void *req, uint32_t len, void *reply, uint32_t cap,
	     uint32_t *got);

/* nsv_call for a reply of exactly `size` bytes (EPROTO if another size came). */
int nsv_call_exact(uint32_t op, const void *req, uint32_t len, void *reply, uint32_t size);

/* nsv_call with the descriptor `fd` passed to the server (SCM_RIGHTS) with the request. */
int nsv_call_fd(uint32_t op, const void *req, uint32_t len, int fd, void *reply, uint32_t cap,
		uint32_t *got);

/* A one-line note on stderr when $NICSIM_VERBS_DEBUG is set (never otherwise: a program's
 * output is what it prints on real hardware). */
void nsv_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The context's ops (objects.c): post, poll, arm; the verbs not carried yet (memory
 * windows, SRQ receives) fail as on a provider without them. */
void nsv_fill_ops(struct nsv_context *ctx);
void nsv_fill_unsupported_ops(struct ibv_context_ops *ops); /* (unsupported.c) */

/* A completion channel: the server's handle beside the program's struct. */
struct nsv_channel {
	struct ibv_comp_channel ch; /* first: the program holds a struct ibv_comp_channel * */
	uint32_t handle;
};

#endif
