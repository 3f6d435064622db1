/*
 * The clocks of a C verbs program under nicsim exec, in simulated time (part of the
 * LD_PRELOAD library libnicsim_hosts.so; see docs/explanation/c-programs.md).
 *
 * The verbs server writes the world's time (nanoseconds, a little-endian int64) into the file
 * $NICSIM_CLOCK after every request; this library maps it and answers the program's clocks
 * from it: clock_gettime, gettimeofday, time and the time-stamp counter. rdtsc and rdtscp are
 * made to fault (prctl PR_SET_TSC, PR_TSC_SIGSEGV) and the fault is answered here, at 1 GHz
 * (one cycle a nanosecond): perftest's get_cycles() reads it and times its iterations with
 * it, and its get_cpu_mhz() measures that rate against gettimeofday, which it finds exact.
 *
 * Between requests the world does not move, so a program that spins on a clock would spin
 * for ever: each read moves the program's own clock on (a gettimeofday or clock_gettime a
 * microsecond, an rdtsc a nanosecond) and the world's time, when it is later, takes over.
 * The program's clock is in a page of its own, $NICSIM_CLOCK.<pid>: the program keeps its
 * clock in the first word, which the server reads at each request (time the program spent
 * spinning on a clock, as perftest's get_cpu_mhz samples gettimeofday for seconds, is time
 * the world lets pass before the request), and the server tells it the world's time in the
 * second, at the end of each of its requests and when a device write wakes it from spinning
 * on its memory. So between its calls the program's clock is its own: the world moving on
 * for other programs does not jump it while it measures (get_cpu_mhz's fit would fail).
 * Only programs that load nicsim's libibverbs get these clocks (a Python program's world is
 * its own and keeps the machine's clocks).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/time.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#define EPOCH_S 1767225600LL  /* 2026-01-01: simulated time 0 on the realtime clocks */
#define READ_NS 1000          /* a clock_gettime or gettimeofday moves the clock this far */

static volatile const int64_t *world_ns;  /* the world's time as told to this program, or
					    NULL: the real clocks */
static int64_t own_ns;                    /* (without a page of its own) */
static volatile int64_t *last_ns = &own_ns; /* the latest time this program was told */

/* The program's time now, `step` past the last it read unless the world is later. */
static int64_t now_ns(int64_t step)
{
	int64_t w = *world_ns;
	int64_t t = *last_ns + step;

	if (w > t)
		t = w;
	*last_ns = t;
	return t;
}

/* The program's page ($NICSIM_CLOCK.<pid>): its clock, then the world's time as told to it.
 * Without it the program reads the world's page, whose time moves whenever the world does. */
static void share_own_clock(const char *path)
{
	char mine[PATH_MAX];
	volatile int64_t *page;
	void *p;
	int fd;

	if (snprintf(mine, sizeof(mine), "%s.%d", path, (int)getpid()) >= (int)sizeof(mine))
		return;
	fd = open(mine, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return;
	if (ftruncate(fd, 2 * sizeof(int64_t))) {
		close(fd);
		return;
	}
	p = mmap(NULL, 2 * sizeof(int64_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED)
		return;
	page = p;
	page[0] = own_ns;
	page[1] = *world_ns;
	last_ns = &page[0];
	world_ns = &page[1];
}

typedef int (*clock_gettime_fn)(clockid_t, struct timespec *);
typedef int (*gettimeofday_fn)(struct timeval *, void *);

int clock_gettime(clockid_t id, struct timespec *ts)
{
	int64_t t;

	if (!world_ns || id == CLOCK_PROCESS_CPUTIME_ID || id == CLOCK_THREAD_CPUTIME_ID) {
		clock_gettime_fn real = (clock_gettime_fn)dlsym(RTLD_NEXT, "clock_gettime");

		return real(id, ts);
	}
	t = now_ns(READ_NS);
	if (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE || id == CLOCK_TAI)
		t += EPOCH_S * 1000000000LL;
	ts->tv_sec = t / 1000000000LL;
	ts->tv_nsec = t % 1000000000LL;
	return 0;
}

int gettimeofday(struct timeval *tv, void *tz)
{
	int64_t t;

	if (!world_ns) {
		gettimeofday_fn real = (gettimeofday_fn)dlsym(RTLD_NEXT, "gettimeofday");

		return real(tv, tz);
	}
	t = now_ns(READ_NS) + EPOCH_S * 1000000000LL;
	tv->tv_sec = t / 1000000000LL;
	tv->tv_usec = (t % 1000000000LL) / 1000;
	return 0;
}

time_t time(time_t *out)
{
	struct timeval tv;
	time_t t;

	gettimeofday(&tv, NULL);
	t = tv.tv_sec;
	if (out)
		*out = t;
	return t;
}

/* rdtsc (0f 31) or rdtscp (0f 01 f9) faulted: answer it at 1 GHz and step over it. */
static void tsc_fault(int sig, siginfo_t *info, void *uctx)
{
	ucontext_t *uc = uctx;
	greg_t *r = uc->uc_mcontext.gregs;
	const unsigned char *ip = (const unsigned char *)r[REG_RIP];
	int len = 0;
	int64_t t;

	(void)info;
	if (ip[0] == 0x0f && ip[1] == 0x31)
		len = 2;
	else if (ip[0] == 0x0f && ip[1] == 0x01 && ip[2] == 0xf9)
		len = 3;
	if (!len) {  /* a real fault: let it kill the program as it would have */
		signal(sig, SIG_DFL);
		return;
	}
	t = now_ns(1);
	r[REG_RAX] = (uint32_t)t;
	r[REG_RDX] = (uint32_t)((uint64_t)t >> 32);
	if (len == 3)
		r[REG_RCX] = 0;  /* TSC_AUX: CPU 0 */
	r[REG_RIP] += len;
}

static int on_nicsims_libibverbs(void)
{
	const char *shim = getenv("NICSIM_SHIM_DIR");
	void *sym = dlsym(RTLD_DEFAULT, "ibv_get_device_list");
	Dl_info where;

	return shim && sym && dladdr(sym, &where) && where.dli_fname &&
	       strncmp(where.dli_fname, shim, strlen(shim)) == 0;
}

__attribute__((constructor)) static void simulated_clocks(void)
{
	const char *path = getenv("NICSIM_CLOCK");
	struct sigaction sa;
	void *page;
	int fd;

	/* Only a verbs program, on nicsim's libibverbs (the one in nicsim exec's shim folder) */
	if (!path || !on_nicsims_libibverbs())
		return;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	page = mmap(NULL, sizeof(int64_t), PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (page == MAP_FAILED)
		return;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = tsc_fault;
	sa.sa_flags = SA_SIGINFO | SA_NODEFER;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGSEGV, &sa, NULL) || prctl(PR_SET_TSC, PR_TSC_SIGSEGV, 0, 0, 0))
		return;
	world_ns = page;
	own_ns = *world_ns;
	share_own_clock(path);
}
