// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * limits: a device's advertised maximums, reached and passed (issue 10).
 *
 *   limits DEV GID_INDEX [--qps N] [--msgs M] [--msg BYTES] [--no-limits]
 *
 * 1. Creates PDs, CQs, MRs, AHs and RC QPs one kind at a time until the
 *    device refuses: the count reached must be the advertised maximum less
 *    what the kernel itself holds (the MAD layer's PD, CQ and GSI QP; at
 *    most 8 of each), and the refusal must be ENOMEM or EINVAL (never a
 *    crash, never success past the maximum). Also: a CQ of max_cqe + 1
 *    entries, a QP with max_qp_wr + 1 work requests or max_sge + 1 SGEs,
 *    each refused with EINVAL or ENOMEM. Everything is freed again.
 *    Then work requests at max_sge SGEs and max_inline_data bytes:
 *    a SEND gathered and scattered over max_sge pieces, an RDMA READ
 *    scattered over max_sge, a SEND of max_inline_data inline bytes, one
 *    more refused. (Skipped with --no-limits.)
 * 2. Connects --qps RC QPs (default 1000; pairs on the same device, through
 *    its own address) and has every QP send --msgs messages (default 4) of
 *    --msg bytes (default 4 KiB) with a pattern of its own to its peer at
 *    once; every received byte is checked. The tables grow as the QPs are
 *    made: 16k QPs (tests/guest/limits.sh) take the QP table from 2048
 *    slots to 32768.
 * Prints one "ok - NAME" or "not ok - NAME" line per check; exits non-zero
 * when any failed.
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int fails;
static void result(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void result(int ok, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	printf("%s - ", ok ? "ok" : "not ok");
	vprintf(fmt, ap);
	printf("\n");
	va_end(ap);
	fflush(stdout);
	if (!ok)
		fails++;
}
static void die(const char *what)
{
	fprintf(stderr, "limits: %s failed: %s\n", what, strerror(errno));
	exit(1);
}

/* at most, of each kind, held by the kernel's own users (the MAD layer's
 * PD, CQ and GSI QP) or reserved (QPNs below 16) */
#define KERNEL_HELD 16
static int msgs = 4;
static int msg_len = 4096;

static struct ibv_context *ctx;
static struct ibv_device_attr da;
static struct ibv_port_attr pa;
static union ibv_gid gid;
static int gidx;

/* reached NAME COUNT MAX ERR: the count and the refusal of one kind */
static void reached(const char *name, long count, long max, int err)
{
	result(count <= max && count >= max - KERNEL_HELD, "%s: %ld created, advertised %ld", name, count, max);
	result(err == ENOMEM || err == EINVAL, "%s: one past the maximum refused with %s", name,
	       err == ENOMEM ? "ENOMEM" : err == EINVAL ? "EINVAL" : strerror(err));
}

static struct ibv_qp *rc_qp(struct ibv_pd *pd, struct ibv_cq *scq, struct ibv_cq *rcq, uint32_t wr, uint32_t sge)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = scq, .recv_cq = rcq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = wr, .max_recv_wr = wr, .max_send_sge = sge, .max_recv_sge = sge },
	};
	return ibv_create_qp(pd, &ia);
}

/* The objects the kind callbacks create in (set up by limits()). */
static struct ibv_pd *pd0;
static struct ibv_cq *cq0;
static char buf[4096] __attribute__((aligned(4096)));
static struct ibv_ah_attr ah_attr;

static void *make_pd(void) { return ibv_alloc_pd(ctx); }
static void drop_pd(void *o) { ibv_dealloc_pd(o); }
static void *make_cq(void) { return ibv_create_cq(ctx, 1, NULL, NULL, 0); }
static void drop_cq(void *o) { ibv_destroy_cq(o); }
static void *make_mr(void) { return ibv_reg_mr(pd0, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE); }
static void drop_mr(void *o) { ibv_dereg_mr(o); }
static void *make_ah(void) { return ibv_create_ah(pd0, &ah_attr); }
static void drop_ah(void *o) { ibv_destroy_ah(o); }
static void *make_qp(void) { return rc_qp(pd0, cq0, cq0, 1, 1); }
static void drop_qp(void *o) { ibv_destroy_qp(o); }

