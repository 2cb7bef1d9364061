// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * odp: memory on demand (IBV_ACCESS_ON_DEMAND), as a process uses it, with
 * RC QPs of one device connected through its own address and a UD QP.
 *
 * - the device announces ODP (odp_caps: general, and for RC every
 *   operation and receive, for UD sends);
 * - registering 64 MiB on demand faults nothing in and pins nothing (the
 *   process's resident size does not grow; a pinned registration's does);
 * - SEND, RDMA WRITE, RDMA READ, compare-and-swap and fetch-and-add between
 *   regions on demand whose pages were dropped just before
 *   (madvise(MADV_DONTNEED) of a shared file mapping: the MMU notifier
 *   invalidates them, the data stays in the page cache), over many rounds:
 *   every byte arrives, and the device counts its faults (odp_faults);
 * - a UD send from a region on demand whose pages were dropped;
 * - ibv_advise_mr: a synchronous PREFETCH_WRITE faults the range in (the
 *   resident size grows by it), an asynchronous one returns at once, a
 *   region not on demand or a wrong key is EINVAL, PREFETCH_WRITE of a
 *   region without local write is EPERM;
 * - a region on demand whose memory the process unmapped: a SEND from it
 *   completes with IBV_WC_LOC_PROT_ERR (the fault fails), not a hang.
 *
 *   odp DEVICE GID_INDEX
 *
 * Prints one "ok - NAME" or "not ok - NAME" line per check (counted by
 * tools/check); exits non-zero when any check failed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "testlib.h"

#define LEN (1 << 20)
#define BIG (64 << 20)
#define ROUNDS 20
#define ALL_ACCESS                                                                                           \
	(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC | \
	 IBV_ACCESS_ON_DEMAND)

static struct ibv_context *ctx;
static struct ibv_port_attr port;
static struct ibv_pd *pd;
static union ibv_gid gid;
static int gid_index;
static const char *dev_name;

static void die(const char *what)
{
	fprintf(stderr, "odp: %s: %s\n", what, strerror(errno));
	exit(2);
}

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* The process's resident pages (statm). */
static long resident_pages(void)
{
	long size = 0, res = 0;
	FILE *f = fopen("/proc/self/statm", "r");

	if (!f || fscanf(f, "%ld %ld", &size, &res) != 2)
		die("/proc/self/statm");
	fclose(f);
	return res;
}

/* A device counter (hw_counters), or -1. The core caches the counters
 * for 10 ms: wait that long first. */
static long counter(const char *name)
{
	char path[256];
	long v = -1;
	FILE *f;

	usleep(20000);
	snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/1/hw_counters/%s", dev_name, name);
	f = fopen(path, "r");
	if (!f)
		return -1;
	if (fscanf(f, "%ld", &v) != 1)
		v = -1;
	fclose(f);
	return v;
}

/* `len` bytes of a shared file mapping (memfd): MADV_DONTNEED drops its
 * pages from the page tables, the data stays. */
static uint8_t *shared_buf(size_t len)
{
	int fd = memfd_create("odp", 0);
	void *p;

	if (fd < 0 || ftruncate(fd, len))
		die("memfd_create");
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED)
		die("mmap");
	return p;
}

static void drop_pages(void *p, size_t len)
{
	if (madvise(p, len, MADV_DONTNEED))
		die("madvise");
}

struct pair {
	struct ibv_qp *a, *b;
	struct ibv_cq *ca, *cb;
};

static struct ibv_qp *make_qp(struct ibv_cq *cq, enum ibv_qp_type type)
{
	struct ibv_qp_init_attr ia = {
		.qp_type = type,
		.send_cq = cq,
		.recv_cq = cq,
		.sq_sig_all = 1,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);

	if (!qp)
		die("ibv_create_qp");
	return qp;
}

static struct pair make_pair(void)
{
	struct pair p;
	const char *failed;

