/* The connection to the verbs server: one Unix socket per process, one request at a time.
 *
 * It is opened at the first verb (ibv_get_device_list, usually), not when the library is
 * loaded: a program that never calls a verb never talks to the server. A child made by
 * fork() does not share its parent's connection (their requests would interleave on one
 * stream): it closes its copy and opens its own at its first verb, which the server sees as
 * another program. Requests are serialized by a mutex, so threads may call verbs at once.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "nsv.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int sock = -1;
static int failed; /* connecting failed once: do not try again for every verb */
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

void nsv_debug(const char *fmt, ...)
{
	va_list ap;

	if (!getenv(NSRPC_DEBUG_ENV))
		return;
	fputs("nicsim libibverbs: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static void child_after_fork(void)
{
	/* The parent's connection stays the parent's; the lock may have been held by a thread
	 * that does not exist in the child. */
	if (sock >= 0)
		close(sock);
	sock = -1;
	failed = 0;
	pthread_mutex_init(&lock, NULL);
}

static void install_atfork(void)
{
	pthread_atfork(NULL, NULL, child_after_fork);
}

static int write_all(const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		/* MSG_NOSIGNAL: a server that went away is an error return, not a SIGPIPE */
		ssize_t n = send(sock, p, len, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? errno : EPIPE;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int read_all(void *buf, size_t len)
{
	char *p = buf;

	while (len) {
		ssize_t n = recv(sock, p, len, 0);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? errno : EPIPE;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static void disconnect(void)
{
	if (sock >= 0)
		close(sock);
	sock = -1;
	failed = 1;
}

static int hello(void)
{
	struct {
		uint32_t version;
		char name[256];
	} req = { .version = NSRPC_VERSION };
	struct nsrpc_hdr h;
	struct {
		uint32_t version;
		uint32_t server_pid;
	} rep;
	size_t n;
	int err;

	/* the program's name, for the server's log */
	snprintf(req.name, sizeof(req.name), "%s", program_invocation_short_name);
	n = sizeof(req.version) + strlen(req.name);
	h.len = (uint32_t)n;
	h.op = NSRPC_HELLO;
	err = write_all(&h, sizeof(h));
	if (!err)
		err = write_all(&req, n);
	if (!err)
		err = read_all(&h, sizeof(h));
	if (err)
		return err;
	if (h.op != 0 || h.len != sizeof(rep))
		return h.op ? (int)h.op : EPROTO;
	err = read_all(&rep, sizeof(rep));
	if (err)
		return err;
	if (rep.version != NSRPC_VERSION)
		return EPROTO;
	/* The server reads and writes the program's registered memory with process_vm_readv/
	 * writev. Under Yama's ptrace_scope=1 only an ancestor may; `nicsim exec`'s server is
	 * one, a shared world's server (phase 3) is not: name it as this process's tracer. On
	 * a kernel without Yama the call fails with EINVAL and nothing needs it. */
	if (prctl(PR_SET_PTRACER, (unsigned long)rep.server_pid, 0, 0, 0))
		nsv_debug("PR_SET_PTRACER %u: %s", rep.server_pid, strerror(errno));
	return 0;
}

static int connect_server(void)
{
	const char *path = getenv(NSRPC_SOCKET_ENV);
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	int err;

	if (failed)
		return ENOTCONN;
	if (!path || !*path) {
		nsv_debug("$%s is not set: no simulated devices (run the program under "
			  "`nicsim exec`)", NSRPC_SOCKET_ENV);
		failed = 1;
		return ENOTCONN;
	}
	if (strlen(path) >= sizeof(addr.sun_path)) {
		nsv_debug("%s: the socket's path is too long", path);
		failed = 1;
		return ENOTCONN;
	}
	strcpy(addr.sun_path, path);
	sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (sock < 0 || connect(sock, (struct sockaddr *)&addr, sizeof(addr))) {
		nsv_debug("%s: %s", path, strerror(errno));
		disconnect();
		return ENOTCONN;
	}
	err = hello();
	if (err) {
		nsv_debug("%s: the server did not answer HELLO (%s)", path, strerror(err));
		disconnect();
		return ENOTCONN;
	}
	return 0;
}

/* Read and drop `len` bytes (the part of a reply that does not fit the caller's buffer). */
static int drain(uint32_t len)
{
	char buf[256];
	int err = 0;

	while (len && !err) {
		uint32_t n = len < sizeof(buf) ? len : sizeof(buf);

		err = read_all(buf, n);
		len -= n;
	}
	return err;
}

/* The request's header with a descriptor attached (SCM_RIGHTS), which the server receives
 * with the header's bytes. */
static int write_hdr_fd(const struct nsrpc_hdr *h, int fd)
{
	char control[CMSG_SPACE(sizeof(int))] = {};
	struct iovec iov = { .iov_base = (void *)h, .iov_len = sizeof(*h) };
	struct msghdr msg = {
		.msg_iov = &iov,
		.msg_iovlen = 1,
		.msg_control = control,
		.msg_controllen = sizeof(control),
	};
	struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
	ssize_t n;

	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(int));
	do
		n = sendmsg(sock, &msg, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno;
	/* (a short send of 8 bytes on a Unix stream socket: the rest goes plainly) */
	return (size_t)n < sizeof(*h) ? write_all((const char *)h + n, sizeof(*h) - (size_t)n)
				      : 0;
}

int nsv_call(uint32_t op, const void *req, uint32_t len, void *reply, uint32_t cap,
	     uint32_t *got)
{
	return nsv_call_fd(op, req, len, -1, reply, cap, got);
}

int nsv_call_exact(uint32_t op, const void *req, uint32_t len, void *reply, uint32_t size)
{
	uint32_t got = 0;
	int err = nsv_call(op, req, len, reply, size, &got);

	if (!err && got != size)
		err = EPROTO;
	return err;
}

int nsv_call_fd(uint32_t op, const void *req, uint32_t len, int fd, void *reply, uint32_t cap,
		uint32_t *got)
{
	struct nsrpc_hdr h = { .len = len, .op = op };
	uint32_t keep;
	int err;

	pthread_once(&atfork_once, install_atfork);
	pthread_mutex_lock(&lock);
	if (sock < 0) {
		err = connect_server();
		if (err)
			goto out;
	}
	err = fd >= 0 ? write_hdr_fd(&h, fd) : write_all(&h, sizeof(h));
	if (!err && len)
		err = write_all(req, len);
	if (!err)
		err = read_all(&h, sizeof(h));
	if (err) {
		nsv_debug("the server went away (%s)", strerror(err));
		disconnect();
		err = ENOTCONN;
		goto out;
	}
	keep = h.len < cap ? h.len : cap;
	err = read_all(reply, keep);
	if (!err)
		err = drain(h.len - keep);
	if (err) {
		disconnect();
		err = ENOTCONN;
		goto out;
	}
	if (got)
		*got = keep;
	if (h.op == 0 && h.len > cap)
		err = EPROTO; /* a longer answer than the protocol says: not ours to guess */
	else
		err = (int)h.op;
out:
	pthread_mutex_unlock(&lock);
	return err;
}