/* to_max NAME MAX HELD MAKE DROP: creates objects until the device refuses
 * (at most MAX + 1), checks the count (HELD: already held by this program)
 * and the refusal, and frees them */
static void to_max(const char *name, long max, long held, void *(*make)(void), void (*drop)(void *))
{
	void **objs = calloc(max + 2, sizeof(*objs));
	long n;
	int err = 0;
	if (!objs)
		die("calloc");
	for (n = 0; n <= max; n++) {
		objs[n] = make();
		if (!objs[n]) {
			err = errno;
			break;
		}
	}
	reached(name, n + held, max, err);
	while (n-- > 0)
		drop(objs[n]);
	free(objs);
}

/* refused WHAT OBJ: OBJ (created one past a maximum) must not exist, with
 * EINVAL or ENOMEM; freed if it does */
static void refused(const char *what, void *obj, void (*drop)(void *))
{
	int err = errno;
	result(!obj && (err == EINVAL || err == ENOMEM), "%s refused (%s)", what, obj ? "created" : strerror(err));
	if (obj)
		drop(obj);
}

static void limits(void)
{
	char what[96];
	pd0 = ibv_alloc_pd(ctx);
	cq0 = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	if (!pd0 || !cq0)
		die("ibv_alloc_pd/ibv_create_cq");
	ah_attr = (struct ibv_ah_attr){
		.is_global = 1, .port_num = 1,
		.grh = { .dgid = gid, .sgid_index = (uint8_t)gidx, .hop_limit = 64 },
	};
	to_max("PD", da.max_pd, 1 /* pd0 */, make_pd, drop_pd);
	to_max("CQ", da.max_cq, 1 /* cq0 */, make_cq, drop_cq);
	to_max("MR", da.max_mr, 0, make_mr, drop_mr);
	to_max("AH", da.max_ah, 0, make_ah, drop_ah);
	to_max("QP", da.max_qp, 0, make_qp, drop_qp);

	snprintf(what, sizeof(what), "CQ of max_cqe + 1 (%d) entries", da.max_cqe + 1);
	errno = 0;
	refused(what, ibv_create_cq(ctx, da.max_cqe + 1, NULL, NULL, 0), drop_cq);
	snprintf(what, sizeof(what), "QP with max_qp_wr + 1 (%d) work requests", da.max_qp_wr + 1);
	errno = 0;
	refused(what, rc_qp(pd0, cq0, cq0, da.max_qp_wr + 1, 1), drop_qp);
	snprintf(what, sizeof(what), "QP with max_sge + 1 (%d) SGEs", da.max_sge + 1);
	errno = 0;
	refused(what, rc_qp(pd0, cq0, cq0, 1, da.max_sge + 1), drop_qp);
	ibv_destroy_cq(cq0);
	ibv_dealloc_pd(pd0);
}

static void to_rts(struct ibv_qp *qp, uint32_t dest, uint32_t rq_psn, uint32_t sq_psn)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT, .port_num = 1,
		.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ,
	};
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		die("ibv_modify_qp to INIT");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = pa.active_mtu;
	a.dest_qp_num = dest;
	a.rq_psn = rq_psn;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 1;
	a.ah_attr.is_global = 1;
	a.ah_attr.port_num = 1;
	a.ah_attr.grh.dgid = gid;
	a.ah_attr.grh.sgid_index = (uint8_t)gidx;
	a.ah_attr.grh.hop_limit = 64;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				       IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		die("ibv_modify_qp to RTR");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = sq_psn;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				       IBV_QP_MAX_QP_RD_ATOMIC))
		die("ibv_modify_qp to RTS");
}

/* wait_one CQ: one completion, which must be SUCCESS */
static int wait_one(struct ibv_cq *cq, struct ibv_wc *wc)
{
	for (long spin = 0; spin < 200000000L; spin++) {
		int k = ibv_poll_cq(cq, 1, wc);
		if (k < 0)
			return 0;
		if (k == 1)
			return wc->status == IBV_WC_SUCCESS;
	}
	return 0;
}

/* 3. Work requests at the SGE and inline maximums (issue 20: rdma_rxe's 32
 * and 512): a SEND gathered from max_sge pieces of different lengths into a
 * receive scattered over max_sge other pieces, an RDMA READ scattered over
 * max_sge pieces, and a SEND of max_inline_data inline bytes from an
 * unregistered buffer; every byte where it belongs. */