	p.ca = ibv_create_cq(ctx, 32, NULL, NULL, 0);
	p.cb = ibv_create_cq(ctx, 32, NULL, NULL, 0);
	if (!p.ca || !p.cb)
		die("ibv_create_cq");
	p.a = make_qp(p.ca, IBV_QPT_RC);
	p.b = make_qp(p.cb, IBV_QPT_RC);
	failed = tl_rc_connect_local(p.a, p.b->qp_num, ALL_ACCESS & ~IBV_ACCESS_ON_DEMAND, port.active_mtu, &gid,
				     gid_index, 0x100, 4);
	if (!failed)
		failed = tl_rc_connect_local(p.b, p.a->qp_num, ALL_ACCESS & ~IBV_ACCESS_ON_DEMAND, port.active_mtu,
					     &gid, gid_index, 0x100, 4);
	if (failed)
		die(failed);
	return p;
}

static void free_pair(struct pair *p)
{
	if (ibv_destroy_qp(p->a) || ibv_destroy_qp(p->b) || ibv_destroy_cq(p->ca) || ibv_destroy_cq(p->cb))
		die("destroy");
}

/* One completion of `cq` within 10 s: its status, or -1. */
static int completion(struct ibv_cq *cq, struct ibv_wc *wc)
{
	double end = now() + 10;

	do {
		if (ibv_poll_cq(cq, 1, wc) == 1)
			return wc->status;
	} while (now() < end);
	return -1;
}

/* Posts one request of `op` on a: `len` bytes at `laddr` of `lmr`,
 * `raddr` of `rmr`; its completion's status. */
static int post(struct pair *p, enum ibv_wr_opcode op, struct ibv_mr *lmr, void *laddr, size_t len,
		struct ibv_mr *rmr, void *raddr, uint64_t cmp_add, uint64_t swap)
{
	struct ibv_sge sge = { .addr = (uintptr_t)laddr, .length = len, .lkey = lmr->lkey };
	struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = op }, *bad;
	struct ibv_wc wc;

	if (op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		wr.wr.atomic.remote_addr = (uintptr_t)raddr;
		wr.wr.atomic.rkey = rmr->rkey;
		wr.wr.atomic.compare_add = cmp_add;
		wr.wr.atomic.swap = swap;
	} else if (rmr) {
		wr.wr.rdma.remote_addr = (uintptr_t)raddr;
		wr.wr.rdma.rkey = rmr->rkey;
	}
	if (ibv_post_send(p->a, &wr, &bad))
		return -2;
	return completion(p->ca, &wc);
}

static void fill(uint8_t *p, size_t len, unsigned int seed)
{
	for (size_t i = 0; i < len; i++)
		p[i] = (uint8_t)(i * 31 + seed);
}

static void caps(void)
{
	struct ibv_device_attr_ex a;
	const uint32_t rc = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ |
			    IBV_ODP_SUPPORT_ATOMIC | IBV_ODP_SUPPORT_SRQ_RECV;

	if (ibv_query_device_ex(ctx, NULL, &a))
		die("ibv_query_device_ex");
	CHECK("the device announces ODP for RC operations and receives and for UD sends",
	      (a.odp_caps.general_caps & IBV_ODP_SUPPORT) && (a.odp_caps.per_transport_caps.rc_odp_caps & rc) == rc &&
		      (a.odp_caps.per_transport_caps.ud_odp_caps & IBV_ODP_SUPPORT_SEND),
	      "general 0x%llx rc 0x%x ud 0x%x", (unsigned long long)a.odp_caps.general_caps,
	      a.odp_caps.per_transport_caps.rc_odp_caps, a.odp_caps.per_transport_caps.ud_odp_caps);
	CHECK("implicit ODP is not announced",
	      !(a.odp_caps.general_caps & IBV_ODP_SUPPORT_IMPLICIT), "general 0x%llx",
	      (unsigned long long)a.odp_caps.general_caps);
}

