/*
 * libnicsim_hosts.so: loaded with LD_PRELOAD into programs under `nicsim exec --world W
 * --host H`. The simulated world's host names ($NICSIM_HOSTS, e.g. "a,b") resolve to this
 * machine's loopback address, so the out-of-band TCP exchange of a program on host b that
 * names its server `a` (perftest's, ibv_rc_pingpong's) reaches the program running as host a,
 * which runs on this machine too. Every other name resolves as it always does.
 *
 * Not part of libibverbs.so.1: a program's own getaddrinfo references are versioned
 * (GLIBC_2.2.5), and an interposer that binds them must come before libc in the lookup
 * order without version definitions of its own, which only LD_PRELOAD guarantees.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>

typedef int (*getaddrinfo_fn)(const char *, const char *, const struct addrinfo *,
                              struct addrinfo **);

/* Whether `node` is one of the comma-separated names in $NICSIM_HOSTS. */
static int simulated_host(const char *node)
{
	const char *list = getenv("NICSIM_HOSTS");
	size_t n;

	if (!node || !list)
		return 0;
	n = strlen(node);
	while (*list) {
		const char *end = strchr(list, ',');
		size_t len = end ? (size_t)(end - list) : strlen(list);

		if (len == n && memcmp(list, node, n) == 0)
			return 1;
		if (!end)
			break;
		list = end + 1;
	}
	return 0;
}

int getaddrinfo(const char *node, const char *service, const struct addrinfo *hints,
		struct addrinfo **res)
{
	getaddrinfo_fn real = (getaddrinfo_fn)dlsym(RTLD_NEXT, "getaddrinfo");

	if (!real)
		return EAI_SYSTEM;
	return real(simulated_host(node) ? "127.0.0.1" : node, service, hints, res);
}