static void at_max_sge(void)
{
	int n = da.max_sge;
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	size_t len = 1 << 16;
	uint8_t *b = aligned_alloc(4096, 4 * len);
	if (!pd || !cq || !b || n < 1)
		die("setup for max_sge");
	memset(b, 0, 4 * len);
	struct ibv_mr *mr = ibv_reg_mr(pd, b, 4 * len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = (uint32_t)n, .max_recv_sge = (uint32_t)n,
			 .max_inline_data = 512 },
	};
	struct ibv_qp *q0 = mr ? ibv_create_qp(pd, &ia) : NULL;
	uint32_t inl = ia.cap.max_inline_data;
	struct ibv_qp *q1 = q0 ? ibv_create_qp(pd, &ia) : NULL;
	result(q0 && q1 && inl >= 512, "RC QPs with max_sge %d SGEs and 512 inline bytes created (inline %u)", n, inl);
	if (!q0 || !q1)
		return;
	to_rts(q0, q1->qp_num, 77, 99);
	to_rts(q1, q0->qp_num, 99, 77);
	/* piece i: 13 + 7 i bytes; the source at b, the receive at b + len
	 * (in the reverse order, with gaps), the READ's target at b + 2 len */
	struct ibv_sge src[64], dst[64], rd[64];
	size_t total = 0, off_s = 0, off_d = 0, off_r = 0;
	for (int i = 0; i < n && i < 64; i++) {
		uint32_t l = 13 + 7 * (uint32_t)i;
		src[i] = (struct ibv_sge){ (uintptr_t)(b + off_s), l, mr->lkey };
		off_s += l + 5;
		total += l;
	}
	for (size_t k = 0; k < off_s; k++)
		b[k] = (uint8_t)(k * 29 + 3);
	for (int i = 0; i < n && i < 64; i++) {
		uint32_t l = 13 + 7 * (uint32_t)(n - 1 - i);
		dst[i] = (struct ibv_sge){ (uintptr_t)(b + len + off_d), l, mr->lkey };
		rd[i] = (struct ibv_sge){ (uintptr_t)(b + 2 * len + off_r), l, mr->lkey };
		off_d += l + 3;
		off_r += l + 9;
	}
	/* the bytes the gather list names, in order */
	uint8_t *want = malloc(total);
	size_t w = 0;
	for (int i = 0; i < n; i++)
		for (uint32_t k = 0; k < src[i].length; k++)
			want[w++] = *(uint8_t *)(uintptr_t)(src[i].addr + k);
	struct ibv_recv_wr rwr = { .wr_id = 1, .sg_list = dst, .num_sge = n }, *rbad;
	struct ibv_send_wr swr = { .wr_id = 2, .sg_list = src, .num_sge = n, .opcode = IBV_WR_SEND,
				   .send_flags = IBV_SEND_SIGNALED }, *sbad;
	struct ibv_wc wc;
	int ok = !ibv_post_recv(q1, &rwr, &rbad) && !ibv_post_send(q0, &swr, &sbad) && wait_one(cq, &wc) &&
		 wait_one(cq, &wc);
	size_t bad = 0;
	w = 0;
	for (int i = 0; i < n; i++)
		for (uint32_t k = 0; k < dst[i].length; k++)
			bad += *(uint8_t *)(uintptr_t)(dst[i].addr + k) != want[w++];
	result(ok && !bad, "SEND of %zu bytes gathered from %d SGEs, received into %d SGEs: every byte in place (%zu wrong)",
	       total, n, n, bad);
	/* READ q1's receive pieces back (one contiguous remote range: the
	 * first piece's start, as many bytes as the list) into n pieces */
	struct ibv_send_wr rdwr = { .wr_id = 3, .sg_list = rd, .num_sge = n, .opcode = IBV_WR_RDMA_READ,
				    .send_flags = IBV_SEND_SIGNALED,
				    .wr.rdma = { .remote_addr = (uintptr_t)b, .rkey = mr->rkey } }, *rdbad;
	ok = !ibv_post_send(q0, &rdwr, &rdbad) && wait_one(cq, &wc);
	bad = 0;
	w = 0;
	for (int i = 0; i < n; i++)
		for (uint32_t k = 0; k < rd[i].length; k++, w++)
			bad += *(uint8_t *)(uintptr_t)(rd[i].addr + k) != b[w];
	result(ok && !bad, "RDMA READ of %zu bytes scattered over %d SGEs: every byte in place (%zu wrong)", total, n,
	       bad);
	/* max_inline_data bytes inline, from a stack buffer changed right
	 * after the post */
	uint8_t stack[2048];
	uint32_t ni = inl < sizeof(stack) ? inl : sizeof(stack);
	for (uint32_t k = 0; k < ni; k++)
		stack[k] = (uint8_t)(k * 13 + 1);
	struct ibv_sge one = { (uintptr_t)(b + 3 * len), 4096, mr->lkey }, isge = { (uintptr_t)stack, ni, 0 };
	struct ibv_recv_wr r2 = { .wr_id = 4, .sg_list = &one, .num_sge = 1 };
	struct ibv_send_wr s2 = { .wr_id = 5, .sg_list = &isge, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE };
	ok = !ibv_post_recv(q1, &r2, &rbad) && !ibv_post_send(q0, &s2, &sbad);
	memset(stack, 0xee, sizeof(stack));
	ok = ok && wait_one(cq, &wc) && wait_one(cq, &wc);
	bad = 0;
	for (uint32_t k = 0; k < ni; k++)
		bad += b[3 * len + k] != (uint8_t)(k * 13 + 1);
	result(ok && !bad && ni >= 512, "RC SEND of %u inline bytes: every byte in place (%zu wrong)", ni, bad);
	isge.length = inl + 1;
	result(ibv_post_send(q0, &s2, &sbad) == EINVAL, "RC SEND of max_inline_data + 1 (%u) inline bytes refused with EINVAL",
	       inl + 1);
	free(want);
	ibv_destroy_qp(q0);
	ibv_destroy_qp(q1);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	free(b);
}

