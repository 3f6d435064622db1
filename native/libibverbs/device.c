/* Devices, contexts and the queries: the verbs ibv_devices and ibv_devinfo use.
 *
 * Each verb is one request to the server, which answers with what nicsim's pyverbs
 * (nicsim.driver) answers a Python program; this file only moves the values between the
 * wire and the structs of <infiniband/verbs.h>, with libibverbs' calling conventions (its
 * return values and errno, cited per function from rdma-core's libibverbs/).
 */
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "nsv.h"

/* verbs.h turns these names into inline wrappers; the library defines the real symbols. */
#undef ibv_get_device_list
#undef ibv_query_port

#define SYSFS_IB "/sys/class/infiniband/"
#define MAX_DEVICES 256

static pthread_mutex_t devices_lock = PTHREAD_MUTEX_INITIALIZER;
static struct nsv_device *known[MAX_DEVICES];
static int n_known;

/* The device named `d->name`, made the first time it is listed (a device pointer stays
 * valid after ibv_free_device_list, as a program may keep one it opened). */
static struct nsv_device *device_for(const struct nsrpc_device *d)
{
	struct nsv_device *dev;
	char name[NSRPC_NAME_MAX];
	int i;

	memcpy(name, d->name, sizeof(name));
	name[sizeof(name) - 1] = 0;
	for (i = 0; i < n_known; i++)
		if (!strcmp(known[i]->dev.name, name))
			return known[i];
	if (n_known == MAX_DEVICES)
		return NULL;
	dev = calloc(1, sizeof(*dev));
	if (!dev)
		return NULL;
	dev->dev.node_type = (enum ibv_node_type)d->node_type;
	dev->dev.transport_type = (enum ibv_transport_type)d->transport_type;
	snprintf(dev->dev.name, sizeof(dev->dev.name), "%s", name);
	/* the names a real device has in sysfs (ibv_devinfo reads ibdev_path/board_id;
	 * ibv_read_sysfs_file answers the simulated files) */
	snprintf(dev->dev.dev_name, sizeof(dev->dev.dev_name), "uverbs%u", d->index);
	snprintf(dev->dev.dev_path, sizeof(dev->dev.dev_path),
		 "/sys/class/infiniband_verbs/uverbs%u", d->index);
	snprintf(dev->dev.ibdev_path, sizeof(dev->dev.ibdev_path), SYSFS_IB "%s", name);
	dev->guid = d->node_guid;
	dev->index = d->index;
	known[n_known++] = dev;
	return dev;
}

/* rdma-core libibverbs/device.c ibv_get_device_list: a NULL-terminated array the caller
 * frees with ibv_free_device_list. With no server to ask, the list is empty (errno set), as
 * on a machine whose kernel has RDMA but no device: programs print their "no devices". */
struct ibv_device **ibv_get_device_list(int *num_devices)
{
	struct {
		uint32_t n;
		struct nsrpc_device d[MAX_DEVICES];
	} __attribute__((packed)) *rep;
	struct ibv_device **list;
	uint32_t got = 0, n = 0, i;
	int err;

