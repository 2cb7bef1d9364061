// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * cm_connect_delay.so: an LD_PRELOAD library for perftest's rdma_cm client
 * (-R), used by the guest tests (tests/pair/matrix.sh, tests/guest/cm.sh).
 *
 *   LD_PRELOAD=build/userspace/tests/cm_connect_delay.so ib_send_bw -R ...
 *
 * perftest -R connects twice: once for its control exchange, then, after
 * the exchange, for the test QPs. Its server listens for the second
 * connection only once it has read the client's last message, so a client
 * that gets there first sends a REQ to a service nobody listens on yet; the
 * CM rejects it (reason 8, invalid service ID) and perftest's retry of the
 * connect crashes (linux-rdma/perftest#93). Under emulation, with two guests
 * on two host cores, the server's guest can lag the client's by hundreds of
 * milliseconds, and the client wins that race several runs in a row.
 *
 * This library waits FERROCE_CM_CONNECT_DELAY_MS (default 2000) before every
 * rdma_connect() of the process after its first, then calls librdmacm's. It
 * changes no argument and no result: the connection, the CM's messages and
 * the traffic are perftest's and the devices' own.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* librdmacm's types stay opaque here: only the pointers pass through */
struct rdma_cm_id;
struct rdma_conn_param;

int rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *param);

static int calls;

int rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *param)
{
	static int (*real)(struct rdma_cm_id *, struct rdma_conn_param *);
	const char *env;
	long ms = 2000;

	if (!real) {
		real = (int (*)(struct rdma_cm_id *, struct rdma_conn_param *))dlsym(RTLD_NEXT, "rdma_connect");
		if (!real) {
			fprintf(stderr, "cm_connect_delay: librdmacm's rdma_connect not found (%s)\n", dlerror());
			errno = ENOSYS;
			return -1;
		}
	}
	env = getenv("FERROCE_CM_CONNECT_DELAY_MS");
	if (env)
		ms = strtol(env, NULL, 10);
	if (calls++ > 0 && ms > 0) {
		struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L };

		fprintf(stderr, "cm_connect_delay: connect %d waits %ld ms for the server's listener\n", calls, ms);
		while (nanosleep(&ts, &ts) && errno == EINTR)
			;
	}
	return real(id, param);
}
