// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * ctx_leak: does a refused GET_CONTEXT leak a task_struct reference?
 *
 *   ctx_leak DEV ioctl|write [N] [--max-growth M]
 *
 * Forks N children (300 by default), one after the other. Each opens DEV's
 * /dev/infiniband/uverbsX, creates its context with GET_CONTEXT, sends
 * GET_CONTEXT once more (the file has a context: the kernel must refuse it
 * with EINVAL) and exits. Mode `ioctl` sends both through RDMA_VERBS_IOCTL
 * (UVERBS_OBJECT_DEVICE, UVERBS_METHOD_GET_CONTEXT); mode `write` sends both
 * as legacy write() commands (IB_USER_VERBS_CMD_GET_CONTEXT). No driver data
 * is sent or asked for.
 *
 * The RDMA core names a new user context after the calling task
 * (rdma_restrack_set_name() takes a reference on `current`). A refused
 * GET_CONTEXT that does not drop that reference leaves the caller's
 * task_struct allocated forever once the process is gone: the task_struct
 * slab (/proc/slabinfo, its active objects) grows by about N. The count is
 * read before the children and after all of them were reaped, once it has
 * stopped changing (freed tasks go through RCU). Before each read the slab
 * is shrunk (/sys/kernel/slab/task_struct/shrink, where there is one): on a
 * KASAN kernel that also frees the task_structs KASAN's quarantine still
 * holds, which /proc/slabinfo counts as active (check-debug's kernel
 * counted 115 of 300 such children without it, none of them leaked:
 * kmemleak had no report).
 *
 * Prints "ctx_leak: DEV MODE: N children, task_struct active objects before
 * B, after A: growth G". Exits 0 when every child saw its first GET_CONTEXT
 * succeed and its second refused with EINVAL (and, with --max-growth, the
 * growth is at most M), 1 otherwise, 2 on bad usage or a device it cannot
 * open. Needs root (/proc/slabinfo).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <rdma/ib_user_ioctl_cmds.h>
#include <rdma/ib_user_verbs.h>
#include <rdma/rdma_user_ioctl_cmds.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../include/uapi/rdma/ferroce-abi.h"

static char path[128];
static uint32_t driver_id; /* the device's: an ioctl header with another is refused */

/* GET_CONTEXT through RDMA_VERBS_IOCTL with driver id `id`: 0 or an errno */
static int get_context_ioctl(int fd, uint32_t id)
{
	uint64_t buf[(sizeof(struct ib_uverbs_ioctl_hdr) + 2 * sizeof(struct ib_uverbs_attr)) / 8] = { 0 };
	struct ib_uverbs_ioctl_hdr *h = (void *)buf;
	uint32_t ncomp = 0;
	uint64_t support = 0;

	h->driver_id = id;
	h->object_id = UVERBS_OBJECT_DEVICE;
	h->method_id = UVERBS_METHOD_GET_CONTEXT;
	h->num_attrs = 2;
	h->length = sizeof(*h) + 2 * sizeof(struct ib_uverbs_attr);
	h->attrs[0].attr_id = UVERBS_ATTR_GET_CONTEXT_NUM_COMP_VECTORS;
	h->attrs[0].len = sizeof(ncomp);
	h->attrs[0].data = (uintptr_t)&ncomp;
	h->attrs[1].attr_id = UVERBS_ATTR_GET_CONTEXT_CORE_SUPPORT;
	h->attrs[1].len = sizeof(support);
	h->attrs[1].data = (uintptr_t)&support;
	return ioctl(fd, RDMA_VERBS_IOCTL, h) ? errno : 0;
}

/* GET_CONTEXT as a legacy write() command: 0 or an errno */
static int get_context_write(int fd)
{
	struct {
		struct ib_uverbs_cmd_hdr hdr;
		struct ib_uverbs_get_context cmd;
	} c;
	struct ib_uverbs_get_context_resp resp;

	memset(&c, 0, sizeof(c));
	memset(&resp, 0, sizeof(resp));
	c.hdr.command = IB_USER_VERBS_CMD_GET_CONTEXT;
	c.hdr.in_words = sizeof(c) / 4;
	c.hdr.out_words = sizeof(resp) / 4;
	c.cmd.response = (uintptr_t)&resp;
	return write(fd, &c, sizeof(c)) == (ssize_t)sizeof(c) ? 0 : errno;
}

/* The driver id the kernel expects: the one whose GET_CONTEXT on a fresh
 * file is not refused with EINVAL (the header check comes first; a refused
 * header changes nothing, so one file serves every try): ferroce's, then
 * 0 to 255 (the kernel's enum rdma_driver_id) */
static int probe_driver_id(void)
{
	int fd = open(path, O_RDWR | O_CLOEXEC), e = -1;

	if (fd < 0)
		return -1;
	for (int k = -1; k < 256; k++) {
		uint32_t id = k < 0 ? FERROCE_DRIVER_ID : (uint32_t)k;

		e = get_context_ioctl(fd, id);
		if (e != EINVAL) {
			driver_id = id;
			break;
		}
	}
	close(fd);
	return e;
}