	rep = calloc(1, sizeof(*rep));
	if (!rep) {
		errno = ENOMEM;
		return NULL;
	}
	err = nsv_call(NSRPC_DEVICES, NULL, 0, rep, sizeof(*rep), &got);
	if (!err && got >= sizeof(rep->n)) {
		n = rep->n;
		if (n > MAX_DEVICES || got < sizeof(rep->n) + n * sizeof(rep->d[0]))
			n = 0, err = EPROTO;
	}
	list = calloc(n + 1, sizeof(*list));
	if (!list) {
		free(rep);
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_lock(&devices_lock);
	for (i = 0; i < n; i++) {
		struct nsv_device *dev = device_for(&rep->d[i]);

		if (!dev)
			break;
		list[i] = &dev->dev;
	}
	pthread_mutex_unlock(&devices_lock);
	free(rep);
	if (num_devices)
		*num_devices = (int)i;
	if (err)
		errno = err == ENOTCONN ? ENODEV : err;
	return list;
}

void ibv_free_device_list(struct ibv_device **list)
{
	free(list); /* (the devices themselves stay: see device_for) */
}

const char *ibv_get_device_name(struct ibv_device *device)
{
	return device->name;
}

__be64 ibv_get_device_guid(struct ibv_device *device)
{
	return htobe64(((struct nsv_device *)device)->guid);
}

int ibv_get_device_index(struct ibv_device *device)
{
	return (int)((struct nsv_device *)device)->index;
}

/* -- contexts ----------------------------------------------------------------------------- */

static int query_port_len(struct ibv_context *context, uint8_t port_num,
			  struct ibv_port_attr *port_attr, size_t len);
static int query_device_ex(struct ibv_context *context,
			   const struct ibv_query_device_ex_input *input,
			   struct ibv_device_attr_ex *attr, size_t attr_size);

struct ibv_context *ibv_open_device(struct ibv_device *device)
{
	struct nsv_device *dev = (struct nsv_device *)device;
	char name[NSRPC_NAME_MAX] = {};
	struct {
		uint32_t handle;
		uint32_t num_comp_vectors;
	} rep;
	struct nsv_context *ctx;
	struct ibv_device_attr attr;
	int err;

	snprintf(name, sizeof(name), "%s", dev->dev.name);
	err = nsv_call(NSRPC_OPEN, name, sizeof(name), &rep, sizeof(rep), NULL);
	if (err) {
		errno = err;
		return NULL;
	}
	ctx = calloc(1, sizeof(*ctx));
	if (!ctx) {
		uint32_t h = rep.handle;

		nsv_call(NSRPC_CLOSE, &h, sizeof(h), NULL, 0, NULL);
		errno = ENOMEM;
		return NULL;
	}
	ctx->handle = rep.handle;
	/* What verbs.h's inline accessors check before they call through vctx: the marker
	 * that the context is extended and the size of what the library filled in
	 * (verbs_get_ctx, verbs_get_ctx_op). */
	ctx->vctx.sz = sizeof(ctx->vctx);
	ctx->vctx.context.abi_compat = __VERBS_ABI_IS_EXTENDED;
	ctx->vctx.context.device = device;
	ctx->vctx.context.num_comp_vectors = (int)rep.num_comp_vectors;
	pthread_mutex_init(&ctx->vctx.context.mutex, NULL);
	/* The command and event files of a real context. Nothing is written to them yet;
	 * they are real descriptors so that a program may poll or fcntl them (async events
	 * will be delivered through async_fd). */
	ctx->vctx.context.cmd_fd = eventfd(0, EFD_CLOEXEC);
	ctx->vctx.context.async_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	ctx->vctx.query_port = query_port_len;
	ctx->vctx.query_device_ex = query_device_ex;
	nsv_fill_ops(ctx);
	ctx->phys_port_cnt = 1;
	if (!ibv_query_device(&ctx->vctx.context, &attr))
		ctx->phys_port_cnt = attr.phys_port_cnt;
	return &ctx->vctx.context;
}

/* rdma-core libibverbs/device.c ibv_close_device: always 0 (what the provider frees
 * cannot fail); the server's half goes with it even when the server is gone. */
int ibv_close_device(struct ibv_context *context)
{
	struct nsv_context *ctx = nsv_ctx(context);
	uint32_t h = ctx->handle;

	nsv_call(NSRPC_CLOSE, &h, sizeof(h), NULL, 0, NULL);
	if (context->cmd_fd >= 0)
		close(context->cmd_fd);
	if (context->async_fd >= 0)
		close(context->async_fd);
	pthread_mutex_destroy(&context->mutex);
	free(ctx);
	return 0;
}

/* -- device and port attributes ----------------------------------------------------------- */

#define NSV_CONV_U(v) (v)
#define NSV_CONV_BE64(v) htobe64(v)
#define COUNT(conv, member, py) +1
#define ASSIGN(conv, member, py) out->member = NSV_CONV_##conv(v[i++]);

enum { N_DEVICE_ATTRS = 0 NSRPC_DEVICE_ATTRS(COUNT), N_PORT_ATTRS = 0 NSRPC_PORT_ATTRS(COUNT) };

static int do_query_device(struct ibv_context *context, struct ibv_device_attr_ex *out)
{
	struct {
		char fw_ver[64];
		uint64_t v[N_DEVICE_ATTRS];
	} rep;
	uint32_t h = nsv_ctx(context)->handle, got = 0;
	const uint64_t *v = rep.v;
	int i = 0, err;

	err = nsv_call(NSRPC_QUERY_DEVICE, &h, sizeof(h), &rep, sizeof(rep), &got);
	if (err)
		return err;
	if (got != sizeof(rep))
		return EPROTO;
	memset(out, 0, sizeof(*out));
	memcpy(out->orig_attr.fw_ver, rep.fw_ver, sizeof(out->orig_attr.fw_ver));
	out->orig_attr.fw_ver[sizeof(out->orig_attr.fw_ver) - 1] = 0;
	NSRPC_DEVICE_ATTRS(ASSIGN)
	return 0;
}

/* The provider's query_device_ex (verbs_context.query_device_ex): ibv_query_device_ex in
 * verbs.h calls it with the size of the caller's struct, which it fills up to that size. */
static int query_device_ex(struct ibv_context *context,
			   const struct ibv_query_device_ex_input *input,
			   struct ibv_device_attr_ex *attr, size_t attr_size)
{
	struct ibv_device_attr_ex all;
	int err;