/* Registering on demand faults nothing in and pins nothing. */
static void registration(void)
{
	uint8_t *big = mmap(NULL, BIG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct ibv_mr *mr;
	long before, odp_growth, pin_growth;

	if (big == MAP_FAILED)
		die("mmap");
	before = resident_pages();
	mr = ibv_reg_mr(pd, big, BIG, ALL_ACCESS);
	odp_growth = resident_pages() - before;
	CHECK("64 MiB registered on demand", mr != NULL, "%s", strerror(errno));
	CHECK("registration on demand faults in nothing (resident pages grew by < 1 MiB)",
	      mr && odp_growth < 256, "grew by %ld pages", odp_growth);
	if (mr)
		ibv_dereg_mr(mr);
	before = resident_pages();
	mr = ibv_reg_mr(pd, big, BIG, ALL_ACCESS & ~IBV_ACCESS_ON_DEMAND);
	pin_growth = resident_pages() - before;
	CHECK("the same range pinned does fault in all of it (the measure works)",
	      mr && pin_growth >= BIG / 4096 - 256, "grew by %ld pages", pin_growth);
	if (mr)
		ibv_dereg_mr(mr);
	munmap(big, BIG);
}

/* The kernel keeps a word or two per page of a region on demand, touched
 * or not: a user's regions on demand cover at most as many pages as the
 * machine has memory (ENOMEM past that, never the OOM killer), and no
 * region is longer than max_mr_size (EINVAL). */
static void budget(void)
{
	size_t ram = (size_t)sysconf(_SC_PHYS_PAGES) * 4096, part = ram / 16 * 10;
	struct ibv_device_attr attr;
	struct ibv_mr *a, *b, *c;
	struct timespec t0, t1;
	double secs;
	/* Address space only: a region on demand needs no memory behind it. */
	uint8_t *va = mmap(NULL, 2 * ram + 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	if (va == MAP_FAILED)
		die("mmap (budget)");
	clock_gettime(CLOCK_MONOTONIC, &t0);
	errno = 0;
	a = ibv_reg_mr(pd, va, 2 * ram, ALL_ACCESS);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	secs = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
	CHECK("a region on demand twice the machine's memory is ENOMEM", !a && errno == ENOMEM, "%s (%s)",
	      a ? "registered" : "refused", strerror(errno));
	CHECK("...refused at once (under 1 s: nothing allocated for it first)", secs < 1.0, "%.3f s", secs);
	if (a)
		ibv_dereg_mr(a);
	a = ibv_reg_mr(pd, va, part, ALL_ACCESS);
	CHECK("a region on demand of 5/8 of the memory registers", a != NULL, "%s", strerror(errno));
	errno = 0;
	b = ibv_reg_mr(pd, va + part, part, ALL_ACCESS);
	CHECK("a second one of 5/8 (the user's regions on demand past the memory) is ENOMEM", !b && errno == ENOMEM,
	      "%s (%s)", b ? "registered" : "refused", strerror(errno));
	if (b)
		ibv_dereg_mr(b);
	if (a)
		ibv_dereg_mr(a);
	b = ibv_reg_mr(pd, va + part, part, ALL_ACCESS);
	CHECK("...and registers once the first is deregistered (the budget is given back)", b != NULL, "%s",
	      strerror(errno));
	if (b)
		ibv_dereg_mr(b);
	if (ibv_query_device(ctx, &attr))
		die("ibv_query_device");
	errno = 0;
	c = ibv_reg_mr(pd, va, attr.max_mr_size + 4096, ALL_ACCESS);
	CHECK("a region longer than max_mr_size is EINVAL", !c && errno == EINVAL, "max_mr_size %llu: %s (%s)",
	      (unsigned long long)attr.max_mr_size, c ? "registered" : "refused", strerror(errno));
	if (c)
		ibv_dereg_mr(c);
	munmap(va, 2 * ram + 4096);
}

/* RC traffic between regions on demand whose pages are dropped before
 * each round. */
static void rc_traffic(void)
{
	struct pair p = make_pair();
	uint8_t *a = shared_buf(LEN), *b = shared_buf(LEN);
	struct ibv_mr *ma = ibv_reg_mr(pd, a, LEN, ALL_ACCESS), *mb = ibv_reg_mr(pd, b, LEN, ALL_ACCESS);
	long faults0 = counter("odp_faults");
	int send_ok = 0, write_ok = 0, read_ok = 0, atomic_ok = 0, i;

	if (!ma || !mb)
		die("ibv_reg_mr (on demand)");
	for (i = 0; i < ROUNDS; i++) {
		size_t len = 65536 + i * 4096 + i;
		uint64_t *word = (uint64_t *)(b + LEN - 64);
		struct ibv_recv_wr rwr = { .wr_id = 2, .num_sge = 1 }, *rbad;
		struct ibv_sge rsge = { .addr = (uintptr_t)b, .length = LEN / 2, .lkey = mb->lkey };
		struct ibv_wc wc;

		/* SEND: a's data into b's receive buffer, both dropped. */
		fill(a, len, i);
		memset(b, 0, LEN / 2);
		drop_pages(a, LEN);
		drop_pages(b, LEN);
		rwr.sg_list = &rsge;
		if (ibv_post_recv(p.b, &rwr, &rbad))
			die("ibv_post_recv");
		if (post(&p, IBV_WR_SEND, ma, a, len, NULL, NULL, 0, 0) == IBV_WC_SUCCESS &&
		    completion(p.cb, &wc) == IBV_WC_SUCCESS && wc.byte_len == len && !memcmp(a, b, len))
			send_ok++;

		/* RDMA WRITE into the second half of b, dropped. */
		fill(a, len, i + 100);
		drop_pages(a, LEN);
		drop_pages(b, LEN);
		if (post(&p, IBV_WR_RDMA_WRITE, ma, a, len, mb, b + LEN / 2, 0, 0) == IBV_WC_SUCCESS &&
		    !memcmp(a, b + LEN / 2, len))
			write_ok++;

		/* RDMA READ of b's second half into a's second half. */
		memset(a + LEN / 2, 0, len);
		drop_pages(a, LEN);
		drop_pages(b, LEN);
		if (post(&p, IBV_WR_RDMA_READ, ma, a + LEN / 2, len, mb, b + LEN / 2, 0, 0) == IBV_WC_SUCCESS &&
		    !memcmp(a + LEN / 2, b + LEN / 2, len))
			read_ok++;

		/* Fetch-and-add and compare-and-swap on a word of b; the old
		 * value lands in a. */
		*word = 1000 + i;
		drop_pages(a, LEN);
		drop_pages(b, LEN);
		if (post(&p, IBV_WR_ATOMIC_FETCH_AND_ADD, ma, a + 8, 8, mb, word, 5, 0) == IBV_WC_SUCCESS &&
		    *(uint64_t *)(a + 8) == 1000 + (uint64_t)i && *word == 1005 + (uint64_t)i) {
			drop_pages(b, LEN);
			if (post(&p, IBV_WR_ATOMIC_CMP_AND_SWP, ma, a + 16, 8, mb, word, 1005 + i, 7) ==
				    IBV_WC_SUCCESS &&
			    *(uint64_t *)(a + 16) == 1005 + (uint64_t)i && *word == 7)
				atomic_ok++;
		}
	}
	CHECK("SEND between regions on demand, their pages dropped before each of 20 rounds: every byte",
	      send_ok == ROUNDS, "%d of %d rounds", send_ok, ROUNDS);
	CHECK("RDMA WRITE into a region on demand, pages dropped: every byte", write_ok == ROUNDS,
	      "%d of %d rounds", write_ok, ROUNDS);
	CHECK("RDMA READ from and into regions on demand, pages dropped: every byte", read_ok == ROUNDS,
	      "%d of %d rounds", read_ok, ROUNDS);
	CHECK("fetch-and-add and compare-and-swap on a region on demand, pages dropped", atomic_ok == ROUNDS,
	      "%d of %d rounds", atomic_ok, ROUNDS);
	CHECK("the device counted its faults (odp_faults)", counter("odp_faults") > faults0, "%ld -> %ld", faults0,
	      counter("odp_faults"));
	ibv_dereg_mr(ma);
	ibv_dereg_mr(mb);
	free_pair(&p);
	munmap(a, LEN);
	munmap(b, LEN);
}

/* A UD send from a region on demand whose pages were dropped. */
static void ud_send(void)
{
	struct ibv_cq *cq = ibv_create_cq(ctx, 32, NULL, NULL, 0);
	struct ibv_qp *s, *r;
	uint8_t *a = shared_buf(LEN), *b = malloc(8192);
	struct ibv_mr *ma, *mb;
	struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1 };
	struct ibv_ah *ah;
	struct ibv_sge ssge, rsge;
	struct ibv_send_wr wr = { .wr_id = 3, .num_sge = 1, .opcode = IBV_WR_SEND }, *bad;
	struct ibv_recv_wr rwr = { .wr_id = 4, .num_sge = 1 }, *rbad;
	struct ibv_wc wc;
	int ok = 0, i;

	if (!cq || !b)
		die("ibv_create_cq");
	s = make_qp(cq, IBV_QPT_UD);
	r = make_qp(cq, IBV_QPT_UD);
	if (tl_ud_rts(s, 0x11, 1) || tl_ud_rts(r, 0x11, 1))
		die("UD to RTS");
	ma = ibv_reg_mr(pd, a, LEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND);
	mb = ibv_reg_mr(pd, b, 8192, IBV_ACCESS_LOCAL_WRITE);
	aa.grh.dgid = gid;
	aa.grh.sgid_index = gid_index;
	aa.grh.hop_limit = 64;
	ah = ibv_create_ah(pd, &aa);
	if (!ma || !mb || !ah)
		die("UD set-up");
	ssge = (struct ibv_sge){ .addr = (uintptr_t)a, .length = 512, .lkey = ma->lkey };
	rsge = (struct ibv_sge){ .addr = (uintptr_t)b, .length = 8192, .lkey = mb->lkey };
	wr.sg_list = &ssge;
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = r->qp_num;
	wr.wr.ud.remote_qkey = 0x11;
	rwr.sg_list = &rsge;
	for (i = 0; i < 10; i++) {
		int got_send = 0, got_recv = 0;

		fill(a, 512, i);
		drop_pages(a, LEN);
		if (ibv_post_recv(r, &rwr, &rbad) || ibv_post_send(s, &wr, &bad))
			die("UD post");
		while ((!got_send || !got_recv) && completion(cq, &wc) == IBV_WC_SUCCESS) {
			got_send |= wc.wr_id == 3;
			got_recv |= wc.wr_id == 4 && wc.byte_len == 512 + 40;
		}
		if (got_send && got_recv && !memcmp(b + 40, a, 512))
			ok++;
	}
	CHECK("UD sends from a region on demand, pages dropped before each: every datagram", ok == 10, "%d of 10",
	      ok);
	ibv_destroy_ah(ah);
	ibv_destroy_qp(s);
	ibv_destroy_qp(r);
	ibv_destroy_cq(cq);
	ibv_dereg_mr(ma);
	ibv_dereg_mr(mb);
	munmap(a, LEN);
	free(b);
}

static void advise(void)
{
	uint8_t *m = mmap(NULL, 16 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct ibv_mr *mr, *ro, *pinned;
	struct ibv_sge sge;
	long before, growth;
	int r;

	if (m == MAP_FAILED)
		die("mmap");
	mr = ibv_reg_mr(pd, m, 8 << 20, ALL_ACCESS);
	ro = ibv_reg_mr(pd, m + (8 << 20), 4 << 20, IBV_ACCESS_ON_DEMAND);
	pinned = ibv_reg_mr(pd, m + (12 << 20), 4 << 20, IBV_ACCESS_LOCAL_WRITE);
	if (!mr || !ro || !pinned)
		die("ibv_reg_mr (advise)");
	sge = (struct ibv_sge){ .addr = (uintptr_t)m, .length = 4 << 20, .lkey = mr->lkey };
	before = resident_pages();
	r = ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH, &sge, 1);
	growth = resident_pages() - before;
	CHECK("ibv_advise_mr PREFETCH_WRITE (synchronous) faults 4 MiB in before it returns",
	      r == 0 && growth >= 1024 - 16, "ret %d (%s), resident grew by %ld pages", r, strerror(r), growth);
	sge.addr = (uintptr_t)m + (4 << 20);
	r = ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 1);
	CHECK("ibv_advise_mr PREFETCH (asynchronous) is accepted", r == 0, "ret %d (%s)", r, strerror(r));
	sge = (struct ibv_sge){ .addr = (uintptr_t)m + (12 << 20), .length = 4096, .lkey = pinned->lkey };
	r = ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, IBV_ADVISE_MR_FLAG_FLUSH, &sge, 1);
	CHECK("ibv_advise_mr of a region not on demand is EINVAL", r == EINVAL, "ret %d (%s)", r, strerror(r));
	sge = (struct ibv_sge){ .addr = (uintptr_t)m, .length = 4096, .lkey = mr->lkey ^ 0x100 };
	r = ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, IBV_ADVISE_MR_FLAG_FLUSH, &sge, 1);
	CHECK("ibv_advise_mr with a wrong key is EINVAL", r == EINVAL, "ret %d (%s)", r, strerror(r));
	sge = (struct ibv_sge){ .addr = (uintptr_t)m + (8 << 20), .length = 4096, .lkey = ro->lkey };
	r = ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH, &sge, 1);
	CHECK("ibv_advise_mr PREFETCH_WRITE of a region without local write is EPERM", r == EPERM, "ret %d (%s)", r,
	      strerror(r));
	sge = (struct ibv_sge){ .addr = (uintptr_t)m + (8 << 20) - 4096, .length = 8192, .lkey = mr->lkey };
	r = ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, IBV_ADVISE_MR_FLAG_FLUSH, &sge, 1);
	CHECK("ibv_advise_mr of a range past its region is EINVAL", r == EINVAL, "ret %d (%s)", r, strerror(r));
	ibv_dereg_mr(mr);
	ibv_dereg_mr(ro);
	ibv_dereg_mr(pinned);
	munmap(m, 16 << 20);
}