/* The child: 0 as expected, 10 + errno of a failed first GET_CONTEXT,
 * 3 when the second was accepted, 4 when it was refused with another errno */
static int child(int ioctl_mode)
{
	int fd = open(path, O_RDWR | O_CLOEXEC), e;

	if (fd < 0)
		return 2;
	e = ioctl_mode ? get_context_ioctl(fd, driver_id) : get_context_write(fd);
	if (e)
		return 10 + (e & 0x7f);
	e = ioctl_mode ? get_context_ioctl(fd, driver_id) : get_context_write(fd);
	if (!e)
		return 3;
	return e == EINVAL ? 0 : 4;
}

/* active objects of the task_struct slab, or -1 */
static long task_structs(void)
{
	FILE *f = fopen("/proc/slabinfo", "r");
	char line[512];
	long n = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "task_struct ", 12)) {
			n = strtol(line + 12, NULL, 10);
			break;
		}
	fclose(f);
	return n;
}

/* kmem_cache_shrink() of the task_struct slab: frees what KASAN's
 * quarantine holds of it and flushes the per-CPU slabs (nothing where the
 * file is absent) */
static void shrink_task_structs(void)
{
	int fd = open("/sys/kernel/slab/task_struct/shrink", O_WRONLY | O_CLOEXEC);

	if (fd < 0)
		return;
	if (write(fd, "1", 1) < 0) {
		/* (no SLUB sysfs: the count is as it is) */
	}
	close(fd);
}

/* the count once it is steady: the same three reads in a row 0.5 s apart
 * (within 20 s), after a first wait of 2 s; the slab shrunk before each */
static long settled_task_structs(void)
{
	long last = -1, n = -1;
	int same = 0;

	sleep(2);
	for (int i = 0; i < 40 && same < 2; i++) {
		shrink_task_structs();
		n = task_structs();
		same = n == last ? same + 1 : 0;
		last = n;
		usleep(500000);
	}
	return n;
}

static void usage(void)
{
	fprintf(stderr, "usage: ctx_leak DEV ioctl|write [N] [--max-growth M]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	struct ibv_device **list;
	const char *dev = NULL, *mode = NULL;
	long n = 300, max_growth = -1, before, after;
	int ioctl_mode, bad = 0, pos = 0, why[5] = { 0 };

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--max-growth") && i + 1 < argc)
			max_growth = atol(argv[++i]);
		else if (pos == 0)
			dev = argv[i], pos++;
		else if (pos == 1)
			mode = argv[i], pos++;
		else if (pos == 2)
			n = atol(argv[i]), pos++;
		else
			usage();
	}
	if (!dev || !mode || n <= 0 || (strcmp(mode, "ioctl") && strcmp(mode, "write")))
		usage();
	ioctl_mode = !strcmp(mode, "ioctl");
	setvbuf(stdout, NULL, _IOLBF, 0);

	list = ibv_get_device_list(NULL);
	for (int i = 0; list && list[i]; i++)
		if (!strcmp(ibv_get_device_name(list[i]), dev))
			snprintf(path, sizeof(path), "/dev/infiniband/%s", list[i]->dev_name);
	if (list)
		ibv_free_device_list(list);
	if (!path[0]) {
		fprintf(stderr, "ctx_leak: no device %s\n", dev);
		return 2;
	}
	if (ioctl_mode && probe_driver_id()) {
		fprintf(stderr, "ctx_leak: no driver id of %s accepts GET_CONTEXT on %s\n", dev, path);
		return 2;
	}
	if (task_structs() < 0) {
		fprintf(stderr, "ctx_leak: no task_struct line in /proc/slabinfo (root?)\n");
		return 2;
	}

	before = settled_task_structs();
	for (long i = 0; i < n; i++) {
		pid_t p = fork();
		int st;

		if (p < 0) {
			perror("fork");
			return 1;
		}
		if (!p)
			_exit(child(ioctl_mode));
		if (waitpid(p, &st, 0) != p || !WIFEXITED(st) || WEXITSTATUS(st)) {
			int c = !WIFEXITED(st) ? 0 : WEXITSTATUS(st) >= 10 ? 1 : WEXITSTATUS(st);

			if (!bad)
				fprintf(stderr, "ctx_leak: child %ld: %s %d\n", i,
					WIFEXITED(st) ? "exit status" : "signal",
					WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
			why[c < 5 ? c : 0]++;
			bad++;
		}
	}
	after = settled_task_structs();
	printf("ctx_leak: %s %s: %ld children, task_struct active objects before %ld, after %ld: growth %ld\n",
	       dev, mode, n, before, after, after - before);
	if (bad)
		printf("ctx_leak: %d children failed: %d first GET_CONTEXT refused, %d second accepted, "
		       "%d second refused with another errno than EINVAL, %d other\n",
		       bad, why[1], why[3], why[4], why[0] + why[2]);
	if (max_growth >= 0 && after - before > max_growth) {
		printf("ctx_leak: growth %ld is over %ld\n", after - before, max_growth);
		return 1;
	}
	return bad ? 1 : 0;
}