	if (input && input->comp_mask)
		return EINVAL;
	if (attr_size < sizeof(attr->orig_attr))
		return EINVAL;
	err = do_query_device(context, &all);
	if (err)
		return err;
	memcpy(attr, &all, attr_size < sizeof(all) ? attr_size : sizeof(all));
	return 0;
}

/* rdma-core libibverbs/verbs.c ibv_query_device: 0 or an errno. */
int ibv_query_device(struct ibv_context *context, struct ibv_device_attr *device_attr)
{
	struct ibv_device_attr_ex all;
	int err = do_query_device(context, &all);

	if (!err)
		*device_attr = all.orig_attr;
	return err;
}

static int query_port_len(struct ibv_context *context, uint8_t port_num,
			  struct ibv_port_attr *port_attr, size_t len)
{
	struct {
		uint32_t handle;
		uint32_t port;
	} req = { nsv_ctx(context)->handle, port_num };
	uint64_t rep[N_PORT_ATTRS];
	struct ibv_port_attr all = {}, *out = &all;
	const uint64_t *v = rep;
	uint32_t got = 0;
	int i = 0, err;

	err = nsv_call(NSRPC_QUERY_PORT, &req, sizeof(req), rep, sizeof(rep), &got);
	if (err)
		return err;
	if (got != sizeof(rep))
		return EPROTO;
	NSRPC_PORT_ATTRS(ASSIGN)
	memcpy(port_attr, &all, len < sizeof(all) ? len : sizeof(all));
	return 0;
}

/* The exported ibv_query_port is the compat entry of programs built before verbs.h made
 * it inline: their struct ends where port_cap_flags2 begins (rdma-core's
 * _compat_ibv_port_attr), so only that much is written. */
int ibv_query_port(struct ibv_context *context, uint8_t port_num,
		   struct _compat_ibv_port_attr *port_attr)
{
	return query_port_len(context, port_num, (struct ibv_port_attr *)port_attr,
			      offsetof(struct ibv_port_attr, port_cap_flags2));
}

/* -- GIDs and P_Keys ---------------------------------------------------------------------- */

struct gid_rep {
	uint8_t raw[16];
	uint32_t gid_type; /* enum ibv_gid_type */
	uint32_t ndev_ifindex;
};

static int query_gid(struct ibv_context *context, uint32_t port, uint32_t index,
		     struct gid_rep *rep)
{
	struct {
		uint32_t handle;
		uint32_t port;
		uint32_t index;
	} req = { nsv_ctx(context)->handle, port, index };
	return nsv_call_exact(NSRPC_QUERY_GID, &req, sizeof(req), rep, sizeof(*rep));
}

/* rdma-core libibverbs/verbs.c ibv_query_gid: an empty entry reads as the zero GID;
 * another failure is -1. */
int ibv_query_gid(struct ibv_context *context, uint8_t port_num, int index, union ibv_gid *gid)
{
	struct gid_rep rep;
	int err = query_gid(context, port_num, (uint32_t)index, &rep);

	if (err == ENODATA) {
		memset(gid, 0, sizeof(*gid));
		return 0;
	}
	if (err) {
		errno = err;
		return -1;
	}
	memcpy(gid->raw, rep.raw, sizeof(gid->raw));
	return 0;
}

/* rdma-core libibverbs/verbs.c ibv_query_gid_type: an empty entry reads as IB/RoCE v1. */
int ibv_query_gid_type(struct ibv_context *context, uint8_t port_num, unsigned int index,
		       enum ibv_gid_type_sysfs *type)
{
	struct gid_rep rep;
	int err = query_gid(context, port_num, index, &rep);