/* A region on demand whose memory is gone: the fault fails, the SEND
 * completes with a local protection error. */
static void unmapped(void)
{
	struct pair p = make_pair();
	uint8_t *a = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint8_t *b = shared_buf(LEN);
	struct ibv_mr *ma, *mb;
	struct ibv_recv_wr rwr = { .wr_id = 2, .num_sge = 1 }, *rbad;
	struct ibv_sge rsge;
	long failed0 = counter("odp_fault_failed");
	int st;

	if (a == MAP_FAILED)
		die("mmap");
	ma = ibv_reg_mr(pd, a, LEN, ALL_ACCESS);
	mb = ibv_reg_mr(pd, b, LEN, ALL_ACCESS);
	if (!ma || !mb)
		die("ibv_reg_mr (unmapped)");
	rsge = (struct ibv_sge){ .addr = (uintptr_t)b, .length = LEN, .lkey = mb->lkey };
	rwr.sg_list = &rsge;
	if (ibv_post_recv(p.b, &rwr, &rbad))
		die("ibv_post_recv");
	munmap(a, LEN);
	st = post(&p, IBV_WR_SEND, ma, a, 4096, NULL, NULL, 0, 0);
	CHECK("a SEND from a region on demand whose memory was unmapped completes with IBV_WC_LOC_PROT_ERR",
	      st == IBV_WC_LOC_PROT_ERR, "status %d (%s)", st, st >= 0 ? ibv_wc_status_str(st) : "none");
	CHECK("the failed fault is counted (odp_fault_failed)", counter("odp_fault_failed") > failed0,
	      "%ld -> %ld", failed0, counter("odp_fault_failed"));
	ibv_dereg_mr(ma);
	ibv_dereg_mr(mb);
	free_pair(&p);
	munmap(b, LEN);
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: odp DEVICE GID_INDEX\n");
		return 2;
	}
	dev_name = argv[1];
	gid_index = atoi(argv[2]);
	ctx = tl_open_device(argv[1]);
	if (!ctx)
		die(argv[1]);
	if (ibv_query_port(ctx, 1, &port) || ibv_query_gid(ctx, 1, gid_index, &gid))
		die("ibv_query_port");
	pd = ibv_alloc_pd(ctx);
	if (!pd)
		die("ibv_alloc_pd");
	caps();
	registration();
	budget();
	rc_traffic();
	ud_send();
	advise();
	unmapped();
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	return failures ? 1 : 0;
}