static uint8_t pattern(int qp, int msg, int i) { return (uint8_t)(qp * 131 + msg * 17 + i * 7 + (i >> 8)); }

static void many(int nqp)
{
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	int cqe = nqp * msgs;
	if (cqe > da.max_cqe)
		cqe = da.max_cqe;
	struct ibv_cq *scq = ibv_create_cq(ctx, cqe, NULL, NULL, 0);
	struct ibv_cq *rcq = ibv_create_cq(ctx, cqe, NULL, NULL, 0);
	size_t len = (size_t)nqp * msgs * msg_len * 2; /* send half, receive half */
	uint8_t *buf = aligned_alloc(4096, len);
	if (!pd || !scq || !rcq || !buf)
		die("setup for many QPs");
	memset(buf, 0, len);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, len, IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		die("ibv_reg_mr");
	struct ibv_qp **qp = calloc(nqp, sizeof(*qp));
	int made = 0;
	for (int i = 0; i < nqp; i++) {
		qp[i] = rc_qp(pd, scq, rcq, msgs, 1);
		if (!qp[i])
			break;
		made++;
	}
	result(made == nqp, "%d RC QPs created (%d asked)", made, nqp);
	if (made != nqp)
		return;
	/* PSNs: QP i sends from 1000 + 7i, its peer expects exactly that */
	for (int i = 0; i < nqp; i++)
		to_rts(qp[i], qp[i ^ 1]->qp_num, 1000 + (uint32_t)(i ^ 1) * 7, 1000 + (uint32_t)i * 7);
	uint8_t *sbuf = buf, *rbuf = buf + len / 2;
	for (int i = 0; i < nqp; i++) {
		for (int m = 0; m < msgs; m++) {
			size_t off = ((size_t)i * msgs + m) * msg_len;
			struct ibv_sge sge = { (uintptr_t)(rbuf + off), msg_len, mr->lkey };
			struct ibv_recv_wr wr = { .wr_id = (uint64_t)i << 8 | m, .sg_list = &sge, .num_sge = 1 }, *bad;
			if (ibv_post_recv(qp[i], &wr, &bad))
				die("ibv_post_recv");
			for (int k = 0; k < msg_len; k++)
				sbuf[off + k] = pattern(i, m, k);
		}
	}
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int m = 0; m < msgs; m++) {
		for (int i = 0; i < nqp; i++) {
			size_t off = ((size_t)i * msgs + m) * msg_len;
			struct ibv_sge sge = { (uintptr_t)(sbuf + off), msg_len, mr->lkey };
			struct ibv_send_wr wr = { .wr_id = (uint64_t)i << 8 | m, .sg_list = &sge, .num_sge = 1,
						  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;
			if (ibv_post_send(qp[i], &wr, &bad))
				die("ibv_post_send");
		}
	}
	long want = (long)nqp * msgs, sdone = 0, rdone = 0, bad_wc = 0;
	struct ibv_wc wc[64];
	for (;;) {
		int k = ibv_poll_cq(scq, 64, wc);
		for (int j = 0; j < k; j++)
			bad_wc += wc[j].status != IBV_WC_SUCCESS;
		sdone += k > 0 ? k : 0;
		k = ibv_poll_cq(rcq, 64, wc);
		for (int j = 0; j < k; j++)
			bad_wc += wc[j].status != IBV_WC_SUCCESS || wc[j].byte_len != (uint32_t)msg_len;
		rdone += k > 0 ? k : 0;
		if (sdone >= want && rdone >= want)
			break;
		clock_gettime(CLOCK_MONOTONIC, &t1);
		if (t1.tv_sec - t0.tv_sec > 120) {
			fprintf(stderr, "limits: after 120 s: %ld of %ld sends, %ld of %ld receives complete\n", sdone,
				want, rdone, want);
			break;
		}
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	result(sdone == want && rdone == want && !bad_wc, "%d RC QPs at once: %ld sends and %ld receives of %d bytes, all SUCCESS (%.2f s)",
	       nqp, sdone, rdone, msg_len, (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);
	/* QP i's messages land in its peer's receive buffers */
	long wrong = 0;
	for (int i = 0; i < nqp; i++)
		for (int m = 0; m < msgs; m++) {
			size_t off = ((size_t)(i ^ 1) * msgs + m) * msg_len;
			for (int k = 0; k < msg_len; k++)
				wrong += rbuf[off + k] != pattern(i, m, k);
		}
	result(wrong == 0, "%d RC QPs at once: every received byte verified (%ld wrong)", nqp, wrong);
	for (int i = 0; i < nqp; i++)
		ibv_destroy_qp(qp[i]);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(scq);
	ibv_destroy_cq(rcq);
	ibv_dealloc_pd(pd);
	free(buf);
	free(qp);
}

int main(int argc, char **argv)
{
	int nqp = 1000, skip_limits = 0;
	if (argc < 3) {
		fprintf(stderr, "usage: limits DEV GID_INDEX [--qps N] [--msgs M] [--msg BYTES] [--no-limits]\n");
		return 2;
	}
	for (int a = 3; a < argc; a++) {
		if (!strcmp(argv[a], "--no-limits"))
			skip_limits = 1;
		else if (a + 1 < argc && !strcmp(argv[a], "--qps"))
			nqp = atoi(argv[++a]) & ~1;
		else if (a + 1 < argc && !strcmp(argv[a], "--msgs"))
			msgs = atoi(argv[++a]);
		else if (a + 1 < argc && !strcmp(argv[a], "--msg"))
			msg_len = atoi(argv[++a]);
		else {
			fprintf(stderr, "limits: unknown argument %s\n", argv[a]);
			return 2;
		}
	}
	if (nqp < 2 || msgs < 1 || msgs > 255 || msg_len < 1) {
		fprintf(stderr, "limits: --qps >= 2, --msgs 1..255, --msg >= 1\n");
		return 2;
	}
	gidx = atoi(argv[2]);
	struct ibv_device **list = ibv_get_device_list(NULL);
	for (int i = 0; list && list[i]; i++)
		if (!strcmp(ibv_get_device_name(list[i]), argv[1]))
			ctx = ibv_open_device(list[i]);
	if (!ctx)
		die("ibv_open_device");
	if (ibv_query_device(ctx, &da) || ibv_query_port(ctx, 1, &pa) || ibv_query_gid(ctx, 1, gidx, &gid))
		die("ibv_query_device/port/gid");
	printf("max_pd %d max_cq %d max_cqe %d max_mr %d max_ah %d max_qp %d max_qp_wr %d max_sge %d\n", da.max_pd,
	       da.max_cq, da.max_cqe, da.max_mr, da.max_ah, da.max_qp, da.max_qp_wr, da.max_sge);
	if (!skip_limits) {
		limits();
		at_max_sge();
	}
	many(nqp);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return fails ? 1 : 0;
}