	if (err == ENODATA) {
		*type = IBV_GID_TYPE_SYSFS_IB_ROCE_V1;
		return 0;
	}
	if (err) {
		errno = err;
		return -1;
	}
	*type = rep.gid_type == IBV_GID_TYPE_ROCE_V2 ? IBV_GID_TYPE_SYSFS_ROCE_V2
						      : IBV_GID_TYPE_SYSFS_IB_ROCE_V1;
	return 0;
}

/* ibv_query_gid_ex (verbs.h calls it with the size of the caller's entry): 0 or an errno,
 * ENODATA for an empty entry. */
int _ibv_query_gid_ex(struct ibv_context *context, uint32_t port_num, uint32_t gid_index,
		      struct ibv_gid_entry *entry, uint32_t flags, size_t entry_size)
{
	struct gid_rep rep;
	int err;

	if (flags || entry_size < sizeof(*entry))
		return EINVAL;
	err = query_gid(context, port_num, gid_index, &rep);
	if (err)
		return err;
	memset(entry, 0, entry_size);
	memcpy(entry->gid.raw, rep.raw, sizeof(entry->gid.raw));
	entry->gid_index = gid_index;
	entry->port_num = port_num;
	entry->gid_type = rep.gid_type;
	entry->ndev_ifindex = rep.ndev_ifindex;
	return 0;
}

/* ibv_query_gid_table: the valid entries of every port, their number, or a negative errno
 * (-EINVAL when they do not fit). */
ssize_t _ibv_query_gid_table(struct ibv_context *context, struct ibv_gid_entry *entries,
			     size_t max_entries, uint32_t flags, size_t entry_size)
{
	struct nsv_context *ctx = nsv_ctx(context);
	size_t n = 0;
	int port;

	if (flags || entry_size < sizeof(*entries))
		return -EINVAL;
	for (port = 1; port <= ctx->phys_port_cnt; port++) {
		struct ibv_port_attr pa;
		int i, err = query_port_len(context, (uint8_t)port, &pa, sizeof(pa));

		if (err)
			return -err;
		for (i = 0; i < pa.gid_tbl_len; i++) {
			struct ibv_gid_entry e;

			err = _ibv_query_gid_ex(context, (uint32_t)port, (uint32_t)i, &e, 0,
						sizeof(e));
			if (err == ENODATA)
				continue;
			if (err)
				return -err;
			if (n == max_entries)
				return -EINVAL;
			memcpy((char *)entries + n * entry_size, &e, sizeof(e));
			n++;
		}
	}
	return (ssize_t)n;
}

/* rdma-core libibverbs/verbs.c ibv_query_pkey: 0, or -1 (errno set). */
int ibv_query_pkey(struct ibv_context *context, uint8_t port_num, int index, __be16 *pkey)
{
	struct {
		uint32_t handle;
		uint32_t port;
		uint32_t index;
	} req = { nsv_ctx(context)->handle, port_num, (uint32_t)index };
	uint32_t val;
	int err = nsv_call_exact(NSRPC_QUERY_PKEY, &req, sizeof(req), &val, sizeof(val));

	if (err) {
		errno = err;
		return -1;
	}
	*pkey = htobe16((uint16_t)val);
	return 0;
}

/* rdma-core libibverbs/verbs.c ibv_get_pkey_index: the index of `pkey`, or -1. */
int ibv_get_pkey_index(struct ibv_context *context, uint8_t port_num, __be16 pkey)
{
	struct ibv_port_attr pa;
	int i;

	if (query_port_len(context, port_num, &pa, sizeof(pa)))
		return -1;
	for (i = 0; i < pa.pkey_tbl_len; i++) {
		__be16 p;

		if (ibv_query_pkey(context, port_num, i, &p))
			return -1;
		if (p == pkey)
			return i;
	}
	errno = ENOENT;
	return -1;
}

/* -- sysfs -------------------------------------------------------------------------------- */

/* A simulated device's sysfs file, from the server (nicsim.exec.answers.sysfs); the
 * contents' length, or -1 with errno ENOENT when it has no such file. */
static int read_simulated(const char *path, char *buf, size_t size)
{
	uint32_t got = 0;
	int err;

	if (!size)
		return -1;
	err = nsv_call(NSRPC_READ_SYSFS, path, (uint32_t)strlen(path), buf,
		       (uint32_t)(size - 1), &got);
	if (err == EPROTO) /* (longer than buf: what fits, as read(2) of a short buffer) */
		err = 0;
	if (err) {
		errno = err == ENOTCONN ? ENOENT : err;
		return -1;
	}
	buf[got] = 0;
	return (int)got;
}

static int is_simulated(const char *path)
{
	return !strncmp(path, SYSFS_IB, strlen(SYSFS_IB)) ||
	       !strncmp(path, "/sys/class/infiniband_verbs/", 28);
}

/* rdma-core libibverbs/sysfs.c ibv_read_sysfs_file: the file's contents without the
 * trailing newline, their length, or -1. The simulated devices' files come from the
 * server; any other file is read from the file system. */
int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size)
{
	char *path;
	int fd, len;

	if (asprintf(&path, "%s/%s", dir, file) < 0)
		return -1;
	if (is_simulated(path)) {
		len = read_simulated(path, buf, size);
		free(path);
		if (len > 0 && buf[len - 1] == '\n')
			buf[--len] = 0;
		return len;
	}
	fd = open(path, O_RDONLY | O_CLOEXEC);
	free(path);
	if (fd < 0)
		return -1;
	len = (int)read(fd, buf, size);
	close(fd);
	if (len > 0) {
		if ((size_t)len == size)
			len--;
		if (len > 0 && buf[len - 1] == '\n')
			len--;
		buf[len] = 0;
	}
	return len;
}

/* rdma-core libibverbs/sysfs.c ibv_get_sysfs_path: where sysfs is mounted. */
const char *ibv_get_sysfs_path(void)
{
	return "/sys";
}

/* The provider-side reader of a device's sysfs file (IBVERBS_PRIVATE_34; libibverbs'
 * providers and ibv_query_pkey use it): `fnfmt` under the device's directory. */
int ibv_read_ibdev_sysfs_file(char *buf, size_t size, void *sysfs_dev, const char *fnfmt,
			      ...)
{
	(void)buf;
	(void)size;
	(void)sysfs_dev;
	(void)fnfmt;
	/* Only rdma-core's providers call it, with their own struct verbs_sysfs_dev, which
	 * nicsim never hands out. */
	errno = ENOENT;
	return -1;
}
